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
	mag   []uint32  // selection scratch: magnitudes' bits
	vals  []float32 // kept values scratch
	kept  []int     // their indices
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
	return t.encode(dst, x)
}

// encodeFeedback is Encode of v = g + residual followed by residual =
// v − decode(encoding), in two passes instead of five, with the same
// bits: a dropped value's residual is v − 0 = v, a kept one's v − (0 + v),
// as the generic path computes them.
func (t *TopK) encodeFeedback(dst []byte, g, residual []float32, _ uint64, _ int) []byte {
	v := residual[:len(g)]
	for i, x := range g {
		v[i] = x + v[i]
	}
	dst = t.encode(dst, v)
	for _, i := range t.kept {
		v[i] -= 0 + v[i]
	}
	return dst
}

// encode is Encode, leaving the kept indices in t.kept.
func (t *TopK) encode(dst []byte, x []float32) []byte {
	t.kept = t.kept[:0]
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
	vals, kept := t.vals[:0], t.kept[:0]
	for i, v := range x {
		a := magnitude(v)
		if a > thr || (a == thr && ties > 0) {
			if a == thr {
				ties--
			}
			dst = binary.AppendUvarint(dst, uint64(i-prev-1))
			prev = i
			vals, kept = append(vals, v), append(kept, i)
			if len(vals) == k {
				break
			}
		}
	}
	t.vals, t.kept = vals, kept
	for _, v := range vals {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// threshold returns the k-th largest magnitude and how many magnitudes
// exceed it. On long vectors a strided sample guesses a magnitude a little
// below the k-th largest; one branch-free pass keeps every value at or
// above the guess, and the selection runs on those (the k-th largest of
// all is the k-th largest of any subset holding at least k of the largest
// and everything above them, so the answer is exact). A guess that keeps
// fewer than k falls back to selecting on every value.
func (t *TopK) threshold(x []float32, k int) (float32, int) {
	if cap(t.mag) < len(x) {
		t.mag = make([]uint32, len(x))
	}
	keys := t.mag[:len(x)]
	if len(x) >= sampledSelectMin {
		const samples = 2048
		sample := keys[:samples]
		for j := range sample {
			sample[j] = magnitudeKey(x[j*len(x)/samples])
		}
		// Aim for 1.25 k kept, plus slack for the sample's error.
		r := int(1.25*float64(k)*samples/float64(len(x))) + 24
		if r < samples {
			guess := selectKey(sample, r)
			c := 0
			for _, v := range x {
				kv := magnitudeKey(v)
				keys[c] = kv
				if kv >= guess {
					c++
				}
			}
			if c >= k {
				return countAbove(keys[:c], k)
			}
		}
	}
	for i, v := range x {
		keys[i] = magnitudeKey(v)
	}
	return countAbove(keys, k)
}

// sampledSelectMin is the length from which threshold samples.
const sampledSelectMin = 16384

// countAbove selects the k-th largest of keys (reordering them) and counts
// the keys above it.
func countAbove(keys []uint32, k int) (float32, int) {
	thr := selectKey(keys, k-1)
	above := 0
	for _, kv := range keys {
		if kv > thr {
			above++
		}
	}
	return math.Float32frombits(thr), above
}

// selectKey reorders m so that m[target] is its (target+1)-th largest and
// returns it (quickselect, median-of-three pivots, descending).
func selectKey(m []uint32, target int) uint32 {
	lo, hi := 0, len(m)-1
	for lo < hi {
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
	return m[target]
}

// magnitudeKey is magnitude(v)'s bits: non-negative floats order as their
// bits do, so selection compares integers.
func magnitudeKey(v float32) uint32 {
	return min(math.Float32bits(v)&^(1<<31), 0x7f800000) // a NaN as +Inf
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
