package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeStopsGracefully: the worker of rank 0 (the node that writes
// the run's checkpoints), told to stop (SIGTERM, as a supervisor,
// Kubernetes or `docker compose stop` does) in the middle of a long chunk,
// leaves the cluster at once — the registry says "worker stopped", and
// that stays its reason after its peers blame it (`nodes`: stopped) — but
// finishes the chunk
// with its peer and then its checkpoint upload (in the background, as
// every chunk's but the last) before it exits, cleanly, well within its
// default --stop-grace. The run moves rank 0 to the spare at that chunk
// boundary and loses no step: it resumes from the chunk's own checkpoint.
// (Before, the worker cancelled the chunk after 5 s, closed the bucket
// under the upload, and the run rewound to its start.)
func TestNodeStopsGracefully(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	cli := cliAt(ctx, t, addr, l.LogDir)
	// One long chunk (about 11 s here, at 4,500 steps/s on two nodes) and
	// a short one: the stop comes early in the first, so that most of it
	// is left when it comes — longer than the 5 s the worker used to wait.
	const chunk = 50000
	s := spec.RunSpec{Name: "stop", Nodes: 2, Steps: chunk + 1000, ChunkSteps: chunk}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 200
	})
	node1 := l.Proc("node-1")
	if err := syscall.Kill(node1.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for r := registryRecord(ctx, t, c, "node-1"); !r.Failed; r = registryRecord(ctx, t, c, "node-1") {
		select { // the Cluster takes the signal at its next workflow task
		case <-ctx.Done():
			t.Fatalf("node-1 never left the cluster: %+v", r)
		case <-node1.Done():
			t.Fatalf("node-1 exited (%v) without leaving the cluster: %+v", node1.Err(), r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-node1.Done():
	case <-ctx.Done():
		t.Fatal("node-1 did not exit")
	}
	if err := node1.Err(); err != nil {
		t.Errorf("node-1 exited with %v, want a clean exit", err)
	}
	end := awaitRun(ctx, t, run, l.LogDir)
	if end.Phase != spec.PhaseCompleted || end.Step != s.Steps {
		t.Fatalf("ended %s at step %d, want completed at %d", end.Phase, end.Step, s.Steps)
	}
	if len(end.Recoveries) != 1 {
		t.Fatalf("recoveries %+v, want one", end.Recoveries)
	}
	rec := end.Recoveries[0]
	if !slices.Equal(rec.FailedNodes, []string{"node-1"}) || !slices.Equal(rec.Replacement, []string{"node-3"}) ||
		rec.ResumeStep != chunk || rec.LostSteps != 0 {
		t.Errorf("recovery %+v; want node-1's rank on node-3 from the first chunk's checkpoint at %d, no step lost", rec, chunk)
	}
	if r := registryRecord(ctx, t, c, "node-1"); !r.Failed || r.FailReason != spec.ReasonWorkerStopped {
		t.Errorf("node-1 in the registry: failed %v, %q; want failed, %q", r.Failed, r.FailReason, spec.ReasonWorkerStopped)
	}
	listed := false
	for _, line := range strings.Split(cli("nodes"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "node-1" {
			listed = strings.HasPrefix(f[1], "stopped:")
		}
	}
	if !listed {
		t.Errorf("cann-train nodes does not list node-1 as stopped:\n%s", cli("nodes"))
	}
	log, err := os.ReadFile(filepath.Join(l.LogDir, "node-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stopping: no new chunks; finishing the one(s) in flight first", "checkpoint uploading"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("node-1's log does not say %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "chunk cancelled") {
		t.Errorf("node-1's log says the chunk was cancelled:\n%s", log)
	}
}
