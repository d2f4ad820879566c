// Package codec compresses gradients for the collective engine: top-k
// sparsification, scaled sign (1 bit per value), stochastic int8
// quantisation (QSGD-style) and rank-r PowerSGD, each with error feedback
// (the part a codec drops is added to the next step's gradient, which is
// what makes biased compressors converge; Stich et al. 2018, Karimireddy et
// al. 2019).
//
// The non-linear codecs (top-k, sign, int8: their per-rank indices and
// scales do not add up) ride either on an allgather of the encoded
// payloads ([Exchange]: every rank decodes every payload and sums them in
// rank order, so all ranks hold the same bits; a rank sends n−1 encodings)
// or on 1-bit Adam's two-phase exchange ([TwoPhase]: all-to-all of chunks,
// each rank re-encodes the sum of its chunk with a server-side error
// feedback, allgather; a rank sends about 2(n−1)/n of one encoding, so the
// traffic reduction is the codec's ratio at any world size). PowerSGD is
// linear and rides on two ordinary allreduces of its low-rank factors.
//
// [Choose] is the adaptive policy: after an uncompressed warm-up that
// measures bandwidth and computation, compress just enough (the first
// codec of [Ladder] whose [Ratio] reaches the need) that communication
// fits in computation.
//
// Everything here is deterministic: stochastic rounding draws from a
// generator seeded by (seed, step, rank), and the error-feedback state
// marshals into checkpoints, so a run restored from a checkpoint continues
// bit for bit.
//
// Wire format of an encoded payload (little endian):
//
//	[codec id u8][n uvarint] codec-specific body
//
// Decoders check every length and index against n and the payload size
// and return an error wrapping ErrCorrupt rather than panic (fuzzed).
package codec
