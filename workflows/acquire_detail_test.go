package workflows

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/spec"
)

func TestAcquireDetail(t *testing.T) {
	now := time.Date(2026, 12, 1, 6, 50, 0, 0, time.UTC)
	tests := []struct {
		count, min, held int
		wait             time.Duration
		want             string
	}{
		{3, 0, 0, 2 * time.Minute, "waiting for 3 free node(s) until 06:52:00 UTC (node_wait 2m0s)"},
		{3, 2, 0, 30 * time.Second, "waiting for 3 free node(s), or at least 2 until 06:50:30 UTC (node_wait 30s)"},
		{3, 3, 0, time.Hour, "waiting for 3 free node(s) until 07:50:00 UTC (node_wait 1h0m0s)"},
		{2, 0, 1, 2 * time.Minute, "waiting for 1 free node(s) beside the 1 it keeps (2 in all) until 06:52:00 UTC (node_wait 2m0s)"},
		{4, 2, 3, time.Minute, "waiting for 1 free node(s) beside the 3 it keeps (4 in all, or at least 2) until 06:51:00 UTC (node_wait 1m0s)"},
		{2, 0, 2, 0, "asking for 2 free node(s)"}, // keeps them all: nothing to wait for
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, acquireDetail(tc.count, tc.min, tc.held, now, tc.wait))
	}
}

func TestShunDetail(t *testing.T) {
	for _, tc := range []struct {
		shun []string
		want string
	}{
		{nil, ""},
		{[]string{"node-3"}, " (not node node-3: cut off from the run's checkpoint bucket, until its worker registers again)"},
		{[]string{"node-3", "node-5"},
			" (not nodes node-3, node-5: cut off from the run's checkpoint bucket, until their workers register again)"},
	} {
		require.Equal(t, tc.want, shunDetail(tc.shun))
	}
}

// TestTrainingRunSaysWhatItWaitsFor: while the run waits for nodes, at
// the start and for a rescale, its status says for how many and until
// when; once it has them the detail is gone.
func TestTrainingRunSaysWhatItWaitsFor(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	var during []spec.RunStatus
	env.RegisterActivityWithOptions(func(ctx context.Context, id string, req spec.AcquireRequest) ([]spec.Node, error) {
		v, err := queryInActivity(env, spec.QueryStatus)
		require.NoError(t, err)
		var st spec.RunStatus
		require.NoError(t, v.Get(&st))
		during = append(during, st)
		return cl.acquire(ctx, id, req)
	}, activity.RegisterOptions{Name: spec.ActivityAcquireNodes})
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 0 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 100, NodeWait: spec.Duration(90 * time.Second)}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Len(t, during, 2)
	require.Equal(t, spec.PhaseAcquiring, during[0].Phase)
	require.Regexp(t, `^waiting for 2 free node\(s\) until \d\d:\d\d:\d\d UTC \(node_wait 1m30s\)`+regexp.QuoteMeta(acquireThen)+`$`, during[0].Detail,
		"a run waiting for the nodes it needs says it fails after the wait, and where to see why it waits")
	require.Equal(t, spec.PhaseRescaling, during[1].Phase)
	// (A scale-up takes what is free at once — versionScaleUpGrows — and
	// asks again later for the rest: it waits for nothing.)
	require.Equal(t, "rescaling 2 → 3 nodes at step 100: asking for 1 free node(s) beside the 2 it keeps (3 in all)", during[1].Detail)
	require.Equal(t, []string{"node-1", "node-2", "node-3"}, st.Nodes)
	require.Empty(t, st.Detail)
}

// TestTrainingRunControlsWhileWaitingForNodes: a pause or a rescale that
// comes while the run waits for its first nodes withdraws the wait at
// once (it would otherwise last node_wait, and a run that could not get
// its nodes failed): a paused run holds without nodes until a resume and
// then asks again; a rescaled one asks for the new count.
func TestTrainingRunControlsWhileWaitingForNodes(t *testing.T) {
	tests := []struct {
		name   string
		signal func(env *testsuite.TestWorkflowEnvironment)
		counts []int // the acquires' counts
		paused bool  // held (paused, no nodes) between them
	}{
		{"pause", func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(spec.SignalPause, nil) }, []int{2, 2}, true},
		{"rescale", func(env *testsuite.TestWorkflowEnvironment) {
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		}, []int{2, 3}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3"), withdraws: make(chan spec.Withdraw, 8)}
			ch := &fakeChunks{}
			env := newRunEnv(t, cl, ch)
			var counts []int
			env.RegisterActivityWithOptions(func(ctx context.Context, id string, req spec.AcquireRequest) ([]spec.Node, error) {
				counts = append(counts, req.Count)
				if len(counts) > 1 {
					return cl.acquire(ctx, id, req)
				}
				// The first waits — no node is free — until withdrawn.
				tc.signal(env)
				select {
				case w := <-cl.withdraws:
					require.Equal(t, req.RunID, w.RunID)
					return nil, temporal.NewNonRetryableApplicationError("withdrawn", spec.ErrTypeAcquireWithdrawn, nil)
				case <-time.After(10 * time.Second):
					return nil, temporal.NewNonRetryableApplicationError("not enough nodes (never withdrawn)", spec.ErrTypeNotEnoughNodes, nil)
				}
			}, activity.RegisterOptions{Name: spec.ActivityAcquireNodes})
			var held spec.RunStatus
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(spec.QueryStatus)
				require.NoError(t, err)
				require.NoError(t, v.Get(&held))
				env.SignalWorkflow(spec.SignalResume, nil)
			}, time.Hour)
			s := spec.RunSpec{Name: "t", Nodes: 2, MinNodes: 1, Steps: 200, ChunkSteps: 100, NodeWait: spec.Duration(2 * time.Hour)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.NoError(t, env.GetWorkflowError())
			var st spec.RunStatus
			require.NoError(t, env.GetWorkflowResult(&st))
			require.Equal(t, tc.counts, counts)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Len(t, st.Nodes, tc.counts[1])
			if tc.paused {
				require.Equal(t, spec.PhasePaused, held.Phase, "an hour on it holds, paused")
				require.Empty(t, held.Nodes)
				require.Equal(t, "paused at step 0 (cann-train resume t continues)", held.Detail)
			}
			require.Zero(t, st.PendingNodes)
		})
	}
}
