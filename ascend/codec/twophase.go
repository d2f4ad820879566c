package codec

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// AllToAller is what [TwoPhase] needs of a communicator
// (*ascend.Communicator has it).
type AllToAller interface {
	Gatherer
	AllToAllV(ctx context.Context, dst, src []float32, sendCounts, recvCounts []int) error
}

// sizer is implemented by codecs whose encoding of n values has a length
// that depends on n alone; TwoPhase then skips exchanging lengths.
type sizer interface {
	EncodedLen(n int) int
}

// TwoPhase is the compressed allreduce of 1-bit Adam (DeepSpeed's
// compressed_allreduce, with error compensation on the worker and the
// server side). The vector is cut into Size() chunks; chunk r belongs to
// rank r, its "server". Each step:
//
//  1. every rank encodes each chunk of g plus its worker residual for that
//     chunk (error feedback) and sends chunk r's encoding to rank r
//     (all-to-all);
//  2. rank r decodes the Size() encodings of its chunk in rank order, sums
//     (or averages) them, adds its server residual, encodes the result
//     again and keeps what that drops as the new server residual;
//  3. the server encodings are allgathered and every rank decodes all of
//     them, so every rank ends with the same bits.
//
// A rank thus sends about 2·(n−1)/n of one encoding of the vector, as a
// ring allreduce sends 2·(n−1)/n of the vector itself: the traffic
// reduction is the codec's compression ratio at every world size, where
// the allgather of [Exchange] sends (n−1) whole encodings. The price is a
// second lossy encoding, which the server residual feeds back.
//
// A TwoPhase is one rank's state for vectors of one length; it is not safe
// for concurrent use. Its residuals marshal into checkpoints.
type TwoPhase struct {
	codec Codec
	n     int
	rank  int
	size  int
	lo    []int       // chunk r is [lo[r], lo[r+1])
	work  []*Feedback // this rank's error feedback, one per chunk
	serv  *Feedback   // the server's, for chunk rank

	fixed              sizer
	sendCounts, counts []int
	recvCounts, one    []int
	lens, lensIn       []float32
	send, recv, gath   []float32
	sum                []float32
}

// NewTwoPhase returns rank's state of a compressed allreduce of n values
// over size ranks with codec c (which it owns from now on: codecs keep
// scratch).
func NewTwoPhase(c Codec, n, rank, size int) (*TwoPhase, error) {
	if n < 0 || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: two-phase allreduce of %d values, rank %d of %d", ErrInvalid, n, rank, size)
	}
	x := &TwoPhase{codec: c, n: n, rank: rank, size: size, lo: make([]int, size+1)}
	for r := range size + 1 {
		x.lo[r] = r * n / size
	}
	for r := range size {
		x.work = append(x.work, NewFeedback(c, x.lo[r+1]-x.lo[r]))
	}
	x.serv = NewFeedback(c, x.lo[rank+1]-x.lo[rank])
	x.fixed, _ = c.(sizer)
	x.sendCounts, x.recvCounts, x.counts = make([]int, size), make([]int, size), make([]int, size)
	x.one = make([]int, size)
	for r := range x.one {
		x.one[r] = 1
	}
	x.lens, x.lensIn = make([]float32, size), make([]float32, size)
	x.sum = make([]float32, x.lo[rank+1]-x.lo[rank])
	return x, nil
}

// Chunk returns the range of values rank r serves.
func (x *TwoPhase) Chunk(r int) (lo, hi int) { return x.lo[r], x.lo[r+1] }

// AllReduce replaces g (n values) on every rank by the sum (avg: the
// mean) over ranks of their g, compressed twice with error feedback as
// described at [TwoPhase]; every rank ends with the same bits. step seeds
// stochastic codecs.
func (x *TwoPhase) AllReduce(ctx context.Context, comm AllToAller, g []float32, step uint64, avg bool) (Stats, error) {
	if len(g) != x.n || comm.Size() != x.size || comm.Rank() != x.rank {
		return Stats{}, fmt.Errorf("%w: two-phase allreduce for %d values on rank %d of %d, called with %d on rank %d of %d",
			ErrInvalid, x.n, x.rank, x.size, len(g), comm.Rank(), comm.Size())
	}
	p := x.size
	// 1. Worker encodings, chunk r for rank r, packed in rank order.
	total := 0
	for r := range p {
		enc, err := x.work[r].Encode(g[x.lo[r]:x.lo[r+1]], step, x.rank*p+r)
		if err != nil {
			return Stats{}, err
		}
		w := words(len(enc))
		x.send = growF(x.send, total+w)
		sb := bytesOf(x.send[total : total+w])
		copy(sb, enc)
		clear(sb[len(enc):])
		x.sendCounts[r] = w
		x.lens[r] = math.Float32frombits(uint32(len(enc)))
		total += w
	}
	st := Stats{DenseBytes: 4 * len(g), PayloadBytes: 4 * total}
	sent := 4 * (total - x.sendCounts[x.rank])
	// The lengths of the encodings of this rank's chunk.
	mine := x.lo[x.rank+1] - x.lo[x.rank]
	if x.fixed != nil {
		for r := range p {
			x.lensIn[r] = math.Float32frombits(uint32(x.fixed.EncodedLen(mine)))
		}
	} else {
		if err := comm.AllToAllV(ctx, x.lensIn, x.lens, x.one, x.one); err != nil {
			return Stats{}, fmt.Errorf("two-phase allreduce: exchanging lengths: %w", err)
		}
		sent += 4 * (p - 1)
	}
	in := 0
	for r := range p {
		x.recvCounts[r] = words(int(math.Float32bits(x.lensIn[r])))
		in += x.recvCounts[r]
	}
	x.recv = growF(x.recv, in)
	if err := comm.AllToAllV(ctx, x.recv, x.send[:total], x.sendCounts, x.recvCounts); err != nil {
		return Stats{}, fmt.Errorf("two-phase allreduce: scattering chunks: %w", err)
	}
	// 2. The server: decode, sum in rank order, encode again.
	clear(x.sum)
	off := 0
	for r := range p {
		b := bytesOf(x.recv[off : off+x.recvCounts[r]])[:int(math.Float32bits(x.lensIn[r]))]
		if err := x.codec.DecodeAdd(x.sum, b); err != nil {
			return Stats{}, fmt.Errorf("two-phase allreduce: chunk from rank %d: %w", r, err)
		}
		off += x.recvCounts[r]
	}
	if avg {
		d := float32(p)
		for i := range x.sum {
			x.sum[i] /= d
		}
	}
	enc, err := x.serv.Encode(x.sum, step, p*p+x.rank)
	if err != nil {
		return Stats{}, err
	}
	// 3. Allgather the server encodings.
	if x.fixed != nil {
		for r := range p {
			x.lens[r] = math.Float32frombits(uint32(x.fixed.EncodedLen(x.lo[r+1] - x.lo[r])))
		}
	} else {
		x.lens[x.rank] = math.Float32frombits(uint32(len(enc)))
		if err := comm.AllGather(ctx, x.lens); err != nil {
			return Stats{}, fmt.Errorf("two-phase allreduce: exchanging lengths: %w", err)
		}
		sent += 4 * (p - 1)
	}
	all := 0
	for r := range p {
		x.counts[r] = words(int(math.Float32bits(x.lens[r])))
		all += x.counts[r]
	}
	x.gath = growF(x.gath, all)
	at := 0
	for r := range x.rank {
		at += x.counts[r]
	}
	sb := bytesOf(x.gath[at : at+x.counts[x.rank]])
	copy(sb, enc)
	clear(sb[len(enc):])
	if err := comm.AllGatherV(ctx, x.gath[:all], x.gath[at:at+x.counts[x.rank]], x.counts); err != nil {
		return Stats{}, fmt.Errorf("two-phase allreduce: gathering chunks: %w", err)
	}
	// A ring allgather passes on every segment but one.
	sent += 4 * (all - all/p)
	clear(g)
	off = 0
	for r := range p {
		b := bytesOf(x.gath[off : off+x.counts[r]])[:int(math.Float32bits(x.lens[r]))]
		if err := x.codec.DecodeAdd(g[x.lo[r]:x.lo[r+1]], b); err != nil {
			return Stats{}, fmt.Errorf("two-phase allreduce: server chunk of rank %d: %w", r, err)
		}
		off += x.counts[r]
	}
	st.TotalPayload, st.SentBytes = 4*all, sent
	if p > 1 && sent > 0 {
		st.TrafficReduction = 2 * float64(p-1) / float64(p) * float64(st.DenseBytes) / float64(sent)
	}
	return st, nil
}

func words(bytes int) int { return (bytes + 3) / 4 }

func growF(b []float32, n int) []float32 {
	if cap(b) < n {
		nb := make([]float32, n, n+n/4)
		copy(nb, b)
		return nb
	}
	return b[:n]
}

// Reset clears every residual.
func (x *TwoPhase) Reset() {
	for _, f := range x.work {
		f.Reset()
	}
	x.serv.Reset()
}

const twoPhaseMagic = "CT2P1"

// MarshalBinary encodes the rank, the world size and every residual.
func (x *TwoPhase) MarshalBinary() ([]byte, error) {
	b := append([]byte(twoPhaseMagic), 0)
	b = binary.AppendUvarint(b, uint64(x.rank))
	b = binary.AppendUvarint(b, uint64(x.size))
	for _, f := range append(x.work[:len(x.work):len(x.work)], x.serv) {
		fb, err := f.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(fb)))
		b = append(b, fb...)
	}
	return b, nil
}

// UnmarshalBinary restores residuals written by MarshalBinary for the
// same codec, vector length, rank and world size.
func (x *TwoPhase) UnmarshalBinary(b []byte) error {
	if len(b) < len(twoPhaseMagic)+1 || string(b[:len(twoPhaseMagic)]) != twoPhaseMagic || b[len(twoPhaseMagic)] != 0 {
		return corrupt("two-phase state: bad magic")
	}
	b = b[len(twoPhaseMagic)+1:]
	var head [2]uint64
	for i := range head {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return corrupt("two-phase state: bad header")
		}
		head[i], b = v, b[k:]
	}
	if head[0] != uint64(x.rank) || head[1] != uint64(x.size) {
		return fmt.Errorf("%w: two-phase state of rank %d of %d, this is rank %d of %d", ErrInvalid, head[0], head[1], x.rank, x.size)
	}
	// Decode into copies first: x changes only on success.
	fs := append(x.work[:len(x.work):len(x.work)], x.serv)
	res := make([][]float32, len(fs))
	for i, f := range fs {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return corrupt("two-phase state: truncated residual %d", i)
		}
		tmp := &Feedback{Codec: f.Codec, Residual: make([]float32, len(f.Residual))}
		if err := tmp.UnmarshalBinary(b[k : k+int(l)]); err != nil {
			return fmt.Errorf("two-phase state: residual %d: %w", i, err)
		}
		res[i] = tmp.Residual
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return corrupt("two-phase state: %d trailing bytes", len(b))
	}
	for i, f := range fs {
		copy(f.Residual, res[i])
	}
	return nil
}
