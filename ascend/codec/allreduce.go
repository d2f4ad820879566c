package codec

import (
	"context"
	"fmt"
	"math"
	"unsafe"
)

// Gatherer is what a compressed allreduce needs of a communicator
// (*ascend.Communicator has it).
type Gatherer interface {
	Rank() int
	Size() int
	AllGather(ctx context.Context, buf []float32) error
	AllGatherV(ctx context.Context, dst, src []float32, counts []int) error
}

// Stats describes one compressed allreduce.
type Stats struct {
	DenseBytes   int // the gradient as float32
	PayloadBytes int // this rank's encoding
	TotalPayload int // every rank's encodings, padded to words
	// SentBytes is what this rank sent ([TwoPhase]; 0 from [Exchange],
	// whose ranks all send (n−1)/n·TotalPayload plus the lengths).
	SentBytes int
	// TrafficReduction is the bytes a rank sends in a ring allreduce of the
	// dense gradient, 2(n−1)/n·DenseBytes, over the bytes it sends in the
	// ring allgather of the encodings, (n−1)/n·TotalPayload (the length
	// exchange included).
	TrafficReduction float64
}

// Exchange holds the buffers of compressed allreduces of one gradient size
// (reused: the steady state does not allocate beyond the codecs' own
// scratch).
type Exchange struct {
	counts []int
	lens   []float32
	send   []float32
	recv   []float32
	sum    []float32
}

// AllReduce replaces g on every rank by the sum (avg: the mean) over ranks
// of their error-fed, compressed gradients: each rank encodes g with f,
// the encodings are allgathered, and every rank decodes them all in rank
// order, so every rank ends with the same bits.
func (x *Exchange) AllReduce(ctx context.Context, comm Gatherer, f *Feedback, g []float32, step uint64, avg bool) (Stats, error) {
	n := comm.Size()
	enc, err := f.Encode(g, step, comm.Rank())
	if err != nil {
		return Stats{}, err
	}
	words := (len(enc) + 3) / 4
	if cap(x.lens) < n {
		x.lens, x.counts = make([]float32, n), make([]int, n)
	}
	lens, counts := x.lens[:n], x.counts[:n]
	// Lengths travel as raw bits: the allgather copies, never computes.
	lens[comm.Rank()] = math.Float32frombits(uint32(len(enc)))
	if err := comm.AllGather(ctx, lens); err != nil {
		return Stats{}, fmt.Errorf("compressed allreduce: exchanging lengths: %w", err)
	}
	total := 0
	for r := range n {
		b := int(math.Float32bits(lens[r]))
		counts[r] = (b + 3) / 4
		total += counts[r]
	}
	if cap(x.send) < words {
		x.send = make([]float32, words)
	}
	send := x.send[:words]
	sb := bytesOf(send)
	copy(sb, enc)
	clear(sb[len(enc):])
	if cap(x.recv) < total {
		x.recv = make([]float32, total)
	}
	recv := x.recv[:total]
	if err := comm.AllGatherV(ctx, recv, send, counts); err != nil {
		return Stats{}, fmt.Errorf("compressed allreduce: gathering payloads: %w", err)
	}
	if cap(x.sum) < len(g) {
		x.sum = make([]float32, len(g))
	}
	sum := x.sum[:len(g)]
	clear(sum)
	off := 0
	for r := range n {
		b := bytesOf(recv[off : off+counts[r]])[:int(math.Float32bits(lens[r]))]
		if err := f.Codec.DecodeAdd(sum, b); err != nil {
			return Stats{}, fmt.Errorf("compressed allreduce: payload of rank %d: %w", r, err)
		}
		off += counts[r]
	}
	if avg {
		d := float32(n)
		for i := range sum {
			sum[i] /= d
		}
	}
	copy(g, sum)
	st := Stats{DenseBytes: 4 * len(g), PayloadBytes: len(enc), TotalPayload: 4 * total}
	if n > 1 {
		st.TrafficReduction = 2 * float64(st.DenseBytes) / float64(st.TotalPayload+4*n)
	}
	return st, nil
}

func bytesOf(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}
