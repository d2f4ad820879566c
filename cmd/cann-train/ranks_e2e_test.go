package main

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestRanksPerNodeRealRun: two node-worker processes training two ranks
// each — one of them SIGKILLed mid-chunk and replaced by a spare, which
// takes over both of its ranks — end with exactly the weights of four
// processes training one rank each: the same world, global batch and rank
// order.
func TestRanksPerNodeRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3", "node-4", "node-5")
	run := func(name string, nodes, perNode int, kill string) spec.RunStatus {
		t.Helper()
		s := spec.RunSpec{Name: name, Nodes: nodes, RanksPerNode: perNode, BatchPerRank: 16, Steps: 300, ChunkSteps: 50,
			HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
		r := startRun(ctx, t, c, workflows.RunInput{Spec: s})
		if kill != "" {
			faultKill(ctx, t, addr, name, kill, 130)
		}
		var st spec.RunStatus
		if err := r.Get(ctx, &st); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("%s: %v", name, err)
		}
		if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || st.GlobalBatch != 64 {
			t.Fatalf("%s: %s at step %d, global batch %d", name, st.Phase, st.Step, st.GlobalBatch)
		}
		return st
	}
	two := run("two-by-two", 2, 2, "node-2")
	t.Logf("2×2: nodes %v, recoveries %+v", two.Nodes, two.Recoveries)
	if len(two.Recoveries) != 1 || !slices.Equal(two.Recoveries[0].FailedNodes, []string{"node-2"}) ||
		!slices.Equal(two.Nodes, []string{"node-1", "node-3"}) || two.RanksPerNode != 2 {
		t.Errorf("2×2: nodes %v, ranks per node %d, recoveries %+v: want node-2 (both its ranks) replaced by node-3",
			two.Nodes, two.RanksPerNode, two.Recoveries)
	}
	if crowded := runtime.NumCPU() < 2; crowded != (two.Crowded != nil) {
		t.Errorf("2 ranks per node on %d CPUs: crowded %+v", runtime.NumCPU(), two.Crowded)
	}
	four := run("four-by-one", 4, 1, "")
	if len(four.Recoveries) != 0 || len(four.Nodes) != 4 {
		t.Fatalf("4×1: nodes %v, recoveries %+v", four.Nodes, four.Recoveries)
	}
	if two.WeightsSHA256 != four.WeightsSHA256 {
		t.Errorf("2 nodes × 2 ranks (with a recovery) ended at %s, 4 × 1 at %s", two.WeightsSHA256, four.WeightsSHA256)
	}
}
