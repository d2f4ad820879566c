package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// referencePosition walks the data cursor one step at a time: a step takes
// the next g entries of the epoch, or starts the next epoch when fewer
// than g are left. It is the definition position's closed form must meet.
func referencePosition(n int64, base int, sched []BatchChange, s int64) (epoch, off int64) {
	g := int64(base)
	for k := int64(0); ; k++ {
		for _, b := range sched {
			if b.FromStep == k {
				g = int64(b.GlobalBatch)
			}
		}
		if off+g > n {
			epoch, off = epoch+1, 0
		}
		if k == s {
			return epoch, off
		}
		off += g
	}
}

func TestSchedulePosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 60 {
		n := 20 + rng.IntN(200)
		base := 1 + rng.IntN(n/2)
		var sched []BatchChange
		from := int64(-1)
		for range rng.IntN(6) {
			from += 1 + rng.Int64N(40)
			sched = append(sched, BatchChange{FromStep: from, GlobalBatch: 1 + rng.IntN(n), LearningRate: 1e-3})
		}
		if trial%5 == 0 { // the same batch throughout: the scheduleless positions
			for i := range sched {
				sched[i].GlobalBatch = base
			}
		}
		ds := &Dataset{X: make([]float32, n), Y: make([]uint8, n), N: n, Dim: 1, Classes: 2}
		tr, err := NewTrainer(Config{Seed: 1, LearningRate: 1e-3, GlobalBatch: base, World: 1, Schedule: sched}, ds)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := NewTrainer(Config{Seed: 1, LearningRate: 1e-3, GlobalBatch: base, World: 1}, ds)
		if err != nil {
			t.Fatal(err)
		}
		for s := int64(0); s < 300; s++ {
			e, off := tr.position(s)
			we, woff := referencePosition(int64(n), base, sched, s)
			if e != we || off != woff {
				t.Fatalf("N=%d G=%d schedule %v step %d: position (%d, %d), want (%d, %d)", n, base, sched, s, e, off, we, woff)
			}
			if trial%5 == 0 || len(sched) == 0 || s < sched[0].FromStep {
				if pe, poff := plain.position(s); pe != e || poff != off {
					t.Fatalf("N=%d G=%d step %d: (%d, %d) with the schedule, (%d, %d) without", n, base, s, e, off, pe, poff)
				}
			}
			g, _, _ := tr.cfg.batchAt(s)
			if off+int64(g) > int64(n) {
				t.Fatalf("step %d: batch [%d, %d) runs past the epoch of %d", s, off, off+int64(g), n)
			}
		}
	}
}

// With a schedule the ranks still partition each step's global batch
// (now of the size in force), whatever the world size.
func TestScheduleSlicesAnyWorld(t *testing.T) {
	const n = 97
	ds := &Dataset{X: make([]float32, n), Y: make([]uint8, n), N: n, Dim: 1, Classes: 2}
	sched := []BatchChange{{FromStep: 3, GlobalBatch: 24, LearningRate: 1}, {FromStep: 7, GlobalBatch: 9, LearningRate: 1}, {FromStep: 20, GlobalBatch: 31, LearningRate: 1}}
	var want [][]int32
	for _, w := range []int{1, 2, 3, 9} {
		ts := newRanks(t, Config{Seed: 4, LearningRate: 1e-3, GlobalBatch: 16, World: w, Schedule: sched}, ds)
		for s := int64(0); s < 40; s++ {
			var got []int32
			for _, tr := range ts {
				got = append(got, tr.batchIndices(s)...)
			}
			g, _, _ := ts[0].cfg.batchAt(s)
			if len(got) != g {
				t.Fatalf("W=%d step %d: %d examples, want %d", w, s, len(got), g)
			}
			if w == 1 {
				want = append(want, slices.Clone(got))
			} else if !slices.Equal(got, want[s]) {
				t.Fatalf("W=%d step %d: global batch %v, W=1 had %v", w, s, got, want[s])
			}
		}
	}
}

// scheduleRun trains cfg on world ranks for steps steps and returns rank
// 0's weights hash and parameters.
func scheduleRun(t *testing.T, cfg Config, ds *Dataset, world, steps int) (string, []float32) {
	t.Helper()
	ts := newRanks(t, withWorld(cfg, world), ds)
	runLockstep(t, ts, steps)
	checkReplicas(t, ts)
	return ts[0].WeightsSHA256(), slices.Clone(ts[0].Params())
}

func TestScheduleTraining(t *testing.T) {
	ds := synthDataset(5, 240, 10, 3)
	base := Config{Seed: 9, Hidden: []int{16}, LearningRate: 2e-3, GlobalBatch: 24}
	sched := []BatchChange{{FromStep: 4, GlobalBatch: 18, LearningRate: 1.5e-3}, {FromStep: 9, GlobalBatch: 30, LearningRate: 2.5e-3}}
	withSched := base
	withSched.Schedule = sched
	const steps = 16

	plain, _ := scheduleRun(t, base, ds, 2, steps)
	got, params := scheduleRun(t, withSched, ds, 2, steps)
	if got == plain {
		t.Fatal("the schedule changed nothing")
	}

	t.Run("same batch and rate is no change", func(t *testing.T) {
		same := base
		same.Schedule = []BatchChange{{FromStep: 5, GlobalBatch: 24, LearningRate: 2e-3}, {FromStep: 11, GlobalBatch: 24, LearningRate: 2e-3}}
		if h, _ := scheduleRun(t, same, ds, 2, steps); h != plain {
			t.Fatal("a schedule that repeats the batch and rate trains differently")
		}
	})
	t.Run("the learning rate takes effect", func(t *testing.T) {
		lr := base
		lr.Schedule = []BatchChange{{FromStep: 4, GlobalBatch: 24, LearningRate: 4e-3}}
		if h, _ := scheduleRun(t, lr, ds, 2, steps); h == plain {
			t.Fatal("changing only the learning rate changed nothing")
		}
	})
	t.Run("any world size", func(t *testing.T) {
		for _, w := range []int{1, 3} {
			_, p := scheduleRun(t, withSched, ds, w, steps)
			if d := maxAbsDiff(p, params); d > 1e-6 {
				t.Errorf("W=%d: weights differ from W=2 by %g", w, d)
			}
		}
	})
	t.Run("restore mid-schedule is bit-identical", func(t *testing.T) {
		for _, at := range []int{3, 4, 7, 12} {
			ts := newRanks(t, withWorld(withSched, 2), ds)
			runLockstep(t, ts, at)
			st := ts[0].Snapshot()
			fresh := newRanks(t, withWorld(withSched, 3), ds)
			for _, tr := range fresh {
				if err := tr.Restore(st); err != nil {
					t.Fatal(err)
				}
			}
			runLockstep(t, fresh, steps-at)
			if d := maxAbsDiff(fresh[0].Params(), params); d > 1e-6 {
				t.Errorf("restored at step %d onto 3 ranks: weights differ by %g", at, d)
			}
			again := newRanks(t, withWorld(withSched, 2), ds)
			for _, tr := range again {
				if err := tr.Restore(st); err != nil {
					t.Fatal(err)
				}
			}
			runLockstep(t, again, steps-at)
			if again[0].WeightsSHA256() != got {
				t.Errorf("restored at step %d on the same world: not bit-identical", at)
			}
		}
	})
	t.Run("appending at a chunk boundary", func(t *testing.T) {
		// A kept trainer learns each change as the run decides it, at the
		// step it takes effect: the same bits as knowing them all along.
		ts := newRanks(t, withWorld(base, 2), ds)
		runLockstep(t, ts, 4)
		for _, tr := range ts {
			if err := tr.SetSchedule(sched[:1]); err != nil {
				t.Fatal(err)
			}
		}
		runLockstep(t, ts, 5)
		for _, tr := range ts {
			if err := tr.SetSchedule(sched); err != nil {
				t.Fatal(err)
			}
		}
		runLockstep(t, ts, steps-9)
		if ts[0].WeightsSHA256() != got {
			t.Fatal("appending the changes as they come trains differently from the whole schedule")
		}
		err := ts[0].SetSchedule(sched[1:])
		if err == nil || !strings.Contains(err.Error(), "cannot change batch") {
			t.Fatalf("rewriting a past change: err %v, want a refusal", err)
		}
	})
}

func TestScheduleValidation(t *testing.T) {
	ds := synthDataset(1, 50, 4, 2)
	ok := Config{Seed: 1, LearningRate: 1e-3, GlobalBatch: 8, World: 2}
	tests := []struct {
		name  string
		edit  func(*Config)
		wants string
	}{
		{"needs global batch mode", func(c *Config) {
			c.GlobalBatch, c.BatchPerRank = 0, 4
			c.Schedule = []BatchChange{{FromStep: 1, GlobalBatch: 8, LearningRate: 1}}
		}, "without GlobalBatch"},
		{"before step 0", func(c *Config) { c.Schedule = []BatchChange{{FromStep: -1, GlobalBatch: 8, LearningRate: 1}} }, "Schedule[0].FromStep=-1"},
		{"out of order", func(c *Config) {
			c.Schedule = []BatchChange{{FromStep: 5, GlobalBatch: 8, LearningRate: 1}, {FromStep: 5, GlobalBatch: 6, LearningRate: 1}}
		}, "Schedule[1].FromStep=5"},
		{"smaller than the world", func(c *Config) { c.Schedule = []BatchChange{{FromStep: 2, GlobalBatch: 1, LearningRate: 1}} }, "smaller than World=2"},
		{"bad rate", func(c *Config) {
			c.Schedule = []BatchChange{{FromStep: 2, GlobalBatch: 8, LearningRate: math.Inf(1)}}
		}, "Schedule[0].LearningRate=+Inf"},
		{"more than the data", func(c *Config) { c.Schedule = []BatchChange{{FromStep: 2, GlobalBatch: 51, LearningRate: 1}} }, "exceeds the 50 training examples"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := NewTrainer(c, ds)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("err %v, want %q", err, tc.wants)
			}
		})
	}
	tr, err := NewTrainer(ok, ds)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetSchedule([]BatchChange{{FromStep: 3, GlobalBatch: 60, LearningRate: 1}}); err == nil {
		t.Fatal("SetSchedule accepted a batch larger than the data")
	}
	if got := fmt.Sprint(tr.Schedule()); got != "[]" {
		t.Fatalf("a refused schedule was kept: %s", got)
	}
}
