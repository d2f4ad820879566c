package ascend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAddFloatsMatchesPortable: the vector kernel gives the portable
// loop's bits for every length around its 32-float blocks, unaligned
// starts, in place (dst = a and dst = b) and with special values.
func TestAddFloatsMatchesPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32}
	for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 65, 100, 1000, 4099} {
		for _, shift := range []int{0, 1, 3} {
			for _, alias := range []string{"none", "a", "b"} {
				a, b := make([]float32, n+shift)[shift:], make([]float32, n+shift)[shift:]
				for i := range n {
					a[i], b[i] = rng.Float32()*1e3-500, rng.Float32()*1e-3
					if i%17 == 0 {
						a[i] = special[i%len(special)]
					}
					if i%23 == 0 {
						b[i] = special[(i/23)%len(special)]
					}
				}
				want := make([]float32, n)
				addPortable(want, a, b)
				dst := make([]float32, n+shift)[shift:]
				switch alias {
				case "a":
					dst = a
				case "b":
					dst = b
				}
				for _, k := range []struct {
					name string
					f    func(d, x, y []float32)
				}{{"addFloats", addFloats}, {"addFloatsNT", addFloatsNT}} {
					if alias == "none" {
						clear(dst)
					}
					a2, b2 := slices.Clone(a), slices.Clone(b)
					d := dst
					switch alias {
					case "a":
						copy(a, a2)
						d = a
					case "b":
						copy(b, b2)
						d = b
					}
					k.f(d, a, b)
					for i := range n {
						if math.Float32bits(d[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s n=%d shift=%d alias=%s: [%d] = %v, want %v", k.name, n, shift, alias, i, d[i], want[i])
						}
					}
					copy(a, a2)
					copy(b, b2)
				}
				if alias == "none" {
					c := make([]float32, n+shift)[shift:]
					copyNT(c, a)
					if !slices.Equal(c, a) && !slices.EqualFunc(c, a, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
						t.Fatalf("copyNT n=%d shift=%d differs", n, shift)
					}
				}
			}
		}
	}
}

// BenchmarkAdd compares the kernel with the portable loop and with copy
// (a memcpy of the output's size), in cache and beyond.
func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{1 << 14, 1 << 18, 1 << 22} {
		for _, k := range []struct {
			name string
			f    func(d, x, y []float32)
		}{{"kernel", addFloats}, {"portable", addPortable}, {"copy", func(d, x, _ []float32) { copy(d, x) }}} {
			b.Run(fmt.Sprintf("%s/%dKiB", k.name, 4*n>>10), func(b *testing.B) {
				d, x, y := make([]float32, n), make([]float32, n), make([]float32, n)
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					k.f(d, x, y)
				}
			})
		}
	}
}

// BenchmarkDivide: Avg's division of a vector by the world size, as
// divide runs it (vectorised) against one scalar division per element;
// each iteration first restores the vector (a copy, in both) so that the
// values never drift into subnormals.
func BenchmarkDivide(b *testing.B) {
	scalar := func(buf []float32, n int) {
		d := float32(n)
		for i := range buf {
			buf[i] /= d
		}
	}
	for _, n := range []int{2, 3} {
		for _, k := range []struct {
			name string
			f    func([]float32, int)
		}{{"divide", divide}, {"scalar", scalar}} {
			b.Run(fmt.Sprintf("%s/by%d/1MiB", k.name, n), func(b *testing.B) {
				buf, orig := make([]float32, 1<<18), make([]float32, 1<<18)
				for i := range orig {
					orig[i] = float32(i%1000) + 0.5
				}
				b.SetBytes(4 << 18)
				for b.Loop() {
					copy(buf, orig)
					k.f(buf, n)
				}
			})
		}
	}
}
