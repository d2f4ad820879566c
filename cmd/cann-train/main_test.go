package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/internal/s3fake"
)

// childArgsEnv makes this test binary act as `cann-train <args>`, so tests
// start real worker processes without building the binary first.
const childArgsEnv = "CANN_TRAIN_TEST_CHILD_ARGS"

// TestMain also sets the tests' home. The end-to-end tests that mostly
// wait — on heartbeat timeouts, a stopped server, scripted jobs: under
// 0.8 of a core each, measured — call t.Parallel, so that two of them run
// at once, after the rest; one that trains the built-in model, judges
// speed, or sets the environment (t.Setenv) runs alone. Each has its own
// server, ports and directories (newLauncher); they share only PATH's
// python3 (torchOnPath).
func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgsEnv); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, "bad", childArgsEnv, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		root := newRootCmd(&env{out: os.Stdout, err: os.Stderr, command: childCommand})
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "cann-train:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Tests dial servers of their own: a Temporal client configuration of
	// the developer's (TLS, an API key, a profile) must not reach them. A
	// test that wants one sets it.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TEMPORAL_") {
			os.Unsetenv(k)
		}
	}
	os.Setenv("TEMPORAL_CONFIG_FILE", os.DevNull)
	// Nor do they write to the developer's ~/.cann-train: what a test
	// runs in this process without a directory of its own (a default
	// bucket, a quickstart's data directory) goes to a home that ends with
	// the tests. A test that wants another sets it; worker processes get
	// their test's own (newLauncher).
	home, err := os.MkdirTemp("", "cann-train-test-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test home:", err)
		os.Exit(2)
	}
	os.Setenv("CANN_TRAIN_HOME", home)
	// The fake S3 buckets' credentials, set for good: tests that serve
	// one run side by side.
	for _, kv := range s3fake.Credentials() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	code := m.Run()
	os.RemoveAll(home)
	torch.cleanup()
	os.Exit(code)
}

// childCommand runs `cann-train <args>` as a child process of the test.
var childCommand dev.CommandFunc = func(args ...string) *exec.Cmd {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childArgsEnv + "=" + string(raw)}
	return cmd
}

// TestPrintLast: the line a command ends on is plain text, or with
// --log-json a JSON log line with an ISO 8601 time.
func TestPrintLast(t *testing.T) {
	for _, tc := range []struct {
		name      string
		json      bool
		failed    bool
		wantPlain string
		wantLevel string
	}{
		{"plain error", false, true, "cann-train: --id: bad\n", ""},
		{"plain interrupt", false, false, "cann-train: interrupted\n", ""},
		{"json error", true, true, "", "error"},
		{"json interrupt", true, false, "", "info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := "cann-train: interrupted"
			if tc.failed {
				line = "cann-train: --id: bad"
			}
			var b bytes.Buffer
			printLast(&b, tc.json, tc.failed, line)
			if !tc.json {
				if b.String() != tc.wantPlain {
					t.Errorf("wrote %q, want %q", b.String(), tc.wantPlain)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil || strings.Count(b.String(), "\n") != 1 {
				t.Fatalf("wrote %q, want one JSON line (%v)", b.String(), err)
			}
			ts, _ := got["ts"].(string)
			if got["msg"] != line || got["level"] != tc.wantLevel || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`).MatchString(ts) {
				t.Errorf("wrote %v; want msg %q at level %s with an ISO 8601 ts", got, line, tc.wantLevel)
			}
		})
	}
}

// TestDevUIPort: without --ui-port the Web UI is at --port + 1000, and on
// any free port (-1) with --port 0 — not 8233, where two such servers
// would clash.
func TestDevUIPort(t *testing.T) {
	for _, tc := range []struct{ port, want int }{
		{7233, 8233},
		{27233, 28233},
		{0, -1},
		{64535, 65535},
		{64536, -1},
	} {
		if got := devUIPort(tc.port); got != tc.want {
			t.Errorf("devUIPort(%d) = %d, want %d", tc.port, got, tc.want)
		}
	}
}

// TestDevStartError: a dev server's start failure names the flag that
// gets past it.
func TestDevStartError(t *testing.T) {
	other := errors.New("dev: set up schema: disk full")
	for _, tc := range []struct {
		name     string
		err      error
		want     []string
		dontWant string
		is       error
	}{
		{"UI port", &dev.PortInUseError{IP: "127.0.0.1", Port: 8233, UI: true}, []string{"Web UI port 8233", "--ui-port -1", "--ui-port 0"}, "--port 0", dev.ErrPortInUse},
		{"frontend port", &dev.PortInUseError{IP: "127.0.0.1", Port: 7233}, []string{"frontend port 7233", "--port 0", "--db-file"}, "--ui-port", dev.ErrPortInUse},
		{"db in use", fmt.Errorf("dev: db file /x/t.db is %w (pid 7)", dev.ErrDBInUse), []string{"pid 7", "another --db-file"}, "--port", dev.ErrDBInUse},
		{"other", other, []string{"disk full"}, "--", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := devStartError(tc.err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tc.dontWant) {
				t.Errorf("error %q names %q", err, tc.dontWant)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

// TestCheckLeaseEvery: --lease-every from 1s to under the Cluster's lease
// TTL.
func TestCheckLeaseEvery(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string // in the error; "": none
	}{
		{time.Millisecond, "want at least 1s"},
		{999 * time.Millisecond, "want at least 1s"},
		{time.Second, ""},
		{5 * time.Second, ""},
		{19900 * time.Millisecond, ""},
		{clusterLeaseTTL, "want under 20s, the Cluster's lease TTL"},
		{30 * time.Second, "want under 20s"},
	} {
		err := checkLeaseEvery(tc.d)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkLeaseEvery(%v) = %v, want %q", tc.d, err, tc.want)
		}
	}
}

// TestFlagsRefusedAtOnce: a node worker whose --lease-every or
// --work-dir cannot work, and a dev server's --ui-port below -1 (any free
// port), fail before they wait for Temporal (nothing listens at the
// address: a dial would wait until the context ends).
func TestFlagsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	node := []string{"worker", "node", "--id", "n1", "--work-dir", filepath.Join(dir, "work")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"lease at the TTL", append(node, "--lease-every", "20s"), "--lease-every 20s: want under 20s"},
		{"lease too often", append(node, "--lease-every", "10ms"), "--lease-every 10ms: want at least 1s"},
		{"work dir a file", append(node, "--work-dir", file), "--work-dir " + file + ": mkdir " + file + ": not a directory"},
		{"work dir under a file", append(node, "--work-dir", filepath.Join(file, "w")), "not a directory"},
		{"dev ui port below -1", []string{"dev", "--ui-port", "-2"}, "--ui-port -2: want -1..65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var out bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
			root.SetArgs(append(tc.args, "--address", "127.0.0.1:1", "--env-config=false"))
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
				t.Errorf("error %v (context: %v); want %q at once", err, ctx.Err(), tc.want)
			}
		})
	}
}
