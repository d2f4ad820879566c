package ascend

// AllToAll by Bruck's algorithm (Bruck et al., IEEE TPDS 1997; Open MPI's
// choice for small blocks on many ranks): each rank first rotates its
// blocks so that block i is the one for rank r+i, then in round
// k = 1, 2, 4, … < p sends to r+k every block whose index has bit k set
// (they travel on towards their destination) and receives as many from
// r−k into the same places; a final rotation puts the block from rank j
// in place j. ⌈log2 p⌉ messages per rank instead of pairwise's p−1, but
// each carries about half the buffer and the blocks are copied in and out
// of the messages, so it wins on small buffers and the pairwise exchange
// on large ones.
//
// Cost for p ranks and n bytes (the whole per-rank send buffer), L =
// ⌈log2 p⌉; the copies (two rotations, packing and unpacking in every
// round) are priced as half a reduction each:
//
//	L·α + L·n/2·β + (2+L)·n/2·γ

import "context"

type bruckAlgorithm struct{}

func (bruckAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	if coll != CollAllToAll {
		return 0, false
	}
	L := float64(log2ceil(p))
	return m.busy(L, L*n/2, (2+L)*n/2), true
}

// bruckAllToAll runs AllToAll of equal blocks (len(src)/p elements) over
// tag; the caller holds the operation.
func (c *Communicator) bruckAllToAll(ctx context.Context, tag uint32, dst, src []float32) error {
	p, r := c.size, c.rank
	b := len(src) / p
	half := (p + 1) / 2 // most blocks one round moves
	work := c.workFor((p + 2*half) * b)
	rot, out, in := work[:p*b], work[p*b:(p+half)*b], work[(p+half)*b:]
	for i := range p { // rot block i: the block for rank r+i
		j := mod(r+i, p)
		copy(rot[i*b:(i+1)*b], src[j*b:(j+1)*b])
	}
	for k := 1; k < p; k <<= 1 {
		m := 0
		for i := k; i < p; i++ {
			if i&k != 0 {
				copy(out[m*b:(m+1)*b], rot[i*b:(i+1)*b])
				m++
			}
		}
		to, from := c.peers[mod(r+k, p)], c.peers[mod(r-k, p)]
		if err := c.exchange(ctx, "alltoall", tag, to, out[:m*b], from, in[:m*b], nil, Sum, false); err != nil {
			return err
		}
		m = 0
		for i := k; i < p; i++ {
			if i&k != 0 {
				copy(rot[i*b:(i+1)*b], in[m*b:(m+1)*b])
				m++
			}
		}
	}
	for j := range p { // the block from rank j came r−j places
		i := mod(r-j, p)
		copy(dst[j*b:(j+1)*b], rot[i*b:(i+1)*b])
	}
	return nil
}
