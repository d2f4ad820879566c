package activities

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/spec"
)

// TestRunExternalKeepsARefusedCheckpoint: asked to (KeepRefused), a node
// whose bucket refuses the script's checkpoints keeps the last one on its
// disk and says so (Kept); the refused final upload is the world's result
// (CheckpointFailed), not its error. StoreKept stores it once the bucket
// takes writes — the newest at the step asked or later; a restore reads
// what the script wrote — and refuses to store one it does not keep or
// whose bytes changed on its disk.
func TestRunExternalKeepsARefusedCheckpoint(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(`
import os
import cann_train as ct
for step in range(1, 7):
    ct.report(step, loss=1.0 / step)
    if ct.should_checkpoint(step) and ct.rank() == 0:
        open(os.path.join(ct.checkpoint_dir(), "w.txt"), "w").write(str(step))
        ct.saved(step, timeout=30)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	n, runs := refusingNode(t)
	in := externalInput("kept", work, 1, py, "train.py")
	in.Spec.Steps, in.KeepRefused = 6, true
	w := startWorld(t, n, in)
	res := w.end(t)
	refusedAt := func(step int) string {
		return fmt.Sprintf("node n1 cannot store the checkpoint at step %d in %s: ", step, n.DefaultCheckpointURL)
	}
	if f := res.CheckpointFailed; f == nil || f.Step != 6 || !strings.Contains(f.Error, refusedAt(6)) || res.Checkpoint != nil {
		t.Fatalf("result: failed %+v, checkpoint %+v; want the final upload at 6 refused, kept", res.CheckpointFailed, res.Checkpoint)
	}
	told := w.told()
	if len(told) != 3 {
		t.Fatalf("told %+v; want the refused checkpoints at 2, 4 and 6", told)
	}
	for i, c := range told {
		if c.Ref.Step != int64(2*i+2) || c.Failed == "" || !c.Kept {
			t.Errorf("told %+v; want the checkpoint at %d refused and kept", c, 2*i+2)
		}
	}
	files, _ := os.ReadDir(n.keptDir(in.RunID))
	if len(files) != 1 || !strings.HasPrefix(files[0].Name(), "step-000000000006-") {
		t.Fatalf("kept %v; want the last refused checkpoint only (step 6)", files)
	}

	storeKept := func(step int64) (spec.StoreKeptResult, error) {
		var ts testsuite.WorkflowTestSuite
		env := ts.NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(n.StoreKept, activity.RegisterOptions{Name: spec.ActivityStoreKept})
		v, err := env.ExecuteActivity(spec.ActivityStoreKept, spec.StoreKeptInput{RunID: in.RunID, Spec: in.Spec, Step: step, Session: in.Session})
		var out spec.StoreKeptResult
		if err == nil {
			err = v.Get(&out)
		}
		return out, err
	}
	nothingKept := func(step int64, want string) {
		t.Helper()
		_, err := storeKept(step)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeNothingKept || !strings.Contains(ae.Message(), want) {
			t.Errorf("store kept at %d: %v; want %s saying %q", step, err, spec.ErrTypeNothingKept, want)
		}
	}
	// Still refused: the node keeps it.
	if out, err := storeKept(6); err != nil || out.Failed == nil || out.Failed.Step != 6 || !strings.Contains(out.Failed.Error, refusedAt(6)) ||
		out.Checkpoint != nil || out.Kept != filepath.Join(n.keptDir(in.RunID), files[0].Name()) {
		t.Fatalf("store kept with the bucket refusing: %+v, %v; want it refused again, naming the file that keeps it", out, err)
	}
	nothingKept(7, "it keeps the one at step 6")

	if err := os.Remove(runs); err != nil {
		t.Fatal(err)
	}
	// Asked for 4, it stores the newest it keeps since (the world's rank 0
	// may commit again before its node sees the run stop it).
	out, err := storeKept(4)
	if err != nil || out.Checkpoint == nil || out.Checkpoint.Step != 6 || out.Failed != nil {
		t.Fatalf("store kept: %+v, %v; want the checkpoint at 6 stored", out, err)
	}
	restored := t.TempDir()
	if err := n.restoreDir(t.Context(), in.RunID, *out.Checkpoint, restored); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(restored, "w.txt")); err != nil || string(b) != "6" {
		t.Errorf("restored w.txt = %q, %v; want the script's state at 6", b, err)
	}
	nothingKept(6, "none in") // stored: dropped

	// A kept file whose bytes changed is not stored.
	if err := n.keepRefused(in.RunID, 8, []byte("packed bytes")); err != nil {
		t.Fatal(err)
	}
	files, _ = os.ReadDir(n.keptDir(in.RunID))
	if len(files) != 1 {
		t.Fatalf("kept %v; want one file", files)
	}
	if err := os.WriteFile(filepath.Join(n.keptDir(in.RunID), files[0].Name()), []byte("packed bytez"), 0o644); err != nil {
		t.Fatal(err)
	}
	nothingKept(8, "do not match their hash")
}

// TestRunExternalDropsAKeptCheckpointOnceALaterIsStored: the bucket
// refuses the checkpoint at 2 (kept: the world goes on) and is repaired;
// the one at 4 is stored, and with it the node drops the kept 2 — no run
// asks for a checkpoint older than one stored, and a run that completes
// never relaunches to drop it at its next launch. So does a world that
// stores past one an earlier world kept.
func TestRunExternalDropsAKeptCheckpointOnceALaterIsStored(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	gate := filepath.Join(t.TempDir(), "gate")
	if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(`
import os, sys, time
import cann_train as ct
for step in range(1, 7):
    ct.report(step, loss=1.0 / step)
    if ct.should_checkpoint(step) and ct.rank() == 0:
        open(os.path.join(ct.checkpoint_dir(), "w.txt"), "w").write(str(step))
        ct.saved(step, timeout=30)
    if step == 2:
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.01)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	n, runs := refusingNode(t)
	in := externalInput("kept-drop", work, 1, py, "train.py", gate)
	in.Spec.Steps, in.KeepRefused = 6, true
	w := startWorld(t, n, in)
	deadline := time.Now().Add(time.Minute)
	for told := w.told(); len(told) == 0; told = w.told() {
		if time.Now().After(deadline) {
			t.Fatal("the node never told of the checkpoint at 2")
		}
		time.Sleep(10 * time.Millisecond) // (the script waits at the gate)
	}
	if c := w.told()[0]; c.Ref.Step != 2 || c.Failed == "" || !c.Kept {
		t.Fatalf("told %+v; want the checkpoint at 2 refused, kept", c)
	}
	if files, _ := os.ReadDir(n.keptDir(in.RunID)); len(files) != 1 {
		t.Fatalf("kept %v; want the refused 2", files)
	}
	if err := os.Remove(runs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := w.end(t)
	if res.Checkpoint == nil || res.Checkpoint.Step != 6 || res.CheckpointFailed != nil {
		t.Fatalf("result: checkpoint %+v, failed %+v; want 6 stored", res.Checkpoint, res.CheckpointFailed)
	}
	if files, _ := os.ReadDir(n.keptDir(in.RunID)); len(files) != 0 {
		t.Errorf("node still keeps %v after storing later checkpoints", files)
	}

	// One an earlier world kept (its launch failed; the run relaunched
	// from before it) goes once a later one is stored too.
	if err := n.keepRefused(in.RunID, 5, []byte("an earlier world's")); err != nil {
		t.Fatal(err)
	}
	in.Session += "-2"
	if res := startWorld(t, n, in).end(t); res.Checkpoint == nil || res.Checkpoint.Step != 6 {
		t.Fatalf("second world: checkpoint %+v; want 6 stored", res.Checkpoint)
	}
	if files, _ := os.ReadDir(n.keptDir(in.RunID)); len(files) != 0 {
		t.Errorf("node still keeps %v, an earlier world's, after storing 6", files)
	}
}

// refusingNode is a node whose file bucket refuses every write: its runs
// directory is a file (remove it to repair the bucket).
func refusingNode(t *testing.T) (n *Node, runs string) {
	t.Helper()
	bucket := filepath.Join(t.TempDir(), "bucket")
	n = externalNode(t, "n1", "file://"+bucket)
	if err := os.MkdirAll(bucket, 0o755); err != nil {
		t.Fatal(err)
	}
	runs = filepath.Join(bucket, "runs")
	if err := os.WriteFile(runs, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n, runs
}
