package codec

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Cost is a codec's computation on one core, per value: encoding with
// error feedback ([Feedback.Encode]) and decoding into a sum
// ([Codec.DecodeAdd]).
type Cost struct {
	EncodeNS float64 `json:"encode_ns"`
	DecodeNS float64 `json:"decode_ns"`
}

// MeasureCost times codec c on n values of a fixed pseudo-random
// (normal) gradient: the fastest of repeated error-fed encodings and the
// fastest of repeated decodings, each repeated at least three times and
// for about half of budget. The fastest, not the mean: like the engine's
// compute probe, it prices an undisturbed core, and the planner prices
// sharing one.
func MeasureCost(ctx context.Context, c Codec, n int, budget time.Duration) (Cost, error) {
	if n < 1 || budget < 0 {
		return Cost{}, fmt.Errorf("%w: measuring %s on %d values for %v", ErrInvalid, c.Name(), n, budget)
	}
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(rng.NormFloat64())
	}
	f := NewFeedback(c, n)
	var enc []byte
	fastest := func(op func(i int) error) (time.Duration, error) {
		best := time.Duration(math.MaxInt64)
		start := time.Now()
		for i := 0; i < 3 || time.Since(start) < budget/2; i++ {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if err := op(i); err != nil {
				return 0, err
			}
			best = min(best, time.Since(t0))
		}
		return best, nil
	}
	te, err := fastest(func(i int) error {
		var err error
		enc, err = f.Encode(g, uint64(i), 0)
		return err
	})
	if err != nil {
		return Cost{}, fmt.Errorf("codec: measuring %s: %w", c.Name(), err)
	}
	enc = append([]byte(nil), enc...) // Encode's buffer is reused
	out := make([]float32, n)
	td, err := fastest(func(int) error { return c.DecodeAdd(out, enc) })
	if err != nil {
		return Cost{}, fmt.Errorf("codec: measuring %s: %w", c.Name(), err)
	}
	return Cost{EncodeNS: float64(te.Nanoseconds()) / float64(n), DecodeNS: float64(td.Nanoseconds()) / float64(n)}, nil
}

// Work is what one compressed allreduce of a gradient does, for pricing
// it: its collectives, in nccl-tests sizes (the whole array of all ranks'
// blocks), and the values it encodes and decodes on each rank.
type Work struct {
	// AllToAll and AllGather are the payload collectives' sizes in bytes
	// (0: none).
	AllToAll, AllGather int
	// LengthAllToAlls and LengthAllGathers count the small collectives
	// (one float32 per rank) that exchange the encodings' lengths, for
	// codecs whose length depends on the data.
	LengthAllToAlls, LengthAllGathers int
	// Encoded and Decoded are the values a rank encodes (with error
	// feedback) and decodes.
	Encoded, Decoded int
}

// Compute is the work's encoding and decoding on one core at cost c.
func (w Work) Compute(c Cost) time.Duration {
	return time.Duration(float64(w.Encoded)*c.EncodeNS + float64(w.Decoded)*c.DecodeNS)
}

// TwoPhaseWork is the work of one [TwoPhase] allreduce of n values over p
// ranks with codec c: each rank encodes the whole gradient (in p chunks)
// and its own chunk again as the server, decodes the p encodings of its
// chunk and then all p server chunks; an all-to-all and an allgather of
// one chunk's encoding per rank.
func TwoPhaseWork(c Codec, n, p int) Work {
	if p < 1 {
		p = 1
	}
	chunk := (n + p - 1) / p
	block := 4 * words(EncodedLen(c, chunk))
	w := Work{AllToAll: p * block, AllGather: p * block, Encoded: n + chunk, Decoded: 2 * n}
	if _, fixed := c.(sizer); !fixed {
		w.LengthAllToAlls, w.LengthAllGathers = 1, 1
	}
	return w
}

// ExchangeWork is the work of one [Exchange] allreduce of n values over p
// ranks with codec c: each rank encodes the gradient, the p encodings are
// allgathered (their lengths first) and every rank decodes all of them.
func ExchangeWork(c Codec, n, p int) Work {
	return Work{AllGather: p * 4 * words(EncodedLen(c, n)), LengthAllGathers: 1, Encoded: n, Decoded: p * n}
}

// EncodedLen is the length of codec c's encoding of n values: exact for
// codecs whose length depends on n alone, for top-k the expected length
// when the kept values are spread at random.
func EncodedLen(c Codec, n int) int {
	switch c := c.(type) {
	case sizer:
		return c.EncodedLen(n)
	case *TopK:
		// Index gaps of values kept independently with probability
		// Ratio: a gap needs a second varint byte with probability
		// (1−Ratio)^127, a third with (1−Ratio)^16383, …
		k := c.K(n)
		gap := 1.0
		for m := 128.0; m <= float64(n); m *= 128 {
			gap += math.Pow(1-c.Ratio, m-1)
		}
		return headerLen(n) + uvarintLen(uint64(k)) + int(math.Ceil(float64(k)*(4+gap)))
	}
	return Dense{}.EncodedLen(n)
}
