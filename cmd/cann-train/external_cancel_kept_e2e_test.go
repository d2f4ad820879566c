package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// TestExternalCancelledRunKeepsItsCheckpoint: an external job holds for
// its storage (its file bucket refuses writes; node-1 keeps the refused
// checkpoint) and is cancelled. As it ends, node-1 tries the kept
// checkpoint once more — still refused — and the run's end names the file
// that keeps it. `checkpoint store-kept` refuses while the run runs;
// after the bucket is repaired it stores the file, and `run --resume`
// continues from that step (the script checks the state it restores):
// the cancelled run lost nothing. Its history is the replay test's
// trainingrun_external_cancel_kept.json.
func TestExternalCancelledRunKeepsItsCheckpoint(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job cancel-with-a-kept-checkpoint e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	const name, steps = "ext-cancel-kept", 300
	job := filepath.Join(dir, "job.yaml")
	y := fmt.Sprintf("name: %s\nnodes: 2\nsteps: %d\ncheckpoint_every: 50\nheartbeat_timeout: 2s\nexternal:\n  entrypoint: [python3, train.py]\n  workdir: %s\n  env:\n    CANN_E2E_MARK: %s\n",
		name, steps, dir, dir)
	if err := os.WriteFile(job, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	run := cliRun(ctx, srv.FrontendAddr())
	cli := func(args ...string) (string, string) {
		t.Helper()
		out, said, err := run(args...)
		if err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("cann-train %v: %v\n%s", args, err, said)
		}
		return out, said
	}
	cli("run", "-f", job)
	id := spec.RunIDPrefix + name
	awaitCheckpoint(ctx, t, c, id, 50, l.LogDir)
	repair := refuseCheckpoints(t, filepath.Join(dir, "ckpt"), name)
	held := untilStatus(ctx, t, c, id, l.LogDir, "the hold for the storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && !st.WaitUntil.IsZero() || st.Phase == spec.PhaseCompleted || st.Phase == spec.PhaseFailed
	})
	if held.Phase != spec.PhaseStorageWait || held.LastCkpt == nil || held.Step <= held.LastCkpt.Step {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d (last checkpoint %+v); want a hold past the last stored checkpoint", held.Phase, held.Step, held.LastCkpt)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "work", "node-1", "kept", "*", "*.pack"))
	if len(kept) != 1 || !strings.Contains(filepath.Base(kept[0]), fmt.Sprintf("step-%012d-", held.Step)) {
		t.Fatalf("node-1 keeps %v; want the checkpoint at step %d", kept, held.Step)
	}
	if _, _, err := run("checkpoint", "store-kept", name, kept[0]); err == nil || !strings.Contains(err.Error(), "is still running") {
		t.Errorf("store-kept while the run holds: %v; want it refused", err)
	}

	if err := c.CancelWorkflow(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	var ended spec.RunStatus
	for {
		st, _, closed, err := readProgress(ctx, c, id)
		if closed {
			ended = st
			break
		}
		if ctx.Err() != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("the cancelled run did not end: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := fmt.Sprintf("node node-1 keeps the checkpoint at step %d that the bucket refused (%s)", held.Step, kept[0])
	if ended.Phase != spec.PhaseCancelled || !strings.Contains(ended.Error, want) || ended.LastCkpt.Step != held.LastCkpt.Step {
		dumpLogs(t, l.LogDir)
		t.Fatalf("ended %s: %q (last checkpoint %d); want cancelled at %d, saying %q", ended.Phase, ended.Error, ended.LastCkpt.Step,
			held.LastCkpt.Step, want)
	}
	recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_external_cancel_kept.json")

	repair()
	out, _ := cli("checkpoint", "store-kept", name, kept[0])
	if !strings.Contains(out, fmt.Sprintf("stored run %s's checkpoint at step %d", name, held.Step)) {
		t.Errorf("store-kept said %q", out)
	}
	_, said := cli("run", "-f", job, "--resume", "--wait")
	if !strings.Contains(said, fmt.Sprintf("resuming %s from its checkpoint at step %d", id, held.Step)) {
		t.Errorf("run --resume said %q", said)
	}
	st, _, _, err := readProgress(ctx, c, id)
	if err != nil || st.Phase != spec.PhaseCompleted || st.Step != steps || len(st.Resumed) != 1 || st.Resumed[0].FromStep != held.Step {
		t.Fatalf("the resumed run: %s at %d, resumed %+v: %v", st.Phase, st.Step, st.Resumed, err)
	}
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), name)
	last := reps[len(reps)-1]
	if len(last) == 0 || last[0].Step != held.Step+1 || last[len(last)-1].Step != steps {
		t.Fatalf("rank-0 reports of %d launches; want the last from step %d to %d", len(reps), held.Step+1, steps)
	}
}
