//go:build !purego

package ascend

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasAVX2 is read-only after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// addAVX2 stores a[i]+b[i] into dst[i] for i < n (reduce_amd64.s): 32
// floats per iteration in four 256-bit registers. n > 0, a multiple of 32.
//
//go:noescape
func addAVX2(dst, a, b *float32, n int)

// addFloats stores a[i]+b[i] into dst[i] for i < len(dst); dst may alias a
// or b exactly. Each sum is the same IEEE single-precision addition as Go's
// +, so results are bit-identical to the portable loop (which matters:
// ranks and restarts must agree to the bit). The vector loop runs at 3-4x
// the portable loop's speed on data in cache (go test -bench Add ./ascend).
func addFloats(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	v := 0
	if hasAVX2 {
		if v = n &^ 31; v > 0 {
			addAVX2(&dst[0], &a[0], &b[0], v)
		}
	}
	addPortable(dst[v:], a[v:], b[v:])
}

//go:noescape
func addAVX2NT(dst, a, b *float32, n int)

//go:noescape
func copyAVX2NT(dst, src *float32, n int)

//go:noescape
func addAVX2Two(dst, far, a, b *float32, scale float32, n int, mode int)

// addAVX2Two's modes: which outputs it stores around the caches.
const (
	twoFarNT = 1
	twoDstNT = 2
)

//go:noescape
func scaleAVX2(buf *float32, s float32, n int, div int)

// ntHead is how many elements of dst precede its first 32-byte boundary.
func ntHead(dst []float32) int {
	return int((32-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%32)%32) / 4
}

// addFloatsNT is addFloats with non-temporal stores for the bulk: for
// vectors that do not fit in cache, where writing around the caches saves
// reading dst in first. Same bits as addFloats; the stores are fenced.
func addFloatsNT(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	h := min(ntHead(dst), n)
	if !hasAVX2 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%4 != 0 {
		addFloats(dst, a, b)
		return
	}
	addPortable(dst[:h], a[:h], b[:h])
	v := (n - h) &^ 31
	if v > 0 {
		addAVX2NT(&dst[h], &a[h], &b[h], v)
	}
	addPortable(dst[h+v:], a[h+v:], b[h+v:])
}

// addFloatsNT2 stores a[i]+b[i] into both dst[i] and dst2[i] with
// non-temporal stores for the bulk (see addFloatsNT): one read of the
// operands for two results. It reports false, storing nothing, when it
// cannot (no AVX2, or dst and dst2 not equally aligned to 32 bytes), and
// then both ranks of a direct AllReduce do (their buffers' alignments
// differ by the same amount on each). dst and dst2 may each be a or b
// exactly (every element is loaded before it is stored), but must not
// overlap them otherwise, nor each other.
func addFloatsNT2(dst, dst2, a, b []float32) bool {
	p, p2 := uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(unsafe.Pointer(unsafe.SliceData(dst2)))
	if !hasAVX2 || p%4 != 0 || p%32 != p2%32 {
		return false
	}
	addTwo(dst, dst2, a, b, 1, twoDstNT|twoFarNT)
	return true
}

// addFloatsKeep stores (a[i]+b[i])·scale into both dst[i] and far[i]:
// into dst with ordinary stores, so the results stay in this core's cache
// for the reader on this core, and into far, for a reader on another
// core, with non-temporal stores for the bulk when nt (as addFloatsNT:
// the reader will find them in memory rather than pull each line out of
// this core's cache), else with ordinary stores too (best where far's
// lines were just read by this core: a non-temporal store would first
// evict them). scale is 1 (a sum: the product changes no bit) or 1/2 (the
// mean of two: the same bits as dividing the sum by 2, both being the
// correctly rounded value of the same exact quotient). It reports false,
// storing nothing, only without AVX2 (far needs no particular alignment:
// its head is stored plainly). dst and far may each be a or b exactly
// (every element is loaded before it is stored), but must not overlap
// them otherwise, nor each other.
func addFloatsKeep(dst, far, a, b []float32, scale float32, nt bool) bool {
	if !hasAVX2 || uintptr(unsafe.Pointer(unsafe.SliceData(far)))%4 != 0 {
		return false
	}
	mode := 0
	if nt {
		mode = twoFarNT
	}
	addTwo(dst, far, a, b, scale, mode)
	return true
}

// addTwo is addFloatsNT2's and addFloatsKeep's body: the elements before
// far's first 32-byte boundary and after the last whole block of 32 go
// through the portable loop (scaled alike), the rest through addAVX2Two in
// mode. With twoDstNT dst must be aligned as far is.
func addTwo(dst, far, a, b []float32, scale float32, mode int) {
	n := len(dst)
	far, a, b = far[:n], a[:n], b[:n]
	portable := func(lo, hi int) {
		addPortable(dst[lo:hi], a[lo:hi], b[lo:hi])
		if scale != 1 {
			for i := lo; i < hi; i++ {
				dst[i] *= scale
			}
		}
		copy(far[lo:hi], dst[lo:hi])
	}
	h := min(ntHead(far), n)
	portable(0, h)
	v := (n - h) &^ 31
	if v > 0 {
		addAVX2Two(&dst[h], &far[h], &a[h], &b[h], scale, v, mode)
	}
	portable(h+v, n)
}

// divideVec divides the bulk of buf by n with vector instructions and
// returns how many leading elements it did (a multiple of 32; 0 without
// AVX2). A power of two is a multiplication by its reciprocal, which is
// exact: the same bits as the division.
func divideVec(buf []float32, n int) int {
	v := len(buf) &^ 31
	if !hasAVX2 || v == 0 {
		return 0
	}
	if d := float32(n); n > 0 && n&(n-1) == 0 {
		scaleAVX2(&buf[0], 1/d, v, 0)
	} else {
		scaleAVX2(&buf[0], d, v, 1)
	}
	return v
}

// copyNT is copy with non-temporal stores for the bulk (see addFloatsNT).
func copyNT(dst, src []float32) {
	n := min(len(dst), len(src))
	h := min(ntHead(dst), n)
	if !hasAVX2 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%4 != 0 {
		copy(dst, src)
		return
	}
	copy(dst[:h], src[:h])
	v := (n - h) &^ 31
	if v > 0 {
		copyAVX2NT(&dst[h], &src[h], v)
	}
	copy(dst[h+v:n], src[h+v:n])
}
