package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestStrategyAutoRealRun (issue 5, SearchStrategy in TrainingRun): on
// the real server with node processes, the scan times every node's
// computation, SearchStrategy's plan is in the status, and the run trains
// on the data-parallel degree it chose, keeping the job's global batch.
func TestStrategyAutoRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "strategy-auto", Nodes: 3, Steps: 200, ChunkSteps: 100, Strategy: spec.StrategyAuto,
		HeartbeatTimeout: spec.Duration(5 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	st := awaitRun(ctx, t, run, l.LogDir)
	p := st.Strategy
	if st.Phase != spec.PhaseCompleted || p == nil {
		t.Fatalf("status %s, strategy %+v", st.Phase, p)
	}
	if p.DataParallel < 1 || p.DataParallel > 3 || len(p.Candidates) != 3 || p.PredictedStepSeconds <= 0 {
		t.Fatalf("plan %+v", p)
	}
	if len(st.Nodes) != p.DataParallel || st.GlobalBatch != 3*s.BatchPerRank {
		t.Errorf("trained on %v with global batch %d; the plan says %d node(s), the job %d examples per step",
			st.Nodes, st.GlobalBatch, p.DataParallel, 3*s.BatchPerRank)
	}
	// The job left min_nodes at nodes: the plan's size is its floor.
	if st.MinNodes != p.DataParallel {
		t.Errorf("min_nodes %d, want the plan's %d", st.MinNodes, p.DataParallel)
	}
	// The scan is redone on the nodes the run kept (the allreduce's
	// algorithm depends on them).
	if st.Topology == nil || len(st.Topology.Hosts) != p.DataParallel {
		t.Errorf("topology of the training nodes: %+v", st.Topology)
	}
	for _, c := range p.Candidates {
		if c.ComputeSeconds <= 0 || (c.Ranks > 1) != (c.CommSeconds > 0) {
			t.Errorf("candidate %+v: computation must be measured, and communication priced for more than one rank", c)
		}
	}
	t.Logf("%s; predicted %.0f steps/s, measured %.0f", p.Reason, 1/p.PredictedStepSeconds, st.StepsPerSec)
	// The prediction is of the speed the run then measures: within 3×
	// either way on this noisy VM (0.86–1.45× in session 12's pairs), so
	// that a model off by an order of magnitude fails.
	if r := st.StepsPerSec * p.PredictedStepSeconds; !(r > 1.0/3 && r < 3) {
		t.Errorf("measured %.0f steps/s, %.2f× the predicted %.0f", st.StepsPerSec, r, 1/p.PredictedStepSeconds)
	}
	// The scan timed computation, so the status carries the scaling
	// efficiency: positive, and (ranks on 2 cores) not above 1 by much.
	if st.ScalingEfficiency <= 0 || st.ScalingEfficiency > 1.5 {
		t.Errorf("scaling efficiency %v", st.ScalingEfficiency)
	}
	t.Logf("scaling efficiency %.2f", st.ScalingEfficiency)
	// status --rank-table writes the scanned nodes' HCCL table (and says
	// so): one device per rank of the nodes the run trained on.
	table := filepath.Join(t.TempDir(), "hccl.json")
	_, said, err := cliRun(ctx, addr)("status", s.Name, "--rank-table", table)
	if err != nil || !strings.Contains(said, "wrote the HCCL rank table of run/strategy-auto's scanned nodes to "+table) {
		t.Errorf("status --rank-table: %v %q", err, said)
	}
	if b, err := os.ReadFile(table); err != nil {
		t.Error(err)
	} else if rt, err := ranktable.Parse(b); err != nil {
		t.Errorf("rank table %s: %v\n%s", table, err, b)
	} else if rt.RankSize() != len(st.Nodes) {
		t.Errorf("rank table %s: %d ranks for %d node(s)\n%s", table, rt.RankSize(), len(st.Nodes), b)
	}
	// trainingrun_strategy.json: before compute-probe; trainingrun_strategy_scaling.json: before plan-min-nodes
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_strategy_floor.json")
}

// TestTopologyScanLosesADeadNodeRealRun: node-2's worker dies after it
// registered, before the run. The topology scan's probes to it are
// refused and the scan ends at once — node-2's own probe, which nobody
// takes, is cancelled rather than waited for (30 s to start, a minute to
// finish) — and the first chunk names node-2 and gives its rank to the
// spare.
func TestTopologyScanLosesADeadNodeRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, l, _ := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3", "node-4")
	dead := l.Proc("node-2")
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	<-dead.Done()
	s := spec.RunSpec{Name: "scan-dead-node", Nodes: 3, Steps: 200, ChunkSteps: 100, Collective: "auto", TopologyScan: true,
		HeartbeatTimeout: spec.Duration(5 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	st := awaitRun(ctx, t, run, l.LogDir)
	t.Logf("recoveries %+v", st.Recoveries)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 1 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("status %s at step %d, %d recoveries; want completed after one", st.Phase, st.Step, len(st.Recoveries))
	}
	rec := st.Recoveries[0]
	if len(rec.FailedNodes) != 1 || rec.FailedNodes[0] != "node-2" || len(rec.Replacement) != 1 || rec.Replacement[0] != "node-4" {
		t.Errorf("recovery %+v: want node-2 replaced by the spare node-4", rec)
	}
	// From the run's start: the scan and the first chunk's dial, well
	// under the probe's 30 s schedule-to-start timeout.
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	if d := rec.SeenAt.Sub(desc.GetWorkflowExecutionInfo().GetStartTime().AsTime()); d > 15*time.Second {
		t.Errorf("node-2 found %v after the run started; want the scan to end when its probes are refused", d)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_scan_lost.json")
}
