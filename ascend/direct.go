package ascend

// Direct AllReduce over shared buffers (shared.go): every rank of the
// session is on this host and passes slices of shared buffers, so each
// reads the others' data where it lies. With p ranks and n elements split
// into the ring's p segments:
//
//	post      publish (collective, count, op, where src and dst are)
//	reduce    dst[segment r] = fold of src_0..src_(p-1)[segment r], read
//	          straight from the peers' buffers, block by block (128 KiB),
//	          publishing each block
//	gather    dst[segment j] = dst_j[segment j] for each peer j, block by
//	          block as j publishes them (while they are still in cache)
//	done      publish "done"; return once every peer is done (nobody reads
//	          this rank's buffers any more)
//
// Each rank reads n + n(p-1)/p elements and writes n: about one copy of
// the vector, where a ring over links copies it twice (into the link, out
// of it) besides reducing. Two ranks reducing 16 KiB or more skip the
// gather: each stores its folded half into both ranks' dst at once (a
// push, see pushMinBytes), reading n elements and writing n; so do more
// ranks when every one of them is in place (each copies its folded
// segment into every buffer).
//
// Segment j is folded in the order the ring reduce-scatter folds it, so
// the result is bit-identical to the ring algorithm's (and equal on every
// rank): direct also stands in for a forced ring (training forces the ring
// so that a run's bits never depend on the algorithm). Cost ≈ 3 one-way
// latencies (α) + n·(1 + (p−1)/p)·4 bytes of memory traffic per rank. The
// cost model does not price it: it runs whenever the buffers allow and no
// algorithm other than the ring is forced (ASCEND_ALGO=hd, say, uses the
// links).
//
// ReduceScatter, AllGather(V) and Broadcast go direct the same way: post,
// then each rank folds its own segment out of the peers' src
// (ReduceScatter, in the ring's order as above), copies every peer's src
// into its dst (AllGather) or copies the root's src (Broadcast), then done.
// Each rank reads what it needs once, where a ring over links copies it
// into the link and out again.

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// Every rank folds only its segment, even for small vectors: folding the
// whole vector on every rank (no gather, one synchronisation less) looked
// 2-3x faster in the benchmark, whose out-of-place input stays the same
// from call to call, but peers then read each other's whole input, and an
// input written just before the call — a gradient, or the benchmark in
// place — must be pulled across cores line by line: 2 ranks in place,
// 4 KiB 1.5-1.6 us whole vs 1.1-1.2 by segments, 64 KiB 14 vs 10-11,
// 3 ranks 256 KiB 95-106 vs 34-67.

// directBlock is the granularity (elements) at which a rank publishes its
// part: 128 KiB, so a block is copied while it is still in cache.
const directBlock = 32 << 10

// directNT is the vector size (bytes) from which out-of-place Sum folds
// and copies store around the caches: the data will not be read again
// before it leaves them, and skipping the read-for-ownership of dst saves
// a third of the memory traffic (2 ranks, 16 MiB: 8.0–8.5 GB/s busbw vs
// 5.0–6.6; 64 MiB 7.1–7.3 vs 5.1). In place, dst is src, already in cache
// from the fold's read, and ordinary stores are faster. (Two ranks push
// instead from pushMinBytes on, see directAllReduce.)
const directNT = 8 << 20

// Two ranks reducing pushMinBytes or more push: each folds its half of
// the vector once and stores the results into both ranks' dst, its own with
// ordinary stores (kept in its cache, where its own reader will look) and,
// out of place, the peer's around the caches (the peer finds them in
// memory instead of pulling each line out of this core's cache); in place
// the peer's dst is the peer's src, whose lines this rank has just read,
// and ordinary stores into them are cheaper than evicting them first. Up
// to pushKeepMaxBytes; above, where the vector does not fit in the caches
// anyway, Sum stores both around them. Nobody waits for anybody's blocks, and no freshly written line
// moves between cores during the call. Going by blocks instead (fold a
// block, publish it, copy the peer's blocks as they come) reads 1.5× the
// bytes and moves every one of the peer's results between the cores
// inside the call; on this VM that costs most when the two vCPUs sit
// apart (README, "Two ranks on shared buffers push their sums"). Sum and
// Avg (what training asks for) run one fused kernel (addFloatsKeep, Avg
// as (a+b)·½); Max and Min fold a block, then copy it. Above
// pushKeepMaxBytes Sum stores around the caches into both dst
// (addFloatsNT2) and the others go by blocks.
//
// Sum, measured with 2 ranks, -R 1, against the previous code (blocks, or the
// fold stored around the caches into both dst, chosen by rank 0 from their
// recent rates), four alternations, medians of busbw out of place / in
// place (GB/s): 16 KiB 16.9/8.4 against 13.0/6.3, 64 KiB 23.0/16.1 against
// 11.5/7.5, 256 KiB 26.6/20.8 against 13.2/8.3, 1 MiB 25.9/22.4 against
// 25.3/10.6, 4 MiB 26.5/24.9 against 23.3/12.8, 16 MiB 17.2/23.0 against
// 13.4/12.2, 64 MiB 12.6/11.9 against 12.6/12.0. The bare loop flatters a
// push (its results wait in memory or in the pusher's cache until read,
// after the call), so the same runs with --touch (each input rewritten
// before and each output read after the call, in the time): 64 KiB
// 6.5/6.8 against 5.7/5.9, 256 KiB 7.7/7.4 against 7.1/6.1, 1 MiB 4.8/4.5
// against 4.6/4.3, 4 MiB 4.6/4.6 against 4.4/4.2, 16 KiB and 16–64 MiB
// within noise. Keeping both results in the pusher's cache instead ran
// the bare loop 1.6–2× faster still at 1–4 MiB but gained nothing with
// --touch: the peer then pulls its whole half out of the other core.
// Avg, three alternations against the blocks path (whose division ran
// one scalar division per element then; divide is vectorised now), busbw
// out of place / in place: 64 KiB 20.9–22.8/12.0–16.3 against 2.5–5.4/
// 1.5–4.3, 1 MiB 24.1–27.1/15.0–21.5 against 2.6–6.9/1.7–5.2, and with
// --touch 5.6–6.2/5.0–6.2 against 3.2–3.7/3.5–3.7 and 4.8–7.3/4.6–7.8
// against 3.0–3.2/2.5–2.6. In place, ordinary stores into the peer's dst
// against stores around the caches, Avg, three alternations (µs): 64 KiB
// 1.19–1.29 against 3.90–5.40, 256 KiB 2.98–3.24 against 12.2–12.3, with
// --touch 4.12–4.22 against 9.52–9.95 and 15.6–18.6 against 34.9–37.2,
// 1–16 MiB within noise; out of place ordinary stores into the peer's dst
// ran 15–20 % slower with --touch at 16–256 KiB.
const (
	pushMinBytes     = 16 << 10
	pushKeepMaxBytes = 32 << 20
	// pushBlock (elements) is how much of a push that is not one
	// fused kernel (Max and Min of two ranks, every op of more than
	// two in place) is folded before it is copied: 16 KiB, in L1 still.
	pushBlock = 4 << 10
)

// directSpin is how long a rank polls a peer's word before it sleeps,
// while the host has a core per rank (a futex wake-up costs several
// microseconds on a VM); with more ranks than cores it yields instead.
const directSpin = 50 * time.Microsecond

// directGoschedSpins is how many polls of a spin yield only to this
// process's goroutines; the rest of the spin yields the core to other
// processes (sched_yield). A core per rank is what the scheduler starts
// with, not what it keeps: when it runs both ranks on one core (a wake-up
// placed next to the waker, a busy sibling vCPU), a rank that spins without
// giving the core up holds off the very peer it waits for until its spin
// ends. Measured with 2 ranks, -R 1, both pinned to one core while each
// believes it has its own: 64 KiB 182 → 24 µs, 1 MiB 413 → 106 µs, 4 MiB
// about 3× faster; unpinned, eight alternating pairs gave the same medians
// at 1 and 4 MiB (25.4 and 25.6 GB/s at 1 MiB; 22.4 and 22.6 at 4 MiB).
// Yielding from the first poll instead cost 0.3–0.5 µs on 4–64 KiB.
const directGoschedSpins = 64

// directArgs says where this rank's src and dst are: shared buffers and
// element offsets in them.
type directArgs struct {
	src, dst       *SharedBuffer
	srcOff, dstOff int
}

// directFor reports whether collective coll on dst and src runs direct:
// every rank on this host, src and dst (unless empty) in shared buffers, and
// no algorithm but the ring forced (direct has the ring's bits). Every
// rank must give the same answer — pass shared buffers on every rank or on
// none; a rank on the links while others are not is detected
// (ErrMismatch) by the others.
func (c *Communicator) directFor(coll Collective, dst, src []float32) (directArgs, bool) {
	if !c.sharedAll() {
		return directArgs{}, false
	}
	switch c.force[coll] {
	case AlgoAuto, AlgoDirect, AlgoRing: // direct has the ring's bits
	default:
		return directArgs{}, false
	}
	var a directArgs
	if len(src) > 0 { // an empty src (a rank's share of an AllGatherV) is nowhere
		if a.src, a.srcOff = c.win.find(src); a.src == nil {
			return directArgs{}, false
		}
	}
	if len(dst) > 0 {
		if a.dst, a.dstOff = c.win.find(dst); a.dst == nil {
			return directArgs{}, false
		}
	}
	return a, true
}

// postLinks tells ranks that may go direct that this one uses the links
// for this collective, so they fail with ErrMismatch instead of waiting.
func (c *Communicator) postLinks() {
	if c.sharedAll() {
		w := c.win
		w.next++
		atomic.StoreUint32(w.u32(w.ctl, ctlMode), 0)
		w.publish(ctlPosted, w.next)
	}
}

// directAllReduce runs AllReduceInto(dst, src) with the direct
// algorithm; a says where src and dst are.
func (c *Communicator) directAllReduce(ctx context.Context, a directArgs, dst, src []float32, op Op) error {
	const name = "allreduce"
	w := c.win
	n := len(src)
	offs := equalOffsets(c.offs, n) // the ring's segments: the order of folds
	d := OpDeadline(ctx, c.opTimeout)
	v := c.directPost(CollAllReduce, uint64(n), uint32(op), a)
	// The ranks' src and dst (this rank's own for itself).
	srcs, dsts := w.srcs, w.dsts
	defer clear(srcs)
	defer clear(dsts)
	srcs[c.rank], dsts[c.rank] = src, dst
	if err := c.directPeers(ctx, CollAllReduce, v, uint64(n), uint32(op), d, func(int) (int, int) { return n, n }); err != nil {
		return err
	}
	lo, hi := offs[c.rank], offs[c.rank+1]
	if c.size == 2 && 4*n >= pushMinBytes && (op == Sum || 4*n <= pushKeepMaxBytes) {
		// Push (see pushMinBytes): in place too, each rank reads and
		// writes only its own segment of either buffer, every element
		// loaded before it is stored. Nobody waits for a block, so none
		// is published; done orders the stores (fenced) before the peer
		// returns. Both ranks take the same branch (same n and op) and
		// the Sum kernels refuse alike on both (no AVX2; NT2: the two dst
		// aligned differently, the same pair on either rank), so both
		// then go by blocks.
		j := 1 - c.rank
		own, far, theirs, mine := dst[lo:hi], dsts[j][lo:hi], srcs[j][lo:hi], src[lo:hi]
		// In place, far is the peer's src, whose lines this rank has
		// just read: ordinary stores find them in its cache. Out of
		// place they go around the caches (see pushMinBytes). Ranks
		// may differ here (one in place, one not): the kernels never
		// refuse where the other's does not.
		farNT := !same(dst, src)
		var pushed bool
		switch {
		case op == Sum && 4*n <= pushKeepMaxBytes:
			pushed = addFloatsKeep(own, far, theirs, mine, 1, farNT)
		case op == Avg && 4*n <= pushKeepMaxBytes:
			// (a+b)·½ has the bits of the sum divided by 2 (divide).
			pushed = addFloatsKeep(own, far, theirs, mine, 0.5, farNT)
		case op == Sum:
			pushed = addFloatsNT2(own, far, theirs, mine)
		default:
			// Max, Min: fold a block, copy it to the peer's dst around
			// the caches while it is in L1.
			c.pushBlocks(dst, srcs, dsts, lo, hi, op, true)
			pushed = true
		}
		if pushed {
			return c.directDone(ctx, name, v, d)
		}
	}
	if c.size > 2 && 4*n >= pushMinBytes && inPlace(srcs, dsts) {
		// Every rank in place (each decides so from what all posted,
		// hence alike): more than two ranks push too. Each folds its
		// segment a block at a time, as the blocks path does (same
		// bits), and copies the block into every peer's buffer at once:
		// their lines of this segment were just read here, so ordinary
		// stores find them in this core's cache, and nobody waits for
		// anybody's blocks. No rank but this one reads or writes this
		// segment of any buffer. Measured in place with --op avg, -R 1,
		// against the blocks path (µs, two or three alternations): 3
		// ranks 64 KiB 8.7–9.0 against 21.0–21.2, 1 MiB 91–100 against
		// 208–216, with --touch 14.4–15.1 against 26.0–27.2 and 449–475
		// against 517–527, 16 and 64 MiB with --touch 7.6–7.8 and
		// 29.9–30.8 ms against 9.1–9.2 and 35.0–35.5; 4 ranks 64 KiB
		// 10.3–13.3 against 23.5–25.5, with --touch 16.4–16.5 against
		// 28.1–29.3; the 3-node quickstart 1,642–1,728 steps/s against
		// 1,357–1,646 (four pairs, all won), the same weights.
		c.pushBlocks(dst, srcs, dsts, lo, hi, op, false)
		return c.directDone(ctx, name, v, d)
	}
	nt := 4*n >= directNT && op == Sum && !same(dst, src)
	// Each rank folds its segment in blocks: fold block k, publish it,
	// copy block k of every peer's segment as soon as that peer published
	// it (still in a cache the cores share, rather than in DRAM).
	blocks := (offs[1] - offs[0] + directBlock - 1) / directBlock // segment 0 is the longest
	for k := range blocks {
		if b0 := lo + k*directBlock; b0 < hi {
			b1 := min(b0+directBlock, hi)
			c.directSum(dst[b0:b1], srcs, c.rank, b0, b1, op, same(dst, src), nt)
			w.publish(ctlReduced, uint32(k+1))
		}
		for i := 1; i < c.size; i++ {
			j := (c.rank + i) % c.size
			b0 := offs[j] + k*directBlock
			if b0 >= offs[j+1] {
				continue
			}
			b1 := min(b0+directBlock, offs[j+1])
			// In place, dst here is src, which j reads for block k until
			// it publishes it: copy only then.
			if err := c.directWait(ctx, name, j, ctlReduced, uint32(k+1), d); err != nil {
				return err
			}
			if nt {
				copyNT(dst[b0:b1], dsts[j][b0:b1])
			} else {
				copy(dst[b0:b1], dsts[j][b0:b1])
			}
		}
	}
	return c.directDone(ctx, name, v, d)
}

// pushBlocks folds this rank's segment [lo, hi) of srcs into dst a
// pushBlock at a time, as the blocks path folds it (same bits), and copies
// each block into every peer's dst while it is in L1: around the caches
// with nt, else with ordinary stores.
func (c *Communicator) pushBlocks(dst []float32, srcs, dsts [][]float32, lo, hi int, op Op, nt bool) {
	alias := same(dst, srcs[c.rank])
	for b0 := lo; b0 < hi; b0 += pushBlock {
		b1 := min(b0+pushBlock, hi)
		c.directSum(dst[b0:b1], srcs, c.rank, b0, b1, op, alias, false)
		for i := 1; i < c.size; i++ {
			j := (c.rank + i) % c.size
			if nt {
				copyNT(dsts[j][b0:b1], dst[b0:b1])
			} else {
				copy(dsts[j][b0:b1], dst[b0:b1])
			}
		}
	}
}

// inPlace reports whether every rank's dst is its src.
func inPlace(srcs, dsts [][]float32) bool {
	for j := range srcs {
		if !same(dsts[j], srcs[j]) {
			return false
		}
	}
	return true
}

// directSum stores into out the reduction of srcs[·][b0:b1], part of ring
// segment j, in the order the ring reduce-scatter folds segment j —
// ((x_(j+1) op x_(j+2)) op …) op x_j — so the result has the ring's bits
// (the two-operand fold is commutative, the order of the folds is what
// counts). For Avg it divides as the ring does. With alias, out is
// srcs[j][b0:b1] itself: the partial sums go to scratch until the last
// fold reads x_j.
func (c *Communicator) directSum(out []float32, srcs [][]float32, j, b0, b1 int, op Op, alias, nt bool) {
	p := c.size
	x := func(i int) []float32 { return srcs[(j+i)%p][b0:b1] }
	if p == 2 {
		if nt {
			addFloatsNT(out, x(1), x(0))
		} else {
			reduce3(out, x(1), x(0), op)
		}
	} else {
		acc := out
		if alias {
			acc = c.scratchFor(b1 - b0)
		}
		reduce3(acc, x(1), x(2), op)
		for i := 3; i < p; i++ {
			reduce(acc, x(i), op)
		}
		if nt {
			addFloatsNT(out, acc, x(0))
		} else {
			reduce3(out, acc, x(0), op)
		}
	}
	if op == Avg {
		divide(out, p)
	}
}

// directDone publishes that this rank is done with collective v and waits
// until every peer is: then nobody reads this rank's buffers any more.
func (c *Communicator) directDone(ctx context.Context, name string, v uint32, d time.Time) error {
	w := c.win
	w.publish(ctlDone, v)
	for i := 1; i < c.size; i++ {
		j := (c.rank + i) % c.size
		if err := c.directWait(ctx, name, j, ctlDone, v, d); err != nil {
			return err
		}
	}
	return nil
}

// directPost publishes this rank's part of direct collective coll:
// count elements (its meaning is the collective's, equal on every rank),
// aux (the op, or the root) and where src and dst lie. It returns the
// collective's sequence number.
func (c *Communicator) directPost(coll Collective, count uint64, aux uint32, a directArgs) uint32 {
	w := c.win
	w.next++
	v := w.next
	*w.u64(w.ctl, ctlCount) = count
	*w.u32(w.ctl, ctlOp) = aux
	*w.u32(w.ctl, ctlSrcID), *w.u64(w.ctl, ctlSrcOff) = 0, 0
	*w.u32(w.ctl, ctlDstID), *w.u64(w.ctl, ctlDstOff) = 0, 0
	if a.src != nil {
		*w.u32(w.ctl, ctlSrcID), *w.u64(w.ctl, ctlSrcOff) = a.src.id, uint64(a.srcOff)
	}
	if a.dst != nil {
		*w.u32(w.ctl, ctlDstID), *w.u64(w.ctl, ctlDstOff) = a.dst.id, uint64(a.dstOff)
	}
	atomic.StoreUint32(w.u32(w.ctl, ctlMode), uint32(coll)) // 0: the links
	atomic.StoreUint32(w.u32(w.ctl, ctlReduced), 0)         // no block of collective v yet
	w.publish(ctlPosted, v)
	return v
}

// directPeers waits until every peer has posted collective v and fills
// w.srcs and w.dsts with their src and dst, of the lengths lens gives for
// each rank (a negative dst length: not needed).
func (c *Communicator) directPeers(ctx context.Context, coll Collective, v uint32, count uint64, aux uint32, d time.Time, lens func(j int) (src, dst int)) error {
	w := c.win
	name := coll.String()
	for i := 1; i < c.size; i++ {
		j := (c.rank + i) % c.size
		if err := c.directWait(ctx, name, j, ctlPosted, v, d); err != nil {
			return err
		}
		ns, nd := lens(j)
		s, t, err := c.directPeer(j, coll, count, aux, ns, nd)
		if err != nil {
			return c.abort(&PeerError{Rank: j, Op: name, Err: err})
		}
		w.srcs[j], w.dsts[j] = s, t
	}
	return nil
}

// directPeer checks rank j's posted collective against this rank's (coll,
// count, aux) and returns j's src (srcLen elements) and dst (dstLen; nil
// when dstLen is negative).
func (c *Communicator) directPeer(j int, coll Collective, count uint64, aux uint32, srcLen, dstLen int) (src, dst []float32, err error) {
	w := c.win
	ctl := w.peerCtl[j]
	name := coll.String()
	switch mode := Collective(atomic.LoadUint32(w.u32(ctl, ctlMode))); mode {
	case coll:
	case 0:
		return nil, nil, fmt.Errorf("%w: %s: rank %d uses the links where this rank uses shared buffers (pass shared buffers on every rank or on none)", ErrMismatch, name, j)
	default:
		return nil, nil, fmt.Errorf("%w: %s: rank %d runs %v at this point of the call sequence", ErrMismatch, name, j, mode)
	}
	if pn, pa := *w.u64(ctl, ctlCount), *w.u32(ctl, ctlOp); pn != count || pa != aux {
		what := func(a uint32) string {
			if coll == CollBroadcast {
				return fmt.Sprintf("root %d", a)
			}
			return Op(a).String()
		}
		return nil, nil, fmt.Errorf("%w: %s: rank %d has %d elements with %s, this rank %d with %s", ErrMismatch, name, j, pn, what(pa), count, what(aux))
	}
	view := func(id uint32, off uint64, n int, what string) ([]float32, error) {
		if n == 0 {
			return nil, nil
		}
		b := w.byID(id)
		if b == nil || b.views[j] == nil {
			return nil, fmt.Errorf("%w: %s: rank %d's %s is in shared buffer %d, which this rank does not have", ErrMismatch, name, j, what, id)
		}
		if off > uint64(len(b.views[j])) || uint64(len(b.views[j]))-off < uint64(n) {
			return nil, fmt.Errorf("%w: %s: rank %d's %s (%d elements at %d) lies outside shared buffer %d", ErrProtocol, name, j, what, n, off, id)
		}
		return b.views[j][off : off+uint64(n) : off+uint64(n)], nil
	}
	if src, err = view(*w.u32(ctl, ctlSrcID), *w.u64(ctl, ctlSrcOff), srcLen, "src"); err != nil {
		return nil, nil, err
	}
	if dstLen >= 0 {
		if dst, err = view(*w.u32(ctl, ctlDstID), *w.u64(ctl, ctlDstOff), dstLen, "dst"); err != nil {
			return nil, nil, err
		}
	}
	return src, dst, nil
}

// directReduceScatter runs ReduceScatterInto(dst, src) direct: this rank
// folds its segment of every rank's src (in the ring's order, see
// directSum) into dst, which may be exactly that segment of src.
func (c *Communicator) directReduceScatter(ctx context.Context, a directArgs, dst, src []float32, op Op) error {
	w := c.win
	n := len(src)
	offs := equalOffsets(c.offs, n)
	d := OpDeadline(ctx, c.opTimeout)
	v := c.directPost(CollReduceScatter, uint64(n), uint32(op), a)
	defer clear(w.srcs)
	w.srcs[c.rank] = src
	if err := c.directPeers(ctx, CollReduceScatter, v, uint64(n), uint32(op), d, func(int) (int, int) { return n, -1 }); err != nil {
		return err
	}
	lo, hi := offs[c.rank], offs[c.rank+1]
	alias := same(dst, src[lo:hi])
	nt := 4*n >= directNT && op == Sum && !alias
	for b0 := lo; b0 < hi; b0 += directBlock {
		b1 := min(b0+directBlock, hi)
		c.directSum(dst[b0-lo:b1-lo], w.srcs, c.rank, b0, b1, op, alias, nt)
	}
	return c.directDone(ctx, "reducescatter", v, d)
}

// directAllGather runs the gather of allGather direct: this rank's
// segment of dst is already in place; it copies every peer's src (offs
// gives the segments) into dst.
func (c *Communicator) directAllGather(ctx context.Context, a directArgs, dst []float32, offs []int) error {
	w := c.win
	d := OpDeadline(ctx, c.opTimeout)
	v := c.directPost(CollAllGather, uint64(len(dst)), 0, a)
	defer clear(w.srcs)
	if err := c.directPeers(ctx, CollAllGather, v, uint64(len(dst)), 0, d, func(j int) (int, int) { return offs[j+1] - offs[j], -1 }); err != nil {
		return err
	}
	for i := 1; i < c.size; i++ {
		j := (c.rank + i) % c.size
		copy(dst[offs[j]:offs[j+1]], w.srcs[j])
	}
	return c.directDone(ctx, "allgather", v, d)
}

// directBroadcast runs broadcast direct: every rank but the root copies
// the root's src into buf (buf is the src on the root).
func (c *Communicator) directBroadcast(ctx context.Context, a directArgs, buf []float32, root int) error {
	w := c.win
	n := len(buf)
	d := OpDeadline(ctx, c.opTimeout)
	v := c.directPost(CollBroadcast, uint64(n), uint32(root), a)
	defer clear(w.srcs)
	if err := c.directPeers(ctx, CollBroadcast, v, uint64(n), uint32(root), d, func(j int) (int, int) {
		if j == root {
			return n, -1
		}
		return 0, -1
	}); err != nil {
		return err
	}
	if c.rank != root {
		copy(buf, w.srcs[root])
	}
	return c.directDone(ctx, "broadcast", v, d)
}

// directSleep bounds one sleep on a peer's control page, so cancellation,
// a dead peer and the deadline are noticed within it.
const directSleep = 5 * time.Millisecond

// directWait waits until rank j's sequence word at off reaches v: it
// polls, then sleeps on j's control page. A peer that goes away, this
// communicator breaking (cancellation, another failure) or the deadline
// d end the wait with the error that names the rank.
func (c *Communicator) directWait(ctx context.Context, name string, j, off int, v uint32, d time.Time) error {
	w := c.win
	ctl := w.peerCtl[j]
	word := w.u32(ctl, off)
	ready := func() bool { return int32(atomic.LoadUint32(word)-v) >= 0 }
	if ready() {
		return nil
	}
	p := c.peers[j]
	pw, _ := p.conn.(peerWatcher)
	yield := len(c.local) > runtime.NumCPU()
	var spinUntil time.Time
	if !yield {
		spinUntil = time.Now().Add(directSpin)
	}
	for i := 0; ; i++ {
		if ready() {
			return nil
		}
		if pw != nil && pw.PeerDown() {
			if ready() {
				return nil
			}
			return c.fail(ctx, name, p, c.explainSendError(p, fmt.Errorf("shared buffers: %w", errPeerGone)))
		}
		if i&63 == 63 {
			// Any other rank failing (it aborts and closes its links)
			// ends the collective too — unless the word is ready once the
			// failure is seen: a rank that saw every peer done returns and
			// closes (an abort notice on its links) while this rank may
			// still be on its way to the last peer's done word.
			gone := c.downPeer(p)
			err := c.Err()
			cerr := ctxErr(ctx)
			if (gone != nil || err != nil || cerr != nil) && ready() {
				return nil
			}
			switch {
			case err != nil:
				return err
			case gone != nil:
				return c.fail(ctx, name, gone, c.explainSendError(gone, fmt.Errorf("shared buffers: %w", errPeerGone)))
			case cerr != nil:
				return c.abort(fmt.Errorf("ascend: %s: %w", name, cerr))
			}
		}
		switch {
		case yield && i < 64:
			w.mem.Yield()
			continue
		case !yield && (i&15 != 0 || time.Now().Before(spinUntil)):
			if i < directGoschedSpins {
				runtime.Gosched()
			} else {
				w.mem.Yield()
			}
			continue
		}
		timeout := directSleep
		if !d.IsZero() {
			left := time.Until(d)
			if left <= 0 {
				return c.abort(&PeerError{Rank: j, Op: name, Err: fmt.Errorf("shared buffers: rank %d made no progress: %w", j, os.ErrDeadlineExceeded)})
			}
			timeout = min(timeout, left)
		}
		ev, waiters := w.u32(ctl, ctlEvent), w.u32(ctl, ctlWaiters)
		e := atomic.LoadUint32(ev)
		atomic.AddUint32(waiters, 1)
		if !ready() {
			w.mem.Wait(ev, e, timeout)
		}
		atomic.AddUint32(waiters, ^uint32(0))
	}
}

// downPeer returns a peer other than p whose link reports it went away,
// or nil.
func (c *Communicator) downPeer(p *peer) *peer {
	for _, q := range c.peers {
		if q != nil && q != p {
			if qw, ok := q.conn.(peerWatcher); ok && qw.PeerDown() {
				return q
			}
		}
	}
	return nil
}

// errPeerGone: a peer's link reports it went away.
var errPeerGone = fmt.Errorf("peer went away: %w", io.EOF)

// Direct reports whether AllReduceInto(dst, src) reads the peers' buffers
// directly here: every rank is on this host, both slices lie in shared
// buffers (AllocShared) and no algorithm but the ring is forced.
func (c *Communicator) Direct(dst, src []float32) bool { return c.DirectFor(CollAllReduce, dst, src) }

// DirectFor is Direct for collective coll (AllReduce, ReduceScatter,
// AllGather or Broadcast; the others always use the links), given the
// slices of its Into form (dst may be nil where that form allows it).
func (c *Communicator) DirectFor(coll Collective, dst, src []float32) bool {
	if !directColl(coll) || len(dst)+len(src) == 0 {
		return false
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	_, ok := c.directFor(coll, dst, src)
	return ok && c.size > 1
}

// directColl reports whether coll has a direct algorithm.
func directColl(coll Collective) bool {
	switch coll {
	case CollAllReduce, CollReduceScatter, CollAllGather, CollBroadcast:
		return true
	}
	return false
}
