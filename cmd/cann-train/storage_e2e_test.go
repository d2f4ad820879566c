package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// TestRunHoldsForItsStorage: a run whose bucket stops taking checkpoints
// (here the directory its manifests go into becomes a file, as a full
// disk or a revoked permission refuses writes) holds after a second
// upload in a row is refused — waiting-storage, its nodes keeping the
// state — instead of training on without checkpoints and failing at
// its last one; once the bucket is repaired, `cann-train resume` has it
// store that state at once, and it completes bit-identical to a run whose
// bucket never failed, with no recovery.
func TestRunHoldsForItsStorage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	metrics, err := workers.ServeMetrics("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = metrics.Close(context.Background()) })
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{metrics: metrics.Handler}, "node-1", "node-2")
	cli := cliAt(ctx, t, addr, l.LogDir)
	s := spec.RunSpec{Name: "held", Nodes: 2, Steps: 2000, ChunkSteps: 200, CheckpointEvery: 200}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	awaitCheckpoint(ctx, t, c, run.GetID(), 200, l.LogDir)

	repair := refuseCheckpoints(t, filepath.Join(dir, "ckpt"), s.Name)
	// (Its first try says "store it now", without a time.)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the hold for the storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && !st.WaitUntil.IsZero()
	})
	if f := held.CheckpointFailed; f == nil || !strings.Contains(f.Error, "not a directory") || held.Step >= s.Steps ||
		held.LastCkpt == nil || held.LastCkpt.Step >= held.Step || held.WaitUntil.IsZero() {
		t.Fatalf("held at step %d, last checkpoint %+v, failed %+v, until %v; want a refusal named, the step past the last checkpoint",
			held.Step, held.LastCkpt, held.CheckpointFailed, held.WaitUntil)
	}
	out := cli("status", s.Name)
	for _, want := range []string{"waiting-storage: the checkpoint storage (file://" + filepath.Join(dir, "ckpt") + ") refuse", "its nodes keep the state at step",
		"could not be stored (none since)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// Alerts can key on the metrics.
	text := scrape(t, metrics.URL)
	if v, ok := metricValue(text, "cann_train_storage_held", `run="run/held"`); !ok || v != 1 {
		t.Errorf("cann_train_storage_held = %v (found %v) while it holds, want 1:\n%s", v, ok, grep(text, "cann_train_storage"))
	}
	if v, ok := metricValue(text, "cann_train_checkpoint_refusals_total", `run="run/held"`); !ok || v < 2 {
		t.Errorf("cann_train_checkpoint_refusals_total = %v (found %v), want 2 or more:\n%s", v, ok, grep(text, "cann_train_checkpoint"))
	}
	// The run trains no further while it holds.
	if st, _, _, err := readProgress(ctx, c, run.GetID()); err != nil || st.Step != held.Step {
		t.Fatalf("step %d after the hold at %d (%v)", st.Step, held.Step, err)
	}

	// A cancel now would throw the held steps away: refused without --force.
	if _, _, err := cliRun(ctx, addr)("cancel", s.Name); err == nil || !strings.Contains(err.Error(), "step(s) live only in its nodes' memory") ||
		!strings.Contains(err.Error(), "cancel --force to discard them") {
		t.Errorf("cancel of a run holding unsaved steps: %v; want it refused without --force", err)
	}

	repair()
	if out := cli("resume", s.Name); !strings.Contains(out, "resumed (was waiting-storage at step") {
		t.Errorf("resume said %q", out)
	}
	st := awaitRun(ctx, t, run, l.LogDir)
	if len(st.Recoveries) != 0 || st.CheckpointFailed != nil || st.LastCkpt == nil || st.LastCkpt.Step != s.Steps {
		t.Errorf("ended with recoveries %+v, failed %+v, last checkpoint %+v", st.Recoveries, st.CheckpointFailed, st.LastCkpt)
	}
	if v, ok := metricValue(scrape(t, metrics.URL), "cann_train_storage_held", `run="run/held"`); !ok || v != 0 {
		t.Errorf("cann_train_storage_held = %v (found %v) after the hold, want 0", v, ok)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_storage_hold.json")
	// (The held state's checkpoint is stored: a run resumed from it
	// would start there.)
	out = cli("checkpoint", "ls", s.Name)
	if !strings.Contains(out, "/000000002000/") {
		t.Errorf("checkpoint ls lacks the last one:\n%s", out)
	}

	ref := s
	ref.Name = "held-ref"
	want := awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: ref}), l.LogDir)
	if st.WeightsSHA256 != want.WeightsSHA256 {
		t.Errorf("weights %s after the hold, %s without", st.WeightsSHA256, want.WeightsSHA256)
	}
}

// refuseCheckpoints makes run's checkpoints refused by the file bucket at
// root: the directory its manifests go into becomes a file, as a full disk
// or a revoked permission refuses writes. repair puts it back.
func refuseCheckpoints(t *testing.T, root, run string) (repair func()) {
	t.Helper()
	manifests := filepath.Join(root, "runs", run, "ckpt")
	if err := os.Rename(manifests, manifests+".kept"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifests, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(manifests); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(manifests+".kept", manifests); err != nil {
			t.Fatal(err)
		}
	}
}
