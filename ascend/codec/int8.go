package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// DefaultInt8Bucket is the number of values sharing one scale.
const DefaultInt8Bucket = 256

// Int8 is QSGD-style stochastic quantisation to 8 bits: per bucket, scale =
// max|x|/127 and q = ⌊x/scale + u⌋ with u uniform in [0, 1), an unbiased
// estimate of x. The generator is seeded by (step, rank, bucket), so the
// encoding is reproducible. Body:
//
//	[bucket uvarint][nb float32 scales][n int8]
type Int8 struct{ Bucket int }

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
		scale := m / 127
		if m == 0 || m != m || math.IsInf(float64(m), 0) {
			scale = m // 0: all zero; NaN/Inf: passed on, the loss check reports it
		}
		putF32(dst[scales+4*b:], scale)
		for _, v := range part {
			var qv int8
			if scale != 0 && scale == scale && !math.IsInf(float64(scale), 0) {
				f := math.Floor(float64(v/scale) + rng.Float64())
				qv = int8(max(-127, min(127, f)))
			}
			dst = append(dst, byte(qv))
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
