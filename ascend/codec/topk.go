package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// TopK keeps the ceil(Ratio·n) values of largest magnitude (ties: lower
// index first) and drops the rest. Body:
//
//	[k uvarint][k index gaps uvarint (first: the index)][k float32]
//
// so an entry costs 4 bytes plus 1–2 for its index at densities above
// 1/16384.
type TopK struct {
	Ratio float64
	mag   []float32 // selection scratch
	vals  []float32 // kept values scratch
}

// NewTopK returns a TopK codec keeping fraction ratio in (0, 1].
func NewTopK(ratio float64) (*TopK, error) {
	if !(ratio > 0 && ratio <= 1) {
		return nil, fmt.Errorf("%w: topk ratio %v, want (0, 1]", ErrInvalid, ratio)
	}
	return &TopK{Ratio: ratio}, nil
}

func (t *TopK) Name() string { return fmt.Sprintf("topk:%g", t.Ratio) }

// K is the number of values kept of n.
func (t *TopK) K(n int) int {
	if n == 0 {
		return 0
	}
	return min(n, max(1, int(math.Ceil(t.Ratio*float64(n)))))
}

func (t *TopK) Encode(dst []byte, x []float32, _ uint64, _ int) []byte {
	dst = header(dst, idTopK, len(x))
	k := t.K(len(x))
	dst = binary.AppendUvarint(dst, uint64(k))
	if k == 0 {
		return dst
	}
	thr, above := t.threshold(x, k)
	// Entries strictly above the threshold, then ties in index order
	// until k: deterministic.
	ties := k - above
	prev := -1
	vals := t.vals[:0]
	for i, v := range x {
		a := magnitude(v)
		if a > thr || (a == thr && ties > 0) {
			if a == thr {
				ties--
			}
			dst = binary.AppendUvarint(dst, uint64(i-prev-1))
			prev = i
			vals = append(vals, v)
			if len(vals) == k {
				break
			}
		}
	}
	t.vals = vals
	for _, v := range vals {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// threshold returns the k-th largest magnitude and how many magnitudes
// exceed it (quickselect on a scratch copy; NaNs sort as largest).
func (t *TopK) threshold(x []float32, k int) (float32, int) {
	if cap(t.mag) < len(x) {
		t.mag = make([]float32, len(x))
	}
	m := t.mag[:len(x)]
	for i, v := range x {
		m[i] = magnitude(v)
	}
	// Select so that m[k-1] is the k-th largest.
	lo, hi := 0, len(m)-1
	target := k - 1
	for lo < hi {
		// Median of three pivot, descending partition.
		mid := lo + (hi-lo)/2
		a, b, c := m[lo], m[mid], m[hi]
		p := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for m[i] > p {
				i++
			}
			for m[j] < p {
				j--
			}
			if i <= j {
				m[i], m[j] = m[j], m[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			lo, hi = target, target
		}
	}
	thr := m[target]
	above := 0
	for _, v := range x {
		if magnitude(v) > thr {
			above++
		}
	}
	return thr, above
}

func (t *TopK) DecodeAdd(out []float32, src []byte) error {
	body, err := readHeader(src, idTopK, len(out))
	if err != nil {
		return err
	}
	k64, n := binary.Uvarint(body)
	if n <= 0 {
		return corrupt("topk: bad count")
	}
	if k64 > uint64(len(out)) {
		return corrupt("topk: %d entries for %d values", k64, len(out))
	}
	k := int(k64)
	body = body[n:]
	// Indices first; values follow them.
	idx := 0
	pos := 0
	for e := 0; e < k; e++ {
		gap, n := binary.Uvarint(body[pos:])
		if n <= 0 {
			return corrupt("topk: bad index varint at entry %d", e)
		}
		pos += n
		if gap >= uint64(len(out)) {
			return corrupt("topk: index gap %d out of range", gap)
		}
		if e == 0 {
			idx = int(gap)
		} else {
			idx += int(gap) + 1
		}
		if idx >= len(out) {
			return corrupt("topk: index %d out of range %d", idx, len(out))
		}
	}
	if len(body)-pos != 4*k {
		return corrupt("topk: %d value bytes for %d entries", len(body)-pos, k)
	}
	vals := body[pos:]
	pos, idx = 0, 0
	for e := 0; e < k; e++ {
		gap, n := binary.Uvarint(body[pos:])
		pos += n
		if e == 0 {
			idx = int(gap)
		} else {
			idx += int(gap) + 1
		}
		out[idx] += getF32(vals[4*e:])
	}
	return nil
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// magnitude orders values for top-k: |v|, NaN as +Inf (a NaN gradient is
// kept, so it reaches the other ranks and the loss check instead of
// hiding in the error buffer).
func magnitude(v float32) float32 {
	a := abs32(v)
	if a != a {
		return float32(math.Inf(1))
	}
	return a
}
