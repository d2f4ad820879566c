package strategy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Abs(b) }

// TestFLOPConventions pins the conventions the estimates use to the
// published closed forms (GPT shape: ffn = 4h, MHA, no experts).
func TestFLOPConventions(t *testing.T) {
	for _, name := range []string{"gpt3_3.6b", "gpt3_18.4b", "gpt3_174.6b", "bloom_176b", "gpt_1t"} {
		m := mustModel(t, name)
		B, s, L, h, V := float64(m.GlobalBatch), float64(m.SeqLen), float64(m.Layers), float64(m.Hidden), float64(m.Vocab)
		eq7 := 72 * B * s * L * h * h * (1 + s/(6*h) + V/(12*h*L))
		eq3 := 96 * B * s * L * h * h * (1 + s/(6*h) + V/(16*h*L))
		eq2 := 12 * L * h * h * (1 + 13/(12*h) + V/(12*L*h))
		if got := m.ModelFlopsPerStep(); !near(got, eq7, 1e-12) {
			t.Errorf("%s: model FLOPs %g, Korthikanti eq. 7 %g", name, got, eq7)
		}
		if got := m.HardwareFlopsPerStep(RecomputeFull); !near(got, eq3, 1e-12) {
			t.Errorf("%s: full-recompute FLOPs %g, Narayanan eq. 3 %g", name, got, eq3)
		}
		if got := m.HardwareFlopsPerStep(RecomputeNone); got != m.ModelFlopsPerStep() {
			t.Errorf("%s: no recompute must equal model FLOPs", name)
		}
		sel := m.HardwareFlopsPerStep(RecomputeSelective)
		if !(sel > eq7 && sel < eq3) {
			t.Errorf("%s: selective %g not between %g and %g", name, sel, eq7, eq3)
		}
		fa := m
		fa.FlashAttention = true
		if got := fa.HardwareFlopsPerStep(RecomputeSelective); got != fa.HardwareFlopsPerStep(RecomputeNone) {
			t.Errorf("%s with FlashAttention: selective %g executes more than no recompute %g", name, got, fa.HardwareFlopsPerStep(RecomputeNone))
		}
		if got := m.Params(); !near(got, eq2, 1e-12) {
			t.Errorf("%s: params %g, Narayanan eq. 2 (no position embedding) %g", name, got, eq2)
		}
	}
	// BLOOM's published 149.77 TFLOP/s at 104.7 s/step on 384 GPUs is eq. 3.
	bloom := mustModel(t, "bloom_176b")
	if got := bloom.HardwareFlopsPerStep(RecomputeFull) / 384 / 104.7 / 1e12; !near(got, 149.77, 0.001) {
		t.Errorf("BLOOM eq. 3 TFLOP/s = %.2f, published 149.77", got)
	}
}

func evalPlan(t *testing.T, m Model, c Cluster, s string) Estimate {
	t.Helper()
	p, err := ParsePlan(s)
	if err != nil {
		t.Fatal(err)
	}
	e := Evaluate(m, c, p)
	if e.Reason != "" && e.StepTimeS == 0 {
		t.Fatalf("%s: %s", s, e.Reason)
	}
	return e
}

func TestEstimateInvariants(t *testing.T) {
	tests := []struct{ model, cluster, plan string }{
		{"gpt3_174.6b", "selene_a100_384", "tp=8,pp=12,dp=4,mb=1,recompute=full"},
		{"gpt3_174.6b", "selene_a100_384", "tp=8,pp=12,dp=4,mb=1,recompute=selective,sp=true,vpp=2,zero=1,overlap=true"},
		{"bloom_176b", "jeanzay_a100_384", "tp=4,pp=12,dp=8,mb=2,recompute=full,zero=1"},
		{"gpt_1t", "1024_ascend910b", "tp=8,pp=32,dp=2,cp=2,mb=1,recompute=selective,sp=true,zero=1"},
		{"moe_bert", "1024_ascend910b", "tp=2,pp=2,dp=256,ep=16,mb=4,recompute=none,sp=true,zero=3"},
		{"gpt3_3.6b", "local_cpu", "tp=1,pp=1,dp=2,mb=2,recompute=full,zero=2"},
	}
	for _, tc := range tests {
		t.Run(tc.model+"/"+tc.plan, func(t *testing.T) {
			m, c := mustModel(t, tc.model), mustCluster(t, tc.cluster)
			e := evalPlan(t, m, c, tc.plan)
			if e2 := evalPlan(t, m, c, tc.plan); e2 != e {
				t.Fatal("Evaluate is not deterministic")
			}
			tb := e.Time
			sum := tb.ComputeS + tb.TPCommS + tb.CPCommS + tb.EPCommS + tb.PPCommS + tb.DPCommS + tb.BubbleS + tb.OptimizerS
			if !near(sum, e.StepTimeS, 1e-9) {
				t.Errorf("breakdown sums to %g, step %g: %+v", sum, e.StepTimeS, tb)
			}
			mem := e.Mem.ParamsGiB + e.Mem.GradsGiB + e.Mem.OptimizerGiB + e.Mem.ActivationsGiB
			if !near(mem, e.MemPerDeviceGiB, 1e-9) {
				t.Errorf("memory breakdown sums to %g, total %g", mem, e.MemPerDeviceGiB)
			}
			if !near(e.MemHeadroomGiB, c.Device.MemoryGiB-c.ReservedGiB-e.MemPerDeviceGiB, 1e-9) {
				t.Errorf("headroom %g", e.MemHeadroomGiB)
			}
			for name, v := range map[string]float64{"comm_share": e.CommShare, "bubble_share": e.BubbleShare, "mfu": e.MFU, "hfu": e.HFU} {
				if !(v >= 0 && v < 1) {
					t.Errorf("%s = %g out of [0,1)", name, v)
				}
			}
			if e.HFU < e.MFU {
				t.Errorf("hfu %g < mfu %g", e.HFU, e.MFU)
			}
			if !near(e.TokensPerS, float64(m.GlobalBatch*m.SeqLen)/e.StepTimeS, 1e-12) ||
				!near(e.TokensPerSPerDevice*float64(c.Devices()), e.TokensPerS, 1e-12) {
				t.Errorf("throughput inconsistent: %+v", e)
			}
			if e.Microbatches != m.GlobalBatch/(e.Plan.DP*e.Plan.MicroBatch) {
				t.Errorf("microbatches %d", e.Microbatches)
			}
			t.Logf("%.2f s, %.1f TFLOP/s, MFU %.1f%%, %.1f GiB, comm %.1f%%, bubble %.1f%%", e.StepTimeS, e.TFLOPSPerDevice,
				100*e.MFU, e.MemPerDeviceGiB, 100*e.CommShare, 100*e.BubbleShare)
		})
	}
}

// TestCostModelDirections checks that each knob moves the estimate the way
// the formulas say it must.
func TestCostModelDirections(t *testing.T) {
	m, c := mustModel(t, "gpt3_174.6b"), mustCluster(t, "selene_a100_384")
	base := "tp=8,pp=12,dp=4,mb=1,"
	states := func(e Estimate) float64 { return e.Mem.ParamsGiB + e.Mem.GradsGiB + e.Mem.OptimizerGiB }

	// ZeRO stages shard more and more model state (without a pipeline: a
	// pipeline's ZeRO-3 keeps its stage gathered where that fits, see
	// TestZeRO3InAPipeline).
	prev := math.Inf(1)
	for _, z := range []string{"0", "1", "2", "3"} {
		e := evalPlan(t, m, c, "tp=8,pp=1,dp=48,mb=1,recompute=full,zero="+z)
		if s := states(e); s >= prev {
			t.Errorf("zero=%s: model states %.2f GiB not below %.2f", z, s, prev)
		} else {
			prev = s
		}
	}
	// Recompute trades activation memory for time.
	none := evalPlan(t, m, c, base+"recompute=none")
	sel := evalPlan(t, m, c, base+"recompute=selective")
	full := evalPlan(t, m, c, base+"recompute=full")
	if !(none.Mem.ActivationsGiB > sel.Mem.ActivationsGiB && sel.Mem.ActivationsGiB > full.Mem.ActivationsGiB) {
		t.Errorf("activations none/selective/full: %.1f %.1f %.1f", none.Mem.ActivationsGiB, sel.Mem.ActivationsGiB, full.Mem.ActivationsGiB)
	}
	if !(none.StepTimeS < sel.StepTimeS && sel.StepTimeS < full.StepTimeS) {
		t.Errorf("time none/selective/full: %.2f %.2f %.2f", none.StepTimeS, sel.StepTimeS, full.StepTimeS)
	}
	// Full recompute costs about a third more layer compute (4 passes vs 3).
	if r := full.Time.ComputeS / none.Time.ComputeS; r < 1.25 || r > 1.36 {
		t.Errorf("full/none compute ratio %.3f, want ≈ 4/3", r)
	}
	// Sequence parallelism shards the replicated activations.
	if sp := evalPlan(t, m, c, base+"recompute=selective,sp=true"); sp.Mem.ActivationsGiB >= sel.Mem.ActivationsGiB {
		t.Errorf("SP activations %.2f not below %.2f", sp.Mem.ActivationsGiB, sel.Mem.ActivationsGiB)
	}
	// Interleaving shrinks the bubble by about vpp.
	v2 := evalPlan(t, m, c, base+"recompute=full,vpp=2")
	if r := v2.Time.BubbleS / full.Time.BubbleS; r < 0.45 || r > 0.6 {
		t.Errorf("vpp=2 bubble ratio %.2f, want ≈ 1/2", r)
	}
	if v2.Time.PPCommS <= full.Time.PPCommS {
		t.Error("interleaving must add point-to-point traffic")
	}
	// Bubble ≈ (p-1)/(m+p-1) of the pipeline for near-uniform stages.
	want := 11.0 / (384 + 11)
	if got := full.Time.BubbleS / (full.StepTimeS - full.Time.DPCommS - full.Time.OptimizerS); math.Abs(got-want) > 0.01 {
		t.Errorf("bubble fraction %.4f, want ≈ %.4f", got, want)
	}
	// Overlapping gradient reduction hides it.
	if ov := evalPlan(t, m, c, base+"recompute=full,overlap=true"); ov.Time.DPCommS >= full.Time.DPCommS {
		t.Errorf("overlap: dp comm %.3f not below %.3f", ov.Time.DPCommS, full.Time.DPCommS)
	}
	// Bytes per parameter is a parameter: 16 B/param states are 16/18 of 18.
	m16 := m
	m16.Precision = Precision{Param: 2, Grad: 2, Optimizer: 12}
	if r := states(Evaluate(m16, c, full.Plan)) / states(full); !near(r, 16.0/18, 1e-9) {
		t.Errorf("16 vs 18 B/param ratio %.4f", r)
	}
	// Blast radius: one replica without ZeRO, everything with it.
	if full.BlastRadius != 96 {
		t.Errorf("blast radius %d, want tp·pp = 96", full.BlastRadius)
	}
	if z1 := evalPlan(t, m, c, base+"recompute=full,zero=1"); z1.BlastRadius != 384 {
		t.Errorf("zero=1 blast radius %d, want 384", z1.BlastRadius)
	}
	// A plan that does not fit says so.
	if e := evalPlan(t, m, c, "tp=1,pp=1,dp=384,mb=1,recompute=none"); e.Feasible || e.MemHeadroomGiB >= 0 {
		t.Errorf("174.6B without model parallelism fits: %+v", e.Mem)
	}
}

func TestMoEAndContextParallel(t *testing.T) {
	m, c := mustModel(t, "moe_bert"), mustCluster(t, "1024_ascend910b")
	local := evalPlan(t, m, c, "tp=1,pp=1,dp=1024,ep=1,mb=4,recompute=none")
	spread := evalPlan(t, m, c, "tp=1,pp=1,dp=1024,ep=64,mb=4,recompute=none")
	if local.Time.EPCommS != 0 || spread.Time.EPCommS <= 0 {
		t.Errorf("EP comm: ep=1 %.3f, ep=64 %.3f", local.Time.EPCommS, spread.Time.EPCommS)
	}
	if spread.Mem.ParamsGiB >= local.Mem.ParamsGiB {
		t.Error("expert parallelism must shard expert parameters")
	}
	dropless := m
	dropless.CapacityFactor = 0
	if e := Evaluate(dropless, c, spread.Plan); e.StepTimeS >= spread.StepTimeS {
		t.Errorf("capacity padding must cost time: dropless %.3f, cf 1.25 %.3f", e.StepTimeS, spread.StepTimeS)
	}
	g, a := mustModel(t, "gpt_1t"), mustCluster(t, "dgx_h100_1024")
	cp1 := evalPlan(t, g, a, "tp=8,pp=16,dp=8,cp=1,mb=1,recompute=selective,sp=true,zero=1")
	cp2 := evalPlan(t, g, a, "tp=8,pp=16,dp=4,cp=2,mb=1,recompute=selective,sp=true,zero=1")
	if cp2.Mem.ActivationsGiB >= cp1.Mem.ActivationsGiB {
		t.Errorf("CP must shard activations: %.2f vs %.2f", cp2.Mem.ActivationsGiB, cp1.Mem.ActivationsGiB)
	}
}

func TestEvaluateBand(t *testing.T) {
	m, c := mustModel(t, "gpt_1t"), mustCluster(t, "1024_ascend910b")
	p, _ := ParsePlan("tp=8,pp=16,dp=8,mb=1,recompute=full,zero=1")
	band, err := EvaluateBand(m, c, p, AscendA2Profiles())
	if err != nil {
		t.Fatal(err)
	}
	if len(band) != 3 || !(band[0].StepTimeS < band[1].StepTimeS && band[1].StepTimeS < band[2].StepTimeS) {
		t.Fatalf("band not ordered 376T < 313T < 280T: %.2f %.2f %.2f", band[0].StepTimeS, band[1].StepTimeS, band[2].StepTimeS)
	}
	t.Logf("1T on 1024 Atlas A2, %s: %.1f–%.1f s/step", p, band[0].StepTimeS, band[2].StepTimeS)
	if _, err := EvaluateBand(m, c, p, []string{"nope"}); err == nil {
		t.Error("unknown profile accepted")
	}
}

func TestSplitLayers(t *testing.T) {
	tests := []struct {
		name            string
		layers, pp, vpp int
		logits          float64 // in layers
		want            StageSplit
		ok              bool
	}{
		{"one stage", 24, 1, 1, 0.5, StageSplit{24, 24, 24}, true},
		{"even, no logits", 96, 8, 1, 0, StageSplit{12, 12, 12}, true},
		{"even split kept, the output layer on top", 24, 4, 1, 1.5, StageSplit{6, 6, 6}, true},
		{"uneven: the last stage lightened for the output layer", 26, 4, 1, 1.5, StageSplit{7, 7, 5}, true},
		{"uneven, no output layer: the first stage takes the shortfall", 30, 4, 1, 0, StageSplit{6, 8, 8}, true},
		{"Llama 3 405B without interleaving: first and last one layer short", 126, 16, 1, 0.6, StageSplit{7, 8, 7}, true},
		{"interleaved, even", 96, 8, 3, 0.6, StageSplit{12, 12, 12}, true},
		{"Llama 3 405B: 126 layers on 16 stages of 8 chunks", 126, 16, 8, 0.6, StageSplit{7, 8, 7}, true},
		{"126 layers, 4 chunks", 126, 16, 4, 0.6, StageSplit{7, 8, 7}, true},
		// With interleaving only what Megatron-Core's flags lay out: every
		// stage a multiple of vpp (--decoder-first/last-pipeline-num-layers),
		// or the end stages one short of the others (--account-for-*):
		// 12 + 13 on 2 × 4 chunks is neither.
		{"two stages, uneven interleaving Megatron cannot run", 25, 2, 4, 0, StageSplit{}, false},
		{"MT-NLG's 105 layers on 14 stages of 4 chunks: 3, 8 × 12, 6 is not Megatron's", 105, 14, 4, 0.6, StageSplit{}, false},
		{"first/last flags: every stage a multiple of vpp", 100, 4, 4, 0, StageSplit{20, 28, 24}, true},
		{"account for the loss: the last stage one layer short", 31, 2, 4, 0.6, StageSplit{16, 16, 15}, true},
		{"too few layers for the middle chunks", 96, 12, 5, 0, StageSplit{}, false},
		{"40 layers on 16 stages: the middle ones cannot all hold 3", 40, 16, 1, 0, StageSplit{1, 3, 1}, true},
		{"the same with the output layer", 40, 16, 1, 0.6, StageSplit{1, 3, 1}, true},
		{"more stages than layers", 4, 8, 1, 0, StageSplit{}, false},
		// Each chunk holds a layer (one per end stage may hold only the
		// embedding or output layer): no more chunks than that.
		{"two stages, more chunks than layers", 24, 2, 1000, 0, StageSplit{}, false},
		{"two stages of 8 chunks for 4 layers", 4, 2, 8, 0, StageSplit{}, false},
		{"two stages of 8 chunks, 7 and 8 layers", 15, 2, 8, 0, StageSplit{7, 7, 8}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := splitLayers(tt.layers, tt.pp, tt.vpp, 1, tt.logits)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("splitLayers(%d, %d, %d) = %+v, %v; want %+v, %v", tt.layers, tt.pp, tt.vpp, got, ok, tt.want, tt.ok)
			}
			if !ok {
				return
			}
			if err := checkSplit(got, tt.layers, tt.pp, tt.vpp); err != "" {
				t.Error(err)
			}
			if tt.vpp > 1 && megatronSplitFlags(got, tt.pp, tt.vpp) == "" {
				t.Errorf("%+v on %d stages of %d chunks: no Megatron-Core flags lay it out", got, tt.pp, tt.vpp)
			}
		})
	}
}

// checkSplit says what is wrong with split s of layers on pp stages of
// vpp chunks, or "". The stages in between hold Middle layers each with
// interleaving, at most Middle (and more than Middle−1 on average)
// without it.
func checkSplit(s StageSplit, layers, pp, vpp int) string {
	if pp <= 1 {
		if s != (StageSplit{layers, layers, layers}) {
			return fmt.Sprintf("%+v: one stage of %d layers", s, layers)
		}
		return ""
	}
	if s.First < 1 || s.Middle < 1 || s.Last < 1 || s.First > s.Middle {
		return fmt.Sprintf("%+v: a stage without layers, or the first above the middle ones", s)
	}
	between := layers - s.First - s.Last
	if pp == 2 {
		if between != 0 {
			return fmt.Sprintf("%+v places %d layers, want %d", s, s.First+s.Last, layers)
		}
		return ""
	}
	if vpp > 1 {
		if between != (pp-2)*s.Middle || s.Middle%vpp != 0 {
			return fmt.Sprintf("%+v: middle stages of %d equal chunks cannot hold %d layers", s, vpp, between)
		}
		return ""
	}
	if between > (pp-2)*s.Middle || between <= (pp-2)*(s.Middle-1) {
		return fmt.Sprintf("%+v: %d middle stages of at most %d layers, the busiest full, cannot hold %d", s, pp-2, s.Middle, between)
	}
	return ""
}

// TestSplitLayersWithoutInterleaving places every layer count on every
// stage count it can take, without interleaving: a placement always
// exists, it holds every layer, and its slowest stage is never slower than
// ⌈layers/pp⌉ layers (plus the output layer when the last stage is the
// slowest).
func TestSplitLayersWithoutInterleaving(t *testing.T) {
	for _, logits := range []float64{0, 0.6, 2.5} {
		for layers := 1; layers <= 140; layers++ {
			for pp := 1; pp <= layers && pp <= 80; pp++ {
				s, ok := splitLayers(layers, pp, 1, 1, logits)
				if !ok {
					t.Fatalf("splitLayers(%d, %d, 1, logits %g): no placement", layers, pp, logits)
				}
				if err := checkSplit(s, layers, pp, 1); err != "" {
					t.Fatalf("%d layers on %d stages, logits %g: %s", layers, pp, logits, err)
				}
				slowest := math.Max(float64(s.Middle), float64(s.Last)+logits)
				if bound := float64((layers+pp-1)/pp) + logits; pp > 1 && slowest > bound+1e-12 {
					t.Fatalf("%d layers on %d stages, logits %g: %+v's slowest stage %g > %g", layers, pp, logits, s, slowest, bound)
				}
			}
		}
	}
}

// TestSearchNeverBeatsPeak searches every preset model on every preset
// cluster: no plan it returns may compute faster than the devices' peak,
// every plan's stages must hold the model's layers, and Check must accept
// every plan (the search enumerates without it).
func TestSearchNeverBeatsPeak(t *testing.T) {
	models, clusters := presetSpecs(t)
	searched := 0
	for _, m := range models {
		for _, c := range clusters {
			mn, cn := m.Name, c.Name
			res, err := Search(context.Background(), m, c, SearchOptions{TopK: 20})
			if errors.Is(err, ErrNoPlan) {
				continue
			}
			if err != nil {
				t.Fatalf("%s on %s: %v", mn, cn, err)
			}
			searched++
			for _, e := range res {
				if !(e.HFU > 0 && e.HFU < 1) || !(e.MFU > 0 && e.MFU <= e.HFU) {
					t.Errorf("%s on %s: %s predicts HFU %.3f, MFU %.3f", mn, cn, e.Config, e.HFU, e.MFU)
				}
				if err := checkSplit(e.Stages, m.Layers, e.Plan.PP, e.Plan.VPP); err != "" {
					t.Errorf("%s on %s: %s: %s", mn, cn, e.Config, err)
				}
				if err := Check(m, c, e.Plan); err != nil {
					t.Errorf("%s on %s: the search returned a plan Check refuses: %v", mn, cn, err)
				}
			}
		}
	}
	if searched < len(models) {
		t.Errorf("only %d model/cluster pairs have a plan", searched)
	}
}

func TestInFlight(t *testing.T) {
	tests := []struct {
		pp, vpp, mbs, stage int
		want                float64
	}{
		{8, 1, 64, 0, 8},
		{8, 1, 64, 7, 1},
		{8, 1, 4, 0, 4},                    // fewer micro-batches than stages
		{8, 3, 64, 0, 8 * (1 + 7.0/24)},    // Narayanan: p(1 + (p−1)/(pv))
		{8, 3, 64, 1, (8*3 + 8 - 3) / 3.0}, // two chunks fewer than the first stage
		{8, 3, 64, 7, (2*8 + 1) / 3.0},     // the last stage still warms up (v−1)p chunks
		{16, 4, 16, 0, 16},                 // all 16 micro-batches in flight
		{16, 4, 16, 1, 16},
	}
	for _, tt := range tests {
		p := Plan{PP: tt.pp, VPP: tt.vpp}
		if got := inFlight(p, tt.stage, tt.mbs); !near(got, tt.want, 1e-12) {
			t.Errorf("pp=%d vpp=%d mbs=%d stage %d: %.4f micro-batches in flight, want %.4f", tt.pp, tt.vpp, tt.mbs, tt.stage, got, tt.want)
		}
	}
}

// TestUnevenInterleaving scores Llama 3 405B's split (126 layers on 16
// stages, the first and the last one layer short) against the same model
// with 128 layers: the middle stages are the same, so the step takes no
// longer — a little less, since the even split's last stage carries the
// output layer on top of its 8 layers, which is why Llama 3 split so —
// and no stage needs more memory.
func TestUnevenInterleaving(t *testing.T) {
	c, err := PresetCluster("dgx_h100_1024")
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes = 2048
	llama := func(layers int) Model {
		return Model{Name: "llama-405b", Layers: layers, Hidden: 16384, FFNHidden: 53248, Heads: 128, KVHeads: 8, Vocab: 128256,
			SeqLen: 8192, GlobalBatch: 2048, GatedMLP: true, FlashAttention: true}.WithDefaults()
	}
	const plan = "tp=8,pp=16,dp=128,mb=1,recompute=full,sp=true,vpp=4,zero=1,overlap=true"
	uneven, even := evalPlan(t, llama(126), c, plan), evalPlan(t, llama(128), c, plan)
	if uneven.Reason != "" {
		t.Fatalf("126 layers: %s", uneven.Reason)
	}
	if want := (StageSplit{First: 7, Middle: 8, Last: 7}); uneven.Stages != want || even.Stages != (StageSplit{8, 8, 8}) {
		t.Errorf("stages %+v and %+v, want %+v and 8 each", uneven.Stages, even.Stages, want)
	}
	if r := uneven.StepTimeS / even.StepTimeS; r > 1 || r < 0.9 {
		t.Errorf("126 layers take %.3f s against %.3f s for 128 (ratio %.3f): want [0.9, 1]", uneven.StepTimeS, even.StepTimeS, r)
	}
	if uneven.MemPerDeviceGiB > even.MemPerDeviceGiB+1e-9 {
		t.Errorf("126 layers need %.2f GiB per device, 128 layers %.2f", uneven.MemPerDeviceGiB, even.MemPerDeviceGiB)
	}
	// With more micro-batches than stages the first stage holds the most
	// in flight, and its one layer less shows in the memory.
	c.Nodes = 1024
	plan64 := "tp=8,pp=16,dp=64,mb=1,recompute=full,sp=true,vpp=4,zero=1,overlap=true"
	u, e := evalPlan(t, llama(126), c, plan64), evalPlan(t, llama(128), c, plan64)
	if !(u.Mem.ActivationsGiB < e.Mem.ActivationsGiB*0.95) {
		t.Errorf("dp=64: activations %.2f GiB on 126 layers, %.2f on 128: want the first stage's 7 layers to show", u.Mem.ActivationsGiB, e.Mem.ActivationsGiB)
	}
	// Without interleaving too: the first stage's 16 micro-batches in
	// flight cover 7 layers (112 layer-micro-batches, the second stage's
	// 15 cover 8: 120) against 8 (128) for the even split, at the same
	// step time (the slowest stage holds 8 layers either way).
	plan1 := "tp=8,pp=16,dp=64,mb=1,recompute=full,sp=true,vpp=1,zero=1"
	u, e = evalPlan(t, llama(126), c, plan1), evalPlan(t, llama(128), c, plan1)
	if want := (StageSplit{First: 7, Middle: 8, Last: 7}); u.Stages != want {
		t.Errorf("vpp=1: stages %+v, want %+v", u.Stages, want)
	}
	if r := u.Mem.ActivationsGiB / e.Mem.ActivationsGiB; r > 120.0/128 || u.MemPerDeviceGiB >= e.MemPerDeviceGiB {
		t.Errorf("vpp=1: activations %.2f GiB on 126 layers, %.2f on 128 (ratio %.3f, want ≤ 120/128); %.2f GiB per device against %.2f",
			u.Mem.ActivationsGiB, e.Mem.ActivationsGiB, r, u.MemPerDeviceGiB, e.MemPerDeviceGiB)
	}
	if u.StepTimeS > e.StepTimeS {
		t.Errorf("vpp=1: 126 layers take %.3f s, 128 layers %.3f", u.StepTimeS, e.StepTimeS)
	}
}

// TestNoDropout: without dropout a layer stores no masks — 2·s·b·h bytes
// after attention and MLP and a·s²·b on the attention probabilities — and
// streams fewer bytes, so it is faster too.
func TestNoDropout(t *testing.T) {
	m := mustModel(t, "gpt3_3.6b")
	c := mustCluster(t, "vtrain_a100_64")
	const plan = "tp=1,pp=1,dp=64,mb=1,recompute=none"
	with := evalPlan(t, m, c, plan)
	m.NoDropout = true
	without := evalPlan(t, m, c, plan)
	sb, h, a, L := float64(m.SeqLen), float64(m.Hidden), float64(m.Heads), float64(m.Layers)
	want := L * sb * (2*h + a*sb) / gib // bytes of 2-byte activations, one micro-batch in flight
	if got := with.Mem.ActivationsGiB - without.Mem.ActivationsGiB; !near(got, want, 1e-9) {
		t.Errorf("dropout masks: %.4f GiB, want %.4f", got, want)
	}
	if !(without.StepTimeS < with.StepTimeS) {
		t.Errorf("without dropout %.4f s, with %.4f s: want faster", without.StepTimeS, with.StepTimeS)
	}
}

// TestZeRO2ReducesEveryMicroBatch: ZeRO-2 holds only its shard of the
// gradients, so each micro-batch's gradients are reduce-scattered before
// the next accumulates (DeepSpeed stage 2, FSDP SHARD_GRAD_OP), where
// ZeRO-1 accumulates whole gradients and reduces once per step. With one
// micro-batch the two cost the same; with m they differ by m−1
// reduce-scatters, which Overlap hides when a slot's computation is longer.
func TestZeRO2ReducesEveryMicroBatch(t *testing.T) {
	m := mustModel(t, "gpt3_18.4b") // global batch 1024
	c := mustCluster(t, "vtrain_a100_256")
	dp := func(plan string) float64 { return evalPlan(t, m, c, plan).Time.DPCommS }
	const base = "tp=8,pp=1,dp=32,recompute=full"
	one1, one2 := dp(base+",mb=32,zero=1"), dp(base+",mb=32,zero=2") // m = 1
	if !near(one2, one1, 1e-12) {
		t.Errorf("one micro-batch: ZeRO-2 %.4f s of DP communication, ZeRO-1 %.4f", one2, one1)
	}
	four1, four2 := dp(base+",mb=8,zero=1"), dp(base+",mb=8,zero=2") // m = 4
	if !near(four1, one1, 1e-12) {
		t.Errorf("ZeRO-1 reduces once per step: %.4f s with 4 micro-batches, %.4f with 1", four1, one1)
	}
	// A reduce-scatter of 4-byte gradients is 2/3 of RS + AG (2-byte
	// parameters) on the same group, latency aside.
	if rs := (four2 - four1) / 3; !near(rs, 2.0/3.0*one1, 0.02) {
		t.Errorf("ZeRO-2 with 4 micro-batches adds %.4f s per extra micro-batch, want a reduce-scatter ≈ %.4f", rs, 2.0/3.0*one1)
	}
	ov1, ov2 := dp(base+",mb=8,zero=1,overlap=true"), dp(base+",mb=8,zero=2,overlap=true")
	slot := evalPlan(t, m, c, base+",mb=8,zero=2,overlap=true").Time.ComputeS / 4
	if want := ov1 + 3*math.Max(0, 2.0/3.0*one1-slot); !near(ov2, want, 0.02) {
		t.Errorf("with overlap ZeRO-2 shows %.4f s, want %.4f (ZeRO-1 %.4f, slot %.4f s)", ov2, want, ov1, slot)
	}
}

// TestZeRO3InAPipeline: a pipeline stage keeps its parameters gathered
// across the step's micro-batches, its gradients whole and reduce-scattered
// once where that fits — the communication and peak memory of ZeRO-1 —
// else sharded (ZeRO-2's); without a pipeline, or where neither fits,
// ZeRO-3 gathers every layer for every micro-batch (DeepSpeed's stage 3)
// and holds only its shards.
func TestZeRO3InAPipeline(t *testing.T) {
	m := mustModel(t, "gpt3_18.4b")
	c := mustCluster(t, "vtrain_a100_256")
	const pipe = "tp=8,pp=2,dp=16,mb=2,recompute=full"
	z1, z3 := evalPlan(t, m, c, pipe+",zero=1"), evalPlan(t, m, c, pipe+",zero=3")
	if z3.StepTimeS != z1.StepTimeS || z3.Time.DPCommS != z1.Time.DPCommS || z3.MemPerDeviceGiB != z1.MemPerDeviceGiB {
		t.Errorf("pipelined ZeRO-3: %.4f s (DP %.4f), %.2f GiB; want ZeRO-1's %.4f s (DP %.4f), %.2f GiB",
			z3.StepTimeS, z3.Time.DPCommS, z3.MemPerDeviceGiB, z1.StepTimeS, z1.Time.DPCommS, z1.MemPerDeviceGiB)
	}
	if z3.BlastRadius != z3.Plan.Devices() {
		t.Errorf("blast radius %d, want every device (the optimizer is sharded)", z3.BlastRadius)
	}
	// Where whole gradients do not fit, sharded ones are reduce-scattered
	// every micro-batch (ZeRO-2's execution); where the gathered stage
	// does not fit either, every micro-batch gathers each layer.
	big := mustModel(t, "gpt3_174.6b")
	sel := mustCluster(t, "selene_a100_384")
	same := func(what string, a, b Estimate) {
		t.Helper()
		if a.StepTimeS != b.StepTimeS || a.Time.DPCommS != b.Time.DPCommS || a.MemPerDeviceGiB != b.MemPerDeviceGiB {
			t.Errorf("%s: %.3f s (DP %.3f), %.1f GiB against %.3f s (DP %.3f), %.1f GiB", what,
				a.StepTimeS, a.Time.DPCommS, a.MemPerDeviceGiB, b.StepTimeS, b.Time.DPCommS, b.MemPerDeviceGiB)
		}
	}
	const tight = "tp=4,pp=2,dp=48,mb=1,recompute=full"
	t1, t2, t3 := evalPlan(t, big, sel, tight+",zero=1"), evalPlan(t, big, sel, tight+",zero=2"), evalPlan(t, big, sel, tight+",zero=3")
	if t1.Feasible || !t2.Feasible {
		t.Fatalf("%s: ZeRO-1 %.1f GiB, ZeRO-2 %.1f GiB: want only ZeRO-2 to fit", tight, t1.MemPerDeviceGiB, t2.MemPerDeviceGiB)
	}
	same("ZeRO-3 where only ZeRO-2 fits, against ZeRO-2", t3, t2)
	const tighter = "tp=2,pp=2,dp=96,mb=1,recompute=full"
	u2, u3 := evalPlan(t, big, sel, tighter+",zero=2"), evalPlan(t, big, sel, tighter+",zero=3")
	if u2.Feasible || !(u3.Time.DPCommS > u2.Time.DPCommS && u3.Mem.ParamsGiB < u2.Mem.ParamsGiB/4) {
		t.Errorf("%s: ZeRO-2 %.1f GiB (feasible %v), ZeRO-3 DP %.2f s and %.1f GiB of parameters against %.2f and %.1f: want ZeRO-3 to shard and gather",
			tighter, u2.MemPerDeviceGiB, u2.Feasible, u3.Time.DPCommS, u3.Mem.ParamsGiB, u2.Time.DPCommS, u2.Mem.ParamsGiB)
	}
	const flat = "tp=8,pp=1,dp=32,mb=2,recompute=full"
	f1, f3 := evalPlan(t, m, c, flat+",zero=1"), evalPlan(t, m, c, flat+",zero=3")
	if !(f3.Time.DPCommS > 2*f1.Time.DPCommS && f3.Mem.ParamsGiB < f1.Mem.ParamsGiB/4) {
		t.Errorf("ZeRO-3 without a pipeline: DP %.3f s and %.2f GiB of parameters against ZeRO-1's %.3f s and %.2f: want per-micro-batch gathers of sharded parameters",
			f3.Time.DPCommS, f3.Mem.ParamsGiB, f1.Time.DPCommS, f1.Mem.ParamsGiB)
	}
}

// TestPricedZeRO: an estimate says which ZeRO stage it prices. A pipelined
// ZeRO-3 plan runs as ZeRO-1 where whole gradients fit, as ZeRO-2 where
// only sharded ones do, and as ZeRO-3 only where neither fits; the first
// two say so in Note, and the table shows "3→1" and the note.
func TestPricedZeRO(t *testing.T) {
	m, c := mustModel(t, "gpt3_18.4b"), mustCluster(t, "vtrain_a100_256")
	big, sel := mustModel(t, "gpt3_174.6b"), mustCluster(t, "selene_a100_384")
	for _, tc := range []struct {
		name   string
		m      Model
		c      Cluster
		plan   string
		priced int
		note   string // "" none
		label  string // the table's zero column
	}{
		{"pipelined, ZeRO-1 fits", m, c, "tp=8,pp=2,dp=16,mb=2,recompute=full,zero=3", 1,
			"zero=3 with pp > 1 is priced as ZeRO-1: a pipeline stage keeps its parameters gathered", "3→1"},
		{"pipelined, only ZeRO-2 fits", big, sel, "tp=4,pp=2,dp=48,mb=1,recompute=full,zero=3", 2,
			"zero=3 with pp > 1 is priced as ZeRO-2: a pipeline stage keeps its parameters gathered", "3→2"},
		{"pipelined, neither fits", big, sel, "tp=2,pp=2,dp=96,mb=1,recompute=full,zero=3", 3, "", "3"},
		{"no pipeline", m, c, "tp=8,pp=1,dp=32,mb=2,recompute=full,zero=3", 3, "", "3"},
		{"ZeRO-1", m, c, "tp=8,pp=2,dp=16,mb=2,recompute=full,zero=1", 1, "", "1"},
		{"refused by Check", m, c, "tp=8,pp=2,dp=16,mb=7,recompute=full,zero=3", 3, "", "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePlan(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			e := Evaluate(tc.m, tc.c, p)
			if e.PricedZeRO != tc.priced || e.Plan.ZeRO != p.ZeRO {
				t.Errorf("priced ZeRO-%d (plan %d), want %d (plan %d)", e.PricedZeRO, e.Plan.ZeRO, tc.priced, p.ZeRO)
			}
			if tc.note == "" && e.Note != "" || !strings.Contains(e.Note, tc.note) {
				t.Errorf("note %q, want %q", e.Note, tc.note)
			}
			var b strings.Builder
			if err := WriteTable(&b, []Estimate{e, e}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
			if got := strings.Fields(lines[1])[10]; got != tc.label { // #, tp, pp, dp, cp, ep, mb, vpp, sp, recompute, zero
				t.Errorf("zero column %q, want %q:\n%s", got, tc.label, b.String())
			}
			wantLines := 3 // header and two rows
			if tc.note != "" {
				wantLines++ // the note, once for both rows
				if last := lines[len(lines)-1]; last != "note: "+e.Note {
					t.Errorf("last line %q, want the note", last)
				}
			}
			if len(lines) != wantLines {
				t.Errorf("%d lines, want %d:\n%s", len(lines), wantLines, b.String())
			}
			j, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(j), fmt.Sprintf(`"priced_zero":%d`, tc.priced)) || (tc.note != "") != strings.Contains(string(j), `"note":`) {
				t.Errorf("JSON does not say what is priced: %s", j)
			}
		})
	}
}
