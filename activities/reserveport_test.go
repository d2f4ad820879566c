package activities

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestReservePortIn: a node worker's --rendezvous-ports gives external
// jobs' rendezvous ports (MASTER_PORT, MS_SCHED_PORT) from its range, a
// free one — not one a process holds —, and fails naming the range when
// none is free; without a range, any free port.
func TestReservePortIn(t *testing.T) {
	// Three ports below Linux's ephemeral range that are free now; the
	// first two then held.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	lo := 0
	for try := 0; try < 50 && lo == 0; try++ {
		base := 20000 + rand.IntN(10000)
		var ls []net.Listener
		for p := base; p < base+3; p++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == 3 {
			lo, held = base, ls[:2]
			ls[2].Close()
			continue
		}
		for _, l := range ls {
			l.Close()
		}
	}
	if lo == 0 {
		t.Skip("found no 3 free consecutive ports")
	}
	for i := range 20 {
		if port, err := ReservePortIn(t.Context(), lo, lo+2); err != nil || port != lo+2 {
			t.Fatalf("try %d: ReservePortIn(%d, %d) = %d, %v; want %d, the one free port of the range", i, lo, lo+2, port, err, lo+2)
		}
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(lo+2))
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, l)
	want := "none of " + strconv.Itoa(lo) + "-" + strconv.Itoa(lo+2) + " (--rendezvous-ports) is free on this node"
	if _, err := ReservePortIn(t.Context(), lo, lo+2); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ReservePortIn with every port held = %v, want %q", err, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ReservePortIn(ctx, lo, lo+2); err == nil {
		t.Error("reserved a port after ctx ended")
	}
	if p, err := (&Node{}).ReservePort(t.Context()); err != nil || p <= 0 {
		t.Errorf("ReservePort = %d, %v; want any free port", p, err)
	}
}
