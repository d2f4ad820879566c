package ascend

// Ring algorithms: rank r sends to r+1 and receives from r-1.
//
// Cost for p ranks and n bytes (nccl-tests size; α latency per step, β
// seconds per byte on a link, γ seconds per reduced byte, C = ChunkBytes,
// k = ⌈n/C⌉ chunks, c = min(n, C); see CostModel for α_all and β_all):
//
//	AllReduce      2(p-1)·α + 2(p-1)/p·n·β + (p-1)/p·n·γ    (RS then AG)
//	ReduceScatter   (p-1)·α +  (p-1)/p·n·(β+γ)
//	AllGather       (p-1)·α +  (p-1)/p·n·β
//	Broadcast      (p-1 + k-1)·(α + c·β)                   (pipelined chain)
//	Reduce         (p-1 + k-1)·(α + c·(β+γ))               (pipelined chain)
//
// Every rank works in every step of the first three, so their α and β are
// the loaded α_all and β_all; the chain's share of work per rank is
// (p-1)/p·k messages and (p-1)/p·n bytes.
//
// AllReduce, ReduceScatter and AllGather are bandwidth-optimal, with a
// latency term linear in p; the chain broadcast and reduce approach n·β
// for large n at any p, at the price of p-1 pipeline fill steps. Each step
// sends one segment to the right neighbour from the writer goroutine while
// it receives the next from the left neighbour; received frames (≤
// ChunkBytes) are reduced while the transport receives the next one. The
// buffer is split into p contiguous segments (given by offsets, so
// AllGatherV's uneven counts work the same way; segments may be empty).
// Out-of-place calls read the input (src) where a segment is touched for
// the first time and write partial results only to the output (work), so
// they cost no extra copy.

import "context"

type ringAlgorithm struct{}

func (ringAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	P := float64(p)
	f := (P - 1) / P
	k, c := chunks(n, m.seg)
	switch coll {
	case CollAllReduce:
		return m.busy(2*(P-1), 2*f*n, f*n), true
	case CollReduceScatter:
		return m.busy(P-1, f*n, f*n), true
	case CollAllGather:
		return m.busy(P-1, f*n, 0), true
	case CollBroadcast:
		steps := P - 1 + k - 1
		return m.split(steps, steps*c, 0, f*k, f*n, 0), true
	case CollReduce:
		steps := P - 1 + k - 1
		return m.split(steps, steps*c, steps*c, f*k, f*n, f*n), true
	}
	return 0, false
}

// chunks is the number of pipeline chunks of n bytes and the chunk size.
func chunks(n, seg float64) (k, c float64) {
	if n <= seg {
		return 1, n
	}
	k = float64(int64((n + seg - 1) / seg))
	return k, seg
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

// equalOffsets fills offs (len p+1) with the boundaries of p near-equal
// segments of n elements, as segment splits them.
func equalOffsets(offs []int, n int) []int {
	p := len(offs) - 1
	q, r := n/p, n%p
	for i := range p + 1 {
		offs[i] = i*q + min(i, r)
	}
	return offs
}

// countOffsets fills offs (len(counts)+1) with the prefix sums of counts.
func countOffsets(offs []int, counts []int) []int {
	offs[0] = 0
	for i, n := range counts {
		offs[i+1] = offs[i] + n
	}
	return offs
}

// ringOf is a ring over members (ranks; nil: every rank in order), in
// which this rank has index r of p.
type ringOf struct {
	p, r        int
	right, left *peer
}

// ring is the ring of all ranks.
func (c *Communicator) ring() ringOf {
	p, r := c.size, c.rank
	return ringOf{p, r, c.peers[mod(r+1, p)], c.peers[mod(r-1, p)]}
}

// ringOver is the ring of members, this rank being members[r].
func (c *Communicator) ringOver(members []int, r int) ringOf {
	p := len(members)
	return ringOf{p, r, c.peers[members[mod(r+1, p)]], c.peers[members[mod(r-1, p)]]}
}

// ringReduceScatter reduces src across the ring and leaves segment g.r of
// work (offsets offs, g.p segments) fully reduced; other segments of work
// hold partial results. work may be src (in place).
func (c *Communicator) ringReduceScatter(ctx context.Context, name string, tag uint32, g ringOf, src, work []float32, offs []int, op Op) error {
	p, r := g.p, g.r
	// Step s sends segment r-1-s (fresh input at s = 0, the partial
	// received at step s-1 after) and folds segment r-2-s, which no step
	// has touched yet, from src into work. The last step folds segment r.
	for s := 0; s < p-1; s++ {
		si, ri := mod(r-1-s, p), mod(r-2-s, p)
		from := work
		if s == 0 {
			from = src
		}
		lo, hi := offs[ri], offs[ri+1]
		if err := c.exchange(ctx, name, tag, g.right, from[offs[si]:offs[si+1]], g.left, work[lo:hi], src[lo:hi], op, true); err != nil {
			return err
		}
	}
	return nil
}

// ringAllGather circulates the segments of work (offsets offs) so that
// every rank of the ring ends with all of them; segment g.r must hold this
// rank's part.
func (c *Communicator) ringAllGather(ctx context.Context, name string, tag uint32, g ringOf, work []float32, offs []int) error {
	p, r := g.p, g.r
	for s := 0; s < p-1; s++ {
		si, ri := mod(r-s, p), mod(r-s-1, p)
		if err := c.exchange(ctx, name, tag, g.right, work[offs[si]:offs[si+1]], g.left, work[offs[ri]:offs[ri+1]], nil, Sum, false); err != nil {
			return err
		}
	}
	return nil
}

// ringAllReduce: reduce-scatter, then allgather of the owned segments.
func (c *Communicator) ringAllReduce(ctx context.Context, tag uint32, src, work []float32, op Op) error {
	const name = "allreduce"
	offs := equalOffsets(c.offs, len(work))
	g := c.ring()
	if err := c.ringReduceScatter(ctx, name, tag, g, src, work, offs, op); err != nil {
		return err
	}
	if op == Avg {
		divide(work[offs[c.rank]:offs[c.rank+1]], c.size)
	}
	return c.ringAllGather(ctx, name, tag, g, work, offs)
}

// chain is the pipeline topology of the ring broadcast and reduce: rank
// root+i receives from root+i-1 (its parent) and feeds root+i+1.
func (c *Communicator) chain(root int) (parent *peer, children []*peer) {
	p := c.size
	vr := mod(c.rank-root, p)
	if vr > 0 {
		parent = c.peers[mod(c.rank-1, p)]
	}
	children = c.children[:0]
	if vr < p-1 {
		children = append(children, c.peers[mod(c.rank+1, p)])
	}
	c.children = children
	return parent, children
}
