package ascend

// Binomial-tree algorithms, pipelined in segments of ChunkBytes (of
// oversubPipeBytes over TCP when the ranks on a host outnumber its
// cores): a rank forwards segment k (to its children for a broadcast, to
// its parent for a reduce) while it receives segment k+1.
//
// Cost for p ranks and n bytes (α, β, γ as in ring.go; d = ⌈log2 p⌉ is
// the tree depth and the root's fan-out, C = ChunkBytes, k = ⌈n/C⌉,
// c = min(n, C)); a node sends to (or receives from) its up to d children
// over one port:
//
//	Broadcast   (d + k-1)·(α + d·c·β)
//	Reduce      (d + k-1)·(α + d·c·(β+γ))
//	AllReduce   Reduce to rank 0, then Broadcast from it:
//	            2(d + k-1)·(α + d·c·β) + (d + k-1)·d·c·γ
//
// Those are critical paths with the uncontended α and β. The tree's share
// of the work per rank is only (p-1)/p·k messages and (p-1)/p·n bytes per
// phase, so on a loaded host (α_all ≫ α, see CostModel) it beats the
// algorithms whose every rank sends in every step by about log2 p on
// small messages.
//
// Latency-optimal (d steps) for small messages; for large ones the root's
// d-fold traffic loses to the chain (ring.go) and to halving-doubling.
// The pipelined engines below also run the chain topology of ring.go.

import "context"

// oversubPipeBytes is the pipeline segment of the tree and chain
// algorithms over TCP links when the ranks on a host outnumber its cores:
// every segment handed down the pipeline wakes the next rank, which then
// needs a core, so fewer and larger segments go faster although the
// pipeline fills later. 4 ranks on 2 cores over TCP, the tree, five
// alternations (medians): broadcast 1 MiB 548 µs with 256 KiB segments
// against 513 with 1 MiB, 4 MiB 3.06 ms against 2.80; reduce 1 MiB 883
// µs against 730, 4 MiB 3.58 ms against 3.45. (Over shared-memory links a
// wake-up is cheap and 256 KiB segments stay: with 1 MiB a 4-rank reduce
// of 4 MiB took 1093–1160 µs against 777–1176.) A segment is whole
// frames, so the frames on the wire do not depend on it.
const oversubPipeBytes = 1 << 20

type treeAlgorithm struct{}

func (treeAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	d := float64(log2ceil(p))
	f := float64(p-1) / float64(p)
	k, c := chunks(n, m.seg)
	steps := d + k - 1
	switch coll {
	case CollBroadcast:
		return m.split(steps, steps*d*c, 0, f*k, f*n, 0), true
	case CollReduce:
		return m.split(steps, steps*d*c, steps*d*c, f*k, f*n, f*n), true
	case CollAllReduce:
		return m.split(2*steps, 2*steps*d*c, steps*d*c, 2*f*k, 2*f*n, f*n), true
	}
	return 0, false
}

// binomial is rank's place in the binomial tree rooted at root: relative
// rank vr's parent is vr minus its lowest set bit and its children are
// vr+m for the powers of two m below that bit. Children come largest
// subtree first (the order a broadcast feeds them) or, with smallFirst,
// smallest first (the order their partial results of a reduce complete).
func (c *Communicator) binomial(root int, smallFirst bool) (parent *peer, children []*peer) {
	return c.binomialOver(nil, c.size, c.rank, root, smallFirst)
}

// binomialOver is binomial over members (ranks; nil: every rank in order),
// p of them, this rank being members[me], rooted at members[root].
func (c *Communicator) binomialOver(members []int, p, me, root int, smallFirst bool) (parent *peer, children []*peer) {
	at := func(v int) *peer {
		i := mod(v+root, p)
		if members != nil {
			i = members[i]
		}
		return c.peers[i]
	}
	vr := mod(me-root, p)
	mask := 1
	for ; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			parent = at(vr - mask)
			break
		}
	}
	children = c.children[:0]
	if smallFirst {
		for m := 1; m < mask; m <<= 1 {
			if vr+m < p {
				children = append(children, at(vr+m))
			}
		}
	} else {
		for m := mask >> 1; m > 0; m >>= 1 {
			if vr+m < p {
				children = append(children, at(vr+m))
			}
		}
	}
	c.children = children
	return parent, children
}

// bcastPipelined receives buf from parent (nil at the root) chunk by chunk
// and forwards every chunk to all children while the next one arrives.
// The root has all of buf: it hands the whole of it to every child's link
// at once (the same frames; a transport writes several per system call,
// see FramesSender) and meanwhile copies buf to copyTo when that is not
// nil (an out-of-place broadcast's own result).
func (c *Communicator) bcastPipelined(ctx context.Context, name string, tag uint32, buf []float32, parent *peer, children []*peer, copyTo []float32) error {
	if parent == nil {
		for _, ch := range children {
			c.startSend(ctx, ch, tag, buf)
		}
		copy(copyTo, buf)
		for _, ch := range children {
			if err := c.finishSend(ctx, name, ch); err != nil {
				return err
			}
		}
		return nil
	}
	n := len(buf)
	sending := false
	for off := 0; off < n; off += c.pipe {
		part := buf[off:min(n, off+c.pipe)]
		if err := c.recvFrom(ctx, name, tag, parent, part, nil, Sum, false); err != nil {
			return err
		}
		if sending {
			for _, ch := range children {
				if err := c.finishSend(ctx, name, ch); err != nil {
					return err
				}
			}
		}
		for _, ch := range children {
			c.startSend(ctx, ch, tag, part)
		}
		sending = len(children) > 0
	}
	if sending {
		for _, ch := range children {
			if err := c.finishSend(ctx, name, ch); err != nil {
				return err
			}
		}
	}
	return nil
}

// reducePipelined folds src over the subtree below this rank into its
// parent, chunk by chunk: chunk k of the children is folded while chunk
// k-1 travels up. At the root (parent nil) out receives the result
// (divided by the world size for Avg). Elsewhere partial results go to
// out when it is non-nil, else to two reused chunk accumulators, so a
// non-root rank's buffers are left untouched.
func (c *Communicator) reducePipelined(ctx context.Context, name string, tag uint32, src, out []float32, parent *peer, children []*peer, op Op) error {
	if parent != nil && len(children) == 0 {
		// A leaf sends its input as is: all of it at once, in the same
		// frames (see bcastPipelined).
		c.startSend(ctx, parent, tag, src)
		return c.finishSend(ctx, name, parent)
	}
	n := len(src)
	sending := false
	for k, off := 0, 0; off < n; k, off = k+1, off+c.pipe {
		hi := min(n, off+c.pipe)
		base := src[off:hi]
		var acc []float32
		if out != nil {
			acc = out[off:hi]
		} else {
			acc = c.accFor(k&1, hi-off)
		}
		for _, ch := range children {
			if err := c.recvFrom(ctx, name, tag, ch, acc, base, op, true); err != nil {
				return err
			}
			base = acc
		}
		if parent == nil {
			if len(children) == 0 {
				copy(acc, base)
			}
			if op == Avg {
				divide(acc, c.size)
			}
			continue
		}
		if sending {
			if err := c.finishSend(ctx, name, parent); err != nil {
				return err
			}
		}
		c.startSend(ctx, parent, tag, acc)
		sending = true
	}
	if sending {
		return c.finishSend(ctx, name, parent)
	}
	return nil
}

// treeAllReduce reduces to rank 0 over the binomial tree, then broadcasts
// the result back down; partial results go to work on every rank.
func (c *Communicator) treeAllReduce(ctx context.Context, tag uint32, src, work []float32, op Op) error {
	const name = "allreduce"
	parent, children := c.binomial(0, true)
	if err := c.reducePipelined(ctx, name, tag, src, work, parent, children, op); err != nil {
		return err
	}
	parent, children = c.binomial(0, false)
	return c.bcastPipelined(ctx, name, tag, work, parent, children, nil)
}
