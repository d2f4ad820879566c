package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
)

func TestServerWithUIAndSearchAttributes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "sub", "temporal.db")
	attrs := map[string]enumspb.IndexedValueType{"CannStep": enumspb.INDEXED_VALUE_TYPE_INT}
	for round := 1; round <= 2; round++ { // the second start reopens the file
		srv, err := StartServer(ctx, ServerOptions{UIPort: -1, DBFile: db, SearchAttributes: attrs})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		c, err := client.DialContext(ctx, client.Options{HostPort: srv.FrontendAddr(), Namespace: srv.Namespace()})
		if err != nil {
			srv.Stop()
			t.Fatal(err)
		}
		resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: srv.Namespace()})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetCustomAttributes()["CannStep"]; got != enumspb.INDEXED_VALUE_TYPE_INT {
			t.Errorf("round %d: CannStep registered as %v", round, got)
		}
		c.Close()

		var body string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			r, err := http.Get(srv.UIURL() + "/")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				body = string(b)
				break
			}
		}
		if !strings.Contains(strings.ToLower(body), "<html") {
			t.Errorf("round %d: Web UI at %s did not serve its page", round, srv.UIURL())
		}
		srv.Stop()
	}
}

// A bind that lost its port to another process is retried, up to the
// limit; any other failure is returned at once.
func TestRetryPortClash(t *testing.T) {
	clash := fmt.Errorf("dev: new server: listen tcp 127.0.0.1:1: %w", syscall.EADDRINUSE)
	other := errors.New("dev: authorizer: bad config")
	for _, tc := range []struct {
		name  string
		errs  []error // try's results, in order
		calls int
		want  error
	}{
		{"first try", []error{nil}, 1, nil},
		{"clash, then bound", []error{clash, clash, nil}, 3, nil},
		{"other failure", []error{other, nil}, 1, other},
		{"clash every time", []error{clash, clash, clash, clash}, 3, clash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryPortClash(3, func() error {
				calls++
				return tc.errs[calls-1]
			})
			if calls != tc.calls || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("%d calls, error %v; want %d calls, error %v", calls, err, tc.calls, tc.want)
			}
		})
	}
}

// A port asked for by number that another process holds is an error
// naming it, before the server would bind it (its gRPC bind failing ends
// the process).
func TestStartServerPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name string
		opts ServerOptions
		what string
		ui   bool
	}{
		{"frontend", ServerOptions{FrontendPort: port}, "frontend port", false},
		{"web UI", ServerOptions{UIPort: port}, "Web UI port", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := StartServer(t.Context(), tc.opts)
			if err == nil {
				srv.Stop()
				t.Fatal("started on a port another listener holds")
			}
			if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), fmt.Sprintf("%s %d", tc.what, port)) {
				t.Errorf("error %v; want ErrPortInUse naming the %s %d", err, tc.what, port)
			}
			// (The CLI's hint names the flag of the port in use.)
			var inUse *PortInUseError
			if !errors.As(err, &inUse) || inUse.UI != tc.ui || inUse.Port != port {
				t.Errorf("error %#v; want a *PortInUseError for port %d, UI %v", err, port, tc.ui)
			}
		})
	}
}

// TestPortInUseErrorNamesItsPort: the error names the port asked for, and
// a Temporal dev server as its likely holder only for the port such a
// server takes by default (it said "listens on 7233 and 8233" of any port,
// 27841 too).
func TestPortInUseErrorNamesItsPort(t *testing.T) {
	for _, tc := range []struct {
		err       PortInUseError
		want      string
		devServer bool
	}{
		{PortInUseError{IP: "127.0.0.1", Port: 7233}, "frontend port 7233 on 127.0.0.1: port in use by another process (a Temporal dev server", true},
		{PortInUseError{IP: "127.0.0.1", Port: 8233, UI: true}, "Web UI port 8233 on 127.0.0.1: port in use by another process (a Temporal dev server", true},
		{PortInUseError{IP: "127.0.0.1", Port: 27841}, "frontend port 27841 on 127.0.0.1: port in use by another process", false},
		{PortInUseError{IP: "127.0.0.1", Port: 28841, UI: true}, "Web UI port 28841 on 127.0.0.1: port in use by another process", false},
		{PortInUseError{IP: "127.0.0.1", Port: 8233}, "frontend port 8233 on 127.0.0.1: port in use by another process", false},
	} {
		got := tc.err.Error()
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "dev server") != tc.devServer ||
			strings.Contains(got, "7233 and 8233") {
			t.Errorf("%+v: %q; want it to start %q, naming a dev server: %v", tc.err, got, tc.want, tc.devServer)
		}
	}
}

// TestLockDB: a database file is locked by one server at a time; a second
// fails at once, naming the holder's pid, until the first lets go.
func TestLockDB(t *testing.T) {
	db := filepath.Join(t.TempDir(), "sub", "temporal.db")
	var held []*os.File
	defer func() {
		for _, f := range held {
			unlockDB(f)
		}
	}()
	for _, tc := range []struct {
		name    string
		release bool // release the locks held before locking
		wantErr error
	}{
		{"first", false, nil},
		{"second while the first holds it", false, ErrDBInUse},
		{"third once the first let go", true, nil},
		{"fourth while the third holds it", false, ErrDBInUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.release {
				for _, f := range held {
					unlockDB(f)
				}
				held = nil
			}
			f, err := lockDB(db)
			if err == nil {
				held = append(held, f)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				want := fmt.Sprintf("db file %s is in use by another cann-train dev server (pid %d", db, os.Getpid())
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
	// A server on a held file fails before it binds or opens anything.
	start := time.Now()
	srv, err := StartServer(t.Context(), ServerOptions{DBFile: db})
	if err == nil {
		srv.Stop()
		t.Fatal("a second server started on a locked db file")
	}
	if !errors.Is(err, ErrDBInUse) || time.Since(start) > 5*time.Second {
		t.Errorf("after %v: %v; want ErrDBInUse at once", time.Since(start), err)
	}
}

// TestFreePortOutsideEphemeralRange: the ports FreePort hands out for the
// server to bind later lie below the kernel's ephemeral range, so that no
// listener on port 0 (a node worker's collective link) can take one first;
// and they are free.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo == 0 {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range: FreePort asks the kernel")
	}
	for range 20 {
		p, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p < minPickedPort || p >= lo {
			t.Fatalf("FreePort = %d, want in [%d, %d)", p, minPickedPort, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d from FreePort is not free: %v", p, err)
		}
		l.Close()
	}
}

// TestPortPickerNeverRepeats: a server's ports are distinct (FreePort
// alone picks at random among free ports, and 200 picks of ~12,800 would
// repeat one with a probability near 80 %).
func TestPortPickerNeverRepeats(t *testing.T) {
	p := &portPicker{ip: "127.0.0.1", taken: map[int]bool{}}
	seen := map[int]bool{}
	for range 200 {
		port, err := p.free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
