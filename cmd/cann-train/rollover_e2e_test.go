package main

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestClusterRolloverWhileARunWaits: the Cluster continues as new every
// few dozen events (its nodes' leases alone fill its history) while run B
// waits for the two nodes run A holds. Each time, B's waiting acquire ends
// and is asked again of the next run, and the Cluster serves the signals
// meanwhile: A's cancel frees its nodes and B trains on them within
// seconds. Before, the Cluster waited out B's node_wait serving no signal
// (every node went silent) and B failed with no live free node.
func TestClusterRolloverWhileARunWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, l, _ := startInProcessControlWith(ctx, t, t.TempDir(),
		controlSetup{cluster: &workflows.ClusterInput{State: workflows.ClusterState{MaxHistoryEvents: 40}}}, "node-1", "node-2")
	a := startRun(ctx, t, c, workflows.RunInput{Spec: spec.RunSpec{Name: "holder", Nodes: 2, Steps: 1_000_000, ChunkSteps: 200}.WithDefaults()})
	untilStatus(ctx, t, c, a.GetID(), l.LogDir, "the holder training", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseTraining && len(st.Nodes) == 2
	})
	clusterRun := func() string {
		d, err := c.DescribeWorkflowExecution(ctx, spec.DefaultClusterID, "")
		if err != nil {
			t.Fatal(err)
		}
		return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	before := clusterRun()
	b := startRun(ctx, t, c, workflows.RunInput{Spec: spec.RunSpec{Name: "waiter", Nodes: 2, Steps: 400, ChunkSteps: 200,
		NodeWait: spec.Duration(100 * time.Second)}.WithDefaults()})
	// The Cluster rolls over at least once while B waits.
	for clusterRun() == before {
		select {
		case <-ctx.Done():
			t.Fatal("the Cluster never continued as new")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := c.CancelWorkflow(ctx, a.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	st := awaitRun(ctx, t, b, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != 400 {
		t.Fatalf("waiter: %s at step %d", st.Phase, st.Step)
	}
	if d := time.Since(freed); d > 60*time.Second {
		t.Errorf("the waiter ended %v after the holder's cancel freed its nodes", d)
	}
	// The Cluster run that rolled over while B waited (serve-while-closing).
	it := c.GetWorkflowHistory(ctx, spec.DefaultClusterID, before, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &history.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	recordHistory(t, h, "cluster_rollover.json")
}
