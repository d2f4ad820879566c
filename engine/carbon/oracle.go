package carbon

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrSearchTooLarge: the exhaustive oracle search exceeded its node budget.
var ErrSearchTooLarge = errors.New("carbon: oracle search too large")

// oracleNodeBudget bounds the exhaustive search of Oracle for interruptible
// jobs with a minimum slot longer than one step.
const oracleNodeBudget = 20_000_000

// Oracle is the best schedule in hindsight: job placed on the real trace,
// by exhaustive search, independently of Plan's algorithms.
//
//   - non-interruptible: every contiguous window is scored;
//   - interruptible, one-step minimum slot: every step is feasible on its
//     own, so the n cheapest steps (earliest on ties) are optimal;
//   - interruptible, longer minimum slot: depth-first enumeration of all
//     run layouts (run start, run length ≥ min slot, gap ≥ 1 step) with a
//     lower-bound prune. This is exponential in the worst case and meant
//     for tests and short windows; it fails with ErrSearchTooLarge beyond a
//     fixed node budget.
func Oracle(trace *Series, job Job) (Schedule, error) {
	w, err := jobWindow(trace, job)
	if err != nil {
		return Schedule{}, fmt.Errorf("oracle: %w", err)
	}
	v := trace.Values
	switch {
	case !job.Interruptible:
		best, bestSum := -1, math.Inf(1)
		for s := w.a; s+w.n <= w.b; s++ {
			var sum float64
			for i := s; i < s+w.n; i++ {
				sum += v[i]
			}
			if sum < bestSum {
				best, bestSum = s, sum
			}
		}
		chosen := make([]int, w.n)
		for i := range chosen {
			chosen[i] = best + i
		}
		return schedule(trace, w, chosen), nil
	case w.mm == 1:
		order := make([]int, 0, w.b-w.a)
		for i := w.a; i < w.b; i++ {
			order = append(order, i)
		}
		slices.SortStableFunc(order, func(x, y int) int {
			switch {
			case v[x] < v[y]:
				return -1
			case v[x] > v[y]:
				return 1
			}
			return x - y
		})
		chosen := order[:w.n]
		slices.Sort(chosen)
		return schedule(trace, w, chosen), nil
	}
	o := &runSearch{v: v, w: w, best: math.Inf(1)}
	o.minFrom = make([]float64, w.b+1)
	o.minFrom[w.b] = math.Inf(1)
	for i := w.b - 1; i >= w.a; i-- {
		o.minFrom[i] = math.Min(v[i], o.minFrom[i+1])
	}
	o.search(w.a, 0, 0, nil)
	if o.nodes > oracleNodeBudget {
		return Schedule{}, fmt.Errorf("oracle: %w: more than %d nodes for %d of %d steps (min run %d)",
			ErrSearchTooLarge, oracleNodeBudget, w.n, w.b-w.a, w.mm)
	}
	return schedule(trace, w, o.bestSet), nil
}

type runSearch struct {
	v       []float64
	w       window
	minFrom []float64
	nodes   int
	best    float64
	bestSet []int
}

// search places the next run at or after position from, with k steps and
// cost so far; cur is the chosen set so far.
func (o *runSearch) search(from, k int, cost float64, cur []int) {
	o.nodes++
	if o.nodes > oracleNodeBudget {
		return
	}
	rem := o.w.n - k
	if rem == 0 {
		if cost < o.best {
			o.best, o.bestSet = cost, slices.Clone(cur)
		}
		return
	}
	if from >= o.w.b || cost+float64(rem)*o.minFrom[from] >= o.best {
		return
	}
	for s := from; s+o.w.mm <= o.w.b; s++ {
		if cost+float64(rem)*o.minFrom[s] >= o.best {
			break // minFrom only grows with s
		}
		c := cost
		for l := 1; l <= rem && s+l <= o.w.b; l++ {
			c += o.v[s+l-1]
			cur = append(cur, s+l-1)
			if l >= o.w.mm && (l == rem || rem-l >= o.w.mm) {
				o.search(s+l+1, k+l, c, cur)
			}
		}
		cur = cur[:len(cur)-min(rem, o.w.b-s)]
	}
}

// Result compares a forecast-driven plan with running now and with the
// oracle, all measured on the real trace.
type Result struct {
	BaselineGPerKWh float64 // run now, on the trace
	PlannedGPerKWh  float64 // what the plan expected, on the forecast
	RealizedGPerKWh float64 // the planned slots, on the trace
	OracleGPerKWh   float64 // best schedule in hindsight, on the trace
	// SavingsPct is 100*(Baseline-Realized)/Baseline; OracleSavingsPct the
	// same for the oracle (both 0 when the baseline is 0).
	SavingsPct       float64
	OracleSavingsPct float64
	Slots            []Slot
}

// Evaluate plans job with forecaster (queried at job.Start for the horizon
// up to job.Deadline) and measures the result on trace. Realized intensity
// is the time-weighted mean of trace over the planned slots, so forecasts
// on a different step than the trace are allowed.
func Evaluate(trace *Series, fc Forecaster, job Job) (Result, error) {
	f, err := fc.Forecast(job.Start, job.Deadline.Sub(job.Start))
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: forecast: %w", err)
	}
	plan, err := Plan(f, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	orc, err := Oracle(trace, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	var sum float64
	var dur time.Duration
	for _, s := range plan.Slots {
		m, err := trace.Mean(s.Start, s.End)
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: realized: %w", err)
		}
		sum += m * float64(s.End.Sub(s.Start))
		dur += s.End.Sub(s.Start)
	}
	res := Result{
		BaselineGPerKWh: orc.BaselineGPerKWh,
		PlannedGPerKWh:  plan.ExpectedGPerKWh,
		RealizedGPerKWh: sum / float64(dur),
		OracleGPerKWh:   orc.ExpectedGPerKWh,
		Slots:           plan.Slots,
	}
	if b := res.BaselineGPerKWh; b > 0 {
		res.SavingsPct = 100 * (b - res.RealizedGPerKWh) / b
		res.OracleSavingsPct = 100 * (b - res.OracleGPerKWh) / b
	}
	return res, nil
}
