//go:build !purego

package engine

import (
	"fmt"
	"math"

	"golang.org/x/sys/cpu"
)

// hasAVX2 is read-only after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// axpyAVX2 computes y[i] += a*x[i] for i < n (kernels_amd64.s) with a
// multiply and an add per element, never fused; n > 0, a multiple of 8.
//
//go:noescape
func axpyAVX2(y, x *float32, a float32, n int)

// axpyRows64AVX2 and axpyRows8AVX2 add vals[t]·m[idx[t]·stride:][:64]
// (or [:8]) to y[:64] (or [:8]) for t < k, in order, with y held in
// registers throughout (kernels_amd64.s); k > 0. Each listed row is
// checked against 0..last (last ≥ 0: the last row whose 64 or 8 columns
// lie in m) as it is reached; at the first outside, they return false
// and leave y as it was.
//
//go:noescape
func axpyRows64AVX2(y, m *float32, stride int, idx *int32, vals *float32, k, last int) bool

//go:noescape
func axpyRows8AVX2(y, m *float32, stride int, idx *int32, vals *float32, k, last int) bool

// axpyRows adds vals[t]·m[idx[t]·stride:][:len(y)] to y for t = 0, 1, …
// in order (axpyRowsPortable): where the CPU has AVX2, 64 and then 8
// columns of y at a time stay in registers while the listed rows stream
// by — every element still gets its products added one by one in the
// list's order, multiply then add, so the bits are axpyPortable's.
func axpyRows(y, m []float32, stride int, idx []int32, vals []float32) {
	k, n := len(idx), len(y)
	vals = vals[:k]
	if k == 0 || n == 0 {
		return
	}
	c := 0
	if hasAVX2 && n >= 8 {
		// The kernels check each row against the last whose block of
		// columns lies in m as they reach it (no pass over idx here).
		lastRow := func(width int) int {
			switch {
			case stride < 0 || len(m) < c+width:
				return -1
			case stride == 0: // every row is m's first
				return math.MaxInt32
			}
			return (len(m) - c - width) / stride
		}
		for ; c+64 <= n; c += 64 {
			if last := lastRow(64); last < 0 || !axpyRows64AVX2(&y[c], &m[c], stride, &idx[0], &vals[0], k, last) {
				badRow(m, stride, idx, c+64)
			}
		}
		for ; c+8 <= n; c += 8 {
			if last := lastRow(8); last < 0 || !axpyRows8AVX2(&y[c], &m[c], stride, &idx[0], &vals[0], k, last) {
				badRow(m, stride, idx, c+8)
			}
		}
		if c == n {
			return
		}
		// The last n-c < 8 columns (2 of the default model's 10
		// outputs): one column at a time in a register, the listed
		// rows in order, instead of a call per row.
		for ; c < n; c++ {
			acc := y[c]
			for t, j := range idx {
				acc += float32(vals[t] * m[int(j)*stride+c])
			}
			y[c] = acc
		}
		return
	}
	axpyRowsPortable(y[c:], m[c:], stride, idx, vals)
}

// badRow panics naming the first row of idx whose columns up to end lie
// outside m (a caller's bug: the kernels refused to read it).
func badRow(m []float32, stride int, idx []int32, end int) {
	for _, j := range idx {
		if j < 0 || int(j)*stride+end > len(m) {
			panic(fmt.Sprintf("engine: axpyRows: row %d of stride %d past %d elements", j, stride, len(m)))
		}
	}
	panic(fmt.Sprintf("engine: axpyRows: stride %d, %d elements", stride, len(m)))
}

// listNonzeroAVX2 lists the nonzero elements of x[:n] (n > 0, a multiple
// of 8) as listNonzeroPortable does, eight at a time: a comparison with
// zero (unordered counts as nonzero, as NaN does for nonzero) gives a lane
// mask, packLanes[mask] the lanes to keep, and all eight slots are stored
// before the count advances by the mask's population (kernels_amd64.s).
// idx and val must hold n+listSlack.
//
//go:noescape
func listNonzeroAVX2(x *float32, n int, idx *int32, val *float32, pack *[256][8]int32) int

// packLanes[m] lists the set bits of m, lowest first, then zeros:
// VPERMD's control for packing a mask's lanes to the front.
var packLanes = func() (t [256][8]int32) {
	for m := range t {
		k := 0
		for lane := range 8 {
			if m>>lane&1 == 1 {
				t[m][k] = int32(lane)
				k++
			}
		}
	}
	return t
}()

// listNonzero writes the indices and values of x's nonzero elements to
// idx and val in order and returns their count (listNonzeroPortable),
// eight elements at a time where the CPU has AVX2; idx and val hold
// len(x)+listSlack.
func listNonzero(x []float32, idx []int32, val []float32) int {
	n := len(x)
	idx, val = idx[:n+listSlack], val[:n+listSlack]
	k, v := 0, 0
	if hasAVX2 {
		if v = n &^ 7; v > 0 {
			k = listNonzeroAVX2(&x[0], v, &idx[0], &val[0], &packLanes)
		}
	}
	for j := v; j < n; j++ {
		a := x[j]
		idx[k], val[k] = int32(j), a
		k += int(nonzero(a))
	}
	return k
}

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

// reluAVX2 sets x[i] = +0 where x[i] < 0 for i < n (kernels_amd64.s);
// n > 0, a multiple of 8.
//
//go:noescape
func reluAVX2(x *float32, n int)

// zeroWhereZeroAVX2 sets d[i] = +0 where a[i] is ±0 for i < n
// (kernels_amd64.s); n > 0, a multiple of 8.
//
//go:noescape
func zeroWhereZeroAVX2(d, a *float32, n int)

// relu is reluPortable, eight elements at a time where the CPU has AVX2.
func relu(x []float32) {
	v := 0
	if hasAVX2 {
		if v = len(x) &^ 7; v > 0 {
			reluAVX2(&x[0], v)
		}
	}
	reluPortable(x[v:])
}

// zeroWhereZero is zeroWhereZeroPortable, eight elements at a time where
// the CPU has AVX2.
func zeroWhereZero(d, a []float32) {
	a = a[:len(d)]
	v := 0
	if hasAVX2 {
		if v = len(d) &^ 7; v > 0 {
			zeroWhereZeroAVX2(&d[0], &a[0], v)
		}
	}
	zeroWhereZeroPortable(d[v:], a[v:])
}

// prefetchLines hints every cache line of x[:n] into the caches (SSE)
// (kernels_amd64.s); n > 0. It reads nothing.
//
//go:noescape
func prefetchLines(x *float32, n int)

// prefetch hints x's cache lines into the caches: loadBatch asks for the
// next dataset row while it lists the current one.
func prefetch(x []float32) {
	if len(x) > 0 {
		prefetchLines(&x[0], len(x))
	}
}
