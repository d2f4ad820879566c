package strategy

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// DPInput describes a data-parallel job of the built-in engine (one rank
// per node, a fixed global batch) and what was measured on its nodes: the
// planner chooses how many of them to train on.
type DPInput struct {
	// GlobalBatch is the examples per step over all ranks.
	GlobalBatch int
	// SecondsPerExample is one example's computation (forward, backward
	// and optimizer share) on one core, measured on the nodes (the
	// slowest node's).
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
	// AllReduce is the predicted time of one step's gradient allreduce
	// over d ranks (the collective engine's α-β model fed the measured
	// links); 0 for d = 1.
	AllReduce func(d int) time.Duration
	// MinRanks and MaxRanks bound the choice (1 ≤ MinRanks ≤ MaxRanks ≤
	// len(Hosts)).
	MinRanks, MaxRanks int
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
// plus the fixed per-step work, then the ranks allreduce the gradient.
// Communication is not overlapped (the built-in engine's plain step). A
// tie goes to fewer ranks (fewer nodes held, smaller blast radius).
func PlanDataParallel(in DPInput) (DPPlan, error) {
	switch {
	case in.GlobalBatch < 1:
		return DPPlan{}, fmt.Errorf("strategy: data parallel: global batch %d", in.GlobalBatch)
	case len(in.Hosts) == 0 || len(in.Cores) != len(in.Hosts):
		return DPPlan{}, fmt.Errorf("strategy: data parallel: %d hosts, %d core counts", len(in.Hosts), len(in.Cores))
	case in.MinRanks < 1 || in.MaxRanks < in.MinRanks || in.MaxRanks > len(in.Hosts):
		return DPPlan{}, fmt.Errorf("strategy: data parallel: ranks %d..%d of %d nodes", in.MinRanks, in.MaxRanks, len(in.Hosts))
	case !(in.SecondsPerExample > 0) || math.IsInf(in.SecondsPerExample, 0) || in.StepOverhead < 0:
		return DPPlan{}, fmt.Errorf("strategy: data parallel: computation %g s/example, %v per step: want measured, positive values",
			in.SecondsPerExample, in.StepOverhead)
	case in.AllReduce == nil:
		return DPPlan{}, errors.New("strategy: data parallel: no allreduce model")
	}
	for r, c := range in.Cores {
		if c < 1 {
			return DPPlan{}, fmt.Errorf("strategy: data parallel: rank %d's host %q has %d cores", r, in.Hosts[r], c)
		}
	}
	var plan DPPlan
	best := -1
	for d := in.MinRanks; d <= in.MaxRanks; d++ {
		perHost := map[string]int{}
		over := 1.0
		for r := range d {
			perHost[in.Hosts[r]]++
			over = max(over, float64(perHost[in.Hosts[r]])/float64(in.Cores[r]))
		}
		examples := (in.GlobalBatch + d - 1) / d
		compute := (float64(examples)*in.SecondsPerExample + in.StepOverhead.Seconds()) * over
		comm := 0.0
		if d > 1 {
			comm = in.AllReduce(d).Seconds()
		}
		c := DPCandidate{Ranks: d, ComputeSeconds: compute, CommSeconds: comm, StepSeconds: compute + comm, Oversubscription: over}
		c.ExamplesPerSec = float64(in.GlobalBatch) / c.StepSeconds
		plan.Candidates = append(plan.Candidates, c)
		if best < 0 || c.StepSeconds < plan.Candidates[best].StepSeconds {
			best = len(plan.Candidates) - 1
		}
	}
	b := plan.Candidates[best]
	plan.Ranks = b.Ranks
	ms := func(s float64) string { return fmt.Sprintf("%.3g ms", 1e3*s) }
	plan.Reason = fmt.Sprintf("%d rank(s): %s per step (%s computation, %s allreduce)", b.Ranks, ms(b.StepSeconds), ms(b.ComputeSeconds), ms(b.CommSeconds))
	if last := plan.Candidates[len(plan.Candidates)-1]; last.Ranks != b.Ranks {
		why := "the allreduce grows faster than computation shrinks"
		if last.Oversubscription > b.Oversubscription {
			why = fmt.Sprintf("%d ranks would share cores (%.2g per core)", last.Ranks, last.Oversubscription)
		}
		plan.Reason += fmt.Sprintf("; %d would take %s: %s", last.Ranks, ms(last.StepSeconds), why)
	}
	return plan, nil
}
