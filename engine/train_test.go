package engine

import (
	"runtime"
	"testing"
	"time"
)

func TestTrainMNISTSingleRank(t *testing.T) {
	train, test := loadMNISTForTest(t)
	cfg := Config{Seed: 7, Hidden: []int{64}, LearningRate: 1e-3, BatchPerRank: 64, World: 1}
	tr, err := NewTrainer(cfg, train)
	if err != nil {
		t.Fatal(err)
	}
	acc0, loss0 := tr.Evaluate(test)
	start := time.Now()
	const steps = 400
	for s := 0; s < steps; s++ {
		if _, err := tr.Step(t.Context(), noReduce); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	acc, loss := tr.Evaluate(test)
	t.Logf("World=1 Hidden=%v batch=%d: %d steps in %v (%.0f steps/s, GOMAXPROCS=%d); test acc %.4f -> %.4f, loss %.3f -> %.3f",
		cfg.Hidden, cfg.BatchPerRank, steps, el.Round(time.Millisecond), steps/el.Seconds(), runtime.GOMAXPROCS(0), acc0, acc, loss0, loss)
	if loss > loss0/3 {
		t.Errorf("test loss %.3f after %d steps, want < %.3f (a third of the initial %.3f)", loss, steps, loss0/3, loss0)
	}
	if acc < 0.90 {
		t.Errorf("test accuracy %.4f after %d steps, want >= 0.90", acc, steps)
	}
}

func TestTrainMNISTThreeRanks(t *testing.T) {
	train, test := loadMNISTForTest(t)
	cfg := DefaultConfig()
	cfg.World = 3
	ts := newRanks(t, cfg, train)
	start := time.Now()
	const steps = 800
	var accAt []float64
	for done := 0; done < steps; done += 200 {
		runLockstep(t, ts, 200)
		acc, _ := ts[0].Evaluate(test)
		accAt = append(accAt, acc)
	}
	el := time.Since(start)
	acc, loss := ts[0].Evaluate(test)
	t.Logf("World=3 defaults: %d steps in %v; test acc at 200/400/600/800 steps %.4f, final loss %.3f", steps, el.Round(time.Millisecond), accAt, loss)
	for r := 1; r < len(ts); r++ {
		if ts[r].WeightsSHA256() != ts[0].WeightsSHA256() {
			t.Fatalf("rank %d weights diverged from rank 0", r)
		}
	}
	if acc < 0.95 {
		t.Errorf("test accuracy %.4f after %d steps with 3 ranks, want >= 0.95", acc, steps)
	}
}
