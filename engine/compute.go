package engine

import (
	"context"
	"fmt"
	"time"
)

// ComputeCost is a rank's measured computation per step: Overhead plus
// PerExample per example of its batch.
type ComputeCost struct {
	PerExample time.Duration
	Overhead   time.Duration
}

// MeasureCompute times single-rank steps (World 1, no communication) of
// cfg's model on train at two batch sizes, small and large, and fits the
// step time t(b) = Overhead + b·PerExample through their fastest steps
// (the minimum is the least disturbed by other work on the machine). It
// spends about budget (at least three steps per size) and honours ctx.
func MeasureCompute(ctx context.Context, cfg Config, train *Dataset, budget time.Duration) (ComputeCost, error) {
	small, large := 8, 64
	if train != nil {
		large = min(large, train.N)
		small = min(small, max(1, large/8))
	}
	fastest := func(batch int, spend time.Duration) (time.Duration, error) {
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
			best = min(best, time.Since(t0))
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
	if large == small || t2 <= t1 {
		// No slope to fit (noise, or one size): all of it per example.
		return ComputeCost{PerExample: t2 / time.Duration(large)}, nil
	}
	per := (t2 - t1) / time.Duration(large-small)
	return ComputeCost{PerExample: per, Overhead: max(0, t1-time.Duration(small)*per)}, nil
}
