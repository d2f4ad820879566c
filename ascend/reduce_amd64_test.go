//go:build !purego

package ascend

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddFloatsNT2: the two-destination kernel stores the portable loop's
// bits into both outputs, for lengths around its blocks and starts off
// the 32-byte grid, with the outputs apart or exactly the operands (the
// direct algorithm's in-place case: dst = b, dst2 = a); it refuses, storing
// nothing, outputs aligned differently.
func TestAddFloatsNT2(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	aligned := func(n, shift int) []float32 { // 32-byte aligned, then shifted by shift floats
		b := make([]float32, n+shift+8)
		h := ntHead(b)
		return b[h+shift : h+shift+n]
	}
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

// TestAddFloatsKeepNT: the kernel that keeps one output in cache stores
// the portable loop's bits into both outputs for lengths around its blocks,
// with the two outputs and the operands on different 32-byte offsets (only
// far's alignment matters to it), apart or exactly the operands.
func TestAddFloatsKeepNT(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	at := func(n, shift int) []float32 { // 32-byte aligned, then shifted by shift floats
		b := make([]float32, n+shift+8)
		h := ntHead(b)
		return b[h+shift : h+shift+n]
	}
	for _, n := range []int{1, 7, 31, 32, 33, 100, 1000, 4099} {
		for _, shift := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {5, 2}} {
			for _, inPlace := range []bool{false, true} {
				a, b := at(n, shift[1]), at(n, shift[0])
				for i := range n {
					a[i], b[i] = float32(rng.NormFloat64()*1e3), float32(rng.NormFloat64()*1e-3)
				}
				want := make([]float32, n)
				addPortable(want, a, b)
				own, far := at(n, shift[0]), at(n, shift[1])
				if inPlace {
					own, far = b, a
				}
				if !addFloatsKeepNT(own, far, a, b) {
					if hasAVX2 {
						t.Fatalf("n=%d shift=%v: refused", n, shift)
					}
					continue
				}
				for i := range n {
					if math.Float32bits(own[i]) != math.Float32bits(want[i]) || math.Float32bits(far[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d shift=%v in-place=%v: [%d] = %v, %v, want %v", n, shift, inPlace, i, own[i], far[i], want[i])
					}
				}
			}
		}
	}
}
