package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestMeasureCompute(t *testing.T) {
	ds := synthDataset(1, 512, 64, 10)
	cfg := Config{Seed: 1, Hidden: []int{256, 256}, LearningRate: 1e-3, BatchPerRank: 1, World: 1}
	c, err := MeasureCompute(context.Background(), cfg, ds, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c.PerExample <= 0 || c.Overhead < 0 {
		t.Fatalf("cost %+v: want a positive per-example time", c)
	}
	if len(c.Spread) == 0 || len(c.Spread) > SpreadPoints || !slices.IsSorted(c.Spread) || c.Spread[0] < 1 {
		t.Errorf("spread %v: want 1..%d ascending multiples of the fastest step, each ≥ 1", c.Spread, SpreadPoints)
	}
	// A wider model costs more per example.
	cfg.Hidden = []int{1024, 1024}
	wide, err := MeasureCompute(context.Background(), cfg, ds, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if wide.PerExample+wide.Overhead/64 <= c.PerExample+c.Overhead/64 {
		t.Errorf("a 16× wider model measured %+v, the narrow one %+v", wide, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureCompute(ctx, cfg, ds, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	cfg.LearningRate = -1
	if _, err := MeasureCompute(context.Background(), cfg, ds, time.Millisecond); err == nil {
		t.Error("an invalid model was measured")
	}
}

func TestQuantiles(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		times []time.Duration
		best  time.Duration
		n     int
		want  []float64
	}{
		{"fewer than n: all, sorted", ms(3, 1, 2), time.Millisecond, 4, []float64{1, 2, 3}},
		{"midpoints of equal slices", ms(8, 1, 2, 7, 3, 6, 4, 5), time.Millisecond, 4, []float64{2, 4, 6, 8}},
		{"never below the fastest", ms(1, 1), 2 * time.Millisecond, 2, []float64{1, 1}},
		{"one value", ms(5, 1, 9), time.Millisecond, 1, []float64{5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantiles(tc.times, tc.best, tc.n); !slices.Equal(got, tc.want) {
				t.Errorf("quantiles(%v, %v, %d) = %v, want %v", tc.times, tc.best, tc.n, got, tc.want)
			}
		})
	}
}
