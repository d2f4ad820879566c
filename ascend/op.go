package ascend

import (
	"fmt"
)

// Op is a reduction operator for AllReduce.
type Op uint8

const (
	Sum Op = iota // element-wise sum
	Avg           // element-wise sum divided by the world size
	Max           // element-wise maximum (NaN propagates)
	Min           // element-wise minimum (NaN propagates)
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

func (o Op) valid() bool { return o <= Min }

// reduce folds src into dst element-wise: dst[i] = dst[i] op src[i].
// Avg reduces like Sum; the division happens once at the end.
func reduce(dst, src []float32, op Op) { reduce3(dst, dst, src, op) }

// reduce3 stores a[i] op b[i] into dst[i]; dst may alias a or b exactly
// (same start), which makes it an in-place fold.
func reduce3(dst, a, b []float32, op Op) {
	n := len(dst)
	a, b = a[:n], b[:n]
	switch op {
	case Sum, Avg:
		addFloats(dst, a, b)
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	}
}

// addPortable is addFloats without vector instructions.
func addPortable(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		x, y := a[i:i+4:i+4], b[i:i+4:i+4]
		d := dst[i : i+4 : i+4]
		d[0], d[1], d[2], d[3] = x[0]+y[0], x[1]+y[1], x[2]+y[2], x[3]+y[3]
	}
	for ; i < n; i++ {
		dst[i] = a[i] + b[i]
	}
}

// reduceLE stores base[i] op src[i] into dst[i], src little-endian encoded
// (portable wire path).
func reduceLE(dst, base []float32, src []byte, op Op) {
	src = src[:4*len(dst)]
	base = base[:len(dst)]
	for i := range dst {
		v := getF32(src[4*i:])
		switch op {
		case Sum, Avg:
			dst[i] = base[i] + v
		case Max:
			dst[i] = max(base[i], v)
		case Min:
			dst[i] = min(base[i], v)
		}
	}
}

// divide scales buf by 1/n (for Avg), with the correctly rounded quotient
// of every element by n (a true division, or for a power of two the
// multiplication by its exact reciprocal, which rounds the same exact
// value), so every rank and every algorithm computes the identical bits.
// The bulk runs vectorised (divideVec).
func divide(buf []float32, n int) {
	d := float32(n)
	for i := divideVec(buf, n); i < len(buf); i++ {
		buf[i] /= d
	}
}
