package carbon

import (
	"testing"
	"time"
)

// BenchmarkPlannerPaths times the hot paths a plan on a trace goes
// through — a persistence forecast, Plan (contiguous, and interruptible
// with a minimum slot), the oracle, Mean and the online error model — on
// the Spanish hourly trace, so that a change to what they check (the gap
// rule) can be compared before and after:
//
//	go test -run XXX -bench PlannerPaths -benchtime 2x ./engine/carbon
func BenchmarkPlannerPaths(b *testing.B) {
	s := loadTrace(b, realTraces[0])
	start := time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC)
	deadline := start.Add(720 * time.Hour)
	fc := Persistence{s}
	f, err := fc.Forecast(start, deadline.Sub(start))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"persistence forecast 720h", func() error { _, err := fc.Forecast(start, deadline.Sub(start)); return err }},
		{"plan contiguous 100h", func() error {
			_, err := Plan(f, Job{Work: 100 * time.Hour, Start: start, Deadline: deadline})
			return err
		}},
		{"plan interruptible minslot 3h", func() error {
			_, err := Plan(f, Job{Work: 100 * time.Hour, Start: start, Deadline: deadline, Interruptible: true, MinSlot: 3 * time.Hour})
			return err
		}},
		{"oracle interruptible", func() error {
			_, err := Oracle(s, Job{Work: 100 * time.Hour, Start: start, Deadline: deadline, Interruptible: true})
			return err
		}},
		{"mean 720h x 720", func() error {
			for i := range 720 {
				t := start.Add(time.Duration(i) * time.Hour)
				if _, err := s.Mean(t, t.Add(time.Hour)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"estimate errors", func() error {
			_, err := EstimateErrors(s, fc, start, 48*time.Hour, 0, CorrectLinear)
			return err
		}},
		{"evaluate online 10h/48h", func() error {
			_, err := EvaluateOnline(s, fc, Job{Work: 10 * time.Hour, Start: start, Deadline: start.Add(48 * time.Hour), Interruptible: true}, DefaultOnline(true))
			return err
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
