package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Feedback wraps a codec with error feedback: each Encode compresses the
// gradient plus the residual the previous steps left, and keeps what this
// encoding dropped as the new residual, so nothing is lost, only delayed.
type Feedback struct {
	Codec    Codec
	Residual []float32 // what the last encoding dropped (saved in checkpoints)

	v   []float32 // gradient + residual
	dec []float32 // decoded scratch
	buf []byte    // encoding, reused
}

// NewFeedback returns error feedback for gradients of n values.
func NewFeedback(c Codec, n int) *Feedback {
	return &Feedback{Codec: c, Residual: make([]float32, n), v: make([]float32, n), dec: make([]float32, n)}
}

// Encode compresses g + residual, updates the residual and returns the
// encoding (valid until the next Encode).
func (f *Feedback) Encode(g []float32, step uint64, rank int) ([]byte, error) {
	if len(g) != len(f.Residual) {
		return nil, fmt.Errorf("%w: gradient of %d values, feedback for %d", ErrInvalid, len(g), len(f.Residual))
	}
	if fe, ok := f.Codec.(feedbackEncoder); ok {
		f.buf = fe.encodeFeedback(f.buf, g, f.Residual, step, rank)
		return f.buf, nil
	}
	for i, x := range g {
		f.v[i] = x + f.Residual[i]
	}
	f.buf = f.Codec.Encode(f.buf, f.v, step, rank)
	clear(f.dec)
	if err := f.Codec.DecodeAdd(f.dec, f.buf); err != nil {
		return nil, fmt.Errorf("codec %s cannot decode its own output: %w", f.Codec.Name(), err)
	}
	for i := range f.Residual {
		f.Residual[i] = f.v[i] - f.dec[i]
	}
	return f.buf, nil
}

// feedbackEncoder is implemented by codecs that fuse Feedback.Encode's
// five passes (sum, encode, clear, decode, subtract) into fewer, with the
// same bits: encodeFeedback encodes g + residual into dst and leaves in
// residual exactly what the generic path leaves.
type feedbackEncoder interface {
	encodeFeedback(dst []byte, g, residual []float32, step uint64, rank int) []byte
}

// Reset clears the residual (e.g. when compression is switched off).
func (f *Feedback) Reset() { clear(f.Residual) }

const feedbackMagic = "CTEF1"

// MarshalBinary encodes the codec name and the residual.
func (f *Feedback) MarshalBinary() ([]byte, error) {
	name := f.Codec.Name()
	b := append([]byte(feedbackMagic), byte(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(f.Residual)))
	for _, v := range f.Residual {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b, nil
}

// UnmarshalBinary restores a residual written by MarshalBinary. The codec
// must be the same one (by name) and the length must match.
func (f *Feedback) UnmarshalBinary(b []byte) error {
	if len(b) < len(feedbackMagic)+1 || string(b[:len(feedbackMagic)]) != feedbackMagic {
		return corrupt("error-feedback state: bad magic")
	}
	b = b[len(feedbackMagic):]
	nl := int(b[0])
	if len(b) < 1+nl {
		return corrupt("error-feedback state: truncated codec name")
	}
	name := string(b[1 : 1+nl])
	if name != f.Codec.Name() {
		return fmt.Errorf("%w: error-feedback state is for codec %q, this run uses %q", ErrInvalid, name, f.Codec.Name())
	}
	b = b[1+nl:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n != uint64(len(f.Residual)) {
		return fmt.Errorf("%w: error-feedback state has %d values, want %d", ErrCorrupt, n, len(f.Residual))
	}
	b = b[k:]
	if len(b) != 4*len(f.Residual) {
		return corrupt("error-feedback state: %d bytes for %d values", len(b), len(f.Residual))
	}
	for i := range f.Residual {
		f.Residual[i] = getF32(b[4*i:])
	}
	return nil
}
