package codec

import (
	"fmt"
	"math"
	"time"
)

// Ladder lists the codecs [Choose] picks from, from the most faithful (and
// least compressing) to the least: after int8 (4×), the 1-bit sign (32×,
// the momentum codec of 1-bit Adam), then top-k. Compression pays only
// when bandwidth, not computation, bounds a step, so the policy climbs
// only as far as it must.
var Ladder = []string{"int8", "sign", "topk:0.01", "topk:0.001"}

// Measure is what [Choose] decides from, measured during the uncompressed
// warm-up.
type Measure struct {
	// DenseBytes is the payload as float32 (4 × values).
	DenseBytes int
	// Ranks is the world size.
	Ranks int
	// BytesPerSec is the bandwidth a rank's allreduce achieved: the bytes
	// it sent, 2(Ranks−1)/Ranks·DenseBytes for a ring, over the time the
	// allreduce took.
	BytesPerSec float64
	// Compute is a step's computation time (forward, backward and
	// optimizer), behind which communication can hide.
	Compute time.Duration
	// Exchange is, per codec name of Ladder (canonical names), the
	// measured time of one compressed exchange of the payload (encoding,
	// its collectives, decoding), and Dense that of one uncompressed
	// allreduce measured alongside. With them, Choose also checks what
	// compression costs: on a fast link or with ranks waiting for each
	// other, the extra collectives and the encoding can take longer than
	// the bytes they save. Empty / zero: not measured.
	Exchange map[string]time.Duration
	Dense    time.Duration
}

// Choice is Choose's decision.
type Choice struct {
	// Codec is in Parse syntax; "none" for no compression.
	Codec string `json:"codec"`
	// Need is the traffic reduction that makes a step's communication
	// take as long as its computation: dense communication time over
	// computation time (≤ 1: none needed).
	Need float64 `json:"need"`
	// Ratio is the chosen codec's traffic reduction (1 for none).
	Ratio float64 `json:"ratio"`
	// Reason says why, in one sentence.
	Reason string `json:"reason"`
}

// priced is the communication time of a step with codec c (nil: none):
// the measured exchange, or for none the measured allreduce (Dense, else
// what BytesPerSec gives).
func (m Measure) priced(c Codec) (time.Duration, bool) {
	if c == nil {
		if m.Dense > 0 {
			return m.Dense, true
		}
		p := float64(m.Ranks)
		return time.Duration(2 * (p - 1) / p * float64(m.DenseBytes) / m.BytesPerSec * float64(time.Second)), true
	}
	t, ok := m.Exchange[c.Name()]
	return t, ok && t > 0
}

// Choose is the adaptive compression policy: train uncompressed for a
// warm-up (which the optimizer needs anyway, and which measures the link
// and the computation), then compress just enough that communication
// takes no longer than computation and so can be hidden behind it: the
// first codec of [Ladder] whose traffic reduction for this payload
// (through a [TwoPhase] exchange, which sends 2(n−1)/n of an encoding as
// a ring sends 2(n−1)/n of the vector) reaches Need. If none does, the
// most compressing one. When the exchanges are measured (Exchange), that
// choice stands only if its exchange beats the uncompressed allreduce;
// otherwise the codec with the fastest exchange that does, or none.
func Choose(m Measure) Choice {
	if m.Ranks < 2 || m.DenseBytes <= 0 {
		return Choice{Codec: "none", Ratio: 1, Reason: "nothing to communicate"}
	}
	if !(m.BytesPerSec > 0) || m.Compute <= 0 || math.IsInf(m.BytesPerSec, 0) {
		return Choice{Codec: "none", Ratio: 1, Reason: "no measurement: staying uncompressed"}
	}
	p := float64(m.Ranks)
	comm := 2 * (p - 1) / p * float64(m.DenseBytes) / m.BytesPerSec
	c := Choice{Need: comm / m.Compute.Seconds()}
	ms := func(s float64) string { return fmt.Sprintf("%.3g ms", s*1e3) }
	if c.Need <= 1 {
		c.Codec, c.Ratio = "none", 1
		c.Reason = fmt.Sprintf("communication (%s) already fits in computation (%s)", ms(comm), ms(m.Compute.Seconds()))
		return c
	}
	n := m.DenseBytes / 4
	for _, name := range Ladder {
		codec, err := Parse(name)
		if err != nil {
			panic(err) // Ladder is fixed
		}
		c.Codec, c.Ratio = codec.Name(), Ratio(codec, n)
		if c.Ratio >= c.Need {
			c.Reason = fmt.Sprintf("communication (%s) is %.3g× computation (%s): %s cuts traffic %.3g×",
				ms(comm), c.Need, ms(m.Compute.Seconds()), c.Codec, c.Ratio)
			return m.checkPrice(c, codec, n)
		}
	}
	c.Reason = fmt.Sprintf("communication (%s) is %.3g× computation (%s): even %s (%.3g×) leaves some exposed",
		ms(comm), c.Need, ms(m.Compute.Seconds()), c.Codec, c.Ratio)
	last, _ := Parse(Ladder[len(Ladder)-1])
	return m.checkPrice(c, last, n)
}

// checkPrice keeps choice c (codec cd) only if its measured exchange beats
// the uncompressed allreduce; otherwise the codec of the ladder with the
// fastest measured exchange that does, or none.
func (m Measure) checkPrice(c Choice, cd Codec, n int) Choice {
	dense, _ := m.priced(nil)
	mine, ok := m.priced(cd)
	if !ok || mine < dense {
		return c
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3g ms", d.Seconds()*1e3) }
	best, bestT := Codec(nil), dense
	for _, name := range Ladder {
		o, _ := Parse(name)
		if t, ok := m.priced(o); ok && t < bestT {
			best, bestT = o, t
		}
	}
	if best == nil {
		return Choice{Codec: "none", Ratio: 1, Need: c.Need, Reason: fmt.Sprintf(
			"communication is %.3g× computation, but no codec pays here: measured, %s exchanges in %s against %s uncompressed",
			c.Need, c.Codec, ms(mine), ms(dense))}
	}
	return Choice{Codec: best.Name(), Ratio: Ratio(best, n), Need: c.Need, Reason: fmt.Sprintf(
		"communication is %.3g× computation; measured, %s exchanges in %s against %s uncompressed (%s: %s)",
		c.Need, best.Name(), ms(bestT), ms(dense), c.Codec, ms(mine))}
}

// Ratio returns the traffic reduction of codec c on n values: 4n bytes
// over the length of an encoding (for top-k, its expected length:
// [EncodedLen]).
func Ratio(c Codec, n int) float64 {
	enc := EncodedLen(c, n)
	if enc <= 0 {
		return 1
	}
	return 4 * float64(n) / float64(enc)
}
