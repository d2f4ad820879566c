package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalRollover: on a server that suggests continue-as-new early
// (at suggestAt events), a long external launch is stopped after its next
// checkpoint upload, the run continues as new and relaunches from that
// checkpoint, no restart counted, and completes: each execution's history
// stays near the suggestion, however many checkpoints the job makes. The
// first execution's history is the replay test's
// trainingrun_external_rollover.json
// (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata).
func TestExternalRollover(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job rollover e2e test")
	}
	const suggestAt = 60
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptClusterOn(ctx, t, dir, dev.ServerOptions{SuggestContinueAsNewEvents: suggestAt}, nil, nil, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-rollover", Nodes: 2, Steps: 400, CheckpointEvery: 20, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatal(err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 || st.Rollovers < 1 {
		t.Fatalf("final status %s at step %d, %d recoveries, %d rollovers; want completed at %d, none, at least one",
			st.Phase, st.Step, len(st.Recoveries), st.Rollovers, s.Steps)
	}
	var text strings.Builder
	if err := printStatus(&text, st, "", "", ""); err != nil || !strings.Contains(text.String(), fmt.Sprintf("rollovers    %d (", st.Rollovers)) {
		t.Errorf("status text (%v):\n%s", err, text.String())
	}
	// Every execution but the last continued as new, each not far past
	// the suggestion: the rest of the checkpoint interval and the stop.
	id, runID, executions := run.GetID(), run.GetFirstExecutionRunID(), 0
	for runID != "" {
		executions++
		it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		h, next := &history.History{}, ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			h.Events = append(h.Events, ev)
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		n := len(h.Events)
		t.Logf("execution %d: %d events", executions, n)
		if executions == 1 {
			recordHistory(t, h, "trainingrun_external_rollover.json")
		}
		if next != "" && n > 3*suggestAt {
			t.Errorf("execution %d: %d events, the server suggested continue-as-new at %d", executions, n, suggestAt)
		}
		runID = next
	}
	if executions != st.Rollovers+1 {
		t.Errorf("%d executions for %d rollovers", executions, st.Rollovers)
	}
	// Rank 0's reports: one launch per rollover more, each from the step
	// after the checkpoint the one before it stopped at (the script checks
	// the restored state), the last one to the end.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != st.Rollovers+1 {
		t.Fatalf("%d launches for %d rollovers", len(reps), st.Rollovers)
	}
	for i, r := range reps {
		if len(r) == 0 {
			t.Fatalf("launch %d reported nothing", i)
		}
		first, last := r[0].Step, r[len(r)-1].Step
		if i == 0 && first != 1 || i > 0 && ((first-1)%s.CheckpointEvery != 0 || first > reps[i-1][len(reps[i-1])-1].Step+1) {
			t.Errorf("launch %d: steps %d..%d after %d..%d", i, first, last, reps[max(i-1, 0)][0].Step, reps[max(i-1, 0)][len(reps[max(i-1, 0)])-1].Step)
		}
	}
	if last := reps[len(reps)-1]; last[len(last)-1].Step != s.Steps {
		t.Errorf("the last launch ended at step %d", last[len(last)-1].Step)
	}
}
