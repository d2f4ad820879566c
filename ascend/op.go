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
func reduce(dst, src []float32, op Op) {
	src = src[:len(dst)]
	switch op {
	case Sum, Avg:
		for i := range dst {
			dst[i] += src[i]
		}
	case Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	}
}

// reduceLE folds little-endian encoded src into dst (portable wire path).
func reduceLE(dst []float32, src []byte, op Op) {
	src = src[:4*len(dst)]
	for i := range dst {
		v := getF32(src[4*i:])
		switch op {
		case Sum, Avg:
			dst[i] += v
		case Max:
			dst[i] = max(dst[i], v)
		case Min:
			dst[i] = min(dst[i], v)
		}
	}
}

// divide scales buf by 1/n (for Avg), using a true division per element so
// every rank computes the identical value.
func divide(buf []float32, n int) {
	d := float32(n)
	for i := range buf {
		buf[i] /= d
	}
}
