package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DefaultSignBucket is the number of values sharing one scale.
const DefaultSignBucket = 1024

// Sign sends one bit per value, the sign, and per bucket of values one
// float32 scale, the bucket's mean magnitude (the 1-bit Adam / EF-signSGD
// scaled sign): 32× less than float32 at large buckets. Body:
//
//	[bucket uvarint][nb float32 scales][ceil(n/8) bytes, bit i set: x[i] ≥ 0]
type Sign struct{ Bucket int }

// NewSign returns a Sign codec with the given bucket size (> 0).
func NewSign(bucket int) (*Sign, error) {
	if bucket < 1 || bucket > 1<<24 {
		return nil, fmt.Errorf("%w: sign bucket %d, want 1..2^24", ErrInvalid, bucket)
	}
	return &Sign{Bucket: bucket}, nil
}

func (s *Sign) Name() string { return fmt.Sprintf("sign:%d", s.Bucket) }

func (s *Sign) Encode(dst []byte, x []float32, _ uint64, _ int) []byte {
	dst = header(dst, idSign, len(x))
	dst = binary.AppendUvarint(dst, uint64(s.Bucket))
	for b := 0; b < len(x); b += s.Bucket {
		part := x[b:min(len(x), b+s.Bucket)]
		var sum float64
		for _, v := range part {
			sum += float64(abs32(v))
		}
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(sum/float64(len(part)))))
	}
	// Bit i set when x[i]'s sign bit is clear; branch-free, eight values
	// per byte.
	full := len(x) &^ 7
	for i := 0; i < full; i += 8 {
		v := x[i : i+8 : i+8]
		var bits uint32
		for j, f := range v {
			bits |= (^math.Float32bits(f) >> 31) << j
		}
		dst = append(dst, byte(bits))
	}
	if full < len(x) {
		var bits uint32
		for j, f := range x[full:] {
			bits |= (^math.Float32bits(f) >> 31) << j
		}
		dst = append(dst, byte(bits))
	}
	return dst
}

// EncodedLen is the length of the encoding of n values.
func (s *Sign) EncodedLen(n int) int {
	return headerLen(n) + uvarintLen(uint64(s.Bucket)) + 4*((n+s.Bucket-1)/s.Bucket) + (n+7)/8
}

func (s *Sign) DecodeAdd(out []float32, src []byte) error {
	body, err := readHeader(src, idSign, len(out))
	if err != nil {
		return err
	}
	bucket, n := binary.Uvarint(body)
	if n <= 0 || bucket == 0 || bucket > 1<<24 {
		return corrupt("sign: bad bucket size")
	}
	body = body[n:]
	nb := (len(out) + int(bucket) - 1) / int(bucket)
	if len(body) != 4*nb+(len(out)+7)/8 {
		return corrupt("sign: body of %d bytes, want %d for %d values", len(body), 4*nb+(len(out)+7)/8, len(out))
	}
	bits := body[4*nb:]
	for b := range nb {
		// out[i] += scale for bit i set, else −scale (flipping the sign
		// bit: adding it is exactly subtracting scale), branch-free.
		scale := binary.LittleEndian.Uint32(body[4*b:])
		lo := b * int(bucket)
		hi := min(len(out), lo+int(bucket))
		o := out[lo:hi]
		i := 0
		if lo%8 == 0 { // a byte of bits at a time
			bs := bits[lo/8:]
			for ; i+8 <= len(o); i += 8 {
				oo, inv := o[i:i+8:i+8], uint32(^bs[i/8])
				for j := range oo {
					oo[j] += math.Float32frombits(scale ^ (inv>>j&1)<<31)
				}
			}
		}
		for ; i < len(o); i++ {
			k := lo + i
			neg := uint32(^bits[k>>3]>>(k&7)) & 1
			o[i] += math.Float32frombits(scale ^ neg<<31)
		}
	}
	return nil
}

// encodeFeedback is Encode of v = g + residual followed by residual =
// v − decode(encoding), in three passes instead of five. The decoded
// value is computed as DecodeAdd computes it into a cleared buffer,
// 0 + (±scale), so the residual has the generic path's bits (−0 included).
func (s *Sign) encodeFeedback(dst []byte, g, residual []float32, _ uint64, _ int) []byte {
	v := residual[:len(g)]
	for i, x := range g {
		v[i] = x + v[i]
	}
	dst = s.Encode(dst, v, 0, 0)
	nb := (len(v) + s.Bucket - 1) / s.Bucket
	bits := dst[len(dst)-(len(v)+7)/8:]
	scales := dst[len(dst)-len(bits)-4*nb : len(dst)-len(bits)]
	for b := range nb {
		scale := binary.LittleEndian.Uint32(scales[4*b:])
		lo := b * s.Bucket
		hi := min(len(v), lo+s.Bucket)
		// As DecodeAdd, subtracting 0 + (±scale): 0 + (±0) is +0.
		o := v[lo:hi]
		i := 0
		if lo%8 == 0 {
			bs := bits[lo/8:]
			for ; i+8 <= len(o); i += 8 {
				oo, inv := o[i:i+8:i+8], uint32(^bs[i/8])
				for j := range oo {
					oo[j] -= 0 + math.Float32frombits(scale^(inv>>j&1)<<31)
				}
			}
		}
		for ; i < len(o); i++ {
			k := lo + i
			neg := uint32(^bits[k>>3]>>(k&7)) & 1
			o[i] -= 0 + math.Float32frombits(scale^neg<<31)
		}
	}
	return dst
}
