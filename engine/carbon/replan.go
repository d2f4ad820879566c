package carbon

import (
	"fmt"
	"time"
)

// EvaluateReplanned measures a forecaster the way a TrainingRun uses it:
// the remaining work is re-planned at every step of the trace with a fresh
// forecast (a day-ago persistence forecast, say, gets a day fresher as the
// job waits), the job runs for one step whenever the current plan starts
// now — an interruptible job runs on until its run has lasted MinSlot,
// and each re-plan knows the run in progress ([Job.Running]), so it never
// pauses with less than MinSlot of work left; a contiguous job runs to the
// end once started — and the result is measured on the trace. Waiting only
// ever follows a plan that still meets the deadline, so the deadline is
// kept.
func EvaluateReplanned(trace *Series, fc Forecaster, job Job) (Result, error) {
	orc, orcErr, err := hindsight(trace, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	step := trace.Step
	t := trace.TimeAt(trace.ceilIndex(job.Start))
	remaining := time.Duration((job.Work+step-1)/step) * step
	minRun := max(step, time.Duration((job.MinSlot+step-1)/step)*step)
	var slots []Slot
	var planned float64
	var run time.Duration // the run in progress
	advance := func(d time.Duration) {
		if n := len(slots); n > 0 && slots[n-1].End.Equal(t) {
			slots[n-1].End = t.Add(d)
		} else {
			slots = append(slots, Slot{Start: t, End: t.Add(d)})
		}
		run += d
		remaining -= d
		t = t.Add(d)
	}
	first := true
	for remaining > 0 {
		if run > 0 && (!job.Interruptible || run < minRun) {
			advance(step) // committed: every plan would run it now
			continue
		}
		sub := job
		sub.Start, sub.Work, sub.Running = t, remaining, run
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
			run = 0
			t = t.Add(step) // wait a step, then look again
			continue
		}
		advance(step)
	}
	return result(trace, orc, orcErr, planned, slots, true)
}
