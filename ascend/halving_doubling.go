package ascend

// Recursive halving-doubling (Rabenseifner): ReduceScatter by recursive
// halving, AllGather by recursive doubling, AllReduce as the two in a row.
//
// Cost for p ranks and n bytes (α, β, γ as in ring.go), p' = 2^⌊log2 p⌋,
// L = log2 p':
//
//	AllReduce      2L·α + 2(p'-1)/p'·n·β + (p'-1)/p'·n·γ
//	ReduceScatter   L·α +  (p'-1)/p'·n·(β+γ)
//	AllGather       L·α +  (p'-1)/p'·n·β
//
// plus, when p is not a power of two, the fold that makes it one: the
// first 2(p-p') ranks pair up, the even rank of each pair hands its data
// to the odd one and sits out, and gets the result back at the end:
//
//	AllReduce      +2α + 2n·β + n·γ
//	ReduceScatter  +2α + n·(β+γ) + n/p·β
//	AllGather      +2α + n/p·β + n·β
//
// Every active rank works in every halving and doubling step (α_all and
// β_all, see CostModel). Same bandwidth term as the ring with a
// logarithmic latency term, so it
// wins for small and medium messages on many ranks; the fold costs it the
// large messages on non-powers of two (HCCL's reason for NHR).
//
// The active ranks are renumbered v = 0..p'-1 ("virtual ranks"); virtual
// rank v owns a contiguous block of the buffer: for AllReduce p'
// near-equal blocks, for ReduceScatter and AllGather the union of the
// segments of the original ranks it stands for (a folded pair owns two
// adjacent segments), so uneven AllGatherV counts work too. Halving step
// m = p'/2, …, 1 exchanges with v^m: each keeps the half of its current
// block range that contains its own block, sends the other half, and
// folds the received half into it. Doubling runs the steps in reverse
// and copies.

import "context"

type hdAlgorithm struct{}

func (hdAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	pp := pow2floor(p)
	L := float64(log2ceil(pp))
	f := float64(pp-1) / float64(pp)
	var t, fold float64
	switch coll {
	case CollAllReduce:
		// Every step is an exchange between two ranks, whose bytes cost
		// at most two one-way transfers back to back (2β, as for recursive
		// doubling on two ranks), however β_all, measured on the ring
		// pattern, came out on a host whose ranks outnumber its cores.
		// Measured with 4 ranks on 2 cores over loopback TCP (calibrated
		// β_all=3.8β): 64 KiB 153 µs against the tree's 190 µs, which the
		// unclamped model preferred (523 µs against 536 µs predicted),
		// 256 KiB 370 µs against 574 µs. α_all is left alone: the tree's
		// fewer messages do win small messages there (4 KiB: 49 µs against
		// 96 µs). On dedicated cores β_all < 2β and nothing changes.
		pm := m
		pm.ba = min(m.ba, 2*m.b)
		if p == 2 {
			// Both steps are exchanges of the same two processes, as
			// recursive doubling's one. Left unclamped, a calibration on a
			// loaded host (α_all 78 µs against α 6 µs) priced every TCP
			// wakeup of a 64 MiB halving-doubling at α_all and every one
			// of the exchange at 2α, and chose the exchange there.
			pm = m.pair()
		}
		t = pm.busy(2*L, 2*f*n, f*n)
		fold = 2*m.a + 2*n*m.b + n*m.g
	case CollReduceScatter:
		t = m.busy(L, f*n, f*n)
		fold = 2*m.a + n*(m.b+m.g) + n/float64(p)*m.b
	case CollAllGather:
		t = m.busy(L, f*n, 0)
		fold = 2*m.a + n/float64(p)*m.b + n*m.b
	default:
		return 0, false
	}
	if p != pp {
		t += fold // only the folded pairs work: uncontended α, β
	}
	return t, true
}

// hdLayout is a rank's place in the power-of-two group.
type hdLayout struct {
	pp  int // p': active ranks
	rem int // p - p': folded pairs, ranks 0..2·rem-1
	v   int // this rank's virtual rank, -1 if it sits out
}

func (c *Communicator) hdLayout() hdLayout {
	pp := pow2floor(c.size)
	l := hdLayout{pp: pp, rem: c.size - pp, v: -1}
	switch r := c.rank; {
	case r >= 2*l.rem:
		l.v = r - l.rem
	case r%2 == 1:
		l.v = r / 2
	}
	return l
}

// orig is the rank standing for virtual rank v.
func (l hdLayout) orig(v int) int {
	if v < l.rem {
		return 2*v + 1
	}
	return v + l.rem
}

// folded reports whether rank r is part of a folded pair; its partner is
// r^1.
func (l hdLayout) folded(r int) bool { return r < 2*l.rem }

// blockOffsets fills c.voffs with the virtual blocks made of the original
// segments offs.
func (c *Communicator) blockOffsets(l hdLayout, offs []int) []int {
	voffs := c.voffs[:l.pp+1]
	for v := range l.pp {
		first := v + l.rem // the one segment of an unpaired rank
		if v < l.rem {
			first = 2 * v // a pair owns segments 2v and 2v+1
		}
		voffs[v] = offs[first]
	}
	voffs[l.pp] = offs[len(offs)-1]
	return voffs
}

// hdHalving reduce-scatters among the active ranks: afterwards block v of
// work (offsets voffs) is fully reduced. Until fresh is cleared reads come
// from src (the blocks of work have not been written yet).
func (c *Communicator) hdHalving(ctx context.Context, name string, tag uint32, src, work []float32, voffs []int, l hdLayout, op Op, fresh bool) error {
	lo, hi := 0, l.pp
	for m := l.pp / 2; m >= 1; m >>= 1 {
		partner := c.peers[l.orig(l.v^m)]
		mid := lo + m
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if l.v&m != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		from := work
		if fresh {
			from = src
		}
		klo, khi := voffs[keepLo], voffs[keepHi]
		if err := c.exchange(ctx, name, tag, partner, from[voffs[sendLo]:voffs[sendHi]], partner, work[klo:khi], from[klo:khi], op, true); err != nil {
			return err
		}
		fresh = false
		lo, hi = keepLo, keepHi
	}
	return nil
}

// hdDoubling allgathers among the active ranks: block v of work must hold
// this rank's part; afterwards all blocks do.
func (c *Communicator) hdDoubling(ctx context.Context, name string, tag uint32, work []float32, voffs []int, l hdLayout) error {
	lo, hi := l.v, l.v+1
	for m := 1; m < l.pp; m <<= 1 {
		partner := c.peers[l.orig(l.v^m)]
		plo, phi := hi, hi+m
		if l.v&m != 0 {
			plo, phi = lo-m, lo
		}
		if err := c.exchange(ctx, name, tag, partner, work[voffs[lo]:voffs[hi]], partner, work[voffs[plo]:voffs[phi]], nil, Sum, false); err != nil {
			return err
		}
		lo, hi = min(lo, plo), max(hi, phi)
	}
	return nil
}

// hdAllReduce: fold to a power of two, halving, doubling, unfold.
func (c *Communicator) hdAllReduce(ctx context.Context, tag uint32, src, work []float32, op Op) error {
	const name = "allreduce"
	l := c.hdLayout()
	r := c.rank
	if l.v < 0 { // sits out: hand over the input, get the result
		partner := c.peers[r+1]
		if err := c.sendTo(ctx, name, tag, partner, src); err != nil {
			return err
		}
		return c.recvFrom(ctx, name, tag, partner, work, nil, Sum, false)
	}
	fresh := true
	if l.folded(r) {
		if err := c.recvFrom(ctx, name, tag, c.peers[r-1], work, src, op, true); err != nil {
			return err
		}
		fresh = false
	}
	voffs := equalOffsets(c.voffs[:l.pp+1], len(work))
	if err := c.hdHalving(ctx, name, tag, src, work, voffs, l, op, fresh); err != nil {
		return err
	}
	if op == Avg {
		divide(work[voffs[l.v]:voffs[l.v+1]], c.size)
	}
	if err := c.hdDoubling(ctx, name, tag, work, voffs, l); err != nil {
		return err
	}
	if l.folded(r) {
		return c.sendTo(ctx, name, tag, c.peers[r-1], work)
	}
	return nil
}

// hdReduceScatter leaves segment r (offsets offs) of work reduced; work
// may be src.
func (c *Communicator) hdReduceScatter(ctx context.Context, tag uint32, src, work []float32, offs []int, op Op) error {
	const name = "reducescatter"
	l := c.hdLayout()
	r := c.rank
	own := work[offs[r]:offs[r+1]]
	if l.v < 0 {
		partner := c.peers[r+1]
		if err := c.sendTo(ctx, name, tag, partner, src); err != nil {
			return err
		}
		return c.recvFrom(ctx, name, tag, partner, own, nil, Sum, false)
	}
	fresh := true
	if l.folded(r) {
		if err := c.recvFrom(ctx, name, tag, c.peers[r-1], work, src, op, true); err != nil {
			return err
		}
		fresh = false
	}
	voffs := c.blockOffsets(l, offs)
	if err := c.hdHalving(ctx, name, tag, src, work, voffs, l, op, fresh); err != nil {
		return err
	}
	if op == Avg {
		divide(work[voffs[l.v]:voffs[l.v+1]], c.size)
	}
	if l.folded(r) {
		return c.sendTo(ctx, name, tag, c.peers[r-1], work[offs[r-1]:offs[r]])
	}
	return nil
}

// hdAllGather: segment r (offsets offs) of work holds this rank's part;
// afterwards all segments do.
func (c *Communicator) hdAllGather(ctx context.Context, tag uint32, work []float32, offs []int) error {
	const name = "allgather"
	l := c.hdLayout()
	r := c.rank
	if l.v < 0 {
		partner := c.peers[r+1]
		if err := c.sendTo(ctx, name, tag, partner, work[offs[r]:offs[r+1]]); err != nil {
			return err
		}
		return c.recvFrom(ctx, name, tag, partner, work, nil, Sum, false)
	}
	if l.folded(r) {
		if err := c.recvFrom(ctx, name, tag, c.peers[r-1], work[offs[r-1]:offs[r]], nil, Sum, false); err != nil {
			return err
		}
	}
	voffs := c.blockOffsets(l, offs)
	if err := c.hdDoubling(ctx, name, tag, work, voffs, l); err != nil {
		return err
	}
	if l.folded(r) {
		return c.sendTo(ctx, name, tag, c.peers[r-1], work)
	}
	return nil
}
