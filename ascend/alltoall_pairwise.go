package ascend

// AllToAll by pairwise exchange: in step k = 1 … p-1 rank r sends its
// block for r+k to r+k and receives the block from r-k, so every rank
// talks to exactly one sender and one receiver per step (no incast; HCCL's
// "pairwise", Open MPI's default for large messages).
//
// Cost for p ranks and n bytes (the whole per-rank send buffer; α, β as
// in ring.go):
//
//	(p-1)·α + (p-1)/p·n·β
//
// AllToAllV uses the same schedule; a step's cost is then set by the
// largest block exchanged in it.

import "context"

type pairwiseAlgorithm struct{}

func (pairwiseAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	if coll != CollAllToAll {
		return 0, false
	}
	P := float64(p)
	return m.busy(P-1, (P-1)/P*n, 0), true
}

// AllToAll sends block j of src (Size() blocks of len(src)/Size()
// elements) to rank j and stores the block received from rank i in block
// i of dst. dst and src must have the same length, a multiple of Size(),
// equal on all ranks, and must not overlap (there is no in-place variant).
func (c *Communicator) AllToAll(ctx context.Context, dst, src []float32) error {
	if len(dst) != len(src) || len(src)%c.size != 0 {
		return errorf(ErrInvalid, "alltoall: len(dst) = %d, len(src) = %d, want equal multiples of the world size %d", len(dst), len(src), c.size)
	}
	return c.allToAll(ctx, dst, src, nil, nil)
}

// AllToAllV is AllToAll with uneven blocks: this rank sends sendCounts[j]
// elements to rank j, taken from src in rank order, and receives
// recvCounts[i] elements from rank i, stored in dst in rank order.
// sendCounts[j] on rank i must equal recvCounts[i] on rank j.
func (c *Communicator) AllToAllV(ctx context.Context, dst, src []float32, sendCounts, recvCounts []int) error {
	if len(sendCounts) != c.size || len(recvCounts) != c.size {
		return errorf(ErrInvalid, "alltoallv: %d send and %d receive counts for world size %d", len(sendCounts), len(recvCounts), c.size)
	}
	ns, nr := 0, 0
	for i := range c.size {
		if sendCounts[i] < 0 || recvCounts[i] < 0 {
			return errorf(ErrInvalid, "alltoallv: negative count for rank %d", i)
		}
		ns += sendCounts[i]
		nr += recvCounts[i]
	}
	if len(src) != ns || len(dst) != nr {
		return errorf(ErrInvalid, "alltoallv: len(src) = %d, len(dst) = %d, want the sums of the counts %d and %d", len(src), len(dst), ns, nr)
	}
	return c.allToAll(ctx, dst, src, sendCounts, recvCounts)
}

func (c *Communicator) allToAll(ctx context.Context, dst, src []float32, sendCounts, recvCounts []int) error {
	if overlap(dst, src) || (len(dst) > 0 && same(dst, src)) {
		return errorf(ErrInvalid, "alltoall: dst and src overlap")
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "alltoall")
	if err != nil {
		return err
	}
	defer c.end()
	p, r := c.size, c.rank
	// block returns the bounds of block i of a buffer: equal blocks or the
	// prefix sums of counts, computed in O(p) without allocating.
	block := func(buf []float32, counts []int, i int) []float32 {
		if counts == nil {
			n := len(buf) / p
			return buf[i*n : (i+1)*n]
		}
		off := 0
		for _, k := range counts[:i] {
			off += k
		}
		return buf[off : off+counts[i]]
	}
	self := func() { copy(block(dst, recvCounts, r), block(src, sendCounts, r)) }
	if p == 1 || (sendCounts == nil && len(src) == 0) {
		self()
		return nil
	}
	if sendCounts == nil && c.choose(CollAllToAll, 4*len(src)) == AlgoBruck {
		return c.bruckAllToAll(ctx, makeTag(seq, AlgoBruck, CollAllToAll, 0), dst, src)
	}
	tag := makeTag(seq, AlgoPairwise, CollAllToAll, 0)
	for k := 1; k < p; k++ {
		to, from := c.peers[mod(r+k, p)], c.peers[mod(r-k, p)]
		c.startSend(ctx, to, tag, block(src, sendCounts, to.rank))
		if k == 1 {
			// This rank's own block, copied while the first send is under
			// way rather than before it (the peer waits for that send).
			self()
		}
		if err := c.recv(ctx, from, tag, block(dst, recvCounts, from.rank), nil, Sum, false); err != nil {
			return c.failRecv(ctx, "alltoall", from, err)
		}
		if err := c.finishSend(ctx, "alltoall", to); err != nil {
			return err
		}
	}
	return nil
}
