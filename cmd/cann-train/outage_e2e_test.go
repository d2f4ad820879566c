package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestRunOutlivesAServiceOutage stops the Temporal server under a
// training run for three times its heartbeat timeout, then starts it
// again on the same database. Every node's heartbeats of that while are
// lost, and the server times both chunks out when it comes back; but the
// nodes never failed: asked, both workers answer. The run resumes on the
// same two nodes from its last checkpoint — no node marked failed, no
// wait for other nodes or a lease, no restart counted — and completes.
// (Before, it failed both nodes and waited a lease TTL for them: 24 s in
// a 20 s outage by hand.) Its history is the replay test's
// trainingrun_outage.json.
func TestRunOutlivesAServiceOutage(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	startServer := serverOnDisk(ctx, t, dir)
	srv := startServer()
	t.Cleanup(func() { srv.Stop() }) // srv changes on restart
	c := controlInProcess(ctx, t, srv)
	l := newLauncher(dir)
	defer func() { _ = l.StopAll(5 * time.Second) }()
	for _, id := range []string{"node-1", "node-2"} {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", srv.FrontendAddr(),
			"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--lease-every", "1s"); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, 2)

	hb := 2 * time.Second
	// Steps: enough to be training at step 1000 when the server stops,
	// and a few chunks after it is back (20,000 until session 44: 17 s
	// of CI spent training past the point).
	s := spec.RunSpec{Name: "outage", Nodes: 2, Steps: 4000, ChunkSteps: 500, CheckpointEvery: 500, MaxRestarts: 1,
		HeartbeatTimeout: spec.Duration(hb)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for {
		st, _, closed, err := readProgress(ctx, c, run.GetID())
		if closed {
			t.Fatalf("run ended before the outage: %+v %v", st, err)
		}
		if err == nil && st.Phase == spec.PhaseTraining && st.Step >= 1000 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the run did not reach step 1000")
		case <-time.After(50 * time.Millisecond):
		}
	}
	srv.Stop()
	time.Sleep(3 * hb) // the outage itself
	srv = startServer()

	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d: want completed", st.Phase, st.Step)
	}
	if len(st.Recoveries) != 1 {
		t.Fatalf("recoveries %+v: want one, for the outage", st.Recoveries)
	}
	rec := st.Recoveries[0]
	t.Logf("outage of %s: failure seen → same nodes again %.2fs, first step after %.2fs", 3*hb,
		rec.ReplaceSeconds, rec.ResumedAt.Sub(rec.SeenAt).Seconds())
	if !rec.Outage || len(rec.FailedNodes) != 0 || len(rec.Replacement) != 0 || !strings.Contains(rec.Reason, "every node answers now") {
		t.Errorf("recovery %+v: want the outage said, no node failed or replaced", rec)
	}
	if !slices.Equal(st.Nodes, []string{"node-1", "node-2"}) {
		t.Errorf("nodes %v: want the same two", st.Nodes)
	}
	noNodeMarkedFailed(ctx, t, c, "the service was out, not the node")
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_outage.json")
}

// noNodeMarkedFailed fails t for every node the registry has marked
// failed, saying why none should be.
func noNodeMarkedFailed(ctx context.Context, t *testing.T, c client.Client, why string) {
	t.Helper()
	reg, err := readRegistry(ctx, c, spec.DefaultClusterID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reg.Nodes {
		if r.Failed {
			t.Errorf("%s marked failed (%s): %s", r.Node.ID, r.FailReason, why)
		}
	}
}
