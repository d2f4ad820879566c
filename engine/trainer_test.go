package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"default", func(*Config) {}, ""},
		{"no hidden layers", func(c *Config) { c.Hidden = nil }, ""},
		{"rank in range", func(c *Config) { c.World, c.Rank = 4, 3 }, ""},
		{"zero width", func(c *Config) { c.Hidden = []int{128, 0} }, "Hidden[1]=0"},
		{"too many layers", func(c *Config) { c.Hidden = make([]int, MaxHiddenLayers+1) }, "layers"},
		{"zero lr", func(c *Config) { c.LearningRate = 0 }, "LearningRate=0"},
		{"nan lr", func(c *Config) { c.LearningRate = math.NaN() }, "LearningRate=NaN"},
		{"inf lr", func(c *Config) { c.LearningRate = math.Inf(1) }, "LearningRate=+Inf"},
		{"zero batch", func(c *Config) { c.BatchPerRank = 0 }, "BatchPerRank=0"},
		{"zero world", func(c *Config) { c.World = 0 }, "World=0"},
		{"rank too big", func(c *Config) { c.World, c.Rank = 2, 2 }, "Rank=2"},
		{"negative rank", func(c *Config) { c.Rank = -1 }, "Rank=-1"},
		{"global batch", func(c *Config) { c.BatchPerRank, c.GlobalBatch, c.World = 0, 10, 3 }, ""},
		{"global batch ignores batch per rank", func(c *Config) { c.GlobalBatch, c.World = 10, 3 }, ""},
		{"global batch equals world", func(c *Config) { c.GlobalBatch, c.World, c.Rank = 4, 4, 3 }, ""},
		{"global batch below world", func(c *Config) { c.GlobalBatch, c.World = 2, 3 }, "GlobalBatch=2 is smaller than World=3"},
		{"negative global batch", func(c *Config) { c.GlobalBatch = -1 }, "GlobalBatch=-1"},
		{"huge global batch", func(c *Config) { c.GlobalBatch = MaxGlobalBatch + 1 }, "GlobalBatch=1073741825"},
		{"global batch too big per rank", func(c *Config) { c.GlobalBatch, c.World = 2*MaxBatchPerRank+1, 2 }, "up to 65537 examples per rank"},
		{"global batch, garbage batch per rank", func(c *Config) { c.GlobalBatch, c.BatchPerRank = 8, -1 }, "BatchPerRank=-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok.clone()
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewTrainerRejects(t *testing.T) {
	ds := synthDataset(1, 10, 4, 3)
	bad := *ds
	bad.Y = slices.Clone(ds.Y)
	bad.Y[3] = 7
	tests := []struct {
		name    string
		cfg     Config
		ds      *Dataset
		wantErr string
	}{
		{"invalid config", Config{Hidden: []int{4}, LearningRate: 1e-3, BatchPerRank: 0, World: 1}, ds, "BatchPerRank"},
		{"nil dataset", Config{LearningRate: 1e-3, BatchPerRank: 2, World: 1}, nil, "nil"},
		{"label out of range", Config{LearningRate: 1e-3, BatchPerRank: 2, World: 1}, &bad, "label 7 at index 3"},
		{"global batch too big", Config{LearningRate: 1e-3, BatchPerRank: 4, World: 3}, ds, "BatchPerRank*World=12 exceeds the 10 training examples"},
		{"GlobalBatch too big", Config{LearningRate: 1e-3, GlobalBatch: 11, World: 3}, ds, "GlobalBatch=11 exceeds the 10 training examples"},
		{"GlobalBatch below World", Config{LearningRate: 1e-3, GlobalBatch: 2, World: 3}, ds, "GlobalBatch=2 is smaller than World=3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTrainer(tc.cfg, tc.ds)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewTrainer() error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestInitDeterministicAndLayout(t *testing.T) {
	ds := synthDataset(1, 64, 10, 4)
	cfg := Config{Seed: 5, Hidden: []int{7, 6}, LearningRate: 1e-3, BatchPerRank: 4, World: 2}
	a, _ := NewTrainer(cfg, ds)
	cfg.Rank = 1
	b, _ := NewTrainer(cfg, ds)
	cfg.Seed = 6
	c, _ := NewTrainer(cfg, ds)
	if want := 10*7 + 7 + 7*6 + 6 + 6*4 + 4; a.NumParams() != want || len(a.Params()) != want {
		t.Fatalf("NumParams() = %d, len(Params()) = %d, want %d", a.NumParams(), len(a.Params()), want)
	}
	if a.WeightsSHA256() != b.WeightsSHA256() {
		t.Error("ranks 0 and 1 start from different weights")
	}
	if a.WeightsSHA256() == c.WeightsSHA256() {
		t.Error("seeds 5 and 6 give the same weights")
	}
	// Biases start at zero, weights within the He / Glorot limits.
	for l, ly := range a.layers {
		limit := math.Sqrt(6 / float64(ly.in))
		if l == len(a.layers)-1 {
			limit = math.Sqrt(6 / float64(ly.in+ly.out))
		}
		for _, w := range ly.w {
			if math.Abs(float64(w)) > limit {
				t.Fatalf("layer %d weight %v outside ±%v", l, w, limit)
			}
		}
		for _, bias := range ly.b {
			if bias != 0 {
				t.Fatalf("layer %d bias %v, want 0", l, bias)
			}
		}
	}
}

// TestWeightsSHA256Golden pins the weights for a fixed config at init and
// after some steps, so that any change to the init, the PCG streams, the data
// order, the arithmetic or the layout is noticed: the hashes are part of the
// reproducibility contract (resuming on another host must give the same run).
func TestWeightsSHA256Golden(t *testing.T) {
	ds := synthDataset(1, 64, 10, 4)
	tr, err := NewTrainer(Config{Seed: 42, Hidden: []int{8}, LearningRate: 1e-2, BatchPerRank: 4, World: 1}, ds)
	if err != nil {
		t.Fatal(err)
	}
	const wantInit = "c1e5f6835b83165ab0d97cbb9734eabebb573e98ff48f54f680f16f2ad54df1a"
	if got := tr.WeightsSHA256(); got != wantInit {
		t.Errorf("initial WeightsSHA256() = %s, want %s", got, wantInit)
	}
	for i := 0; i < 30; i++ { // Crosses epoch boundaries (16 steps per epoch).
		if _, err := tr.Step(context.Background(), noReduce); err != nil {
			t.Fatal(err)
		}
	}
	const want30 = "05116236a3c40502f10f5041da3d5ce05bb78a0410f92e931572e2af15188f8c"
	if got := tr.WeightsSHA256(); got != want30 {
		t.Errorf("WeightsSHA256() after 30 steps = %s, want %s", got, want30)
	}
}

// TestDataOrder checks that each step's global batch is a slice of an epoch
// permutation, that the ranks partition it, and that epochs differ.
// denseBatch is the batch loadBatch listed, as rows of features (the
// zeros it does not list included).
func denseBatch(tr *Trainer) []float32 {
	dim, l0 := tr.train.Dim, &tr.lists[0]
	x := make([]float32, tr.rows*dim)
	for i := range tr.rows {
		ri, rv := l0.slot(i)
		for t, k := range ri[:l0.n[i]] {
			x[i*dim+int(k)] = rv[t]
		}
	}
	return x
}

func TestDataOrder(t *testing.T) {
	const n, world, batch = 50, 3, 4 // 12 per step, 4 steps per epoch, 2 examples dropped.
	ds := &Dataset{X: make([]float32, n), Y: make([]uint8, n), N: n, Dim: 1, Classes: 2}
	for i := range ds.X {
		ds.X[i] = float32(i) // Feature encodes the example index.
	}
	ts := newRanks(t, Config{Seed: 9, LearningRate: 1e-3, BatchPerRank: batch, World: world}, ds)
	epochs := make([][]int, 3)
	for s := int64(0); s < 12; s++ {
		for _, tr := range ts {
			tr.loadBatch(s)
			for _, x := range denseBatch(tr) {
				epochs[s/4] = append(epochs[s/4], int(x))
			}
		}
	}
	for e, seen := range epochs {
		if len(seen) != 48 {
			t.Fatalf("epoch %d: %d examples, want 48", e, len(seen))
		}
		sorted := slices.Clone(seen)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != 48 {
			t.Errorf("epoch %d repeats an example: %v", e, seen)
		}
	}
	if slices.Equal(epochs[0], epochs[1]) || slices.Equal(epochs[1], epochs[2]) {
		t.Error("consecutive epochs use the same order")
	}
	// Recomputing an earlier epoch (e.g. after Restore) gives the same order.
	ts[1].loadBatch(9)
	again := denseBatch(ts[1])
	ts[1].loadBatch(0)
	ts[1].loadBatch(9)
	if !slices.Equal(again, denseBatch(ts[1])) {
		t.Error("the batch of step 9 changed after visiting another epoch")
	}
}

func TestStepDoesNotAllocate(t *testing.T) {
	ds := synthDataset(1, 100, 20, 5)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"batch per rank", Config{Seed: 1, Hidden: []int{16, 8}, LearningRate: 1e-3, BatchPerRank: 10, World: 1}},
		{"global batch, uneven slice", Config{Seed: 1, Hidden: []int{16, 8}, LearningRate: 1e-3, GlobalBatch: 10, World: 3, Rank: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTrainer(tc.cfg, ds)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// 10 steps per epoch: the measured runs cross epoch boundaries.
			allocs := testing.AllocsPerRun(50, func() {
				if _, err := tr.Step(ctx, noReduce); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("Step allocates %.1f times per call, want 0", allocs)
			}
		})
	}
}

func TestFailedStepLeavesTrainerUnchanged(t *testing.T) {
	ds := synthDataset(1, 100, 12, 3)
	cfg := Config{Seed: 3, Hidden: []int{8}, LearningRate: 1e-2, BatchPerRank: 10, World: 1}
	errBoom := errors.New("link down")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		reduce ReduceFunc
		is     error
	}{
		{"reduce error", context.Background(), func(_ context.Context, buf []float32) error {
			clear(buf) // A failing collective may leave garbage behind.
			return errBoom
		}, errBoom},
		{"canceled context", canceled, noReduce, context.Canceled},
		{"nan gradient", context.Background(), func(_ context.Context, buf []float32) error {
			buf[3] = float32(math.NaN())
			return nil
		}, nil},
		{"inf loss", context.Background(), func(_ context.Context, buf []float32) error {
			buf[len(buf)-1] = float32(math.Inf(1))
			return nil
		}, nil},
		{"nil reduce", context.Background(), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, _ := NewTrainer(cfg, ds)
			tr, _ := NewTrainer(cfg, ds)
			for i := 0; i < 3; i++ {
				ref.Step(context.Background(), noReduce)
				tr.Step(context.Background(), noReduce)
			}
			before := tr.Snapshot()
			_, err := tr.Step(tc.ctx, tc.reduce)
			if err == nil {
				t.Fatal("Step succeeded, want an error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Step error %v does not wrap %v", err, tc.is)
			}
			after := tr.Snapshot()
			if after.Step != before.Step || after.AdamT != before.AdamT ||
				!slices.Equal(after.Params, before.Params) || !slices.Equal(after.M, before.M) || !slices.Equal(after.V, before.V) {
				t.Fatal("failed Step changed the trainer state")
			}
			// Retrying succeeds and matches a run that never failed.
			for i := 0; i < 3; i++ {
				if _, err := tr.Step(context.Background(), noReduce); err != nil {
					t.Fatal(err)
				}
				ref.Step(context.Background(), noReduce)
			}
			if tr.WeightsSHA256() != ref.WeightsSHA256() || tr.GlobalStep() != ref.GlobalStep() {
				t.Error("retried run differs from an uninterrupted one")
			}
		})
	}
}

// TestDataParallelDeterminism runs the same 2-rank job twice and checks
// that all replicas of both runs end bit-identical, and that training with
// two ranks differs from one rank (so the reduce really took part).
func TestDataParallelDeterminism(t *testing.T) {
	ds := synthDataset(2, 400, 16, 4)
	cfg := Config{Seed: 8, Hidden: []int{12}, LearningRate: 1e-2, BatchPerRank: 8, World: 2}
	var hashes []string
	for run := 0; run < 2; run++ {
		ts := newRanks(t, cfg, ds)
		runLockstep(t, ts, 60) // Crosses two epoch boundaries (25 steps/epoch).
		for r, tr := range ts {
			if tr.GlobalStep() != 60 {
				t.Fatalf("run %d rank %d at step %d, want 60", run, r, tr.GlobalStep())
			}
			hashes = append(hashes, tr.WeightsSHA256())
		}
	}
	for i, h := range hashes {
		if h != hashes[0] {
			t.Fatalf("replica %d hash %s differs from %s", i, h, hashes[0])
		}
	}
	solo, _ := NewTrainer(Config{Seed: 8, Hidden: []int{12}, LearningRate: 1e-2, BatchPerRank: 8, World: 1}, ds)
	for i := 0; i < 60; i++ {
		solo.Step(context.Background(), noReduce)
	}
	if solo.WeightsSHA256() == hashes[0] {
		t.Error("World=2 gives the same weights as World=1; the reduce had no effect")
	}
}

// TestSnapshotResume checks snapshot at k -> marshal -> unmarshal ->
// restore into fresh trainers -> continue to n equals an uninterrupted run.
func TestSnapshotResume(t *testing.T) {
	ds := synthDataset(4, 300, 16, 4)
	cfg := Config{Seed: 13, Hidden: []int{10, 6}, LearningRate: 5e-3, BatchPerRank: 6, World: 2}
	const k, n = 17, 45 // 25 steps per epoch: resume mid-epoch, cross one after.
	full := newRanks(t, cfg, ds)
	runLockstep(t, full, n)

	first := newRanks(t, cfg, ds)
	runLockstep(t, first, k)
	blob, err := first[1].Snapshot().MarshalBinary() // Any rank's snapshot restores every rank.
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := st.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	resumed := newRanks(t, cfg, ds)
	for _, tr := range resumed {
		if err := tr.Restore(&st); err != nil {
			t.Fatal(err)
		}
		if tr.GlobalStep() != k || tr.WeightsSHA256() != first[0].WeightsSHA256() {
			t.Fatal("restored trainer does not match the snapshot")
		}
	}
	runLockstep(t, resumed, n-k)
	if got, want := resumed[0].WeightsSHA256(), full[0].WeightsSHA256(); got != want {
		t.Fatalf("resumed run hash %s, uninterrupted %s", got, want)
	}
	if resumed[0].ConfigFingerprint() != st.ConfigFingerprint() {
		t.Error("ConfigFingerprint of trainer and state differ")
	}
}

func TestRestoreRejectsMismatch(t *testing.T) {
	ds := synthDataset(1, 100, 8, 3)
	cfg := Config{Seed: 1, Hidden: []int{5}, LearningRate: 1e-3, BatchPerRank: 4, World: 2}
	tr, _ := NewTrainer(cfg, ds)
	tests := []struct {
		name   string
		mutate func(*State)
		want   []string
	}{
		{"seed", func(s *State) { s.Seed = 2 }, []string{"Seed: state has 2, trainer has 1"}},
		{"hidden", func(s *State) { s.Hidden = []int{6} }, []string{"Hidden: state has [6], trainer has [5]"}},
		{"lr and world", func(s *State) { s.LearningRate, s.World = 2e-3, 3 }, []string{"LearningRate", "World: state has 3"}},
		{"batch", func(s *State) { s.BatchPerRank = 5 }, []string{"BatchPerRank"}},
		{"dataset shape", func(s *State) { s.Dim = 9 }, []string{"Dim: state has 9"}},
		{"short moments", func(s *State) { s.V = s.V[:3] }, []string{"len(V): state has 3"}},
		{"negative step", func(s *State) { s.Step = -1 }, []string{"Step=-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tr.Snapshot()
			tc.mutate(st)
			before := tr.WeightsSHA256()
			err := tr.Restore(st)
			if err == nil {
				t.Fatal("Restore succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Restore error %q does not mention %q", err, w)
				}
			}
			if tr.WeightsSHA256() != before {
				t.Error("failed Restore changed the weights")
			}
		})
	}
	if err := tr.Restore(nil); err == nil {
		t.Error("Restore(nil) succeeded")
	}
}

func TestEvaluate(t *testing.T) {
	ds := synthDataset(5, 600, 10, 3)
	tr, _ := NewTrainer(Config{Seed: 2, Hidden: []int{16}, LearningRate: 1e-2, BatchPerRank: 20, World: 1}, ds)
	acc0, loss0 := tr.Evaluate(ds)
	for i := 0; i < 150; i++ {
		tr.Step(context.Background(), noReduce)
	}
	acc, loss := tr.Evaluate(ds)
	if !(acc > acc0 && acc > 0.8 && loss < loss0) {
		t.Errorf("after training acc %.3f loss %.3f, before acc %.3f loss %.3f: want clearly better", acc, loss, acc0, loss0)
	}
	if a, l := tr.Evaluate(synthDataset(5, 10, 11, 3)); !math.IsNaN(a) || !math.IsNaN(l) {
		t.Errorf("Evaluate on a mismatched dataset = %v, %v, want NaN", a, l)
	}
	if _, _, err := tr.EvaluateErr(synthDataset(5, 10, 10, 4)); err == nil || !strings.Contains(err.Error(), "4 classes") {
		t.Errorf("EvaluateErr on a mismatched dataset: %v", err)
	}
}

// TestExpNonPos4: the interleaved four-at-a-time exponential has
// expNonPos's bits for every argument, special ones included (a special
// argument anywhere sends all four the scalar way).
func TestExpNonPos4(t *testing.T) {
	xs := []float64{0, -1e-12, -0.1, -0.3465, -0.5, -1, -2.5, -10, -87.3, -103, -400, -699, -700, -701, -800, 699, 800,
		math.NaN(), math.Inf(-1), math.Inf(1), math.Copysign(0, -1), -5e-324}
	rng := rand.New(rand.NewPCG(4, 4))
	for range 2000 {
		xs = append(xs, -rng.ExpFloat64()*20)
	}
	for i := 0; i+4 <= len(xs); i++ {
		got := [4]float64{}
		got[0], got[1], got[2], got[3] = expNonPos4(xs[i], xs[i+1], xs[i+2], xs[i+3])
		for j, g := range got {
			if want := expNonPos(xs[i+j]); math.Float64bits(g) != math.Float64bits(want) {
				t.Fatalf("expNonPos4 lane %d of %v: %v (%#x), want %v (%#x)", j, xs[i:i+4], g, math.Float64bits(g), want, math.Float64bits(want))
			}
		}
	}
}

func TestExpNonPos(t *testing.T) {
	for _, x := range []float64{0, -1e-12, -0.1, -0.3465, -0.5, -1, -2.5, -10, -87.3, -103, -400, -699} {
		got, want := expNonPos(x), math.Exp(x)
		if math.Abs(got-want) > 1e-13*want {
			t.Errorf("expNonPos(%v) = %v, want %v", x, got, want)
		}
	}
	if expNonPos(-800) != 0 || !math.IsNaN(expNonPos(math.NaN())) || !math.IsInf(expNonPos(800), 1) {
		t.Error("expNonPos special cases wrong")
	}
}

func BenchmarkStep(b *testing.B) {
	train, _ := loadMNISTForTest(b)
	perRank := DefaultConfig() // Hidden {128}, BatchPerRank 32.
	global := perRank
	global.BatchPerRank, global.GlobalBatch, global.World, global.Rank = 0, 3*32, 3, 1 // The same 32 examples per rank.
	for _, bc := range []struct {
		name string
		cfg  Config
	}{{"BatchPerRank", perRank}, {"GlobalBatch", global}} {
		b.Run(bc.name, func(b *testing.B) {
			tr, err := NewTrainer(bc.cfg, train)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Step(ctx, noReduce); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

// TestUseStepBuffer: training with the step buffer moved elsewhere (as a
// node moves it into shared memory for a chunk) gives the same weights,
// the reducer sees the new buffer, and the restore moves back for good.
func TestUseStepBuffer(t *testing.T) {
	ds := synthDataset(3, 400, 16, 4)
	cfg := Config{Seed: 5, Hidden: []int{12}, LearningRate: 1e-2, BatchPerRank: 8, World: 1}
	ref, _ := NewTrainer(cfg, ds)
	tr, _ := NewTrainer(cfg, ds)
	if _, err := tr.UseStepBuffer(make([]float32, tr.BufferLen()+1)); err == nil {
		t.Fatal("a buffer of the wrong length was taken")
	}
	for i := range 30 {
		if _, err := ref.Step(context.Background(), noReduce); err != nil {
			t.Fatal(err)
		}
		var restore func()
		buf := make([]float32, tr.BufferLen())
		if i%10 < 5 { // half of the steps on another buffer
			var err error
			if restore, err = tr.UseStepBuffer(buf); err != nil {
				t.Fatal(err)
			}
		}
		saw := false
		if _, err := tr.Step(context.Background(), func(_ context.Context, b []float32) error {
			saw = &b[0] == &buf[0]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if saw != (restore != nil) {
			t.Fatalf("step %d: reducer saw the moved buffer: %v, want %v", i, saw, restore != nil)
		}
		if restore != nil {
			restore()
			restore() // twice is harmless
		}
	}
	if tr.WeightsSHA256() != ref.WeightsSHA256() {
		t.Error("weights differ from training on the trainer's own buffer")
	}
}
