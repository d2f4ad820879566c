package workers

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// route fakes OutboundIP: the local address of the route to any target is
// ip ("" : no route).
func route(ip string) func(string) (net.IP, error) {
	return func(string) (net.IP, error) {
		if ip == "" {
			return nil, errors.New("network is unreachable")
		}
		return net.ParseIP(ip), nil
	}
}

// TestDefaultCommListen: a node worker given no --comm-listen listens on
// this host's loopback while Temporal is reached there (a single host:
// as it always did) or where that cannot be told, and on every interface
// when Temporal is elsewhere — a node on another host than Temporal's
// would register a loopback address its peers cannot dial.
func TestDefaultCommListen(t *testing.T) {
	for _, tc := range []struct {
		temporal string
		route    string // the local address of the route to it
		want     string
	}{
		{"127.0.0.1:7233", "127.0.0.1", "127.0.0.1:0"},
		{"localhost:7233", "127.0.0.1", "127.0.0.1:0"},
		{"[::1]:7233", "::1", "127.0.0.1:0"},
		{"0.0.0.0:7233", "127.0.0.1", "127.0.0.1:0"},
		{"dns:///localhost:7233", "127.0.0.1", "127.0.0.1:0"},
		{"temporal.local:7233", "127.0.0.1", "127.0.0.1:0"}, // (a name for this host)
		{"10.77.0.1:17300", "10.77.0.11", ":0"},
		{"temporal.example:7233", "10.0.0.7", ":0"},
		{"dns:///temporal.example:7233", "10.0.0.7", ":0"},
		{"[2001:db8::1]:7233", "2001:db8::7", ":0"},
		{"10.77.0.1:17300", "", "127.0.0.1:0"}, // no route: cannot tell
		{"", "10.0.0.7", "127.0.0.1:0"},        // no address (a library caller)
	} {
		if got := defaultCommListen(tc.temporal, route(tc.route)); got != tc.want {
			t.Errorf("defaultCommListen(%q, route from %q) = %q, want %q", tc.temporal, tc.route, got, tc.want)
		}
	}
}

// TestCheckLoopbackAdvertise: a loopback collective address while Temporal
// is not on this host's loopback is refused, naming the fix, when it came
// from --comm-listen, and warned of when --comm-advertise names it (every
// node on this host); with Temporal on loopback, or another address, it
// passes as before.
func TestCheckLoopbackAdvertise(t *testing.T) {
	const refusal = "which peers on other hosts cannot dial, and Temporal at 10.77.0.1:17300 is not on this host's loopback: " +
		"give --comm-listen 0.0.0.0:34557 (this host's address on its route to Temporal is then advertised) or --comm-advertise HOST:34557; " +
		"if every node of this cluster runs on this host, --comm-listen 127.0.0.1:34557 --comm-advertise 127.0.0.1:34557 says so"
	const anyPort = "give --comm-listen 0.0.0.0:PORT (this host's address on its route to Temporal is then advertised) or --comm-advertise HOST:PORT; " +
		"if every node of this cluster runs on this host, --comm-listen 127.0.0.1:PORT --comm-advertise 127.0.0.1:PORT says so"
	for _, tc := range []struct {
		name, advertise string
		listen          string // default: advertise
		explicit        bool
		temporal, route string
		err, warn       string // in the error, the warning; "": none
	}{
		{"single host", "127.0.0.1:34557", "127.0.0.1:0", false, "127.0.0.1:7233", "127.0.0.1", "", ""},
		{"single host, named", "127.0.0.1:34557", "", true, "localhost:7233", "127.0.0.1", "", ""},
		{"remote Temporal, loopback listener", "127.0.0.1:34557", "", false, "10.77.0.1:17300", "10.77.0.11", refusal, ""},
		{"remote Temporal, loopback listener on any port", "127.0.0.1:34557", "127.0.0.1:0", false, "10.77.0.1:17300", "10.77.0.11", anyPort, ""},
		{"remote Temporal, localhost", "localhost:34557", "", false, "10.77.0.1:17300", "10.77.0.11", "on this host's loopback (localhost:34557)", ""},
		{"remote Temporal, loopback named", "127.0.0.1:34557", "", true, "10.77.0.1:17300", "10.77.0.11", "",
			"every node of this cluster must run on this host (else give --comm-listen 0.0.0.0:34557"},
		{"remote Temporal, host address", "10.77.0.11:34557", "", false, "10.77.0.1:17300", "10.77.0.11", "", ""},
		{"remote Temporal, no route", "127.0.0.1:34557", "", false, "10.77.0.1:17300", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen := tc.listen
			if listen == "" {
				listen = tc.advertise
			}
			warn, err := checkLoopbackAdvertise(tc.advertise, listen, tc.explicit, tc.temporal, route(tc.route))
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
			if (warn == "") != (tc.warn == "") || !strings.Contains(warn, tc.warn) {
				t.Errorf("warning %q, want one saying %q", warn, tc.warn)
			}
		})
	}
}

// TestRunNodeRefusesLoopbackForRemoteTemporal: a node worker given
// --comm-listen 127.0.0.1:0 while its Temporal is on another host stops
// at start, saying what to give instead, before it registers anything.
func TestRunNodeRefusesLoopbackForRemoteTemporal(t *testing.T) {
	const temporal = "192.0.2.1:7233" // (TEST-NET-1: a route to it, nothing there)
	if ip, err := OutboundIP(temporal); err != nil || ip.IsLoopback() {
		t.Skipf("no route off this host (%v, %v)", ip, err)
	}
	err := RunNode(t.Context(), nil, NodeOptions{ID: "n1", CommListen: "127.0.0.1:0", TemporalAddress: temporal}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "node n1: the collective listener is on this host's loopback") ||
		!strings.Contains(err.Error(), "give --comm-listen 0.0.0.0:PORT") {
		t.Fatalf("RunNode = %v, want a refusal naming --comm-listen 0.0.0.0:PORT", err)
	}
}

// TestCheckCommAdvertise: --comm-advertise is HOST:PORT with a port
// 1..65535, and not a wildcard address, which every peer would dial as its
// own host.
func TestCheckCommAdvertise(t *testing.T) {
	for _, tc := range []struct {
		addr, want string // want: in the error; "": none
	}{
		{"10.77.0.13:17320", ""},
		{"node-1:29500", ""},
		{"[2001:db8::7]:29500", ""},
		{"127.0.0.1:29500", ""},
		{"10.77.0.13", `"10.77.0.13": want HOST:PORT`},
		{"10.77.0.13:", `port "": want a number 1..65535`},
		{"10.77.0.13:0", `port "0": want a number 1..65535`},
		{"10.77.0.13:65536", `port "65536"`},
		{"10.77.0.13:http", `port "http"`},
		{"0.0.0.0:17320", "is a wildcard address: peers would dial their own host"},
		{"[::]:17320", "is a wildcard address"},
		{":17320", "is a wildcard address"},
	} {
		err := CheckCommAdvertise(tc.addr)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckCommAdvertise(%q) = %v, want %q", tc.addr, err, tc.want)
		}
	}
	// RunNode checks it too, before it binds or dials anything.
	err := RunNode(t.Context(), nil, NodeOptions{ID: "n1", CommAdvertise: "0.0.0.0:17320"}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), `node n1: --comm-advertise "0.0.0.0:17320" is a wildcard address`) {
		t.Errorf("RunNode = %v, want the wildcard refused", err)
	}
}

// TestParsePortRange: --rendezvous-ports takes LO-HI or one port, within
// 1..65535, in order.
func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
		err  string
	}{
		{"", PortRange{}, ""},
		{"29600-29699", PortRange{29600, 29699}, ""},
		{"29600", PortRange{29600, 29600}, ""},
		{" 1 - 65535 ", PortRange{1, 65535}, ""},
		{"29699-29600", PortRange{}, "29699-29600: the range ends before it starts"},
		{"0-10", PortRange{}, "ports go from 1 to 65535"},
		{"60000-70000", PortRange{}, "ports go from 1 to 65535"},
		{"a-b", PortRange{}, `"a-b": want LO-HI`},
		{"29600:29699", PortRange{}, "want LO-HI"},
	} {
		got, err := ParsePortRange(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
	if s := (PortRange{}).String(); s != "any free port" {
		t.Errorf("zero PortRange says %q", s)
	}
}

// describer answers DescribeNamespace with err.
type describer struct{ err error }

func (d describer) DescribeNamespace(context.Context, *workflowservice.DescribeNamespaceRequest, ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error) {
	return &workflowservice.DescribeNamespaceResponse{}, d.err
}

// TestCheckNamespace: a namespace the server does not have fails the dial
// at once, naming the server and how to create it; one the credentials
// may not describe (an API key scoped to less), or a server without the
// call, passes unchecked; a server that does not answer is an error
// DialWaiting waits out.
func TestCheckNamespace(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		want        string // in the error; "": none
		unreachable bool
	}{
		{"exists", nil, "", false},
		{"not found", serviceerror.NewNamespaceNotFound("ml"),
			`namespace "ml" does not exist on temporal.example:7233 (--namespace / TEMPORAL_NAMESPACE; create it: temporal operator namespace create -n ml)`, false},
		{"permission denied", serviceerror.NewPermissionDenied("Request unauthorized.", ""), "", false},
		{"unimplemented", serviceerror.NewUnimplemented("no"), "", false},
		{"unavailable", serviceerror.NewUnavailable("connection refused"), `describe namespace "ml" on temporal.example:7233`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNamespace(t.Context(), describer{tc.err}, "temporal.example:7233", "ml")
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkNamespace = %v, want %q", err, tc.want)
			}
			if err != nil && unreachable(err) != tc.unreachable {
				t.Errorf("unreachable(%v) = %v, want %v", err, !tc.unreachable, tc.unreachable)
			}
			if tc.err != nil && err != nil && !errors.Is(err, tc.err) {
				t.Errorf("%v does not wrap %v", err, tc.err)
			}
		})
	}
}
