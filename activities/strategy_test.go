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

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/ascend/ranktable"
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
	// Nodes of two ranks: whole nodes only, and still host a's two nodes
	// (four ranks on its four cores).
	two := in
	two.RanksPerNode = 2
	pair, err := Planner{}.SearchStrategy(context.Background(), two)
	if err != nil {
		t.Fatal(err)
	}
	var ranks []int
	for _, c := range pair.Candidates {
		ranks = append(ranks, c.Ranks)
	}
	if pair.DataParallel != 4 || pair.MaxRanks != 8 || !slices.Equal(ranks, []int{2, 4, 6, 8}) {
		t.Fatalf("2 ranks per node: plan %+v", pair)
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

// TestSearchStrategyCompressed: a compressed job's exchange is priced
// with its codec's encoded sizes and measured cost, so links too slow for
// the dense gradient become worth crossing; an auto codec stays
// uncompressed where the allreduce already fits in computation; the
// warm-up's steps are priced uncompressed; codecs the scan did not time
// are refused.
// slowLinkPlan is four hosts on a slow link (0.2 GB/s) that timed every
// codec of the ladder; with skew, host r's sign encoding is r ns/value
// slower (the slowest node's cost prices the exchange).
func slowLinkPlan(skew bool) (spec.TopologyPlan, []spec.CodecCost) {
	plan := spec.TopologyPlan{Hosts: []string{"a", "b", "c", "d"},
		Levels: []spec.TopologyLevel{{Name: "inter-host", AlphaNS: 50_000, BytesPerSec: 0.2e9}}}
	costs := []spec.CodecCost{{Codec: "sign:1024", EncodeNS: 2, DecodeNS: 1}, {Codec: "int8:256", EncodeNS: 4, DecodeNS: 1},
		{Codec: "topk:0.01", EncodeNS: 6, DecodeNS: 0.5}, {Codec: "topk:0.001", EncodeNS: 6, DecodeNS: 0.5}}
	for r, h := range plan.Hosts {
		c := slices.Clone(costs)
		if skew {
			c[0].EncodeNS += float64(r)
		}
		plan.Compute = append(plan.Compute, spec.RankCompute{Rank: r, Host: h, Cores: 4, PerExampleNS: 500_000, Codecs: c})
	}
	return plan, costs
}

func TestSearchStrategyCompressed(t *testing.T) {
	const values = 1 << 20
	plan, costs := slowLinkPlan(true)
	search := func(c *spec.StrategyCompression) *spec.StrategyPlan {
		t.Helper()
		in := spec.SearchStrategyInput{Topology: plan, GradientBytes: 4 * values, GlobalBatch: 64, MinRanks: 1, MaxRanks: 4, Compression: c}
		got, err := Planner{}.SearchStrategy(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	dense := search(nil)
	sign := search(&spec.StrategyCompression{Codec: "sign:1024", Exchange: "twophase", Steps: 100})
	if dense.DataParallel != 1 || sign.DataParallel != 4 {
		t.Fatalf("dense chose %d ranks (%s), sign %d (%s): want 1 and 4", dense.DataParallel, dense.Reason, sign.DataParallel, sign.Reason)
	}
	for i, c := range sign.Candidates {
		if c.Ranks == 1 {
			continue
		}
		enc := codec.TwoPhaseWork(&codec.Sign{Bucket: 1024}, values, c.Ranks).Compute(codec.Cost{EncodeNS: 2 + 3, DecodeNS: 1})
		if c.Codec != "sign:1024" || math.Abs(c.CodecSeconds-enc.Seconds()) > 1e-9 || c.CommSeconds-c.CodecSeconds > dense.Candidates[i].CommSeconds/10 {
			t.Errorf("sign on %d ranks: %+v; encoding should take %v, the network a tenth of the dense allreduce's %v s at most",
				c.Ranks, c, enc, dense.Candidates[i].CommSeconds)
		}
	}
	if !strings.Contains(sign.Reason, "sign:1024 compressed") {
		t.Errorf("reason %q does not name the codec", sign.Reason)
	}
	// Half the steps are the warm-up's allreduce.
	half := search(&spec.StrategyCompression{Codec: "sign:1024", Exchange: "twophase", From: 50, Steps: 100})
	for i, c := range half.Candidates {
		want := (dense.Candidates[i].CommSeconds + sign.Candidates[i].CommSeconds) / 2
		if math.Abs(c.CommSeconds-want) > 1e-9 {
			t.Errorf("%d ranks, half warm-up: comm %v s, want %v", c.Ranks, c.CommSeconds, want)
		}
	}
	// The allgather exchange sends n−1 encodings: dearer than two-phase's
	// 2(n−1)/n of one on 4 ranks.
	ag := search(&spec.StrategyCompression{Codec: "sign:1024", Exchange: "allgather", Steps: 100})
	if ag.Candidates[3].CommSeconds <= sign.Candidates[3].CommSeconds {
		t.Errorf("4 ranks: allgather exchange %v s, two-phase %v s", ag.Candidates[3].CommSeconds, sign.Candidates[3].CommSeconds)
	}
	// auto compresses where the allreduce outweighs computation …
	auto := search(&spec.StrategyCompression{Codec: "auto", Exchange: "twophase", Steps: 100})
	if auto.DataParallel < 2 || !slices.ContainsFunc(costs, func(c spec.CodecCost) bool { return c.Codec == auto.Candidates[3].Codec }) {
		t.Errorf("auto: %d ranks, 4 ranks priced with codec %q: %s", auto.DataParallel, auto.Candidates[3].Codec, auto.Reason)
	}
	// … and not where it fits.
	fast := plan
	fast.Levels = []spec.TopologyLevel{{Name: "inter-host", AlphaNS: 5_000, BytesPerSec: 100e9}}
	plan = fast
	fastDense, fastAuto := search(nil), search(&spec.StrategyCompression{Codec: "auto", Exchange: "twophase", Steps: 100})
	for i, c := range fastAuto.Candidates {
		if c.Codec != "" || c.CommSeconds != fastDense.Candidates[i].CommSeconds {
			t.Errorf("fast links, auto on %d ranks: %+v, the dense plan %+v", c.Ranks, c, fastDense.Candidates[i])
		}
	}
	// A codec the scan did not time is refused, not priced as free.
	plan.Compute[2].Codecs = plan.Compute[2].Codecs[1:]
	in := spec.SearchStrategyInput{Topology: plan, GradientBytes: 4 * values, GlobalBatch: 64, MinRanks: 1, MaxRanks: 4,
		Compression: &spec.StrategyCompression{Codec: "sign:1024", Exchange: "twophase", Steps: 100}}
	if _, err := (Planner{}).SearchStrategy(context.Background(), in); err == nil || !strings.Contains(err.Error(), "did not time codec sign:1024") {
		t.Errorf("untimed codec: %v", err)
	}
	in.Compression = &spec.StrategyCompression{Codec: "sign:1024", From: 101, Steps: 100}
	if _, err := (Planner{}).SearchStrategy(context.Background(), in); err == nil || !strings.Contains(err.Error(), "from step 101 of 100") {
		t.Errorf("warm-up past the end: %v", err)
	}
}

// TestAutoCodecSeesSlowCores: an auto codec is predicted from what its
// warm-up will measure. On undisturbed cores a codec beats the slow link's
// allreduce; where ranks share cores (or wait for a slow one) encoding and
// decoding take as much longer as computation, and auto stays
// uncompressed; a straggler slows both sides alike and changes nothing.
func TestAutoCodecSeesSlowCores(t *testing.T) {
	const values = 1 << 20
	plan, _ := slowLinkPlan(false)
	in := spec.SearchStrategyInput{Topology: plan, GradientBytes: 4 * values, GlobalBatch: 64, MinRanks: 1, MaxRanks: 4,
		Compression: &spec.StrategyCompression{Codec: "auto", Exchange: "twophase", Steps: 100}}
	pr, err := newCommPricer(in, ascend.AlgoRing)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		slow  strategy.DPSlowdown
		codec bool
	}{
		{strategy.DPSlowdown{Cores: 1, Straggle: 1}, true},
		{strategy.DPSlowdown{Cores: 40, Straggle: 1}, false},
		{strategy.DPSlowdown{Cores: 1, Straggle: 40}, true}, // a slow rank slows its encoding and the exchange alike
	} {
		c := pr.comm(4, 1e-3, tc.slow)
		if (c.Name != "") != tc.codec {
			t.Errorf("slowdown %+v: priced codec %q (codec wanted: %v)", tc.slow, c.Name, tc.codec)
		}
	}
}

// TestMeasureCodecs: auto times the ladder, each codec once, none never;
// a bad codec is refused naming it.
func TestMeasureCodecs(t *testing.T) {
	got, err := measureCodecs(context.Background(), &spec.ComputeProbe{Codecs: []string{"auto", "sign", "none"}, GradientValues: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Codec)
		if !(c.EncodeNS > 0 && c.DecodeNS > 0) {
			t.Errorf("%+v", c)
		}
	}
	if want := []string{"int8:256", "sign:1024", "topk:0.01", "topk:0.001"}; !slices.Equal(names, want) {
		t.Errorf("timed %v, want %v", names, want)
	}
	if _, err := measureCodecs(context.Background(), &spec.ComputeProbe{Codecs: []string{"zip"}, GradientValues: 1000}); err == nil || !strings.Contains(err.Error(), `codec "zip"`) {
		t.Errorf("bad codec: %v", err)
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

// TestPlanTopologyPricesEveryRank: with ranks_per_node the algorithms are
// priced for nodes × ranks ranks, a node's ranks on its host — not for the
// scanned nodes alone — and the HCCL rank table lists every rank.
func TestPlanTopologyPricesEveryRank(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	var results []spec.ProbeResult
	for r, h := range hosts {
		res := spec.ProbeResult{NodeID: "n" + string(rune('1'+r)), Rank: r, Host: h}
		if r == 0 {
			for i := range hosts {
				for j := range hosts {
					if i == j {
						continue
					}
					l := spec.LinkSample{From: i, To: j, LatencyNS: 5_000, BytesPerSec: 10e9}
					if hosts[i] != hosts[j] {
						l.LatencyNS, l.BytesPerSec = 50_000, 1e9
					}
					res.Links = append(res.Links, l)
				}
			}
		}
		results = append(results, res)
	}
	nodes := []spec.Node{{ID: "n1", CommAddr: "10.0.0.1:1", NPUIDs: []int{7, 6, 5, 4}}, {ID: "n2", CommAddr: "10.0.0.1:2", NPUIDs: []int{0, 1, 2, 3}},
		{ID: "n3", CommAddr: "10.0.0.2:1", DeviceIPs: []string{"192.168.1.1", "192.168.1.2"}}, {ID: "n4", CommAddr: "10.0.0.2:2"}}
	in := spec.PlanTopologyInput{Results: results, GradientBytes: 4 << 20, Collective: "auto", Nodes: nodes}
	one, err := Planner{}.PlanTopology(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	in.RanksPerNode = 4
	four, err := Planner{}.PlanTopology(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	// The rank table lists every rank: two servers of 8 devices (2 nodes
	// × 4 ranks), the devices of n3 at its NPU addresses.
	for _, tc := range []struct {
		plan    *spec.TopologyPlan
		perHost int
	}{{one, 2}, {four, 8}} {
		rt, err := ranktable.Parse([]byte(tc.plan.RankTable))
		if err != nil {
			t.Fatalf("rank table %q: %v", tc.plan.RankTable, err)
		}
		if len(rt.Servers) != 2 || rt.RankSize() != 2*tc.perHost || len(rt.Servers[1].Devices) != tc.perHost {
			t.Fatalf("rank table with %d per host: %+v", tc.perHost, rt)
		}
	}
	rt, _ := ranktable.Parse([]byte(four.RankTable))
	var ips []string
	for _, d := range rt.Servers[1].Devices {
		ips = append(ips, d.DeviceIP)
	}
	// (n3 names no NPU 2 or 3: its host stands in, not another NPU's IP.)
	if want := []string{"192.168.1.1", "192.168.1.2", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.2"}; !slices.Equal(ips, want) {
		t.Errorf("server b's device IPs %v, want %v", ips, want)
	}
	// Server a's nodes name their NPUs (--npu-ids): the table's device ids
	// are those, in local-rank order, as the ascend launch gives them.
	var ids []int
	for _, d := range rt.Servers[0].Devices {
		ids = append(ids, d.DeviceID)
	}
	if want := []int{7, 6, 5, 4, 0, 1, 2, 3}; !slices.Equal(ids, want) {
		t.Errorf("server a's device ids %v, want %v", ids, want)
	}
	model := planCostModel(*four, 4)
	model.PerHost *= 4
	if len(four.Predictions) == 0 || len(four.Predictions) != len(one.Predictions) {
		t.Fatalf("predictions %+v / %+v", one.Predictions, four.Predictions)
	}
	for i, p := range four.Predictions {
		a, err := ascend.ParseAlgorithm(p.Algorithm)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := model.Predict(ascend.CollAllReduce, a, 16, in.GradientBytes)
		if math.Abs(p.Seconds-want.Seconds()) > 1e-12 || p.Seconds == one.Predictions[i].Seconds {
			t.Errorf("%s: %g s with 4 ranks per node, want %g (16 ranks, 8 per host; 4 ranks: %g)",
				p.Algorithm, p.Seconds, want.Seconds(), one.Predictions[i].Seconds)
		}
	}
}
