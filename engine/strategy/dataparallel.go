package strategy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// DPInput describes a data-parallel job of the built-in engine (one rank
// per node, a fixed global batch) and what was measured on its nodes: the
// planner chooses how many of them to train on.
type DPInput struct {
	// GlobalBatch is the examples per step over all ranks.
	GlobalBatch int
	// SecondsPerExample is one example's computation (forward, backward
	// and optimizer share) on one undisturbed core, measured on the nodes
	// (the slowest node's).
	SecondsPerExample float64
	// StepOverhead is the per-step computation that does not shrink with
	// the examples per rank (the optimizer update over all parameters,
	// loop overhead), measured likewise.
	StepOverhead time.Duration
	// Hosts[r] names the host of candidate rank r, and Cores[r] that
	// host's cores: ranks on one host share its cores. Ranks are taken in
	// order: d ranks means ranks 0..d-1.
	Hosts []string
	Cores []int
	// Spread is how much slower than undisturbed the nodes' measured
	// steps ran: equally likely multiples (≥ 1) of the undisturbed time,
	// from all nodes. Ranks step in lockstep, so a phase takes as long as
	// its slowest rank: d ranks' computation and allreduce take the
	// expected largest of d draws (ExpectedMax). Empty: undisturbed.
	Spread []float64
	// Comm prices one step's gradient exchange over d ≥ 2 ranks whose
	// computation takes compute seconds per step and who run slow
	// (oversubscribed cores, the slowest rank): the collective engine's
	// α-β model fed the measured links, and a compressed exchange's
	// encoding and decoding, both undisturbed (PlanDataParallel applies
	// slow). An adaptive codec chooses by what the ranks will measure:
	// compute and the exchanges slowed by slow.
	Comm func(d int, compute float64, slow DPSlowdown) DPComm
	// MinRanks and MaxRanks bound the choice (1 ≤ MinRanks ≤ MaxRanks ≤
	// len(Hosts)).
	MinRanks, MaxRanks int
	// RankStep, when above 1, allows only multiples of it (a node trains
	// RankStep ranks: whole nodes are held or not); MinRanks and MaxRanks
	// must be multiples too.
	RankStep int
}

// DPSlowdown is how much slower than undisturbed d ranks run: work on a
// core (computation, encoding, decoding) by Cores × Straggle, the network
// by Straggle.
type DPSlowdown struct {
	Cores    float64 // the most ranks per core on any host (≥ 1)
	Straggle float64 // the expected slowest rank's slowdown (≥ 1)
}

// DPComm is one step's gradient exchange.
type DPComm struct {
	// Network is the collectives' time; Codec the encoding and decoding
	// on one undisturbed core (0 uncompressed), which ranks sharing a
	// core slow down like the rest of their computation.
	Network, Codec time.Duration
	// Name is the compression priced ("" for none).
	Name string
}

// DPCandidate is the prediction for one data-parallel degree.
type DPCandidate struct {
	Ranks          int     `json:"ranks"`
	ComputeSeconds float64 `json:"compute_s"`
	CommSeconds    float64 `json:"comm_s"`
	StepSeconds    float64 `json:"step_s"`
	ExamplesPerSec float64 `json:"examples_per_s"`
	// Oversubscription is the most ranks per core on any host (> 1: ranks
	// share cores, and computation slows by that factor).
	Oversubscription float64 `json:"oversubscription"`
	// Straggle is the expected slowest of Ranks ranks' slowdowns (DPInput
	// Spread): computation and allreduce are priced at that multiple of
	// an undisturbed rank's.
	Straggle float64 `json:"straggle,omitempty"`
	// Codec is the compression priced and CodecSeconds its encoding and
	// decoding, part of CommSeconds.
	Codec        string  `json:"codec,omitempty"`
	CodecSeconds float64 `json:"codec_s,omitempty"`
}

// DPPlan is PlanDataParallel's choice.
type DPPlan struct {
	Ranks      int           `json:"ranks"`
	Candidates []DPCandidate `json:"candidates"`
	Reason     string        `json:"reason"`
}

// PlanDataParallel predicts the step time of every data-parallel degree
// d in [MinRanks, MaxRanks] and picks the fastest: each rank computes
// ⌈G/d⌉ examples (slowed by the ranks sharing a core on the busiest host)
// plus the fixed per-step work, then the ranks exchange the gradient
// (allreduce, or a compressed exchange whose encoding shares the cores
// like computation); both phases wait for the slowest of the d ranks
// (Spread). Communication is not overlapped (the built-in engine's plain
// step). A tie goes to
// fewer ranks (fewer nodes held, smaller blast radius).
func PlanDataParallel(in DPInput) (DPPlan, error) {
	switch {
	case in.GlobalBatch < 1:
		return DPPlan{}, fmt.Errorf("strategy: data parallel: global batch %d", in.GlobalBatch)
	case len(in.Hosts) == 0 || len(in.Cores) != len(in.Hosts):
		return DPPlan{}, fmt.Errorf("strategy: data parallel: %d hosts, %d core counts", len(in.Hosts), len(in.Cores))
	case in.MinRanks < 1 || in.MaxRanks < in.MinRanks || in.MaxRanks > len(in.Hosts):
		return DPPlan{}, fmt.Errorf("strategy: data parallel: ranks %d..%d of %d nodes", in.MinRanks, in.MaxRanks, len(in.Hosts))
	case in.RankStep < 0 || in.RankStep > 1 && (in.MinRanks%in.RankStep != 0 || in.MaxRanks%in.RankStep != 0):
		return DPPlan{}, fmt.Errorf("strategy: data parallel: ranks %d..%d in steps of %d: want multiples of the step", in.MinRanks, in.MaxRanks, in.RankStep)
	case !(in.SecondsPerExample > 0) || math.IsInf(in.SecondsPerExample, 0) || in.StepOverhead < 0:
		return DPPlan{}, fmt.Errorf("strategy: data parallel: computation %g s/example, %v per step: want measured, positive values",
			in.SecondsPerExample, in.StepOverhead)
	case in.Comm == nil:
		return DPPlan{}, errors.New("strategy: data parallel: no communication model")
	}
	for r, c := range in.Cores {
		if c < 1 {
			return DPPlan{}, fmt.Errorf("strategy: data parallel: rank %d's host %q has %d cores", r, in.Hosts[r], c)
		}
	}
	for i, v := range in.Spread {
		if !(v >= 1) || math.IsInf(v, 0) {
			return DPPlan{}, fmt.Errorf("strategy: data parallel: spread[%d] = %g: want multiples ≥ 1 of the undisturbed step", i, v)
		}
	}
	var plan DPPlan
	best := -1
	for d := in.MinRanks; d <= in.MaxRanks; d += max(in.RankStep, 1) {
		perHost := map[string]int{}
		over := 1.0
		for r := range d {
			perHost[in.Hosts[r]]++
			over = max(over, float64(perHost[in.Hosts[r]])/float64(in.Cores[r]))
		}
		examples := (in.GlobalBatch + d - 1) / d
		straggle := ExpectedMax(in.Spread, d)
		compute := (float64(examples)*in.SecondsPerExample + in.StepOverhead.Seconds()) * over * straggle
		c := DPCandidate{Ranks: d, ComputeSeconds: compute, Oversubscription: over}
		if d > 1 {
			x := in.Comm(d, compute, DPSlowdown{Cores: over, Straggle: straggle})
			c.CodecSeconds = x.Codec.Seconds() * over * straggle
			c.CommSeconds = x.Network.Seconds()*straggle + c.CodecSeconds
			c.Codec = x.Name
		}
		c.StepSeconds = compute + c.CommSeconds
		if len(in.Spread) > 0 {
			c.Straggle = straggle
		}
		c.ExamplesPerSec = float64(in.GlobalBatch) / c.StepSeconds
		plan.Candidates = append(plan.Candidates, c)
		if best < 0 || c.StepSeconds < plan.Candidates[best].StepSeconds {
			best = len(plan.Candidates) - 1
		}
	}
	b := plan.Candidates[best]
	plan.Ranks = b.Ranks
	ms := func(s float64) string { return fmt.Sprintf("%.3g ms", 1e3*s) }
	comm := "allreduce"
	if b.Codec != "" {
		comm = fmt.Sprintf("exchange, %s compressed, %s of it encoding and decoding", b.Codec, ms(b.CodecSeconds))
	}
	plan.Reason = fmt.Sprintf("%d rank(s): %s per step (%s computation, %s %s", b.Ranks, ms(b.StepSeconds), ms(b.ComputeSeconds), ms(b.CommSeconds), comm)
	if b.Straggle > 0 {
		plan.Reason += fmt.Sprintf(", both %.2f× undisturbed for the slowest rank", b.Straggle)
	}
	plan.Reason += ")"
	if last := plan.Candidates[len(plan.Candidates)-1]; last.Ranks != b.Ranks {
		why := "communication grows faster than computation shrinks"
		if last.Oversubscription > b.Oversubscription {
			why = fmt.Sprintf("%d ranks would share cores (%.2g per core)", last.Ranks, last.Oversubscription)
		}
		plan.Reason += fmt.Sprintf("; %d would take %s: %s", last.Ranks, ms(last.StepSeconds), why)
	}
	return plan, nil
}

// ExpectedMax is the expected largest of d independent draws from values,
// equally likely (1 when values is empty): with v₁ ≤ … ≤ vₙ, the largest
// draw is vᵢ with probability (i/n)^d − ((i−1)/n)^d.
func ExpectedMax(values []float64, d int) float64 {
	n := len(values)
	if n == 0 || d < 1 {
		return 1
	}
	v := slices.Clone(values)
	slices.Sort(v)
	e, below := 0.0, 0.0
	for i, x := range v {
		at := math.Pow(float64(i+1)/float64(n), float64(d))
		e += x * (at - below)
		below = at
	}
	return e
}
