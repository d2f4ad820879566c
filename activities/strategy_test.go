package activities

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/strategy"
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
	// The nodes' step spreads are pooled: every candidate waits for its
	// slowest rank, priced from all of them.
	spread := in
	spread.Topology.Compute = slices.Clone(plan.Compute)
	spread.Topology.Compute[1].Spread = []float64{1, 1.5}
	spread.Topology.Compute[3].Spread = []float64{2, 3}
	slow, err := Planner{}.SearchStrategy(context.Background(), spread)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range slow.Candidates {
		want := strategy.ExpectedMax([]float64{1, 1.5, 2, 3}, c.Ranks)
		if c.Straggle != want || math.Abs(c.StepSeconds-want*got.Candidates[i].StepSeconds) > 1e-12 {
			t.Errorf("candidate %+v: want straggle %v and %v× the undisturbed %+v", c, want, want, got.Candidates[i])
		}
	}
	spread.Topology.Compute[2].Spread = []float64{0.5}
	if _, err := (Planner{}).SearchStrategy(context.Background(), spread); err == nil || !strings.Contains(err.Error(), "spread") {
		t.Errorf("a spread below 1: %v", err)
	}
	in.Topology.Compute = in.Topology.Compute[:3]
	if _, err := (Planner{}).SearchStrategy(context.Background(), in); err == nil || !strings.Contains(err.Error(), "3 of 4") {
		t.Errorf("missing computation: %v", err)
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	url := "file://" + dir
	st := spec.RunStatus{RunID: "run/r", Phase: spec.PhaseCompleted, Step: 42, WeightsSHA256: "abc"}
	where, err := Planner{}.WriteReport(context.Background(), spec.ReportInput{URL: url, Run: "r", Status: st})
	if err != nil || where != url+" runs/r/report.json" {
		t.Fatalf("WriteReport = %q, %v", where, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "runs", "r", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back spec.RunStatus
	if err := json.Unmarshal(b, &back); err != nil || back.Step != 42 || back.WeightsSHA256 != "abc" {
		t.Errorf("report reads back as %+v (%v)", back, err)
	}
	if _, err := (Planner{}).WriteReport(context.Background(), spec.ReportInput{Run: "r", Status: st}); err == nil {
		t.Error("a report without a bucket was accepted")
	}
}

func TestProbeTurns(t *testing.T) {
	a, b := float32(1), float32(2)
	for _, tc := range []struct {
		name            string
		keys            []float32
		rank, cores     int
		turn, wantTurns int
	}{
		{"one host, a core each: all at once", []float32{a, a}, 1, 2, 0, 1},
		{"three ranks on two cores: the third alone", []float32{a, a, a}, 2, 2, 1, 2},
		{"three ranks on two cores: the second with the first", []float32{a, a, a}, 1, 2, 0, 2},
		{"one core: one at a time", []float32{a, a, a}, 2, 1, 2, 3},
		{"hosts count apart", []float32{a, b, a, b, a}, 3, 2, 0, 2},
		{"the busiest host sets the turns", []float32{a, b, b, b}, 0, 1, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if turn, turns := probeTurns(tc.keys, tc.rank, tc.cores); turn != tc.turn || turns != tc.wantTurns {
				t.Errorf("probeTurns(%v, %d, %d) = %d, %d; want %d, %d", tc.keys, tc.rank, tc.cores, turn, turns, tc.turn, tc.wantTurns)
			}
		})
	}
}
