package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultInt8Bucket is the number of values sharing one scale.
const DefaultInt8Bucket = 256

// Int8 is QSGD-style stochastic quantisation to 8 bits: per bucket, scale =
// max|x|/127 and q = ⌊x/scale + u⌋ with u uniform in [0, 1), an unbiased
// estimate of x. The generator is seeded by (step, rank, bucket), so the
// encoding is reproducible. Body:
//
//	[bucket uvarint][nb float32 scales][n int8]
type Int8 struct {
	Bucket int
	draws  []float64 // a bucket's uniform draws (encodeFeedback's scratch)
}

// NewInt8 returns an Int8 codec with the given bucket size (> 0).
func NewInt8(bucket int) (*Int8, error) {
	if bucket < 1 || bucket > 1<<24 {
		return nil, fmt.Errorf("%w: int8 bucket %d, want 1..2^24", ErrInvalid, bucket)
	}
	return &Int8{Bucket: bucket}, nil
}

func (q *Int8) Name() string { return fmt.Sprintf("int8:%d", q.Bucket) }

func (q *Int8) Encode(dst []byte, x []float32, step uint64, rank int) []byte {
	dst = header(dst, idInt8, len(x))
	dst = binary.AppendUvarint(dst, uint64(q.Bucket))
	nb := (len(x) + q.Bucket - 1) / q.Bucket
	scales := len(dst)
	dst = append(dst, make([]byte, 4*nb)...)
	rng := rand.New(rand.NewPCG(step, uint64(rank)))
	for b := range nb {
		part := x[b*q.Bucket : min(len(x), (b+1)*q.Bucket)]
		var m float32
		for _, v := range part {
			m = max(m, abs32(v))
		}
		scale, ok := int8Scale(m)
		putF32(dst[scales+4*b:], scale)
		for _, v := range part {
			var qv int8
			if ok {
				f := math.Floor(float64(v/scale) + rng.Float64())
				qv = int8(max(-127, min(127, f)))
			}
			dst = append(dst, byte(qv))
		}
	}
	return dst
}

// int8Scale is the scale of a bucket whose largest magnitude is m, and
// whether its values are quantised: not when the scale is 0 (all zero, or
// m too small to divide) or not finite (a NaN or Inf is passed on, and
// the loss check reports it).
func int8Scale(m float32) (scale float32, ok bool) {
	scale = m / 127
	if m == 0 || m != m || math.IsInf(float64(m), 0) {
		scale = m
	}
	return scale, scale != 0 && scale == scale && !math.IsInf(float64(scale), 0)
}

// encodeFeedback is Encode of v = g + residual followed by residual =
// v − decode(encoding), in two passes per bucket (sum and maximum, then
// quantise and subtract) instead of five over the vector, with the same
// bits: the same draws of the same generator (rand.Rand.Float64 of a PCG,
// drawn four at a time by pcg.uniforms), the same operations four values
// at a time with AVX2 (quantizeVec), and the decoded value computed as
// DecodeAdd computes it into a cleared buffer.
func (q *Int8) encodeFeedback(dst []byte, g, residual []float32, step uint64, rank int) []byte {
	v := residual[:len(g)]
	dst = header(dst, idInt8, len(g))
	dst = binary.AppendUvarint(dst, uint64(q.Bucket))
	nb := (len(g) + q.Bucket - 1) / q.Bucket
	scales := len(dst)
	dst = slices.Grow(dst, 4*nb+len(g))[:scales+4*nb+len(g)]
	vals := dst[scales+4*nb:]
	rng := newPCG(step, uint64(rank))
	if cap(q.draws) < q.Bucket {
		q.draws = make([]float64, q.Bucket)
	}
	for b := range nb {
		lo, hi := b*q.Bucket, min(len(g), (b+1)*q.Bucket)
		part, in, out := v[lo:hi], g[lo:hi], vals[lo:hi]
		// The largest magnitude, as the largest of the magnitudes' bits
		// (ordered as the magnitudes are, without float max's NaN and
		// zero rules); a NaN (bits above +Inf's) takes Encode's own
		// reduction, whose NaN the encoding carries.
		var mb uint32
		for i, x := range in {
			y := x + part[i]
			part[i] = y
			mb = max(mb, math.Float32bits(y)&^(1<<31))
		}
		m := math.Float32frombits(mb)
		if mb > 0x7f800000 {
			m = 0
			for _, y := range part {
				m = max(m, abs32(y))
			}
		}
		scale, ok := int8Scale(m)
		putF32(dst[scales+4*b:], scale)
		if !ok {
			for i, y := range part {
				out[i] = 0
				part[i] = y - (0 + float32(0)*scale)
			}
			continue
		}
		// The draws first (the generator is serial), then the
		// quantisation, four values at a time where the CPU can.
		us := q.draws[:len(part)]
		rng.uniforms(us)
		for i := quantizeVec(part, us, out, scale); i < len(part); i++ {
			y := part[i]
			// ⌊f⌋ of f in [−128, 128) as math.Floor computes it: truncate,
			// then step down below zero.
			f := float64(y/scale) + us[i]
			fl := int64(f)
			if float64(fl) > f {
				fl--
			}
			qv := int8(max(-127, min(127, fl)))
			out[i] = byte(qv)
			part[i] = y - (0 + float32(float32(qv)*scale))
		}
	}
	return dst
}

// EncodedLen is the length of the encoding of n values.
func (q *Int8) EncodedLen(n int) int {
	return headerLen(n) + uvarintLen(uint64(q.Bucket)) + 4*((n+q.Bucket-1)/q.Bucket) + n
}

func (q *Int8) DecodeAdd(out []float32, src []byte) error {
	body, err := readHeader(src, idInt8, len(out))
	if err != nil {
		return err
	}
	bucket, n := binary.Uvarint(body)
	if n <= 0 || bucket == 0 || bucket > 1<<24 {
		return corrupt("int8: bad bucket size")
	}
	body = body[n:]
	nb := (len(out) + int(bucket) - 1) / int(bucket)
	if len(body) != 4*nb+len(out) {
		return corrupt("int8: body of %d bytes, want %d for %d values", len(body), 4*nb+len(out), len(out))
	}
	vals := body[4*nb:]
	for b := range nb {
		scale := getF32(body[4*b:])
		lo := b * int(bucket)
		for i := lo; i < min(len(out), lo+int(bucket)); i++ {
			out[i] += float32(int8(vals[i])) * scale
		}
	}
	return nil
}
