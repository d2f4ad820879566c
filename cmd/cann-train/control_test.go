package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

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

// TestScaleWatch: `scale --wait` follows the run's status after its
// signal. A scale-up that took the free nodes and waits for the others
// is not over at its first change: it waits for them (up to --wait), and
// says how far it got when the wait ends first. A scale that cannot be
// filled, one another scale replaced, and one the run refused are over.
func TestScaleWatch(t *testing.T) {
	on := func(ids ...string) []string { return ids }
	rescale := spec.Rescaling{Generation: 2, AtStep: 500, FromNodes: 2, ToNodes: 3, Added: on("n3")}
	regrow := spec.Rescaling{Generation: 3, AtStep: 900, FromNodes: 3, ToNodes: 4, Added: on("n4"), Regrow: true}
	refusal := "rescale to 4 node(s) refused: want 1..3"
	tests := []struct {
		name  string
		nodes int
		seen  []spec.RunStatus // each poll's status, the last settling it (or not)
		want  bool             // the last settles it
		short string           // growing when the wait ends: the error
	}{
		{name: "grows to all of them", nodes: 4, want: true, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2")}, // (the signal not taken yet)
			{Nodes: on("n1", "n2"), PendingNodes: 4},
			{Nodes: on("n1", "n2", "n3"), TargetNodes: 4, Rescalings: []spec.Rescaling{rescale}},
			{Nodes: on("n1", "n2", "n3", "n4"), Rescalings: []spec.Rescaling{rescale, regrow}},
		}},
		{name: "none free yet", nodes: 4, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2"), PendingNodes: 4},
			{Nodes: on("n1", "n2"), TargetNodes: 4, NodeAsk: &spec.NodeAsk{Why: "growing back to 4 nodes", WaitingSince: time.Date(2026, 12, 7, 5, 41, 23, 0, time.UTC)}},
		}, short: "run/k: on 2 of 4 node(s) so far after 40s; it takes more as they come free, training on meanwhile " +
			"(asking: growing back to 4 nodes: an ask waits for a free node since 05:41:23Z (one ends the chunk in flight early); `cann-train status k` follows it)"},
		{name: "short of them when the wait ends", nodes: 4, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2", "n3"), TargetNodes: 4, Rescalings: []spec.Rescaling{rescale}},
		}, short: "run/k: on 3 of 4 node(s) so far after 40s; it takes more as they come free, training on meanwhile " +
			"(`cann-train nodes` says which are free; `cann-train status k` follows it)"},
		{name: "a scale-down not filled", nodes: 1, want: true, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2"), PendingNodes: 1},
			{Nodes: on("n1", "n2"), Rescalings: []spec.Rescaling{{FromNodes: 2, ToNodes: 2, Error: "no node"}}},
		}},
		{name: "another scale replaced it", nodes: 4, want: true, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2"), TargetNodes: 4},
			{Nodes: on("n1", "n2"), PendingNodes: 2},
			{Nodes: on("n1", "n2")},
		}},
		{name: "refused", nodes: 4, want: true, seen: []spec.RunStatus{
			{Nodes: on("n1", "n2"), RefusedRescale: refusal},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &scaleWatch{nodes: tc.nodes}
			var got bool
			for i, st := range tc.seen {
				if got = w.settled(st); got && i < len(tc.seen)-1 {
					t.Fatalf("settled at poll %d of %d: %+v", i+1, len(tc.seen), st)
				}
			}
			if got != tc.want {
				t.Fatalf("settled %v at the last poll, want %v", got, tc.want)
			}
			last := tc.seen[len(tc.seen)-1]
			if w.growing(last) != (tc.short != "") {
				t.Fatalf("growing %v, want %v", w.growing(last), tc.short != "")
			}
			if tc.short != "" {
				if err := w.short("run/k", 40*time.Second, last); err.Error() != tc.short {
					t.Errorf("got  %q\nwant %q", err, tc.short)
				}
			}
		})
	}
}

// TestControlWords: what pause, cancel and scale say of a run no control
// worker answered for (no "at step 0"), of a wait that read no status,
// and of a deadline its last query already names (said once); and that a
// resume of a run terminated while paused points to `run --resume`.
func TestControlWords(t *testing.T) {
	at := spec.RunStatus{Phase: spec.PhaseTraining, Step: 2000}
	for _, tc := range []struct {
		name       string
		st         spec.RunStatus
		unanswered bool
		want       string
	}{
		{"answered", at, false, " at step 2000"},
		{"answered at 0", spec.RunStatus{Phase: spec.PhaseTraining}, false, " at step 0"},
		{"last recorded", at, true, " (last recorded at step 2000)"},
		{"nothing recorded", spec.RunStatus{}, true, ""},
	} {
		if got := atStep(tc.st, tc.unanswered); got != tc.want {
			t.Errorf("atStep %s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := nowAt(spec.RunStatus{}); got != "no status read" {
		t.Errorf("nowAt of no status: %q", got)
	}
	if got := nowAt(at); got != "now training at step 2000" {
		t.Errorf("nowAt: %q", got)
	}
	query := fmt.Errorf("query run/g: %w", errors.New("context deadline exceeded"))
	if got := deadlineCause(query, context.DeadlineExceeded).Error(); got != "query run/g: context deadline exceeded" {
		t.Errorf("deadline said twice: %q", got)
	}
	if got := deadlineCause(nil, context.DeadlineExceeded); !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("no query error: %v", got)
	}
	if got := deadlineCause(query, context.Canceled); !errors.Is(got, context.Canceled) {
		t.Errorf("a Ctrl-C is no longer context.Canceled: %v", got)
	}

	ended := &runEnded{id: "run/t", status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED}
	paused := spec.RunStatus{Phase: spec.PhasePaused, Step: 1230, TotalSteps: 40000, LastCkpt: &spec.CheckpointRef{Step: 1230}}
	if got := resumeEnded(ended, "run/t", paused).Error(); got != "run/t terminated: nothing to resume (a resume reaches a running run only); "+
		"`cann-train run -f JOB --name t --resume` continues it from step 1230" {
		t.Errorf("resume of a terminated run: %q", got)
	}
	done := spec.RunStatus{Phase: spec.PhaseCompleted, Step: 40000, TotalSteps: 40000, LastCkpt: &spec.CheckpointRef{Step: 40000}}
	if got := resumeEnded(ended, "run/t", done); got != error(ended) {
		t.Errorf("resume of a run at its end: %v", got)
	}
}
