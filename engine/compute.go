package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// ComputeCost is a rank's measured computation per step: Overhead plus
// PerExample per example of its batch on an undisturbed core, and how much
// slower steps ran than that.
type ComputeCost struct {
	PerExample time.Duration
	Overhead   time.Duration
	// Spread is the distribution of the large batch's step times as
	// multiples of the fastest (each ≥ 1, ascending, at most SpreadPoints
	// equally likely values): what other work on the machine, caches and
	// the scheduler add to a step. A rank's step takes Overhead +
	// b·PerExample times a draw from it.
	Spread []float64
}

// SpreadPoints is the most values ComputeCost.Spread holds.
const SpreadPoints = 32

// MeasureCompute times single-rank steps (World 1, no communication) of
// cfg's model on train at two batch sizes, small and large, and fits the
// step time t(b) = Overhead + b·PerExample through their fastest steps
// (the minimum is the least disturbed by other work on the machine); the
// large batch's steps give the Spread around it. It spends about budget
// (at least three steps per size) and honours ctx.
func MeasureCompute(ctx context.Context, cfg Config, train *Dataset, budget time.Duration) (ComputeCost, error) {
	small, large := 8, 64
	if train != nil {
		large = min(large, train.N)
		small = min(small, max(1, large/8))
	}
	var times []time.Duration
	fastest := func(batch int, spend time.Duration) (time.Duration, error) {
		times = times[:0]
		c := cfg.clone()
		c.Rank, c.World, c.BatchPerRank, c.GlobalBatch = 0, 1, batch, 0
		t, err := NewTrainer(c, train)
		if err != nil {
			return 0, err
		}
		noop := func(context.Context, []float32) error { return nil }
		if _, err := t.Step(ctx, noop); err != nil { // warm caches
			return 0, err
		}
		best := time.Duration(1<<63 - 1)
		start := time.Now()
		for n := 0; n < 3 || time.Since(start) < spend; n++ {
			t0 := time.Now()
			if _, err := t.Step(ctx, noop); err != nil {
				return 0, err
			}
			d := time.Since(t0)
			best = min(best, d)
			times = append(times, d)
		}
		return best, nil
	}
	t1, err := fastest(small, budget/2)
	if err != nil {
		return ComputeCost{}, fmt.Errorf("engine: measure compute: %w", err)
	}
	t2, err := fastest(large, budget/2)
	if err != nil {
		return ComputeCost{}, fmt.Errorf("engine: measure compute: %w", err)
	}
	spread := quantiles(times, t2, SpreadPoints)
	if large == small || t2 <= t1 {
		// No slope to fit (noise, or one size): all of it per example.
		return ComputeCost{PerExample: t2 / time.Duration(large), Spread: spread}, nil
	}
	per := (t2 - t1) / time.Duration(large-small)
	return ComputeCost{PerExample: per, Overhead: max(0, t1-time.Duration(small)*per), Spread: spread}, nil
}

// quantiles summarises times as at most n equally likely multiples of
// best, ascending: the midpoints of n equal slices of the sorted times
// (all of them when there are no more than n).
func quantiles(times []time.Duration, best time.Duration, n int) []float64 {
	s := slices.Clone(times)
	slices.Sort(s)
	k := min(n, len(s))
	out := make([]float64, k)
	for i := range out {
		out[i] = max(1, float64(s[(2*i+1)*len(s)/(2*k)])/float64(best))
	}
	return out
}
