package main

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestFrozenNodeIsReplaced: a node that hangs (SIGSTOP: its connections
// open, its listener accepting, its worker silent) is found within the
// heartbeat timeout wherever it hangs — in a chunk, after its chunk's last
// step, or between chunks — replaced by a spare, and the run ends
// bit-identical to a fault-free one.
func TestFrozenNodeIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3", "node-4", "node-5", "node-6")
	hb := 2 * time.Second
	// Found within the heartbeat timeout of the freeze, plus a margin
	// for a loaded machine (the chunk's own start, the server's timer).
	bound := hb + 2*time.Second
	base := spec.RunSpec{Nodes: 3, Steps: 400, ChunkSteps: 50, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(hb)}.WithDefaults()
	cli := cliAt(ctx, t, addr, l.LogDir)
	start := func(name string) client.WorkflowRun {
		s := base
		s.Name = name
		return startRun(ctx, t, c, workflows.RunInput{Spec: s})
	}
	// watch reports when node's process is first seen stopped.
	watch := func(node string) <-chan time.Time {
		ch := make(chan time.Time, 1)
		p := l.Proc(node)
		go func() { ch <- p.StoppedAt(ctx, 2*time.Millisecond) }()
		return ch
	}
	weights := map[string]string{} // final weights by run
	finish := func(run client.WorkflowRun, frozen string, froze <-chan time.Time) spec.Recovery {
		t.Helper()
		var st spec.RunStatus
		if err := run.Get(ctx, &st); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run did not survive the freeze: %v", err)
		}
		t.Logf("recoveries %+v", st.Recoveries)
		if st.Phase != spec.PhaseCompleted || st.Step != base.Steps || len(st.Recoveries) != 1 {
			dumpLogs(t, l.LogDir)
			t.Fatalf("status %s at step %d with %d recoveries; want completed with one", st.Phase, st.Step, len(st.Recoveries))
		}
		rec := st.Recoveries[0]
		if len(rec.FailedNodes) != 1 || rec.FailedNodes[0] != frozen || len(rec.Replacement) != 1 || slices.Contains(st.Nodes, frozen) {
			t.Errorf("recovery %+v, nodes %v: want %s replaced by a spare", rec, st.Nodes, frozen)
		}
		at := <-froze
		if at.IsZero() {
			t.Fatalf("%s was never seen stopped", frozen)
		}
		if d := rec.SeenAt.Sub(at); d > bound {
			t.Errorf("freeze of %s found %v after it; want within %v (heartbeat timeout %v)", frozen, d, bound, hb)
		}
		weights[run.GetID()] = st.WeightsSHA256
		return rec
	}

	// In a chunk: rank 1 hangs after step 130 (checkpoints every 50).
	run := start("frozen-in-chunk")
	froze := watch("node-2")
	cli("fault", "freeze", "--run", "frozen-in-chunk", "--node", "node-2", "--at-step", "130")
	rec := finish(run, "node-2", froze)
	// (A fault armed after the node passed step 130 — the CLI refuses only
	// a step the run's last heartbeat had passed — strikes at its next
	// step: the chunk then reached 131 or so, still before its end at 150.)
	if rec.ResumeStep != 100 || rec.FailedAtStep < 100 || rec.FailedAtStep >= 150 || rec.LostSteps != rec.FailedAtStep-100 {
		t.Errorf("recovery %+v: want a rewind to 100 from the step the chunk had reached (100–149)", rec)
	}

	// After its chunk's last step: rank 2 hangs once step 150 is done,
	// before reporting it. The others finished the chunk, rank 0 saved it:
	// kept, no step lost.
	after := start("frozen-after-chunk")
	victim := membership(ctx, t, c, after.GetID(), 2)
	froze = watch(victim)
	cli("fault", "freeze", "--run", "frozen-after-chunk", "--node", victim, "--at-step", "150")
	rec = finish(after, victim, froze)
	if rec.FailedAtStep != 150 || rec.ResumeStep != 150 || rec.LostSteps != 0 || !strings.Contains(rec.Reason, "stopped heartbeating") {
		t.Errorf("recovery %+v: want the silent node's chunk to 150 kept (resume at 150, 0 lost)", rec)
	}

	// Between chunks: the run is paused at a chunk boundary, rank 1's
	// worker hangs (no activity running), and the run resumes. The hung
	// worker's open long poll still takes its next chunk (the server
	// hands the task to the poll it holds), which then never heartbeats;
	// a worker cut off from the server would never take it (the
	// schedule-to-start timeout, also the heartbeat timeout).
	between := start("frozen-between-chunks")
	if out := cli("pause", "frozen-between-chunks", "--wait", "60s"); !strings.Contains(out, "paused at step") {
		t.Fatalf("pause: %q", out)
	}
	victim = membership(ctx, t, c, between.GetID(), 1)
	froze = watch(victim)
	if err := syscall.Kill(l.Proc(victim).Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cli("resume", "frozen-between-chunks")
	rec = finish(between, victim, froze)
	if rec.ResumeStep != rec.AtStep || rec.LostSteps != 0 {
		t.Errorf("recovery %+v: want the chunk redone from its start, nothing lost", rec)
	}

	// A fault-free run on the nodes left, same seed and batch.
	clean := start("fault-free")
	var st spec.RunStatus
	if err := clean.Get(ctx, &st); err != nil || len(st.Recoveries) != 0 || st.Step != base.Steps {
		dumpLogs(t, l.LogDir)
		t.Fatalf("reference run %+v: %v", st, err)
	}
	for id, w := range weights {
		if w != st.WeightsSHA256 {
			t.Errorf("run %s's weights %s differ from the fault-free run's %s", id, w, st.WeightsSHA256)
		}
	}
	recordHistory(t, fetchHistory(ctx, t, c, after.GetID()), "trainingrun_recovery_frozen.json")
}

// membership is the node at rank of run's current membership (from its
// status query, once it has one).
func membership(ctx context.Context, t *testing.T, c client.Client, id string, rank int) string {
	t.Helper()
	for {
		st, _, closed, err := readProgress(ctx, c, id)
		if closed {
			t.Fatalf("run %s closed: %v", id, err)
		}
		if err == nil && len(st.Nodes) > rank {
			return st.Nodes[rank]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s has no rank %d: %v", id, rank, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
