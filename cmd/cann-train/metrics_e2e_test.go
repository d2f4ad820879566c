package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/workers"
)

// syncBuffer collects a command's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `cann-train worker control --metrics-listen` serves the SDK's metrics of
// a worker polling a real server, and stops serving when it exits.
func TestWorkerControlServesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := dev.StartServer(ctx, dev.ServerOptions{SearchAttributes: workers.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	var out, errOut syncBuffer
	cmd := newRootCmd(&env{out: &out, err: &errOut, command: childCommand})
	cmd.SetArgs([]string{"worker", "control", "--address", srv.FrontendAddr(), "--metrics-listen", "127.0.0.1:0", "--log-level", "warn"})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(wctx) }()
	urlRE := regexp.MustCompile(`metrics at (http://\S+/metrics)`)
	var url string
	for url == "" {
		if m := urlRE.FindStringSubmatch(errOut.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("worker exited before serving metrics: %v\n%s", err, errOut.String())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The worker's pollers report through the SDK's handler once they poll.
	var body string
	for !strings.Contains(body, "temporal_") {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
		}
		body = string(b)
		select {
		case <-ctx.Done():
			t.Fatalf("no SDK metrics at %s:\n%s", url, body)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("worker: %v", err)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("metrics still served after the worker stopped")
	}
}
