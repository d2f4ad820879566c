package ascend

import "testing"

// Wire conversion options for 1 MiB frames: the zero-copy view used on
// little-endian hosts vs encoding/binary into a preallocated buffer (the
// portable path), and the matching reduction kernels.
func BenchmarkWire(b *testing.B) {
	const n = 1 << 18
	f, g := make([]float32, n), make([]float32, n)
	buf := make([]byte, 4*n)
	for i := range f {
		f[i] = float32(i)
	}
	b.Run("view/unsafe", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			buf = asBytes(f)
		}
	})
	b.Run("encode/binary", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			encodeLE(buf, f)
		}
	})
	b.Run("decode/binary", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			decodeLE(g, buf)
		}
	})
	b.Run("reduce/native", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			reduce(g, f, Sum)
		}
	})
	b.Run("reduce/binary", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			reduceLE(g, g, buf[:4*n], Sum)
		}
	})
	b.Run("reduce/max", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			reduce(g, f, Max)
		}
	})
}
