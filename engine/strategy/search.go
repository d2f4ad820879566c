package strategy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// SearchOptions bounds the exhaustive search. The zero value searches the
// whole default space and returns the top 10.
type SearchOptions struct {
	// TopK is how many plans to return, best first (default 10).
	TopK int
	// MaxTP caps tensor parallelism (default devices_per_node: TP stays
	// inside the NVLink/HCCS domain). TP takes powers of two.
	MaxTP int
	// MaxCP caps context parallelism (powers of two; default 8).
	MaxCP int
	// MaxEP caps expert parallelism (default experts).
	MaxEP int
	// MaxMicroBatch caps the micro-batch in sequences (default 16).
	MaxMicroBatch int
	// MaxVPP caps interleaved chunks per stage (powers of two; default 8;
	// 1 disables interleaving).
	MaxVPP int
	// Recompute lists the modes to try (default none, selective, full).
	Recompute []Recompute
	// ZeRO lists the stages to try (default 0, 1, 2, 3).
	ZeRO []int
	// NoSP skips sequence parallelism (default: try both when tp > 1).
	NoSP bool
	// Overlap sets Plan.Overlap on every candidate.
	Overlap bool
	// MinHeadroomGiB drops plans with less free device memory (default 0).
	MinHeadroomGiB float64
}

// Describe says how o narrows the default search space, e.g. "ZeRO 0, 1 ·
// recompute full · tp ≤ 4 · no interleaving · overlap"; "" when it does
// not (TopK aside).
func (o SearchOptions) Describe() string {
	var parts []string
	if len(o.ZeRO) > 0 {
		z := make([]string, len(o.ZeRO))
		for i, v := range o.ZeRO {
			z[i] = fmt.Sprint(v)
		}
		parts = append(parts, "ZeRO "+strings.Join(z, ", "))
	}
	if len(o.Recompute) > 0 {
		r := make([]string, len(o.Recompute))
		for i, v := range o.Recompute {
			r[i] = string(v)
		}
		parts = append(parts, "recompute "+strings.Join(r, ", "))
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"tp", o.MaxTP}, {"cp", o.MaxCP}, {"ep", o.MaxEP}, {"micro-batch", o.MaxMicroBatch}} {
		if c.v > 0 {
			parts = append(parts, fmt.Sprintf("%s ≤ %d", c.name, c.v))
		}
	}
	switch {
	case o.MaxVPP == 1:
		parts = append(parts, "no interleaving")
	case o.MaxVPP > 1:
		parts = append(parts, fmt.Sprintf("vpp ≤ %d", o.MaxVPP))
	}
	if o.NoSP {
		parts = append(parts, "no sequence parallelism")
	}
	if o.Overlap {
		parts = append(parts, "overlap")
	}
	if o.MinHeadroomGiB > 0 {
		parts = append(parts, fmt.Sprintf("headroom ≥ %g GiB", o.MinHeadroomGiB))
	}
	return strings.Join(parts, " · ")
}

// ErrNoPlan is returned (wrapped) when no plan fits.
var ErrNoPlan = errors.New("no feasible plan")

func (o SearchOptions) withDefaults(m Model, c Cluster) SearchOptions {
	if o.TopK <= 0 {
		o.TopK = 10
	}
	if o.MaxTP <= 0 {
		o.MaxTP = c.DevicesPerNode
	}
	if o.MaxCP <= 0 {
		o.MaxCP = defaultMaxCP(m.SeqLen)
	}
	if o.MaxEP <= 0 {
		o.MaxEP = max(1, m.Experts)
	}
	if o.MaxMicroBatch <= 0 {
		o.MaxMicroBatch = 16
	}
	if o.MaxVPP <= 0 {
		o.MaxVPP = 8
	}
	if len(o.Recompute) == 0 {
		o.Recompute = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
	}
	if len(o.ZeRO) == 0 {
		o.ZeRO = []int{0, 1, 2, 3}
	}
	o.ZeRO = slices.Compact(slices.Sorted(slices.Values(o.ZeRO)))
	return o
}

// cpShardTokens is the shortest sequence shard the default cp cap cuts
// a sequence into beyond cp 8.
const cpShardTokens = 8192

// defaultMaxCP is the default cap on context parallelism: 8, or for
// sequences longer than 64K tokens the power of two that leaves each rank
// a shard of at least cpShardTokens (131,072 tokens: 16, Llama 3's long-
// context stage). Context parallelism exists to cut the sequence; a
// fixed 8 hid the plans that cut a 128K sequence as its trainers do,
// while shards much shorter than 8K tokens leave the attention core too
// little to hide the K/V exchange behind, so the search need not try
// them by default (--max-cp does).
func defaultMaxCP(seqLen int) int {
	cp := 8
	for cp*2*cpShardTokens <= seqLen && cp < maxCount {
		cp *= 2
	}
	return cp
}

// searchCap is a search bound a plan sits at: a larger value of the degree was
// not tried, and Flag is the command-line flag that widens it.
type searchCap struct {
	Flag  string `json:"flag"`  // "--max-cp"
	Key   string `json:"key"`   // the plan key it caps: "cp"
	Value int    `json:"value"` // the cap, which the plan's key equals
}

func (c searchCap) String() string { return fmt.Sprintf("%s %d", c.Flag, c.Value) }

// caps lists the bounds of o that plan p sits at where a larger value
// could have been a plan (the next degree divides what it must): widening
// them might find a faster plan.
func (o SearchOptions) caps(m Model, c Cluster, p Plan) []searchCap {
	n := c.Devices()
	var out []searchCap
	if t := 2 * p.TP; p.TP == o.MaxTP && n%t == 0 && m.Heads%t == 0 && m.KVHeads%t == 0 && m.FFNHidden%t == 0 {
		out = append(out, searchCap{"--max-tp", "tp", o.MaxTP})
	}
	if cp := 2 * p.CP; p.CP == o.MaxCP && (n/p.TP)%cp == 0 && m.SeqLen%(2*cp) == 0 {
		out = append(out, searchCap{"--max-cp", "cp", o.MaxCP})
	}
	if p.EP == o.MaxEP && m.moe() {
		for e := p.EP + 1; e <= m.Experts; e++ {
			if m.Experts%e == 0 {
				out = append(out, searchCap{"--max-ep", "ep", o.MaxEP})
				break
			}
		}
	}
	if p.MicroBatch == o.MaxMicroBatch {
		per := m.GlobalBatch / p.DP // sequences per data-parallel rank
		for mb := p.MicroBatch + 1; mb <= per; mb++ {
			if per%mb == 0 {
				out = append(out, searchCap{"--max-mb", "mb", o.MaxMicroBatch})
				break
			}
		}
	}
	if v := 2 * p.VPP; p.VPP == o.MaxVPP && p.PP > 1 && (m.GlobalBatch/(p.DP*p.MicroBatch))%p.PP == 0 && splittable(m.Layers, p.PP, v) {
		out = append(out, searchCap{"--max-vpp", "vpp", o.MaxVPP})
	}
	return out
}

// better is the ranking: higher throughput, then more memory headroom,
// then a smaller blast radius, then the canonical plan string.
func better(a, b *Estimate) bool {
	if a.TokensPerS != b.TokensPerS {
		return a.TokensPerS > b.TokensPerS
	}
	if a.MemHeadroomGiB != b.MemHeadroomGiB {
		return a.MemHeadroomGiB > b.MemHeadroomGiB
	}
	if a.BlastRadius != b.BlastRadius {
		return a.BlastRadius < b.BlastRadius
	}
	return a.Plan.String() < b.Plan.String()
}

// Search enumerates every plan for model m on all devices of cluster c
// (DP×TP×PP×CP×EP, micro-batch, recompute, ZeRO, interleaving, SP), drops
// those that do not fit in memory, and returns the TopK by predicted
// throughput. A pipelined ZeRO-3 plan priced as a lower stage (see
// Estimate.PricedZeRO) is left out where the space holds that stage: the
// same configuration is not listed twice. It is deterministic and
// single-threaded; ctx cancels it.
func Search(ctx context.Context, m Model, c Cluster, opts SearchOptions) ([]Estimate, error) {
	ev, err := newEvaluator(m, c)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	m, c = ev.m, ev.c
	o := opts.withDefaults(m, c)
	for _, z := range o.ZeRO {
		if z < 0 || z > 3 {
			return nil, fmt.Errorf("search: ZeRO stage %d out of range 0..3", z)
		}
	}
	for _, r := range o.Recompute {
		if r != RecomputeNone && r != RecomputeSelective && r != RecomputeFull {
			return nil, fmt.Errorf("search: unknown recompute mode %q", r)
		}
	}
	// With FlashAttention selective recompute re-runs nothing (the
	// attention core is never stored): it is the plan without recompute
	// under another name, listed once.
	if m.FlashAttention && slices.Contains(o.Recompute, RecomputeNone) {
		o.Recompute = slices.DeleteFunc(slices.Clone(o.Recompute), func(r Recompute) bool { return r == RecomputeSelective })
	}
	n := c.Devices()
	top := make([]Estimate, 0, o.TopK+1)
	var tried int
	minMem := math.Inf(1)
	var smallest Estimate                // the plan that needs the least memory
	maxHeadroom, fits := math.Inf(-1), 0 // over the plans that fit
	var e Estimate
	consider := func(p Plan) error {
		tried++
		if tried%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("search cancelled after %d plans: %w", tried, err)
			}
		}
		ev.eval(p, &e)
		if e.MemPerDeviceGiB < minMem {
			minMem, smallest = e.MemPerDeviceGiB, e
		}
		if e.Feasible {
			fits++
			maxHeadroom = math.Max(maxHeadroom, e.MemHeadroomGiB)
		}
		if !e.Feasible || e.MemHeadroomGiB < o.MinHeadroomGiB {
			return nil
		}
		// A pipelined ZeRO-3 plan priced as ZeRO-1 or ZeRO-2 is that plan
		// to the digit: listed once, at the lower stage, which the search
		// tries too when the space holds it.
		if e.PricedZeRO != p.ZeRO && slices.Contains(o.ZeRO, e.PricedZeRO) {
			return nil
		}
		if len(top) == o.TopK && !better(&e, &top[len(top)-1]) {
			return nil
		}
		i := sort.Search(len(top), func(i int) bool { return better(&e, &top[i]) })
		top = append(top, Estimate{})
		copy(top[i+1:], top[i:])
		top[i] = e
		if len(top) > o.TopK {
			top = top[:o.TopK]
		}
		return nil
	}

	for tp := 1; tp <= o.MaxTP && tp <= n; tp *= 2 {
		if n%tp != 0 || m.Heads%tp != 0 || m.KVHeads%tp != 0 || m.FFNHidden%tp != 0 {
			continue
		}
		for cp := 1; cp <= o.MaxCP && tp*cp <= n; cp *= 2 {
			if (n/tp)%cp != 0 || cp > 1 && m.SeqLen%(2*cp) != 0 { // (as Check: 2·cp chunks)
				continue
			}
			rest := n / (tp * cp)
			for pp := 1; pp <= rest && pp <= m.Layers; pp++ {
				if rest%pp != 0 {
					continue
				}
				dp := rest / pp
				if m.GlobalBatch%dp != 0 {
					continue
				}
				for ep := 1; ep <= o.MaxEP && ep <= dp*cp; ep++ {
					if ep > 1 && (!m.moe() || m.Experts%ep != 0 || (dp*cp)%ep != 0) {
						continue
					}
					for mb := 1; mb <= o.MaxMicroBatch && dp*mb <= m.GlobalBatch; mb++ {
						if m.GlobalBatch%(dp*mb) != 0 {
							continue
						}
						mbs := m.GlobalBatch / (dp * mb)
						for vpp := 1; vpp <= o.MaxVPP; vpp *= 2 {
							if vpp > 1 && (pp == 1 || mbs%pp != 0 || !splittable(m.Layers, pp, vpp)) {
								continue
							}
							for _, sp := range [2]bool{false, true} {
								if sp && (tp == 1 || o.NoSP || (m.SeqLen/cp)%tp != 0) {
									continue
								}
								if !sp && ep > 1 && tp > 1 {
									continue
								}
								for _, r := range o.Recompute {
									for _, z := range o.ZeRO {
										if z > o.ZeRO[0] && dp*cp == 1 {
											// Nothing to shard: ZeRO 1 and 2 are the plan without
											// ZeRO to the digit, and ZeRO-3 only adds its gathered
											// working copy. Listed once, at the lowest stage tried.
											continue
										}
										p := Plan{TP: tp, PP: pp, DP: dp, CP: cp, EP: ep, MicroBatch: mb, Recompute: r,
											ZeRO: z, VPP: vpp, SP: sp, Overlap: o.Overlap}
										if err := consider(p); err != nil {
											return nil, err
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if len(top) == 0 {
		if tried == 0 {
			return nil, fmt.Errorf("search %s on %s: %w: no plan splits %d devices within the search's limits: tp must divide heads (%d), kv_heads (%d) "+
				"and ffn_hidden (%d), pp at most layers (%d), 2·cp divide seq_len (%d) where cp > 1, dp·mb divide global_batch (%d)",
				m.Name, c.Name, ErrNoPlan, n, m.Heads, m.KVHeads, m.FFNHidden, m.Layers, m.SeqLen, m.GlobalBatch)
		}
		if fits > 0 { // they fit, but none leaves the headroom asked for
			return nil, fmt.Errorf("search %s on %s: %w: %d plans tried, %d fit, but none leaves the %.1f GiB of headroom per device asked for: the most is %.1f GiB",
				m.Name, c.Name, ErrNoPlan, tried, fits, o.MinHeadroomGiB, maxHeadroom)
		}
		mb := smallest.Mem
		msg := fmt.Sprintf("search %s on %s: %v: %d plans tried, the smallest needs %.1f GiB per device, %.1f usable: %s "+
			"(params %.1f, grads %.1f, optimizer %.1f, activations %.1f GiB)",
			m.Name, c.Name, ErrNoPlan, tried, minMem, c.Device.MemoryGiB-c.ReservedGiB, smallest.Plan,
			mb.ParamsGiB, mb.GradsGiB, mb.OptimizerGiB, mb.ActivationsGiB)
		if hint := restrictionHint(ctx, m, c, opts); hint != "" {
			msg += "; " + hint
		}
		return nil, &noPlanError{msg: msg, Smallest: smallest}
	}
	for i := range top {
		top[i].Config = top[i].Plan.String()
		var at []string
		for _, cp := range o.caps(m, c, top[i].Plan) {
			at = append(at, cp.String())
		}
		top[i].AtCaps = strings.Join(at, ", ")
	}
	return top, nil
}

// noPlanError is a search that found no plan that fits; it wraps ErrNoPlan.
type noPlanError struct {
	msg      string
	Smallest Estimate
}

func (e *noPlanError) Error() string { return e.msg }
func (e *noPlanError) Unwrap() error { return ErrNoPlan }

// restrictionHint names the options of opts that left out what shrinks a
// plan's memory — ZeRO stages (--zero), recompute modes (--recompute),
// sequence parallelism (--no-sp), larger tp or cp (--max-tp, --max-cp) —
// and says what the search finds without them: the best plan that fits
// then, or that nothing fits even so. "" when opts restricts none.
func restrictionHint(ctx context.Context, m Model, c Cluster, opts SearchOptions) string {
	wide := opts
	var flags []string
	if len(opts.ZeRO) > 0 && slices.Max(opts.ZeRO) < 3 {
		var left []string // the stages above the highest tried shard more
		for z := slices.Max(opts.ZeRO) + 1; z <= 3; z++ {
			left = append(left, fmt.Sprint(z))
		}
		flags = append(flags, "--zero (no ZeRO-"+strings.Join(left, ", ")+")")
		wide.ZeRO = nil
	}
	if len(opts.Recompute) > 0 && !slices.Contains(opts.Recompute, RecomputeFull) {
		left := "full" // (each mode keeps less than the one before)
		if !slices.Contains(opts.Recompute, RecomputeSelective) && !m.FlashAttention {
			left = "selective or full"
		}
		flags = append(flags, "--recompute (no "+left+" recompute)")
		wide.Recompute = nil
	}
	if opts.NoSP {
		flags = append(flags, "--no-sp")
		wide.NoSP = false
	}
	if opts.MaxTP > 0 && opts.MaxTP < c.DevicesPerNode {
		flags = append(flags, fmt.Sprintf("--max-tp %d", opts.MaxTP))
		wide.MaxTP = 0
	}
	if opts.MaxCP > 0 && opts.MaxCP < defaultMaxCP(m.SeqLen) {
		flags = append(flags, fmt.Sprintf("--max-cp %d", opts.MaxCP))
		wide.MaxCP = 0
	}
	if opts.MaxEP > 0 && m.moe() && opts.MaxEP < m.Experts {
		flags = append(flags, fmt.Sprintf("--max-ep %d", opts.MaxEP))
		wide.MaxEP = 0
	}
	if len(flags) == 0 {
		return ""
	}
	head := "left out by " + strings.Join(flags, ", ")
	wide.TopK = 1
	best, err := Search(ctx, m, c, wide)
	switch {
	case err == nil && len(best) > 0:
		return fmt.Sprintf("%s: without them the best plan that fits is %s (%.1f GiB per device)", head, best[0].Plan, best[0].MemPerDeviceGiB)
	case errors.Is(err, ErrNoPlan):
		return head + ": without them no plan fits either"
	}
	return head
}

// splittable says whether layers fit on pp stages of vpp chunks each.
func splittable(layers, pp, vpp int) bool {
	_, ok := splitLayers(layers, pp, vpp, 1, 0)
	return ok
}
