//go:build !race

package ascend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestHotPathDoesNotAllocate: once warm, every operation allocates
// nothing, with every algorithm, on any rank, with a cancellable context
// too. World 3 exercises halving-doubling's fold. (Not under -race, whose
// runtime allocates on its own.)
func TestHotPathDoesNotAllocate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		spin   time.Duration
	}{{"tcp", false, -1}, {"tcp-polling", false, time.Millisecond}, {"shm", true, 0}} {
		t.Run(tc.name, func(t *testing.T) { testHotPath(t, tc.shared, tc.spin) })
	}
}

func testHotPath(t *testing.T, shared bool, spin time.Duration) {
	const world, runs, n = 3, 10, 30_001
	cl := ascendtest.NewCluster(t, world)
	cl.Options.SharedMemory = shared
	cl.Options.Spin = spin
	comms := connectAll(t, cl, "alloc")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type bufs struct{ a, b, c, d []float32 }
	bs := make([]bufs, world)
	for i := range bs {
		bs[i] = bufs{make([]float32, world*n), make([]float32, world*n), make([]float32, n), make([]float32, n)}
	}
	counts := []int{n, 0, n - 1}
	total := 2*n - 1
	uniform := []int{n - 1, n - 1, n - 1}
	for _, algo := range []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoTree, ascend.AlgoRD, ascend.AlgoHier, ascend.AlgoBruck} {
		t.Run(algo.String(), func(t *testing.T) {
			step := func(r int) {
				c, b := comms[r], bs[r]
				check := func(err error) {
					if err != nil {
						t.Error(err)
					}
				}
				check(c.SetAlgorithm(algo))
				check(c.AllReduce(ctx, b.c, ascend.Avg))
				check(c.AllReduceInto(ctx, b.d, b.c, ascend.Sum))
				check(c.ReduceScatter(ctx, b.a, ascend.Sum))
				check(c.ReduceScatterInto(ctx, b.c, b.a, ascend.Max))
				check(c.AllGather(ctx, b.a))
				check(c.AllGatherInto(ctx, b.b, b.c))
				check(c.AllGatherV(ctx, b.a[:total], b.c[:counts[r]], counts))
				check(c.Broadcast(ctx, b.c, 1))
				check(c.BroadcastInto(ctx, b.d, b.c, 2))
				check(c.Reduce(ctx, b.c, ascend.Sum, 0))
				check(c.ReduceInto(ctx, b.d, b.c, ascend.Min, 2))
				check(c.AllToAll(ctx, b.b, b.a))
				check(c.AllToAllV(ctx, b.b[:3*(n-1)], b.a[:3*(n-1)], uniform, uniform))
				check(c.SendRecv(ctx, b.c, (r+1)%world, b.d, (r+world-1)%world))
				check(c.Barrier(ctx))
			}
			var wg sync.WaitGroup
			for r := 1; r < world; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range runs + 1 { // AllocsPerRun makes one warm-up call
						step(r)
					}
				}()
			}
			allocs := testing.AllocsPerRun(runs, func() { step(0) })
			wg.Wait()
			if allocs != 0 {
				t.Errorf("%v allocations per round of every operation across %d ranks, want 0", allocs, world)
			}
		})
	}
}

// TestDirectDoesNotAllocate: the direct algorithms over shared buffers
// (AllReduce small and blocked, ReduceScatter, AllGather, Broadcast), in
// place and out of place, allocate nothing once warm.
func TestDirectDoesNotAllocate(t *testing.T) {
	const world, runs, n = 3, 10, 300_003
	cl := ascendtest.NewCluster(t, world)
	cl.Options.SharedMemory = true
	comms := connectAll(t, cl, "alloc-direct")
	ctx := context.Background()
	type state struct{ sb *ascend.SharedBuffer }
	sts := make([]state, world)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.AllocShared(ctx, 2*n)
			if err != nil {
				t.Error(err)
				return
			}
			sts[r] = state{sb}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	step := func(r int) {
		s, c := sts[r], comms[r]
		f := s.sb.Floats()
		for _, err := range []error{
			c.AllReduce(ctx, f[:100], ascend.Sum),
			c.AllReduceInto(ctx, f[n:n+100], f[:100], ascend.Avg),
			c.AllReduce(ctx, f[:n], ascend.Max),
			c.AllReduceInto(ctx, f[n:], f[:n], ascend.Sum),
			c.ReduceScatter(ctx, f[:n], ascend.Sum),
			c.ReduceScatterInto(ctx, f[n:n+n/world], f[:n], ascend.Avg),
			c.AllGather(ctx, f[:n]),
			c.AllGatherInto(ctx, f[:n], f[n:n+n/world]),
			c.Broadcast(ctx, f[:n], 1),
		} {
			if err != nil {
				t.Error(err)
			}
		}
	}
	if allocs := allocsPerRound(world, runs, step); allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
	f := sts[0].sb.Floats()
	if !comms[0].Direct(f, f) || !comms[0].DirectFor(ascend.CollReduceScatter, f[n:n+n/world], f[:n]) ||
		!comms[0].DirectFor(ascend.CollAllGather, f[:n], f[n:n+n/world]) || !comms[0].DirectFor(ascend.CollBroadcast, nil, f[:n]) {
		t.Error("not direct")
	}
}

// TestTypedDoesNotAllocate: the float64 and int32 collectives reuse the
// communicator's scratch once warm.
func TestTypedDoesNotAllocate(t *testing.T) {
	const world, runs, n = 3, 10, 10_001
	cl := ascendtest.NewCluster(t, world)
	comms := connectAll(t, cl, "alloc-typed")
	ctx := context.Background()
	type bufs struct {
		a, b []float64
		i, j []int32
	}
	bs := make([]bufs, world)
	for r := range bs {
		bs[r] = bufs{make([]float64, world*n), make([]float64, world*n), make([]int32, world*n), make([]int32, world*n)}
	}
	counts := []int{n, 0, n - 1}
	recv := make([][]int, world) // rank r receives counts[r] from everyone
	for r := range recv {
		recv[r] = []int{counts[r], counts[r], counts[r]}
	}
	step := func(r int) {
		c, b := comms[r], bs[r]
		for _, err := range []error{
			ascend.AllReduceOf(ctx, c, b.a[:n], b.a[:n], ascend.Avg),
			ascend.AllReduceOf(ctx, c, b.b[:100], b.a[:100], ascend.Max), // gathered whole (small)
			ascend.ReduceOf(ctx, c, b.j[:100], b.i[:100], ascend.Sum, 2),
			ascend.AllReduceOf(ctx, c, b.b[:n], b.a[:n], ascend.Sum),
			ascend.AllReduceOf(ctx, c, b.i[:n], b.i[:n], ascend.Max),
			ascend.ReduceScatterOf(ctx, c, b.b[:n], b.a, ascend.Sum),
			ascend.ReduceScatterOf(ctx, c, b.j[:n], b.i, ascend.Min),
			ascend.ReduceOf(ctx, c, b.b[:n], b.a[:n], ascend.Sum, 1),
			ascend.AllGatherOf(ctx, c, b.a, b.b[:n]),
			ascend.AllGatherVOf(ctx, c, b.j[:2*n-1], b.i[:counts[r]], counts),
			ascend.BroadcastOf(ctx, c, b.a[:n], b.a[:n], 2),
			ascend.AllToAllOf(ctx, c, b.b, b.a),
			ascend.AllToAllVOf(ctx, c, b.j[:world*counts[r]], b.i[:2*n-1], counts, recv[r]),
		} {
			if err != nil {
				t.Error(err)
			}
		}
	}
	if allocs := allocsPerRound(world, runs, step); allocs != 0 {
		t.Errorf("%v allocations per round of the typed operations, want 0", allocs)
	}
}

// connectAll forms a session over cl, closed when the test ends.
func connectAll(t *testing.T, cl *ascendtest.Cluster, session string) []*ascend.Communicator {
	t.Helper()
	comms, err := cl.Connect(context.Background(), cl.NewSession(session))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// allocsPerRound measures rank 0's allocations per call of step while the
// other ranks run the same rounds (AllocsPerRun makes one warm-up call).
func allocsPerRound(world, runs int, step func(rank int)) float64 {
	var wg sync.WaitGroup
	for r := 1; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs + 1 {
				step(r)
			}
		}()
	}
	allocs := testing.AllocsPerRun(runs, func() { step(0) })
	wg.Wait()
	return allocs
}
