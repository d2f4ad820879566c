package gradsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/engine"
)

// data is a small random classification set (the labels a random linear
// map's argmax), enough to train on.
func data(n, dim, classes int) *engine.Dataset {
	r := rand.New(rand.NewPCG(7, 7))
	ds := &engine.Dataset{X: make([]float32, n*dim), Y: make([]uint8, n), N: n, Dim: dim, Classes: classes}
	for i := range ds.X {
		ds.X[i] = float32(r.Float64()*2 - 1)
	}
	for i := range ds.Y {
		ds.Y[i] = uint8(r.IntN(classes))
	}
	return ds
}

// ranks builds one Syncer per rank of world for policy p.
func ranks(t *testing.T, world int, opt engine.Optimizer, p Policy) []*Syncer {
	t.Helper()
	ds := data(600, 24, 5)
	out := make([]*Syncer, world)
	for r := range world {
		cfg := engine.Config{Seed: 3, Hidden: []int{32, 16}, LearningRate: 1e-2, GlobalBatch: 48, Rank: r, World: world,
			BucketBytes: 512, FirstBucketBytes: 128}
		if opt == engine.OneBitAdam {
			cfg.Optimizer, cfg.FreezeStep = opt, 4
		}
		tr, err := engine.NewTrainer(cfg, ds)
		if err != nil {
			t.Fatal(err)
		}
		if out[r], err = New(tr, p); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// train runs steps steps on every rank over a fresh session of cl.
func train(t *testing.T, cl *ascendtest.Cluster, ss []*Syncer, steps int) {
	t.Helper()
	cl.Run(t, func(c *ascend.Communicator) {
		s := ss[c.Rank()]
		if err := s.Begin(c); err != nil {
			t.Error(err)
			return
		}
		defer s.End()
		for range steps {
			if _, err := s.Step(context.Background()); err != nil {
				t.Errorf("rank %d: %v", c.Rank(), err)
				return
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	for r, s := range ss[1:] {
		if s.Trainer().WeightsSHA256() != ss[0].Trainer().WeightsSHA256() {
			t.Fatalf("rank %d's weights differ from rank 0's", r+1)
		}
	}
}

// TestResumeBitIdentical: for every policy, training k steps, saving the
// trainer state with every rank's Syncer state gathered by GatherStates,
// and restoring both into fresh ranks on new communicators ends
// bit-identical to training straight through — and, where the policy
// keeps residuals, restoring without them does not (so the test can fail).
func TestResumeBitIdentical(t *testing.T) {
	const world, n, k = 3, 14, 9
	tests := []struct {
		name      string
		opt       engine.Optimizer
		p         Policy
		residuals bool
	}{
		{"dense", engine.Adam, Policy{}, false},
		{"overlap", engine.Adam, Policy{Overlap: true}, false},
		{"topk allgather after warm-up", engine.Adam, Policy{Codec: "topk:0.05", Warmup: 3, Exchange: ExchangeAllGather}, true},
		{"int8 two-phase, overlapped warm-up", engine.Adam, Policy{Codec: "int8", Warmup: 2, Overlap: true}, true},
		{"1-bit Adam sign two-phase", engine.OneBitAdam, Policy{Codec: "sign"}, true},
		{"1-bit Adam, int8 warm-up", engine.OneBitAdam, Policy{Codec: "sign", GradCodec: "int8"}, true},
	}
	cl := ascendtest.NewCluster(t, world)
	// One allreduce algorithm for every session, as a run pins it
	// (activities.Node.connect): chosen by each session's calibration, the
	// uninterrupted and the resumed training could sum in different orders.
	cl.Options.Algorithm = ascend.AlgoRing
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			full := ranks(t, world, tc.opt, tc.p)
			train(t, cl, full, n)
			want := full[0].Trainer().WeightsSHA256()

			first := ranks(t, world, tc.opt, tc.p)
			train(t, cl, first, k)
			var states [][]byte
			cl.Run(t, func(c *ascend.Communicator) {
				mine, err := first[c.Rank()].MarshalBinary()
				if err != nil {
					t.Error(err)
					return
				}
				got, err := GatherStates(context.Background(), c, mine)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Rank() == 0 {
					states = got
				}
			})
			snap := first[0].Trainer().Snapshot()
			snap.CommState = states
			blob, err := snap.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			for _, with := range []bool{true, false} {
				var st engine.State
				if err := st.UnmarshalBinary(blob); err != nil {
					t.Fatal(err)
				}
				resumed := ranks(t, world, tc.opt, tc.p)
				for r, s := range resumed {
					if err := s.Trainer().Restore(&st); err != nil {
						t.Fatal(err)
					}
					if with {
						if err := s.UnmarshalBinary(st.CommState[r]); err != nil {
							t.Fatal(err)
						}
					}
				}
				train(t, cl, resumed, n-k)
				got := resumed[0].Trainer().WeightsSHA256()
				switch {
				case with && got != want:
					t.Fatalf("resumed %s, uninterrupted %s", got, want)
				case !with && tc.residuals && got == want:
					t.Fatal("resumed without the residuals and still identical: the residuals carry nothing")
				}
			}
		})
	}
}

// TestStatsAccount: the traffic the compressed phase reports falls by the
// codec's ratio, the phase names what the next step does, and overlap
// reports a hidden share within [0, 1].
func TestStatsAccount(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	ss := ranks(t, 2, engine.Adam, Policy{Codec: "sign", Warmup: 3, Overlap: true})
	if got := ss[0].Phase(); !strings.Contains(got, "warm-up") {
		t.Errorf("phase before the warm-up ends: %q", got)
	}
	train(t, cl, ss, 3)
	warm := ss[0].Stats()
	if warm.CompressedSteps != 0 || warm.BytesSent != warm.DenseBytes || warm.Comm <= 0 || warm.Exposed <= 0 {
		t.Errorf("warm-up stats %+v: want uncompressed, sent = dense, communication timed", warm)
	}
	if h := warm.HiddenFraction(); h < 0 || h > 1 {
		t.Errorf("hidden fraction %v", h)
	}
	if m := ss[0].Measure(); m.BytesPerSec <= 0 || m.Compute <= 0 || m.Ranks != 2 {
		t.Errorf("measure after the warm-up %+v", m)
	}
	train(t, cl, ss, 5)
	d := ss[0].Stats().Sub(warm)
	if d.Steps != 5 || d.CompressedSteps != 5 {
		t.Fatalf("compressed phase stats %+v", d)
	}
	// Sign: 1 bit per value plus a scale per 1024; the loss travels
	// uncompressed; a two-phase exchange sends 2(n−1)/n of an encoding.
	if r := d.TrafficReduction(); r < 16 || r > 32 {
		t.Errorf("sign traffic reduction %.2f×, want between 16 and 32", r)
	}
	if got := ss[0].Phase(); !strings.Contains(got, "sign:1024") {
		t.Errorf("phase %q", got)
	}
}

// TestOneRankDoesNotCompress: alone, a rank has nothing to send, so a
// compressed policy trains exactly as an uncompressed one (no encoding
// cost, no quantisation error) and counts no compressed steps.
func TestOneRankDoesNotCompress(t *testing.T) {
	cl := ascendtest.NewCluster(t, 1)
	for _, tc := range []struct {
		opt          engine.Optimizer
		codec, grads string
	}{{engine.Adam, "int8", ""}, {engine.Adam, "topk:0.01", ""}, {engine.OneBitAdam, "sign", "int8"}} {
		t.Run(fmt.Sprintf("%v/%s", tc.opt, tc.codec), func(t *testing.T) {
			plain := ranks(t, 1, tc.opt, Policy{Codec: "none"})
			comp := ranks(t, 1, tc.opt, Policy{Codec: tc.codec, GradCodec: tc.grads, Warmup: 2})
			train(t, cl, plain, 8)
			train(t, cl, comp, 8)
			if a, b := plain[0].Trainer().WeightsSHA256(), comp[0].Trainer().WeightsSHA256(); a != b {
				t.Errorf("weights %s, uncompressed %s", b, a)
			}
			if st := comp[0].Stats(); st.CompressedSteps != 0 || st.Steps != 8 {
				t.Errorf("stats %+v", st)
			}
			if p := comp[0].Phase(); !strings.Contains(p, "one rank") {
				t.Errorf("phase %q does not say the lone rank sends nothing", p)
			}
		})
	}
}

func TestStepWithoutBeginFails(t *testing.T) {
	s := ranks(t, 1, engine.Adam, Policy{})[0]
	if _, err := s.Step(context.Background()); !errors.Is(err, ErrNotBegun) {
		t.Fatalf("Step without Begin: %v", err)
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		opt  engine.Optimizer
		want string
	}{
		{Policy{Codec: "zstd"}, engine.Adam, "unknown codec"},
		{Policy{Codec: "topk:2"}, engine.Adam, "topk"},
		{Policy{Exchange: "ring"}, engine.Adam, "exchange"},
		{Policy{Warmup: -1}, engine.Adam, "warm-up"},
		{Policy{GradCodec: "int8"}, engine.Adam, "onebit-adam"},
		{Policy{Codec: "powersgd:2"}, engine.OneBitAdam, "powersgd"},
		{Policy{Codec: "powersgd:x"}, engine.Adam, "powersgd rank"},
		{Policy{GradCodec: "auto"}, engine.OneBitAdam, "auto"},
	} {
		if _, err := tc.p.WithDefaults(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.p, err, tc.want)
		}
	}
	p, err := Policy{}.WithDefaults(engine.OneBitAdam)
	if err != nil || p.Exchange != ExchangeTwoPhase || p.Codec != "none" {
		t.Errorf("1-bit Adam defaults %+v, %v", p, err)
	}
}

// TestDecideAndState: an auto policy compresses only once decided; its
// state before the decision restores into a decided Syncer; states refuse
// another codec, garbage and trailing bytes.
func TestDecideAndState(t *testing.T) {
	s := ranks(t, 1, engine.Adam, Policy{Codec: CodecAuto, Warmup: 0})[0]
	if !s.NeedsDecision() || s.Codec() != "" {
		t.Fatalf("auto policy: needs decision %v, codec %q", s.NeedsDecision(), s.Codec())
	}
	undecided, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := &codec.Choice{Codec: "int8:256", Reason: "test"}
	if err := s.Decide("int8", c); err != nil || s.Codec() != "int8:256" || s.Decided() != c || s.NeedsDecision() {
		t.Fatalf("Decide: %v, codec %q", err, s.Codec())
	}
	if err := s.Decide("sign", nil); err == nil {
		t.Error("a second, different decision was accepted")
	}
	decided, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(p Policy) *Syncer { return ranks(t, 1, engine.Adam, p)[0] }
	if err := fresh(Policy{Codec: "int8"}).UnmarshalBinary(undecided); err != nil {
		t.Errorf("pre-decision state into a decided syncer: %v", err)
	}
	auto := fresh(Policy{Codec: CodecAuto})
	if err := auto.UnmarshalBinary(decided); err != nil || auto.Codec() != "int8:256" {
		t.Errorf("decided state into an undecided syncer: %v, codec %q", err, auto.Codec())
	}
	for name, b := range map[string][]byte{
		"other codec": decided,
		"bad magic":   []byte("XXXXX\x00"),
		"truncated":   decided[:len(decided)-3],
		"trailing":    append(bytes.Clone(decided), 0),
	} {
		p := Policy{Codec: "int8"}
		if name == "other codec" {
			p.Codec = "sign"
		}
		if err := fresh(p).UnmarshalBinary(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := fresh(Policy{Codec: "sign"}).Decide("int8", nil); err == nil {
		t.Error("Decide on a fixed codec was accepted")
	}
}

// TestGatherStates: states of different lengths (empty, odd) reach every
// rank intact and in rank order.
func TestGatherStates(t *testing.T) {
	const world = 4
	cl := ascendtest.NewCluster(t, world)
	mine := func(r int) []byte { return bytes.Repeat([]byte{byte(r + 1)}, []int{0, 1, 7, 4096}[r]) }
	var mu sync.Mutex
	got := make([][][]byte, world)
	cl.Run(t, func(c *ascend.Communicator) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := GatherStates(ctx, c, mine(c.Rank()))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		got[c.Rank()] = out
		mu.Unlock()
	})
	for r := range world {
		for q := range world {
			if !bytes.Equal(got[r][q], mine(q)) {
				t.Errorf("rank %d holds %d bytes for rank %d, want %d", r, len(got[r][q]), q, len(mine(q)))
			}
		}
	}
}

func TestAgreeTakesTheMostCompressing(t *testing.T) {
	c := Agree([]codec.Choice{{Codec: "none"}, {Codec: "sign:1024"}, {Codec: "int8:256"}})
	if c.Codec != "sign:1024" {
		t.Errorf("agreed %q", c.Codec)
	}
	if c := ChooseAll(nil); c.Codec != "none" {
		t.Errorf("no measurement: %q", c.Codec)
	}
	if LadderCodec(LadderIndex("topk:0.01")) != "topk:0.01" || LadderIndex("unknown") != 0 {
		t.Error("ladder round trip")
	}
}

// TestCalibrate: the allreduce and every ladder codec's exchange are
// measured, collectively, without touching the training state.
func TestCalibrate(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	ss := ranks(t, 2, engine.Adam, Policy{Codec: CodecAuto, Warmup: 2})
	train(t, cl, ss, 2)
	before := ss[0].Trainer().WeightsSHA256()
	cl.Run(t, func(c *ascend.Communicator) {
		s := ss[c.Rank()]
		if err := s.Begin(c); err != nil {
			t.Error(err)
			return
		}
		defer s.End()
		if err := s.Calibrate(context.Background()); err != nil {
			t.Error(err)
		}
	})
	m := ss[0].Measure()
	if m.Dense <= 0 || len(m.Exchange) != len(codec.Ladder) {
		t.Fatalf("measure %+v", m)
	}
	for name, d := range m.Exchange {
		if d <= 0 {
			t.Errorf("%s exchanges in %v", name, d)
		}
	}
	if ss[0].Trainer().WeightsSHA256() != before {
		t.Error("Calibrate changed the weights")
	}
	if err := ss[0].Calibrate(context.Background()); !errors.Is(err, ErrNotBegun) {
		t.Errorf("Calibrate outside Begin: %v", err)
	}
}

// soloComm is a one-rank Comm: every collective leaves the buffer as is.
type soloComm struct{}

func (soloComm) Rank() int                                             { return 0 }
func (soloComm) Size() int                                             { return 1 }
func (soloComm) AllReduce(context.Context, []float32, ascend.Op) error { return nil }
func (soloComm) AllGather(context.Context, []float32) error            { return nil }
func (soloComm) AllGatherV(_ context.Context, dst, src []float32, _ []int) error {
	copy(dst, src)
	return nil
}
func (soloComm) AllToAllV(_ context.Context, dst, src []float32, _, _ []int) error {
	copy(dst, src)
	return nil
}

// TestStepDoesNotAllocate: an uncompressed step costs no allocation
// beyond the trainer's own (none).
func TestStepDoesNotAllocate(t *testing.T) {
	s := ranks(t, 1, engine.Adam, Policy{})[0]
	if err := s.Begin(soloComm{}); err != nil {
		t.Fatal(err)
	}
	defer s.End()
	ctx := context.Background()
	if _, err := s.Step(ctx); err != nil { // first-step buffers
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() {
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per step", n)
	}
}
