package ascend

// Broadcast over a binomial tree rooted at root, pipelined in frames of
// ChunkBytes: a rank forwards chunk k to its children while it receives
// chunk k+1 from its parent.
//
// Cost for P ranks, S bytes, chunk size C (α, β as in allreduce_ring.go):
//
//	rounds:         ⌈log2 P⌉ (tree depth)
//	bytes per rank: S received (except root), S per child sent; a rank has
//	                up to ⌈log2 P⌉ children, sending to them concurrently
//	time:           ≈ (⌈log2 P⌉ + S/C - 1)·(α + C·β·fanout) — latency-optimal
//	                for small S; for large S a ring/scatter-allgather
//	                broadcast (2·S·β) wins and is left to a later version.

import "context"

// Broadcast copies root's buf into every other rank's buf. All ranks must
// pass the same root and buffers of the same length.
func (c *Communicator) Broadcast(ctx context.Context, buf []float32, root int) error {
	if root < 0 || root >= c.size {
		return errorf(ErrInvalid, "broadcast: root %d out of range [0,%d)", root, c.size)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, watched, err := c.begin(ctx, "broadcast")
	if err != nil {
		return err
	}
	defer c.end(watched)
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	return c.broadcastTree(ctx, buf, root, makeTag(seq, kindBroadcast, root))
}

func (c *Communicator) broadcastTree(ctx context.Context, buf []float32, root int, tag uint32) error {
	const name = "broadcast"
	p := c.size
	vr := mod(c.rank-root, p) // rank relative to root
	var parent *peer
	mask := 1
	for ; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			parent = c.peers[mod(vr-mask+root, p)]
			break
		}
	}
	children := c.children[:0]
	for m := mask >> 1; m > 0; m >>= 1 {
		if vr+m < p {
			children = append(children, c.peers[mod(vr+m+root, p)])
		}
	}
	c.children = children

	n := len(buf)
	var prev []float32 // chunk whose sends are outstanding
	for off := 0; off < n; off += c.chunk {
		part := buf[off:min(n, off+c.chunk)]
		if parent != nil {
			if err := c.recvCopy(ctx, parent, tag, part); err != nil {
				err = c.fail(ctx, name, parent, err)
				c.waitAll(children, prev != nil)
				return err
			}
		}
		if prev != nil {
			if err := c.waitChildren(ctx, name, children); err != nil {
				return err
			}
		}
		for _, ch := range children {
			c.startSend(ctx, ch, tag, part)
		}
		prev = part
	}
	return c.waitChildren(ctx, name, children)
}

// waitChildren waits for the outstanding send to each child and reports the
// first failure (after waiting for all of them).
func (c *Communicator) waitChildren(ctx context.Context, name string, children []*peer) error {
	var first error
	for _, ch := range children {
		if err := c.waitSend(ch); err != nil && first == nil {
			first = c.fail(ctx, name, ch, c.explainSendError(ch, err))
		}
	}
	return first
}

// waitAll drains outstanding sends after a failure.
func (c *Communicator) waitAll(children []*peer, outstanding bool) {
	if !outstanding {
		return
	}
	for _, ch := range children {
		_ = c.waitSend(ch)
	}
}
