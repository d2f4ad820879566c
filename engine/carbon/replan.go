package carbon

import (
	"fmt"
	"time"
)

// EvaluateReplanned measures a forecaster the way a TrainingRun uses it:
// the remaining work is re-planned at every step of the trace with a fresh
// forecast (a day-ago persistence forecast, say, gets a day fresher as the
// job waits), the job runs for one step whenever the current plan starts
// now — an interruptible job commits to at least MinSlot when it starts a
// new run, a contiguous job runs to the end once started — and the result
// is measured on the trace. Waiting only ever follows a plan that still
// meets the deadline, so the deadline is kept.
func EvaluateReplanned(trace *Series, fc Forecaster, job Job) (Result, error) {
	orc, err := Oracle(trace, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	step := trace.Step
	t := trace.TimeAt(trace.ceilIndex(job.Start))
	remaining := time.Duration((job.Work+step-1)/step) * step
	minRun := max(step, time.Duration((job.MinSlot+step-1)/step)*step)
	var slots []Slot
	var planned float64
	run := func(from time.Time, d time.Duration) {
		if n := len(slots); n > 0 && slots[n-1].End.Equal(from) {
			slots[n-1].End = from.Add(d)
		} else {
			slots = append(slots, Slot{Start: from, End: from.Add(d)})
		}
		remaining -= d
	}
	first := true
	for remaining > 0 {
		sub := job
		sub.Start, sub.Work = t, remaining
		f, err := fc.Forecast(t, job.Deadline.Sub(t))
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: forecast at %s: %w", t.UTC().Format(time.RFC3339), err)
		}
		plan, err := Plan(f, sub)
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: re-plan at %s: %w", t.UTC().Format(time.RFC3339), err)
		}
		if first {
			planned, first = plan.ExpectedGPerKWh, false
		}
		if plan.Slots[0].Start.After(t) {
			t = t.Add(step) // wait a step, then look again
			continue
		}
		if !job.Interruptible {
			run(t, remaining)
			break
		}
		d := step
		if n := len(slots); n == 0 || !slots[n-1].End.Equal(t) {
			d = minRun // a new run lasts at least MinSlot
		}
		d = min(d, remaining)
		run(t, d)
		t = t.Add(d)
	}
	return measure(trace, orc, planned, slots)
}
