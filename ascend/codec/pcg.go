package codec

import "math/bits"

// pcg is math/rand/v2's PCG — the same state, the same steps and the same
// DXSM output, so the same draws — whose uniforms method draws four values
// at a time from four states one step apart, each advanced four steps at
// once (jump-ahead: state·mul⁴ + inc·(1+mul+mul²+mul³)). The generator is a
// serial chain of 128-bit multiply-adds; four chains let the CPU overlap
// their multiplications where one waits for the last. The constants are
// the standard library's (math/rand/v2/pcg.go); TestPCGMatchesStdlib holds
// the draws equal.
type pcg struct{ hi, lo uint64 }

const (
	pcgMulHi = 2549297995355413924
	pcgMulLo = 4865540595714422341
	pcgIncHi = 6364136223846793005
	pcgIncLo = 1442695040888963407
	// Four steps at once, mod 2¹²⁸ (TestPCGJumpConstants).
	pcgMul4Hi = 0xf4dd417327db7a9b
	pcgMul4Lo = 0xd194dfbe42d45771
	pcgInc4Hi = 0x93d2c4665cea0ea8
	pcgInc4Lo = 0xca268d515f068aa4
)

// newPCG is rand.NewPCG(seed1, seed2).
func newPCG(seed1, seed2 uint64) pcg { return pcg{seed1, seed2} }

// pcgStep is state·(mh, ml) + (ih, il) mod 2¹²⁸.
func pcgStep(hi, lo, mh, ml, ih, il uint64) (uint64, uint64) {
	h, l := bits.Mul64(lo, ml)
	h += hi*ml + lo*mh
	l, c := bits.Add64(l, il, 0)
	h, _ = bits.Add64(h, ih, c)
	return h, l
}

// pcgUnit is the uniform in [0, 1) that rand.Rand.Float64 makes of the
// draw from state (hi, lo): DXSM, then the top 53 bits.
func pcgUnit(hi, lo uint64) float64 {
	hi ^= hi >> 32
	hi *= 0xda942042e4dd58b5
	hi ^= hi >> 48
	hi *= lo | 1
	return float64(int64(hi<<11>>11)) / (1 << 53) // below 2⁵³: exact either way, and the signed conversion is one instruction
}

// uniforms fills us with the generator's next len(us) uniforms, as
// rand.New(p).Float64 would, and advances p past them.
func (p *pcg) uniforms(us []float64) {
	i := 0
	if len(us) >= 8 {
		h0, l0 := pcgStep(p.hi, p.lo, pcgMulHi, pcgMulLo, pcgIncHi, pcgIncLo)
		h1, l1 := pcgStep(h0, l0, pcgMulHi, pcgMulLo, pcgIncHi, pcgIncLo)
		h2, l2 := pcgStep(h1, l1, pcgMulHi, pcgMulLo, pcgIncHi, pcgIncLo)
		h3, l3 := pcgStep(h2, l2, pcgMulHi, pcgMulLo, pcgIncHi, pcgIncLo)
		for ; i+4 <= len(us); i += 4 {
			u := us[i : i+4 : i+4]
			u[0], u[1], u[2], u[3] = pcgUnit(h0, l0), pcgUnit(h1, l1), pcgUnit(h2, l2), pcgUnit(h3, l3)
			p.hi, p.lo = h3, l3
			h0, l0 = pcgStep(h0, l0, pcgMul4Hi, pcgMul4Lo, pcgInc4Hi, pcgInc4Lo)
			h1, l1 = pcgStep(h1, l1, pcgMul4Hi, pcgMul4Lo, pcgInc4Hi, pcgInc4Lo)
			h2, l2 = pcgStep(h2, l2, pcgMul4Hi, pcgMul4Lo, pcgInc4Hi, pcgInc4Lo)
			h3, l3 = pcgStep(h3, l3, pcgMul4Hi, pcgMul4Lo, pcgInc4Hi, pcgInc4Lo)
		}
	}
	for ; i < len(us); i++ {
		p.hi, p.lo = pcgStep(p.hi, p.lo, pcgMulHi, pcgMulLo, pcgIncHi, pcgIncLo)
		us[i] = pcgUnit(p.hi, p.lo)
	}
}
