package carbon

import (
	"errors"
	"math"
	"slices"
)

// errSearchBudget: searchOracle gave up (more than searchBudget nodes).
var errSearchBudget = errors.New("exhaustive search over budget")

// searchBudget bounds searchOracle.
const searchBudget = 20_000_000

// searchOracle is the oracle for an interruptible job by exhaustive search,
// independently of Plan's dynamic program (the Oracle before it shared
// it): depth-first enumeration of all run layouts (run start, run length ≥
// the min slot, gap ≥ 1 step) with a lower-bound prune. It returns the
// least mean intensity of the job's steps, and fails with errSearchBudget
// beyond a fixed node budget. A job that is Running is not supported.
func searchOracle(trace *Series, job Job) (float64, error) {
	w, err := jobWindow(trace, job)
	if err != nil {
		return 0, err
	}
	o := &runSearch{v: trace.Values, w: w, best: math.Inf(1)}
	o.minFrom = make([]float64, w.b+1)
	o.minFrom[w.b] = math.Inf(1)
	for i := w.b - 1; i >= w.a; i-- {
		o.minFrom[i] = math.Min(o.v[i], o.minFrom[i+1])
	}
	o.search(w.a, 0, 0, nil)
	if o.nodes > searchBudget {
		return 0, errSearchBudget
	}
	return o.best / float64(w.n), nil
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
	if o.nodes > searchBudget {
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
