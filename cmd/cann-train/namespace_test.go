package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnknownNamespaceSaidAtOnce: every command that dials Temporal — the
// CLI's, and workers, which wait for a server that does not answer —
// fails at once on a namespace the server does not have, naming the
// server and how to create it (a node worker waited 15 s for the registry
// and blamed the control worker); the server's own namespace dials as
// before.
func TestUnknownNamespaceSaidAtOnce(t *testing.T) {
	t.Setenv("CANN_TRAIN_HOME", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, _ := startServerClient(ctx, t) // (its client dials namespace default)
	addr := srv.FrontendAddr()
	want := `namespace "nope" does not exist on ` + addr + ` (--namespace / TEMPORAL_NAMESPACE; create it: temporal operator namespace create -n nope)`
	for _, args := range [][]string{
		{"nodes"},
		{"run", "-f", filepath.Join("..", "..", "examples", "mnist.yaml"), "--name", "ns-check"},
		{"worker", "control"},
		{"worker", "node", "--id", "n1"},
	} {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		start := time.Now()
		root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
		root.SetArgs(append(args, "--address", addr, "--namespace", "nope"))
		err := root.ExecuteContext(cctx)
		ccancel()
		if err == nil || !strings.Contains(err.Error(), want) || time.Since(start) > 10*time.Second {
			t.Errorf("%v: %v after %v; want %q at once", args, err, time.Since(start).Round(time.Millisecond), want)
		}
	}
}
