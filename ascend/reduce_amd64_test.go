//go:build !purego

package ascend

import (
	"math"
	"math/rand/v2"
	"testing"
)

// shiftedFloats is n zero floats starting shift floats past a 32-byte
// boundary.
func shiftedFloats(n, shift int) []float32 {
	b := make([]float32, n+shift+8)
	h := ntHead(b)
	return b[h+shift : h+shift+n]
}

// TestAddFloatsNT2: the two-destination kernel stores the portable loop's
// bits into both outputs, for lengths around its blocks and starts off
// the 32-byte grid, with the outputs apart or exactly the operands (the
// direct algorithm's in-place case: dst = b, dst2 = a); it refuses, storing
// nothing, outputs aligned differently.
func TestAddFloatsNT2(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	aligned := shiftedFloats
	for _, n := range []int{1, 31, 32, 33, 100, 1000, 4099} {
		for _, shift := range []int{0, 1, 3} {
			for _, inPlace := range []bool{false, true} {
				a, b := aligned(n, shift), aligned(n, shift)
				for i := range n {
					a[i], b[i] = float32(rng.NormFloat64()*1e3), float32(rng.NormFloat64()*1e-3)
				}
				want := make([]float32, n)
				addPortable(want, a, b)
				d, d2 := aligned(n, shift), aligned(n, shift)
				if inPlace {
					d, d2 = b, a
				}
				if !addFloatsNT2(d, d2, a, b) {
					if hasAVX2 {
						t.Fatalf("n=%d shift=%d: refused equally aligned outputs", n, shift)
					}
					continue
				}
				for i := range n {
					if math.Float32bits(d[i]) != math.Float32bits(want[i]) || math.Float32bits(d2[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d shift=%d in-place=%v: [%d] = %v, %v, want %v", n, shift, inPlace, i, d[i], d2[i], want[i])
					}
				}
			}
		}
	}
	a, b := aligned(64, 0), aligned(64, 0)
	d, d2 := aligned(64, 0), aligned(64, 1)
	if addFloatsNT2(d, d2, a, b) {
		t.Error("accepted outputs aligned differently")
	}
}

// TestAddFloatsKeep: the kernels that keep one output in cache (the other
// around the caches or not) store
// the bits of the portable sum — or, scaled by ½, of that sum divided by 2
// as Avg divides — into both outputs, for lengths around its blocks, with
// the two outputs and the operands on different 32-byte offsets (only
// far's alignment matters to it), apart or exactly the operands.
func TestAddFloatsKeep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	at := shiftedFloats
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 3e-39}
	for _, c := range []struct {
		scale float32
		farNT bool
	}{{1, true}, {0.5, true}, {1, false}, {0.5, false}} {
		scale := c.scale
		for _, n := range []int{1, 7, 31, 32, 33, 100, 1000, 4099} {
			for _, shift := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {5, 2}} {
				for _, inPlace := range []bool{false, true} {
					a, b := at(n, shift[1]), at(n, shift[0])
					for i := range n {
						a[i], b[i] = float32(rng.NormFloat64()*1e3), float32(rng.NormFloat64()*1e-3)
						if i%17 == 3 {
							a[i] = special[i%len(special)]
						}
					}
					want := make([]float32, n)
					addPortable(want, a, b)
					if scale != 1 {
						for i := range want {
							want[i] /= 2
						}
					}
					own, far := at(n, shift[0]), at(n, shift[1])
					if inPlace {
						own, far = b, a
					}
					if !addFloatsKeep(own, far, a, b, scale, c.farNT) {
						if hasAVX2 {
							t.Fatalf("n=%d shift=%v: refused", n, shift)
						}
						continue
					}
					for i := range n {
						if math.Float32bits(own[i]) != math.Float32bits(want[i]) || math.Float32bits(far[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v n=%d shift=%v in-place=%v: [%d] = %v, %v, want %v", c, n, shift, inPlace, i, own[i], far[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestDivideMatchesScalar: the vectorised division (a multiplication by
// the reciprocal for powers of two) has the bits of one scalar division
// per element, subnormal, huge, infinite, NaN and signed-zero inputs
// included.
func TestDivideMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1.5e-38, 7e-45}
	for _, n := range []int{1, 2, 3, 4, 7, 8, 64, 1000, 1024} {
		for _, l := range []int{0, 5, 32, 33, 100, 4099} {
			buf := make([]float32, l)
			for i := range buf {
				buf[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(80)-40)))
				if i%11 == 2 {
					buf[i] = special[i%len(special)]
				}
			}
			want := make([]float32, l)
			for i, x := range buf {
				want[i] = x / float32(n)
			}
			divide(buf, n)
			for i := range buf {
				if math.Float32bits(buf[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d len=%d: [%d] = %v (%#x), want %v (%#x)", n, l, i, buf[i], math.Float32bits(buf[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}
