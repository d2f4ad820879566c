package ascend

// Link calibration for the cost model (see CostModel): a few milliseconds
// of exchanges when a communicator starts.
//
//  1. All ranks at once: every rank sends to its right neighbour while it
//     receives from its left one, the traffic of one ring step. Empty
//     frames give α_all (one step's latency, including the goroutine
//     hand-offs a real step pays), probeBytes frames give β_all from what
//     exceeds it. Every link of the ring is measured.
//  2. One pair: ranks 0 and 1 ping-pong while the others wait: half a
//     round trip of an empty frame is the uncontended one-way α (a tree
//     step), of probeBytes frames gives β.
//  3. γ is timed locally on a cache-resident reduction.
//  4. Each rank says whether all its links are shared-memory rings
//     (CostModel.MemoryLinks).
//
// The ranks then agree on the element-wise maximum (the slowest link and
// the slowest reducer bound every algorithm; a single socket link makes
// MemoryLinks false), so they all choose alike.

import (
	"context"
	"slices"
	"time"
)

const (
	probeLatencyBatches = 8 // of probeLatencyRounds each, see fastestTime
	probeLatencyRounds  = 8
	probeBytes          = 256 << 10
	probeBWRounds       = 3
)

// Calibrate measures the links as described in calibrate.go, installs
// the agreed model and returns it. It is a collective: every rank must
// call it at the same point. tcp.Connect calls it unless told not to.
func (c *Communicator) Calibrate(ctx context.Context) (CostModel, error) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "calibrate")
	if err != nil {
		return CostModel{}, err
	}
	defer c.end()
	m := c.model
	m.Gamma = measureGamma()
	if c.size == 1 {
		c.model, c.chosen = m, [numColl]choice{}
		return m, nil
	}
	p, r := c.size, c.rank
	send, recv := make([]float32, probeBytes/4), make([]float32, probeBytes/4)
	right, left := c.peers[mod(r+1, p)], c.peers[mod(r-1, p)]
	alphaAll, betaAll, err := c.probe(ctx, makeTag(seq, AlgoRing, collProbe, 0), right, left, send, recv)
	if err != nil {
		return CostModel{}, err
	}
	var alpha, beta float64 // rank ≥ 2 contribute 0 to the maximum
	if r < 2 {
		if alpha, beta, err = c.pingPong(ctx, makeTag(seq, AlgoTree, collProbe, 2), c.peers[1-r], r == 0, send); err != nil {
			return CostModel{}, err
		}
	}
	vals := []float32{float32(alpha), float32(beta), float32(m.Gamma), float32(alphaAll), float32(betaAll), 0}
	if !c.memoryLinks() {
		vals[5] = 1 // a link that is not a shared-memory ring: the maximum tells every rank
	}
	if err := c.ringAllReduce(ctx, makeTag(seq, AlgoRing, collProbe, 1), vals, vals, Max); err != nil {
		return CostModel{}, err
	}
	m.MemoryLinks = vals[5] == 0
	sec := func(v float32) time.Duration { return max(time.Duration(float64(v)*1e9), 100*time.Nanosecond) }
	perByte := func(v float32) float64 { return max(float64(v), 1e-13) }
	m.Alpha, m.Beta, m.Gamma = sec(vals[0]), perByte(vals[1]), perByte(vals[2])
	m.AlphaAll, m.BetaAll = sec(vals[3]), perByte(vals[4])
	c.model, c.chosen = m, [numColl]choice{}
	return m, nil
}

// memoryLinks reports whether every link of this rank is a shared-memory
// ring (a transport that receives in place: see InPlaceReceiver).
func (c *Communicator) memoryLinks() bool {
	for _, p := range c.peers {
		if p != nil && p.ip == nil {
			return false
		}
	}
	return true
}

// probe times exchanges (send to `to`, receive from `from`): the latency
// of an empty one, and the seconds per byte of a full one beyond that.
func (c *Communicator) probe(ctx context.Context, tag uint32, to, from *peer, send, recv []float32) (alpha, beta float64, err error) {
	step := func(send, recv []float32) error {
		return c.exchange(ctx, "calibrate", tag, to, send, from, recv, nil, Sum, false)
	}
	for range 2 { // warm-up
		if err := step(nil, nil); err != nil {
			return 0, 0, err
		}
	}
	alpha, err = fastestTime(probeLatencyBatches, probeLatencyRounds, func() error { return step(nil, nil) })
	if err != nil {
		return 0, 0, err
	}
	if err := step(send, recv); err != nil { // warm-up: socket buffers, pages
		return 0, 0, err
	}
	round, err := medianTime(probeBWRounds, 1, func() error { return step(send, recv) })
	if err != nil {
		return 0, 0, err
	}
	return alpha, max(round-alpha, round/10) / float64(4*len(send)), nil
}

// pingPong times round trips with other (the initiator sends first): half
// a round trip of an empty frame is α, of a full one α + len(buf)·β.
func (c *Communicator) pingPong(ctx context.Context, tag uint32, other *peer, initiator bool, buf []float32) (alpha, beta float64, err error) {
	const name = "calibrate"
	trip := func(data []float32) error {
		if initiator {
			if err := c.sendTo(ctx, name, tag, other, data); err != nil {
				return err
			}
			return c.recvFrom(ctx, name, tag, other, data, nil, Sum, false)
		}
		if err := c.recvFrom(ctx, name, tag, other, data, nil, Sum, false); err != nil {
			return err
		}
		return c.sendTo(ctx, name, tag, other, data)
	}
	for range 2 {
		if err := trip(nil); err != nil {
			return 0, 0, err
		}
	}
	rtt, err := fastestTime(probeLatencyBatches, probeLatencyRounds, func() error { return trip(nil) })
	if err != nil {
		return 0, 0, err
	}
	alpha = rtt / 2
	if err := trip(buf); err != nil {
		return 0, 0, err
	}
	rtt, err = medianTime(probeBWRounds, 1, func() error { return trip(buf) })
	if err != nil {
		return 0, 0, err
	}
	oneway := rtt / 2
	return alpha, max(oneway-alpha, oneway/10) / float64(4*len(buf)), nil
}

// batchMeans runs fn in batches of batch calls and returns each batch's
// mean time of one call, in seconds, sorted. The mean within a batch,
// since ranks drift apart: a rank that ran late finds its neighbours'
// frames already there and steps in no time, so single steps understate a
// step's cost.
func batchMeans(batches, batch int, fn func() error) ([]float64, error) {
	ts := make([]float64, batches)
	for i := range ts {
		start := time.Now()
		for range batch {
			if err := fn(); err != nil {
				return nil, err
			}
		}
		ts[i] = time.Since(start).Seconds() / float64(batch)
	}
	slices.Sort(ts)
	return ts, nil
}

// fastestTime is the fastest of batchMeans: how latencies are taken. A
// communicator calibrates while its processes start up (runtime, garbage
// collection of start-up garbage, page faults, other ranks still being
// scheduled), and the model needs the steady state its collectives will
// see: with 2 ranks over loopback TCP, empty-frame ping-pong batches took
// 15–22 µs per round trip in one start and 82–160 µs in another, while
// 16 KiB allreduces took 15 µs right after both; the median of five
// batches set α to 9 and 52 µs, and with it recursive doubling over
// halving-doubling up to 1–5 MiB. Where ranks outnumber cores one
// scheduler delay of a millisecond would otherwise set α_all for good
// (65–150 µs means of 16 steps against ring steps of about 10 µs once
// running). The ranks agree on the maximum, so the slowest rank's fastest
// batch counts.
func fastestTime(batches, batch int, fn func() error) (float64, error) {
	ts, err := batchMeans(batches, batch, fn)
	if err != nil {
		return 0, err
	}
	return ts[0], nil
}

// medianTime is the median of batchMeans: how the bandwidth probes, single
// large exchanges, are taken. Their fastest is the drifted rank's, whose
// peers' data was already there (4 ranks on 2 cores: β_all 8 GB/s per
// link against 1.4 measured for four loopback connections at once).
func medianTime(batches, batch int, fn func() error) (float64, error) {
	ts, err := batchMeans(batches, batch, fn)
	if err != nil {
		return 0, err
	}
	return ts[len(ts)/2], nil
}

// measureGamma times a cache-resident Sum reduction: seconds per byte.
func measureGamma() float64 {
	const n = 16 << 10 // 64 KiB per operand
	a, b := make([]float32, n), make([]float32, n)
	reduce(a, b, Sum)
	const reps = 8
	start := time.Now()
	for range reps {
		reduce(a, b, Sum)
	}
	return max(time.Since(start).Seconds()/(reps*4*n), 1e-13)
}
