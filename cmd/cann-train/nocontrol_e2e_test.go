package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestStatusWithoutControlWorker: a run started while no control worker
// runs cannot be read; status says so at once (instead of waiting out the
// query's deadline) and watch says it once while it waits. Watching a run
// the server does not know fails at once.
func TestStatusWithoutControlWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, c := startServerClient(ctx, t)
	run := startRun(ctx, t, c, workflows.RunInput{Spec: spec.RunSpec{Name: "orphan", Nodes: 1, Steps: 10}.WithDefaults()})

	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"status", "orphan", "--address", srv.FrontendAddr()})
	start := time.Now()
	err := root.ExecuteContext(ctx)
	if !errors.Is(err, errNoControlWorker) || time.Since(start) > 5*time.Second {
		t.Fatalf("status after %v: %v; want errNoControlWorker at once", time.Since(start), err)
	}

	var w bytes.Buffer
	wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer wcancel()
	if _, err := watchRun(wctx, c, run.GetID(), &w, false, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watch: %v", err)
	}
	if n := strings.Count(w.String(), "waiting: no control worker polls task queue"); n != 1 || strings.Contains(w.String(), "step 0/0") {
		t.Errorf("watch wrote the trouble %d times (want once), and no status line:\n%s", n, w.String())
	}

	// A cancel (or pause) needs no control worker to be recorded: it is,
	// and says that it waits for one.
	var cout, errw bytes.Buffer
	root = newRootCmd(&env{out: &cout, err: &errw, command: childCommand})
	root.SetArgs([]string{"cancel", "orphan", "--address", srv.FrontendAddr()})
	if err := root.ExecuteContext(ctx); err != nil || !strings.Contains(cout.String(), "run/orphan: cancel requested") ||
		!strings.Contains(errw.String(), "the cancel is recorded and takes effect once a control worker runs the workflow") {
		t.Fatalf("cancel without a control worker: %v\n%s%s", err, cout.String(), errw.String())
	}
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if n := fetchHistory(ctx, t, c, run.GetID()).GetEvents(); desc.GetWorkflowExecutionInfo().GetHistoryLength() == 0 ||
		n[len(n)-1].GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED {
		t.Errorf("the cancel was not recorded in the run's history: last event %v", n[len(n)-1].GetEventType())
	}

	// A run the server does not know is no trouble to wait out.
	w.Reset()
	root = newRootCmd(&env{out: &w, err: &w, command: childCommand})
	root.SetArgs([]string{"watch", "never-started", "--address", srv.FrontendAddr()})
	start = time.Now()
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "no run run/never-started in namespace default at "+srv.FrontendAddr()) || time.Since(start) > 5*time.Second {
		t.Fatalf("watch of an unknown run after %v: %v; want \"no run\" at once", time.Since(start), err)
	}
}
