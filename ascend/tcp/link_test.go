package tcp

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
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
				cs, err := links(ctx, ncs, side, opts)
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
