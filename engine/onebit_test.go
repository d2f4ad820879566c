package engine

import (
	"context"
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func oneBitConfig(freeze int64) Config {
	return Config{Seed: 9, Hidden: []int{12, 6}, LearningRate: 1e-2, BatchPerRank: 6, World: 2,
		Optimizer: OneBitAdam, FreezeStep: freeze}
}

func TestOptimizerConfig(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"adam", func(c *Config) {}, ""},
		{"onebit-adam", func(c *Config) { c.Optimizer, c.FreezeStep = OneBitAdam, 10 }, ""},
		{"onebit-adam without freeze step", func(c *Config) { c.Optimizer = OneBitAdam }, "FreezeStep=0 with Optimizer onebit-adam"},
		{"huge freeze step", func(c *Config) { c.Optimizer, c.FreezeStep = OneBitAdam, MaxFreezeStep+1 }, "want 1..1099511627776"},
		{"freeze step with adam", func(c *Config) { c.FreezeStep = 5 }, "FreezeStep=5 with Optimizer adam"},
		{"unknown optimizer", func(c *Config) { c.Optimizer = 7 }, "Optimizer=7"},
		{"bucket sizes", func(c *Config) { c.BucketBytes, c.FirstBucketBytes = 1<<20, 4 }, ""},
		{"tiny bucket", func(c *Config) { c.BucketBytes = 3 }, "BucketBytes=3"},
		{"negative first bucket", func(c *Config) { c.FirstBucketBytes = -1 }, "FirstBucketBytes=-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
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

func TestParseOptimizer(t *testing.T) {
	tests := []struct {
		in   string
		want Optimizer
		ok   bool
	}{
		{"", Adam, true}, {"adam", Adam, true}, {"onebit-adam", OneBitAdam, true}, {"1bit-adam", OneBitAdam, true},
		{"sgd", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseOptimizer(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseOptimizer(%q) = %v, %v", tc.in, got, err)
		}
		if tc.ok && tc.in != "" && tc.in != "1bit-adam" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

// TestOneBitAdamWarmupIsAdam: before FreezeStep a OneBitAdam run is the
// Adam run bit for bit (the extra statistics do not touch the update),
// its reducer sees the gradient, and from FreezeStep on the momentum.
func TestOneBitAdamWarmupIsAdam(t *testing.T) {
	ds := synthDataset(3, 300, 16, 4)
	const freeze = 7
	cfg := oneBitConfig(freeze)
	adamCfg := cfg
	adamCfg.Optimizer, adamCfg.FreezeStep = Adam, 0
	one, adam := newRanks(t, cfg, ds), newRanks(t, adamCfg, ds)
	if got, want := one[0].BufferLen(), one[0].NumParams()+1+2*3; got != want {
		t.Errorf("BufferLen() = %d, want NumParams+1+2 per layer = %d", got, want)
	}
	if got, want := adam[0].BufferLen(), adam[0].NumParams()+1; got != want {
		t.Errorf("Adam BufferLen() = %d, want %d", got, want)
	}
	for s := range freeze + 2 {
		want := Gradient
		if s >= freeze {
			want = Momentum
		}
		if got := one[1].Payload(); got != want {
			t.Errorf("step %d: Payload() = %v, want %v", s, got, want)
		}
		runLockstep(t, one, 1)
		runLockstep(t, adam, 1)
		same := one[0].WeightsSHA256() == adam[0].WeightsSHA256()
		if s < freeze && !same {
			t.Fatalf("step %d (warm-up): OneBitAdam differs from Adam", s)
		}
		if s >= freeze && same {
			t.Fatalf("step %d (frozen): OneBitAdam still equals Adam", s)
		}
	}
	if adam[0].Payload() != Gradient {
		t.Error("Adam's payload is not the gradient")
	}
}

// TestOneBitAdamTrains: with a lossless reducer the frozen phase keeps
// learning, every replica stays bit-identical, and two runs agree.
func TestOneBitAdamTrains(t *testing.T) {
	ds := synthDataset(4, 600, 16, 4)
	cfg := oneBitConfig(10)
	var hashes []string
	for range 2 {
		ts := newRanks(t, cfg, ds)
		_, before := ts[0].Evaluate(ds)
		runLockstep(t, ts, 150)
		acc, after := ts[0].Evaluate(ds)
		if !(after < 0.7*before) || acc < 0.8 {
			t.Errorf("loss %.3f -> %.3f, accuracy %.3f: OneBitAdam did not learn", before, after, acc)
		}
		for _, tr := range ts {
			hashes = append(hashes, tr.WeightsSHA256())
		}
	}
	for i, h := range hashes {
		if h != hashes[0] {
			t.Fatalf("replica %d differs", i)
		}
	}
}

// TestOneBitAdamResume: a snapshot before or after the freeze, through
// the binary encoding (version 3, with the caller's CommState carried
// along untouched), continues bit-identically.
func TestOneBitAdamResume(t *testing.T) {
	ds := synthDataset(5, 300, 16, 4)
	const freeze, n = 12, 40
	for _, k := range []int{5, freeze, 27} {
		cfg := oneBitConfig(freeze)
		full := newRanks(t, cfg, ds)
		runLockstep(t, full, n)
		first := newRanks(t, cfg, ds)
		runLockstep(t, first, k)
		snap := first[1].Snapshot()
		snap.CommState = [][]byte{[]byte("rank 0 residuals"), {}, []byte("odd")}
		blob, err := snap.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint16(blob[4:]); v != 3 {
			t.Errorf("k=%d: encoded as version %d, want 3", k, v)
		}
		var st State
		if err := st.UnmarshalBinary(blob); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(st.CommState, snap.CommState) || st.Optimizer != OneBitAdam || st.FreezeStep != freeze ||
			!slices.Equal(st.SqAvg, snap.SqAvg) || !slices.Equal(st.SqFrozen, snap.SqFrozen) {
			t.Fatalf("k=%d: round trip lost the extension", k)
		}
		resumed := newRanks(t, cfg, ds)
		for _, tr := range resumed {
			if err := tr.Restore(&st); err != nil {
				t.Fatal(err)
			}
		}
		runLockstep(t, resumed, n-k)
		if got, want := resumed[0].WeightsSHA256(), full[0].WeightsSHA256(); got != want {
			t.Fatalf("resumed at %d: hash %s, uninterrupted %s", k, got, want)
		}
	}
}

func TestOneBitAdamStepDoesNotAllocate(t *testing.T) {
	ds := synthDataset(1, 100, 20, 5)
	cfg := oneBitConfig(3)
	cfg.World, cfg.BatchPerRank = 1, 10
	tr, err := NewTrainer(cfg, ds)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(20, func() { // crosses the freeze
		if _, err := tr.Step(ctx, noReduce); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Step allocates %.1f times per call, want 0", allocs)
	}
}

// TestOneBitAdamFloorAndScale: a parameter whose gradient was 0 during
// the warm-up (a blank input feature) still moves after the freeze, by
// an amount bounded like an Adam step, and the scale of the frozen
// variance follows the gradient statistics.
func TestOneBitAdamFloorAndScale(t *testing.T) {
	ds := synthDataset(6, 200, 8, 3)
	// Feature 0 is blank for the warm-up's examples, then not.
	cfg := Config{Seed: 1, Hidden: []int{4}, LearningRate: 1e-2, BatchPerRank: 10, World: 1, Optimizer: OneBitAdam, FreezeStep: 3}
	tr, err := NewTrainer(cfg, ds)
	if err != nil {
		t.Fatal(err)
	}
	for s := range 3 {
		for _, idx := range tr.batchIndices(int64(s)) {
			ds.X[int(idx)*ds.Dim] = 0
		}
	}
	for range 3 {
		if _, err := tr.Step(context.Background(), noReduce); err != nil {
			t.Fatal(err)
		}
	}
	for k := range tr.layers[0].out {
		if tr.v[k] != 0 {
			t.Fatalf("v of a blank feature's weight is %v, want 0", tr.v[k])
		}
	}
	before := slices.Clone(tr.params[:tr.layers[0].out])
	for range 5 {
		if _, err := tr.Step(context.Background(), noReduce); err != nil {
			t.Fatal(err)
		}
	}
	moved := false
	for k, p := range tr.params[:tr.layers[0].out] {
		d := math.Abs(float64(p - before[k]))
		if d > 0 {
			moved = true
		}
		if d > 5*10*cfg.LearningRate {
			t.Errorf("weight %d of the blank feature moved by %v in 5 steps", k, d)
		}
	}
	if !moved {
		t.Error("weights of a feature blank during the warm-up never move")
	}
	for j := range tr.sq {
		if !(tr.sqFrozen[j] > 0) || !(tr.sq[j] > 0) {
			t.Errorf("statistic %d: average %v, at freeze %v, want both > 0", j, tr.sq[j], tr.sqFrozen[j])
		}
	}
}

func TestRestoreRejectsOptimizerMismatch(t *testing.T) {
	ds := synthDataset(1, 100, 8, 3)
	one, _ := NewTrainer(oneBitConfig(5), ds)
	adamCfg := oneBitConfig(5)
	adamCfg.Optimizer, adamCfg.FreezeStep = Adam, 0
	adam, _ := NewTrainer(adamCfg, ds)
	other, _ := NewTrainer(oneBitConfig(6), ds)
	tests := []struct {
		name string
		dst  *Trainer
		src  *State
		want []string
	}{
		{"onebit into adam", adam, one.Snapshot(), []string{"Optimizer: state has onebit-adam, trainer has adam", "FreezeStep", "len(SqAvg)"}},
		{"adam into onebit", one, adam.Snapshot(), []string{"Optimizer: state has adam"}},
		{"freeze step", other, one.Snapshot(), []string{"FreezeStep: state has 5, trainer has 6"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.dst.Restore(tc.src)
			if err == nil {
				t.Fatal("Restore succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if one.ConfigFingerprint() == adam.ConfigFingerprint() || one.ConfigFingerprint() == other.ConfigFingerprint() {
		t.Error("the optimizer and the freeze step do not change the fingerprint")
	}
}

// TestStateExtension: extended states round-trip in versions 3 and 4, an
// Adam state with CommState is extended too, and malformed extensions are
// refused.
func TestStateExtension(t *testing.T) {
	oneBit := func() *State { return testStateFor(t, oneBitConfig(2)) }
	global := func() *State {
		c := oneBitConfig(2)
		c.BatchPerRank, c.GlobalBatch = 0, 11
		return testStateFor(t, c)
	}
	withComm := func() *State {
		s := testState(t)
		s.CommState = [][]byte{{1, 2, 3, 4, 5}, nil}
		return s
	}
	for _, tc := range []struct {
		name    string
		st      *State
		version uint16
	}{{"onebit", oneBit(), 3}, {"onebit global batch", global(), 4}, {"adam with comm state", withComm(), 3}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.st.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if v := binary.LittleEndian.Uint16(b[4:]); v != tc.version {
				t.Errorf("version %d, want %d", v, tc.version)
			}
			var got State
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			again, _ := got.MarshalBinary()
			if string(again) != string(b) {
				t.Error("re-encoding differs")
			}
		})
	}
	good, err := oneBit().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := len(oneBit().Params)
	ext := stateHeaderLen + 4*2 + 12*p // where the extension starts
	edit := func(f func(b []byte) []byte) []byte { return reseal(f(slices.Clone(good))) }
	adamGood, _ := testState(t).MarshalBinary()
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"extension of nothing", reseal(append(append(slices.Clone(adamGood[:len(adamGood)-4]), make([]byte, 20)...), 0, 0, 0, 0)), "20 trailing bytes"},
		{"version 3 extending nothing", func() []byte {
			b := slices.Clone(adamGood[:len(adamGood)-4])
			b[4] = 3
			b = append(b, make([]byte, 20)...)
			return reseal(append(b, 0, 0, 0, 0))
		}(), "extends nothing"},
		{"wrong statistics count", edit(func(b []byte) []byte { b[ext+4]--; return b }), "engine: unmarshal state"},
		{"unknown optimizer", edit(func(b []byte) []byte { b[ext] = 9; return b }), "Optimizer=9"},
		{"truncated comm state", edit(func(b []byte) []byte {
			n := len(b) - stateCRCLen
			binary.LittleEndian.PutUint32(b[n-4:], 1) // one entry, but no bytes
			return b
		}), "truncated extension"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			if err := st.UnmarshalBinary(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnmarshalBinary() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	bad := oneBit()
	bad.SqAvg = bad.SqAvg[:1]
	if _, err := bad.MarshalBinary(); err == nil || !strings.Contains(err.Error(), "len(SqAvg)=1") {
		t.Errorf("MarshalBinary with short statistics: %v", err)
	}
}

// FuzzStateUnmarshalExt is FuzzStateUnmarshal seeded with extended states.
func FuzzStateUnmarshalExt(f *testing.F) {
	s := testStateFor(f, oneBitConfig(2))
	s.CommState = [][]byte{[]byte("abc"), {}}
	good, err := s.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-9])
	f.Fuzz(func(t *testing.T, data []byte) {
		sealed := reseal(append(slices.Clone(data), 0, 0, 0, 0))
		for _, in := range [][]byte{data, sealed} {
			var st State
			if err := st.UnmarshalBinary(in); err != nil {
				continue
			}
			out, err := st.MarshalBinary()
			if err != nil {
				t.Fatalf("accepted state does not re-marshal: %v", err)
			}
			if string(out) != string(in) {
				t.Fatal("accepted state re-marshals to different bytes")
			}
		}
	})
}
