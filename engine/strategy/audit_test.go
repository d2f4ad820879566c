package strategy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestLayerSplitText: the split of the layers as the table, the HTML
// report and the JSON show it, and the Megatron-Core arguments that lay
// it out.
func TestLayerSplitText(t *testing.T) {
	for _, tc := range []struct {
		name            string
		layers, pp, vpp int
		split, flags    string
	}{
		{"no pipeline", 96, 1, 1, "96", "even"},
		{"even", 96, 8, 1, "12×8", "even"},
		{"two stages, the output layer on the last", 25, 2, 1, "13+12", "--decoder-first-pipeline-num-layers 13 --decoder-last-pipeline-num-layers 12"},
		{"BLOOM's 70 layers on 24 stages", 70, 24, 1, "2+3×22+2", "--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2"},
		{"Llama 3 interleaved", 126, 16, 8, "7+8×14+7", "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"},
		{"every stage a multiple of vpp", 100, 4, 4, "20+28×2+24", "--decoder-first-pipeline-num-layers 20 --decoder-last-pipeline-num-layers 24"},
		{"middle stages that differ", 40, 16, 1, "1+3×10+2×4+1", "--pipeline-model-parallel-layout (the stages in between differ)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := splitLayers(tc.layers, tc.pp, tc.vpp, 1, 0.6)
			if !ok {
				t.Fatalf("no split")
			}
			e := Estimate{Plan: Plan{PP: tc.pp, VPP: tc.vpp}, Stages: s, layers: tc.layers}
			if got := e.LayerSplit(); got != tc.split {
				t.Errorf("LayerSplit %q, want %q (%+v)", got, tc.split, s)
			}
			if got := e.MegatronSplit(); got != tc.flags {
				t.Errorf("MegatronSplit %q, want %q", got, tc.flags)
			}
		})
	}
}

// TestSearchSplitsMegatronCanRun: MT-NLG's 105 layers interleaved are
// split only as Megatron-Core's flags can lay out (3, 8 × 12, 6 on 14
// stages of 4 chunks was recommended before), and the table shows the
// split with a note for an uneven best plan.
func TestSearchSplitsMegatronCanRun(t *testing.T) {
	m := Model{Name: "mt-nlg", Layers: 105, Hidden: 20480, Heads: 128, Vocab: 51200, SeqLen: 2048, GlobalBatch: 2240}
	c := mustCluster(t, "selene_a100_384")
	c.Nodes = 280
	res, err := Search(context.Background(), m, c, SearchOptions{TopK: 40, Recompute: []Recompute{RecomputeSelective}, ZeRO: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res {
		if e.Plan.VPP > 1 && megatronSplitFlags(e.Stages, e.Plan.PP, e.Plan.VPP) == "" {
			t.Errorf("%s: split %s, which Megatron-Core's flags cannot lay out", e.Plan, e.LayerSplit())
		}
		if e.Split != e.LayerSplit() || e.Split == "" {
			t.Errorf("%s: JSON layer_split %q, want %q", e.Plan, e.Split, e.LayerSplit())
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, res[:1]); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if f := strings.Fields(lines[0]); f[len(f)-1] != "layers" {
		t.Errorf("header %q: want a layers column last", lines[0])
	}
	if f := strings.Fields(lines[1]); f[len(f)-1] != res[0].LayerSplit() {
		t.Errorf("row %q: want the split %s last", lines[1], res[0].LayerSplit())
	}
	if strings.Contains(res[0].LayerSplit(), "+") && !strings.Contains(b.String(), "note: the best plan splits the layers unevenly ("+res[0].LayerSplit()+"); Megatron-Core: ") {
		t.Errorf("no note on the uneven split:\n%s", b.String())
	}
	// The HTML report has the column, the Megatron-Core arguments in its
	// tooltip (html/template writes + as &#43;).
	var h strings.Builder
	if err := WriteHTML(&h, Report{Model: m, Cluster: c, Estimates: res[:1]}); err != nil {
		t.Fatal(err)
	}
	cell := `<td title="Megatron-Core: ` + res[0].MegatronSplit() + `">` + strings.ReplaceAll(res[0].LayerSplit(), "+", "&#43;") + `</td>`
	if !strings.Contains(h.String(), ">layers</th>") || !strings.Contains(h.String(), cell) {
		t.Errorf("HTML lacks the layers column or %s", cell)
	}
}

// TestSearchSaysItsCaps: a long-context model's default cp cap follows
// its sequence, and a best plan at a cap says which flag widens it (in
// the table and the JSON).
func TestSearchSaysItsCaps(t *testing.T) {
	for _, tc := range []struct {
		seq, want int
	}{{2048, 8}, {65536, 8}, {131072, 16}, {1 << 20, 128}} {
		if got := defaultMaxCP(tc.seq); got != tc.want {
			t.Errorf("defaultMaxCP(%d) = %d, want %d", tc.seq, got, tc.want)
		}
	}
	m, c := mustModel(t, "gpt3_3.6b"), mustCluster(t, "vtrain_a100_64")
	long := m
	long.SeqLen = 131072
	if got := (SearchOptions{}).withDefaults(long, c).MaxCP; got != 16 {
		t.Errorf("default cp cap for 128K tokens: %d, want 16", got)
	}
	if got := (SearchOptions{MaxCP: 2}).withDefaults(long, c).MaxCP; got != 2 {
		t.Errorf("--max-cp 2 became %d", got)
	}
	opts := SearchOptions{TopK: 1, MaxTP: 1, MaxCP: 1, MaxVPP: 1, MaxMicroBatch: 1}
	res, err := Search(context.Background(), m, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := res[0]
	for _, flag := range []string{"--max-tp 1", "--max-cp 1", "--max-mb 1"} {
		if !strings.Contains(e.AtCaps, flag) {
			t.Errorf("%s: at_search_caps %q lacks %q", e.Plan, e.AtCaps, flag)
		}
	}
	if e.Plan.PP > 1 && !strings.Contains(e.AtCaps, "--max-vpp 1") {
		t.Errorf("%s: at_search_caps %q lacks --max-vpp 1", e.Plan, e.AtCaps)
	}
	j, _ := json.Marshal(e)
	if !strings.Contains(string(j), `"at_search_caps":"`+e.AtCaps+`"`) {
		t.Errorf("JSON lacks at_search_caps: %s", j)
	}
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "note: the best plan sits at the search's bound "+e.AtCaps+": larger degrees were not tried") {
		t.Errorf("table does not say the caps:\n%s", b.String())
	}
	// Unbounded (the defaults reach every degree the cluster allows for
	// tp): no tp cap named.
	res, err = Search(context.Background(), m, c, SearchOptions{TopK: 1})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res[0].AtCaps, "--max-tp") && res[0].Plan.TP < c.DevicesPerNode {
		t.Errorf("%s: at_search_caps %q names a tp cap it is below", res[0].Plan, res[0].AtCaps)
	}
}

// TestSearchListsZeROOnceWithoutDP: without data or context parallelism
// ZeRO has nothing to shard, and the stages are one plan, listed once.
func TestSearchListsZeROOnceWithoutDP(t *testing.T) {
	m, c := mustModel(t, "gpt3_174.6b"), mustCluster(t, "vtrain_a100_64")
	res, err := Search(context.Background(), m, c, SearchOptions{TopK: 10})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range res {
		p := e.Plan
		p.ZeRO = 0
		if p.DP*p.CP == 1 {
			if prev, dup := seen[p.String()]; dup {
				t.Errorf("%s and %s: the same plan (dp·cp = 1) listed twice", prev, e.Plan)
			}
			if e.Plan.ZeRO != 0 {
				t.Errorf("%s: dp·cp = 1 listed at ZeRO-%d, want the lowest stage tried (0)", e.Plan, e.Plan.ZeRO)
			}
		}
		seen[p.String()] = e.Plan.String()
	}
}

// TestNoPlanSaysWhich: an infeasible search names its smallest plan, its
// memory, and the flags that left out what would fit.
func TestNoPlanSaysWhich(t *testing.T) {
	m, c := mustModel(t, "gpt3_174.6b"), mustCluster(t, "vtrain_a100_64")
	_, err := Search(context.Background(), m, c, SearchOptions{ZeRO: []int{0, 1}, Recompute: []Recompute{RecomputeNone}})
	if !errors.Is(err, ErrNoPlan) {
		t.Fatalf("err = %v, want ErrNoPlan", err)
	}
	for _, want := range []string{"the smallest needs", ": tp=", "(params ", "activations ",
		"left out by --zero (no ZeRO-2, 3), --recompute (no selective or full recompute): without them the best plan that fits is tp="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Unrestricted and still too big: no flags to blame.
	_, err = Search(context.Background(), mustModel(t, "gpt_1t"), c, SearchOptions{})
	if !errors.Is(err, ErrNoPlan) || strings.Contains(err.Error(), "left out by") || !strings.Contains(err.Error(), "(params ") {
		t.Errorf("1T: %v", err)
	}
}

// TestRefusedPlanJSONIsNull: a plan Check refuses was never sized; its
// JSON says null, not 0, for what it would have predicted, and still
// decodes into an Estimate.
func TestRefusedPlanJSONIsNull(t *testing.T) {
	m, c := mustModel(t, "gpt3_174.6b"), mustCluster(t, "selene_a100_384")
	p, err := ParsePlan("tp=8,pp=12,dp=4,mb=5")
	if err != nil {
		t.Fatal(err)
	}
	refused := Evaluate(m, c, p)
	j, err := json.Marshal(refused)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"step_time_s", "mfu", "tokens_per_s", "mem_per_device_gib", "time", "blast_radius"} {
		if !strings.Contains(string(j), `"`+key+`":null`) {
			t.Errorf("refused plan: %s is not null in %s", key, j)
		}
	}
	var back Estimate
	if err := json.Unmarshal(j, &back); err != nil || back.Reason != refused.Reason || back.StepTimeS != 0 {
		t.Errorf("decoded back: %v, %+v", err, back)
	}
	// A plan that runs, or one sized and out of memory, keeps its numbers.
	for _, plan := range []string{"tp=8,pp=12,dp=4,mb=1,recompute=full", "tp=1,pp=1,dp=384,mb=1"} {
		p, _ := ParsePlan(plan)
		j, _ := json.Marshal(Evaluate(m, c, p))
		if strings.Contains(string(j), "null") || !strings.Contains(string(j), `"step_time_s":`) {
			t.Errorf("%s: %s", plan, j)
		}
	}
}

// TestLegendAndConvention: the text table's legend names every column a
// reader cannot guess, and the FLOP convention says what it counts.
func TestLegendAndConvention(t *testing.T) {
	for _, want := range []string{"hw_TFLOP/s/dev", "mfu", "comm%", "bubble%", "blast", "layers", "Narayanan", "Korthikanti", "no causal halving"} {
		if !strings.Contains(TableLegend, want) {
			t.Errorf("legend lacks %q", want)
		}
	}
	if strings.Contains(FLOPConvention, "all keys of") || !strings.Contains(FLOPConvention, "every key in the attention's s² term (no causal halving)") {
		t.Errorf("FLOP convention: %s", FLOPConvention)
	}
}

// TestHTMLNoPlan: a report of a search that found no plan says why.
func TestHTMLNoPlan(t *testing.T) {
	m, c := mustModel(t, "gpt_1t"), mustCluster(t, "vtrain_a100_64")
	_, err := Search(context.Background(), m, c, SearchOptions{})
	var b strings.Builder
	if err := WriteHTML(&b, Report{Model: m, Cluster: c, Error: err.Error()}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "<h2>No plan</h2>") || !strings.Contains(out, "no feasible plan") || strings.Contains(out, `<table class="plans">`) {
		t.Errorf("no-plan page:\n%s", out)
	}
}

// TestAboveBandFlagged: a best plan predicted above the published MFU
// band says so (Llama-2-70B on 2,048 A100s with --overlap: 63.5%).
func TestAboveBandFlagged(t *testing.T) {
	m := Model{Name: "llama2-70b", Layers: 80, Hidden: 8192, FFNHidden: 28672, Heads: 64, KVHeads: 8, Vocab: 32000,
		SeqLen: 4096, GlobalBatch: 1024, GatedMLP: true, FlashAttention: true, NoDropout: true}
	c := mustCluster(t, "selene_a100_384")
	c.Nodes = 256
	for _, tc := range []struct {
		plan  string
		above bool
	}{
		{"tp=2,pp=1,dp=1024,mb=1,recompute=none,zero=3,sp=true,overlap=true", true},
		{"tp=2,pp=1,dp=1024,mb=1,recompute=none,zero=3,sp=true,overlap=false", false},
	} {
		e := evalPlan(t, m, c, tc.plan)
		var b strings.Builder
		if err := WriteTable(&b, []Estimate{e}); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(b.String(), "is above the 38–56% published large dense runs reach on A100/H100")
		if said != tc.above || said != (e.MFU > mfuBandHigh) {
			t.Errorf("%s: MFU %.1f%%, flagged %v:\n%s", tc.plan, 100*e.MFU, said, b.String())
		}
		if said && !strings.Contains(b.String(), "overlap prices ZeRO-3's gathers") {
			t.Errorf("%s: the note does not say why:\n%s", tc.plan, b.String())
		}
	}
}
