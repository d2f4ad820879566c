package ascend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

func TestParseAlgorithm(t *testing.T) {
	for s, want := range map[string]ascend.Algorithm{
		"": ascend.AlgoAuto, "auto": ascend.AlgoAuto, "Ring": ascend.AlgoRing, "hd": ascend.AlgoHD,
		"rabenseifner": ascend.AlgoHD, "tree": ascend.AlgoTree, "binomial": ascend.AlgoTree, "pairwise": ascend.AlgoPairwise, "bruck": ascend.AlgoBruck,
	} {
		got, err := ascend.ParseAlgorithm(s)
		if err != nil || got != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", s, got, err, want)
		}
		if want != ascend.AlgoAuto && s != "rabenseifner" && s != "binomial" && s != "Ring" {
			if back, _ := ascend.ParseAlgorithm(want.String()); back != want {
				t.Errorf("%v does not round-trip", want)
			}
		}
	}
	if _, err := ascend.ParseAlgorithm("nvls"); !errors.Is(err, ascend.ErrInvalid) {
		t.Errorf("unknown algorithm: %v", err)
	}
	for c := ascend.CollAllReduce; c <= ascend.CollSendRecv; c++ {
		if got, err := ascend.ParseCollective(c.String()); err != nil || got != c {
			t.Errorf("ParseCollective(%q) = %v, %v", c.String(), got, err)
		}
	}
	if got, _ := ascend.ParseCollective("all_reduce"); got != ascend.CollAllReduce {
		t.Errorf("all_reduce: %v", got)
	}
}

func TestParseAlgorithmSpec(t *testing.T) {
	force, err := ascend.ParseAlgorithmSpec("allreduce=hd;broadcast=ring,tree")
	if err != nil {
		t.Fatal(err)
	}
	for coll, want := range map[ascend.Collective]ascend.Algorithm{
		ascend.CollAllReduce: ascend.AlgoHD, ascend.CollBroadcast: ascend.AlgoRing, ascend.CollReduce: ascend.AlgoTree,
		ascend.CollAllGather: ascend.AlgoAuto, // no tree allgather: chosen automatically
	} {
		if force[coll] != want {
			t.Errorf("%v: %v, want %v", coll, force[coll], want)
		}
	}
	for _, bad := range []string{"allgather=tree", "allreduce=warp", "gather=ring"} {
		if _, err := ascend.ParseAlgorithmSpec(bad); !errors.Is(err, ascend.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestEnvOverride(t *testing.T) {
	t.Setenv(ascend.EnvAlgorithm, "ring")
	comms := ascend.PipeGroup(t, 2, 0, true)
	if got := comms[0].Algorithm(ascend.CollAllReduce, 8); got != ascend.AlgoRing {
		t.Errorf("ASCEND_ALGO=ring: allreduce runs %v", got)
	}
	t.Setenv(ascend.EnvAlgorithm, "allreduce=tree")
	comms = ascend.PipeGroup(t, 2, 0, true)
	if got := comms[0].Algorithm(ascend.CollAllReduce, 1<<30); got != ascend.AlgoTree {
		t.Errorf("ASCEND_ALGO=allreduce=tree: allreduce runs %v", got)
	}
	// SetAlgorithm overrides it; AlgoAuto restores it.
	comms[0].SetAlgorithm(ascend.AlgoRing)
	if got := comms[0].Algorithm(ascend.CollAllReduce, 8); got != ascend.AlgoRing {
		t.Errorf("SetAlgorithm(ring): %v", got)
	}
	comms[0].SetAlgorithm(ascend.AlgoAuto)
	if got := comms[0].Algorithm(ascend.CollAllReduce, 1<<30); got != ascend.AlgoTree {
		t.Errorf("SetAlgorithm(auto) did not restore ASCEND_ALGO: %v", got)
	}
	t.Setenv(ascend.EnvAlgorithm, "bogus")
	if _, err := ascend.New(ascend.Config{Rank: 0, Size: 1, Conns: []ascend.Conn{nil}}); !errors.Is(err, ascend.ErrInvalid) {
		t.Errorf("bad ASCEND_ALGO: %v", err)
	}
	c, err := ascend.New(ascend.Config{Rank: 0, Size: 1, Conns: []ascend.Conn{nil}, Algorithm: ascend.AlgoHD})
	if err != nil {
		t.Fatalf("Config.Algorithm must win over a bad ASCEND_ALGO: %v", err)
	}
	defer c.Close()
	if got := c.Algorithm(ascend.CollAllReduce, 8); got != ascend.AlgoHD {
		t.Errorf("Config.Algorithm: %v", got)
	}
}

// TestChooseShape: the model reproduces the textbook crossovers.
func TestChooseShape(t *testing.T) {
	// Dedicated links and cores: a step in which every rank sends and
	// receives costs a little more than a one-way message.
	m := ascend.CostModel{Alpha: 30 * time.Microsecond, Beta: 1 / 1e9, Gamma: 1 / 5e9, AlphaAll: 40 * time.Microsecond, BetaAll: 1.2 / 1e9}
	// Eight ranks sharing two cores: every rank stepping at once is slow.
	loaded := m
	loaded.AlphaAll, loaded.BetaAll = 8*m.Alpha, 4*m.Beta
	// Shared-memory rings on a loaded host: the ring from 256 KiB.
	mem := loaded
	mem.MemoryLinks = true
	for _, tc := range []struct {
		m     ascend.CostModel
		coll  ascend.Collective
		p     int
		bytes int
		want  ascend.Algorithm
	}{
		{m, ascend.CollAllReduce, 8, 8, ascend.AlgoRD},              // latency-bound: fewest steps
		{m, ascend.CollAllReduce, 8, 64 << 20, ascend.AlgoHD},       // same bandwidth as ring, fewer steps
		{m, ascend.CollAllReduce, 7, 64 << 20, ascend.AlgoRing},     // the fold costs hd 2nβ
		{m, ascend.CollAllReduce, 16, 256 << 10, ascend.AlgoHD},     // medium
		{m, ascend.CollAllReduce, 2, 16 << 10, ascend.AlgoRD},       // one exchange instead of two steps
		{m, ascend.CollAllReduce, 2, 48 << 10, ascend.AlgoRD},       // the exchange fits in a TCP segment
		{m, ascend.CollAllReduce, 2, 64 << 10, ascend.AlgoHD},       // its header makes a second: two wakeups either way
		{mem, ascend.CollAllReduce, 2, 64 << 10, ascend.AlgoRD},     // memory links have no segments
		{m, ascend.CollBroadcast, 8, 64, ascend.AlgoTree},           // latency
		{m, ascend.CollBroadcast, 8, 256 << 20, ascend.AlgoRing},    // pipelined chain
		{m, ascend.CollReduce, 6, 256 << 20, ascend.AlgoRing},       // pipelined chain
		{m, ascend.CollAllGather, 8, 1 << 20, ascend.AlgoHD},        // power of two
		{m, ascend.CollReduceScatter, 5, 64 << 20, ascend.AlgoRing}, // the fold costs hd n(β+γ)
		{m, ascend.CollAllToAll, 5, 1 << 20, ascend.AlgoPairwise},   // the only one
		{loaded, ascend.CollAllReduce, 8, 4 << 10, ascend.AlgoTree}, // few messages win on a loaded host
		{loaded, ascend.CollAllReduce, 8, 64 << 20, ascend.AlgoHD},  // equal bytes per rank; the tree's root carries d·n
		{loaded, ascend.CollAllReduce, 2, 64 << 20, ascend.AlgoHD},  // two ranks: both step like one exchange, hd reduces half
		{mem, ascend.CollAllReduce, 4, 1 << 20, ascend.AlgoRing},    // memory links: a segment per step
		{mem, ascend.CollAllReduce, 4, 64 << 10, ascend.AlgoTree},   // below memoryRingBytes: the model's choice
		{mem, ascend.CollAllReduce, 2, 1 << 20, ascend.AlgoHD},      // two ranks: the model's choice, not the ring
		{mem, ascend.CollReduceScatter, 4, 1 << 20, ascend.AlgoHD},  // only AllReduce measured
	} {
		if got := tc.m.Choose(tc.coll, tc.p, tc.bytes); got != tc.want {
			t.Errorf("Choose(%v, p=%d, %d B) = %v, want %v", tc.coll, tc.p, tc.bytes, got, tc.want)
		}
	}
	if _, ok := m.Predict(ascend.CollAllGather, ascend.AlgoTree, 4, 1024); ok {
		t.Error("tree allgather predicted")
	}
	ring, _ := m.Predict(ascend.CollAllReduce, ascend.AlgoRing, 4, 1<<20)
	// Every rank stepping: 6 messages of 256 KiB, each in 5 TCP segments
	// of at most 65,484 bytes (its 16-byte header makes a fifth), so 30
	// wakeups; the bytes at β_all less the wakeups it was measured with,
	// but at least half of it.
	const seg = 65536 - 52
	perByte := max(m.BetaAll-m.AlphaAll.Seconds()/seg, m.BetaAll/2)
	want := 30*m.AlphaAll + time.Duration((1.5*(1<<20)*perByte+0.75*(1<<20)*m.Gamma)*1e9)
	if d := ring - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("ring allreduce prediction %v, want %v", ring, want)
	}
}

// TestCalibrateMemoryLinks: the ranks agree that their links are
// shared-memory rings, and that TCP links are not.
func TestCalibrateMemoryLinks(t *testing.T) {
	for _, shared := range []bool{false, true} {
		cl := ascendtest.NewCluster(t, 3)
		cl.Options.SharedMemory = shared
		var mu sync.Mutex
		var got []bool
		cl.Run(t, func(c *ascend.Communicator) {
			mu.Lock()
			got = append(got, c.CostModel().MemoryLinks)
			mu.Unlock()
		})
		if len(got) != 3 {
			t.Fatalf("%d models", len(got))
		}
		for _, g := range got {
			if g != shared {
				t.Errorf("shared memory %v: a rank's model says MemoryLinks %v", shared, g)
			}
		}
	}
}

// TestCalibrate: Connect measures the links and all ranks agree.
func TestCalibrate(t *testing.T) {
	const world = 3
	cl := ascendtest.NewCluster(t, world)
	var mu sync.Mutex
	var models []ascend.CostModel
	cl.Run(t, func(c *ascend.Communicator) {
		mu.Lock()
		models = append(models, c.CostModel())
		mu.Unlock()
	})
	for _, m := range models {
		if m != models[0] {
			t.Errorf("ranks disagree: %v vs %v", m, models[0])
		}
	}
	m := models[0]
	t.Logf("calibrated: %v", m)
	if m == ascend.DefaultCostModel() || m.Alpha <= 0 || m.Beta <= 0 || m.Gamma <= 0 {
		t.Errorf("not calibrated: %+v", m)
	}
}

// TestAlgorithmMismatchDetected: ranks forcing different algorithms fail
// with ErrMismatch instead of mixing up data.
func TestAlgorithmMismatchDetected(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	cl.Options.OpTimeout = 5 * time.Second
	errs := make([]error, 2)
	cl.Run(t, func(c *ascend.Communicator) {
		if err := c.SetAlgorithm([]ascend.Algorithm{ascend.AlgoRing, ascend.AlgoTree}[c.Rank()]); err != nil {
			t.Error(err)
		}
		errs[c.Rank()] = c.AllReduce(context.Background(), make([]float32, 100), ascend.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ascend.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}

func TestInvalidShapes(t *testing.T) {
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		ctx := context.Background()
		buf := make([]float32, 10)
		for name, err := range map[string]error{
			"allreduce lengths":    c.AllReduceInto(ctx, buf[:3], buf[5:7], ascend.Sum),
			"allreduce overlap":    c.AllReduceInto(ctx, buf[:4], buf[2:6], ascend.Sum),
			"reducescatter shape":  c.ReduceScatter(ctx, buf[:3], ascend.Sum),
			"reducescatter into":   c.ReduceScatterInto(ctx, buf[:2], buf[2:7], ascend.Sum),
			"allgather shape":      c.AllGather(ctx, buf[:5]),
			"allgatherv counts":    c.AllGatherV(ctx, buf[:4], buf[4:6], []int{2}),
			"allgatherv negative":  c.AllGatherV(ctx, buf[:4], buf[4:4], []int{5, -1}),
			"alltoall shape":       c.AllToAll(ctx, buf[:4], buf[4:7]),
			"alltoall overlap":     c.AllToAll(ctx, buf[:4], buf[2:6]),
			"reduce root":          c.Reduce(ctx, buf, ascend.Sum, 2),
			"send self":            c.Send(ctx, buf, c.Rank()),
			"recv out of range":    c.Recv(ctx, buf, 5),
			"broadcast root":       c.BroadcastInto(ctx, buf, buf, -1),
			"reducescatter bad op": c.ReduceScatter(ctx, buf, ascend.Op(9)),
		} {
			if !errors.Is(err, ascend.ErrInvalid) {
				t.Errorf("rank %d: %s: %v, want ErrInvalid", c.Rank(), name, err)
			}
		}
		// Argument errors do not break the communicator.
		b := []float32{float32(c.Rank() + 1)}
		if err := c.AllReduce(ctx, b, ascend.Sum); err != nil || b[0] != 3 {
			t.Errorf("rank %d: after invalid args: %v %v", c.Rank(), b, err)
		}
	})
}

// TestChooseTwoRanksSmallIsOneExchange: with two ranks a small allreduce
// is one exchange (recursive doubling), never the tree's two one-way
// messages, however inflated the measured exchange step is.
func TestChooseTwoRanksSmallIsOneExchange(t *testing.T) {
	for _, inflate := range []time.Duration{1, 2, 5, 20} {
		m := ascend.DefaultCostModel()
		m.Alpha = 2 * time.Microsecond
		m.AlphaAll = inflate * m.Alpha
		if got := m.Choose(ascend.CollAllReduce, 2, 4096); got != ascend.AlgoRD {
			t.Errorf("α_all = %v×α: chose %v for 4 KiB on 2 ranks, want rd", inflate, got)
		}
	}
}
