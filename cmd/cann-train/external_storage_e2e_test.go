package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalRunHoldsForItsStorage: an external job whose bucket stops
// taking its checkpoints (the directory its manifests go into becomes a
// file) holds after a second refused upload in a row — the world stopped
// at once, node-1 keeping the refused checkpoint directory on its disk —
// instead of training on with nothing stored; once the bucket is
// repaired, `cann-train resume` has node-1 store it, and the job
// relaunches from that step (the script checks the state it restores)
// and completes, no restart counted, nothing retrained. Before, the world
// trained on without checkpoints and the refused final upload failed the
// run. Its history is the replay test's
// trainingrun_external_storage_hold.json.
func TestExternalRunHoldsForItsStorage(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job storage hold e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-held", Nodes: 2, Steps: 300, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_MARK": dir}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a first checkpoint", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.LastCkpt != nil || st.Phase == spec.PhaseCompleted
	})
	repair := refuseCheckpoints(t, filepath.Join(dir, "ckpt"), s.Name)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the hold for the storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && !st.WaitUntil.IsZero() || st.Phase == spec.PhaseCompleted || st.Phase == spec.PhaseFailed
	})
	if held.Phase != spec.PhaseStorageWait || held.CheckpointFailed == nil || !strings.Contains(held.CheckpointFailed.Error, "not a directory") ||
		held.LastCkpt == nil || held.Step <= held.LastCkpt.Step || held.Step%50 != 0 || held.Step >= s.Steps ||
		!strings.Contains(held.Detail, "node node-1 keeps the one at step") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d (last checkpoint %+v, failed %+v): %q; want a hold at a refused checkpoint past the last stored one",
			held.Phase, held.Step, held.LastCkpt, held.CheckpointFailed, held.Detail)
	}
	// The world is stopped: no rank trains on while the run holds.
	awaitNoProcesses(t, "CANN_E2E_MARK="+dir, "while the run holds")
	cli := cliAt(ctx, t, srv.FrontendAddr(), l.LogDir)
	out := cli("status", s.Name)
	for _, want := range []string{"waiting-storage: the checkpoint storage refuses the job's checkpoints; node node-1 keeps the one at step",
		"could not be stored (none since)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	repair()
	if out := cli("resume", s.Name); !strings.Contains(out, "resumed (was waiting-storage at step") {
		t.Errorf("resume said %q", out)
	}
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 || st.CheckpointFailed != nil ||
		st.LastCkpt == nil || st.LastCkpt.Step != s.Steps {
		t.Fatalf("ended %s at step %d, recoveries %+v, failed %+v, last checkpoint %+v; want completed, its checkpoints stored again",
			st.Phase, st.Step, st.Recoveries, st.CheckpointFailed, st.LastCkpt)
	}
	// Rank 0's reports: the second launch restored the kept checkpoint
	// (the script checks the step it reads) and went on from there.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 2 || len(reps[1]) == 0 || reps[1][0].Step != held.Step+1 || reps[1][len(reps[1])-1].Step != s.Steps {
		t.Fatalf("rank-0 reports of %d launches; want a second from step %d to %d", len(reps), held.Step+1, s.Steps)
	}
	if kept, _ := filepath.Glob(filepath.Join(dir, "work", "node-1", "kept", "*", "*")); len(kept) != 0 {
		t.Errorf("node-1 still keeps %v after storing it", kept)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_storage_hold.json")
}
