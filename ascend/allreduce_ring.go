package ascend

// Ring AllReduce: a reduce-scatter followed by an allgather around the ring
// rank r → r+1, buffer split into P contiguous segments (sizes differ by at
// most one element, so any length and any P work; segments may be empty).
//
// Cost for P ranks and S bytes (α latency per message, β seconds per byte,
// γ seconds per reduced byte):
//
//	steps:          2(P-1)
//	bytes per rank: 2(P-1)/P · S sent and the same received
//	time:           2(P-1)·α + 2(P-1)/P·S·β + (P-1)/P·S·γ
//
// Bandwidth-optimal; latency grows linearly in P, so small messages on large
// worlds want recursive halving-doubling or a tree (a later version selects).
// Each step sends one segment to the right neighbour from the writer
// goroutine while receiving the next from the left neighbour; received
// frames (≤ ChunkBytes) are reduced while the transport receives the next
// one. No allocation per call: the receive scratch is reused.

import "context"

// AllReduce reduces buf element-wise with op across all ranks, in place.
// Every rank must pass a buffer of the same length and the same op.
func (c *Communicator) AllReduce(ctx context.Context, buf []float32, op Op) error {
	if !op.valid() {
		return errorf(ErrInvalid, "allreduce: unknown op %d", uint8(op))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, watched, err := c.begin(ctx, "allreduce")
	if err != nil {
		return err
	}
	defer c.end(watched)
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	return c.allReduceRing(ctx, buf, op, makeTag(seq, kindAllReduce, int(op)))
}

// segment returns the i-th of p near-equal contiguous segments of buf.
func segment(buf []float32, p, i int) []float32 {
	n := len(buf)
	q, r := n/p, n%p
	lo := i*q + min(i, r)
	hi := lo + q
	if i < r {
		hi++
	}
	return buf[lo:hi]
}

func (c *Communicator) allReduceRing(ctx context.Context, buf []float32, op Op, tag uint32) error {
	const name = "allreduce"
	p, r := c.size, c.rank
	right, left := c.peers[mod(r+1, p)], c.peers[mod(r-1, p)]
	// Reduce-scatter: after step s, segment r-s-1 holds s+2 contributions;
	// after P-1 steps rank r owns the fully reduced segment r+1.
	for s := 0; s < p-1; s++ {
		send, recv := segment(buf, p, mod(r-s, p)), segment(buf, p, mod(r-s-1, p))
		if err := c.exchange(ctx, name, tag, right, send, left, recv, op, true); err != nil {
			return err
		}
	}
	if op == Avg {
		divide(segment(buf, p, mod(r+1, p)), p)
	}
	// Allgather: circulate the owned segments.
	for s := 0; s < p-1; s++ {
		send, recv := segment(buf, p, mod(r+1-s, p)), segment(buf, p, mod(r-s, p))
		if err := c.exchange(ctx, name, tag, right, send, left, recv, op, false); err != nil {
			return err
		}
	}
	return nil
}
