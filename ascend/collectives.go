package ascend

// The public collectives: argument checks, sequencing and algorithm
// dispatch. The algorithms live one per file (ring.go, halving_doubling.go,
// tree.go, alltoall_pairwise.go, barrier_dissemination.go).

import (
	"context"
	"unsafe"
)

// overlap reports whether a and b share memory without being the same
// slice start (partial aliasing, which no collective supports).
func overlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if pa == pb {
		return false
	}
	return pa < pb+4*uintptr(len(b)) && pb < pa+4*uintptr(len(a))
}

func same(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// AllReduce reduces buf element-wise with op across all ranks, in place.
// Every rank must pass a buffer of the same length and the same op. When
// it fails, buf's contents are unspecified: algorithms fold the peers'
// data into it as it arrives.
func (c *Communicator) AllReduce(ctx context.Context, buf []float32, op Op) error {
	return c.AllReduceInto(ctx, buf, buf, op)
}

// AllReduceInto stores the element-wise reduction of every rank's src into
// dst, leaving src untouched. dst and src must have the same length and
// either be the same slice (then it is AllReduce) or not overlap. When it
// fails, dst's contents are unspecified (src is still untouched, unless it
// is dst).
func (c *Communicator) AllReduceInto(ctx context.Context, dst, src []float32, op Op) error {
	if !op.valid() {
		return errorf(ErrInvalid, "allreduce: unknown op %d", uint8(op))
	}
	if len(dst) != len(src) || overlap(dst, src) {
		return errorf(ErrInvalid, "allreduce: dst (%d) and src (%d) must have equal lengths and not overlap", len(dst), len(src))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "allreduce")
	if err != nil {
		return err
	}
	defer c.end()
	if c.size == 1 || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	if a, ok := c.directFor(CollAllReduce, dst, src); ok {
		return c.directAllReduce(ctx, a, dst, src, op)
	}
	c.postLinks()
	algo := c.choose(CollAllReduce, 4*len(src))
	tag := makeTag(seq, algo, CollAllReduce, int(op))
	switch algo {
	case AlgoHD:
		return c.hdAllReduce(ctx, tag, src, dst, op)
	case AlgoTree:
		return c.treeAllReduce(ctx, tag, src, dst, op)
	case AlgoRD:
		return c.rdAllReduce(ctx, tag, src, dst, op)
	case AlgoHier:
		return c.hierAllReduce(ctx, tag, src, dst, op)
	}
	return c.ringAllReduce(ctx, tag, src, dst, op)
}

// ReduceScatter reduces buf element-wise across all ranks and leaves this
// rank's share of the result in place: buf holds Size() segments of
// len(buf)/Size() elements and, on return, segment Rank() (that is
// buf[Rank()*n : (Rank()+1)*n]) holds the reduction of everyone's segment
// Rank(); the rest of buf holds partial results. len(buf) must be a
// multiple of Size() and equal on all ranks.
func (c *Communicator) ReduceScatter(ctx context.Context, buf []float32, op Op) error {
	if len(buf)%c.size != 0 {
		return errorf(ErrInvalid, "reducescatter: length %d is not a multiple of the world size %d", len(buf), c.size)
	}
	n := len(buf) / c.size
	return c.reduceScatter(ctx, buf[c.rank*n:(c.rank+1)*n], buf, buf, op)
}

// ReduceScatterInto reduces src (Size() segments of len(dst) elements)
// element-wise across all ranks and stores segment Rank() of the result in
// dst. src is left untouched; dst must not overlap src unless it is
// exactly segment Rank() of src.
func (c *Communicator) ReduceScatterInto(ctx context.Context, dst, src []float32, op Op) error {
	if len(src) != c.size*len(dst) {
		return errorf(ErrInvalid, "reducescatter: src has %d elements, want Size()·len(dst) = %d", len(src), c.size*len(dst))
	}
	if n := len(dst); overlap(dst, src) && !same(dst, src[c.rank*n:(c.rank+1)*n]) {
		return errorf(ErrInvalid, "reducescatter: dst overlaps src")
	}
	return c.reduceScatter(ctx, dst, src, nil, op)
}

// reduceScatter runs over src with work as scratch (nil: the reused
// workspace) and leaves the result in dst.
func (c *Communicator) reduceScatter(ctx context.Context, dst, src, work []float32, op Op) error {
	if !op.valid() {
		return errorf(ErrInvalid, "reducescatter: unknown op %d", uint8(op))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "reducescatter")
	if err != nil {
		return err
	}
	defer c.end()
	if c.size == 1 || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	if a, ok := c.directFor(CollReduceScatter, nil, src); ok {
		return c.directReduceScatter(ctx, a, dst, src, op)
	}
	c.postLinks()
	if work == nil {
		work = c.workFor(len(src))
	}
	offs := equalOffsets(c.offs, len(src))
	algo := c.choose(CollReduceScatter, 4*len(src))
	tag := makeTag(seq, algo, CollReduceScatter, int(op))
	r := c.rank
	if algo == AlgoHD {
		err = c.hdReduceScatter(ctx, tag, src, work, offs, op)
	} else {
		if err = c.ringReduceScatter(ctx, "reducescatter", tag, c.ring(), src, work, offs, op); err == nil && op == Avg {
			divide(work[offs[r]:offs[r+1]], c.size)
		}
	}
	if err != nil {
		return err
	}
	copy(dst, work[offs[r]:offs[r+1]])
	return nil
}

// AllGather gathers every rank's segment into buf, in place: buf holds
// Size() segments of len(buf)/Size() elements, this rank's contribution
// in segment Rank(); on return every segment holds its rank's. len(buf)
// must be a multiple of Size() and equal on all ranks.
func (c *Communicator) AllGather(ctx context.Context, buf []float32) error {
	if len(buf)%c.size != 0 {
		return errorf(ErrInvalid, "allgather: length %d is not a multiple of the world size %d", len(buf), c.size)
	}
	n := len(buf) / c.size
	return c.allGather(ctx, buf, buf[c.rank*n:(c.rank+1)*n], nil)
}

// AllGatherInto gathers every rank's src into dst, rank i's at
// dst[i*len(src):(i+1)*len(src)]. len(dst) must be Size()·len(src); src
// may be exactly this rank's segment of dst (then it is AllGather) but
// must not overlap dst otherwise.
func (c *Communicator) AllGatherInto(ctx context.Context, dst, src []float32) error {
	if len(dst) != c.size*len(src) {
		return errorf(ErrInvalid, "allgather: dst has %d elements, want Size()·len(src) = %d", len(dst), c.size*len(src))
	}
	return c.allGather(ctx, dst, src, nil)
}

// AllGatherV gathers segments of uneven lengths: rank i contributes
// counts[i] elements (its src), stored at offset counts[0]+…+counts[i-1]
// of dst. counts must be equal on all ranks, len(src) == counts[Rank()]
// and len(dst) == the sum of counts; src may be exactly this rank's
// segment of dst (in place).
func (c *Communicator) AllGatherV(ctx context.Context, dst, src []float32, counts []int) error {
	if len(counts) != c.size {
		return errorf(ErrInvalid, "allgatherv: %d counts for world size %d", len(counts), c.size)
	}
	total := 0
	for i, n := range counts {
		if n < 0 {
			return errorf(ErrInvalid, "allgatherv: counts[%d] = %d", i, n)
		}
		total += n
	}
	if len(src) != counts[c.rank] || len(dst) != total {
		return errorf(ErrInvalid, "allgatherv: len(src) = %d, len(dst) = %d, want counts[%d] = %d and sum(counts) = %d",
			len(src), len(dst), c.rank, counts[c.rank], total)
	}
	return c.allGather(ctx, dst, src, counts)
}

// allGather: counts nil means equal segments.
func (c *Communicator) allGather(ctx context.Context, dst, src []float32, counts []int) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	var offs []int
	if counts == nil {
		offs = equalOffsets(c.offs, len(dst))
	} else {
		offs = countOffsets(c.offs, counts)
	}
	own := dst[offs[c.rank]:offs[c.rank+1]]
	if overlap(src, dst) && !same(src, own) {
		return errorf(ErrInvalid, "allgather: src overlaps dst other than as this rank's segment")
	}
	seq, err := c.begin(ctx, "allgather")
	if err != nil {
		return err
	}
	defer c.end()
	copy(own, src)
	if c.size == 1 || len(dst) == 0 {
		return nil
	}
	if a, ok := c.directFor(CollAllGather, dst, src); ok {
		return c.directAllGather(ctx, a, dst, offs)
	}
	c.postLinks()
	algo := c.choose(CollAllGather, 4*len(dst))
	tag := makeTag(seq, algo, CollAllGather, 0)
	if algo == AlgoHD {
		return c.hdAllGather(ctx, tag, dst, offs)
	}
	return c.ringAllGather(ctx, "allgather", tag, c.ring(), dst, offs)
}

// Broadcast copies root's buf into every other rank's buf. All ranks must
// pass the same root and buffers of the same length.
func (c *Communicator) Broadcast(ctx context.Context, buf []float32, root int) error {
	return c.broadcast(ctx, buf, buf, root)
}

// BroadcastInto copies root's src into dst on every rank (the root's dst
// too, unless it is nil). src is only read on the root and may be nil
// elsewhere; dst must not overlap src unless it is the same slice.
func (c *Communicator) BroadcastInto(ctx context.Context, dst, src []float32, root int) error {
	if c.rank == root {
		if dst != nil && (len(dst) != len(src) || overlap(dst, src)) {
			return errorf(ErrInvalid, "broadcast: dst (%d) and src (%d) must have equal lengths and not overlap", len(dst), len(src))
		}
		return c.broadcast(ctx, dst, src, root)
	}
	return c.broadcast(ctx, dst, dst, root)
}

// broadcast sends src from the root (copying it to dst there) and
// receives into dst elsewhere.
func (c *Communicator) broadcast(ctx context.Context, dst, src []float32, root int) error {
	if root < 0 || root >= c.size {
		return errorf(ErrInvalid, "broadcast: root %d out of range [0,%d)", root, c.size)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "broadcast")
	if err != nil {
		return err
	}
	defer c.end()
	buf := dst
	var copyTo []float32 // the root's own result, out of place
	if c.rank == root {
		buf = src
		if dst != nil && !same(dst, src) {
			copyTo = dst
		}
	}
	if c.size == 1 || len(buf) == 0 {
		copy(copyTo, buf)
		return nil
	}
	if a, ok := c.directFor(CollBroadcast, nil, buf); ok {
		err = c.directBroadcast(ctx, a, buf, root)
		if err == nil {
			copy(copyTo, buf)
		}
		return err
	}
	c.postLinks()
	algo := c.choose(CollBroadcast, 4*len(buf))
	tag := makeTag(seq, algo, CollBroadcast, root)
	var parent *peer
	var children []*peer
	if algo == AlgoRing {
		parent, children = c.chain(root)
	} else {
		parent, children = c.binomial(root, false)
	}
	return c.bcastPipelined(ctx, "broadcast", tag, buf, parent, children, copyTo)
}

// Reduce reduces buf element-wise with op across all ranks into root's
// buf. The other ranks' buffers are left untouched. All ranks must pass
// the same op, root and buffer length.
func (c *Communicator) Reduce(ctx context.Context, buf []float32, op Op, root int) error {
	return c.reduceTo(ctx, buf, buf, op, root)
}

// ReduceInto reduces every rank's src into root's dst; src is left
// untouched everywhere and dst is only used on the root (it may be nil
// elsewhere). On the root dst must have len(src) elements and not overlap
// src unless it is the same slice.
func (c *Communicator) ReduceInto(ctx context.Context, dst, src []float32, op Op, root int) error {
	if c.rank == root && (len(dst) != len(src) || overlap(dst, src)) {
		return errorf(ErrInvalid, "reduce: dst (%d) and src (%d) must have equal lengths and not overlap", len(dst), len(src))
	}
	return c.reduceTo(ctx, dst, src, op, root)
}

func (c *Communicator) reduceTo(ctx context.Context, dst, src []float32, op Op, root int) error {
	if !op.valid() {
		return errorf(ErrInvalid, "reduce: unknown op %d", uint8(op))
	}
	if root < 0 || root >= c.size {
		return errorf(ErrInvalid, "reduce: root %d out of range [0,%d)", root, c.size)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "reduce")
	if err != nil {
		return err
	}
	defer c.end()
	if c.size == 1 || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	algo := c.choose(CollReduce, 4*len(src))
	tag := makeTag(seq, algo, CollReduce, root<<2|int(op))
	var parent *peer
	var children []*peer
	if algo == AlgoRing {
		parent, children = c.chain(root)
	} else {
		parent, children = c.binomial(root, true)
	}
	out := dst
	if c.rank != root {
		out = nil
	}
	return c.reducePipelined(ctx, "reduce", tag, src, out, parent, children, op)
}
