package engine

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// lockstepLosses advances ts by steps global steps and returns the loss of
// every step (all ranks receive the same reduced loss).
func lockstepLosses(tb testing.TB, ts []*Trainer, steps int) []float32 {
	tb.Helper()
	losses := make([]float32, 0, steps)
	for range steps {
		losses = append(losses, runLockstep(tb, ts, 1))
	}
	return losses
}

// checkReplicas fails unless every rank holds bit-identical weights.
func checkReplicas(tb testing.TB, ts []*Trainer) {
	tb.Helper()
	for r, tr := range ts {
		if tr.WeightsSHA256() != ts[0].WeightsSHA256() {
			tb.Fatalf("rank %d of %d diverged from rank 0", r, len(ts))
		}
	}
}

// maxAbsDiff returns max |a[i]-b[i]|.
func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// maxRelDiff returns max |a[i]-b[i]| / |b[i]|.
func maxRelDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i]))/math.Abs(float64(b[i])))
	}
	return m
}

// withWorld returns cfg on world ranks.
func withWorld(cfg Config, world int) Config {
	cfg.World, cfg.Rank = world, 0
	return cfg
}

// TestGlobalBatchSlices checks that with GlobalBatch the ranks partition
// each step's global batch into contiguous slices of sizes differing by at
// most one, and that the global batch (the concatenation of the slices in
// rank order) depends only on (Seed, step, GlobalBatch), not on World.
func TestGlobalBatchSlices(t *testing.T) {
	tests := []struct {
		n, global int
		worlds    []int
	}{
		{n: 50, global: 12, worlds: []int{1, 2, 3, 4, 5, 7, 12}},
		{n: 50, global: 13, worlds: []int{1, 2, 3, 4, 6, 13}},
		{n: 97, global: 32, worlds: []int{1, 3, 5, 31}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d/G=%d", tc.n, tc.global), func(t *testing.T) {
			ds := &Dataset{X: make([]float32, tc.n), Y: make([]uint8, tc.n), N: tc.n, Dim: 1, Classes: 2}
			steps := int64(3 * (tc.n / tc.global)) // Three epochs.
			var want [][]int32                     // want[s]: the global batch of step s on one rank.
			for _, w := range tc.worlds {
				ts := newRanks(t, Config{Seed: 4, LearningRate: 1e-3, GlobalBatch: tc.global, World: w}, ds)
				for s := int64(0); s < steps; s++ {
					var got []int32
					for r, tr := range ts {
						idx := tr.batchIndices(s)
						if lo, hi := tr.cfg.RankSlice(); len(idx) != hi-lo || lo != r*tc.global/w {
							t.Fatalf("W=%d rank %d: %d examples in [%d,%d), want [%d,%d)", w, r, len(idx), lo, hi, r*tc.global/w, (r+1)*tc.global/w)
						}
						if d := len(idx) - tc.global/w; d < 0 || d > 1 {
							t.Fatalf("W=%d rank %d has %d examples, want %d or %d", w, r, len(idx), tc.global/w, tc.global/w+1)
						}
						got = append(got, idx...)
					}
					if w == tc.worlds[0] {
						want = append(want, got)
						continue
					}
					if !slices.Equal(got, want[s]) {
						t.Fatalf("W=%d step %d: global batch %v, W=%d had %v", w, s, got, tc.worlds[0], want[s])
					}
				}
			}
			// Within an epoch no example repeats.
			perEpoch := int64(tc.n / tc.global)
			for e := int64(0); e < 3; e++ {
				var seen []int32
				for s := e * perEpoch; s < (e+1)*perEpoch; s++ {
					seen = append(seen, want[s]...)
				}
				slices.Sort(seen)
				if len(slices.Compact(seen)) != int(perEpoch)*tc.global {
					t.Errorf("epoch %d repeats an example", e)
				}
			}
		})
	}
}

// TestGlobalBatchMatchesBatchPerRank checks that GlobalBatch =
// BatchPerRank*World on the same World trains bit-identically to the
// BatchPerRank mode (same data order, same gradient scale), so existing
// runs can switch mode without changing their trajectory.
func TestGlobalBatchMatchesBatchPerRank(t *testing.T) {
	ds := synthDataset(3, 300, 12, 4)
	for _, world := range []int{1, 3} {
		t.Run(fmt.Sprintf("W=%d", world), func(t *testing.T) {
			legacy := Config{Seed: 6, Hidden: []int{10}, LearningRate: 1e-2, BatchPerRank: 8, World: world}
			global := legacy
			global.BatchPerRank, global.GlobalBatch = 0, 8*world
			a, b := newRanks(t, legacy, ds), newRanks(t, global, ds)
			la, lb := lockstepLosses(t, a, 40), lockstepLosses(t, b, 40)
			if !slices.Equal(la, lb) {
				t.Errorf("losses differ:\n BatchPerRank %v\n GlobalBatch  %v", la, lb)
			}
			if a[0].WeightsSHA256() != b[0].WeightsSHA256() {
				t.Error("weights differ between the BatchPerRank and GlobalBatch modes")
			}
		})
	}
}

// TestGlobalBatchWorldInvariance trains the same GlobalBatch on 1..7 ranks
// (even and uneven splits, across epoch boundaries) and checks that every
// world size follows the W=1 run up to float32 summation order.
func TestGlobalBatchWorldInvariance(t *testing.T) {
	ds := synthDataset(7, 400, 16, 4)
	base := Config{Seed: 11, Hidden: []int{12, 8}, LearningRate: 1e-2, GlobalBatch: 30}
	const steps = 60 // 13 steps per epoch.
	ref := newRanks(t, withWorld(base, 1), ds)
	refLoss := lockstepLosses(t, ref, steps)
	// Measured: max |Δweight| <= 2.4e-7 and max loss rel. diff <= 1.5e-7
	// for these worlds (the weights are platform-independent, see the
	// package documentation); the bounds leave a margin of about 40.
	const weightTol, lossTol = 1e-5, 1e-5
	for _, world := range []int{2, 3, 4, 7} {
		t.Run(fmt.Sprintf("W=%d", world), func(t *testing.T) {
			ts := newRanks(t, withWorld(base, world), ds)
			loss := lockstepLosses(t, ts, steps)
			checkReplicas(t, ts)
			dw, dl := maxAbsDiff(ts[0].Params(), ref[0].Params()), maxRelDiff(loss, refLoss)
			t.Logf("W=%d vs W=1 after %d steps: max |Δweight| %.3g, max loss rel. diff %.3g", world, steps, dw, dl)
			if dw > weightTol || dl > lossTol {
				t.Errorf("W=%d drifts from W=1: max |Δweight| %.3g (tol %g), max loss rel. diff %.3g (tol %g)", world, dw, weightTol, dl, lossTol)
			}
		})
	}
}

// TestElasticRestoreMNIST is the elastic-shrink scenario on real data: train
// the defaults with GlobalBatch 96 on 3 ranks, checkpoint, continue on 2 or
// 4 ranks (or 1 from the start), and compare with an uninterrupted 3-rank
// run: per-step loss, final weights and test accuracy must match closely.
func TestElasticRestoreMNIST(t *testing.T) {
	train, test := loadMNISTForTest(t)
	base := DefaultConfig()
	base.BatchPerRank, base.GlobalBatch = 0, 96
	const steps = 50
	ref := newRanks(t, withWorld(base, 3), train)
	refLoss := lockstepLosses(t, ref, steps)
	refAcc, _ := ref[0].Evaluate(test)
	// Measured (see the log): max |Δweight| <= 3.6e-7, max loss rel. diff
	// <= 1.3e-7, test accuracy identical (0.8606). Bounds: 1e-5 absolute on
	// every weight (the issue asks for 1e-4), 1e-5 relative on every step's
	// loss, 0.5 percentage points on test accuracy.
	const weightTol, lossTol, accTol = 1e-5, 1e-5, 0.005
	tests := []struct {
		name      string
		fromWorld int // World before the checkpoint (0: none).
		at        int // Step of the checkpoint.
		toWorld   int
	}{
		{"W=1 uninterrupted", 0, 0, 1},
		{"W=3 to 2 at step 20", 3, 20, 2},
		{"W=3 to 4 at step 20", 3, 20, 4},
		{"W=3 to 5 at step 20 (uneven)", 3, 20, 5},
		{"W=3 to 1 at step 37", 3, 37, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var loss []float32
			var st *State
			if tc.fromWorld > 0 {
				first := newRanks(t, withWorld(base, tc.fromWorld), train)
				loss = lockstepLosses(t, first, tc.at)
				blob, err := first[2%tc.fromWorld].Snapshot().MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				st = new(State)
				if err := st.UnmarshalBinary(blob); err != nil {
					t.Fatal(err)
				}
			}
			ts := newRanks(t, withWorld(base, tc.toWorld), train)
			for _, tr := range ts {
				if st == nil {
					break
				}
				if err := tr.Restore(st); err != nil {
					t.Fatalf("restore a W=%d state into W=%d: %v", tc.fromWorld, tc.toWorld, err)
				}
				if tr.GlobalStep() != int64(tc.at) || !slices.Equal(tr.Params(), st.Params) {
					t.Fatal("restored trainer does not match the snapshot")
				}
			}
			loss = append(loss, lockstepLosses(t, ts, steps-tc.at)...)
			checkReplicas(t, ts)
			acc, _ := ts[0].Evaluate(test)
			dw, dl, da := maxAbsDiff(ts[0].Params(), ref[0].Params()), maxRelDiff(loss, refLoss), math.Abs(acc-refAcc)
			t.Logf("%s vs uninterrupted W=3 after %d steps: max |Δweight| %.3g, max loss rel. diff %.3g, test acc %.4f vs %.4f",
				tc.name, steps, dw, dl, acc, refAcc)
			if dw > weightTol || dl > lossTol || da > accTol {
				t.Errorf("elastic run drifts: max |Δweight| %.3g (tol %g), max loss rel. diff %.3g (tol %g), |Δacc| %.4f (tol %g)",
					dw, weightTol, dl, lossTol, da, accTol)
			}
		})
	}
}

// TestRestoreAcrossWorlds checks which states restore into which trainers
// when the world size changes, and that an accepted restore resumes at the
// snapshot.
func TestRestoreAcrossWorlds(t *testing.T) {
	ds := synthDataset(2, 120, 6, 3)
	mk := func(batch, global, world int) Config {
		return Config{Seed: 5, Hidden: []int{4}, LearningRate: 1e-2, BatchPerRank: batch, GlobalBatch: global, World: world}
	}
	tests := []struct {
		name      string
		from, to  Config
		wantErr   string // "" means accepted.
		samePrint bool   // Trainer fingerprints equal.
	}{
		{"global 12: W=3 to W=2", mk(0, 12, 3), mk(0, 12, 2), "", true},
		{"global 12: W=3 to W=1", mk(0, 12, 3), mk(0, 12, 1), "", true},
		{"global 12: W=2 to W=5 (uneven)", mk(0, 12, 2), mk(0, 12, 5), "", true},
		{"global 12 ignores BatchPerRank", mk(0, 12, 3), mk(7, 12, 4), "", true},
		{"per rank 4x3 to global 12 on W=2", mk(4, 0, 3), mk(0, 12, 2), "", false},
		{"global 12 to per rank 6x2", mk(0, 12, 3), mk(6, 0, 2), "", false},
		{"global 12 to 13", mk(0, 12, 3), mk(0, 13, 3), "global batch: state has GlobalBatch 12, trainer has GlobalBatch 13", false},
		{"per rank 4x3 to global 10", mk(4, 0, 3), mk(0, 10, 2), "global batch: state has 12 (BatchPerRank 4 × World 3), trainer has GlobalBatch 10", false},
		{"global 12 to per rank 5x2", mk(0, 12, 3), mk(5, 0, 2), "trainer has 10 (BatchPerRank 5 × World 2)", false},
		{"per rank 4x3 to per rank 6x2", mk(4, 0, 3), mk(6, 0, 2), "World: state has 3, trainer has 2", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := newRanks(t, tc.from, ds)
			runLockstep(t, src, 7)
			st := src[len(src)-1].Snapshot()
			if err := st.check(); err != nil {
				t.Fatalf("snapshot is inconsistent: %v", err)
			}
			dst := newRanks(t, tc.to, ds)
			if got := dst[0].ConfigFingerprint() == src[0].ConfigFingerprint(); got != tc.samePrint {
				t.Errorf("fingerprints equal = %v, want %v", got, tc.samePrint)
			}
			for _, tr := range dst {
				err := tr.Restore(st)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("Restore() = %v, want an error containing %q", err, tc.wantErr)
					}
					if tr.GlobalStep() != 0 {
						t.Fatal("failed Restore changed the trainer")
					}
					continue
				}
				if err != nil {
					t.Fatalf("Restore() = %v, want success", err)
				}
				if tr.GlobalStep() != 7 || tr.WeightsSHA256() != src[0].WeightsSHA256() {
					t.Fatal("restored trainer does not match the snapshot")
				}
				if tr.cfg.GlobalBatch > 0 && tr.ConfigFingerprint() != st.ConfigFingerprint() && st.GlobalBatch > 0 {
					t.Error("ConfigFingerprint of trainer and state differ")
				}
			}
			if tc.wantErr == "" {
				runLockstep(t, dst, 5) // Continues on the new world.
				checkReplicas(t, dst)
			}
		})
	}
}

// TestTensorsCoverParams: the tensors tile the parameter vector in order,
// with their shapes.
func TestTensorsCoverParams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hidden = []int{16, 8}
	tr, err := NewTrainer(cfg, synthDataset(1, 64, 20, 4))
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	ts := tr.Tensors()
	if len(ts) != 6 {
		t.Fatalf("%d tensors, want 6 (3 layers × weight, bias)", len(ts))
	}
	for _, x := range ts {
		if x.Offset != off || x.Rows < 1 || x.Cols < 1 {
			t.Fatalf("%s at %d (%d×%d), want offset %d", x.Name, x.Offset, x.Rows, x.Cols, off)
		}
		off += x.Rows * x.Cols
	}
	if off != tr.NumParams() {
		t.Errorf("tensors cover %d of %d parameters", off, tr.NumParams())
	}
}
