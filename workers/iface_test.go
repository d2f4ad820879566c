package workers

import (
	"errors"
	"net"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestInterfaceIP: --comm-interface reads HCCL_SOCKET_IFNAME's forms —
// prefixes, =exact names, ^exclusions — and picks the first interface up
// with a usable address, in the order of the names given.
func TestInterfaceIP(t *testing.T) {
	ips := func(s ...string) []net.IP {
		var out []net.IP
		for _, a := range s {
			out = append(out, net.ParseIP(a))
		}
		return out
	}
	host := []hostInterface{
		{Name: "lo", Up: true, Addrs: ips("127.0.0.1", "::1")},
		{Name: "eth0", Up: true, Addrs: ips("fe80::1", "10.0.0.7")},
		{Name: "eth1", Up: false, Addrs: ips("10.1.0.7")},
		{Name: "eth10", Up: true, Addrs: ips("fe80::2", "2001:db8::7")},
		{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")},
		{Name: "enp3s0", Up: true, Addrs: ips("192.168.5.7")},
		{Name: "ib0", Up: true, Addrs: ips("fe80::3")},
	}
	list := func() ([]hostInterface, error) { return host, nil }
	for _, tc := range []struct {
		sel, name, ip, err string
	}{
		{sel: "eth", name: "eth0", ip: "10.0.0.7"},                                   // IPv4 before the link-local IPv6 listed first
		{sel: "=eth10", name: "eth10", ip: "2001:db8::7"},                            // no IPv4: a global IPv6, not the link-local one
		{sel: "enp,eth", name: "enp3s0", ip: "192.168.5.7"},                          // the names' order, not the kernel's
		{sel: " =docker0 , eth", name: "docker0", ip: "172.17.0.1"},                  // spaces around names
		{sel: "^lo,eth,docker", name: "enp3s0", ip: "192.168.5.7"},                   // excluded prefixes
		{sel: "^=lo,eth0", name: "eth10", ip: "2001:db8::7"},                         // excluded names: eth10 is not eth0
		{sel: "=lo", name: "lo", ip: "127.0.0.1"},                                    // loopback when named
		{sel: "=eth1", err: "eth1 (down)"},                                           // down
		{sel: "ib", err: "ib0 (no usable address)"},                                  // link-local only
		{sel: "=eth", err: `"=eth" selects no interface that is up with an address`}, // exact: eth is no name here
		{sel: "wlan", err: "this host has lo (127.0.0.1), eth0 (10.0.0.7), eth1 (down)"},
		{sel: "eth,", err: "an empty interface name"},
		{sel: "^", err: "an empty interface name"},
		{sel: "", err: "an empty interface name"},
	} {
		t.Run(tc.sel, func(t *testing.T) {
			ip, name, err := interfaceIP(tc.sel, list)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("interfaceIP(%q) = %v, %s, %v; want an error saying %q", tc.sel, ip, name, err, tc.err)
				}
				return
			}
			if err != nil || name != tc.name || !ip.Equal(net.ParseIP(tc.ip)) {
				t.Fatalf("interfaceIP(%q) = %v, %s, %v; want %s on %s", tc.sel, ip, name, err, tc.ip, tc.name)
			}
		})
	}
	boom := errors.New("netlink: permission denied")
	if _, _, err := interfaceIP("eth", func() ([]hostInterface, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("a failed listing: %v, want it wrapped", err)
	}
}

// TestRunNodeCommInterface: RunNode refuses --comm-interface beside
// --comm-advertise, beside a --comm-listen on another address, and one
// that selects nothing, before it binds or dials anything.
func TestRunNodeCommInterface(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    NodeOptions
		want string
	}{
		{"with advertise", NodeOptions{CommInterface: "=lo", CommAdvertise: "10.0.0.7:29500"}, "both say which address peers dial: give one"},
		{"listen elsewhere", NodeOptions{CommInterface: "=lo", CommListen: "10.0.0.7:29500"},
			`--comm-listen 10.0.0.7:29500 is not on interface lo (127.0.0.1), which --comm-interface "=lo" selects: give --comm-listen 0.0.0.0:PORT or 127.0.0.1:PORT`},
		{"nothing", NodeOptions{CommInterface: "=no-such-interface0"}, `--comm-interface "=no-such-interface0" selects no interface`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.ID = "n1"
			err := RunNode(t.Context(), nil, tc.o, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunNode = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// The listen address it takes: the interface's, or a wildcard's.
	for _, listen := range []string{"", "0.0.0.0:0", "127.0.0.1:0"} {
		if _, _, err := commInterface(NodeOptions{CommInterface: "=lo", CommListen: listen}); err != nil {
			t.Errorf("--comm-interface =lo --comm-listen %q: %v", listen, err)
		}
	}
}
