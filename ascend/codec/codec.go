package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("codec: corrupt payload")

// ErrInvalid reports a bad argument.
var ErrInvalid = errors.New("codec: invalid argument")

// Codec ids on the wire.
const (
	idTopK  byte = 1
	idSign  byte = 2
	idInt8  byte = 3
	idDense byte = 4
)

// Codec is a lossy (or, for Dense, lossless) gradient encoding. Codecs keep
// scratch buffers: use one per goroutine.
type Codec interface {
	// Name is the codec's flag name, e.g. "topk:0.01".
	Name() string
	// Encode appends the encoding of x to dst[:0] and returns it. step
	// and rank seed any randomness.
	Encode(dst []byte, x []float32, step uint64, rank int) []byte
	// DecodeAdd adds the decoded values of src into out, whose length must
	// be the encoded n.
	DecodeAdd(out []float32, src []byte) error
}

// corrupt builds a decoding error.
func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

// header appends the common header.
func header(dst []byte, id byte, n int) []byte {
	dst = append(dst[:0], id)
	return binary.AppendUvarint(dst, uint64(n))
}

// headerLen is the length of the common header for n values.
func headerLen(n int) int { return 1 + uvarintLen(uint64(n)) }

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// readHeader checks the codec id and n against out and returns the body.
func readHeader(src []byte, id byte, n int) ([]byte, error) {
	if len(src) == 0 {
		return nil, corrupt("empty payload")
	}
	if src[0] != id {
		return nil, corrupt("codec id %d, want %d", src[0], id)
	}
	m, k := binary.Uvarint(src[1:])
	if k <= 0 {
		return nil, corrupt("bad length varint")
	}
	if m != uint64(n) {
		return nil, corrupt("payload has %d values, buffer %d", m, n)
	}
	return src[1+k:], nil
}

func putF32(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
func getF32(b []byte) float32    { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// Dense is the identity codec (float32 values), the baseline the others
// are measured against.
type Dense struct{}

func (Dense) Name() string { return "none" }

func (Dense) Encode(dst []byte, x []float32, _ uint64, _ int) []byte {
	dst = header(dst, idDense, len(x))
	for _, v := range x {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// EncodedLen is the length of the encoding of n values.
func (Dense) EncodedLen(n int) int { return headerLen(n) + 4*n }

func (Dense) DecodeAdd(out []float32, src []byte) error {
	body, err := readHeader(src, idDense, len(out))
	if err != nil {
		return err
	}
	if len(body) != 4*len(out) {
		return corrupt("dense body of %d bytes for %d values", len(body), len(out))
	}
	for i := range out {
		out[i] += getF32(body[4*i:])
	}
	return nil
}

// Parse parses a codec flag: "none", "topk:RATIO" (kept fraction, e.g.
// 0.01), "sign" or "sign:BUCKET", "int8" or "int8:BUCKET".
func Parse(s string) (Codec, error) {
	name, arg, hasArg := cutColon(s)
	switch name {
	case "none", "dense", "":
		return Dense{}, nil
	case "topk":
		ratio := 0.01
		if hasArg {
			if _, err := fmt.Sscanf(arg, "%g", &ratio); err != nil {
				return nil, fmt.Errorf("%w: topk ratio %q", ErrInvalid, arg)
			}
		}
		return NewTopK(ratio)
	case "sign", "1bit", "onebit":
		b := DefaultSignBucket
		if hasArg {
			if _, err := fmt.Sscanf(arg, "%d", &b); err != nil {
				return nil, fmt.Errorf("%w: sign bucket %q", ErrInvalid, arg)
			}
		}
		return NewSign(b)
	case "int8", "qsgd":
		b := DefaultInt8Bucket
		if hasArg {
			if _, err := fmt.Sscanf(arg, "%d", &b); err != nil {
				return nil, fmt.Errorf("%w: int8 bucket %q", ErrInvalid, arg)
			}
		}
		return NewInt8(b)
	}
	return nil, fmt.Errorf("%w: unknown codec %q (want none, topk:RATIO, sign[:BUCKET] or int8[:BUCKET]; powersgd:RANK where low-rank reduction is offered)", ErrInvalid, s)
}

func cutColon(s string) (name, arg string, ok bool) {
	for i := range len(s) {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
