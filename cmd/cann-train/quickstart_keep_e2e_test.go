package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuickstartKeepsAFailedRunsServer: `quickstart --keep` keeps its
// server (and workers) up after a run that failed — an external job whose
// program exits 1 at once — as after one that completed: another command
// reaches the run there (for `run --resume`), until Ctrl-C, and the
// quickstart then exits with the run's error.
func TestQuickstartKeepsAFailedRunsServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	job := filepath.Join(dir, "fails.yaml")
	if err := os.WriteFile(job, []byte("name: keep-fails\nnodes: 1\nsteps: 10\nexternal:\n  entrypoint: [\"false\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	qctx, stop := context.WithCancel(ctx) // (Ctrl-C)
	defer stop()
	var errb syncBuffer
	done := make(chan error, 1)
	go func() {
		root := newRootCmd(&env{out: &syncBuffer{}, err: &errb, command: childCommand})
		root.SetArgs([]string{"quickstart", "-f", job, "--nodes", "1", "--keep", "--port", "0", "--ui-port", "-1",
			"--data-dir", dir, "--log-level", "warn"})
		done <- root.ExecuteContext(qctx)
	}()
	kept := regexp.MustCompile(`other commands reach it with: export TEMPORAL_ADDRESS=(\S+)`)
	var addr string
	for addr == "" {
		if m := kept.FindStringSubmatch(errb.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("quickstart --keep ended after a failed run: %v\n%s", err, errb.String())
		case <-ctx.Done():
			t.Fatalf("quickstart --keep never said it kept the server:\n%s", errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	out, _, err := cliRun(ctx, addr)("status", "keep-fails")
	if err == nil || !strings.Contains(out, "failed") {
		t.Errorf("status of the failed run on the kept server: %v\n%s", err, out)
	}
	stop()
	if err := <-done; err == nil || !errors.As(err, new(*exitError)) {
		t.Errorf("quickstart --keep of a failed run exited %v; want the run's error", err)
	}
}
