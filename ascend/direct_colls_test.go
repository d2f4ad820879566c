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
)

// TestDirectCollectives: ReduceScatter (every op, in place and out of
// place), AllGather, AllGatherV (uneven, some empty) and Broadcast (every
// root, in place and into) over shared buffers on 1..7 ranks and lengths
// 0, 1, odd and large, with src and dst at offsets that differ between
// ranks. Results must be exact (integer inputs); inputs untouched where
// the collective promises it.
func TestDirectCollectives(t *testing.T) {
	for world := 1; world <= 7; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Run(t, func(c *ascend.Communicator) {
				ctx := context.Background()
				r := c.Rank()
				const maxSeg = 70_001
				sb, err := c.AllocShared(ctx, 2*world*maxSeg+16)
				if err != nil {
					t.Errorf("rank %d: AllocShared: %v", r, err)
					c.Close()
					return
				}
				defer sb.Free()
				mem := sb.Floats()
				off := r % 5
				direct := func(k *checker, coll ascend.Collective, dst, src []float32) {
					if world > 1 && len(src)+len(dst) > 0 && !c.DirectFor(coll, dst, src) {
						t.Errorf("%s: not direct", k.what)
					}
				}
				for si, seg := range []int{0, 1, 7, 4097, maxSeg} {
					n := world * seg
					for oi, op := range reduceOps {
						if seg > 5000 && oi%2 == 1 {
							continue
						}
						seed := 100 + 10*si + oi
						for _, inPlace := range []bool{false, true} {
							k := &checker{t: t, what: fmt.Sprintf("reducescatter world %d rank %d %v seg=%d in-place=%v", world, r, op, seg, inPlace)}
							src := mem[off : off+n]
							fill(src, seed, r, 0)
							var err error
							if inPlace {
								direct(k, ascend.CollReduceScatter, src[r*seg:(r+1)*seg], src)
								err = c.ReduceScatter(ctx, src, op)
							} else {
								dst := mem[n+off : n+off+seg]
								copy(dst, garbage(seg))
								direct(k, ascend.CollReduceScatter, dst, src)
								if err = c.ReduceScatterInto(ctx, dst, src, op); err == nil {
									k.input(src, seed, r, 0)
								}
								src = dst
							}
							if err != nil {
								t.Errorf("%s: %v", k.what, err)
								c.Close()
								return
							}
							got := src
							if inPlace {
								got = src[r*seg : (r+1)*seg]
							}
							for i := range seg {
								k.eq("result", r*seg+i, got[i], reduced(world, seed, r*seg+i, op))
							}
							if k.bad > 0 {
								c.Close()
								return
							}
						}
					}
					// AllGather, in place and into.
					for _, inPlace := range []bool{false, true} {
						seed := 200 + si
						k := &checker{t: t, what: fmt.Sprintf("allgather world %d rank %d seg=%d in-place=%v", world, r, seg, inPlace)}
						dst := mem[off : off+n]
						copy(dst, garbage(n))
						src := mem[n+off : n+off+seg]
						if inPlace {
							src = dst[r*seg : (r+1)*seg]
						}
						fill(src, seed, r, r*seg)
						direct(k, ascend.CollAllGather, dst, src)
						if err := c.AllGatherInto(ctx, dst, src); err != nil {
							t.Errorf("%s: %v", k.what, err)
							c.Close()
							return
						}
						for i := range n {
							k.eq("dst", i, dst[i], val(seed, i/max(seg, 1), i))
						}
						if k.bad > 0 {
							c.Close()
							return
						}
					}
					// Broadcast from every root, in place and into.
					for _, root := range rootsFor(world) {
						for _, into := range []bool{false, true} {
							seed := 300 + si
							k := &checker{t: t, what: fmt.Sprintf("broadcast world %d rank %d root %d seg=%d into=%v", world, r, root, seg, into)}
							buf := mem[off : off+seg]
							src := buf
							if r == root {
								fill(buf, seed, root, 0)
								if into {
									src = mem[n+off : n+off+seg]
									fill(src, seed, root, 0)
									copy(buf, garbage(seg))
								}
							} else {
								copy(buf, garbage(seg))
							}
							var err error
							if into {
								if r == root {
									direct(k, ascend.CollBroadcast, nil, src)
									err = c.BroadcastInto(ctx, buf, src, root)
								} else {
									direct(k, ascend.CollBroadcast, nil, buf)
									err = c.BroadcastInto(ctx, buf, nil, root)
								}
							} else {
								direct(k, ascend.CollBroadcast, nil, buf)
								err = c.Broadcast(ctx, buf, root)
							}
							if err != nil {
								t.Errorf("%s: %v", k.what, err)
								c.Close()
								return
							}
							for i := range seg {
								k.eq("buf", i, buf[i], val(seed, root, i))
							}
							if k.bad > 0 {
								c.Close()
								return
							}
						}
					}
				}
				// AllGatherV with uneven counts, some empty.
				for _, total := range []int{0, 5, 33_331} {
					counts := countsFor(world, total)
					sum := 0
					for _, x := range counts {
						sum += x
					}
					offs := make([]int, world+1)
					for i, x := range counts {
						offs[i+1] = offs[i] + x
					}
					k := &checker{t: t, what: fmt.Sprintf("allgatherv world %d rank %d counts %v", world, r, counts)}
					dst := mem[off : off+sum]
					copy(dst, garbage(sum))
					src := mem[sum+off : sum+off+counts[r]]
					fill(src, 400, r, offs[r])
					if err := c.AllGatherV(ctx, dst, src, counts); err != nil {
						t.Errorf("%s: %v", k.what, err)
						c.Close()
						return
					}
					for j := range world {
						for i := offs[j]; i < offs[j+1]; i++ {
							k.eq("dst", i, dst[i], val(400, j, i))
						}
					}
					if k.bad > 0 {
						c.Close()
						return
					}
				}
			})
		})
	}
}

// TestDirectReduceScatterHasRingBits: with the ring forced, ReduceScatter
// over shared buffers (direct) gives the ring's bits on random floats.
func TestDirectReduceScatterHasRingBits(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Options.Algorithm = ascend.AlgoRing
			cl.Run(t, func(c *ascend.Communicator) {
				ctx := context.Background()
				const seg = 300_007
				sb, err := c.AllocShared(ctx, 2*world*seg)
				if err != nil {
					t.Errorf("rank %d: %v", c.Rank(), err)
					c.Close()
					return
				}
				defer sb.Free()
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 11))
				for _, op := range []ascend.Op{ascend.Sum, ascend.Avg} {
					in := make([]float32, world*seg)
					for i := range in {
						in[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
					}
					ring := make([]float32, seg)
					if err := c.ReduceScatterInto(ctx, ring, slices.Clone(in), op); err != nil {
						t.Errorf("ring: %v", err)
						c.Close()
						return
					}
					src, dst := sb.Floats()[:world*seg], sb.Floats()[world*seg:world*seg+seg]
					copy(src, in)
					if !c.DirectFor(ascend.CollReduceScatter, dst, src) {
						t.Errorf("rank %d: not direct", c.Rank())
					}
					if err := c.ReduceScatterInto(ctx, dst, src, op); err != nil {
						t.Errorf("direct: %v", err)
						c.Close()
						return
					}
					for i := range seg {
						if math.Float32bits(dst[i]) != math.Float32bits(ring[i]) {
							t.Errorf("world %d rank %d %v: [%d] = %v, ring %v", world, c.Rank(), op, i, dst[i], ring[i])
							break
						}
					}
				}
			})
		})
	}
}

// TestDirectCollectivesMismatch: ranks that disagree at one point of the
// call sequence over shared buffers — one rank's buffer unshared, another
// collective, another root — fail every rank with ErrMismatch, not a
// wrong result or a hang.
func TestDirectCollectivesMismatch(t *testing.T) {
	const world, seg = 3, 10_000
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, c *ascend.Communicator, shared []float32) error
	}{
		{"reducescatter, one rank unshared", func(ctx context.Context, c *ascend.Communicator, shared []float32) error {
			if c.Rank() == 2 {
				shared = make([]float32, world*seg)
			}
			return c.ReduceScatter(ctx, shared, ascend.Sum)
		}},
		{"allgather against broadcast", func(ctx context.Context, c *ascend.Communicator, shared []float32) error {
			if c.Rank() == 1 {
				return c.Broadcast(ctx, shared, 0)
			}
			return c.AllGather(ctx, shared)
		}},
		{"broadcast, roots differ", func(ctx context.Context, c *ascend.Communicator, shared []float32) error {
			return c.Broadcast(ctx, shared, min(c.Rank(), 1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := sharedCluster(t, world)
			cl.Options.OpTimeout = 20 * time.Second
			errs := make([]error, world)
			cl.Run(t, func(c *ascend.Communicator) {
				sb, err := c.AllocShared(context.Background(), world*seg)
				if err != nil {
					errs[c.Rank()] = err
					c.Close()
					return
				}
				errs[c.Rank()] = tc.run(context.Background(), c, sb.Floats())
			})
			for r, err := range errs {
				if !errors.Is(err, ascend.ErrMismatch) {
					t.Errorf("rank %d: %v, want ErrMismatch", r, err)
				}
			}
		})
	}
}
