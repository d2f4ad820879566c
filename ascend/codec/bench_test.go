package codec

import (
	"fmt"
	"testing"
)

// BenchmarkCodec: encode (with error feedback) and decode throughput in
// input bytes per second, 1 Mi floats.
func BenchmarkCodec(b *testing.B) {
	const n = 1 << 20
	g := randVec(9, n)
	for _, name := range []string{"topk:0.01", "sign", "int8", "none"} {
		f := NewFeedback(mustCodec(b, name), n)
		b.Run(fmt.Sprintf("encode/%s", name), func(b *testing.B) {
			b.SetBytes(4 * n)
			for i := 0; b.Loop(); i++ {
				if _, err := f.Encode(g, uint64(i), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		enc, _ := f.Encode(g, 0, 0)
		out := make([]float32, n)
		b.Run(fmt.Sprintf("decode/%s", name), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				if err := f.Codec.DecodeAdd(out, enc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(4*n)/float64(len(enc)), "x-smaller")
		})
	}
}
