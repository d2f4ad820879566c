package main

import (
	"testing"

	"github.com/cann-train/cann-train/spec"
)

// TestDefaultFaultStep: a fault without --at-step strikes two seconds of
// the run's pace ahead (at least 20 steps) while it trains, and 20 steps
// ahead of a run that holds, whose last pace says nothing of its step.
func TestDefaultFaultStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   spec.RunStatus
		want int64
	}{
		{"training fast", spec.RunStatus{Phase: spec.PhaseTraining, StepsPerSec: 576}, 1125 + 1152},
		{"training slowly", spec.RunStatus{Phase: spec.PhaseTraining, StepsPerSec: 3}, 1125 + 20},
		{"paused", spec.RunStatus{Phase: spec.PhasePaused, StepsPerSec: 576}, 1125 + 20},
	} {
		if got := defaultFaultStep(tc.st, 1125); got != tc.want {
			t.Errorf("%s: step %d, want %d", tc.name, got, tc.want)
		}
	}
}
