package ascend

// Link probing for topology discovery (`cann-train topo-scan`): real,
// time-bounded transfers between every pair of ranks, so that a slow cable,
// a congested switch port or the boundary between hosts shows up by rank
// pair. Calibrate (calibrate.go) measures one ring and one pair to choose
// algorithms; ProbeLinks measures all n·(n−1) ordered pairs.
//
// Schedule: a round-robin tournament (the circle method). With m = n
// rounded up to even, there are m−1 rounds; in round r rank m−1 meets
// rank r and every other rank x meets (2r − x) mod (m−1). Every rank
// takes part in every round (one sits out when n is odd: its partner is
// the phantom rank n), every unordered pair meets exactly once, and the
// pairs of a round run at the same time, as the links would be used by a
// collective.
//
// Within a pair the lower rank first measures its direction (it is the
// initiator, the other rank responds), then the higher rank measures the
// other one. The initiator drives everything with one-float command
// messages, so the responder never needs to know the budget or the
// clock:
//
//	ping (1)  the responder echoes the float back: a round trip of a
//	          4-byte message; half its median is the one-way latency.
//	bulk (2)  the initiator sends Bytes, the responder acknowledges with
//	          one float: bandwidth = Bytes / (median time − latency).
//	done (0)  the direction is finished.
//
// Two untimed pings and one untimed bulk transfer warm the link (socket
// buffers, page faults, and the wait for a partner still busy in the
// previous round) before anything is timed. The budget is split evenly
// over the rounds and the two directions of each pair; within a direction
// pings may use a quarter of it. At least MinLatencySamples pings and one
// bulk transfer are timed per direction even past the budget, so a very
// slow link stretches the scan instead of going unmeasured.
//
// Finally every rank's row (its measurements as initiator) is gathered
// with AllGather, so every rank returns the full matrix.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// ProbeOptions bounds ProbeLinks. The zero value uses the defaults; all
// ranks must pass equal options (Bytes and the counts decide message
// sizes, which must match).
type ProbeOptions struct {
	// Budget is the total time the measurements may take (default
	// DefaultProbeBudget), not counting the minimum samples that are
	// taken in any case and the final gather.
	Budget time.Duration
	// LatencyRounds is the most ping-pongs timed per direction (default
	// 50).
	LatencyRounds int
	// Bytes is the size of one bandwidth transfer, rounded down to a
	// multiple of 4 (default 4 MiB).
	Bytes int
	// BandwidthRounds is the most transfers timed per direction
	// (default 5).
	BandwidthRounds int
}

// Defaults of ProbeOptions.
const (
	DefaultProbeBudget          = 3 * time.Second
	DefaultProbeLatencyRounds   = 50
	DefaultProbeBytes           = 4 << 20
	DefaultProbeBandwidthRounds = 5
	// MinLatencySamples is the fewest ping-pongs timed per direction,
	// whatever the budget.
	MinLatencySamples = 3
)

func (o ProbeOptions) withDefaults() (ProbeOptions, error) {
	if o.Budget < 0 || o.LatencyRounds < 0 || o.Bytes < 0 || o.BandwidthRounds < 0 {
		return o, errorf(ErrInvalid, "probe: negative option in %+v", o)
	}
	if o.Budget == 0 {
		o.Budget = DefaultProbeBudget
	}
	if o.LatencyRounds == 0 {
		o.LatencyRounds = DefaultProbeLatencyRounds
	}
	if o.Bytes == 0 {
		o.Bytes = DefaultProbeBytes
	}
	if o.BandwidthRounds == 0 {
		o.BandwidthRounds = DefaultProbeBandwidthRounds
	}
	o.LatencyRounds = max(o.LatencyRounds, MinLatencySamples)
	if o.Bytes < 4 {
		return o, errorf(ErrInvalid, "probe: Bytes %d is less than one float32", o.Bytes)
	}
	o.Bytes &^= 3
	return o, nil
}

// ProbedLink is the measurement of one ordered pair of ranks: messages
// sent by From and received by To.
type ProbedLink struct {
	From, To int
	// Latency is the one-way latency of a 4-byte message: half the median
	// round trip.
	Latency time.Duration
	// BytesPerSec is the one-way bandwidth of ProbeOptions.Bytes transfers
	// (the median transfer, less the latency of its acknowledgement).
	BytesPerSec float64
	// LatencySamples and BandwidthSamples are the timed ping-pongs and
	// transfers behind the two numbers.
	LatencySamples, BandwidthSamples int
}

// Commands of the probe protocol (see the top of probe.go).
const (
	probeDone float32 = 0
	probePing float32 = 1
	probeBulk float32 = 2
)

// probeFields is the number of float32s per entry of a gathered row:
// latency (ns), bytes per second, latency samples, bandwidth samples.
const probeFields = 4

// ProbePartner is the rank that rank meets in round round of ProbeLinks's
// schedule for n ranks (0 ≤ round < ProbeRounds(n)), or -1 when rank sits
// the round out (odd n).
func ProbePartner(n, round, rank int) int {
	m := n + n%2
	var p int
	switch {
	case rank == m-1:
		p = round
	case rank == round:
		p = m - 1
	default:
		p = mod(2*round-rank, m-1)
	}
	if p >= n {
		return -1
	}
	return p
}

// ProbeRounds is the number of rounds of ProbeLinks's schedule for n
// ranks: n−1 for even n, n for odd n (0 for a single rank).
func ProbeRounds(n int) int {
	if n < 2 {
		return 0
	}
	return n + n%2 - 1
}

// ProbeLinks measures the latency and bandwidth of every ordered pair of
// ranks with real transfers (see the top of probe.go for the schedule and
// the protocol) and returns all n·(n−1) of them, sorted by (From, To), on
// every rank. It is a collective: every rank must call it at the same
// point, with equal options. It uses only point-to-point messages and one
// AllGather, so it works over any transport.
func (c *Communicator) ProbeLinks(ctx context.Context, opts ProbeOptions) ([]ProbedLink, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n, me := c.size, c.rank
	rounds := ProbeRounds(n)
	row := make([]float32, n*probeFields)
	if rounds > 0 {
		perDirection := opts.Budget / time.Duration(2*rounds)
		pr := &prober{c: c, opts: opts, budget: perDirection,
			cmd: make([]float32, 1), payload: make([]float32, opts.Bytes/4)}
		for r := range rounds {
			peer := ProbePartner(n, r, me)
			if peer < 0 {
				continue
			}
			for _, initiator := range []int{min(me, peer), max(me, peer)} {
				if initiator != me {
					if err := pr.respond(ctx, peer); err != nil {
						return nil, fmt.Errorf("ascend: probe: round %d, responding to rank %d: %w", r, peer, err)
					}
					continue
				}
				l, err := pr.initiate(ctx, peer)
				if err != nil {
					return nil, fmt.Errorf("ascend: probe: round %d, measuring the link to rank %d: %w", r, peer, err)
				}
				e := row[peer*probeFields:]
				e[0], e[1] = float32(l.Latency), float32(l.BytesPerSec)
				e[2], e[3] = float32(l.LatencySamples), float32(l.BandwidthSamples)
			}
		}
	}
	all := make([]float32, n*len(row))
	if err := c.AllGatherInto(ctx, all, row); err != nil {
		return nil, fmt.Errorf("ascend: probe: gathering the measurements: %w", err)
	}
	links := make([]ProbedLink, 0, n*(n-1))
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			e := all[(from*n+to)*probeFields:]
			links = append(links, ProbedLink{From: from, To: to,
				Latency: time.Duration(math.Round(float64(e[0]))), BytesPerSec: float64(e[1]),
				LatencySamples: int(e[2]), BandwidthSamples: int(e[3])})
		}
	}
	return links, nil
}

// prober runs one rank's side of the probe protocol.
type prober struct {
	c       *Communicator
	opts    ProbeOptions
	budget  time.Duration // per direction
	cmd     []float32     // one-float command / echo / acknowledgement
	payload []float32
}

func (p *prober) send(ctx context.Context, v float32, peer int) error {
	p.cmd[0] = v
	return p.c.Send(ctx, p.cmd, peer)
}

// ping times one round trip.
func (p *prober) ping(ctx context.Context, peer int) (time.Duration, error) {
	start := time.Now()
	if err := p.send(ctx, probePing, peer); err != nil {
		return 0, err
	}
	if err := p.c.Recv(ctx, p.cmd, peer); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// bulk times one transfer of the payload and its acknowledgement.
func (p *prober) bulk(ctx context.Context, peer int) (time.Duration, error) {
	if err := p.send(ctx, probeBulk, peer); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := p.c.Send(ctx, p.payload, peer); err != nil {
		return 0, err
	}
	if err := p.c.Recv(ctx, p.cmd, peer); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// initiate measures the direction from this rank to peer.
func (p *prober) initiate(ctx context.Context, peer int) (ProbedLink, error) {
	l := ProbedLink{From: p.c.rank, To: peer}
	for range 2 { // warm-up, and wait for the peer to reach this round
		if _, err := p.ping(ctx, peer); err != nil {
			return l, err
		}
	}
	start := time.Now()
	var rtts []time.Duration
	for len(rtts) < p.opts.LatencyRounds && (len(rtts) < MinLatencySamples || time.Since(start) < p.budget/4) {
		d, err := p.ping(ctx, peer)
		if err != nil {
			return l, err
		}
		rtts = append(rtts, d)
	}
	if _, err := p.bulk(ctx, peer); err != nil { // warm-up
		return l, err
	}
	var xfers []time.Duration
	for len(xfers) < p.opts.BandwidthRounds && (len(xfers) < 1 || time.Since(start) < p.budget) {
		d, err := p.bulk(ctx, peer)
		if err != nil {
			return l, err
		}
		xfers = append(xfers, d)
	}
	if err := p.send(ctx, probeDone, peer); err != nil {
		return l, err
	}
	l.Latency = max(medianDuration(rtts)/2, time.Nanosecond)
	x := medianDuration(xfers)
	l.BytesPerSec = float64(len(p.payload)*4) / max(x-l.Latency, x/10, time.Nanosecond).Seconds()
	l.LatencySamples, l.BandwidthSamples = len(rtts), len(xfers)
	return l, nil
}

// respond serves the peer's measurement of its direction until it says
// done.
func (p *prober) respond(ctx context.Context, peer int) error {
	for {
		if err := p.c.Recv(ctx, p.cmd, peer); err != nil {
			return err
		}
		switch p.cmd[0] {
		case probeDone:
			return nil
		case probePing:
			if err := p.c.Send(ctx, p.cmd, peer); err != nil {
				return err
			}
		case probeBulk:
			if err := p.c.Recv(ctx, p.payload, peer); err != nil {
				return err
			}
			if err := p.send(ctx, probeBulk, peer); err != nil {
				return err
			}
		default:
			return errorf(ErrProtocol, "probe: rank %d sent unknown command %v", peer, p.cmd[0])
		}
	}
}

// medianDuration of a non-empty slice (sorted in place).
func medianDuration(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	m := len(ds) / 2
	if len(ds)%2 == 1 {
		return ds[m]
	}
	return ds[m-1] + (ds[m]-ds[m-1])/2
}
