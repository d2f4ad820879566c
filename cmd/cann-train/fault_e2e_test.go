package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestFaultReachesTheChunkInFlight: `cann-train fault kill` without a
// step, sent while the run's only chunk trains, kills the node inside that
// chunk (a chunk's input is fixed when it starts: the run hands the fault
// to the node's worker), and the run replaces it and completes. Before,
// the fault waited for a chunk whose range held its step, and none came.
// A step the run has passed is refused, with the step it is at, and so is
// a node that is not registered. With
// checkpoint_every below chunk_steps, chunks end at its multiples.
func TestFaultReachesTheChunkInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3", "node-4")
	// One chunk_steps for the run, checkpoints every 1000: chunks end at
	// 1000 and 2000 (versionCheckpointChunks).
	const steps, every = 3000, 1000
	s := spec.RunSpec{Name: "fault-in-flight", Nodes: 3, Steps: steps, ChunkSteps: steps, CheckpointEvery: every,
		HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	victim := membership(ctx, t, c, run.GetID(), 1)
	// Wait until the chunk trains: its first progress report.
	var at int64
	for at == 0 {
		st, live, closed, err := readProgress(ctx, c, run.GetID())
		if closed {
			t.Fatalf("run closed before its chunk trained: %+v %v", st, err)
		}
		if live != nil && live.Step > 0 {
			at = live.Step
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the chunk never reported progress")
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out, errb strings.Builder
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"fault", "kill", "--run", s.Name, "--node", victim, "--at-step", "1", "--address", addr})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "already: give an --at-step after it") {
		t.Errorf("fault kill at a passed step: %v; want it refused", err)
	}
	// A step past the run's last would never strike.
	root = newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"fault", "kill", "--run", s.Name, "--node", victim, "--at-step", "999999", "--address", addr})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "trains 3000 steps, so the fault would never strike") {
		t.Errorf("fault kill past the last step: %v; want it refused", err)
	}
	// A node the run's Cluster does not know is a typo, not a fault to keep.
	root = newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"fault", "freeze", "--run", s.Name, "--node", "node-9", "--address", addr})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "node node-9 is not registered with "+spec.DefaultClusterID) ||
		!strings.Contains(err.Error(), "registered: node-1 node-2 node-3 node-4;") {
		t.Errorf("fault freeze of an unknown node: %v; want it refused, naming the registered nodes", err)
	}
	// A node whose worker takes no faults would refuse it, and the run
	// only log that: refused here, saying why.
	startNodeWorkerAt(t, l, addr, "file://"+filepath.Join(dir, "ckpt"), "node-5", "node-5")
	waitRegistered(ctx, t, c, 5)
	root = newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"fault", "kill", "--run", s.Name, "--node", "node-5", "--address", addr})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "node node-5 takes no faults: its worker runs without --allow-fault-injection") {
		t.Errorf("fault kill of a node without --allow-fault-injection: %v; want it refused", err)
	}
	cli := cliAt(ctx, t, addr, l.LogDir)
	if got := cli("fault", "kill", "--run", s.Name, "--node", victim); !strings.Contains(got, victim+" will SIGKILL itself after step") {
		t.Errorf("fault kill said %q", got)
	}
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != steps || len(st.Recoveries) != 1 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("status %s at step %d, recoveries %+v: want completed after one", st.Phase, st.Step, st.Recoveries)
	}
	rec := st.Recoveries[0]
	if len(rec.FailedNodes) != 1 || rec.FailedNodes[0] != victim || rec.FailedAtStep <= at || rec.FailedAtStep%every == 0 || rec.ResumeStep != rec.FailedAtStep/every*every {
		t.Errorf("recovery %+v: want %s killed inside the chunk in flight (after step %d), the run rewound to the checkpoint before", rec, victim, at)
	}
	if st.Checkpoints != steps/every || st.LastCkpt == nil || st.LastCkpt.Step != steps {
		t.Errorf("%d checkpoints, last %+v: want one every %d steps", st.Checkpoints, st.LastCkpt, every)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_fault_armed.json")
}
