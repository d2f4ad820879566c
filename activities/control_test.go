package activities

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
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

	mu   sync.Mutex
	reqs []spec.AcquireRequest
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
	}{
		{"now, none", 0, []int{0}, nil, 0, 1},
		{"now, two", 0, []int{2}, nil, 2, 1},
		{"waits for the third look", time.Minute, []int{0, 0, 1}, nil, 1, 3},
		{"wait over", 10 * poll, []int{0}, nil, 0, 5},
		{"error", time.Minute, nil, failed, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fa := &freeAnswers{answers: tc.answers, err: tc.err}
			c := &Control{Client: fa, poll: poll}
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			var beats int
			env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats++ })
			env.RegisterActivity(c.FreeNodes)
			start := time.Now()
			v, err := env.ExecuteActivity(c.FreeNodes, "cluster", spec.AcquireRequest{RunID: "run/r", Count: 1, Wait: tc.wait})
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
		})
	}
}
