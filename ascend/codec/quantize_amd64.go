//go:build !purego

package codec

import "golang.org/x/sys/cpu"

// hasAVX2 is read-only after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// quantizeAVX2 quantises n values (n > 0, a multiple of 4) four at a time
// (quantize_amd64.s): q = clamp(⌊float64(y[i]/scale) + u[i]⌋, −127, 127),
// out[i] = byte(q), y[i] −= 0 + float32(q)·scale. Every operation is the
// IEEE one the portable loop performs (single-precision division,
// widening, double-precision addition, rounding down, the clamp, the
// product and the difference), so the bits are the same.
//
//go:noescape
func quantizeAVX2(y *float32, u *float64, out *byte, scale float32, n int)

// quantizeVec quantises the longest multiple of 4 of y's values it can and
// returns how many.
func quantizeVec(y []float32, u []float64, out []byte, scale float32) int {
	v := len(y) &^ 3
	if !hasAVX2 || v == 0 {
		return 0
	}
	_, _ = u[v-1], out[v-1]
	quantizeAVX2(&y[0], &u[0], &out[0], scale, v)
	return v
}
