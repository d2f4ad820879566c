package ascend

// Typed collectives: float64 and int32 next to the first-class float32.
//
// A float32 call goes straight to the Communicator's method (every
// algorithm, the cost model, shared buffers). The other types travel as
// their 4-byte words: collectives that only move data (AllGather(V),
// Broadcast, AllToAll(V), Send, Recv) run the float32 machinery on word
// views of the caller's buffers, bit for bit. Reductions cannot fold
// words, so they run as a pairwise exchange plus a local fold:
//
//   - ReduceScatterOf sends every rank its share of src (AllToAll) and
//     the owner folds the p contributions in rank order;
//   - AllReduceOf is that on near-equal shares followed by an AllGatherV:
//     per rank (p−1)/p·n elements each way twice, the ring's volume, in
//     2(p−1) messages;
//   - ReduceOf folds the shares the same way and gathers them at the root
//     (AllToAllV with the root as the only destination);
//   - small AllReduceOf and ReduceOf calls (typedGatherBytes) instead
//     gather every rank's whole input (one AllGather, log p steps) and
//     fold it locally in the same order.
//
// Each element is folded once, by its owner, in rank order, so every rank
// receives bit-identical results, as from the float32 path. Sum on int32
// wraps (two's complement); Avg is defined on floats only. A float64
// travels as its two words in the host's byte order, so the ranks of one
// session must share a byte order (every supported host is little-endian).

import (
	"context"
	"unsafe"
)

// Element is a type the typed collectives carry.
type Element interface {
	float32 | float64 | int32
}

// words views s as the float32 words that hold it.
func words[T Element](s []T) []float32 {
	var z T
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z))/4)
}

// wordsPer is the number of float32 words of one T.
func wordsPer[T Element]() int {
	var z T
	return int(unsafe.Sizeof(z)) / 4
}

// isF32 reports whether T is float32 (then words is the identity). It
// boxes a zero value, which does not allocate.
func isF32[T Element]() bool {
	_, ok := any(*new(T)).(float32)
	return ok
}

// typedName names T in errors.
func typedName[T Element]() string {
	switch any(*new(T)).(type) {
	case float64:
		return "float64"
	case int32:
		return "int32"
	}
	return "float32"
}

// checkTypedOp refuses what T cannot reduce.
func checkTypedOp[T Element](coll string, op Op) error {
	if !op.valid() {
		return errorf(ErrInvalid, "%s: unknown op %d", coll, uint8(op))
	}
	if _, isInt := any(*new(T)).(int32); isInt && op == Avg {
		return errorf(ErrInvalid, "%s: avg is not defined on int32 (reduce with sum and divide)", coll)
	}
	return nil
}

// checkPair checks the dst and src of a typed reduction: equal lengths,
// the same slice or no overlap.
func checkPair[T Element](coll string, dst, src []T) error {
	if len(dst) != len(src) || overlap(words(dst), words(src)) {
		return errorf(ErrInvalid, "%s: %s dst (%d) and src (%d) must have equal lengths and be the same slice or not overlap",
			coll, typedName[T](), len(dst), len(src))
	}
	return nil
}

// typedState is the Communicator's scratch for typed reductions, reused
// from call to call.
type typedState struct {
	buf    []float64 // received shares; float64 keeps any T aligned
	counts [4][]int  // p counts each: send, receive, shares, words
}

// scratch returns n elements of reusable T scratch.
func scratch[T Element](c *Communicator, n int) []T {
	k := (n*wordsPer[T]() + 1) / 2
	if cap(c.typed.buf) < k {
		c.typed.buf = make([]float64, k)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(c.typed.buf[:k]))), n)
}

// typedCounts returns reusable count slice i, p long.
func (c *Communicator) typedCounts(i int) []int {
	if len(c.typed.counts[i]) != c.size {
		c.typed.counts[i] = make([]int, c.size)
	}
	return c.typed.counts[i]
}

// shares splits n elements into Size() near-equal shares (the first
// n mod p one longer) and returns their counts.
func (c *Communicator) shares(n int) []int {
	cnt := c.typedCounts(2)
	for i := range cnt {
		cnt[i] = n / c.size
		if i < n%c.size {
			cnt[i]++
		}
	}
	return cnt
}

// scaled returns counts·k in reusable slice i.
func (c *Communicator) scaled(i int, counts []int, k int) []int {
	out := c.typedCounts(i)
	for j, v := range counts {
		out[j] = v * k
	}
	return out
}

// sumCounts adds counts; ok is false if one is negative.
func sumCounts(counts []int) (total int, ok bool) {
	for _, n := range counts {
		if n < 0 {
			return total, false
		}
		total += n
	}
	return total, true
}

// fold stores dst[i] op src[i] into dst[i].
func fold[T Element](dst, src []T, op Op) {
	src = src[:len(dst)]
	switch op {
	case Sum, Avg:
		for i := range dst {
			dst[i] += src[i]
		}
	case Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	}
}

// foldShares folds the p received shares of m elements each, in rank
// order, into out, dividing for Avg.
func foldShares[T Element](out, recv []T, p int, op Op) {
	m := len(out)
	copy(out, recv[:m])
	for i := 1; i < p; i++ {
		fold(out, recv[i*m:(i+1)*m], op)
	}
	if op == Avg {
		d := T(p)
		for i := range out {
			out[i] /= d
		}
	}
}

// exchangeShares sends share j of src (counts[j] elements, in rank order)
// to rank j and returns the shares of this rank's part from every rank,
// rank order, in scratch.
func exchangeShares[T Element](ctx context.Context, c *Communicator, src []T, counts []int) ([]T, error) {
	k := wordsPer[T]()
	mine := counts[c.rank]
	recv := scratch[T](c, c.size*mine)
	send := c.scaled(0, counts, k)
	rc := c.typedCounts(1)
	for i := range rc {
		rc[i] = mine * k
	}
	if err := c.AllToAllV(ctx, words(recv), words(src), send, rc); err != nil {
		return nil, err
	}
	return recv, nil
}

// typedGatherBytes is the gathered size (Size()·len(src) elements) below
// which AllReduceOf and ReduceOf gather every rank's whole input and fold
// it locally, in rank order as the owners would (the same bits): one
// AllGather of log p steps instead of 2(p−1) messages. 4 ranks over
// loopback TCP, double, 4 KiB: the shares took 0.36× Open MPI's time
// per call's worth of bandwidth (and 0.68× at 16 KiB).
const typedGatherBytes = 64 << 10

// gatherFirst reports whether a reduction of n elements of T gathers
// whole inputs (see typedGatherBytes).
func gatherFirst[T Element](c *Communicator, n int) bool {
	return TypedReduction(c.size, n*wordsPer[T]()*4) == TypedGather
}

// How the typed reductions of float64 and int32 run (TypedReduction).
const (
	TypedGather = "gather" // every rank's whole input gathered, folded locally
	TypedShares = "shares" // shares exchanged pairwise, folded by their owners
)

// TypedReduction names how AllReduceOf and ReduceOf reduce a buffer of
// bytes on p ranks (ReduceScatterOf always exchanges shares).
func TypedReduction(p, bytes int) string {
	if p*bytes <= typedGatherBytes {
		return TypedGather
	}
	return TypedShares
}

// gatherAll gathers every rank's src, in rank order, into scratch.
func gatherAll[T Element](ctx context.Context, c *Communicator, src []T) ([]T, error) {
	all := scratch[T](c, c.size*len(src))
	if err := c.AllGatherInto(ctx, words(all), words(src)); err != nil {
		return nil, err
	}
	return all, nil
}

// foldOwnShare splits src into Size() near-equal shares, exchanges them
// and folds the shares of this rank's part, in rank order, into scratch;
// it returns that and the shares' counts.
func foldOwnShare[T Element](ctx context.Context, c *Communicator, src []T, op Op) (own []T, counts []int, err error) {
	counts = c.shares(len(src))
	recv, err := exchangeShares(ctx, c, src, counts)
	if err != nil {
		return nil, nil, err
	}
	own = recv[:counts[c.rank]]
	foldShares(own, recv, c.size, op)
	return own, counts, nil
}

// AllReduceOf is AllReduceInto for any Element: dst[i] = op over all ranks
// of src[i]. dst and src are the same slice (in place) or do not overlap.
func AllReduceOf[T Element](ctx context.Context, c *Communicator, dst, src []T, op Op) error {
	if isF32[T]() {
		return c.AllReduceInto(ctx, words(dst), words(src), op)
	}
	if err := checkTypedOp[T]("allreduce", op); err != nil {
		return err
	}
	if err := checkPair("allreduce", dst, src); err != nil {
		return err
	}
	c.typedMu.Lock()
	defer c.typedMu.Unlock()
	if c.size == 1 || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	if gatherFirst[T](c, len(src)) {
		all, err := gatherAll(ctx, c, src)
		if err != nil {
			return err
		}
		foldShares(dst, all, c.size, op) // src has been sent: dst may be src
		return nil
	}
	folded, cnt, err := foldOwnShare(ctx, c, src, op)
	if err != nil {
		return err
	}
	off := 0
	for i := range c.rank {
		off += cnt[i]
	}
	own := dst[off : off+cnt[c.rank]]
	copy(own, folded) // src has been sent: dst may be src
	return c.AllGatherV(ctx, words(dst), words(own), c.scaled(3, cnt, wordsPer[T]()))
}

// ReduceScatterOf is ReduceScatterInto for any Element: src holds Size()
// equal segments; dst (len(src)/Size() elements, or exactly this rank's
// segment of src) receives the reduction of segment Rank() over all ranks.
func ReduceScatterOf[T Element](ctx context.Context, c *Communicator, dst, src []T, op Op) error {
	if isF32[T]() {
		return c.ReduceScatterInto(ctx, words(dst), words(src), op)
	}
	if err := checkTypedOp[T]("reducescatter", op); err != nil {
		return err
	}
	m := len(dst)
	if len(src) != c.size*m {
		return errorf(ErrInvalid, "reducescatter: %s src has %d elements, want Size()·len(dst) = %d", typedName[T](), len(src), c.size*m)
	}
	if overlap(words(dst), words(src)) && !same(words(dst), words(src[c.rank*m:(c.rank+1)*m])) {
		return errorf(ErrInvalid, "reducescatter: dst overlaps src")
	}
	c.typedMu.Lock()
	defer c.typedMu.Unlock()
	if c.size == 1 || m == 0 {
		copy(dst, src[c.rank*m:])
		return nil
	}
	cnt := c.typedCounts(2)
	for i := range cnt {
		cnt[i] = m
	}
	recv, err := exchangeShares(ctx, c, src, cnt)
	if err != nil {
		return err
	}
	foldShares(dst, recv, c.size, op)
	return nil
}

// ReduceOf is ReduceInto for any Element: the root's dst receives the
// reduction of every rank's src; other ranks' dst is not touched (it may
// be nil there).
func ReduceOf[T Element](ctx context.Context, c *Communicator, dst, src []T, op Op, root int) error {
	if isF32[T]() {
		return c.ReduceInto(ctx, words(dst), words(src), op, root)
	}
	if err := checkTypedOp[T]("reduce", op); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return errorf(ErrInvalid, "reduce: root %d out of range [0,%d)", root, c.size)
	}
	if c.rank == root {
		if err := checkPair("reduce", dst, src); err != nil {
			return err
		}
	}
	c.typedMu.Lock()
	defer c.typedMu.Unlock()
	if c.size == 1 || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	if gatherFirst[T](c, len(src)) {
		all, err := gatherAll(ctx, c, src)
		if err == nil && c.rank == root {
			foldShares(dst, all, c.size, op)
		}
		return err
	}
	// Send the folded share to the root, which stores the shares in dst
	// in rank order.
	own, cnt, err := foldOwnShare(ctx, c, src, op)
	if err != nil {
		return err
	}
	k := wordsPer[T]()
	send, rc := c.typedCounts(0), c.typedCounts(1)
	for i := range send {
		send[i], rc[i] = 0, 0
	}
	send[root] = cnt[c.rank] * k
	var out []float32
	if c.rank == root {
		for i := range rc {
			rc[i] = cnt[i] * k
		}
		out = words(dst)
	}
	return c.AllToAllV(ctx, out, words(own), send, rc)
}

// AllGatherOf is AllGatherInto for any Element: dst (Size()·len(src)
// elements) receives every rank's src in rank order; src may be exactly
// this rank's segment of dst.
func AllGatherOf[T Element](ctx context.Context, c *Communicator, dst, src []T) error {
	if len(dst) != c.size*len(src) {
		return errorf(ErrInvalid, "allgather: %s dst has %d elements, want Size()·len(src) = %d", typedName[T](), len(dst), c.size*len(src))
	}
	return c.AllGatherInto(ctx, words(dst), words(src))
}

// AllGatherVOf is AllGatherV for any Element (counts in elements).
func AllGatherVOf[T Element](ctx context.Context, c *Communicator, dst, src []T, counts []int) error {
	if isF32[T]() {
		return c.AllGatherV(ctx, words(dst), words(src), counts)
	}
	if len(counts) != c.size {
		return errorf(ErrInvalid, "allgatherv: %d counts for world size %d", len(counts), c.size)
	}
	if total, ok := sumCounts(counts); !ok || len(src) != counts[c.rank] || len(dst) != total {
		return errorf(ErrInvalid, "allgatherv: %s len(src) = %d, len(dst) = %d, want counts[%d] = %d and their sum %d (counts ≥ 0)",
			typedName[T](), len(src), len(dst), c.rank, counts[c.rank], total)
	}
	c.typedMu.Lock()
	defer c.typedMu.Unlock()
	return c.AllGatherV(ctx, words(dst), words(src), c.scaled(3, counts, wordsPer[T]()))
}

// BroadcastOf is BroadcastInto for any Element: the root sends src (and
// copies it to dst unless dst is nil or the same slice); the other ranks
// receive into dst.
func BroadcastOf[T Element](ctx context.Context, c *Communicator, dst, src []T, root int) error {
	if c.rank == root && len(dst) > 0 && same(words(dst), words(src)) {
		return c.Broadcast(ctx, words(dst), root)
	}
	return c.BroadcastInto(ctx, words(dst), words(src), root)
}

// AllToAllOf is AllToAll for any Element.
func AllToAllOf[T Element](ctx context.Context, c *Communicator, dst, src []T) error {
	if len(dst) != len(src) || len(src)%c.size != 0 {
		return errorf(ErrInvalid, "alltoall: %s len(dst) = %d, len(src) = %d, want equal multiples of the world size %d",
			typedName[T](), len(dst), len(src), c.size)
	}
	return c.AllToAll(ctx, words(dst), words(src))
}

// AllToAllVOf is AllToAllV for any Element (counts in elements).
func AllToAllVOf[T Element](ctx context.Context, c *Communicator, dst, src []T, sendCounts, recvCounts []int) error {
	if isF32[T]() {
		return c.AllToAllV(ctx, words(dst), words(src), sendCounts, recvCounts)
	}
	if len(sendCounts) != c.size || len(recvCounts) != c.size {
		return errorf(ErrInvalid, "alltoallv: %d send and %d receive counts for world size %d", len(sendCounts), len(recvCounts), c.size)
	}
	ns, okS := sumCounts(sendCounts)
	nr, okR := sumCounts(recvCounts)
	if !okS || !okR || len(src) != ns || len(dst) != nr {
		return errorf(ErrInvalid, "alltoallv: %s len(src) = %d, len(dst) = %d, want the sums of the counts %d and %d (counts ≥ 0)",
			typedName[T](), len(src), len(dst), ns, nr)
	}
	c.typedMu.Lock()
	defer c.typedMu.Unlock()
	k := wordsPer[T]()
	return c.AllToAllV(ctx, words(dst), words(src), c.scaled(0, sendCounts, k), c.scaled(1, recvCounts, k))
}

// SendOf is Send for any Element.
func SendOf[T Element](ctx context.Context, c *Communicator, buf []T, peer int) error {
	return c.Send(ctx, words(buf), peer)
}

// RecvOf is Recv for any Element.
func RecvOf[T Element](ctx context.Context, c *Communicator, buf []T, peer int) error {
	return c.Recv(ctx, words(buf), peer)
}
