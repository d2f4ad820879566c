package gradsync

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/cann-train/cann-train/ascend/codec"
)

// MaxStateBytes bounds one rank's state in GatherStates.
const MaxStateBytes = 1 << 31

// GatherStates collects every rank's bytes (such as [Syncer.MarshalBinary])
// on every rank, in rank order: what a checkpoint of per-rank state needs
// (engine.State.CommState). It is a collective: every rank calls it. The
// bytes travel as float32 words through allgathers, which move bits and
// never compute with them.
func GatherStates(ctx context.Context, comm codec.Gatherer, mine []byte) ([][]byte, error) {
	if len(mine) >= MaxStateBytes {
		return nil, fmt.Errorf("gradsync: state of %d bytes, at most %d", len(mine), MaxStateBytes-1)
	}
	n := comm.Size()
	lens := make([]float32, n)
	lens[comm.Rank()] = math.Float32frombits(uint32(len(mine)))
	if err := comm.AllGather(ctx, lens); err != nil {
		return nil, fmt.Errorf("gradsync: gather state lengths: %w", err)
	}
	counts := make([]int, n)
	total := 0
	for r, l := range lens {
		b := int(math.Float32bits(l))
		if b >= MaxStateBytes {
			return nil, fmt.Errorf("gradsync: rank %d announces a state of %d bytes", r, b)
		}
		counts[r] = (b + 3) / 4
		total += counts[r]
	}
	src := make([]float32, counts[comm.Rank()])
	copy(bytesOf(src), mine)
	dst := make([]float32, total)
	if err := comm.AllGatherV(ctx, dst, src, counts); err != nil {
		return nil, fmt.Errorf("gradsync: gather states: %w", err)
	}
	out := make([][]byte, n)
	off := 0
	for r := range n {
		b := bytesOf(dst[off : off+counts[r]])
		out[r] = b[:math.Float32bits(lens[r])]
		off += counts[r]
	}
	return out, nil
}

// bytesOf views f's memory as bytes.
func bytesOf(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}
