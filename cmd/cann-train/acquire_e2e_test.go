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

// TestAcquireSurvivesAControlWorkerKill: a run waits for a third node
// (node_wait 5m) when the control worker serving its AcquireNodes is
// SIGKILLed; a new one starts, then the third node. The run trains on 3
// nodes within a minute: the lost activity missed its heartbeats, its
// retry took over the Update still waiting in the Cluster. (Before, the
// run waited out the activity's start-to-close timeout, node_wait + 1m,
// although the Cluster had given it the nodes.)
func TestAcquireSurvivesAControlWorkerKill(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pc := startProcessCluster(ctx, t, dir, "node-1", "node-2")
	c, l := pc.c, pc.l
	waitRegistered(ctx, t, c, 2)
	s := spec.RunSpec{Name: "waits", Nodes: 3, Steps: 400, ChunkSteps: 100, NodeWait: spec.Duration(5 * time.Minute)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the run waiting for a third node", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.Contains(st.Detail, "waiting for 3 free node(s)")
	})
	pc.replaceControl(t)
	killed := time.Now()
	if _, err := l.Start("node-3", append([]string{"worker", "node", "--id", "node-3", "--checkpoint-url", "file://" + filepath.Join(dir, "ckpt")}, pc.common...)...); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	st := untilStatus(wctx, t, c, run.GetID(), l.LogDir, "the run on 3 nodes within a minute of the kill", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Nodes) == 3
	})
	t.Logf("on %v %.1fs after the kill", st.Nodes, time.Since(killed).Seconds())
	if end := awaitRun(ctx, t, run, l.LogDir); end.Phase != spec.PhaseCompleted || end.Step != s.Steps || len(end.Recoveries) != 0 {
		t.Errorf("ended %s at step %d with recoveries %+v; want completed, none", end.Phase, end.Step, end.Recoveries)
	}
}
