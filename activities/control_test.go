package activities

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/spec"
)

// freeAnswers is a client.Client whose QueryWorkflow answers
// spec.QueryFree from answers, one per call (the last repeats), or fails
// with err; it records the requests.
type freeAnswers struct {
	client.Client
	answers []int
	err     error
	// held answers spec.UpdateHoldFree, one per call (the last repeats);
	// holdErr fails it.
	held    []int
	holdErr error

	mu    sync.Mutex
	reqs  []spec.AcquireRequest
	holds []client.UpdateWorkflowOptions
}

func (f *freeAnswers) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, o)
	if o.UpdateName != spec.UpdateHoldFree {
		return nil, errors.New("unexpected update " + o.UpdateName)
	}
	if f.holdErr != nil {
		return nil, f.holdErr
	}
	return heldHandle(f.held[min(len(f.holds), len(f.held))-1]), nil
}

// heldHandle is a completed hold-free Update that held so many nodes.
type heldHandle int

func (heldHandle) WorkflowID() string { return "cluster" }
func (heldHandle) RunID() string      { return "" }
func (heldHandle) UpdateID() string   { return "" }
func (h heldHandle) Get(_ context.Context, v any) error {
	*v.(*int) = int(h)
	return nil
}

func (f *freeAnswers) QueryWorkflow(_ context.Context, _, _ string, name string, args ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name != spec.QueryFree || len(args) != 1 {
		return nil, errors.New("unexpected query " + name)
	}
	f.reqs = append(f.reqs, args[0].(spec.AcquireRequest))
	if f.err != nil {
		return nil, f.err
	}
	n := f.answers[min(len(f.reqs), len(f.answers))-1]
	p, err := converter.GetDefaultDataConverter().ToPayloads(n)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

// TestFreeNodesWaits: without a wait FreeNodes answers what the Cluster
// says now; with one it looks again every poll until a node is free or
// the wait is over, heartbeating, and never passes its wait on to the
// Cluster's query.
func TestFreeNodesWaits(t *testing.T) {
	const poll = 20 * time.Millisecond
	failed := errors.New("no such query handler")
	tests := []struct {
		name    string
		wait    time.Duration
		answers []int
		err     error
		want    int
		calls   int // exactly, or (for a wait that runs out) at least
		hold    time.Duration
		held    []int
		holdErr error
		holds   int // hold Updates sent
	}{
		{"now, none", 0, []int{0}, nil, 0, 1, 0, nil, nil, 0},
		{"now, two", 0, []int{2}, nil, 2, 1, 0, nil, nil, 0},
		{"waits for the third look", time.Minute, []int{0, 0, 1}, nil, 1, 3, 0, nil, nil, 0},
		{"wait over", 10 * poll, []int{0}, nil, 0, 5, 0, nil, nil, 0},
		{"error", time.Minute, nil, failed, 0, 1, 0, nil, nil, 0},
		{"holds what it finds", time.Minute, []int{0, 2}, nil, 1, 2, time.Minute, []int{1}, nil, 1},
		{"another run took it first: looks on", time.Minute, []int{1, 0, 1}, nil, 1, 3, time.Minute, []int{0, 1}, nil, 2},
		{"a Cluster that cannot hold", time.Minute, []int{2}, nil, 2, 1, time.Minute, nil, errors.New("unknown update hold-free"), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fa := &freeAnswers{answers: tc.answers, err: tc.err, held: tc.held, holdErr: tc.holdErr}
			c := &Control{Client: fa, poll: poll}
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			var beats int
			env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats++ })
			env.RegisterActivity(c.FreeNodes)
			start := time.Now()
			v, err := env.ExecuteActivity(c.FreeNodes, "cluster", spec.AcquireRequest{RunID: "run/r", Count: 1, Wait: tc.wait, Hold: tc.hold})
			took := time.Since(start)
			if tc.err != nil {
				if err == nil || !strings.Contains(err.Error(), tc.err.Error()) {
					t.Fatalf("FreeNodes = %v, want the query's error", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				var free int
				if err := v.Get(&free); err != nil || free != tc.want {
					t.Fatalf("FreeNodes = %d, %v; want %d", free, err, tc.want)
				}
			}
			calls := len(fa.reqs)
			if tc.name == "wait over" {
				if calls < tc.calls || took < tc.wait-poll || took > tc.wait+time.Second {
					t.Errorf("a wait of %v with none free: %d looks in %v", tc.wait, calls, took)
				}
			} else if calls != tc.calls {
				t.Errorf("%d looks, want %d", calls, tc.calls)
			}
			if calls > 1 && beats == 0 { // (the SDK throttles what reaches the server)
				t.Errorf("no heartbeat in %d looks", calls)
			}
			if slices.ContainsFunc(fa.reqs, func(r spec.AcquireRequest) bool { return r.Wait != 0 || r.RunID != "run/r" }) {
				t.Errorf("queries %+v; want the run's request without its wait", fa.reqs)
			}
			if len(fa.holds) != tc.holds {
				t.Errorf("%d hold Updates, want %d", len(fa.holds), tc.holds)
			}
			ids := map[string]bool{}
			for _, o := range fa.holds {
				req := o.Args[0].(spec.AcquireRequest)
				if o.WorkflowID != "cluster" || req.RunID != "run/r" || req.Count != 1 || req.Hold != tc.hold || ids[o.UpdateID] {
					t.Errorf("hold Update %+v; want one of run/r's node for %v, under an ID of its own", o, tc.hold)
				}
				ids[o.UpdateID] = true
			}
		})
	}
}

// noCluster is a client.Client that knows no workflow: every Update is
// NotFound (a cluster_id no node worker registered with).
type noCluster struct {
	client.Client
	calls int
}

func (n *noCluster) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	n.calls++
	return nil, serviceerror.NewNotFound("workflow not found")
}

// TestAcquireNodesOfAnUnknownCluster: an acquire from a Cluster no node
// worker has registered with waits for it as long as for the nodes
// (node_wait), then fails saying so — before, it waited out the
// activity's timeouts and the run failed with a bare "StartToClose
// timeout".
func TestAcquireNodesOfAnUnknownCluster(t *testing.T) {
	nc := &noCluster{}
	c := &Control{Client: nc}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(c.AcquireNodes)
	start := time.Now()
	_, err := env.ExecuteActivity(c.AcquireNodes, "typo-cluster", spec.AcquireRequest{RunID: "run/r", Count: 1, Wait: 1200 * time.Millisecond})
	took := time.Since(start)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeNotEnoughNodes || !ae.NonRetryable() ||
		!strings.Contains(ae.Message(), `no cluster registry "typo-cluster" after waiting 1.2s (node_wait)`) {
		t.Fatalf("acquire from an unknown cluster: %v", err)
	}
	if took < 1200*time.Millisecond || took > 5*time.Second || nc.calls < 2 {
		t.Errorf("gave up after %v and %d asks; want node_wait (1.2s), asking again meanwhile", took, nc.calls)
	}
}
