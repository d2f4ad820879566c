package tcp

import (
	"strings"
	"testing"
)

// TestRefusedWhy: a refused loopback address may be a node on another
// host that registered its own loopback (a node worker with the default
// --comm-listen of old): the reason says so, and how to fix it; any other
// address keeps the plain reason.
func TestRefusedWhy(t *testing.T) {
	const elsewhere = "or it runs on another host, where it registered a loopback address that only its own host can dial: give that worker --comm-listen 0.0.0.0:PORT"
	for _, tc := range []struct {
		addr     string
		loopback bool
	}{
		{"127.0.0.1:34557", true},
		{"[::1]:29500", true},
		{"localhost:29500", true},
		{"10.77.0.11:29500", false},
		{"node-1:29500", false},
		{"garbage", false},
	} {
		got := refusedWhy(tc.addr)
		if !strings.HasPrefix(got, "its node worker is gone, or listens elsewhere than its --comm-advertise") ||
			strings.Contains(got, elsewhere) != tc.loopback {
			t.Errorf("refusedWhy(%s) = %q; want the loopback note: %v", tc.addr, got, tc.loopback)
		}
	}
}
