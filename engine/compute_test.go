package engine

import (
	"context"
	"errors"
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
