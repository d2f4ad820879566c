package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestUnsharedBucketFailsTheRun: node workers that each save into a bucket
// of their own (here --checkpoint-url mem://, each process's memory; on a
// real cluster file:// on hosts that do not share the path) fail a run
// that names no checkpoint_url early — once a node has missed the
// checkpoint rank 0 committed for its --bucket-grace — saying so, instead
// of training on until a recovery finds no checkpoint. No node is blamed
// and no recovery is tried; the dashboard shows where it stopped.
func TestUnsharedBucketFailsTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir())
	for _, id := range []string{"node-1", "node-2"} {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", addr,
			"--checkpoint-url", "mem://", "--bucket-grace", "1s"); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, 2)
	s := spec.RunSpec{Name: "unshared", Nodes: 2, Steps: 1_000_000, ChunkSteps: 100, CheckpointEvery: 100}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	err := run.Get(ctx, nil)
	if err == nil {
		t.Fatal("the run completed")
	}
	for _, want := range []string{"not retryable", "node node-2 does not find the run's last checkpoint", "in mem://", "same bucket"} {
		if !strings.Contains(err.Error(), want) {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run error lacks %q: %v", want, err)
		}
	}
	st := queryRun(ctx, t, c, run.GetID())
	if st.Phase != spec.PhaseFailed || len(st.Recoveries) != 0 || st.LastCkpt == nil || st.Step <= st.LastCkpt.Step {
		t.Errorf("status: %s at step %d, checkpoint %+v, recoveries %+v; want failed past a checkpoint, no recovery",
			st.Phase, st.Step, st.LastCkpt, st.Recoveries)
	}
	// The dashboard's row of the failed run has its status (the query's):
	// where it stopped, its loss, why — not zeros.
	cli := cliAt(ctx, t, addr, l.LogDir)
	for {
		var rows []dashboardRow
		if err := json.Unmarshal([]byte(cli("dashboard", "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(rows, func(r dashboardRow) bool { return r.WorkflowID == run.GetID() && r.Execution == "failed" })
		if i >= 0 {
			if r := rows[i]; r.Status != spec.PhaseFailed || r.Step != st.Step || r.Loss <= 0 || !strings.Contains(r.Detail, "does not find the run's last checkpoint") {
				t.Errorf("dashboard row of the failed run: %+v", r)
			}
			break
		}
		select { // the visibility store indexes the close shortly after
		case <-ctx.Done():
			t.Fatal("the dashboard never listed the failed run")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
