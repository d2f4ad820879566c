package strategy

import (
	"fmt"
	"strconv"
	"strings"
)

// Recompute is the activation recomputation mode.
type Recompute string

// Recomputation modes (Korthikanti et al.): none keeps every activation,
// selective recomputes the attention core, full keeps only each layer's
// input and re-runs the layer's forward pass in the backward pass.
const (
	RecomputeNone      Recompute = "none"
	RecomputeSelective Recompute = "selective"
	RecomputeFull      Recompute = "full"
)

// ParseRecompute reads a recompute mode, in any case.
func ParseRecompute(s string) (Recompute, error) {
	switch r := Recompute(strings.ToLower(strings.TrimSpace(s))); r {
	case RecomputeNone, RecomputeSelective, RecomputeFull:
		return r, nil
	}
	return "", fmt.Errorf("%q: want none, selective or full", s)
}

// Plan is one parallel configuration. Devices used = TP·PP·DP·CP; EP
// splits the experts over ranks of the DP×CP group (it must divide DP·CP),
// as Megatron-Core does. MicroBatch is in sequences; the number of
// micro-batches per step is GlobalBatch/(MicroBatch·DP).
type Plan struct {
	TP         int       `json:"tp"`
	PP         int       `json:"pp"`
	DP         int       `json:"dp"`
	CP         int       `json:"cp"`
	EP         int       `json:"ep"`
	MicroBatch int       `json:"mb"`
	Recompute  Recompute `json:"recompute"`
	// ZeRO is the optimizer-state sharding stage over the data-parallel
	// group: 0 none, 1 optimizer (Megatron's distributed optimizer), 2 also
	// gradients, 3 also parameters (gathered per micro-batch; in a pipeline
	// the stage stays gathered across the step, priced as ZeRO-1 or ZeRO-2
	// where that fits: see Estimate.PricedZeRO).
	ZeRO int `json:"zero"`
	// VPP is the number of interleaved model chunks per pipeline stage
	// (1: plain 1F1B).
	VPP int `json:"vpp"`
	// SP is Megatron sequence parallelism: TP all-reduces become
	// reduce-scatter + all-gather and the LayerNorm/dropout activations are
	// sharded over TP.
	SP bool `json:"sp"`
	// Overlap overlaps the data-parallel gradient reduction with the
	// backward pass of the last micro-batch (bucketed DDP,
	// --overlap-grad-reduce). Off is Megatron's 2021 local DDP and
	// DeepSpeed's engine: the reduction runs after the pipeline flush.
	Overlap bool `json:"overlap"`
}

// DefaultPlan is what ParsePlan starts from: everything 1, no recompute,
// no ZeRO, no SP, no overlap.
func DefaultPlan() Plan {
	return Plan{TP: 1, PP: 1, DP: 1, CP: 1, EP: 1, MicroBatch: 1, Recompute: RecomputeNone, VPP: 1}
}

// Devices is TP·PP·DP·CP.
func (p Plan) Devices() int { return p.TP * p.PP * p.DP * p.CP }

// String is the canonical form ParsePlan reads back.
func (p Plan) String() string {
	return fmt.Sprintf("tp=%d,pp=%d,dp=%d,mb=%d,recompute=%s,zero=%d,vpp=%d,sp=%t,ep=%d,cp=%d,overlap=%t",
		p.TP, p.PP, p.DP, p.MicroBatch, p.Recompute, p.ZeRO, p.VPP, p.SP, p.EP, p.CP, p.Overlap)
}

// ParsePlan reads "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=0,vpp=1,
// sp=false,ep=1,cp=1". Keys may come in any order and be omitted
// (DefaultPlan supplies them); each may appear once. Errors are a
// *SpecError naming the key. Whether the plan fits a model and cluster is
// checked by Check and Evaluate.
func ParsePlan(s string) (Plan, error) {
	p := DefaultPlan()
	var errs problems
	if strings.TrimSpace(s) == "" {
		errs.add("plan", "empty: want e.g. tp=8,pp=12,dp=4,mb=1,recompute=full")
		return Plan{}, errs.err("plan")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			errs.add("plan", "empty item in %q", s)
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !ok || key == "" {
			errs.add("plan", "%q: want key=value", part)
			continue
		}
		if seen[key] {
			errs.add(key, "given twice")
			continue
		}
		seen[key] = true
		intVal := func(dst *int, min, max int) {
			v, err := strconv.Atoi(val)
			if err != nil || v < min || v > max {
				errs.add(key, "%q: want an integer in %d..%d", val, min, max)
				return
			}
			*dst = v
		}
		boolVal := func(dst *bool) {
			// Exactly what the message lists, in any case: strconv.ParseBool
			// also took t and f, which the message never said.
			switch strings.ToLower(val) {
			case "true", "1":
				*dst = true
			case "false", "0":
				*dst = false
			default:
				errs.add(key, "%q: want true, false, 1 or 0", val)
			}
		}
		switch key {
		case "tp":
			intVal(&p.TP, 1, maxDevices)
		case "pp":
			intVal(&p.PP, 1, maxDevices)
		case "dp":
			intVal(&p.DP, 1, maxDevices)
		case "cp":
			intVal(&p.CP, 1, maxDevices)
		case "ep":
			intVal(&p.EP, 1, maxDevices)
		case "mb":
			intVal(&p.MicroBatch, 1, maxBatch)
		case "vpp":
			intVal(&p.VPP, 1, maxCount)
		case "zero":
			intVal(&p.ZeRO, 0, 3)
		case "sp":
			boolVal(&p.SP)
		case "overlap":
			boolVal(&p.Overlap)
		case "recompute":
			r, err := ParseRecompute(val)
			if err != nil {
				errs.add(key, "%v", err)
			}
			p.Recompute = r
		default:
			errs.add(key, "unknown key (known: tp, pp, dp, cp, ep, mb, recompute, zero, vpp, sp, overlap)")
		}
	}
	if err := errs.err("plan"); err != nil {
		return Plan{}, err
	}
	if p.Devices() > maxDevices {
		errs.add("plan", "tp·pp·dp·cp = %d devices exceeds %d", p.Devices(), maxDevices)
		return Plan{}, errs.err("plan")
	}
	return p, nil
}

const maxDevices = maxNodes * maxDevicesPerNode

// ParsePlanOn is ParsePlan for cluster c: a plan that leaves dp out takes
// every device the other degrees leave, dp = devices / (tp·pp·cp), as
// Megatron derives the data-parallel size from the world ("tp=8,pp=16" on
// 1,024 devices is dp=8). Where that does not divide, the plan is an
// error naming the product and the devices (a dp of 1 the user never
// wrote would take the blame in Check).
func ParsePlanOn(s string, c Cluster) (Plan, error) {
	p, err := ParsePlan(s)
	if err != nil {
		return p, err
	}
	for _, part := range strings.Split(s, ",") {
		if key, _, _ := strings.Cut(part, "="); strings.ToLower(strings.TrimSpace(key)) == "dp" {
			return p, nil
		}
	}
	rest := p.TP * p.PP * p.CP
	if c.Devices()%rest != 0 {
		var errs problems
		errs.add("plan", "dp left out, and tp·pp·cp = %d does not divide cluster %s's %d devices: give dp, "+
			"or degrees whose product divides %d", rest, c.Name, c.Devices(), c.Devices())
		return Plan{}, errs.err("plan")
	}
	p.DP = c.Devices() / rest
	return p, nil
}

// Check says why p cannot run model m on cluster c, as a *SpecError whose
// fields name the plan key (tp, mb, …) or the model field at fault; nil
// when the plan is well formed. Memory is not checked here (Evaluate
// reports it).
func Check(m Model, c Cluster, p Plan) error {
	var e problems
	if p.TP < 1 || p.PP < 1 || p.DP < 1 || p.CP < 1 || p.EP < 1 || p.MicroBatch < 1 || p.VPP < 1 {
		e.add("plan", "tp, pp, dp, cp, ep, mb and vpp must be at least 1")
		return e.err("plan " + p.String())
	}
	n := p.Devices()
	if n != c.Devices() {
		e.add("plan", "tp·pp·dp·cp = %d, but cluster %s has %d devices", n, c.Name, c.Devices())
	}
	if m.Heads%p.TP != 0 {
		e.add("tp", "heads (%d) not divisible by tp (%d)", m.Heads, p.TP)
	}
	if m.KVHeads%p.TP != 0 && m.Heads%p.TP == 0 {
		e.add("tp", "kv_heads (%d) not divisible by tp (%d)", m.KVHeads, p.TP)
	}
	if m.FFNHidden%p.TP != 0 {
		e.add("tp", "ffn_hidden (%d) not divisible by tp (%d)", m.FFNHidden, p.TP)
	}
	if p.PP > m.Layers {
		e.add("pp", "%d stages for %d layers", p.PP, m.Layers)
	} else if p.VPP <= 1 && !splittable(m.Layers, p.PP, 1) {
		e.add("pp", "layers (%d) cannot be split into %d stages", m.Layers, p.PP)
	}
	if p.VPP > 1 {
		if p.PP == 1 {
			e.add("vpp", "interleaving (vpp=%d) needs pp > 1", p.VPP)
		} else if !splittable(m.Layers, p.PP, p.VPP) {
			e.add("vpp", "layers (%d) cannot be split into %d stages of %d chunks as Megatron-Core runs them: every stage's layers "+
				"a multiple of vpp (--decoder-first/last-pipeline-num-layers), or the end stages one layer short of the others "+
				"(--account-for-embedding/loss-in-pipeline-split)", m.Layers, p.PP, p.VPP)
		}
	}
	if m.GlobalBatch%(p.DP*p.MicroBatch) != 0 {
		e.add("mb", "global_batch (%d) not divisible by dp·mb (%d·%d)", m.GlobalBatch, p.DP, p.MicroBatch)
	} else if mbs := m.GlobalBatch / (p.DP * p.MicroBatch); p.VPP > 1 && mbs%p.PP != 0 {
		e.add("vpp", "interleaving needs micro-batches (%d) to be a multiple of pp (%d)", mbs, p.PP)
	}
	if p.CP > 1 && m.SeqLen%(2*p.CP) != 0 {
		e.add("cp", "seq_len (%d) not divisible by 2·cp (%d): context parallelism cuts the sequence into 2·cp chunks, "+
			"each rank taking an early and a late one to balance the causal mask (Megatron's load balancing)", m.SeqLen, 2*p.CP)
	}
	if p.EP > 1 {
		if !m.moe() {
			e.add("ep", "expert parallelism (ep=%d) needs a model with experts", p.EP)
		} else if m.Experts%p.EP != 0 {
			e.add("ep", "experts (%d) not divisible by ep (%d)", m.Experts, p.EP)
		}
		if (p.DP*p.CP)%p.EP != 0 {
			e.add("ep", "ep (%d) must divide dp·cp (%d)", p.EP, p.DP*p.CP)
		}
		if p.TP > 1 && !p.SP {
			e.add("sp", "expert parallelism with tp > 1 needs sequence parallelism (sp=true)")
		}
	}
	if p.SP && p.TP > 1 && (m.SeqLen/p.CP)%p.TP != 0 {
		e.add("sp", "sequence shard (%d) not divisible by tp (%d)", m.SeqLen/p.CP, p.TP)
	}
	if p.ZeRO < 0 || p.ZeRO > 3 {
		e.add("zero", "%d out of range 0..3", p.ZeRO)
	}
	switch p.Recompute {
	case RecomputeNone, RecomputeSelective, RecomputeFull:
	default:
		e.add("recompute", "%q: want none, selective or full", p.Recompute)
	}
	return e.err("plan " + p.String())
}
