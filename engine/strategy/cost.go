package strategy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// FLOPConvention names what the FLOP figures of an Estimate count.
const FLOPConvention = "tflops_per_device/hfu: executed GEMM FLOPs incl. recompute (Narayanan eq. 3 under full recompute); mfu: model FLOPs, fwd+bwd only (Korthikanti eq. 7); " +
	"both count every key in the attention's s² term (no causal halving)"

// Estimate is the predicted cost of one plan. Times are seconds, memory
// GiB (2^30 B) per device on the busiest pipeline stage.
type Estimate struct {
	Plan   Plan   `json:"plan"`
	Config string `json:"config"` // Plan.String()
	// Feasible is false when the plan does not fit the model or cluster
	// (Reason names the field) or does not fit in device memory.
	Feasible bool   `json:"feasible"`
	Reason   string `json:"reason"`
	// PricedZeRO is the ZeRO stage whose memory and communication the
	// estimate prices: Plan.ZeRO, except for ZeRO-3 in a pipeline, which
	// keeps each stage's parameters gathered across the step's
	// micro-batches and so runs as ZeRO-1 does, or ZeRO-2 where whole
	// gradients do not fit (Note says which and why). A table shows it as
	// "3→1".
	PricedZeRO int `json:"priced_zero"`
	// Note says where the estimate prices something other than what the
	// plan names; empty otherwise.
	Note string `json:"note,omitempty"`

	StepTimeS           float64 `json:"step_time_s"`
	TokensPerS          float64 `json:"tokens_per_s"`
	TokensPerSPerDevice float64 `json:"tokens_per_s_per_device"`
	// TFLOPSPerDevice counts executed FLOPs (see FLOPConvention).
	TFLOPSPerDevice      float64 `json:"tflops_per_device"`
	ModelTFLOPSPerDevice float64 `json:"model_tflops_per_device"`
	MFU                  float64 `json:"mfu"`
	HFU                  float64 `json:"hfu"`

	MemPerDeviceGiB float64         `json:"mem_per_device_gib"`
	MemHeadroomGiB  float64         `json:"mem_headroom_gib"` // device memory - reserved - MemPerDeviceGiB
	Mem             MemoryBreakdown `json:"mem"`

	Time        TimeBreakdown `json:"time"`
	CommShare   float64       `json:"comm_share"`   // exposed communication / step time
	BubbleShare float64       `json:"bubble_share"` // pipeline fill, drain and stage imbalance / step time

	Microbatches int `json:"microbatches"`
	// Stages is how the layers lie on the pipeline stages.
	Stages StageSplit `json:"stages"`
	// Split is Stages as LayerSplit writes it ("12×8", "3+8×12+6").
	Split  string `json:"layer_split,omitempty"`
	layers int    // the model's layers (0: not known, as decoded from JSON)
	// BlastRadius is how many devices lose state that no surviving device
	// holds when one device fails: one model replica (tp·pp·max(cp,ep))
	// without ZeRO, every device with ZeRO ≥ 1 (the sharded optimizer has
	// no copy).
	BlastRadius int `json:"blast_radius"`
	// AtCaps names the search bounds the plan sits at, where a larger
	// value was not tried, as the flags that widen them ("--max-cp 8,
	// --max-vpp 8"; Search only, see Cap). A string keeps Estimate
	// comparable.
	AtCaps string `json:"at_search_caps,omitempty"`
}

// MarshalJSON writes e; for a plan refused by Check, never sized, its
// figures (step time, throughput, MFU, memory, breakdowns, stages, blast
// radius) are null rather than 0, which would read as a prediction. (A
// reader that decodes into Estimate gets the zeros back.)
func (e Estimate) MarshalJSON() ([]byte, error) {
	type plain Estimate // (without this method)
	// Unescaped: the encoder that called escapes HTML where it is asked
	// to (cann-train search's keeps "pp > 1" readable).
	marshal := func(v any) ([]byte, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		err := enc.Encode(v)
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
	}
	if e.Feasible || e.StepTimeS != 0 || e.MemPerDeviceGiB != 0 {
		return marshal(plain(e))
	}
	return marshal(struct {
		plain
		StepTimeS            any `json:"step_time_s"`
		TokensPerS           any `json:"tokens_per_s"`
		TokensPerSPerDevice  any `json:"tokens_per_s_per_device"`
		TFLOPSPerDevice      any `json:"tflops_per_device"`
		ModelTFLOPSPerDevice any `json:"model_tflops_per_device"`
		MFU                  any `json:"mfu"`
		HFU                  any `json:"hfu"`
		MemPerDeviceGiB      any `json:"mem_per_device_gib"`
		MemHeadroomGiB       any `json:"mem_headroom_gib"`
		Mem                  any `json:"mem"`
		Time                 any `json:"time"`
		CommShare            any `json:"comm_share"`
		BubbleShare          any `json:"bubble_share"`
		Microbatches         any `json:"microbatches"`
		Stages               any `json:"stages"`
		BlastRadius          any `json:"blast_radius"`
	}{plain: plain(e)})
}

// StageSplit gives the layers of the first pipeline stage, of the busiest
// stage between it and the last, and of the last (which also runs the
// output layer); all three are the model's layers without pipelining.
type StageSplit struct {
	First  int `json:"first"`
	Middle int `json:"middle"`
	Last   int `json:"last"`
}

// MemoryBreakdown splits MemPerDeviceGiB.
type MemoryBreakdown struct {
	ParamsGiB      float64 `json:"params_gib"`
	GradsGiB       float64 `json:"grads_gib"`
	OptimizerGiB   float64 `json:"optimizer_gib"`
	ActivationsGiB float64 `json:"activations_gib"` // incl. logits on the last stage
	ReservedGiB    float64 `json:"reserved_gib"`    // not in MemPerDeviceGiB
}

// TimeBreakdown splits StepTimeS along the critical path (the slowest
// pipeline stage): compute, exposed communication by kind, pipeline
// bubble, optimizer update.
type TimeBreakdown struct {
	ComputeS   float64 `json:"compute_s"`
	TPCommS    float64 `json:"tp_comm_s"`
	CPCommS    float64 `json:"cp_comm_s"`
	EPCommS    float64 `json:"ep_comm_s"`
	PPCommS    float64 `json:"pp_comm_s"`
	DPCommS    float64 `json:"dp_comm_s"` // incl. ZeRO-3 parameter gathers
	BubbleS    float64 `json:"bubble_s"`
	OptimizerS float64 `json:"optimizer_s"`
}

// Evaluate scores plan p for model m on cluster c. It never fails: a plan
// that cannot run comes back with Feasible false and Reason saying why.
// Model and cluster defaults are applied first.
func Evaluate(m Model, c Cluster, p Plan) Estimate {
	ev, err := newEvaluator(m, c)
	if err != nil {
		return Estimate{Plan: p, Config: p.String(), Reason: err.Error(), PricedZeRO: p.ZeRO}
	}
	if err := Check(ev.m, ev.c, p); err != nil {
		return Estimate{Plan: p, Config: p.String(), Reason: err.Error(), PricedZeRO: p.ZeRO}
	}
	var e Estimate
	ev.eval(p, &e)
	e.Config = p.String()
	if !e.Feasible {
		e.Reason = fmt.Sprintf("out of memory: needs %.1f GiB per device, %.1f usable (%.0f minus %.1f reserved)",
			e.MemPerDeviceGiB, ev.c.Device.MemoryGiB-ev.c.ReservedGiB, ev.c.Device.MemoryGiB, ev.c.ReservedGiB)
	}
	return e
}

// EvaluateBand evaluates p once per device profile (for example
// AscendA2Profiles()), everything else in c unchanged.
func EvaluateBand(m Model, c Cluster, p Plan, profiles []string) ([]Estimate, error) {
	out := make([]Estimate, 0, len(profiles))
	for _, name := range profiles {
		d, err := DeviceProfile(name)
		if err != nil {
			return nil, fmt.Errorf("evaluate band: %w", err)
		}
		cc := c
		cc.Device = d
		cc.ReservedGiB = 0 // re-derive from the new device
		out = append(out, Evaluate(m, cc, p))
	}
	return out, nil
}

const gib = 1 << 30

// Operator counts per layer forward pass (see layerTimes).
const (
	layerOps     = 20 // GPT layer, Megatron kernels
	moeOps       = 8  // router, top-k, permute, unpermute, all-to-alls
	selectiveOps = 5  // recomputed attention core: scores, softmax, dropout, AV, copy
	cpStepOps    = 4  // per extra context-parallel ring step: send, receive, attention, rescale
	bwdMemFactor = 1.5
)

// evaluator holds everything that depends only on the model and cluster.
type evaluator struct {
	m Model
	c Cluster

	// model, per token
	linFlops, coreFlops, expertFlops float64 // forward GEMM FLOPs of one layer
	logitFlops                       float64
	denseParams, expertParams        float64 // one layer
	embedParams                      float64
	act                              float64 // bytes per activation element (Precision.Param)
	padding                          float64 // MoE capacity padding of expert work (≥ 1)
	topK                             float64

	// device and links
	flops, hbm       float64 // sustained FLOP/s and B/s
	bwIntra, bwInter float64 // sustained B/s per device
	latIntra         float64 // s per ring step
	latInter         float64
	memCap           float64 // usable bytes
	opCost           float64 // s per operator
}

func newEvaluator(m Model, c Cluster) (*evaluator, error) {
	m, c = m.WithDefaults(), c.WithDefaults()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ev := &evaluator{m: m, c: c}
	ev.linFlops, ev.coreFlops = m.layerFlopsPerToken()
	ev.logitFlops = m.logitFlopsPerToken()
	ev.denseParams, ev.expertParams = m.layerParams()
	ev.embedParams = float64(m.Vocab) * float64(m.Hidden)
	ev.act = m.Precision.Param
	ev.padding, ev.topK = 1, 1
	if m.moe() {
		ev.topK = float64(m.TopK)
		ev.expertFlops = 2 * m.ffnMatrices() * float64(m.Hidden) * float64(m.FFNHidden) * ev.topK
		if m.CapacityFactor > 1 {
			ev.padding = m.CapacityFactor
		}
	}
	d := c.Device
	ev.flops = d.PeakTFLOPS * 1e12 * d.GEMMEfficiency
	ev.hbm = d.HBMGBps * 1e9 * d.MemoryEfficiency
	ev.bwIntra = c.IntraNodeGBps * 1e9 * c.IntraNodeEfficiency
	ev.bwInter = c.InterNodeGBps * 1e9 * c.InterNodeEfficiency
	ev.latIntra = c.IntraNodeLatencyUs * 1e-6
	ev.latInter = c.InterNodeLatencyUs * 1e-6
	ev.memCap = (d.MemoryGiB - c.ReservedGiB) * gib
	ev.opCost = d.OpOverheadUs * 1e-6
	return ev, nil
}

// group is the placement of one communication group: g members per node on
// n nodes. Ranks are laid out Megatron-style, TP fastest, then CP, then
// DP (EP inside DP), then PP.
type group struct{ g, n float64 }

func (ev *evaluator) group(stride, size int) group {
	if size <= 1 {
		return group{1, 1}
	}
	dpn := ev.c.DevicesPerNode
	if stride >= dpn {
		return group{1, float64(size)}
	}
	per := dpn / stride
	if per >= size {
		return group{float64(size), 1}
	}
	return group{float64(per), math.Ceil(float64(size) / float64(per))}
}

// Collective times for a buffer of S bytes per rank on a two-level
// topology: the intra-node ring moves (g-1)/g of the data over the fast
// fabric, the inter-node ring moves (n-1)/n of each rank's 1/g share over
// its own NIC (hierarchical algorithm; nccl-tests bus factors). Latency is
// one step latency per ring step.
func (ev *evaluator) allReduce(s float64, gr group) float64 {
	return 2 * ev.gatherLike(s, gr)
}

func (ev *evaluator) gatherLike(s float64, gr group) float64 {
	t := 0.0
	if gr.g > 1 {
		t += (gr.g-1)/gr.g*s/ev.bwIntra + (gr.g-1)*ev.latIntra
	}
	if gr.n > 1 {
		t += (gr.n-1)/gr.n*s/gr.g/ev.bwInter + (gr.n-1)*ev.latInter
	}
	return t
}

// allToAll: each rank sends S bytes in total, spread evenly; the off-node
// share leaves over the rank's own NIC.
func (ev *evaluator) allToAll(s float64, gr group) float64 {
	size := gr.g * gr.n
	if size <= 1 {
		return 0
	}
	t := (gr.g - 1) / size * s / ev.bwIntra
	t += (gr.g - 1) * ev.latIntra
	if gr.n > 1 {
		t += (size - gr.g) / size * s / ev.bwInter
		t += (size - gr.g) * ev.latInter
	}
	return t
}

// layerTimes returns the per-micro-batch, per-layer compute and
// communication of plan p.
//
// busy is the part of compute during which the layer's own TP and CP
// collectives run hidden (the backward TP all-reduces under the weight-
// gradient GEMMs, the K/V exchanges under the attention core): overlapped
// communication of other kinds (ZeRO-3 gathers, the data-parallel
// reduction) can hide only behind the rest, so that a faster device never
// predicts a slower step by hiding two transfers behind the same time.
func (ev *evaluator) layerTimes(p Plan) (compute, tp, cp, ep, busy float64) {
	m := ev.m
	t := float64(p.TP)
	h, f := float64(m.Hidden), float64(m.FFNHidden)
	s := float64(m.SeqLen)
	tok := float64(p.MicroBatch) * s / float64(p.CP) // tokens of this rank's sequence shard
	tokRepl := tok                                   // tokens whose LayerNorm/dropout run here
	if p.SP {
		tokRepl = tok / t
	}
	scale := ev.act / 2 // traffic constants below are for 2-byte activations

	// GEMMs (forward).
	lin := ev.linFlops
	if ev.padding > 1 {
		lin += (ev.padding - 1) * ev.expertFlops
	}
	gemmLin := tok * lin / t / ev.flops
	gemmCore := tok * ev.coreFlops / t / ev.flops

	// Memory-bound kernels (forward), bytes per token with fused kernels:
	// LayerNorm 4h each, bias-dropout-add 7h each (replicated over TP
	// without SP); bias-GeLU 4f or SwiGLU 6f; MoE token permutation 8h·k;
	// fused softmax + dropout over the s×s scores 13·a·s (write scores,
	// read/write softmax, read/write dropout + mask, read in AV) unless
	// FlashAttention keeps them on chip (then only Q, K, V, O stream).
	mlp := 4 * f
	if m.GatedMLP {
		mlp = 6 * f
	}
	if m.moe() {
		mlp = mlp*ev.topK*ev.padding + 8*h*ev.topK
	}
	// Without dropout a bias-add streams 6h instead of 7h (no mask), and
	// the attention core skips the dropout pass (read, write, mask: 5).
	repl, core := 22.0, 13.0
	if m.NoDropout {
		repl, core = 20, 8
	}
	bytesLin := scale * (tokRepl*repl*h + tok*mlp/t)
	var bytesCore float64
	if m.FlashAttention {
		bytesCore = scale * tok * 2 * (2*h + 2*m.kvDim()) / t
	} else {
		bytesCore = scale * tok * core * float64(m.Heads) * s / t
	}
	memLin, memCore := bytesLin/ev.hbm, bytesCore/ev.hbm
	fwdCore := gemmCore + memCore

	// Fixed per-operator cost: a layer's forward pass is about layerOps
	// operators (LayerNorm, QKV GEMM, layout copies, scores, softmax,
	// dropout, AV, projection, bias-dropout-add, LayerNorm, two MLP GEMMs,
	// activation, bias-dropout-add, TP collectives), its backward pass
	// twice as many.
	ops := float64(layerOps)
	if m.moe() {
		ops += moeOps
	}
	if p.CP > 1 { // ring attention: one attention step and one exchange per peer
		ops += cpStepOps * float64(p.CP-1)
	}
	opT := ops * ev.opCost

	// The backward pass runs twice the forward GEMM FLOPs (input and
	// weight gradients) but streams only about 1.5× the forward bytes
	// through its elementwise kernels (each reads the saved input and the
	// incoming gradient and writes one gradient).
	fwd := gemmLin + gemmCore + memLin + memCore + opT
	bwd := 2*(gemmLin+gemmCore) + bwdMemFactor*(memLin+memCore) + 2*opT
	fwdPasses := 1.0
	compute = fwd + bwd
	switch p.Recompute {
	case RecomputeFull:
		compute += fwd
		fwdPasses = 2
	case RecomputeSelective:
		if !m.FlashAttention {
			compute += fwdCore + selectiveOps*ev.opCost
		}
	}

	// Tensor parallel: two all-reduces (or RS+AG with SP, same volume) of
	// the layer's activations per forward and per backward pass.
	if p.TP > 1 {
		gr := ev.group(1, p.TP)
		one := ev.allReduce(tok*h*ev.act, gr)
		// The backward pass's two collectives run asynchronously under the
		// weight-gradient GEMMs (Megatron's async TP all-reduce).
		tp = 2*fwdPasses*one + math.Max(0, 2*one-gemmLin)
		busy += math.Min(2*one, gemmLin)
	}
	// Context parallel: all-gather K and V in each forward pass,
	// reduce-scatter their gradients in the backward pass, overlapped with
	// the attention core.
	if p.CP > 1 {
		gr := ev.group(p.TP, p.CP)
		kv := float64(p.MicroBatch) * s * 2 * m.kvDim() * ev.act / t
		one := ev.gatherLike(kv, gr)
		bwdCore := 2*gemmCore + bwdMemFactor*memCore // the backward attention core, as in bwd below
		cp = fwdPasses*math.Max(0, one-fwdCore) + math.Max(0, one-bwdCore)
		busy += fwdPasses*math.Min(one, fwdCore) + math.Min(one, bwdCore)
	}
	// Expert parallel: dispatch and combine all-to-all per pass.
	if m.moe() && p.EP > 1 {
		gr := ev.group(p.TP, p.EP)
		sent := tokRepl * ev.topK * h * ev.act * ev.padding
		ep = (2*fwdPasses + 2) * ev.allToAll(sent, gr)
	}
	return compute, tp, cp, ep, busy
}

// logitTimes is the output layer (last stage) per micro-batch: GEMM fwd +
// bwd, and the fused cross-entropy streaming the logits (≈8 B per logit
// each way in fp32).
func (ev *evaluator) logitTimes(p Plan) float64 {
	tok := float64(p.MicroBatch) * float64(ev.m.SeqLen) / float64(p.CP)
	t := float64(p.TP)
	gemm := 3 * tok * ev.logitFlops / t / ev.flops
	mem := 16 * tok * float64(ev.m.Vocab) / t / ev.hbm
	return gemm + mem
}

// splitLayers places layers on pp stages of vpp chunks each, weighing a
// layer at `layer` and the output layer (on the last stage) at `logits`;
// ok is false when no placement gives every stage a layer — with
// interleaving, every chunk of a stage but one of each end stage's. An even split
// (layers a multiple of pp·vpp) is kept, the output layer on top of the
// last stage's share: Megatron splits so by default, and DeepSpeed's
// partitioner by parameters does too (the tied embeddings weigh on both
// ends). Otherwise the stages between the first and the last hold
// ⌈rest/(pp−1)⌉ layers (vpp equal chunks with interleaving), the last
// stage takes fewer when that lowers the slowest stage, and the first
// stage takes what is left (Megatron's decoder_first/last_pipeline_num_layers;
// Llama 3's 126 layers on 16 stages: 7, 8 × 14, 7). Among splits with the
// same slowest stage the one with the lightest first stage wins: under
// 1F1B, interleaved or not, it holds the most micro-batches in flight.
func splitLayers(layers, pp, vpp int, layer, logits float64) (s StageSplit, ok bool) {
	L := layers
	if pp <= 1 {
		return StageSplit{L, L, L}, L >= 1
	}
	if pp > L {
		return s, false
	}
	if L%(pp*max(vpp, 1)) == 0 {
		per := L / pp
		return StageSplit{per, per, per}, true
	}
	chunk := max(vpp, 1)
	best := math.Inf(1)
	maxLast := (L + pp - 1) / pp
	if vpp > 1 {
		maxLast = chunk * ((L + pp*chunk - 1) / (pp * chunk))
	}
	row := (pp - 1) * chunk // one chunk on each stage before the last
	for nl := 1; nl <= maxLast && nl < L; nl++ {
		rest := L - nl
		nm := chunk * ((rest + row - 1) / row)
		nf := rest - (pp-2)*nm
		if vpp <= 1 && nf < 1 && pp > 2 {
			// The stages in between cannot all hold nm (40 layers on 16
			// stages: 3 × 14 > 38): the first keeps one layer and they
			// share the rest, the busiest holding at most nm.
			nf = 1
			nm = (rest - nf + pp - 3) / (pp - 2)
		}
		if pp == 2 { // no stages in between: the first takes the rest
			nm = nf
		}
		if nf < 1 || nf > nm {
			continue
		}
		if vpp > 1 && (nf < chunk-1 || nl < chunk-1) {
			// Every chunk holds a layer, but one of the first stage's and
			// one of the last's may hold only the embedding or the output
			// layer (Llama 3: 7 layers in 8 chunks on each end stage).
			continue
		}
		if vpp > 1 && megatronSplitFlags(StageSplit{nf, nm, nl}, pp, vpp) == "" {
			continue // (a split Megatron-Core cannot run; see megatronSplitFlags)
		}
		tmax := math.Max(float64(nm)*layer, float64(nl)*layer+logits)
		if tmax < best-1e-15 || (tmax <= best+1e-15 && nf < s.First) {
			best, s, ok = tmax, StageSplit{nf, nm, nl}, true
		}
	}
	return s, ok
}

// megatronSplitFlags names the Megatron-Core arguments that lay out split
// s of pp stages of vpp chunks, or "" when its first/last-stage flags
// cannot: where the layers divide evenly, none are needed ("even");
// otherwise --decoder-first-pipeline-num-layers and
// --decoder-last-pipeline-num-layers, which with interleaving need every
// stage's layers to be a multiple of vpp (TransformerConfig: "number of
// layers at first stage: 3 must be divisible by virtual pipeline parallel
// degree 4"), or --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split, which count the embedding (the
// loss) as a layer of the first (last) stage: the end stages hold one
// layer less than the others, each a multiple of vpp (Llama 3's 126
// layers on 16 stages: 7, 8 × 14, 7). Without interleaving the middle
// stages must hold the same number (the flags split the rest evenly); a
// split whose middle stages differ (40 layers on 16 stages) needs
// --pipeline-model-parallel-layout, and the result says so.
func megatronSplitFlags(s StageSplit, pp, vpp int) string {
	if pp <= 1 || s.First == s.Middle && s.Last == s.Middle {
		return "even"
	}
	v := max(vpp, 1)
	if pp > 2 && s.Middle%v != 0 {
		return ""
	}
	if s.First%v == 0 && s.Last%v == 0 {
		return fmt.Sprintf("--decoder-first-pipeline-num-layers %d --decoder-last-pipeline-num-layers %d", s.First, s.Last)
	}
	per := s.Middle
	if pp == 2 {
		per = max(s.First, s.Last)
	}
	if per%v != 0 || s.First < per-1 || s.Last < per-1 {
		return ""
	}
	var out []string
	if s.First == per-1 {
		out = append(out, "--account-for-embedding-in-pipeline-split")
	}
	if s.Last == per-1 {
		out = append(out, "--account-for-loss-in-pipeline-split")
	}
	return strings.Join(out, " ")
}

// LayerSplit is how the layers lie on the pipeline stages, first to last:
// "96" without a pipeline, "12×8" for 8 stages of 12, "3+8×12+6" for an
// uneven split (first, the stages in between, last). The stages in
// between hold Middle layers each, but without interleaving, when they
// cannot all hold as many (40 layers on 16 stages), they share the rest
// as evenly as they can ("1+3×10+2×4+1").
func (e Estimate) LayerSplit() string {
	s, pp := e.Stages, e.Plan.PP
	if s.First == 0 && s.Middle == 0 && s.Last == 0 {
		return ""
	}
	if pp <= 1 {
		return fmt.Sprint(s.First)
	}
	if s.First == s.Middle && s.Last == s.Middle {
		return fmt.Sprintf("%d×%d", s.Middle, pp)
	}
	if pp == 2 {
		return fmt.Sprintf("%d+%d", s.First, s.Last)
	}
	k := pp - 2
	mid := e.layers - s.First - s.Last
	if e.layers == 0 || mid == k*s.Middle {
		return fmt.Sprintf("%d+%d×%d+%d", s.First, s.Middle, k, s.Last)
	}
	q, r := mid/k, mid%k
	parts := fmt.Sprintf("%d×%d", q+1, r)
	if r == 0 {
		parts = fmt.Sprintf("%d×%d", q, k)
	} else if k-r > 0 {
		parts += fmt.Sprintf("+%d×%d", q, k-r)
	}
	return fmt.Sprintf("%d+%s+%d", s.First, parts, s.Last)
}

// MegatronSplit names the Megatron-Core arguments that lay out the
// estimate's split ("even" where none are needed; see megatronSplitFlags),
// or says the split needs --pipeline-model-parallel-layout.
func (e Estimate) MegatronSplit() string {
	if e.LayerSplit() == "" {
		return ""
	}
	if f := megatronSplitFlags(e.Stages, e.Plan.PP, e.Plan.VPP); f != "" &&
		(e.layers == 0 || e.Plan.PP <= 2 || e.layers-e.Stages.First-e.Stages.Last == (e.Plan.PP-2)*e.Stages.Middle) {
		return f
	}
	return "--pipeline-model-parallel-layout (the stages in between differ)"
}

// eval fills e for a plan that passed Check.
func (ev *evaluator) eval(p Plan, e *Estimate) {
	m, c := ev.m, ev.c
	n := p.Devices()
	mbs := m.GlobalBatch / (p.DP * p.MicroBatch)
	*e = Estimate{Plan: p, Microbatches: mbs}

	compute, tp, cpc, epc, busy := ev.layerTimes(p)
	layer := compute + tp + cpc + epc
	logits := ev.logitTimes(p)
	st, _ := splitLayers(m.Layers, p.PP, p.VPP, layer, logits) // Check made a split possible
	e.Stages, e.layers = st, m.Layers
	e.Split = e.LayerSplit()

	// ---- memory (busiest of the first, second and last stage) ----
	t := float64(p.TP)
	dpGroup := float64(p.DP * p.CP)
	epGroup := dpGroup / float64(p.EP)
	// zero is the stage the step executes. ZeRO-3 in a pipeline keeps the
	// stage's parameters gathered from the first micro-batch to the last:
	// a 1F1B stage runs forward and backward passes of different
	// micro-batches back to back, and re-gathering every layer for each
	// multiplies the traffic by the micro-batches (Llama 3: "we do not
	// reshard after forward"; torch's pipeline schedules turn FSDP's
	// resharding off until the last backward pass). With its gradients
	// whole too it reduce-scatters once (ZeRO-1's traffic and peak memory;
	// the schedules turn gradient sync off as well) if that fits, else
	// once per micro-batch into sharded gradients (ZeRO-2's). When neither
	// fits, and without a pipeline (DeepSpeed's and Megatron's ZeRO-3),
	// every micro-batch gathers each layer (z3 below).
	type stageMem struct{ params, grads, opt, act float64 }
	memory := func(zero int) (peak stageMem, peakTotal float64) {
		stateBytes := func(layers int, embed bool) (params, grads, opt float64) {
			dense := float64(layers) * ev.denseParams / t
			if embed {
				dense += ev.embedParams / t
			}
			exp := float64(layers) * ev.expertParams / t / float64(p.EP)
			pr := m.Precision
			shard := func(b, stage float64) float64 {
				if float64(zero) >= stage {
					return b * (dense/dpGroup + exp/epGroup)
				}
				return b * (dense + exp)
			}
			params, grads, opt = shard(pr.Param, 3), shard(pr.Grad, 2), shard(pr.Optimizer, 1)
			if zero == 3 { // gathered working copy of the current and the prefetched layer
				params += 2 * pr.Param * (ev.denseParams + ev.expertParams/float64(p.EP)) / t
			}
			return params, grads, opt
		}
		peakTotal = -1
		consider := func(layers int, inflight float64, first, last bool) {
			var sm stageMem
			sm.params, sm.grads, sm.opt = stateBytes(layers, first || last) // the last stage holds a copy of the word embeddings
			sm.act = ev.activationBytes(p, layers, inflight)
			if first {
				sm.act += inflight * ev.tokens(p) * float64(m.Hidden) * ev.act / t // embedding dropout output
			}
			if last {
				sm.act += 4 * ev.tokens(p) * float64(m.Vocab) / t // fp32 logits of one micro-batch
			}
			if tot := sm.params + sm.grads + sm.opt + sm.act; tot > peakTotal {
				peak, peakTotal = sm, tot
			}
		}
		if p.PP == 1 {
			consider(m.Layers, 1, true, true)
		} else {
			consider(st.First, inFlight(p, 0, mbs), true, false)
			if p.PP > 2 {
				consider(st.Middle, inFlight(p, 1, mbs), false, false)
			}
			consider(st.Last, inFlight(p, p.PP-1, mbs), false, true)
		}
		return peak, peakTotal
	}
	zero := p.ZeRO
	var peak stageMem
	peakTotal := -1.0
	if zero == 3 && p.PP > 1 {
		for _, kept := range []int{1, 2} { // whole gradients, then sharded ones
			if kp, kt := memory(kept); kt <= ev.memCap {
				zero, peak, peakTotal = kept, kp, kt
				break
			}
		}
	}
	if peakTotal < 0 {
		peak, peakTotal = memory(zero)
	}
	e.PricedZeRO = zero
	if zero != p.ZeRO {
		e.Note = pipelinedZeRO3Note(zero)
	}
	pf, gf, of, actFirst, totFirst := peak.params, peak.grads, peak.opt, peak.act, peakTotal
	e.Mem = MemoryBreakdown{ParamsGiB: pf / gib, GradsGiB: gf / gib, OptimizerGiB: of / gib, ActivationsGiB: actFirst / gib, ReservedGiB: c.ReservedGiB}
	e.MemPerDeviceGiB = totFirst / gib
	e.MemHeadroomGiB = (ev.memCap - totFirst) / gib
	e.Feasible = totFirst <= ev.memCap

	// ---- time ----
	// Pipeline point-to-point: one activation send forward and one
	// gradient send backward per micro-batch per chunk. Only 1/t of the
	// tensor crosses the link: SP shards it, otherwise each TP rank sends
	// a slice and the receiver all-gathers it over the intra-node fabric
	// (Megatron's scatter/gather, DeepSpeed's partitioned activations).
	var p2p float64
	if p.PP > 1 {
		full := ev.tokens(p) * float64(m.Hidden) * ev.act
		if n/p.PP >= c.DevicesPerNode {
			p2p = full/t/ev.bwInter + ev.latInter
		} else {
			p2p = full/t/ev.bwIntra + ev.latIntra
		}
		if p.TP > 1 && !p.SP {
			p2p += ev.gatherLike(full, ev.group(1, p.TP))
		}
		p2p *= 2 * float64(p.VPP)
	}

	// ZeRO-3 gathers parameters per micro-batch (each forward pass and the
	// backward pass) and reduce-scatters gradients, one collective per
	// layer. With Overlap the bandwidth hides behind compute (prefetch) and
	// only the latency shows; without it (DeepSpeed's 2021 stage 3, whose
	// SC21 runs lose 29-78% against this model even so) all of it shows.
	var z3 float64
	dg := ev.group(p.TP, p.DP*p.CP)           // dense gradients: DP×CP
	eg := ev.group(p.TP*p.EP, p.DP*p.CP/p.EP) // expert gradients: expert-DP
	if zero == 3 {
		fwdPasses := 1.0
		if p.Recompute == RecomputeFull {
			fwdPasses = 2
		}
		pr := m.Precision
		perLayer := func(pb, gb float64) float64 {
			d := (fwdPasses+1)*ev.gatherLike(pb*ev.denseParams/t, dg) + ev.gatherLike(gb*ev.denseParams/t, dg)
			if ev.expertParams > 0 {
				x := ev.expertParams / t / float64(p.EP)
				d += (fwdPasses+1)*ev.gatherLike(pb*x, eg) + ev.gatherLike(gb*x, eg)
			}
			return d
		}
		bw := perLayer(pr.Param, pr.Grad)
		lat := perLayer(0, 0)
		z3 = bw
		if p.Overlap {
			z3 = math.Max(0, bw-lat-(compute-busy)) + lat
		}
	}

	// The slowest stage sets the 1F1B steady state; fill and drain cost
	// (pp-1)/vpp average slots (Narayanan et al. §2.2).
	layerZ := layer + z3
	slowIsLast := float64(st.Last)*layerZ+logits >= float64(st.Middle)*layerZ
	lay := float64(st.Middle)
	slotCompute := lay * compute
	if slowIsLast {
		lay = float64(st.Last)
		slotCompute = lay*compute + logits
	}
	slotFree := slotCompute - lay*busy // what the slot's own collectives leave to hide behind
	slowest := lay*layerZ + p2p
	if slowIsLast {
		slowest += logits
	}
	avg := (float64(m.Layers)*layerZ+logits)/float64(p.PP) + p2p
	bubble := float64(p.PP-1) / float64(p.VPP) * avg
	pipe := float64(mbs)*slowest + bubble

	// Data-parallel gradient reduction: once per step for ZeRO 0-1, once per
	// micro-batch for ZeRO-2 (below); ZeRO-3 is z3 above.
	var dpT float64
	if zero < 3 && dpGroup > 1 {
		// The busiest stage's layers and the word embeddings: exact for an
		// even split, where the first stage, which ends the step's last
		// backward pass, holds both. For an uneven split it is an upper
		// bound (a stage in between holds no embedding). Pricing each
		// stage's own volume instead — the embeddings on the end stages
		// only — is tighter (BLOOM's row 39: 0.27 s of 97.7) but not
		// physical with a split chosen on compute alone: a faster device
		// that moves a layer onto an end stage holding BLOOM's 3.6 B
		// embedding parameters would predict a slower step
		// (TestCostModelIsPhysical). That needs the split chosen on the
		// whole step, reductions included.
		busiest := float64(max(st.Middle, st.Last))
		dense := (busiest*ev.denseParams + ev.embedParams) / t
		exp := busiest * ev.expertParams / t / float64(p.EP)
		pr := m.Precision
		var red, gather float64
		if p.ZeRO == 0 {
			red = ev.allReduce(pr.Grad*dense, dg)
			if exp > 0 && epGroup > 1 {
				red += ev.allReduce(pr.Grad*exp, eg)
			}
		} else {
			red = ev.gatherLike(pr.Grad*dense, dg)
			gather = ev.gatherLike(pr.Param*dense, dg)
			if exp > 0 && epGroup > 1 {
				red += ev.gatherLike(pr.Grad*exp, eg)
				gather += ev.gatherLike(pr.Param*exp, eg)
			}
		}
		last := red
		if p.Overlap { // hides behind the last micro-batch's backward pass
			last = math.Max(0, red-2.0/3.0*slotFree)
		}
		dpT = last + gather
		// ZeRO-2 keeps only its shard of the gradients, so it can only
		// accumulate reduced ones: every micro-batch's backward pass ends
		// in a reduce-scatter (DeepSpeed stage 2, FSDP's SHARD_GRAD_OP),
		// where ZeRO-1 accumulates whole gradients and reduces once. With
		// Overlap each one runs under the next slot's computation.
		if zero == 2 && mbs > 1 {
			each := red
			if p.Overlap {
				each = math.Max(0, red-slotFree)
			}
			dpT += float64(mbs-1) * each
		}
	}

	// Optimizer: Adam reads and writes master weights, m and v, reads the
	// gradient and writes the new parameter, for the parameters whose
	// optimizer state this device holds.
	pr := m.Precision
	opt := (2*pr.Optimizer + pr.Grad + pr.Param) * (of / pr.Optimizer) / ev.hbm

	step := pipe + dpT + opt
	e.StepTimeS = step
	tokens := float64(m.GlobalBatch) * float64(m.SeqLen)
	e.TokensPerS = tokens / step
	e.TokensPerSPerDevice = e.TokensPerS / float64(n)
	hw := m.HardwareFlopsPerStep(p.Recompute) / float64(n) / step
	mf := m.ModelFlopsPerStep() / float64(n) / step
	e.TFLOPSPerDevice = hw / 1e12
	e.ModelTFLOPSPerDevice = mf / 1e12
	e.MFU = mf / (c.Device.PeakTFLOPS * 1e12)
	e.HFU = hw / (c.Device.PeakTFLOPS * 1e12)

	mb := float64(mbs)
	e.Time = TimeBreakdown{
		ComputeS:   mb * slotCompute,
		TPCommS:    mb * lay * tp,
		CPCommS:    mb * lay * cpc,
		EPCommS:    mb * lay * epc,
		PPCommS:    mb * p2p,
		DPCommS:    dpT + mb*lay*z3,
		BubbleS:    bubble,
		OptimizerS: opt,
	}
	tb := &e.Time
	e.CommShare = (tb.TPCommS + tb.CPCommS + tb.EPCommS + tb.PPCommS + tb.DPCommS) / step
	e.BubbleShare = tb.BubbleS / step

	if p.ZeRO >= 1 {
		e.BlastRadius = n
	} else {
		e.BlastRadius = p.TP * p.PP * max(p.CP, p.EP)
	}
}

// inFlight is how many micro-batches' activations pipeline stage i holds
// at most, in units of the stage's whole layer count: p−i under 1F1B;
// under the interleaved schedule the warm-up's 2(p−i−1)+(v−1)p chunks
// plus the one in the steady state (Megatron's
// get_num_warmup_microbatches), each 1/v of the stage.
func inFlight(p Plan, i, mbs int) float64 {
	if p.VPP <= 1 {
		return float64(min(p.PP-i, mbs))
	}
	chunks := min(mbs*p.VPP, 2*(p.PP-i-1)+(p.VPP-1)*p.PP+1)
	return float64(chunks) / float64(p.VPP)
}

// tokens is the tokens of one micro-batch on one rank's sequence shard.
func (ev *evaluator) tokens(p Plan) float64 {
	return float64(p.MicroBatch) * float64(ev.m.SeqLen) / float64(p.CP)
}

// activationBytes is what one device stores for `layers` layers and
// `inflight` micro-batches (Korthikanti et al. Table 2, with general FFN
// width, GQA and MoE terms), plus the working set of the layer being
// recomputed: the whole layer under full recompute, its attention core
// under selective recompute.
func (ev *evaluator) activationBytes(p Plan, layers int, inflight float64) float64 {
	m := ev.m
	t := float64(p.TP)
	h, f := float64(m.Hidden), float64(m.FFNHidden)
	tok := ev.tokens(p)
	scale := ev.act / 2
	repl := 10.0 // LayerNorm inputs, dropout masks, the first GEMMs' inputs
	if m.NoDropout {
		repl = 8
	}
	if p.SP {
		repl /= t
	}
	mlp := 4 * f // GeLU input, second GEMM input
	if m.GatedMLP {
		mlp = 6 * f
	}
	if m.moe() {
		mlp = mlp*ev.topK*ev.padding + 4*h*ev.topK
	}
	split := 4*h + 4*m.kvDim() + mlp // Q, K, V, attention output, MLP
	core := 0.0
	if !m.FlashAttention {
		core = 5 * float64(m.Heads) * float64(m.SeqLen) // scores, softmax, dropout mask and output
		if m.NoDropout {
			core = 4 * float64(m.Heads) * float64(m.SeqLen)
		}
	}
	full := scale * tok * (repl*h + split/t + core/t)
	var per float64
	switch p.Recompute {
	case RecomputeNone:
		per = full
	case RecomputeSelective:
		// The attention core re-runs in the backward pass one layer at a
		// time: its scores and softmax exist again for that layer only.
		per = scale * tok * (repl*h + split/t)
		return float64(layers)*inflight*per + scale*tok*core/t
	case RecomputeFull:
		in := scale * tok * 2 * h
		if p.SP {
			in /= t
		}
		return float64(layers)*inflight*in + full
	}
	return float64(layers) * inflight * per
}

// pipelinedZeRO3Note says why a pipelined ZeRO-3 plan is priced as
// ZeRO-stage priced (1 or 2), for Estimate.Note.
func pipelinedZeRO3Note(priced int) string {
	const kept = "zero=3 with pp > 1 is priced as ZeRO-%d: a pipeline stage keeps its parameters gathered from the step's " +
		"first micro-batch to its last (no resharding after forward, as Llama 3 and torch's pipeline schedules run FSDP)"
	if priced == 1 {
		return fmt.Sprintf(kept+" and its gradients whole, reduce-scattered once per step: ZeRO-1's memory and traffic", priced)
	}
	return fmt.Sprintf(kept+"; whole gradients do not fit, so each micro-batch's are reduce-scattered into shards: "+
		"ZeRO-2's memory and traffic", priced)
}
