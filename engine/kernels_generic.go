//go:build !amd64 || purego

package engine

// axpy computes y += a*x (x at least as long as y).
func axpy(y, x []float32, a float32) { axpyPortable(y, x, a) }

// axpyRows adds vals[t]·m[idx[t]·stride:][:len(y)] to y for t in order.
func axpyRows(y, m []float32, stride int, idx []int32, vals []float32) {
	axpyRowsPortable(y, m, stride, idx, vals)
}

// listNonzero is listNonzeroPortable (idx and val hold len(x)+listSlack).
func listNonzero(x []float32, idx []int32, val []float32) int {
	return listNonzeroPortable(x, idx, val)
}

// adamUpdate applies one Adam step (adamPortable).
func adamUpdate(p, m, v, g []float32, k *adamConsts) { adamPortable(p, m, v, g, k) }

// anyNonFinite reports whether x holds a NaN or ±Inf.
func anyNonFinite(x []float32) bool { return anyNonFinitePortable(x) }

// relu is reluPortable.
func relu(x []float32) { reluPortable(x) }

// zeroWhereZero is zeroWhereZeroPortable.
func zeroWhereZero(d, a []float32) { zeroWhereZeroPortable(d, a) }

// prefetch does nothing without the assembly kernels.
func prefetch([]float32) {}
