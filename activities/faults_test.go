package activities

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/spec"
)

// TestArmedFaultsDue: an armed fault is due once its run reaches its step
// (or passes it: armed late), only for its own run, and only once.
func TestArmedFaultsDue(t *testing.T) {
	var a armedFaults
	if _, ok := a.due("run/x", 1000); ok {
		t.Fatal("an empty set has a due fault")
	}
	a.arm("run/x", spec.InjectFault{NodeID: "n", AtStep: 150})
	a.arm("run/x", spec.InjectFault{NodeID: "n", AtStep: 120, Kind: spec.FaultFreeze})
	a.arm("run/y", spec.InjectFault{NodeID: "n", AtStep: 10})
	steps := []struct {
		run  string
		step int64
		want int64 // AtStep of the fault due (0: none)
	}{
		{"run/x", 119, 0},
		{"run/z", 500, 0},
		{"run/x", 120, 120},
		{"run/x", 121, 0},
		{"run/x", 200, 150}, // came late: strikes at the next step done
		{"run/x", 300, 0},
		{"run/y", 11, 10},
		{"run/y", 12, 0},
	}
	for _, s := range steps {
		f, ok := a.due(s.run, s.step)
		if ok != (s.want != 0) || f.AtStep != s.want {
			t.Errorf("due(%s, %d) = %+v, %v; want the fault at %d", s.run, s.step, f, ok, s.want)
		}
	}
	if n := a.n.Load(); n != 0 || len(a.by) != 0 {
		t.Errorf("%d armed (%v) after all struck", n, a.by)
	}
}

// TestArmFault: a node that allows faults keeps one for its run; one that
// does not, a fault for another node and a malformed one are refused,
// non-retryably, with the reason.
func TestArmFault(t *testing.T) {
	cases := []struct {
		name    string
		allow   bool
		fault   spec.InjectFault
		errType string
	}{
		{"armed", true, spec.InjectFault{NodeID: "n1", AtStep: 5}, ""},
		{"not allowed", false, spec.InjectFault{NodeID: "n1", AtStep: 5}, ErrTypeFaultsRefused},
		{"another node's", true, spec.InjectFault{NodeID: "n2", AtStep: 5}, "BadFault"},
		{"no step", true, spec.InjectFault{NodeID: "n1"}, "BadFault"},
		{"unknown kind", true, spec.InjectFault{NodeID: "n1", AtStep: 5, Kind: "melt"}, "BadFault"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{ID: "n1", Logger: zap.NewNop(), AllowFaults: tc.allow}
			err := n.ArmFault(context.Background(), spec.ArmFaultInput{RunID: "run/x", Fault: tc.fault})
			_, due := n.faults.due("run/x", 10)
			if tc.errType == "" {
				if err != nil || !due {
					t.Fatalf("ArmFault: %v, due %v; want it armed", err, due)
				}
				return
			}
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != tc.errType || !app.NonRetryable() {
				t.Fatalf("ArmFault: %v; want a non-retryable %s", err, tc.errType)
			}
			if due {
				t.Error("a refused fault was armed")
			}
		})
	}
}
