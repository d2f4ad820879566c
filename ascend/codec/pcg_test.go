package codec

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestPCGJumpConstants: the four-step constants are mul⁴ and
// inc·(1+mul+mul²+mul³) mod 2¹²⁸.
func TestPCGJumpConstants(t *testing.T) {
	u128 := func(hi, lo uint64) *big.Int {
		x := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		return x.Or(x, new(big.Int).SetUint64(lo))
	}
	mod := new(big.Int).Lsh(big.NewInt(1), 128)
	mul, inc := u128(pcgMulHi, pcgMulLo), u128(pcgIncHi, pcgIncLo)
	pow := big.NewInt(1)
	sum := new(big.Int)
	for range 4 {
		sum.Add(sum, pow)
		pow.Mul(pow, mul).Mod(pow, mod)
	}
	if got := u128(pcgMul4Hi, pcgMul4Lo); got.Cmp(pow) != 0 {
		t.Errorf("mul⁴ = %#x, constant %#x", pow, got)
	}
	inc4 := sum.Mul(sum, inc).Mod(sum, mod)
	if got := u128(pcgInc4Hi, pcgInc4Lo); got.Cmp(inc4) != 0 {
		t.Errorf("inc·(1+mul+mul²+mul³) = %#x, constant %#x", inc4, got)
	}
}

// TestPCGMatchesStdlib: uniforms draws what rand.Rand.Float64 of a PCG
// with the same seeds draws, in calls of every length around the lanes'
// boundaries, one after another (the state carries over).
func TestPCGMatchesStdlib(t *testing.T) {
	for _, seed := range [][2]uint64{{0, 0}, {1, 2}, {7, 3}, {1 << 63, ^uint64(0)}} {
		ref := rand.New(rand.NewPCG(seed[0], seed[1]))
		p := newPCG(seed[0], seed[1])
		buf := make([]float64, 300)
		for _, n := range []int{0, 1, 3, 4, 7, 8, 9, 12, 15, 16, 17, 256, 255, 1, 300} {
			us := buf[:n]
			p.uniforms(us)
			for i, u := range us {
				if want := ref.Float64(); u != want {
					t.Fatalf("seed %v, call of %d: draw %d = %v, stdlib %v", seed, n, i, u, want)
				}
			}
		}
	}
}

// BenchmarkUniforms: a bucket's draws, four lanes against the serial
// generator.
func BenchmarkUniforms(b *testing.B) {
	us := make([]float64, DefaultInt8Bucket)
	b.Run("lanes", func(b *testing.B) {
		p := newPCG(1, 2)
		for b.Loop() {
			p.uniforms(us)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(us)), "ns/value")
	})
	b.Run("serial", func(b *testing.B) {
		p := rand.NewPCG(1, 2)
		for b.Loop() {
			for i := range us {
				us[i] = float64(p.Uint64()<<11>>11) / (1 << 53)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(us)), "ns/value")
	})
}
