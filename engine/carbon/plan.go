package carbon

import (
	"errors"
	"fmt"
	"math"
	"time"
)

var (
	// ErrDeadlineTooShort: the job cannot finish its work before the
	// deadline (after aligning Start up and Deadline down to the step grid).
	ErrDeadlineTooShort = errors.New("carbon: deadline too short for the work")
	// ErrInvalidJob: a Job field is out of range.
	ErrInvalidJob = errors.New("carbon: invalid job")
)

// Job is a unit of work to place in time.
type Job struct {
	// Work is the run time needed. It is rounded up to whole steps of the
	// series it is planned on.
	Work time.Duration
	// Deadline is when the work must be done (exclusive).
	Deadline time.Time
	// Start is the earliest start ("now"); rounded up to the step grid.
	Start time.Time
	// Interruptible jobs may be split into several slots; otherwise the
	// job runs in one contiguous window.
	Interruptible bool
	// MinSlot is the shortest slot an interruptible job may run in (rounded
	// up to whole steps; at most the whole work). Zero means one step.
	MinSlot time.Duration
}

// Slot is one contiguous run of the job.
type Slot struct {
	Start, End    time.Time
	MeanIntensity float64 // gCO2eq/kWh, on the series the schedule was made on
}

// Schedule is a placement of a Job on a series.
type Schedule struct {
	Slots []Slot
	// ExpectedGPerKWh is the mean intensity over all slots (equal weight per
	// step) on the series the schedule was made on.
	ExpectedGPerKWh float64
	// BaselineGPerKWh is the same for "run now": the contiguous run starting
	// at the (aligned) job start.
	BaselineGPerKWh float64
}

// window is the discretised job on a series: candidate steps [a, b), n steps
// of work, runs of at least mm steps.
type window struct{ a, b, n, mm int }

func jobWindow(s *Series, job Job) (window, error) {
	if err := s.Validate(); err != nil {
		return window{}, err
	}
	if job.Work <= 0 {
		return window{}, fmt.Errorf("%w: work %s is not positive", ErrInvalidJob, job.Work)
	}
	if job.MinSlot < 0 {
		return window{}, fmt.Errorf("%w: min slot %s is negative", ErrInvalidJob, job.MinSlot)
	}
	if job.Deadline.Sub(job.Start) < job.Work {
		return window{}, fmt.Errorf("%w: %s of work between %s and %s", ErrDeadlineTooShort, job.Work,
			job.Start.UTC().Format(time.RFC3339), job.Deadline.UTC().Format(time.RFC3339))
	}
	w := window{a: s.ceilIndex(job.Start), b: s.floorIndex(job.Deadline)}
	w.n = int((job.Work + s.Step - 1) / s.Step)
	w.mm = int((job.MinSlot + s.Step - 1) / s.Step)
	w.mm = max(1, min(w.mm, w.n))
	if w.b-w.a < w.n {
		return window{}, fmt.Errorf("%w: %d steps of %s needed, %d whole steps between %s and %s",
			ErrDeadlineTooShort, w.n, s.Step, max(0, w.b-w.a),
			job.Start.UTC().Format(time.RFC3339), job.Deadline.UTC().Format(time.RFC3339))
	}
	if w.a < 0 || w.b > len(s.Values) {
		return window{}, fmt.Errorf("%w: job window [%s, %s) not covered by series [%s, %s)", ErrOutOfRange,
			s.TimeAt(w.a).UTC().Format(time.RFC3339), s.TimeAt(w.b).UTC().Format(time.RFC3339),
			s.Start.UTC().Format(time.RFC3339), s.End().UTC().Format(time.RFC3339))
	}
	return w, nil
}

// schedule builds a Schedule from chosen absolute step indexes (ascending).
func schedule(s *Series, w window, chosen []int) Schedule {
	var sc Schedule
	var total float64
	for i := 0; i < len(chosen); {
		j := i
		var sum float64
		for j < len(chosen) && chosen[j] == chosen[i]+(j-i) {
			sum += s.Values[chosen[j]]
			j++
		}
		total += sum
		sc.Slots = append(sc.Slots, Slot{Start: s.TimeAt(chosen[i]), End: s.TimeAt(chosen[j-1] + 1),
			MeanIntensity: sum / float64(j-i)})
		i = j
	}
	sc.ExpectedGPerKWh = total / float64(w.n)
	var base float64
	for i := w.a; i < w.a+w.n; i++ {
		base += s.Values[i]
	}
	sc.BaselineGPerKWh = base / float64(w.n)
	return sc
}

// Plan places job on the forecast f.
//
// Non-interruptible: the contiguous window of n steps with the lowest mean
// (earliest on ties). Interruptible: the set of n steps with the lowest sum
// whose maximal runs are each at least MinSlot long, found by an exact
// dynamic program; ties go to the lexicographically earliest set of steps.
func Plan(f *Series, job Job) (Schedule, error) {
	w, err := jobWindow(f, job)
	if err != nil {
		return Schedule{}, fmt.Errorf("plan: %w", err)
	}
	if !job.Interruptible {
		best, bestSum := -1, math.Inf(1)
		for s := w.a; s+w.n <= w.b; s++ {
			var sum float64
			for i := s; i < s+w.n; i++ {
				sum += f.Values[i]
			}
			if sum < bestSum {
				best, bestSum = s, sum
			}
		}
		chosen := make([]int, w.n)
		for i := range chosen {
			chosen[i] = best + i
		}
		return schedule(f, w, chosen), nil
	}
	return schedule(f, w, planInterruptible(f.Values[w.a:w.b], w.n, w.mm, w.a)), nil
}

// planInterruptible solves: choose n of the positions of v, every maximal
// run at least mm long, minimum sum. State after a prefix: k chosen and r =
// length of the current run capped at mm (0: previous position not chosen).
// g[i][k][r] is the minimum cost of the suffix from i. Reconstruction walks
// forward preferring "take", which yields the lexicographically earliest
// optimal set. Returned indexes are offset by base.
func planInterruptible(v []float64, n, mm, base int) []int {
	L := len(v)
	R := mm + 1
	idx := func(i, k, r int) int { return (i*(n+1)+k)*R + r }
	g := make([]float64, (L+1)*(n+1)*R)
	inf := math.Inf(1)
	for k := 0; k <= n; k++ {
		for r := 0; r < R; r++ {
			g[idx(L, k, r)] = inf
			if k == n && (r == 0 || r == mm) {
				g[idx(L, k, r)] = 0
			}
		}
	}
	for i := L - 1; i >= 0; i-- {
		for k := 0; k <= n; k++ {
			for r := 0; r < R; r++ {
				g[idx(i, k, r)] = math.Min(skipCost(g, idx, i, k, r, mm), takeCost(g, idx, v, i, k, r, n, mm))
			}
		}
	}
	chosen := make([]int, 0, n)
	k, r := 0, 0
	for i := 0; i < L && k < n; i++ {
		t, s := takeCost(g, idx, v, i, k, r, n, mm), skipCost(g, idx, i, k, r, mm)
		if t <= s+1e-12*math.Max(1, math.Abs(s)) {
			chosen = append(chosen, base+i)
			k, r = k+1, min(r+1, mm)
		} else {
			r = 0
		}
	}
	return chosen
}

func skipCost(g []float64, idx func(i, k, r int) int, i, k, r, mm int) float64 {
	if r != 0 && r < mm {
		return math.Inf(1) // would close a run shorter than mm
	}
	return g[idx(i+1, k, 0)]
}

func takeCost(g []float64, idx func(i, k, r int) int, v []float64, i, k, r, n, mm int) float64 {
	if k >= n {
		return math.Inf(1)
	}
	return v[i] + g[idx(i+1, k+1, min(r+1, mm))]
}
