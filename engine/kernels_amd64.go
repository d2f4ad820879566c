//go:build !purego

package engine

import "golang.org/x/sys/cpu"

// hasAVX2 is read-only after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// axpyAVX2 computes y[i] += a*x[i] for i < n (kernels_amd64.s) with a
// multiply and an add per element, never fused; n > 0, a multiple of 8.
//
//go:noescape
func axpyAVX2(y, x *float32, a float32, n int)

// adamAVX2 is adamPortable over the first n elements (kernels_amd64.s);
// n > 0, a multiple of 8.
//
//go:noescape
func adamAVX2(p, m, v, grad *float32, n int, k *adamConsts)

// anyNonFiniteAVX2 reports whether x[:n] holds a NaN or ±Inf
// (kernels_amd64.s); n > 0, a multiple of 8.
//
//go:noescape
func anyNonFiniteAVX2(x *float32, n int) bool

// anyNonFinite reports whether x holds a NaN or ±Inf, eight elements at a
// time where the CPU has AVX2 (the portable test on each lane).
func anyNonFinite(x []float32) bool {
	v := 0
	if hasAVX2 {
		if v = len(x) &^ 7; v > 0 && anyNonFiniteAVX2(&x[0], v) {
			return true
		}
	}
	return anyNonFinitePortable(x[v:])
}

// axpy computes y += a*x (x at least as long as y). The vector kernel
// performs the same IEEE single-precision multiply and add per element as
// axpyPortable, so the results are bit-identical (ranks, restarts and
// machines without AVX2 must agree to the bit).
func axpy(y, x []float32, a float32) {
	n := len(y)
	x = x[:n]
	if hasAVX2 && n >= 8 {
		v := n &^ 7
		axpyAVX2(&y[0], &x[0], a, v)
		if v == n {
			return
		}
		y, x = y[v:], x[v:]
	}
	axpyPortable(y, x, a)
}

// adamUpdate is adamPortable, eight elements at a time where the CPU has
// AVX2: the same operations in the same order per element (VSQRTPS is the
// correctly rounded square root, as float32(math.Sqrt(float64(v))) is),
// so the same bits.
func adamUpdate(p, m, v, g []float32, k *adamConsts) {
	n := len(p)
	m, v, g = m[:n], v[:n], g[:n]
	w := 0
	if hasAVX2 {
		if w = n &^ 7; w > 0 {
			adamAVX2(&p[0], &m[0], &v[0], &g[0], w, k)
		}
	}
	adamPortable(p[w:], m[w:], v[w:], g[w:], k)
}
