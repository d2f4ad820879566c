package workers

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// CommInterfaceEnv is the environment variable a node worker reads for
// --comm-interface when the flag is not given: HCCL's own name for the
// host network interface its collectives use, in the same form.
const CommInterfaceEnv = "HCCL_SOCKET_IFNAME"

// ifaceSelector is a network-interface selection in the form of
// HCCL_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME): a comma-separated list of
// name prefixes ("eth,enp"), of exact names when it starts with "="
// ("=eth0,enp0"), and of names or prefixes to avoid when it starts with
// "^" ("^docker,veth", "^=docker0").
type ifaceSelector struct {
	exclude, exact bool
	names          []string
}

// parseIfaceSelector reads s, refusing an empty list or an empty name.
func parseIfaceSelector(s string) (ifaceSelector, error) {
	var sel ifaceSelector
	rest := strings.TrimSpace(s)
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		sel.exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		sel.exact, rest = true, r
	}
	for name := range strings.SplitSeq(rest, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return ifaceSelector{}, fmt.Errorf("%q: an empty interface name; want NAME-PREFIX[,…], =NAME[,…], ^PREFIX[,…] or ^=NAME[,…] (as HCCL_SOCKET_IFNAME)", s)
		}
		sel.names = append(sel.names, name)
	}
	return sel, nil
}

// rank is where name stands in the selection: the index of the first
// name (or prefix) it matches, or -1 when the selection leaves it out.
// An exclusion ranks every interface it does not name 0.
func (s ifaceSelector) rank(name string) int {
	i := slices.IndexFunc(s.names, func(n string) bool {
		if s.exact {
			return name == n
		}
		return strings.HasPrefix(name, n)
	})
	switch {
	case s.exclude && i >= 0:
		return -1
	case s.exclude:
		return 0
	}
	return i
}

// hostInterface is one network interface as interfaceIP sees it.
type hostInterface struct {
	Name  string
	Up    bool
	Addrs []net.IP
}

// hostInterfaces lists this host's interfaces in the kernel's order.
func hostInterfaces() ([]hostInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]hostInterface, 0, len(ifs))
	for _, i := range ifs {
		h := hostInterface{Name: i.Name, Up: i.Flags&net.FlagUp != 0}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				h.Addrs = append(h.Addrs, n.IP)
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// interfaceIP picks the address of the interface sel (HCCL_SOCKET_IFNAME
// form) selects: the first interface that is up and has a usable address,
// in the order of sel's names (then the kernel's); its first IPv4
// address, else its first IPv6 address that is not link-local (a
// link-local one needs a zone peers do not share). The error names what
// the host has.
func interfaceIP(sel string, list func() ([]hostInterface, error)) (net.IP, string, error) {
	s, err := parseIfaceSelector(sel)
	if err != nil {
		return nil, "", err
	}
	ifs, err := list()
	if err != nil {
		return nil, "", fmt.Errorf("%q: list this host's interfaces: %w", sel, err)
	}
	type cand struct {
		rank, order int
		name        string
		ip          net.IP
	}
	var cands []cand
	var seen []string
	for order, i := range ifs {
		ip := usableIP(i.Addrs)
		state := "down"
		switch {
		case i.Up && ip != nil:
			state = ip.String()
		case i.Up:
			state = "no usable address"
		}
		seen = append(seen, i.Name+" ("+state+")")
		if r := s.rank(i.Name); r >= 0 && i.Up && ip != nil {
			cands = append(cands, cand{r, order, i.Name, ip})
		}
	}
	if len(cands) == 0 {
		return nil, "", fmt.Errorf("%q selects no interface that is up with an address; this host has %s", sel, strings.Join(seen, ", "))
	}
	best := slices.MinFunc(cands, func(a, b cand) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.order - b.order
	})
	return best.ip, best.name, nil
}

// usableIP is addrs' first IPv4 address, else its first IPv6 address
// that is not link-local; nil when it has neither.
func usableIP(addrs []net.IP) net.IP {
	for _, ip := range addrs {
		if ip4 := ip.To4(); ip4 != nil {
			return ip4
		}
	}
	for _, ip := range addrs {
		if !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
			return ip
		}
	}
	return nil
}

// commInterface is the address (and interface name) o.CommInterface
// selects, refusing a --comm-advertise beside it and a --comm-listen on
// another address.
func commInterface(o NodeOptions) (net.IP, string, error) {
	from := o.CommInterfaceFrom
	if from == "" {
		from = "--comm-interface"
	}
	if o.CommAdvertise != "" {
		return nil, "", fmt.Errorf("%s %q and --comm-advertise %s both say which address peers dial: give one", from, o.CommInterface, o.CommAdvertise)
	}
	ip, name, err := interfaceIP(o.CommInterface, hostInterfaces)
	if err != nil {
		return nil, "", fmt.Errorf("%s %w", from, err)
	}
	if o.CommListen != "" {
		host, _, err := net.SplitHostPort(o.CommListen)
		if err != nil {
			return nil, "", fmt.Errorf("--comm-listen %q: want HOST:PORT: %w", o.CommListen, err)
		}
		if l := net.ParseIP(host); host != "" && (l == nil || !l.IsUnspecified()) && !l.Equal(ip) {
			return nil, "", fmt.Errorf("--comm-listen %s is not on interface %s (%s), which %s %q selects: "+
				"give --comm-listen 0.0.0.0:PORT or %s", o.CommListen, name, ip, from, o.CommInterface, net.JoinHostPort(ip.String(), "PORT"))
		}
	}
	return ip, name, nil
}

// CheckCommInterface is RunNode's check of o.CommInterface (and the
// flags beside it), for a command to run before it dials Temporal.
func CheckCommInterface(o NodeOptions) error {
	if o.CommInterface == "" {
		return nil
	}
	_, _, err := commInterface(o)
	return err
}
