package carbon

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Oracle is the best schedule in hindsight: job placed on the real trace.
//
//   - non-interruptible: every contiguous window is scored;
//   - interruptible, one-step minimum slot: every step is feasible on its
//     own, so the n cheapest steps (earliest on ties) are optimal (unless a
//     run begun within the step before Start must go on);
//   - interruptible, longer minimum slot: the exact dynamic program Plan
//     uses (every run at least MinSlot, the last one included), on the
//     trace; the tests check it against exhaustive searches.
//
// It fails only for a job that does not fit the trace, or (ErrSearchTooLarge)
// for a window of years on a fine grid.
func Oracle(trace *Series, job Job) (Schedule, error) {
	w, err := jobWindow(trace, job)
	if err != nil {
		return Schedule{}, fmt.Errorf("oracle: %w", err)
	}
	v := trace.Values
	switch {
	case !job.Interruptible:
		return schedule(trace, w, contiguous(v, w)), nil
	case w.mm == 1 && (!w.running || w.r0 >= 1):
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
	chosen, err := planInterruptible(v[w.a:w.b], w, w.a)
	if err != nil {
		return Schedule{}, fmt.Errorf("oracle: %w", err)
	}
	return schedule(trace, w, chosen), nil
}

// hindsight is the oracle of job on trace for an evaluation. A job that
// does not fit the trace fails (err); an oracle too large to compute does
// not fail the evaluation: orcErr says why, the oracle's intensity is NaN
// and the run-now baseline is computed all the same.
func hindsight(trace *Series, job Job) (orc Schedule, orcErr, err error) {
	orc, err = Oracle(trace, job)
	if err == nil || !errors.Is(err, ErrSearchTooLarge) {
		return orc, nil, err
	}
	w, werr := jobWindow(trace, job)
	if werr != nil {
		return Schedule{}, nil, werr
	}
	var base float64
	for i := w.a; i < w.a+w.n; i++ {
		base += trace.Values[i]
	}
	return Schedule{ExpectedGPerKWh: math.NaN(), BaselineGPerKWh: base / float64(w.n)}, err, nil
}

// Result compares a forecast-driven plan with running now and with the
// oracle, all measured on the real trace.
type Result struct {
	BaselineGPerKWh float64 // run now, on the trace
	PlannedGPerKWh  float64 // what the plan expected, on the forecast
	RealizedGPerKWh float64 // the planned slots, on the trace
	// OracleGPerKWh is the best schedule in hindsight, on the trace (NaN
	// when OracleErr is set).
	OracleGPerKWh float64
	// SavingsPct is 100*(Baseline-Realized)/Baseline; OracleSavingsPct the
	// same for the oracle (both 0 when the baseline is 0, and 0 when the
	// two intensities differ by summation noise only).
	SavingsPct       float64
	OracleSavingsPct float64
	Slots            []Slot
	// OracleErr says why the oracle was not computed ([ErrSearchTooLarge]);
	// the rest of the result stands.
	OracleErr error
}

// Evaluate plans job with forecaster (queried at job.Start for the horizon
// up to job.Deadline) and measures the result on trace. Realized intensity
// is the time-weighted mean of trace over the planned slots, so forecasts
// on a different step than the trace are allowed. The slots keep the
// forecast's mean intensity.
func Evaluate(trace *Series, fc Forecaster, job Job) (Result, error) {
	f, err := fc.Forecast(job.Start, job.Deadline.Sub(job.Start))
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: forecast: %w", err)
	}
	plan, err := Plan(f, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	orc, orcErr, err := hindsight(trace, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	return result(trace, orc, orcErr, plan.ExpectedGPerKWh, plan.Slots, false)
}

// result prices slots on trace and compares them with the baseline and
// the oracle; with traceMeans each slot's MeanIntensity becomes the
// trace's.
func result(trace *Series, orc Schedule, orcErr error, planned float64, slots []Slot, traceMeans bool) (Result, error) {
	var sum float64
	var dur time.Duration
	for i, s := range slots {
		m, err := trace.Mean(s.Start, s.End)
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: realized: %w", err)
		}
		if traceMeans {
			slots[i].MeanIntensity = m
		}
		sum += m * float64(s.End.Sub(s.Start))
		dur += s.End.Sub(s.Start)
	}
	res := Result{
		BaselineGPerKWh: orc.BaselineGPerKWh,
		PlannedGPerKWh:  planned,
		RealizedGPerKWh: sum / float64(dur),
		OracleGPerKWh:   orc.ExpectedGPerKWh,
		Slots:           slots,
		OracleErr:       orcErr,
	}
	res.SavingsPct = savings(res.BaselineGPerKWh, res.RealizedGPerKWh)
	res.OracleSavingsPct = savings(res.BaselineGPerKWh, res.OracleGPerKWh)
	return res, nil
}

// savings is 100·(base−x)/base: 0 for a zero baseline, or where x and base
// differ by summation noise only (the same steps summed in another order),
// NaN for a NaN x.
func savings(base, x float64) float64 {
	if base <= 0 || math.Abs(base-x) <= 1e-9*base {
		return 0
	}
	return 100 * (base - x) / base
}
