package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalCancelledRunKeepsItsCheckpoint: an external job holds for
// its storage (its file bucket refuses writes; node-1 keeps the refused
// checkpoint) and is cancelled (`cann-train cancel --wait`). As it ends, node-1 tries the kept
// checkpoint once more — still refused — and the run's end names the file
// that keeps it. `checkpoint store-kept` refuses while the run runs;
// after the bucket is repaired it stores the file, and `run --resume`
// continues from that step (the script checks the state it restores):
// the cancelled run lost nothing. Its history is the replay test's
// trainingrun_external_cancel_kept.json.
func TestExternalCancelledRunKeepsItsCheckpoint(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job cancel-with-a-kept-checkpoint e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	const name, steps = "ext-cancel-kept", 300
	job := scriptJob(t, dir, name, steps)
	run := cliRun(ctx, srv.FrontendAddr())
	cli := cliSaidAt(ctx, t, srv.FrontendAddr(), l.LogDir)
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

	said, _ := cli("cancel", name, "--wait", "60s")
	ended, _, _, _ := readProgress(ctx, c, id)
	want := fmt.Sprintf("node node-1 keeps the checkpoint at step %d that the bucket refused (%s)", held.Step, kept[0])
	if ended.Phase != spec.PhaseCancelled || !strings.Contains(ended.Error, want) || ended.LastCkpt.Step != held.LastCkpt.Step ||
		ended.KeptOnNode == nil || *ended.KeptOnNode != (spec.KeptCheckpoint{Step: held.Step, Node: "node-1", File: kept[0]}) {
		dumpLogs(t, l.LogDir)
		t.Fatalf("ended %s: %q (last checkpoint %d, kept %+v); want cancelled at %d, saying %q", ended.Phase, ended.Error, ended.LastCkpt.Step,
			ended.KeptOnNode, held.LastCkpt.Step, want)
	}
	for _, w := range []string{want, fmt.Sprintf("continues it from step %d (from step %d once `cann-train checkpoint store-kept %s %s` on node-1 has stored it)",
		held.LastCkpt.Step, held.Step, name, kept[0])} {
		if !strings.Contains(said, w) {
			t.Errorf("cancel said %q; want %q", said, w)
		}
	}
	recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_external_cancel_kept.json")

	repair()
	// A run name Temporal and the bucket do not know (a typo) is refused.
	if _, _, err := run("checkpoint", "store-kept", name+"-typo", kept[0]); err == nil || !strings.Contains(err.Error(), "no run "+name+"-typo here") {
		t.Errorf("store-kept for an unknown run: %v; want it refused", err)
	}
	out, _ := cli("checkpoint", "store-kept", name, kept[0])
	if !strings.Contains(out, fmt.Sprintf("stored run %s's checkpoint at step %d", name, held.Step)) {
		t.Errorf("store-kept said %q", out)
	}
	_, said = cli("run", "-f", job, "--resume", "--wait")
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

// TestExternalPauseStopsAtAKeptCheckpoint: a job is paused once (held at
// the checkpoint the run asked for, stored) and resumed; its bucket then
// refuses writes, and it is paused again. The checkpoint that second
// pause asks for is refused; node-1 keeps it, and the world stops there
// at once — the job's next periodic checkpoint is over a hundred steps off —
// with its training up to it recorded (versionKeptForStop,
// versionKeptTrained). The run holds for its storage; once the bucket is
// repaired a resume stores the kept checkpoint and relaunches the world
// from it (the script checks the state it restores), and the job
// completes: nothing lost, no restart. Its history is the replay test's
// trainingrun_external_kept_pause.json.
func TestExternalPauseStopsAtAKeptCheckpoint(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job pause-at-a-kept-checkpoint e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-kept-pause", Nodes: 2, Steps: 350, CheckpointEvery: 300, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_MARK": dir}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	cli := cliAt(ctx, t, srv.FrontendAddr(), l.LogDir)
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a step", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step > 0
	})
	cli("pause", s.Name, "--wait", "60s")
	first := queryRun(ctx, t, c, run.GetID())
	if first.Phase != spec.PhasePaused || first.LastCkpt == nil || first.LastCkpt.Step != first.Step {
		t.Fatalf("first pause: %s at step %d (checkpoint %+v); want held at a stored checkpoint", first.Phase, first.Step, first.LastCkpt)
	}
	cli("resume", s.Name)
	// The relaunched world's rank 0 reports (the stopped world's last
	// heartbeats may still be pending on the server).
	for {
		reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
		if len(reps) == 2 && len(reps[1]) > 0 && reps[1][len(reps[1])-1].Step >= first.Step+10 {
			break
		}
		if ctx.Err() != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("the relaunched world never reached step %d", first.Step+10)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Restored (a bucket that refused reads would hold the relaunch
	// instead), the world's bucket now refuses its writes.
	repair := refuseCheckpoints(t, filepath.Join(dir, "ckpt"), s.Name)
	cli("pause", s.Name)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the hold for the storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && !st.WaitUntil.IsZero() || st.Phase == spec.PhasePaused || st.Phase == spec.PhaseCompleted
	})
	asked := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if held.Phase != spec.PhaseStorageWait || held.Step <= first.Step || held.Step >= s.CheckpointEvery || !slices.Contains(asked, held.Step) ||
		held.LastCkpt.Step != first.Step || held.CheckpointFailed == nil || held.CheckpointFailed.Step != held.Step {
		dumpLogs(t, l.LogDir)
		t.Fatalf("second pause: %s at step %d (last stored %d, refused %+v, asked %v); want a hold at the requested, refused checkpoint",
			held.Phase, held.Step, held.LastCkpt.Step, held.CheckpointFailed, asked)
	}
	awaitNoProcesses(t, "CANN_E2E_MARK="+dir, "while the run holds")
	trained := int64(0)
	for _, sg := range held.Segments {
		if !sg.Lost {
			trained = max(trained, sg.ToStep)
		}
	}
	if trained != held.Step {
		t.Errorf("training recorded up to step %d while held at %d: %+v", trained, held.Step, held.Segments)
	}

	repair()
	cli("resume", s.Name)
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 {
		t.Fatalf("ended %s at step %d, recoveries %+v; want completed without a restart", st.Phase, st.Step, st.Recoveries)
	}
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 3 || len(reps[2]) == 0 || reps[2][0].Step != held.Step+1 || reps[2][len(reps[2])-1].Step != s.Steps {
		t.Fatalf("rank-0 reports of %d launches; want a third from step %d to %d", len(reps), held.Step+1, s.Steps)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_kept_pause.json")
}

// TestExternalLossAfterAKeptRefusal: the bucket refuses a job's checkpoint
// at 100 (node-1 keeps it; a first refusal: the world goes on), and
// rank 1 crashes at 125. Before the recovery node-1 is asked to store the
// kept checkpoint (versionKeptAfterLoss, before the lost stretch is
// recorded: versionKeptLossTrained); the bucket refuses it again, so the
// recovery goes back to the stored 50, whose read the broken bucket
// refuses too: the run holds until a resume, after the bucket is
// repaired, relaunches it from 50, and it completes. Its history is the
// replay test's trainingrun_external_kept_loss.json.
func TestExternalLossAfterAKeptRefusal(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job loss-after-a-kept-refusal e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-kept-loss", Nodes: 2, Steps: 250, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_MARK": dir, "CANN_E2E_CRASH_AT": "125"}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	awaitCheckpoint(ctx, t, c, run.GetID(), 50, l.LogDir)
	repair := refuseCheckpoints(t, filepath.Join(dir, "ckpt"), s.Name)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the hold for the storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && !st.WaitUntil.IsZero() || st.Phase == spec.PhaseCompleted || st.Phase == spec.PhaseFailed
	})
	if held.Phase != spec.PhaseStorageWait || held.Step != 50 || held.LastCkpt.Step != 50 || len(held.Recoveries) != 1 ||
		held.Recoveries[0].ResumeStep != 50 || held.CheckpointFailed == nil || held.CheckpointFailed.Step < 100 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d: %q (last stored %d, refused %+v), recoveries %+v; want one recovery back to 50, the kept 100 (or later: rank 0 trains on) refused again",
			held.Phase, held.Step, held.Detail, held.LastCkpt.Step, held.CheckpointFailed, held.Recoveries)
	}
	var lost []spec.Segment // the crashed launch's
	for _, sg := range held.Segments {
		if sg.Lost && sg.Generation == 1 {
			lost = append(lost, sg)
		}
	}
	if len(lost) != 1 || lost[0].FromStep != 50 || lost[0].ToStep < 124 {
		t.Errorf("the first launch's lost segments %+v; want one, from the stored 50 (the kept 100 was refused again) to the crash", lost)
	}
	repair()
	cliAt(ctx, t, srv.FrontendAddr(), l.LogDir)("resume", s.Name)
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 1 || st.LastCkpt.Step != s.Steps {
		t.Fatalf("ended %s at step %d, recoveries %+v, last checkpoint %+v; want completed after the one recovery",
			st.Phase, st.Step, st.Recoveries, st.LastCkpt)
	}
	h := fetchHistory(ctx, t, c, run.GetID())
	// The activities in order: the first launch's two RunExternal, then a
	// StoreKept, before any other launch.
	var order []string
	for _, ev := range h.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			switch n := a.GetActivityType().GetName(); n {
			case spec.ActivityStoreKept, spec.ActivityRunExternal:
				order = append(order, n)
			}
		}
	}
	if len(order) < 5 || !slices.Equal(order[:4], []string{spec.ActivityRunExternal, spec.ActivityRunExternal, spec.ActivityStoreKept,
		spec.ActivityRunExternal}) || slices.Contains(order[3:], spec.ActivityStoreKept) {
		t.Errorf("activities %v; want the kept checkpoint asked for once, between the first two launches", order)
	}
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if last := reps[len(reps)-1]; len(reps) < 2 || len(last) == 0 || last[0].Step != 51 || last[len(last)-1].Step != s.Steps {
		t.Fatalf("rank-0 reports of %d launches; want the last from step 51 to %d", len(reps), s.Steps)
	}
	recordHistory(t, h, "trainingrun_external_kept_loss.json")
}
