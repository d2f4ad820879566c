package ascend_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// f64At is rank's float64 input element i: values float32 cannot hold
// (53-bit mantissas, magnitudes up to 1e300), so a reduction that went
// through float32 arithmetic anywhere shows.
func f64At(seed, rank, i int) float64 {
	v := float64(val(seed, rank, i))
	return v*(1+1.0/(1<<40)) + float64(i%5)*1e300/float64(rank+1) - float64(rank)/3
}

// i32At is rank's int32 input element i: large magnitudes, so sums wrap.
func i32At(seed, rank, i int) int32 {
	return int32(val(seed, rank, i))*33_554_431 + int32(rank*i)
}

func f32At(seed, rank, i int) float32 { return val(seed, rank, i) }

// typedCase is one element type: its input generator and the ops it
// reduces with.
type typedCase[T ascend.Element] struct {
	at  func(seed, rank, i int) T
	ops []ascend.Op
}

// foldRef reduces element i over every rank in rank order, as the owner
// does (so the result is exact, even in floating point).
func foldRef[T ascend.Element](at func(seed, rank, i int) T, world, seed, i int, op ascend.Op) T {
	acc := at(seed, 0, i)
	for r := 1; r < world; r++ {
		v := at(seed, r, i)
		switch op {
		case ascend.Max:
			acc = max(acc, v)
		case ascend.Min:
			acc = min(acc, v)
		default:
			acc += v
		}
	}
	if op == ascend.Avg {
		acc /= T(world)
	}
	return acc
}

func genT[T ascend.Element](at func(seed, rank, i int) T, n, seed, rank, from int) []T {
	b := make([]T, n)
	for i := range b {
		b[i] = at(seed, rank, from+i)
	}
	return b
}

// same reports bitwise equality (NaN-safe for floats).
func sameBits[T ascend.Element](a, b T) bool {
	switch x := any(a).(type) {
	case float64:
		return math.Float64bits(x) == math.Float64bits(any(b).(float64))
	case float32:
		return math.Float32bits(x) == math.Float32bits(any(b).(float32))
	}
	return a == b
}

// runTyped checks every typed collective on one rank for lengths ns.
func runTyped[T ascend.Element](t *testing.T, c *ascend.Communicator, tc typedCase[T], ns []int) {
	ctx := context.Background()
	p, r := c.Size(), c.Rank()
	check := func(what string, got []T, want func(i int) T) {
		t.Helper()
		for i := range got {
			if w := want(i); !sameBits(got[i], w) {
				t.Errorf("rank %d: %s: element %d = %v, want %v", r, what, i, got[i], w)
				return
			}
		}
	}
	for _, n := range ns {
		for _, op := range tc.ops {
			seed := n*7 + int(op)
			name := fmt.Sprintf("%T n=%d op=%v", *new(T), n, op)
			red := func(i int) T { return foldRef(tc.at, p, seed, i, op) }

			src := genT(tc.at, n, seed, r, 0)
			dst := make([]T, n)
			if err := ascend.AllReduceOf(ctx, c, dst, src, op); err != nil {
				t.Errorf("rank %d: %s: allreduce: %v", r, name, err)
				return
			}
			check(name+" allreduce", dst, red)
			check(name+" allreduce input", src, func(i int) T { return tc.at(seed, r, i) })
			if err := ascend.AllReduceOf(ctx, c, src, src, op); err != nil {
				t.Errorf("rank %d: %s: allreduce in place: %v", r, name, err)
				return
			}
			check(name+" allreduce in place", src, red)

			// ReduceScatter over p segments of n elements each.
			big := genT(tc.at, p*n, seed, r, 0)
			seg := make([]T, n)
			if err := ascend.ReduceScatterOf(ctx, c, seg, big, op); err != nil {
				t.Errorf("rank %d: %s: reducescatter: %v", r, name, err)
				return
			}
			redAt := func(off int) func(i int) T { return func(i int) T { return foldRef(tc.at, p, seed, off+i, op) } }
			check(name+" reducescatter", seg, redAt(r*n))
			own := big[r*n : (r+1)*n]
			if err := ascend.ReduceScatterOf(ctx, c, own, big, op); err != nil {
				t.Errorf("rank %d: %s: reducescatter in place: %v", r, name, err)
				return
			}
			check(name+" reducescatter in place", own, redAt(r*n))

			// Reduce to the last rank; others' dst untouched.
			root := p - 1
			src = genT(tc.at, n, seed, r, 0)
			out := genT(tc.at, n, seed+1, r, 0)
			if err := ascend.ReduceOf(ctx, c, out, src, op, root); err != nil {
				t.Errorf("rank %d: %s: reduce: %v", r, name, err)
				return
			}
			if r == root {
				check(name+" reduce", out, red)
			} else {
				check(name+" reduce leaves non-root dst", out, func(i int) T { return tc.at(seed+1, r, i) })
			}
		}

		// Data movement, no reduction.
		seed := n*7 + 100
		mine := genT(tc.at, n, seed, r, 0)
		all := make([]T, p*n)
		if err := ascend.AllGatherOf(ctx, c, all, mine); err != nil {
			t.Errorf("rank %d: allgather: %v", r, err)
			return
		}
		check(fmt.Sprintf("%T n=%d allgather", *new(T), n), all, func(i int) T { return tc.at(seed, i/max(n, 1), i%max(n, 1)) })

		counts := make([]int, p)
		total := 0
		for i := range counts {
			counts[i] = (n + i) % 3 // uneven, some zero
			total += counts[i]
		}
		v := make([]T, total)
		if err := ascend.AllGatherVOf(ctx, c, v, genT(tc.at, counts[r], seed, r, 0), counts); err != nil {
			t.Errorf("rank %d: allgatherv: %v", r, err)
			return
		}
		off := 0
		for q := range p {
			check(fmt.Sprintf("%T n=%d allgatherv from %d", *new(T), n, q), v[off:off+counts[q]], func(i int) T { return tc.at(seed, q, i) })
			off += counts[q]
		}

		b := make([]T, n)
		if r == 0 {
			b = genT(tc.at, n, seed, 0, 0)
		}
		if err := ascend.BroadcastOf(ctx, c, b, b, 0); err != nil {
			t.Errorf("rank %d: broadcast: %v", r, err)
			return
		}
		check(fmt.Sprintf("%T n=%d broadcast", *new(T), n), b, func(i int) T { return tc.at(seed, 0, i) })

		a2a := genT(tc.at, p*n, seed, r, 0)
		got := make([]T, p*n)
		if err := ascend.AllToAllOf(ctx, c, got, a2a); err != nil {
			t.Errorf("rank %d: alltoall: %v", r, err)
			return
		}
		check(fmt.Sprintf("%T n=%d alltoall", *new(T), n), got, func(i int) T { return tc.at(seed, i/max(n, 1), r*n+i%max(n, 1)) })

		if p > 1 {
			next, prev := (r+1)%p, (r+p-1)%p
			in := make([]T, n)
			if r%2 == 0 {
				if err := ascend.SendOf(ctx, c, mine, next); err != nil {
					t.Errorf("rank %d: send: %v", r, err)
				}
				if err := ascend.RecvOf(ctx, c, in, prev); err != nil {
					t.Errorf("rank %d: recv: %v", r, err)
				}
			} else {
				if err := ascend.RecvOf(ctx, c, in, prev); err != nil {
					t.Errorf("rank %d: recv: %v", r, err)
				}
				if err := ascend.SendOf(ctx, c, mine, next); err != nil {
					t.Errorf("rank %d: send: %v", r, err)
				}
			}
			check(fmt.Sprintf("%T n=%d send/recv", *new(T), n), in, func(i int) T { return tc.at(seed, prev, i) })
		}
	}
}

// TestTypedCollectives runs every typed collective for float64, int32 and
// float32 on 1..9 ranks over loopback TCP with small frames, lengths 0, 1,
// odd and several frames, and compares bit for bit with the rank-order
// fold.
func TestTypedCollectives(t *testing.T) {
	all := []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max, ascend.Min}
	lengths := []int{0, 1, 7, 3001}
	for world := 1; world <= 9; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			t.Parallel()
			cl := ascendtest.NewCluster(t, world)
			cl.Options.ChunkBytes = 4 << 10
			cl.Run(t, func(c *ascend.Communicator) {
				runTyped(t, c, typedCase[float64]{f64At, all}, lengths)
				runTyped(t, c, typedCase[int32]{i32At, []ascend.Op{ascend.Sum, ascend.Max, ascend.Min}}, lengths)
				runTyped(t, c, typedCase[float32]{f32At, all}, lengths[:3])
			})
		})
	}
}

// TestTypedCollectivesSharedMemory: the same over shared-memory links.
func TestTypedCollectivesSharedMemory(t *testing.T) {
	cl := ascendtest.NewCluster(t, 3)
	cl.Options.SharedMemory = true
	cl.Run(t, func(c *ascend.Communicator) {
		runTyped(t, c, typedCase[float64]{f64At, []ascend.Op{ascend.Sum, ascend.Avg}}, []int{5, 70_001})
		runTyped(t, c, typedCase[int32]{i32At, []ascend.Op{ascend.Max}}, []int{70_001})
	})
}

// TestTypedInvalid: what a type cannot reduce, or buffers of the wrong
// size, are argument errors that name the type and leave the communicator
// usable.
func TestTypedInvalid(t *testing.T) {
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		ctx := context.Background()
		i32 := []int32{1, 2, 3}
		ov := make([]float64, 4)
		for _, tc := range []struct {
			name string
			err  error
			want string
		}{
			{"int32 avg", ascend.AllReduceOf(ctx, c, i32, i32, ascend.Avg), "avg is not defined on int32"},
			{"int32 reduce avg", ascend.ReduceOf(ctx, c, i32, i32, ascend.Avg, 0), "avg is not defined on int32"},
			{"float64 lengths", ascend.AllReduceOf(ctx, c, make([]float64, 2), make([]float64, 3), ascend.Sum), "float64 dst (2) and src (3)"},
			{"float64 overlap", ascend.AllReduceOf(ctx, c, ov[1:], ov[:3], ascend.Sum), "be the same slice or not overlap"},
			{"reducescatter size", ascend.ReduceScatterOf(ctx, c, make([]float64, 2), make([]float64, 3), ascend.Sum), "float64 src has 3 elements"},
			{"allgather size", ascend.AllGatherOf(ctx, c, make([]int32, 3), make([]int32, 2)), "int32 dst has 3 elements"},
			{"alltoall size", ascend.AllToAllOf(ctx, c, make([]float64, 3), make([]float64, 3)), "float64 len(dst) = 3"},
			{"alltoallv counts", ascend.AllToAllVOf(ctx, c, make([]float64, 2), make([]float64, 2), []int{1, 1}, []int{1, 2}), "float64 len(src) = 2, len(dst) = 2, want the sums of the counts 2 and 3"},
			{"allgatherv counts", ascend.AllGatherVOf(ctx, c, make([]float64, 2), make([]float64, 1), []int{1, -1}), "counts ≥ 0"},
			{"unknown op", ascend.AllReduceOf(ctx, c, make([]float64, 1), make([]float64, 1), ascend.Op(9)), "unknown op"},
			{"root", ascend.ReduceOf(ctx, c, make([]float64, 1), make([]float64, 1), ascend.Sum, 2), "root 2 out of range"},
		} {
			if !errors.Is(tc.err, ascend.ErrInvalid) {
				t.Errorf("rank %d: %s: err = %v, want ErrInvalid", c.Rank(), tc.name, tc.err)
			} else if tc.want != "" && !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("rank %d: %s: %q does not say %q", c.Rank(), tc.name, tc.err, tc.want)
			}
		}
		// Still usable.
		x := []float64{float64(c.Rank()) + 0.5}
		if err := ascend.AllReduceOf(ctx, c, x, x, ascend.Sum); err != nil || x[0] != 2 {
			t.Errorf("rank %d: after argument errors: %v, %v", c.Rank(), err, x)
		}
	})
}
