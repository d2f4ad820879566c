package main

import (
	"testing"

	"github.com/cann-train/cann-train/spec"
)

// TestUnsavedOnCancel: what a cancel would throw away — only a built-in
// run holding, for its refusing bucket, steps past its last checkpoint.
func TestUnsavedOnCancel(t *testing.T) {
	at := func(step int64) *spec.CheckpointRef { return &spec.CheckpointRef{Step: step} }
	tests := []struct {
		name string
		st   spec.RunStatus
		want string
	}{
		{"training", spec.RunStatus{Phase: spec.PhaseTraining, Step: 300, LastCkpt: at(200)}, ""},
		{"held past its checkpoint", spec.RunStatus{Phase: spec.PhaseStorageWait, Step: 300, LastCkpt: at(200)},
			"it holds for its checkpoint bucket, which refused the state at step 300 (its last checkpoint is at step 200): 100 step(s) live only in its nodes' memory"},
		{"held without a checkpoint", spec.RunStatus{Phase: spec.PhaseStorageWait, Step: 3000},
			"it holds for its checkpoint bucket, which refused the state at step 3000 (it has no checkpoint): 3000 step(s) live only in its nodes' memory"},
		{"held at its checkpoint", spec.RunStatus{Phase: spec.PhaseStorageWait, Step: 200, LastCkpt: at(200)}, ""},
		{"external job (kept on disk)", spec.RunStatus{Phase: spec.PhaseStorageWait, Model: spec.ModelExternal, Step: 300, LastCkpt: at(200)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := unsavedOnCancel(tc.st); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}
