package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// fakeRegistry answers what notServedElsewhere asks of Temporal: whether
// a control worker polls (polls[i] for the i-th ask, the last one after
// that) and the Cluster's node list (or queryErr; hang: the query waits
// out its deadline, as with a control worker that does not answer).
type fakeRegistry struct {
	client.Client
	polls       []bool
	describeErr error // DescribeTaskQueue's answer instead
	records     []workflows.NodeRecord
	ttl         time.Duration // the registry's lease TTL (0: an earlier build's, which says none)
	queryErr    error
	hang        bool

	mu               sync.Mutex
	describes, asked int
}

func (f *fakeRegistry) DescribeTaskQueue(ctx context.Context, tq string, _ enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	polls := f.polls[min(f.describes, len(f.polls)-1)]
	f.describes++
	if f.describeErr != nil {
		return nil, f.describeErr
	}
	if tq != spec.ControlTaskQueue {
		return nil, fmt.Errorf("described %s", tq)
	}
	resp := &workflowservice.DescribeTaskQueueResponse{}
	if polls {
		resp.Pollers = []*taskqueuepb.PollerInfo{{Identity: "control"}}
	}
	return resp, nil
}

func (f *fakeRegistry) QueryWorkflow(ctx context.Context, id, _, query string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	f.asked++
	f.mu.Unlock()
	if id != spec.DefaultClusterID || query != spec.QueryRegistry {
		return nil, fmt.Errorf("query %s of %s", query, id)
	}
	if f.hang {
		<-ctx.Done()
		return nil, fmt.Errorf("query timed out before a worker could process it: %w", ctx.Err())
	}
	if f.queryErr != nil {
		return nil, f.queryErr
	}
	b, err := json.Marshal(workflows.Registry{Nodes: f.records, LeaseTTL: f.ttl})
	return jsonValue(b), err
}

type jsonValue []byte

func (v jsonValue) HasValue() bool    { return len(v) > 0 }
func (v jsonValue) Get(ptr any) error { return json.Unmarshal(v, ptr) }

// TestNotServedElsewhere: a starting node worker refuses to serve an ID
// whose registered worker still answers, asks the registry again while no
// control worker answers (one restarting is back within the budget), and
// when it cannot ask in time starts with a warning saying what a second
// worker would cause. A registered worker that said it stopped, or whose
// address reaches this worker's own listener (a restart at another
// --comm-advertise on the same port), is no other worker; a namespace
// that does not exist ends it at once, a permission denied warns at once.
func TestNotServedElsewhere(t *testing.T) {
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// This worker's own listener, on loopback and on every interface.
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ownAll, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ownAll.Close()
	_, ownAllPort, _ := net.SplitHostPort(ownAll.Addr().String())
	// This worker's listener on another loopback address, at live's port:
	// a dial of live's address does not reach it.
	_, livePort, _ := net.SplitHostPort(live.Addr().String())
	beside, err := net.Listen("tcp", "127.0.0.2:"+livePort)
	if err != nil {
		t.Fatalf("listen beside %s: %v", live.Addr(), err)
	}
	defer beside.Close()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close()
	const me = "127.0.0.1:1"
	record := func(id, addr string) []workflows.NodeRecord {
		return []workflows.NodeRecord{{Node: spec.Node{ID: id, CommAddr: addr, Host: "h1"}, LastSeen: time.Now()}}
	}
	// hung: registered at a port that answers (the kernel's handshake of
	// a SIGSTOPped process), its lease lapsed a minute ago.
	hung := []workflows.NodeRecord{{Node: spec.Node{ID: "n1", CommAddr: live.Addr().String(), Host: "h1"}, LastSeen: time.Now().Add(-time.Minute - 8*time.Second),
		Failed: true, FailReason: "node(s) [n1] stopped heartbeating"}}
	lately := []workflows.NodeRecord{{Node: spec.Node{ID: "n1", CommAddr: live.Addr().String(), Host: "h1"}, LastSeen: time.Now().Add(-10 * time.Second)}}
	stopped := record("n1", live.Addr().String())
	stopped[0].Failed, stopped[0].FailReason, stopped[0].FailedAt = true, spec.ReasonWorkerStopped, time.Now()
	const warning = "could not rule out a second worker serving this node ID"
	const takeover = "it is hung (stopped with SIGSTOP, or stuck); this worker takes the node over"
	for _, tc := range []struct {
		name      string
		reg       *fakeRegistry
		bound     string // this worker's listener; default me (port 1: none)
		cancelled bool   // the worker is stopped (SIGTERM) while it asks
		wantErr   error
		warns     bool
		takesOver bool // warns that the registered worker is hung
		minAsks   int  // DescribeTaskQueue calls at least
		maxAsks   int
	}{
		{name: "no other worker", reg: &fakeRegistry{polls: []bool{true}, records: record("n2", live.Addr().String())}, minAsks: 1, maxAsks: 1},
		{name: "registered worker answers", reg: &fakeRegistry{polls: []bool{true}, records: record("n1", live.Addr().String())},
			wantErr: ErrDuplicateNode, minAsks: 1, maxAsks: 1},
		{name: "registered worker answers beside this one's listener", reg: &fakeRegistry{polls: []bool{true}, records: record("n1", live.Addr().String())},
			bound: beside.Addr().String(), wantErr: ErrDuplicateNode, minAsks: 1, maxAsks: 1},
		{name: "registered worker hung, its lease lapsed", reg: &fakeRegistry{polls: []bool{true}, records: hung}, takesOver: true, minAsks: 1, maxAsks: 1},
		// (Seen 10 s ago: live under the default TTL, lapsed under this
		// registry's own 5 s.)
		{name: "registered worker hung past the registry's own TTL", reg: &fakeRegistry{polls: []bool{true}, records: lately, ttl: 5 * time.Second},
			takesOver: true, minAsks: 1, maxAsks: 1},
		{name: "registered worker gone", reg: &fakeRegistry{polls: []bool{true}, records: record("n1", goneAddr)}, minAsks: 1, maxAsks: 1},
		{name: "registered at this address", reg: &fakeRegistry{polls: []bool{true}, records: record("n1", me)}, minAsks: 1, maxAsks: 1},
		{name: "no registry yet", reg: &fakeRegistry{polls: []bool{true}, queryErr: serviceerror.NewNotFound("workflow not found")}, minAsks: 1, maxAsks: 1},
		{name: "control worker back on the third ask", reg: &fakeRegistry{polls: []bool{false, false, true}, records: record("n1", live.Addr().String())},
			wantErr: ErrDuplicateNode, minAsks: 3, maxAsks: 3},
		{name: "no control worker", reg: &fakeRegistry{polls: []bool{false}}, warns: true, minAsks: 2, maxAsks: 100},
		{name: "registry query times out", reg: &fakeRegistry{polls: []bool{true}, hang: true}, warns: true, minAsks: 2, maxAsks: 100},
		{name: "stopped while asking", reg: &fakeRegistry{polls: []bool{false}}, cancelled: true, wantErr: context.Canceled, minAsks: 0, maxAsks: 1},
		{name: "registered worker stopped on purpose", reg: &fakeRegistry{polls: []bool{true}, records: stopped}, minAsks: 1, maxAsks: 1},
		{name: "restarted at another address, same port", reg: &fakeRegistry{polls: []bool{true}, records: record("n1", own.Addr().String())},
			bound: own.Addr().String(), minAsks: 1, maxAsks: 1},
		{name: "restarted at another address, listening on every interface", reg: &fakeRegistry{polls: []bool{true},
			records: record("n1", "127.0.0.1:"+ownAllPort)}, bound: ownAll.Addr().String(), minAsks: 1, maxAsks: 1},
		{name: "no such namespace", reg: &fakeRegistry{polls: []bool{true}, describeErr: serviceerror.NewNamespaceNotFound("ml")},
			wantErr: &serviceerror.NamespaceNotFound{}, minAsks: 1, maxAsks: 1},
		{name: "permission denied", reg: &fakeRegistry{polls: []bool{true}, describeErr: serviceerror.NewPermissionDenied("no", "")},
			warns: true, minAsks: 1, maxAsks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			core, logs := observer.New(zap.DebugLevel)
			retry := retryPolicy{first: time.Millisecond, perTry: 50 * time.Millisecond, budget: 300 * time.Millisecond}
			bound := tc.bound
			if bound == "" {
				bound = me
			}
			err := notServedElsewhere(ctx, tc.reg, spec.DefaultClusterID, spec.Node{ID: "n1", CommAddr: me}, bound, retry, zap.New(core))
			var nf *serviceerror.NamespaceNotFound
			if errors.As(tc.wantErr, &nf) {
				if !errors.As(err, &nf) {
					t.Errorf("error %v, want a NamespaceNotFound", err)
				}
			} else if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if n := tc.reg.describes; n < tc.minAsks || n > tc.maxAsks {
				t.Errorf("asked %d times whether a control worker polls, want %d..%d", n, tc.minAsks, tc.maxAsks)
			}
			warned := logs.FilterMessageSnippet(warning).FilterLevelExact(zapcore.WarnLevel).Len() == 1
			if warned != tc.warns {
				t.Errorf("warned %v, want %v; logs: %v", warned, tc.warns, logs.All())
			}
			if tookOver := logs.FilterMessageSnippet(takeover).FilterLevelExact(zapcore.WarnLevel).Len() == 1; tookOver != tc.takesOver {
				t.Errorf("warned of a hung worker %v, want %v; logs: %v", tookOver, tc.takesOver, logs.All())
			}
			if errors.Is(tc.wantErr, ErrDuplicateNode) && !strings.Contains(err.Error(), "(last seen 0s ago, its lease live) still answers on its collective port") {
				t.Errorf("refusal %q: want when it was last seen", err)
			}
		})
	}
}

// TestRetryPolicy: tries until one succeeds, backing off, and gives up
// once the budget is spent (or ctx ends), with the last try's error; an
// answer that asking again does not change (no such namespace, permission
// denied) at once.
func TestRetryPolicy(t *testing.T) {
	failed := errors.New("no answer")
	notFound := serviceerror.NewNamespaceNotFound("ml")
	denied := serviceerror.NewPermissionDenied("not yours", "")
	for _, tc := range []struct {
		name      string
		okAt      int // the try that succeeds; 0: none
		budget    time.Duration
		wantTries func(int) bool
		wantErr   error
	}{
		{"first try", 1, time.Second, func(n int) bool { return n == 1 }, nil},
		{"fourth try", 4, time.Second, func(n int) bool { return n == 4 }, nil},
		{"never", 0, 200 * time.Millisecond, func(n int) bool { return n >= 3 && n < 20 }, failed},
		{"no such namespace", -1, time.Second, func(n int) bool { return n == 1 }, notFound},
		{"permission denied", -2, time.Second, func(n int) bool { return n == 1 }, denied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			start := time.Now()
			_, err := retryPolicy{first: 5 * time.Millisecond, perTry: time.Second, budget: tc.budget}.do(t.Context(),
				func(ctx context.Context) ([]workflows.NodeRecord, error) {
					if _, ok := ctx.Deadline(); !ok {
						t.Error("a try without a deadline")
					}
					if tries++; tries == tc.okAt {
						return nil, nil
					}
					switch tc.okAt {
					case -1:
						return nil, fmt.Errorf("describe task queue: %w", notFound)
					case -2:
						return nil, denied
					}
					return nil, failed
				})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) || !tc.wantTries(tries) {
				t.Errorf("%d tries, error %v; want error %v", tries, err, tc.wantErr)
			}
			if took := time.Since(start); took > tc.budget+time.Second {
				t.Errorf("took %v, over the budget %v", took, tc.budget)
			}
		})
	}
}

// TestCheckWorkDir: --work-dir is created, must take a file, and is left
// as it was found (no probe file).
func TestCheckWorkDir(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "job.yaml")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		want      string // in the error; "": none
	}{
		{"new", filepath.Join(root, "work", "n1"), ""},
		{"existing", root, ""},
		{"a regular file", file, "mkdir " + file + ": not a directory"},
		{"under a regular file", filepath.Join(file, "n1"), "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckWorkDir(tc.dir)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				ents, err := os.ReadDir(tc.dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), ".write-probe") {
						t.Errorf("probe file %s left behind", e.Name())
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestAdvertiseAddr: a node bound to every interface advertises the
// local address of its route to Temporal, else its host name's first
// non-loopback address, else a loopback address Temporal is reached on;
// a specific bound address is advertised as it is.
func TestAdvertiseAddr(t *testing.T) {
	ip := func(s string) func(string) (net.IP, error) {
		return func(string) (net.IP, error) { return net.ParseIP(s), nil }
	}
	noRoute := func(string) (net.IP, error) { return nil, errors.New("network is unreachable") }
	names := func(ips ...string) func() ([]net.IP, error) {
		return func() ([]net.IP, error) {
			var out []net.IP
			for _, s := range ips {
				out = append(out, net.ParseIP(s))
			}
			return out, nil
		}
	}
	noName := func() ([]net.IP, error) { return nil, errors.New("no such host") }
	for _, tc := range []struct {
		name, bound string
		outbound    func(string) (net.IP, error)
		hostIPs     func() ([]net.IP, error)
		want        string
		chosen      bool
		why         string // in why
	}{
		{"specific address kept", "10.0.0.7:29500", ip("10.9.9.9"), names("10.8.8.8"), "10.0.0.7:29500", false, ""},
		{"loopback kept", "127.0.0.1:41000", ip("10.9.9.9"), names("10.8.8.8"), "127.0.0.1:41000", false, ""},
		{"IPv6 wildcard: route to Temporal", "[::]:29500", ip("10.0.0.7"), names("10.8.8.8"), "10.0.0.7:29500", true, "route to Temporal at temporal.example:7233"},
		{"IPv4 wildcard: route to Temporal", "0.0.0.0:29500", ip("10.0.0.7"), noName, "10.0.0.7:29500", true, "route to Temporal"},
		{"empty host", ":29500", ip("10.0.0.7"), noName, "10.0.0.7:29500", true, "route to Temporal"},
		{"IPv6 route", "[::]:29500", ip("2001:db8::7"), noName, "[2001:db8::7]:29500", true, "route to Temporal"},
		{"no route: host name", "[::]:29500", noRoute, names("127.0.1.1", "fe80::1", "192.168.1.5"), "192.168.1.5:29500", true, "host's name"},
		{"Temporal on loopback: host name", "[::]:29500", ip("127.0.0.1"), names("10.1.2.3"), "10.1.2.3:29500", true, "host's name"},
		{"loopback only", "[::]:29500", ip("127.0.0.1"), names("127.0.1.1"), "127.0.0.1:29500", true, "only peers on this host"},
		{"nothing found", "[::]:29500", noRoute, noName, "[::]:29500", false, "no such host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked string
			outbound := func(target string) (net.IP, error) {
				asked = target
				return tc.outbound(target)
			}
			got, why, chosen := advertiseAddr(tc.bound, "dns:///temporal.example:7233", outbound, tc.hostIPs)
			if got != tc.want || chosen != tc.chosen || !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
				t.Errorf("advertise %q (chosen %v: %q), want %q (chosen %v, saying %q)", got, chosen, why, tc.want, tc.chosen, tc.why)
			}
			if tc.chosen && asked != "temporal.example:7233" {
				t.Errorf("routed towards %q, want the frontend temporal.example:7233", asked)
			}
		})
	}
	// The real route: towards a loopback frontend, from a loopback address.
	if got, err := OutboundIP("127.0.0.1:7233"); err != nil || !got.IsLoopback() {
		t.Errorf("OutboundIP(127.0.0.1:7233) = %v, %v; want a loopback address", got, err)
	}
}
