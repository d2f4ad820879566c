package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

func TestSearchStrategy(t *testing.T) {
	plan := spec.TopologyPlan{
		Hosts: []string{"a", "a", "b", "b"},
		Levels: []spec.TopologyLevel{
			{Name: "intra-host", AlphaNS: 5_000, BytesPerSec: 10e9},
			{Name: "inter-host", AlphaNS: 500_000, BytesPerSec: 0.1e9},
		},
	}
	for r, h := range plan.Hosts {
		plan.Compute = append(plan.Compute, spec.RankCompute{Rank: r, Host: h, Cores: 4, PerExampleNS: 50_000, OverheadNS: 10_000})
	}
	in := spec.SearchStrategyInput{Topology: plan, GradientBytes: 4 << 20, GlobalBatch: 64, MinRanks: 1, MaxRanks: 4}
	got, err := Planner{}.SearchStrategy(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	// Two ranks stay on host a's fast links; crossing to host b costs
	// 2(n−1)/n · 4 MiB at 0.1 GB/s, far more than the computation saved.
	if got.DataParallel != 2 || len(got.Candidates) != 4 || got.PredictedStepSeconds <= 0 {
		t.Fatalf("plan %+v", got)
	}
	if m := planCostModel(plan, 2); m.Alpha != 5*time.Microsecond || m.Hosts != 1 {
		t.Errorf("two ranks of host a priced at α %v over %d hosts", m.Alpha, m.Hosts)
	}
	if m := planCostModel(plan, 3); m.Alpha != 500*time.Microsecond || m.Hosts != 2 || m.IntraAlpha != 5*time.Microsecond || m.PerHost != 2 {
		t.Errorf("three ranks priced %+v", m)
	}
	in.Topology.Compute = in.Topology.Compute[:3]
	if _, err := (Planner{}).SearchStrategy(context.Background(), in); err == nil || !strings.Contains(err.Error(), "3 of 4") {
		t.Errorf("missing computation: %v", err)
	}
}
