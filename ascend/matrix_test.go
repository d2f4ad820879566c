package ascend_test

// The operation × algorithm × world size × length matrix. Inputs are small
// integers (distinct per rank, seed and position), so every reduction is
// exact in float32 whatever the order of additions, and results are
// compared exactly; out-of-place calls must also leave their input alone.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// val is rank's input element i for seed: an integer in [-64, 64].
func val(seed, rank, i int) float32 {
	h := uint32(seed)*2654435761 ^ uint32(rank+1)*40503 ^ uint32(i)*2246822519
	h ^= h >> 15
	h *= 2246822519
	h ^= h >> 13
	return float32(int(h%129) - 64)
}

func fill(buf []float32, seed, rank, from int) []float32 {
	for i := range buf {
		buf[i] = val(seed, rank, from+i)
	}
	return buf
}

func gen(n, seed, rank int) []float32 { return fill(make([]float32, n), seed, rank, 0) }

// garbage is a buffer of NaNs, so unwritten output shows.
func garbage(n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(math.NaN())
	}
	return b
}

// reduced is the reduction of element i over all ranks' inputs.
func reduced(world, seed, i int, op ascend.Op) float32 { return foldRef(f32At, world, seed, i, op) }

// checker collects a rank's mismatches for one call.
type checker struct {
	t    testing.TB
	what string
	bad  int
}

func (k *checker) eq(where string, i int, got, want float32) {
	if got == want || (got != got && want != want) {
		return
	}
	if k.bad++; k.bad <= 3 {
		k.t.Errorf("%s: %s[%d] = %v, want %v", k.what, where, i, got, want)
	}
}

func (k *checker) input(buf []float32, seed, rank, from int) {
	for i, v := range buf {
		k.eq("input (must be untouched)", from+i, v, val(seed, rank, from+i))
	}
}

// matrixCase runs one collective on one rank and checks its result.
type matrixCase struct {
	name string
	coll ascend.Collective
	// bytes is the nccl-tests size the algorithm is chosen for.
	bytes func(world, n int) int
	run   func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error
}

var reduceOps = []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max, ascend.Min}

func bufBytes(_, n int) int     { return 4 * n }
func allBytes(world, n int) int { return 4 * n * world }
func rootsFor(world int) []int  { return uniq(0, world-1, world/2) }
func opFor(seed int) ascend.Op  { return reduceOps[seed%len(reduceOps)] }
func countsFor(world, n int) []int { // uneven, some empty
	counts := make([]int, world)
	for i := range counts {
		counts[i] = (n + 3*i) % (n + 2)
		if i%3 == 1 {
			counts[i] = 0
		}
	}
	return counts
}

func uniq(xs ...int) []int {
	var out []int
	for _, x := range xs {
		dup := false
		for _, y := range out {
			dup = dup || x == y
		}
		if !dup {
			out = append(out, x)
		}
	}
	return out
}

var matrixCases = []matrixCase{
	{"allreduce", ascend.CollAllReduce, bufBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		for oi, op := range reduceOps {
			s := seed + oi
			buf := gen(n, s, r)
			if err := c.AllReduce(ctx, buf, op); err != nil {
				return err
			}
			for i, v := range buf {
				k.eq(fmt.Sprintf("in-place %v", op), i, v, reduced(p, s, i, op))
			}
			src, dst := gen(n, s, r), garbage(n)
			if err := c.AllReduceInto(ctx, dst, src, op); err != nil {
				return err
			}
			for i, v := range dst {
				k.eq(fmt.Sprintf("out-of-place %v", op), i, v, reduced(p, s, i, op))
			}
			k.input(src, s, r, 0)
		}
		return nil
	}},
	{"reducescatter", ascend.CollReduceScatter, allBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		op := opFor(seed)
		buf := gen(p*n, seed, r)
		if err := c.ReduceScatter(ctx, buf, op); err != nil {
			return err
		}
		for i := r * n; i < (r+1)*n; i++ {
			k.eq("in-place", i, buf[i], reduced(p, seed, i, op))
		}
		src, dst := gen(p*n, seed+1, r), garbage(n)
		if err := c.ReduceScatterInto(ctx, dst, src, op); err != nil {
			return err
		}
		for i, v := range dst {
			k.eq("out-of-place", i, v, reduced(p, seed+1, r*n+i, op))
		}
		k.input(src, seed+1, r, 0)
		return nil
	}},
	{"allgather", ascend.CollAllGather, allBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		buf := garbage(p * n)
		fill(buf[r*n:(r+1)*n], seed, r, 0)
		if err := c.AllGather(ctx, buf); err != nil {
			return err
		}
		for i, v := range buf {
			k.eq("in-place", i, v, val(seed, i/max(n, 1), i%max(n, 1)))
		}
		src, dst := gen(n, seed, r), garbage(p*n)
		if err := c.AllGatherInto(ctx, dst, src); err != nil {
			return err
		}
		for i, v := range dst {
			k.eq("out-of-place", i, v, val(seed, i/max(n, 1), i%max(n, 1)))
		}
		k.input(src, seed, r, 0)
		counts := countsFor(p, n)
		total := 0
		for _, x := range counts {
			total += x
		}
		src, dst = gen(counts[r], seed, r), garbage(total)
		if err := c.AllGatherV(ctx, dst, src, counts); err != nil {
			return err
		}
		off := 0
		for j, cnt := range counts {
			for i := range cnt {
				k.eq(fmt.Sprintf("v from rank %d", j), i, dst[off+i], val(seed, j, i))
			}
			off += cnt
		}
		return nil
	}},
	{"broadcast", ascend.CollBroadcast, bufBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		for _, root := range rootsFor(p) {
			buf := garbage(n)
			if r == root {
				fill(buf, seed, root, 0)
			}
			if err := c.Broadcast(ctx, buf, root); err != nil {
				return err
			}
			for i, v := range buf {
				k.eq(fmt.Sprintf("in-place root %d", root), i, v, val(seed, root, i))
			}
			var src []float32
			if r == root {
				src = gen(n, seed+1, root)
			}
			dst := garbage(n)
			if err := c.BroadcastInto(ctx, dst, src, root); err != nil {
				return err
			}
			for i, v := range dst {
				k.eq(fmt.Sprintf("out-of-place root %d", root), i, v, val(seed+1, root, i))
			}
			if r == root {
				k.input(src, seed+1, root, 0)
			}
		}
		return nil
	}},
	{"reduce", ascend.CollReduce, bufBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		for ri, root := range rootsFor(p) {
			op := opFor(seed + ri)
			buf := gen(n, seed, r)
			if err := c.Reduce(ctx, buf, op, root); err != nil {
				return err
			}
			if r == root {
				for i, v := range buf {
					k.eq(fmt.Sprintf("in-place %v root %d", op, root), i, v, reduced(p, seed, i, op))
				}
			} else {
				k.input(buf, seed, r, 0)
			}
			src := gen(n, seed+1, r)
			var dst []float32
			if r == root {
				dst = garbage(n)
			}
			if err := c.ReduceInto(ctx, dst, src, op, root); err != nil {
				return err
			}
			for i, v := range dst {
				k.eq(fmt.Sprintf("out-of-place %v root %d", op, root), i, v, reduced(p, seed+1, i, op))
			}
			k.input(src, seed+1, r, 0)
		}
		return nil
	}},
	{"alltoall", ascend.CollAllToAll, allBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		// Rank r's block for j holds val(seed, r, j*n+i).
		src, dst := gen(p*n, seed, r), garbage(p*n)
		if err := c.AllToAll(ctx, dst, src); err != nil {
			return err
		}
		for i, v := range dst {
			from, off := i/max(n, 1), i%max(n, 1)
			k.eq("alltoall", i, v, val(seed, from, r*n+off))
		}
		k.input(src, seed, r, 0)
		// V: rank i sends cnt(i, j) elements to j.
		cnt := func(i, j int) int { return (n + i + 2*j) % (n + 3) }
		send, recv := make([]int, p), make([]int, p)
		ns, nr := 0, 0
		for j := range p {
			send[j], recv[j] = cnt(r, j), cnt(j, r)
			ns += send[j]
			nr += recv[j]
		}
		src, dst = gen(ns, seed+1, r), garbage(nr)
		if err := c.AllToAllV(ctx, dst, src, send, recv); err != nil {
			return err
		}
		off := 0
		for i := range p {
			// i's block for r starts at sum_{j<r} cnt(i, j) of its src.
			start := 0
			for j := range r {
				start += cnt(i, j)
			}
			for e := range recv[i] {
				k.eq(fmt.Sprintf("alltoallv from %d", i), e, dst[off+e], val(seed+1, i, start+e))
			}
			off += recv[i]
		}
		return nil
	}},
	{"sendrecv", ascend.CollSendRecv, bufBytes, func(ctx context.Context, c *ascend.Communicator, k *checker, n, seed int) error {
		p, r := c.Size(), c.Rank()
		if p == 1 {
			return nil
		}
		// A shift around the ring.
		to, from := (r+1)%p, (r+p-1)%p
		send, recv := gen(n, seed, r), garbage(n)
		if err := c.SendRecv(ctx, send, to, recv, from); err != nil {
			return err
		}
		for i, v := range recv {
			k.eq("shift", i, v, val(seed, from, i))
		}
		// Pairs (0,1), (2,3), …: the even rank sends twice, the odd one
		// receives twice, then they swap roles with one SendRecv.
		if r == p-1 && p%2 == 1 {
			return nil
		}
		peer := r ^ 1
		if r%2 == 0 {
			for j := range 2 {
				if err := c.Send(ctx, gen(n, seed+j, r), peer); err != nil {
					return err
				}
			}
		} else {
			for j := range 2 {
				buf := garbage(n)
				if err := c.Recv(ctx, buf, peer); err != nil {
					return err
				}
				for i, v := range buf {
					k.eq(fmt.Sprintf("recv %d", j), i, v, val(seed+j, peer, i))
				}
			}
		}
		buf := garbage(n)
		if err := c.SendRecv(ctx, gen(n, seed+5, r), peer, buf, peer); err != nil {
			return err
		}
		for i, v := range buf {
			k.eq("swap", i, v, val(seed+5, peer, i))
		}
		return nil
	}},
}

// runMatrix runs every case for every algorithm (skipping the pairs that
// do not exist) and length on one rank.
func runMatrix(t testing.TB, c *ascend.Communicator, algos []ascend.Algorithm, lengths []int) {
	ctx := context.Background()
	for _, algo := range algos {
		if err := c.SetAlgorithm(algo); err != nil {
			t.Errorf("SetAlgorithm(%v): %v", algo, err)
			return
		}
		for ci, tc := range matrixCases {
			if algo != ascend.AlgoAuto && !algo.Implements(tc.coll) {
				continue
			}
			if tc.coll == ascend.CollSendRecv && algo != algos[0] {
				continue // algorithm-independent
			}
			for li, n := range lengths {
				if algo != ascend.AlgoAuto {
					if got := c.Algorithm(tc.coll, tc.bytes(c.Size(), n)); got != algo {
						t.Errorf("%v forced, but %s would run %v", algo, tc.name, got)
					}
				}
				k := &checker{t: t, what: fmt.Sprintf("world %d rank %d %v %s n=%d", c.Size(), c.Rank(), algo, tc.name, n)}
				if err := tc.run(ctx, c, k, n, 100*ci+li); err != nil {
					t.Errorf("%s: %v", k.what, err)
					c.Close() // fail the other ranks fast
					return
				}
			}
		}
	}
}

var allAlgos = []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoTree, ascend.AlgoRD, ascend.AlgoBruck, ascend.AlgoAuto, ascend.AlgoHier}

// TestMatrixTCP: every operation × algorithm × world 1..9 × lengths 0, 1,
// odd and large (many frames: 4 KiB frames) over loopback TCP.
func TestMatrixTCP(t *testing.T) {
	lengths := []int{0, 1, 7, 5000}
	for world := 1; world <= 9; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			t.Parallel()
			cl := ascendtest.NewCluster(t, world)
			cl.Options.ChunkBytes = 4 << 10
			cl.Run(t, func(c *ascend.Communicator) { runMatrix(t, c, allAlgos, lengths) })
		})
	}
}

// TestMatrixPipes runs the matrix on synchronous pipes (no buffering: any
// algorithm that does not overlap its sends and receives deadlocks) with
// 3-element frames, on the zero-copy and the portable wire paths.
func TestMatrixPipes(t *testing.T) {
	for _, native := range []bool{true, false} {
		for _, world := range []int{2, 3, 5, 6} {
			t.Run(fmt.Sprintf("native=%v/world=%d", native, world), func(t *testing.T) {
				t.Parallel()
				comms := ascend.PipeGroup(t, world, 12, native)
				var wg sync.WaitGroup
				for _, c := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						runMatrix(t, c, allAlgos[:5], []int{0, 1, 2, 11})
					}()
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					t.Error("deadlock: ranks still running after 60s")
					for _, c := range comms {
						c.Close()
					}
					<-done
				}
			})
		}
	}
}

// TestMatrixSharedMemory runs the matrix over shared-memory links (the
// ranks share a host), with rings smaller than the frames so flow control
// is exercised.
func TestMatrixSharedMemory(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			t.Parallel()
			cl := ascendtest.NewCluster(t, world)
			cl.Options.ChunkBytes = 16 << 10
			cl.Options.SharedMemory = true
			cl.Options.SharedMemoryRing = 4 << 10
			cl.Run(t, func(c *ascend.Communicator) { runMatrix(t, c, allAlgos, []int{0, 1, 7, 5000}) })
		})
	}
}
