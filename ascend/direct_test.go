package ascend_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
	"github.com/cann-train/cann-train/ascend/shm"
)

func sharedCluster(t *testing.T, world int) *ascendtest.Cluster {
	t.Helper()
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	cl := ascendtest.NewCluster(t, world)
	cl.Options.SharedMemory = true
	return cl
}

// TestDirectAllReduce: every op, in place and out of place, over world
// sizes 1..9 and lengths that take both the whole-vector and the shared
// path (0, 1, odd, one above the whole-vector limit, large and odd), with
// src and dst at offsets that differ between ranks and sometimes in the
// same shared buffer. Results must be exact (integer inputs), equal on
// every rank, and src left alone out of place.
func TestDirectAllReduce(t *testing.T) {
	lengths := []int{0, 1, 7, 4097, 100_003, 600_011}
	for world := 1; world <= 9; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			// The reductions every rank should see, made once per world:
			// folding every rank's input for each element on each rank was
			// most of this test's time under -race.
			want := map[[2]int][]float32{}
			for li, n := range lengths {
				for oi, op := range reduceOps {
					if n > 10_000 && oi%2 == 1 {
						continue // Sum and Max suffice for the long ones
					}
					w := make([]float32, n)
					for i := range w {
						w[i] = reduced(world, 10*li+oi, i, op)
					}
					want[[2]int{li, oi}] = w
				}
			}
			cl := sharedCluster(t, world)
			cl.Run(t, func(c *ascend.Communicator) {
				ctx := context.Background()
				const maxN = 600_011
				a, err := c.AllocShared(ctx, 2*maxN+64)
				if err != nil {
					t.Errorf("rank %d: AllocShared: %v", c.Rank(), err)
					c.Close()
					return
				}
				b, err := c.AllocShared(ctx, maxN+16)
				if err != nil {
					t.Errorf("rank %d: AllocShared: %v", c.Rank(), err)
					c.Close()
					return
				}
				off := c.Rank() % 5 // not the same offsets on every rank
				for li, n := range lengths {
					for oi, op := range reduceOps {
						expect, ok := want[[2]int{li, oi}]
						if !ok {
							continue
						}
						seed := 10*li + oi
						for _, place := range []string{"in-place", "same buffer", "two buffers"} {
							k := &checker{t: t, what: fmt.Sprintf("world %d rank %d %s %v n=%d", world, c.Rank(), place, op, n)}
							var src, dst []float32
							switch place {
							case "in-place":
								src = a.Floats()[off : off+n]
								dst = src
							case "same buffer":
								src, dst = a.Floats()[off:off+n], a.Floats()[maxN+off:maxN+off+n]
							default:
								src, dst = a.Floats()[off:off+n], b.Floats()[off:off+n]
							}
							fill(src, seed, c.Rank(), 0)
							if place != "in-place" {
								copy(dst, garbage(n))
							}
							if world > 1 && n > 0 && !c.Direct(dst, src) {
								t.Errorf("%s: not direct", k.what)
							}
							if err := c.AllReduceInto(ctx, dst, src, op); err != nil {
								t.Errorf("%s: %v", k.what, err)
								c.Close()
								return
							}
							for i := range n {
								k.eq("dst", i, dst[i], expect[i])
								if place != "in-place" {
									k.eq("src", i, src[i], val(seed, c.Rank(), i))
								}
							}
							if k.bad > 0 {
								c.Close()
								return
							}
						}
					}
				}
				if c.CanShare() != (world > 1) {
					t.Errorf("rank %d: CanShare %v", c.Rank(), c.CanShare())
				}
				// Ordinary memory, and a forced algorithm other than the
				// ring, use the links.
				buf := gen(1000, 7, c.Rank())
				if c.Direct(buf, buf) {
					t.Errorf("rank %d: ordinary memory direct", c.Rank())
				}
				if err := c.SetAlgorithm(ascend.AlgoHD); err != nil {
					t.Error(err)
				}
				if c.Direct(a.Floats(), a.Floats()) {
					t.Errorf("rank %d: hd forced, still direct", c.Rank())
				}
				if err := c.AllReduce(ctx, buf, ascend.Sum); err != nil {
					t.Errorf("rank %d: links after direct: %v", c.Rank(), err)
				}
				for i := range buf {
					k := &checker{t: t, what: "links"}
					k.eq("buf", i, buf[i], reduced(world, 7, i, ascend.Sum))
				}
				if err := errors.Join(a.Free(), b.Free()); err != nil {
					t.Errorf("rank %d: Free: %v", c.Rank(), err)
				}
			})
		})
	}
}

// TestDirectMismatch: a rank passing ordinary memory or forcing another
// algorithm while the others pass shared buffers, or a different length,
// fails every rank with ErrMismatch instead of a wrong result or a hang.
func TestDirectMismatch(t *testing.T) {
	const world, n = 3, 50_000
	for _, tc := range []struct {
		name string
		buf  func(c *ascend.Communicator, sb *ascend.SharedBuffer) []float32
	}{
		{"one rank unshared", func(c *ascend.Communicator, sb *ascend.SharedBuffer) []float32 {
			if c.Rank() == 1 {
				return make([]float32, n)
			}
			return sb.Floats()[:n]
		}},
		{"one rank on the links", func(c *ascend.Communicator, sb *ascend.SharedBuffer) []float32 {
			if c.Rank() == 1 {
				c.SetAlgorithm(ascend.AlgoHD) // a contract violation, to be detected
			}
			return sb.Floats()[:n]
		}},
		{"lengths differ", func(c *ascend.Communicator, sb *ascend.SharedBuffer) []float32 {
			return sb.Floats()[:n-c.Rank()]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Options.OpTimeout = 20 * time.Second
			errs := make([]error, world)
			cl.Run(t, func(c *ascend.Communicator) {
				sb, err := c.AllocShared(context.Background(), n)
				if err != nil {
					errs[c.Rank()] = err
					c.Close()
					return
				}
				errs[c.Rank()] = c.AllReduce(context.Background(), tc.buf(c, sb), ascend.Sum)
			})
			for r, err := range errs {
				if !errors.Is(err, ascend.ErrMismatch) {
					t.Errorf("rank %d: %v, want ErrMismatch", r, err)
				}
			}
		})
	}
}

// TestDirectPeerFailures: a rank that closes instead of joining, or never
// joins (stuck), fails the others with a *PeerError naming it — promptly
// when it closed, within the op timeout when stuck — and a cancelled
// context aborts a waiting rank at once.
func TestDirectPeerFailures(t *testing.T) {
	const world, victim, n = 4, 2, 1 << 16
	for _, mode := range []string{"closes", "stuck", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			cl := sharedCluster(t, world)
			opTimeout := 20 * time.Second
			if mode == "stuck" {
				opTimeout = 500 * time.Millisecond
			}
			cl.Options.OpTimeout = opTimeout
			errs := make([]error, world)
			took := make([]time.Duration, world)
			release := make(chan struct{})
			cl.Run(t, func(c *ascend.Communicator) {
				ctx := context.Background()
				sb, err := c.AllocShared(ctx, n)
				if err != nil {
					errs[c.Rank()] = err
					return
				}
				if err := c.AllReduce(ctx, sb.Floats(), ascend.Sum); err != nil { // one that works
					errs[c.Rank()] = err
					return
				}
				if c.Rank() == victim {
					switch mode {
					case "closes":
						c.Close()
					case "stuck":
						<-release // until the others gave up
					}
					return
				}
				if mode == "cancel" && c.Rank() == 0 {
					cctx, cancel := context.WithCancel(ctx)
					go func() {
						for c.Err() == nil && cctx.Err() == nil {
							time.Sleep(time.Millisecond) // cancel once rank 0 is waiting: any time will do
							cancel()
						}
					}()
					ctx = cctx
				}
				start := time.Now()
				errs[c.Rank()] = c.AllReduce(ctx, sb.Floats(), ascend.Sum)
				took[c.Rank()] = time.Since(start)
				if mode == "stuck" && c.Rank() == 0 {
					close(release)
				}
			})
			for r, err := range errs {
				if r == victim {
					continue
				}
				var pe *ascend.PeerError
				switch {
				case mode == "cancel" && r == 0:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("rank %d: %v, want context.Canceled", r, err)
					}
				case mode == "cancel":
					if err == nil {
						t.Errorf("rank %d: no error after rank 0 cancelled", r)
					}
				case !errors.As(err, &pe) || pe.Rank != victim:
					t.Errorf("rank %d: %v, want a PeerError naming rank %d", r, err, victim)
				case mode == "stuck" && !pe.Timeout():
					t.Errorf("rank %d: %v, want a timeout", r, err)
				}
				limit := 5 * time.Second // promptly: well before opTimeout
				if mode == "stuck" {
					limit = opTimeout + 2*time.Second
				}
				if took[r] > limit {
					t.Errorf("rank %d took %v, over %v", r, took[r], limit)
				}
			}
		})
	}
}

func TestAllocSharedNeedsSharedMemory(t *testing.T) {
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		if _, err := c.AllocShared(context.Background(), 10); !errors.Is(err, ascend.ErrInvalid) {
			t.Errorf("AllocShared without shared memory: %v", err)
		}
	})
}

// TestDirectHasRingBits: on arbitrary floats (where the order of additions
// shows in the last bits), the direct algorithm's result is the ring's,
// bit for bit, in place and out of place, whole-vector and blocked, so a
// run may switch between them (shared buffers or not) without changing
// its weights.
func TestDirectHasRingBits(t *testing.T) {
	for _, world := range []int{2, 3, 4, 7} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Options.Algorithm = ascend.AlgoRing
			cl.Run(t, func(c *ascend.Communicator) {
				ctx := context.Background()
				maxN := 600_011
				if world <= 3 {
					maxN = 2_100_003 // past directNT: stores around the caches
				}
				sb, err := c.AllocShared(ctx, 2*maxN)
				if err != nil {
					t.Errorf("rank %d: %v", c.Rank(), err)
					c.Close()
					return
				}
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 9))
				for _, n := range []int{5, 3000, 70_001, 600_011, maxN} {
					for _, op := range []ascend.Op{ascend.Sum, ascend.Avg} {
						in := make([]float32, n)
						for i := range in {
							in[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
						}
						ring := slices.Clone(in)
						if err := c.AllReduce(ctx, ring, op); err != nil {
							t.Errorf("ring: %v", err)
							c.Close()
							return
						}
						for _, inPlace := range []bool{true, false} {
							src, dst := sb.Floats()[:n], sb.Floats()[maxN:maxN+n]
							if inPlace {
								dst = src
							}
							copy(src, in)
							if !c.Direct(dst, src) {
								t.Errorf("rank %d: not direct", c.Rank())
							}
							if err := c.AllReduceInto(ctx, dst, src, op); err != nil {
								t.Errorf("direct: %v", err)
								c.Close()
								return
							}
							for i := range n {
								if math.Float32bits(dst[i]) != math.Float32bits(ring[i]) {
									t.Errorf("world %d rank %d n=%d %v in-place=%v: [%d] = %v, ring %v", world, c.Rank(), n, op, inPlace, i, dst[i], ring[i])
									break
								}
							}
						}
					}
				}
			})
		})
	}
}

// TestDirectPushRepeated: two ranks allreduce over shared buffers call
// after call, in place and out of place, with inputs that change every
// call, at sizes on either side of where they start pushing (16 KiB) and of
// where the pushing rank stops keeping its own result in cache (32 MiB):
// every result is exact and equal on both ranks, so no rank reads a stale
// line or a peer's store that has not landed.
func TestDirectPushRepeated(t *testing.T) {
	sizes := []struct{ n, calls int }{{4095, 30}, {4096, 30}, {393_217, 30}, {8_388_611, 3}}
	maxN := sizes[len(sizes)-1].n
	cl := sharedCluster(t, 2)
	cl.Run(t, func(c *ascend.Communicator) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := c.AllocShared(ctx, 2*maxN)
		if err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
			c.Close()
			return
		}
		for _, sz := range sizes {
			n := sz.n
			src, out := sb.Floats()[:n], sb.Floats()[maxN:maxN+n]
			for call := range sz.calls {
				inPlace := call%3 == 0
				for i := range src {
					src[i] = float32((i*7+call)%1000 + 1000*c.Rank())
				}
				dst := out
				if inPlace {
					dst = src
				}
				if err := c.AllReduceInto(ctx, dst, src, ascend.Sum); err != nil {
					t.Errorf("rank %d n=%d call %d: %v", c.Rank(), n, call, err)
					c.Close()
					return
				}
				for i := range dst {
					if want := float32(2*((i*7+call)%1000) + 1000); dst[i] != want {
						t.Errorf("rank %d n=%d call %d in-place=%v: [%d] = %v, want %v", c.Rank(), n, call, inPlace, i, dst[i], want)
						c.Close()
						return
					}
				}
			}
		}
	})
}

// TestDirectMixedPlacement: ranks that push in place only when every rank
// is in place must agree on it: with every rank in place, with one rank in
// place among ranks out of place, and with none, in worlds of 2 to 4 and
// for every op, each call ends with the exact result on every rank rather
// than a rank waiting for blocks that a pushing peer never publishes.
func TestDirectMixedPlacement(t *testing.T) {
	const n = 100_003
	for world := 2; world <= 4; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Run(t, func(c *ascend.Communicator) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				sb, err := c.AllocShared(ctx, 2*n)
				if err != nil {
					t.Errorf("rank %d: %v", c.Rank(), err)
					c.Close()
					return
				}
				src, out := sb.Floats()[:n], sb.Floats()[n:]
				for call, inPlace := range []func(r int) bool{
					func(int) bool { return true },
					func(r int) bool { return r == 0 },
					func(r int) bool { return r != 0 },
					func(int) bool { return false },
				} {
					for _, op := range reduceOps {
						for i := range src {
							src[i] = float32((i*5+call)%100 + 10*c.Rank())
						}
						dst := out
						if inPlace(c.Rank()) {
							dst = src
						}
						if err := c.AllReduceInto(ctx, dst, src, op); err != nil {
							t.Errorf("rank %d call %d %v: %v", c.Rank(), call, op, err)
							c.Close()
							return
						}
						for i := range dst {
							v, w := float32((i*5+call)%100), float32(world)
							want := map[ascend.Op]float32{
								ascend.Sum: w*v + 10*w*(w-1)/2, ascend.Avg: (w*v + 10*w*(w-1)/2) / w,
								ascend.Max: v + 10*(w-1), ascend.Min: v,
							}[op]
							if dst[i] != want {
								t.Errorf("rank %d call %d %v: [%d] = %v, want %v", c.Rank(), call, op, i, dst[i], want)
								c.Close()
								return
							}
						}
					}
				}
			})
		})
	}
}
