package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestShrunkRunGrowsBack: a run of 3 nodes (min_nodes 2) loses node-3 to
// a SIGKILL with no spare free and goes on with 2; the node's worker is
// started again under its ID, and at a chunk boundary after node_wait the
// run takes it back (a new generation from the checkpoint there) and
// completes on 3. `cann-train status` says both while they hold. (The run
// is paused while node-3 comes back: it trains 6,000 steps in 3 s here.)
// Its history is the replay test's trainingrun_regrow.json.
func TestShrunkRunGrowsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	// node_wait 3s: the run asks for free nodes 3 s after the shrink (at
	// most a minute); one execution (no continue-as-new) for the history.
	s := spec.RunSpec{Name: "grow-back", Nodes: 3, MinNodes: 2, Steps: 6000, ChunkSteps: 500, CheckpointEvery: 500,
		ChunksPerRun: 100, HeartbeatTimeout: spec.Duration(3 * time.Second), NodeWait: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	faultKill(ctx, t, addr, s.Name, "node-3", 730)
	cli := cliAt(ctx, t, addr, l.LogDir)
	until := func(what string, ok func(st spec.RunStatus) bool) spec.RunStatus {
		t.Helper()
		return untilStatus(ctx, t, c, run.GetID(), l.LogDir, what, func(st spec.RunStatus, _ *spec.ChunkProgress) bool { return ok(st) })
	}
	shrunk := until("the shrink", func(st spec.RunStatus) bool { return len(st.Recoveries) == 1 && len(st.Nodes) == 2 })
	if rec := shrunk.Recoveries[0]; !rec.Shrunk || !slices.Equal(rec.FailedNodes, []string{"node-3"}) || shrunk.TargetNodes != 3 {
		t.Fatalf("after the kill: recovery %+v, target %d; want node-3 lost, shrunk, 3 to grow back to", rec, shrunk.TargetNodes)
	}
	if text := cli("status", s.Name); !strings.Contains(text, "2 of 3 after losing some: free nodes are taken back at chunk boundaries") {
		t.Errorf("status while shrunk:\n%s", text)
	}
	// Hold the run at a boundary until node-3's worker is back and the
	// regrow is due (node_wait after the shrink): however fast this
	// machine trains, the run then still has steps to take on 3 nodes.
	cli("pause", s.Name, "--wait", "60s")
	gone := registryRecord(ctx, t, c, "node-3").Node.Incarnation
	if _, err := l.Start("node-3-again", "worker", "node", "--id", "node-3", "--address", addr,
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--allow-fault-injection"); err != nil {
		t.Fatal(err)
	}
	for r := registryRecord(ctx, t, c, "node-3"); r.Failed || r.Node.Incarnation == gone; r = registryRecord(ctx, t, c, "node-3") {
		select {
		case <-ctx.Done():
			t.Fatalf("node-3's worker never registered again: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// (The run's own deadline, not a stand-in for an event: it asks for
	// free nodes at the first boundary after it.)
	time.Sleep(time.Until(shrunk.Recoveries[0].ResumedAt.Add(s.NodeWait.D() + 200*time.Millisecond)))
	cli("resume", s.Name)
	grown := until("the regrow", func(st spec.RunStatus) bool { return len(st.Rescalings) == 1 })
	g := grown.Rescalings[0]
	if !g.Regrow || g.Error != "" || g.FromNodes != 2 || g.ToNodes != 3 || !slices.Equal(g.Added, []string{"node-3"}) ||
		g.ResumeStep != g.AtStep || g.AtStep <= shrunk.Recoveries[0].ResumeStep {
		t.Errorf("regrow %+v: want node-3 back as the third node at a later boundary, from its checkpoint", g)
	}
	if text := cli("status", s.Name); !strings.Contains(text, "  regrow     gen ") || strings.Contains(text, "after losing some") {
		t.Errorf("status after the regrow:\n%s", text)
	}
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Nodes) != 3 || st.TargetNodes != 0 || len(st.Recoveries) != 1 {
		t.Fatalf("final: %s at step %d on %v (target %d), recoveries %+v", st.Phase, st.Step, st.Nodes, st.TargetNodes, st.Recoveries)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_regrow.json")
}

// TestShrunkRunGrowsBackMidChunk: a run of 2 nodes (min_nodes 1) training
// 10,000,000-step chunks (about 40 minutes here) loses node-2 to a
// SIGKILL and goes on alone. While the chunk trains, the run asks the
// Cluster for a free node from when it would have at a boundary (10 s
// after the shrink), the ask waiting for one; node-2's worker is started
// again only once that ask is scheduled, and the run finds it within
// seconds, has the Cluster hold it for the run, has its chunk end early
// at a checkpoint and grows back there —
// instead of at the chunk's planned end, or (before the asks waited) at
// the next ask a minute later.
func TestShrunkRunGrowsBackMidChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "grow-mid-chunk", Nodes: 2, MinNodes: 1, Steps: 2 * chunk, ChunkSteps: chunk,
		HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk under way", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 200
	})
	if err := syscall.Kill(l.Proc("node-2").Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	shrunk := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the shrink", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Recoveries) == 1 && len(st.Nodes) == 1
	})
	untilAsking(ctx, t, c, addr, l.LogDir, s.Name, "growing back to 2 nodes")
	restarted := time.Now()
	startNodeWorker(t, l, addr, dir, "node-2-again", "node-2")
	grown := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the regrow", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Rescalings) == 1
	})
	g := grown.Rescalings[0]
	took := g.At.Sub(restarted)
	if !g.Regrow || g.Error != "" || !slices.Equal(g.Added, []string{"node-2"}) || g.AtStep <= shrunk.Recoveries[0].ResumeStep ||
		g.AtStep >= chunk || g.ResumeStep != g.AtStep || took > 30*time.Second {
		t.Fatalf("regrow %+v, %v after node-2's worker was started again; want node-2 back within the chunk, at its checkpoint, within seconds", g, took)
	}
	t.Logf("shrunk to node-1 at step %d; node-2's worker started again %v after the shrink, while the run's ask waited; grown back to 2 nodes at step %d, %v later (its chunk planned to step %d)",
		shrunk.Recoveries[0].ResumeStep, restarted.Sub(shrunk.Recoveries[0].ReplacedAt).Round(time.Millisecond), g.AtStep,
		took.Round(time.Millisecond), shrunk.Recoveries[0].ResumeStep+chunk)
	cancelAndAwait(ctx, t, c, run)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_regrow_waiting_ask.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_held_first.json")
}

// untilAsking waits until run/name's ask for a free node is under way
// and its status says so ("asking     why: an ask waits for a free node
// since …").
func untilAsking(ctx context.Context, t *testing.T, c client.Client, addr, logDir, name, why string) {
	t.Helper()
	untilScheduled(ctx, t, c, spec.RunIDPrefix+name, spec.ActivityFreeNodes)
	if text := cliAt(ctx, t, addr, logDir)("status", name); !strings.Contains(text, "asking     "+why+": an ask waits for a free node since") {
		t.Errorf("status while the ask waits:\n%s", text)
	}
}

// startNodeWorker starts a node worker process proc as node id, on the
// test's checkpoint bucket in dir.
func startNodeWorker(t *testing.T, l *dev.Launcher, addr, dir, proc, id string) {
	t.Helper()
	startNodeWorkerAt(t, l, addr, "file://"+filepath.Join(dir, "ckpt"), proc, id)
}

// startNodeWorkerAt is startNodeWorker with the checkpoint bucket ckpt.
func startNodeWorkerAt(t *testing.T, l *dev.Launcher, addr, ckpt, proc, id string) {
	t.Helper()
	if _, err := l.Start(proc, "worker", "node", "--id", id, "--address", addr, "--checkpoint-url", ckpt); err != nil {
		t.Fatal(err)
	}
}

// untilScheduled waits until the run's history has an activity of type
// activity scheduled. (Its start is not there before it ends: the server
// writes an activity's started event with its completion.)
func untilScheduled(ctx context.Context, t *testing.T, c client.Client, id, activity string) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for scheduled(fetchHistory(ctx, t, c, id), activity) == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s activity scheduled in %s's history", activity, id)
		case <-tick.C:
		}
	}
}

// scheduled counts the activities of type activity h schedules.
func scheduled(h *history.History, activity string) int {
	n := 0
	for _, ev := range h.GetEvents() {
		if ev.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
			ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == activity {
			n++
		}
	}
	return n
}

// TestTwoShrunkRunsShareTheFreedNodes: two runs on one Cluster, each
// shrunk to one node after a kill, both wait for a free node while their
// chunks train. One killed node's worker starts again: exactly one run
// takes it — the Cluster holds it for the run whose ask found it first
// (spec.UpdateHoldFree) — and the other neither takes it nor ends a chunk
// for it; the other killed node's worker starts again next, and the other
// run takes that one. Each run ends exactly one chunk early.
func TestTwoShrunkRunsShareTheFreedNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3", "node-4")
	const chunk = 10_000_000
	var runs []client.WorkflowRun
	var killed []string
	for _, name := range []string{"share-a", "share-b"} {
		s := spec.RunSpec{Name: name, Nodes: 2, MinNodes: 1, Steps: 2 * chunk, ChunkSteps: chunk,
			HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
		run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
		st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, name+"'s first chunk under way", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
			return live != nil && live.Step >= 100
		})
		runs, killed = append(runs, run), append(killed, st.Nodes[1])
	}
	for _, id := range killed {
		if err := syscall.Kill(l.Proc(id).Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range runs {
		untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the shrink", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
			return len(st.Recoveries) == 1 && len(st.Nodes) == 1
		})
		untilScheduled(ctx, t, c, run.GetID(), spec.ActivityFreeNodes)
	}
	restart := func(id string) { startNodeWorker(t, l, addr, dir, id+"-again", id) }
	grown := func(st spec.RunStatus) bool { return len(st.Rescalings) > 0 }
	restart(killed[0])
	var first, other client.WorkflowRun
	for first == nil {
		for i, run := range runs {
			if grown(queryRun(ctx, t, c, run.GetID())) {
				first, other = run, runs[1-i]
			}
		}
		select {
		case <-ctx.Done():
			dumpLogs(t, l.LogDir)
			t.Fatalf("neither run took %s back", killed[0])
		case <-time.After(50 * time.Millisecond):
		}
	}
	restart(killed[1])
	untilStatus(ctx, t, c, other.GetID(), l.LogDir, "the other run's regrow", func(st spec.RunStatus, _ *spec.ChunkProgress) bool { return grown(st) })
	for i, want := range map[client.WorkflowRun]string{first: killed[0], other: killed[1]} {
		st := queryRun(ctx, t, c, i.GetID())
		if len(st.Rescalings) != 1 || !slices.Equal(st.Rescalings[0].Added, []string{want}) || len(st.Nodes) != 2 {
			t.Errorf("%s: rescalings %+v, nodes %v; want %s taken back, and only it", i.GetID(), st.Rescalings, st.Nodes, want)
		}
		if ends := scheduled(fetchHistory(ctx, t, c, i.GetID()), spec.ActivityEndChunk); ends != 1 {
			t.Errorf("%s ended %d chunks early; want 1, for the node it took", i.GetID(), ends)
		}
	}
	t.Logf("%s took %s back first, %s took %s", first.GetID(), killed[0], other.GetID(), killed[1])
	for _, run := range runs {
		cancelAndAwait(ctx, t, c, run)
	}
}

// TestDrainedNodeIsReplacedMidChunk: a run on node-1 and node-2 that
// cannot shrink (min_nodes 2) has node-2 drained while no node is free:
// its chunk ends early for the drain, and the boundary keeps node-2 (the
// status says so) and trains on. While that chunk trains the run asks for
// a replacement (node_wait 3 s after the boundary, then waiting for one);
// node-3's worker starts: the ask finds it, the chunk ends early, and
// node-3 takes node-2's rank within seconds, at a checkpoint.
// Its history is the replay test's trainingrun_evict_mid_chunk.json.
func TestDrainedNodeIsReplacedMidChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "evict-mid-chunk", Nodes: 2, MinNodes: 2, Steps: 3 * chunk, ChunkSteps: chunk,
		HeartbeatTimeout: spec.Duration(3 * time.Second), NodeWait: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk under way", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 200
	})
	cli := cliAt(ctx, t, addr, l.LogDir)
	cli("nodes", "drain", "node-2", "--reason", "swap the disk")
	kept := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the boundary that kept node-2", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Rescalings) == 1
	})
	if r := kept.Rescalings[0]; !strings.Contains(r.Error, "no free node to take its place; training on with it, asking again every 3s") ||
		!slices.Equal(kept.Nodes, []string{"node-1", "node-2"}) || !slices.Equal(kept.Evicting, []string{"node-2"}) {
		t.Fatalf("after the drain: %+v, nodes %v, evicting %v; want node-2 kept, the run asking every 3 s", r, kept.Nodes, kept.Evicting)
	}
	untilAsking(ctx, t, c, addr, l.LogDir, s.Name, "replacing node-2")
	started := time.Now()
	startNodeWorker(t, l, addr, dir, "node-3", "node-3")
	moved := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the move to node-3", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Rescalings) == 2
	})
	m := moved.Rescalings[1]
	took := m.At.Sub(started)
	if m.Error != "" || !slices.Equal(m.Added, []string{"node-3"}) || !slices.Equal(m.Removed, []string{"node-2"}) ||
		!slices.Equal(moved.Nodes, []string{"node-1", "node-3"}) || len(moved.Evicting) != 0 ||
		m.AtStep >= kept.Rescalings[0].AtStep+chunk || m.ResumeStep != m.AtStep || took > 30*time.Second {
		t.Fatalf("move %+v, nodes %v, evicting %v, %v after node-3's worker was started; want node-3 in node-2's rank within the chunk, at its checkpoint, within seconds",
			m, moved.Nodes, moved.Evicting, took)
	}
	t.Logf("node-2 drained and kept at step %d; node-3's worker started while the run's ask waited; moved to node-3 at step %d, %v later",
		kept.Rescalings[0].AtStep, m.AtStep, took.Round(time.Millisecond))
	cancelAndAwait(ctx, t, c, run)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_evict_mid_chunk.json")
}
