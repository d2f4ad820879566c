//go:build !amd64 || purego

package ascend

// addFloats stores a[i]+b[i] into dst[i] for i < len(dst); dst may alias a
// or b exactly.
func addFloats(dst, a, b []float32) { addPortable(dst, a, b) }

// addFloatsNT is addFloats.
func addFloatsNT(dst, a, b []float32) { addFloats(dst, a, b) }

// addFloatsNT2 cannot: the caller stores the sums its own way.
func addFloatsNT2(dst, dst2, a, b []float32) bool { return false }

// addFloatsKeep cannot either.
func addFloatsKeep(dst, far, a, b []float32, scale float32, farNT bool) bool { return false }

// divideVec does nothing: divide's loop does it all.
func divideVec(buf []float32, n int) int { return 0 }

// copyNT is copy.
func copyNT(dst, src []float32) { copy(dst, src) }
