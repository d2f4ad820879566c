package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
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
}

// measureBudget bounds each measurement.
const measureBudget = 150 * time.Millisecond

// MeasureLoopbackTCP measures one loopback TCP connection moving bytes
// per write, one way and both ways at once (each end sending and
// receiving bytes), for about 150 ms each.
func MeasureLoopbackTCP(ctx context.Context, bytes int64) (oneWay, duplex float64, err error) {
	if bytes <= 0 {
		return 0, 0, errors.New("bench: MeasureLoopbackTCP of no bytes")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	type acc struct {
		c   net.Conn
		err error
	}
	accepted := make(chan acc, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- acc{c, err}
	}()
	var d net.Dialer
	x, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return 0, 0, err
	}
	defer x.Close()
	a := <-accepted
	if a.err != nil {
		return 0, 0, a.err
	}
	y := a.c
	defer y.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = x.SetDeadline(dl)
		_ = y.SetDeadline(dl)
	}
	bufs := [4][]byte{}
	for i := range bufs {
		bufs[i] = prefault(make([]byte, bytes))
	}
	// run moves n messages and returns the elapsed time.
	run := func(n int, both bool) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		pump := func(i int, w net.Conn, src []byte) {
			defer wg.Done()
			for range n {
				if _, err := w.Write(src); err != nil {
					errs[i] = err
					return
				}
			}
		}
		drain := func(i int, r net.Conn, dst []byte) {
			defer wg.Done()
			for range n {
				if _, err := io.ReadFull(r, dst); err != nil {
					errs[i] = err
					return
				}
			}
		}
		start := time.Now()
		wg.Add(2)
		go pump(0, x, bufs[0])
		go drain(1, y, bufs[1])
		if both {
			wg.Add(2)
			go pump(2, y, bufs[2])
			go drain(3, x, bufs[3])
		}
		wg.Wait()
		return time.Since(start), errors.Join(errs...)
	}
	measure := func(both bool) (float64, error) {
		t, err := run(1, both) // warm-up and pilot
		if err != nil {
			return 0, err
		}
		n := max(1, min(1000, int(measureBudget/max(t, time.Microsecond))))
		if t, err = run(n, both); err != nil {
			return 0, err
		}
		return float64(n) * float64(bytes) / t.Seconds() / 1e9, nil
	}
	if oneWay, err = measure(false); err != nil {
		return 0, 0, fmt.Errorf("bench: loopback one-way: %w", err)
	}
	if duplex, err = measure(true); err != nil {
		return 0, 0, fmt.Errorf("bench: loopback duplex: %w", err)
	}
	return oneWay, duplex, nil
}

// MeasureMemcpy measures copy() of bytes between two pre-faulted buffers
// for about 150 ms, in GB/s.
func MeasureMemcpy(bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	src, dst := prefault(make([]byte, bytes)), prefault(make([]byte, bytes))
	start := time.Now()
	copy(dst, src)
	t := time.Since(start)
	n := max(1, min(10000, int(measureBudget/max(t, time.Microsecond))))
	start = time.Now()
	for range n {
		copy(dst, src)
	}
	return float64(n) * float64(bytes) / time.Since(start).Seconds() / 1e9
}

// MeasureLimits measures loopback TCP and memcpy with transfers of bytes.
func MeasureLimits(ctx context.Context, bytes int64) (Limits, error) {
	l := Limits{Bytes: bytes}
	var err error
	if l.TCPOneWay, l.TCPDuplex, err = MeasureLoopbackTCP(ctx, bytes); err != nil {
		return l, err
	}
	l.Memcpy = MeasureMemcpy(bytes)
	return l, nil
}

// prefault touches every page so page faults stay out of the timings.
func prefault(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}
