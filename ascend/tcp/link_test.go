package tcp

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestLinkMedium: shared memory only when both sides want it; the frames
// flow either way.
func TestLinkMedium(t *testing.T) {
	for _, tc := range []struct {
		want0, want1, shm bool
	}{{true, true, shm.Supported}, {true, false, false}, {false, false, false}} {
		a, b := tcpPair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var conns [2]ascend.Conn
		errs := make(chan error, 2)
		for side, nc := range []*net.TCPConn{a, b} {
			go func() {
				ncs := []*net.TCPConn{nil, nil}
				ncs[1-side] = nc
				opts := Options{OpTimeout: 5 * time.Second, SharedMemory: []bool{tc.want0, tc.want1}[side]}
				cs, _, err := links(ctx, ncs, side, opts)
				if err == nil {
					conns[side] = cs[1-side]
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		_, isSHM := conns[0].(*shm.Conn)
		if isSHM != tc.shm {
			t.Errorf("wants %v/%v: shared memory %v, want %v", tc.want0, tc.want1, isSHM, tc.shm)
		}
		if err := conns[0].Send(context.Background(), 7, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if tag, n, err := conns[1].Recv(context.Background(), buf); err != nil || tag != 7 || string(buf[:n]) != "hello" {
			t.Errorf("frame: %d %q %v", tag, buf[:n], err)
		}
		conns[0].Close()
		conns[1].Close()
	}
}

// TestTrySendBackPressure: TrySend takes frames while the socket buffers
// have room, then leaves one partly sent or refuses; FinishSend (or the
// next Send) completes it, and the reader sees every frame intact and in
// order — with polling and without.
func TestTrySendBackPressure(t *testing.T) {
	for _, spin := range []time.Duration{0, time.Millisecond} {
		a, b := tcpPair(t)
		a.SetWriteBuffer(64 << 10)
		b.SetReadBuffer(64 << 10)
		w, r := newConn(a, 5*time.Second), newConn(b, 5*time.Second)
		w.setSpin(spin, false)
		r.setSpin(spin, false)
		ctx := context.Background()
		payload := func(i int) []byte {
			p := make([]byte, 3000+i%7)
			for j := range p {
				p[j] = byte(i + j)
			}
			return p
		}
		sent := 0
		res := ascend.TrySent
		for sent < 10000 {
			var err error
			if res, err = w.TrySend(ctx, uint32(sent), payload(sent)); err != nil {
				t.Fatal(err)
			}
			if res != ascend.TrySent {
				break
			}
			sent++
		}
		if sent < 3 || res == ascend.TrySent {
			t.Fatalf("spin %v: %d frames sent, last %v: the buffers never filled", spin, sent, res)
		}
		from := 0
		if res == ascend.TryPartial { // the reader drains while the rest goes
			done := make(chan error, 1)
			go func() { done <- w.FinishSend(ctx) }()
			if err := drain(r, 0, sent+1, payload); err != nil {
				t.Fatalf("spin %v: %v", spin, err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			sent++
			from = sent
		}
		// A plain Send then goes through (after a pending tail, if any).
		done := make(chan error, 1)
		go func() { done <- w.Send(ctx, uint32(sent), payload(sent)) }()
		if err := drain(r, from, sent+1, payload); err != nil {
			t.Fatalf("spin %v (%v): %v", spin, res, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Logf("spin %v: %d frames taken before the buffers filled; then %v", spin, sent, res)
		w.Close()
		r.Close()
	}
}

// drain reads frames from..to-1 and checks them.
func drain(r *conn, from, to int, payload func(int) []byte) error {
	buf := make([]byte, 8<<10)
	for i := from; i < to; i++ {
		tag, n, err := r.Recv(context.Background(), buf)
		if err != nil {
			return err
		}
		if want := payload(i); tag != uint32(i) || string(buf[:n]) != string(want) {
			return fmt.Errorf("frame %d: tag %d, %d bytes, content ok %v", i, tag, n, string(buf[:n]) == string(want))
		}
	}
	return nil
}

func TestSpinPolicy(t *testing.T) {
	for _, tc := range []struct {
		opt           time.Duration
		onHost, cores int
		want          time.Duration
		yield         bool
	}{
		{0, 2, 2, DefaultSpin, false}, // ranks fit the cores: poll, yield to goroutines
		{0, 4, 2, DefaultSpin, true},  // oversubscribed: poll, yield the CPU to other processes
		{-1, 2, 8, 0, false},          // never
		{time.Millisecond, 1, 1, time.Millisecond, false},
	} {
		d, y := spinFor(tc.opt, tc.onHost, tc.cores)
		if d != tc.want || y != tc.yield {
			t.Errorf("spinFor(%v, %d ranks, %d cores) = %v, %v; want %v, %v", tc.opt, tc.onHost, tc.cores, d, y, tc.want, tc.yield)
		}
	}
}

func TestInlinePolicy(t *testing.T) {
	for _, tc := range []struct {
		onHost, cores int
		want          bool
	}{
		{1, 2, false}, // a core for the rank and one for its writer
		{2, 4, false},
		{2, 2, true}, // the writer would share a core
		{3, 4, true},
		{4, 2, true}, // oversubscribed
		{1, 1, true},
	} {
		if got := inlineAll(tc.onHost, tc.cores); got != tc.want {
			t.Errorf("inlineAll(%d ranks, %d cores) = %v, want %v", tc.onHost, tc.cores, got, tc.want)
		}
	}
	var c conn
	if got := c.InlineBytes(); got != ascend.DefaultChunkBytes {
		t.Errorf("InlineBytes = %d, want one default frame", got)
	}
	c.setInline(true)
	if got := c.InlineBytes(); got != MaxFrame {
		t.Errorf("setInline(true): InlineBytes = %d, want %d", got, MaxFrame)
	}
}
