package ascend

// Recursive doubling AllReduce, the small-message algorithm of MPICH and
// Open MPI: in step m = 1, 2, 4, …, p'/2 every active rank exchanges its
// whole partial result with virtual rank v^m and folds the partner's into
// it, so after log2 p' steps every rank holds the full reduction.
//
// Cost for p ranks and n bytes (α, β, γ as in ring.go), p' = 2^⌊log2 p⌋,
// L = log2 p':
//
//	AllReduce   L·α + L·n·β + L·n·γ
//
// plus, when p is not a power of two, the fold of halving_doubling.go
// (+2α + 2n·β + n·γ). Half the steps of halving-doubling and a third of
// the tree's on two ranks, at L times the bytes: it wins while α
// dominates, i.e. small messages.
//
// Every rank computes the same value bit for bit: in each step both
// partners fold the same two partial results, and float addition (like
// max and min) is commutative, so x+y and y+x agree exactly.

import "context"

type rdAlgorithm struct{}

func (rdAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	if coll != CollAllReduce {
		return 0, false
	}
	pp := pow2floor(p)
	L := float64(log2ceil(pp))
	if p == 2 { // two ranks exchange once
		m = m.pair()
	}
	t := m.busy(L, L*n, L*n)
	if p != pp {
		t += 2*m.a + 2*n*m.b + n*m.g
	}
	return t, true
}

// rdAllReduce stores the reduction of every rank's src into dst (dst may
// be src). The partial result alternates between dst and the workspace,
// because a send reads one buffer while the receive folds into the other.
func (c *Communicator) rdAllReduce(ctx context.Context, tag uint32, src, dst []float32, op Op) error {
	const name = "allreduce"
	l := c.hdLayout()
	r := c.rank
	if l.v < 0 { // sits out: hand over the input, get the result
		partner := c.peers[r+1]
		if err := c.sendTo(ctx, name, tag, partner, src); err != nil {
			return err
		}
		return c.recvFrom(ctx, name, tag, partner, dst, nil, Sum, false)
	}
	cur, spare := src, dst
	if same(src, dst) {
		spare = c.workFor(len(dst))
	}
	if l.folded(r) {
		if err := c.recvFrom(ctx, name, tag, c.peers[r-1], spare, cur, op, true); err != nil {
			return err
		}
		cur, spare = spare, c.spareAfter(cur, src, dst)
	}
	for m := 1; m < l.pp; m <<= 1 {
		partner := c.peers[l.orig(l.v^m)]
		c.startSend(ctx, partner, tag, cur)
		// A send the transport took whole in startSend (a socket or ring
		// buffer had room) no longer reads cur: fold into it in place,
		// unless it is the caller's input. In place on two ranks this
		// saves the workspace's final copy into dst.
		into := spare
		if partner.inline && (!same(cur, src) || same(src, dst)) {
			into = cur
		}
		if err := c.recv(ctx, partner, tag, into, cur, op, true); err != nil {
			return c.failRecv(ctx, name, partner, err)
		}
		if err := c.finishSend(ctx, name, partner); err != nil {
			return err
		}
		if !same(into, cur) {
			cur, spare = spare, c.spareAfter(cur, src, dst)
		}
	}
	if !same(cur, dst) {
		copy(dst, cur)
	}
	if op == Avg {
		divide(dst, c.size)
	}
	if l.folded(r) {
		return c.sendTo(ctx, name, tag, c.peers[r-1], dst)
	}
	return nil
}

// spareAfter returns the buffer the next step folds into once old (the
// partial result just sent) is no longer needed: old itself, unless old is
// the caller's input src, which is never written (then the workspace).
func (c *Communicator) spareAfter(old, src, dst []float32) []float32 {
	if same(old, src) && !same(src, dst) {
		return c.workFor(len(dst))
	}
	return old
}
