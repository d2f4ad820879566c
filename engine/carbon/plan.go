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
	// up to whole steps; at most the whole work, counted from the start of
	// the run in progress when Running is set). Zero means one step. Every
	// slot lasts at least MinSlot, the last one included: a job never
	// pauses with less than MinSlot of work left, so the work left after
	// a pause always fills a slot of its own.
	MinSlot time.Duration
	// Running marks a re-plan of a job that is running at Start (a run in
	// progress, which the plan continues at Start or, once it has lasted
	// MinSlot, may pause there); its whole steps (rounded down) are how
	// long that run has lasted before Start. A contiguous job that is
	// running runs on from Start. Zero: the job is not running.
	Running time.Duration
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
// of work, runs of at least mm steps; running: a run is in progress before
// a, r0 whole steps long.
type window struct {
	a, b, n, mm int
	running     bool
	r0          int
}

func jobWindow(s *Series, job Job) (window, error) {
	if err := s.Validate(); err != nil {
		return window{}, err
	}
	if job.Work <= 0 {
		return window{}, fmt.Errorf("%w: work %s is not positive", ErrInvalidJob, job.Work)
	}
	if job.MinSlot < 0 || job.Running < 0 {
		return window{}, fmt.Errorf("%w: min slot %s or running time %s is negative", ErrInvalidJob, job.MinSlot, job.Running)
	}
	if job.Deadline.Sub(job.Start) < job.Work {
		return window{}, fmt.Errorf("%w: %s of work between %s and %s", ErrDeadlineTooShort, job.Work,
			job.Start.UTC().Format(time.RFC3339), job.Deadline.UTC().Format(time.RFC3339))
	}
	w := window{a: s.ceilIndex(job.Start), b: s.floorIndex(job.Deadline)}
	w.n = int((job.Work + s.Step - 1) / s.Step)
	if job.Running > 0 {
		w.running, w.r0 = true, int(job.Running/s.Step)
	}
	// A run is at least MinSlot long, or all of the work from the start
	// of the run (the one in progress, or the first) when that is less.
	w.mm = int((job.MinSlot + s.Step - 1) / s.Step)
	w.mm = max(1, min(w.mm, w.r0+w.n))
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
	if err := s.gapIn(w.a, w.b); err != nil {
		return window{}, fmt.Errorf("job window: %w", err)
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
// (earliest on ties; from Start when the job is Running). Interruptible:
// the set of n steps with the lowest sum whose maximal runs are each at
// least MinSlot long (a run in progress counting its Running steps), found
// by an exact dynamic program; ties go to the lexicographically earliest
// set of steps.
func Plan(f *Series, job Job) (Schedule, error) {
	w, err := jobWindow(f, job)
	if err != nil {
		return Schedule{}, fmt.Errorf("plan: %w", err)
	}
	if !job.Interruptible {
		return schedule(f, w, contiguous(f.Values, w)), nil
	}
	chosen, err := planInterruptible(f.Values[w.a:w.b], w, w.a)
	if err != nil {
		return Schedule{}, fmt.Errorf("plan: %w", err)
	}
	return schedule(f, w, chosen), nil
}

// contiguous is the window of w.n steps of v in [w.a, w.b) with the lowest
// sum, the earliest of equal ones (sums within summation noise are equal);
// the one at w.a when a run is in progress.
func contiguous(v []float64, w window) []int {
	best := w.a
	if !w.running {
		bestSum := math.Inf(1)
		for s := w.a; s+w.n <= w.b; s++ {
			var sum float64
			for i := s; i < s+w.n; i++ {
				sum += v[i]
			}
			if cheaper(sum, bestSum) {
				best, bestSum = s, sum
			}
		}
	}
	chosen := make([]int, w.n)
	for i := range chosen {
		chosen[i] = best + i
	}
	return chosen
}

// cheaper: a is lower than b by more than summation noise (sums of the
// same values in another order), so that equal costs keep the earlier
// choice.
func cheaper(a, b float64) bool {
	if math.IsInf(b, 1) {
		return a < b
	}
	return a < b-tieTolerance(b)
}

// tieTolerance is how far apart two costs near c may be and still count as
// equal.
func tieTolerance(c float64) float64 {
	return 1e-12 * math.Max(1, math.Abs(c))
}

// ErrSearchTooLarge: a plan's (or the oracle's) dynamic program would need
// more than maxPlanCells states (a window of years on a fine grid).
var ErrSearchTooLarge = errors.New("carbon: plan too large")

// maxPlanCells bounds planInterruptible's table: two bits per state, so
// 2^30 states take 256 MiB. A variable for tests.
var maxPlanCells = 1 << 30

// planInterruptible solves: choose w.n of the positions of v (offset base
// in the series), every maximal run at least w.mm long, minimum sum; with
// w.running a run of w.r0 positions is in progress before position 0: it
// goes on at 0 until it has lasted w.mm, and may end there once it has.
// Returned indexes are offset by base, ascending; ties go to the
// lexicographically earliest optimal set.
//
// A run in progress shorter than w.mm first takes the positions it still
// needs (forced), then the rest is solved by runsDP.
func planInterruptible(v []float64, w window, base int) ([]int, error) {
	chosen := make([]int, 0, w.n)
	from, on := 0, false
	if w.running {
		if need := w.mm - w.r0; need > 0 {
			for i := range need {
				chosen = append(chosen, base+i)
			}
			from = need
		}
		on = true
	}
	rest, err := runsDP(v[from:], w.n-len(chosen), w.mm, on)
	if err != nil {
		return nil, err
	}
	for _, i := range rest {
		chosen = append(chosen, base+from+i)
	}
	return chosen, nil
}

// runsDP chooses n of the positions of v, every maximal run at least mm
// long, minimum sum; on: a run of at least mm is in progress before
// position 0 (it may go on at 0 or end). Runs are built by two moves:
// off (the previous position is not chosen) may skip a position or start
// a run, taking mm positions at once; on (in a run that has its mm) may
// take one more or skip, ending the run. States are (d, k): k positions
// chosen, d skipped, at position i = k+d, d ≤ len(v)−n; g is the least
// cost of the rest. Each layer d needs only layer d+1 (a skip) and itself
// (a take moves to k+1, a run start to k+mm), so the values take O(n)
// memory and the decisions two bits per state; the forward walk prefers
// the take (or start), which yields the lexicographically earliest
// optimal set. The caller guarantees a feasible start (on, or n ≥ mm,
// and len(v) ≥ n).
func runsDP(v []float64, n, mm int, on bool) ([]int, error) {
	if n == 0 {
		return nil, nil
	}
	D := len(v) - n
	if D < 0 || (!on && n < mm) {
		return nil, fmt.Errorf("%w: %d positions of %d with runs of %d", ErrInvalidJob, n, len(v), mm)
	}
	if cells := (D + 1) * n; cells > maxPlanCells || cells/n != D+1 {
		return nil, fmt.Errorf("%w: %d steps to place among %d (runs of at least %d) need %d states, more than %d",
			ErrSearchTooLarge, n, len(v), mm, (D+1)*n, maxPlanCells)
	}
	prefix := make([]float64, len(v)+1)
	for i, x := range v {
		prefix[i+1] = prefix[i] + x
	}
	inf := math.Inf(1)
	gOn := make([]float64, n+1)     // layer d, on
	gOff := make([]float64, n+1)    // layer d, off
	next := make([]float64, n+1)    // layer d+1, off
	take := newBitSet((D + 1) * n)  // on: take position i
	start := newBitSet((D + 1) * n) // off: start a run at i
	for d := D; d >= 0; d-- {
		gOn[n], gOff[n] = 0, 0
		for k := n - 1; k >= 0; k-- {
			i, cell := k+d, d*n+k
			skip := inf
			if d < D {
				skip = next[k]
			}
			t := v[i] + gOn[k+1]
			gOn[k] = skip
			if t <= skip+tieTolerance(skip) {
				gOn[k] = t
				take.set(cell)
			}
			st := inf
			if k+mm <= n {
				st = prefix[i+mm] - prefix[i] + gOn[k+mm]
			}
			gOff[k] = skip
			if st <= skip+tieTolerance(skip) {
				gOff[k] = st
				start.set(cell)
			}
		}
		next, gOff = gOff, next
	}
	chosen := make([]int, 0, n)
	for d, k := 0, 0; k < n; {
		i, cell := k+d, d*n+k
		switch {
		case on && take.get(cell):
			chosen = append(chosen, i)
			k++
		case !on && start.get(cell):
			for j := i; j < i+mm; j++ {
				chosen = append(chosen, j)
			}
			k += mm
			on = true
		default:
			d++
			on = false
		}
	}
	return chosen, nil
}

// bitSet is a fixed-size set of bits.
type bitSet []uint64

func newBitSet(n int) bitSet    { return make(bitSet, (n+63)/64) }
func (b bitSet) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitSet) get(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
