package strategy

import (
	"errors"
	"fmt"
	"os"

	"github.com/goccy/go-yaml/parser"
)

// Model is a decoder-only transformer as the planner sees it. Sizes are
// counts (not bytes); GlobalBatch is in sequences of SeqLen tokens.
type Model struct {
	Name      string `yaml:"name" json:"name"`
	Layers    int    `yaml:"layers" json:"layers"`
	Hidden    int    `yaml:"hidden" json:"hidden"`
	FFNHidden int    `yaml:"ffn_hidden" json:"ffn_hidden"` // default 4*hidden
	Heads     int    `yaml:"heads" json:"heads"`
	KVHeads   int    `yaml:"kv_heads" json:"kv_heads"` // default heads (MHA); fewer is GQA
	Vocab     int    `yaml:"vocab" json:"vocab"`
	SeqLen    int    `yaml:"seq_len" json:"seq_len"`
	// GlobalBatch is the number of sequences per optimizer step.
	GlobalBatch int `yaml:"global_batch" json:"global_batch"`

	// Experts > 1 makes every layer's MLP a mixture of Experts experts of
	// width FFNHidden, TopK of which each token visits. CapacityFactor > 0
	// pads every expert to ceil(tokens*TopK/Experts*CapacityFactor) slots
	// (compute and all-to-all grow with it); 0 means dropless.
	Experts        int     `yaml:"experts,omitempty" json:"experts,omitempty"`
	TopK           int     `yaml:"top_k,omitempty" json:"top_k,omitempty"`
	CapacityFactor float64 `yaml:"capacity_factor,omitempty" json:"capacity_factor,omitempty"`

	// GatedMLP selects a SwiGLU-style MLP (three FFN matrices) instead of
	// the GPT GeLU MLP (two).
	GatedMLP bool `yaml:"gated_mlp,omitempty" json:"gated_mlp,omitempty"`
	// FlashAttention fuses the attention core: no s×s score tensor is
	// stored or streamed through memory. Off is Megatron's fused softmax
	// (the 5·a·s/h activation term of Korthikanti et al.).
	FlashAttention bool `yaml:"flash_attention,omitempty" json:"flash_attention,omitempty"`
	// NoDropout: the model trains without dropout, as Llama-style models
	// do (dropout 0 runs no dropout kernel and stores no mask). Off is
	// GPT's hidden and attention dropout: 1-byte masks after attention and
	// MLP (2 of Korthikanti et al.'s 34·s·b·h bytes per layer) and on the
	// attention probabilities (1 of the 5·a·s²·b), and the kernels that
	// write them.
	NoDropout bool `yaml:"no_dropout,omitempty" json:"no_dropout,omitempty"`

	// Precision is the bytes per parameter of model state; zero fields take
	// the defaults of Megatron's bf16 / fp32-main-grad recipe (2+4+12 = 18).
	Precision Precision `yaml:"precision,omitempty" json:"precision"`
}

// Precision is the model-state cost per parameter, in bytes. ZeRO stage 1
// shards Optimizer, stage 2 also Grad, stage 3 also Param. Gradients are
// reduced in Grad bytes, parameters gathered in Param bytes.
type Precision struct {
	Param     float64 `yaml:"param_bytes,omitempty" json:"param_bytes"`         // default 2 (bf16/fp16 weights)
	Grad      float64 `yaml:"grad_bytes,omitempty" json:"grad_bytes"`           // default 4 (fp32 main grads)
	Optimizer float64 `yaml:"optimizer_bytes,omitempty" json:"optimizer_bytes"` // default 12 (fp32 master, Adam m and v)
}

// PerParam is the total bytes per parameter without sharding.
func (p Precision) PerParam() float64 { return p.Param + p.Grad + p.Optimizer }

// Limits that keep every derived quantity finite; far beyond any real model.
const (
	maxDim   = 1 << 22 // hidden, ffn_hidden, vocab
	maxCount = 1 << 20 // layers, heads, experts, seq_len
	maxBatch = 1 << 24 // global_batch
)

// WithDefaults returns m with unset optional fields defaulted.
func (m Model) WithDefaults() Model {
	if m.FFNHidden == 0 {
		m.FFNHidden = 4 * m.Hidden
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.Experts > 1 && m.TopK == 0 {
		m.TopK = 1
	}
	if m.Precision.Param == 0 {
		m.Precision.Param = 2
	}
	if m.Precision.Grad == 0 {
		m.Precision.Grad = 4
	}
	if m.Precision.Optimizer == 0 {
		m.Precision.Optimizer = 12
	}
	return m
}

// Validate checks a defaulted model and returns a *SpecError naming every
// bad field.
func (m Model) Validate() error {
	var p problems
	if m.Name == "" {
		p.add("name", "required: a model name such as gpt3-175b")
	}
	positive := func(field string, v, limit int) {
		if v < 1 || v > limit {
			p.add(field, "%d out of range 1..%d", v, limit)
		}
	}
	positive("layers", m.Layers, maxCount)
	positive("hidden", m.Hidden, maxDim)
	positive("ffn_hidden", m.FFNHidden, maxDim)
	positive("heads", m.Heads, maxCount)
	positive("kv_heads", m.KVHeads, maxCount)
	positive("vocab", m.Vocab, maxDim)
	positive("seq_len", m.SeqLen, maxCount)
	positive("global_batch", m.GlobalBatch, maxBatch)
	if m.Heads > 0 && m.Hidden > 0 && m.Hidden%m.Heads != 0 {
		p.add("heads", "hidden (%d) is not divisible by heads (%d)", m.Hidden, m.Heads)
	}
	if m.Heads > 0 && m.KVHeads > 0 && (m.KVHeads > m.Heads || m.Heads%m.KVHeads != 0) {
		p.add("kv_heads", "%d must divide heads (%d)", m.KVHeads, m.Heads)
	}
	if m.Experts < 0 || m.Experts > maxCount {
		p.add("experts", "%d out of range 0..%d (0 or 1: dense)", m.Experts, maxCount)
	}
	if m.Experts > 1 {
		if m.TopK < 1 || m.TopK > m.Experts {
			p.add("top_k", "%d out of range 1..experts (%d)", m.TopK, m.Experts)
		}
	} else if m.TopK > 1 {
		p.add("top_k", "%d needs experts > 1", m.TopK)
	} else if m.TopK < 0 {
		p.add("top_k", "must not be negative, got %d", m.TopK)
	}
	if !(m.CapacityFactor >= 0 && m.CapacityFactor <= 64) { // also rejects NaN
		p.add("capacity_factor", "%g out of range 0..64 (0: dropless)", m.CapacityFactor)
	} else if m.CapacityFactor > 0 && m.Experts <= 1 && m.Experts >= 0 {
		// As top_k: a dense model has no expert to pad, and taking it
		// silently would price a model the file does not describe.
		p.add("capacity_factor", "%g needs experts > 1 (a dense model has no experts to pad)", m.CapacityFactor)
	}
	bytesOK := func(field string, v float64) {
		if !(v > 0 && v <= 64) {
			p.add(field, "%g out of range (0, 64]", v)
		}
	}
	bytesOK("precision.param_bytes", m.Precision.Param)
	bytesOK("precision.grad_bytes", m.Precision.Grad)
	bytesOK("precision.optimizer_bytes", m.Precision.Optimizer)
	return p.err("model " + m.Name)
}

// LoadModel reads, decodes strictly, defaults and validates a model file.
func LoadModel(path string) (Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Model{}, fmt.Errorf("read model spec: %w", err)
	}
	return ParseModel(path, data)
}

// modelRequired names the fields a model file must give; modelDerived the
// ones defaulted from another (ffn_hidden is 4·hidden).
var (
	modelRequired = map[string]string{
		"layers": "the number of transformer layers", "hidden": "the model width",
		"heads": "the number of attention heads", "vocab": "the vocabulary size",
		"seq_len": "the sequence length in tokens", "global_batch": "sequences per optimizer step",
	}
	modelDerived = map[string]string{"ffn_hidden": "hidden", "kv_heads": "heads"}
)

// ParseModel decodes a model spec; name is used in errors. Unknown fields,
// wrong types and impossible values come back as a *SpecError whose fields
// carry the YAML line, and so does a file that is not one YAML document
// (empty, or a second one after "---").
func ParseModel(name string, data []byte) (Model, error) {
	if err := oneDocument(name, data, modelWants); err != nil {
		return Model{}, err
	}
	return parseModel(name, data, maxDecodePasses)
}

// modelWants is what an empty model file is told to give.
const modelWants = "a model spec gives at least name, layers, hidden, heads, vocab, seq_len and global_batch " +
	"(`cann-train search --show-preset gpt3_3.6b` prints one to start from)"

func parseModel(name string, data []byte, passes int) (Model, error) {
	file, perr := parser.ParseBytes(data, 0)
	if perr != nil {
		file = nil
	}
	var m Model
	strict, unknown := decodeAll(name, data, file, &m)
	if se := (*SpecError)(nil); strict != nil && !unknown && errors.As(strict, &se) {
		return Model{}, goOnPast(name, file, se, passes, func(b []byte, n int) error { _, err := parseModel(name, b, n); return err })
	}
	if strict != nil && !unknown {
		return Model{}, strict
	}
	// A defaulted field written as 0 would take its default unseen (as in
	// a cluster file): 0 bytes per parameter is out of range.
	var zeros problems
	for _, f := range []struct {
		field string
		v     float64
	}{{"precision.param_bytes", m.Precision.Param}, {"precision.grad_bytes", m.Precision.Grad}, {"precision.optimizer_bytes", m.Precision.Optimizer}} {
		if f.v == 0 && lineOf(file, f.field) > 0 && !isNull(file, f.field) {
			zeros.add(f.field, "0 is out of range (0, 64]: leave it out for the default")
		}
	}
	m = m.WithDefaults()
	if err := joinProblems(name, strict, withLines(zeros.err(name), name, file),
		withLines(nulls(absent(m.Validate(), file, modelRequired, modelDerived), file, modelRequired), name, file)); err != nil {
		return Model{}, err
	}
	return m, nil
}

// moe reports whether the model has routed experts.
func (m Model) moe() bool { return m.Experts > 1 }

// headDim is hidden/heads.
func (m Model) headDim() float64 { return float64(m.Hidden) / float64(m.Heads) }

// kvDim is the width of K (and of V): kv_heads·head_dim.
func (m Model) kvDim() float64 { return float64(m.KVHeads) * m.headDim() }

// ffnMatrices is 3 for a gated MLP and 2 otherwise.
func (m Model) ffnMatrices() float64 {
	if m.GatedMLP {
		return 3
	}
	return 2
}

// attnParams is the attention block of one layer (QKV, output projection,
// their biases and two LayerNorms).
func (m Model) attnParams() float64 {
	h, kv := float64(m.Hidden), m.kvDim()
	return h*(h+2*kv) + h*h + (h + 2*kv) + h + 4*h
}

// expertParams is one MLP (one expert for MoE).
func (m Model) expertParams() float64 {
	h, f := float64(m.Hidden), float64(m.FFNHidden)
	return m.ffnMatrices()*h*f + f + h
}

// layerParams splits one layer into the part every rank of a TP group
// shards (attention, router, dense MLP) and the routed experts.
func (m Model) layerParams() (dense, experts float64) {
	if !m.moe() {
		return m.attnParams() + m.expertParams(), 0
	}
	return m.attnParams() + float64(m.Hidden)*float64(m.Experts), float64(m.Experts) * m.expertParams()
}

// Params is the parameter count: layers plus one (tied) embedding matrix.
// For the GPT shape it is Narayanan et al. eq. 2 without the position
// embedding (12·l·h²·(1 + 13/(12h) + V/(12lh))).
func (m Model) Params() float64 {
	d, e := m.layerParams()
	return float64(m.Layers)*(d+e) + float64(m.Vocab)*float64(m.Hidden)
}

// ActiveParams counts only the TopK experts a token visits.
func (m Model) ActiveParams() float64 {
	d, _ := m.layerParams()
	k := 1.0
	if m.moe() {
		k = float64(m.TopK)
	}
	return float64(m.Layers)*(d+k*m.expertParams()) + float64(m.Vocab)*float64(m.Hidden)
}

// layerFlopsPerToken is the forward GEMM FLOPs of one layer per token,
// split into the projections and MLP (linear in s) and the attention core
// (QKᵀ and AV, 4·s·h: every key counted, the Megatron/Narayanan convention
// with no causal halving). For MoE the MLP counts TopK experts and the
// router.
func (m Model) layerFlopsPerToken() (linear, core float64) {
	h, f, kv := float64(m.Hidden), float64(m.FFNHidden), m.kvDim()
	linear = 2*h*(h+2*kv) + 2*h*h
	mlp := 2 * m.ffnMatrices() * h * f
	if m.moe() {
		mlp = mlp*float64(m.TopK) + 2*h*float64(m.Experts)
	}
	linear += mlp
	core = 4 * float64(m.SeqLen) * h
	return linear, core
}

// logitFlopsPerToken is the output projection, 2·h·V per token.
func (m Model) logitFlopsPerToken() float64 { return 2 * float64(m.Hidden) * float64(m.Vocab) }

// ModelFlopsPerStep is the FLOP convention MFU uses (Korthikanti et al.
// eq. 7): forward plus backward (3 passes), no recomputation. For the GPT
// shape: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)).
func (m Model) ModelFlopsPerStep() float64 {
	lin, core := m.layerFlopsPerToken()
	tokens := float64(m.GlobalBatch) * float64(m.SeqLen)
	return 3 * tokens * (float64(m.Layers)*(lin+core) + m.logitFlopsPerToken())
}

// HardwareFlopsPerStep adds the FLOPs recomputation executes. With full
// recompute this is Narayanan et al. eq. 3, 96·B·s·L·h²·(1 + s/(6h) +
// V/(16hL)) for the GPT shape: the convention of Megatron's and BLOOM's
// published TFLOP/s per GPU. Selective recompute re-runs the attention
// core, which FlashAttention never stores in the first place: with it,
// selective executes what no recompute does (the cost model's time and
// memory agree).
func (m Model) HardwareFlopsPerStep(r Recompute) float64 {
	lin, core := m.layerFlopsPerToken()
	tokens := float64(m.GlobalBatch) * float64(m.SeqLen)
	extra := 0.0
	switch r {
	case RecomputeFull:
		extra = lin + core
	case RecomputeSelective:
		if !m.FlashAttention {
			extra = core
		}
	}
	return m.ModelFlopsPerStep() + tokens*float64(m.Layers)*extra
}
