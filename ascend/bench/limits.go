package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// Limits are the host's physical ceilings, measured in the same run as
// the collectives (GB/s, 1 GB = 1e9 B).
type Limits struct {
	Bytes int64 `json:"bytes"` // transfer size measured
	// TCPOneWay is one loopback TCP stream; TCPDuplex is the rate each end
	// achieves sending and receiving at once, which is the traffic of a
	// 2-rank ring step and so comparable to a 2-rank AllReduce busbw.
	TCPOneWay float64 `json:"tcp_oneway_gbps"`
	TCPDuplex float64 `json:"tcp_duplex_gbps"`
	// Memcpy is single-goroutine copy() between two pre-faulted buffers.
	Memcpy float64 `json:"memcpy_gbps"`
	// With more than two ranks the ranks share the host's cores and memory,
	// so their ceiling is what that many ends reach together: Ends loopback
	// connections in a ring, each end sending to the next and receiving from
	// the previous at once (TCPRing, per end: every bandwidth-optimal
	// collective moves at least this traffic), and Ends goroutines copying
	// at once (MemcpyEach, per goroutine). Zero when Ends ≤ 2.
	Ends       int     `json:"ends,omitempty"`
	TCPRing    float64 `json:"tcp_ring_gbps,omitempty"`
	MemcpyEach float64 `json:"memcpy_each_gbps,omitempty"`
}

// measureBudget bounds each measurement.
const measureBudget = 150 * time.Millisecond

// MeasureLoopbackTCP measures one loopback TCP connection moving bytes
// per write, one way and both ways at once (each end sending and
// receiving bytes), for about 150 ms each.
func MeasureLoopbackTCP(ctx context.Context, bytes int64) (oneWay, duplex float64, err error) {
	lb, err := openLoopback(ctx, 1, bytes)
	if err != nil {
		return 0, 0, err
	}
	defer lb.close()
	if oneWay, err = lb.measure([]flow{{0, false}}); err != nil {
		return 0, 0, fmt.Errorf("bench: loopback one-way: %w", err)
	}
	if duplex, err = lb.measure([]flow{{0, false}, {0, true}}); err != nil {
		return 0, 0, fmt.Errorf("bench: loopback duplex: %w", err)
	}
	return oneWay, duplex, nil
}

// MeasureLoopbackRing measures ends loopback TCP connections in a ring,
// every end writing bytes at a time to the next end while it reads from
// the previous one, for about 150 ms, and returns the rate per end.
func MeasureLoopbackRing(ctx context.Context, bytes int64, ends int) (float64, error) {
	if ends < 2 {
		return 0, fmt.Errorf("bench: a loopback ring of %d ends", ends)
	}
	lb, err := openLoopback(ctx, ends, bytes)
	if err != nil {
		return 0, err
	}
	defer lb.close()
	flows := make([]flow, ends)
	for i := range flows {
		flows[i] = flow{conn: i}
	}
	r, err := lb.measure(flows)
	if err != nil {
		return 0, fmt.Errorf("bench: loopback ring of %d: %w", ends, err)
	}
	return r, nil
}

// loopback is a set of connected loopback TCP pairs with pre-faulted
// buffers for the flows that measure them, allocated for a direction the
// first time a flow uses it (a ring or one-way flow never uses the back
// direction: 64 MiB transfers on a ring of 4 would fault in 512 MiB for
// nothing).
type loopback struct {
	bytes int64
	pairs [][2]net.Conn // [0] dialled, [1] accepted
	bufs  [][2][]byte   // per pair and direction: what the writer sends
	rbufs [][2][]byte   // per pair and direction: where the reader receives
}

// flow is one direction of one pair: [0]→[1], or [1]→[0] when back.
type flow struct {
	conn int
	back bool
}

func openLoopback(ctx context.Context, n int, bytes int64) (lb *loopback, err error) {
	if bytes <= 0 {
		return nil, errors.New("bench: loopback transfers of no bytes")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	lb = &loopback{bytes: bytes}
	defer func() {
		if err != nil {
			lb.close()
		}
	}()
	var d net.Dialer
	for range n {
		x, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return nil, err
		}
		y, err := ln.Accept() // the only connection pending: x's
		if err != nil {
			x.Close()
			return nil, err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = x.SetDeadline(dl)
			_ = y.SetDeadline(dl)
		}
		lb.pairs = append(lb.pairs, [2]net.Conn{x, y})
	}
	lb.bufs, lb.rbufs = make([][2][]byte, n), make([][2][]byte, n)
	return lb, nil
}

func (lb *loopback) close() {
	for _, p := range lb.pairs {
		p[0].Close()
		p[1].Close()
	}
}

// run moves n messages on every flow at once and returns the elapsed time.
func (lb *loopback) run(n int, flows []flow) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, 2*len(flows))
	start := time.Now()
	for i, f := range flows {
		w, r, dir := lb.pairs[f.conn][0], lb.pairs[f.conn][1], 0
		if f.back {
			w, r, dir = r, w, 1
		}
		src, dst := lb.bufs[f.conn][dir], lb.rbufs[f.conn][dir]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range n {
				if _, err := w.Write(src); err != nil {
					errs[2*i] = err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range n {
				if _, err := io.ReadFull(r, dst); err != nil {
					errs[2*i+1] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// measure is the rate of each flow (GB/s) for about measureBudget.
func (lb *loopback) measure(flows []flow) (float64, error) {
	for _, f := range flows {
		dir := 0
		if f.back {
			dir = 1
		}
		if lb.bufs[f.conn][dir] == nil {
			lb.bufs[f.conn][dir] = prefault(make([]byte, lb.bytes))
			lb.rbufs[f.conn][dir] = prefault(make([]byte, lb.bytes))
		}
	}
	t, err := lb.run(1, flows) // warm-up and pilot
	if err != nil {
		return 0, err
	}
	n := max(1, min(1000, int(measureBudget/max(t, time.Microsecond))))
	if t, err = lb.run(n, flows); err != nil {
		return 0, err
	}
	return float64(n) * float64(lb.bytes) / t.Seconds() / 1e9, nil
}

// MeasureMemcpy measures copy() of bytes between two pre-faulted buffers
// for about 150 ms, in GB/s.
func MeasureMemcpy(bytes int64) float64 { return MeasureMemcpyEach(bytes, 1) }

// MeasureMemcpyEach measures n goroutines each copying bytes between
// its own two pre-faulted buffers at once, for about 150 ms, and returns
// the rate per goroutine in GB/s.
func MeasureMemcpyEach(bytes int64, n int) float64 {
	if bytes <= 0 || n <= 0 {
		return 0
	}
	type pair struct{ src, dst []byte }
	ps := make([]pair, n)
	for i := range ps {
		ps[i] = pair{prefault(make([]byte, bytes)), prefault(make([]byte, bytes))}
	}
	run := func(reps int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for _, p := range ps {
			wg.Go(func() {
				for range reps {
					copy(p.dst, p.src)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	t := run(1)
	reps := max(1, min(10000, int(measureBudget/max(t, time.Microsecond))))
	return float64(reps) * float64(bytes) / run(reps).Seconds() / 1e9
}

// MeasureLimits measures loopback TCP and memcpy with transfers of bytes,
// and, for more than two ranks, what that many ends reach at once.
func MeasureLimits(ctx context.Context, bytes int64, ranks int) (Limits, error) {
	l := Limits{Bytes: bytes}
	var err error
	if l.TCPOneWay, l.TCPDuplex, err = MeasureLoopbackTCP(ctx, bytes); err != nil {
		return l, err
	}
	l.Memcpy = MeasureMemcpy(bytes)
	if ranks > 2 {
		l.Ends = ranks
		if l.TCPRing, err = MeasureLoopbackRing(ctx, bytes, ranks); err != nil {
			return l, err
		}
		l.MemcpyEach = MeasureMemcpyEach(bytes, ranks)
	}
	return l, nil
}

// prefault touches every page so page faults stay out of the timings.
func prefault(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

// RowLimit is the physical limit a row's busbw is compared with: one
// figure of the Limits measured before the sweep (GB/s).
type RowLimit struct {
	// Name is the figure, as Limits names it in JSON less "_gbps":
	// tcp_oneway, tcp_duplex, tcp_ring, memcpy or memcpy_each.
	Name  string  `json:"name"`
	Bytes int64   `json:"bytes"` // the transfer size it was measured at
	GBps  float64 `json:"gbps"`
}

// limiter picks each row's limit (see forRow).
type limiter struct {
	limits []Limits // measured before the sweep; none: no limits
	ranks  int
	memory bool // the links copy through shared memory
}

// newLimiter is the limiter of rep's run: none where no limits were
// measured (-limits 0, a rank but 0), for one rank (nothing moves), or
// where the ranks span hosts (loopback TCP and memcpy on this host do not
// bound links between hosts).
func newLimiter(rep *Report) limiter {
	if len(rep.Limits) == 0 || rep.Ranks < 2 || rep.Model.Hosts > 1 {
		return limiter{}
	}
	return limiter{limits: rep.Limits, ranks: rep.Ranks, memory: rep.Model.MemoryLinks}
}

// forRow is the limit a row of coll of size bytes, run by algorithm
// algo, is compared with: measured at the transfer size nearest its size
// (in ratio, the smaller of two as near), since caches make memcpy two to
// three times faster at 1-4 MiB than at 64 MiB; over shared memory (the
// links, or buffers read directly) single-core memcpy, and with more than
// two ranks each of as many copies at once; over TCP, with two ranks the
// duplex rate per end (each ring step sends and receives at once), or the
// one-way rate for broadcast and reduce (one stream, one way), and with
// more the rate per end of a ring of as many connections. (The goals of
// dev/mpibench/compare.sh take the same figures.) Nil where there is none.
func (lm limiter) forRow(coll ascend.Collective, bytes int64, algo string) *RowLimit {
	if len(lm.limits) == 0 || bytes <= 0 {
		return nil
	}
	l := lm.limits[0]
	for _, c := range lm.limits[1:] {
		if math.Abs(math.Log(float64(c.Bytes)/float64(bytes))) < math.Abs(math.Log(float64(l.Bytes)/float64(bytes))) {
			l = c
		}
	}
	r := &RowLimit{Bytes: l.Bytes}
	switch memory := lm.memory || algo == ascend.AlgoDirect.String(); {
	case memory && lm.ranks > 2:
		r.Name, r.GBps = "memcpy_each", l.MemcpyEach
	case memory:
		r.Name, r.GBps = "memcpy", l.Memcpy
	case lm.ranks > 2:
		r.Name, r.GBps = "tcp_ring", l.TCPRing
	case collectives[coll].rooted:
		r.Name, r.GBps = "tcp_oneway", l.TCPOneWay
	default:
		r.Name, r.GBps = "tcp_duplex", l.TCPDuplex
	}
	if r.GBps <= 0 {
		return nil
	}
	return r
}

// compare sets row's Limit and its results' BusBWOfLimit.
func (lm limiter) compare(coll ascend.Collective, row *Row) {
	if row.Limit = lm.forRow(coll, row.Size, row.Algorithm); row.Limit == nil {
		return
	}
	for _, res := range []*Result{row.OutOfPlace, row.InPlace} {
		if res != nil {
			pct := 100 * res.BusBW / row.Limit.GBps
			res.BusBWOfLimit = &pct
		}
	}
}
