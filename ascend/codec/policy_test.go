package codec

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	const mb = 1 << 20
	// 4 MiB of gradient on 4 ranks: a ring sends 6 MiB.
	dense := 4 * mb
	sent := 1.5 * float64(dense)
	tests := []struct {
		name      string
		m         Measure
		want      string
		reason    string
		needAbove float64
	}{
		{"one rank", Measure{DenseBytes: dense, Ranks: 1, BytesPerSec: 1e9, Compute: time.Millisecond}, "none", "nothing to communicate", 0},
		{"no bandwidth measured", Measure{DenseBytes: dense, Ranks: 4, Compute: time.Millisecond}, "none", "no measurement", 0},
		{"no compute measured", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: 1e9}, "none", "no measurement", 0},
		// 6 MiB at 10 GB/s = 0.63 ms < 10 ms of computation.
		{"fast link", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: 10e9, Compute: 10 * time.Millisecond}, "none", "already fits", 0},
		// Exactly as long as computation: still none.
		{"balanced", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: sent / 0.01, Compute: 10 * time.Millisecond}, "none", "already fits", 0},
		// 3× too slow: int8 (≈ 3.9×) suffices.
		{"3x", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: sent / 0.03, Compute: 10 * time.Millisecond}, "int8:256", "int8:256 cuts", 2.9},
		// 10× too slow: sign (≈ 31×).
		{"10x", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: sent / 0.1, Compute: 10 * time.Millisecond}, "sign:1024", "sign:1024 cuts", 9.9},
		// 60×: top-1 % (≈ 66× with 1-byte index gaps).
		{"60x", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: sent / 0.6, Compute: 10 * time.Millisecond}, "topk:0.01", "topk:0.01 cuts", 59},
		// 10000×: nothing suffices; the most compressing one.
		{"hopeless", Measure{DenseBytes: dense, Ranks: 4, BytesPerSec: sent / 100, Compute: 10 * time.Millisecond}, "topk:0.001", "leaves some exposed", 9999},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Choose(tc.m)
			if c.Codec != tc.want || !strings.Contains(c.Reason, tc.reason) {
				t.Fatalf("Choose() = %+v, want %s (%q)", c, tc.want, tc.reason)
			}
			if c.Need < tc.needAbove {
				t.Errorf("Need %.3g, want > %v", c.Need, tc.needAbove)
			}
			if c.Codec != "none" && c.Ratio < math.Min(c.Need, 100) && tc.name != "hopeless" {
				t.Errorf("chose %s with ratio %.3g below the need %.3g", c.Codec, c.Ratio, c.Need)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	const n = 100_000
	tests := []struct {
		codec    string
		min, max float64
	}{
		{"none", 0.99, 1},
		{"int8", 3.8, 4},
		{"sign", 30, 32},
		{"topk:0.01", 60, 100},
	}
	for _, tc := range tests {
		c := mustCodec(t, tc.codec)
		r := Ratio(c, n)
		if r < tc.min || r > tc.max {
			t.Errorf("Ratio(%s) = %.3g, want %v..%v", tc.codec, r, tc.min, tc.max)
		}
		if s, ok := c.(sizer); ok {
			if got := len(c.Encode(nil, randVec(1, n), 0, 0)); got != s.EncodedLen(n) {
				t.Errorf("%s: EncodedLen %d, encoding has %d bytes", tc.codec, s.EncodedLen(n), got)
			}
		}
	}
}

// TestChoosePriced: with the exchanges measured, a codec that the bytes
// call for is kept only when its exchange is faster than the allreduce.
func TestChoosePriced(t *testing.T) {
	const dense = 400_000   // 100 k values, the built-in model's size
	sent := 4.0 / 3 * dense // 3 ranks
	ex := func(int8, sign, top1, top01 time.Duration) map[string]time.Duration {
		return map[string]time.Duration{"int8:256": int8, "sign:1024": sign, "topk:0.01": top1, "topk:0.001": top01}
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		m       Measure
		want    string
		because string
	}{
		// The bytes call for sign (4× need), and its exchange is faster.
		{"sign pays", Measure{DenseBytes: dense, Ranks: 3, BytesPerSec: sent / 0.004, Compute: ms,
			Exchange: ex(3*ms, 2*ms, 3*ms, 3*ms), Dense: 4 * ms}, "sign:1024", "cuts traffic"},
		// Ranks waiting for each other: every exchange slower than 4 ms.
		{"no codec pays", Measure{DenseBytes: dense, Ranks: 3, BytesPerSec: sent / 0.004, Compute: ms,
			Exchange: ex(9*ms, 8*ms, 7*ms, 7*ms), Dense: 4 * ms}, "none", "no codec pays"},
		// Sign is slow to exchange here but top-1 % is fast: the fastest that pays.
		{"another codec pays", Measure{DenseBytes: dense, Ranks: 3, BytesPerSec: sent / 0.004, Compute: ms,
			Exchange: ex(5*ms, 5*ms, 2*ms, 3*ms), Dense: 4 * ms}, "topk:0.01", "topk:0.01 exchanges in 2 ms"},
		// Nothing measured about exchanges: the byte rule alone.
		{"unpriced", Measure{DenseBytes: dense, Ranks: 3, BytesPerSec: sent / 0.004, Compute: ms}, "sign:1024", "cuts traffic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Choose(tc.m)
			if c.Codec != tc.want || !strings.Contains(c.Reason, tc.because) {
				t.Fatalf("Choose = %+v, want %s (%q)", c, tc.want, tc.because)
			}
		})
	}
}
