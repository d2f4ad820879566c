package workflows

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

func testNodes(ids ...string) []spec.Node {
	out := make([]spec.Node, len(ids))
	for i, id := range ids {
		out[i] = spec.Node{ID: id, TaskQueue: spec.NodeTaskQueue(id), CommAddr: fmt.Sprintf("127.0.0.1:%d", 9000+i)}
	}
	return out
}

// fakeCluster plays the Cluster's acquire semantics for the mocked
// AcquireNodes activity: keep healthy nodes in their ranks, fill holes.
type fakeCluster struct {
	mu     sync.Mutex
	pool   []spec.Node
	held   []spec.Node
	failed map[string]bool
	// misconfigured are the nodes marked failed as misconfigured.
	misconfigured map[string]bool
	calls         int
	// releases counts the runs' release signals; markSignals the
	// mark-failed signals, markedInAcquire the failures acquire requests
	// carried.
	releases, markSignals, markedInAcquire int
	// drains are the runs' drain signals (slow_node: drain).
	drains []spec.Drain
	// onAcquire, when set, hears of each request before it is served.
	onAcquire func(req spec.AcquireRequest)
	// withdraws, when set, hears the runs' withdraw signals.
	withdraws chan spec.Withdraw
}

// freeLocked counts the pool's nodes that are neither failed nor held, as
// the Cluster's FreeNodes does (f.mu held).
func (f *fakeCluster) freeLocked() int {
	free := 0
	for _, n := range f.pool {
		if !f.failed[n.ID] && !slices.ContainsFunc(f.held, func(h spec.Node) bool { return h.ID == n.ID }) {
			free++
		}
	}
	return free
}

func (f *fakeCluster) acquire(_ context.Context, _ string, req spec.AcquireRequest) ([]spec.Node, error) {
	if f.onAcquire != nil {
		f.onAcquire(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	for _, mf := range req.Failed {
		f.markFailedLocked(mf)
		f.markedInAcquire++
	}
	out := make([]spec.Node, req.Count)
	used := map[string]bool{}
	for _, id := range req.Leave {
		used[id] = true // given back: fills no rank
	}
	for i := range out {
		if i < len(f.held) && !f.failed[f.held[i].ID] && !slices.Contains(req.Leave, f.held[i].ID) {
			out[i] = f.held[i]
			used[out[i].ID] = true
		}
	}
	for i := range out {
		if out[i].ID != "" {
			continue
		}
		// Avoided nodes last, like the Cluster.
		pool := slices.Concat(
			slices.DeleteFunc(slices.Clone(f.pool), func(n spec.Node) bool { return slices.Contains(req.Avoid, n.ID) }),
			slices.DeleteFunc(slices.Clone(f.pool), func(n spec.Node) bool { return !slices.Contains(req.Avoid, n.ID) }))
		for _, n := range pool {
			if !used[n.ID] && !f.failed[n.ID] {
				out[i], used[n.ID] = n, true
				break
			}
		}
		if out[i].ID == "" {
			if req.MinCount < 1 || req.MinCount >= req.Count {
				return nil, temporal.NewNonRetryableApplicationError("not enough nodes", spec.ErrTypeNotEnoughNodes, nil)
			}
			// Shrink like the Cluster: the nodes found, in rank order.
			var got []spec.Node
			for _, n := range out {
				if n.ID != "" {
					got = append(got, n)
				}
			}
			if len(got) < req.MinCount {
				return nil, temporal.NewNonRetryableApplicationError("not enough nodes", spec.ErrTypeNotEnoughNodes, nil)
			}
			f.held = got
			return got, nil
		}
	}
	f.held = out
	return out, nil
}

// fakeChunks plays TrainChunk: loss falls with the step; rank 0 reports a
// checkpoint when asked. fail(in) may inject an error.
type fakeChunks struct {
	mu     sync.Mutex
	inputs []spec.ChunkInput
	fail   func(in spec.ChunkInput) error
	// edit, when set, amends each successful result.
	edit func(in spec.ChunkInput, res *spec.ChunkResult)
	// onStart runs first in every chunk (tests signal the run from it:
	// the signal reaches the workflow while the chunk runs).
	onStart func(in spec.ChunkInput)
	// reports are the WriteReport calls; refuseReports fails them.
	reports       []spec.ReportInput
	refuseReports bool
	// checks are the CheckNodes calls (with the asked node's queue);
	// gone answers them (nil: every node alive).
	checks []checkCall
	gone   func(in spec.CheckNodesInput) ([]spec.PeerFailure, error)
	// deaf, when set, names the task queues whose worker takes no
	// CheckNodes call (dead, or still unreachable).
	deaf func(queue string) bool
}

type checkCall struct {
	queue string
	in    spec.CheckNodesInput
}

// check plays CheckNodes.
func (f *fakeChunks) check(ctx context.Context, in spec.CheckNodesInput) ([]spec.PeerFailure, error) {
	f.mu.Lock()
	queue := activity.GetInfo(ctx).TaskQueue
	f.checks = append(f.checks, checkCall{queue: queue, in: in})
	gone, deaf := f.gone, f.deaf
	f.mu.Unlock()
	if deaf != nil && deaf(queue) {
		return nil, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
	}
	if gone == nil {
		return nil, nil
	}
	return gone(in)
}

// report plays WriteReport.
func (f *fakeChunks) report(_ context.Context, in spec.ReportInput) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, in)
	if f.refuseReports {
		return "", errors.New("bucket says no")
	}
	return in.URL + " " + spec.ReportKey(in.Run), nil
}

func (f *fakeChunks) train(_ context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
	f.mu.Lock()
	f.inputs = append(f.inputs, in)
	f.mu.Unlock()
	if f.onStart != nil {
		f.onStart(in)
	}
	if f.fail != nil {
		if err := f.fail(in); err != nil {
			return nil, err
		}
	}
	t0 := time.Unix(1_700_000_000, 0).Add(time.Duration(in.From) * time.Second)
	res := &spec.ChunkResult{
		NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, From: in.From, To: in.To,
		FirstLoss: 2.3 / float32(1+in.From), LastLoss: 2.3 / float32(1+in.To), Seconds: 1,
		SamplesPerSec: 100, WeightsSHA256: fmt.Sprintf("w%d", in.To),
		StartedAt: t0, FirstStepAt: t0.Add(10 * time.Millisecond), EndedAt: t0.Add(time.Second),
	}
	if in.Rank == 0 && in.Checkpoint {
		res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: in.To, Key: fmt.Sprintf("ckpt/%d", in.To)}
	}
	if in.Rank == 0 && in.Evaluate {
		res.EvalMetric, res.EvalValue = "test_accuracy", 0.97
	}
	if f.edit != nil {
		f.edit(in, res)
	}
	return res, nil
}

// all is every chunk input so far (a copy: a chunk still running when
// its workflow ended may add one).
func (f *fakeChunks) all() []spec.ChunkInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.inputs)
}

func (f *fakeChunks) byFrom() map[int64][]spec.ChunkInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int64][]spec.ChunkInput{}
	for _, in := range f.inputs {
		out[in.From] = append(out[in.From], in)
	}
	return out
}

func newRunEnv(t *testing.T, cl *fakeCluster, ch *fakeChunks) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
	env.RegisterActivityWithOptions(cl.acquire, activity.RegisterOptions{Name: spec.ActivityAcquireNodes})
	env.RegisterActivityWithOptions(ch.train, activity.RegisterOptions{Name: spec.ActivityTrainChunk})
	env.RegisterActivityWithOptions(ch.report, activity.RegisterOptions{Name: spec.ActivityWriteReport})
	env.RegisterActivityWithOptions(ch.check, activity.RegisterOptions{Name: spec.ActivityCheckNodes})
	env.OnSignalExternalWorkflow(mock.Anything, spec.DefaultClusterID, "", mock.Anything, mock.Anything).
		Return(func(_, _, _, name string, arg any) error {
			if name == spec.SignalRelease {
				cl.mu.Lock()
				defer cl.mu.Unlock()
				cl.releases++
			}
			if name == spec.SignalMarkFailed {
				cl.mu.Lock()
				defer cl.mu.Unlock()
				cl.markFailedLocked(arg.(spec.MarkFailed))
				cl.markSignals++
			}
			if name == spec.SignalWithdraw && cl.withdraws != nil {
				cl.withdraws <- arg.(spec.Withdraw)
			}
			if name == spec.SignalDrain {
				cl.mu.Lock()
				defer cl.mu.Unlock()
				cl.drains = append(cl.drains, arg.(spec.Drain))
			}
			return nil
		})
	return env
}

func (f *fakeCluster) markFailedLocked(mf spec.MarkFailed) {
	if f.failed == nil {
		f.failed = map[string]bool{}
	}
	f.failed[mf.NodeID] = true
	if mf.Misconfigured {
		if f.misconfigured == nil {
			f.misconfigured = map[string]bool{}
		}
		f.misconfigured[mf.NodeID] = true
	}
}

func TestTrainingRunCompletes(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 250, ChunkSteps: 100, CheckpointEvery: 200}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 250, st.Step)
	require.Equal(t, 3, st.Chunks)
	require.Equal(t, []string{"node-1", "node-2", "node-3"}, st.Nodes)
	require.Empty(t, st.Recoveries)
	require.InDelta(t, 2.3, st.InitialLoss, 1e-6)
	require.InDelta(t, 2.3/251, st.Loss, 1e-6)
	require.Equal(t, "test_accuracy", st.EvalMetric)
	// Checkpoints at the chunk crossing 200 and at the end.
	require.Equal(t, 2, st.Checkpoints)
	require.EqualValues(t, 250, st.LastCkpt.Step)
	require.Equal(t, "w250", st.WeightsSHA256)
	require.Equal(t, 1, cl.calls)

	chunks := ch.byFrom()
	require.Len(t, chunks, 3)
	sessions := map[string]bool{}
	for from, ins := range chunks {
		require.Len(t, ins, 3, "chunk from %d", from)
		for _, in := range ins {
			require.Equal(t, in.Membership.Nodes[in.Rank].ID, cl.held[in.Rank].ID)
			require.NotEmpty(t, in.Token)
			sessions[in.Session] = true
		}
	}
	require.Len(t, sessions, 3, "every chunk needs its own communicator session")
	require.False(t, chunks[0][0].Checkpoint)
	require.True(t, chunks[100][0].Checkpoint)
	require.True(t, chunks[200][0].Checkpoint && chunks[200][0].Evaluate)
	require.EqualValues(t, 200, chunks[200][0].Restore.Step, "later chunks carry the last checkpoint")
}

// TestTrainingRunPinsItsBucket: a job that names no checkpoint_url saves
// where its first checkpoint went (the worker of rank 0 then chose), so
// that a later rank 0 whose worker has another --checkpoint-url does not
// move the run's checkpoints to its own bucket; one that names it keeps it.
func TestTrainingRunPinsItsBucket(t *testing.T) {
	for _, tc := range []struct{ job, want string }{{"", "file:///first"}, {"s3://job", "s3://job"}} {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
		ch := &fakeChunks{edit: func(in spec.ChunkInput, res *spec.ChunkResult) {
			if res.Checkpoint != nil {
				res.Checkpoint.URL = cmp.Or(in.Spec.CheckpointURL, "file:///first") // (the worker's own bucket)
			}
		}}
		env := newRunEnv(t, cl, ch)
		s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100, CheckpointEvery: 100, CheckpointURL: tc.job}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		st := result(t, env)
		require.Equal(t, tc.want, st.LastCkpt.URL)
		for from, ins := range ch.byFrom() {
			for _, in := range ins {
				want := tc.want
				if from == 0 {
					want = tc.job // (no checkpoint yet)
				}
				require.Equal(t, want, in.Spec.CheckpointURL, "chunk from %d, rank %d", from, in.Rank)
			}
		}
	}
}

// TestTrainingRunCheckpointsMoreOftenThanChunks: checkpoint_every below
// chunk_steps ends chunks at its multiples, each with its checkpoint;
// otherwise chunks keep their length.
func TestTrainingRunCheckpointsMoreOftenThanChunks(t *testing.T) {
	cases := []struct {
		name              string
		chunk, every      int64
		froms, checkpoint []int64
	}{
		{"every below chunk", 400, 150, []int64{0, 150, 300, 450, 600, 750, 900}, []int64{150, 300, 450, 600, 750, 900, 1000}},
		{"every a chunk", 400, 400, []int64{0, 400, 800}, []int64{400, 800, 1000}},
		{"every two chunks", 250, 500, []int64{0, 250, 500, 750}, []int64{500, 1000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "b")}
			ch := &fakeChunks{}
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 1000, ChunkSteps: tc.chunk, CheckpointEvery: tc.every}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.NoError(t, env.GetWorkflowError())
			var st spec.RunStatus
			require.NoError(t, env.GetWorkflowResult(&st))
			require.EqualValues(t, 1000, st.Step)
			var froms, ckpts []int64
			for _, in := range ch.all() {
				if in.Rank != 0 {
					continue
				}
				froms = append(froms, in.From)
				if in.Checkpoint {
					ckpts = append(ckpts, in.To)
				}
			}
			require.Equal(t, tc.froms, froms)
			require.Equal(t, tc.checkpoint, ckpts)
			require.Equal(t, len(tc.checkpoint), st.Checkpoints)
		})
	}
}

func TestTrainingRunReplacesDeadNode(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1"), failed: map[string]bool{}}
	ch := &fakeChunks{}
	dead := make(chan struct{})
	t.Cleanup(func() { close(dead) })
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 100 || in.Membership.Generation != 1 {
			return nil
		}
		if in.Membership.Nodes[in.Rank].ID == "node-2" {
			<-dead // the killed process never answers
			return errors.New("unreachable")
		}
		return temporal.NewApplicationErrorWithCause("peer 1 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 130})
	}
	env := newRunEnv(t, cl, ch)
	// What the status says while the replacement is asked for.
	var waiting []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name != spec.ActivityAcquireNodes {
			return
		}
		v, err := env.QueryWorkflow(spec.QueryStatus)
		require.NoError(t, err)
		var st spec.RunStatus
		require.NoError(t, v.Get(&st))
		waiting = append(waiting, st.Detail)
	})
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 300, st.Step)
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.Len(t, waiting, 2)
	require.Contains(t, waiting[1], "replacing node-2, lost in the chunk from step 100: waiting for 1 free node(s) beside the 2 it keeps (3 in all)", "the status says why the run waits")
	require.Empty(t, st.Detail)
	require.Equal(t, []string{"node-2"}, rec.FailedNodes)
	require.Equal(t, []string{"spare-1"}, rec.Replacement)
	require.Equal(t, 1, cl.markedInAcquire, "the failure travels with the acquire request")
	require.Zero(t, cl.markSignals, "no mark-failed signal awaited first")
	require.EqualValues(t, 100, rec.ResumeStep, "resume from the checkpoint at 100")
	require.EqualValues(t, 130, rec.FailedAtStep)
	require.EqualValues(t, 30, rec.LostSteps)
	require.False(t, rec.ResumedAt.IsZero(), "the first chunk after the recovery sets ResumedAt")
	require.EqualValues(t, 2, st.Generation)
	require.Equal(t, []string{"node-1", "spare-1", "node-3"}, st.Nodes, "healthy nodes keep their ranks")

	var gen2 []spec.ChunkInput
	for _, in := range ch.byFrom()[100] {
		if in.Membership.Generation == 2 {
			gen2 = append(gen2, in)
		}
	}
	require.Len(t, gen2, 3)
	for _, in := range gen2 {
		require.EqualValues(t, 100, in.Restore.Step)
	}
}

func TestTrainingRunGivesUpAfterMaxRestarts(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b", "c", "d", "e", "f")}
	ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
		return temporal.NewApplicationErrorWithCause("lost peer", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1 - in.Rank})
	}}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 100, ChunkSteps: 50, MaxRestarts: 2}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	err := env.GetWorkflowError()
	require.Error(t, err)
	require.Contains(t, err.Error(), "gave up after 2 restart(s)")
}

func TestTrainingRunRejectsBadSpec(t *testing.T) {
	env := newRunEnv(t, &fakeCluster{}, &fakeChunks{})
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "bad name!"}})
	err := env.GetWorkflowError()
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "got %v", err)
	require.Equal(t, "InvalidSpec", ae.Type())
}

// TestTrainingRunRejectsUnknownInputFields: a hand-written JSON input
// (the `temporal` CLI's --input) with a field TrainingRun does not know
// fails the run at once, naming it, instead of running without it; the
// same input spelt right runs.
func TestTrainingRunRejectsUnknownInputFields(t *testing.T) {
	for _, tc := range []struct{ input, unknown string }{
		{`{"spec": {"name": "t", "nodse": 1, "steps": 100}}`, `unknown field "spec.nodse" (did you mean nodes?)`},
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100}, "cluster": "c"}`, `unknown field "cluster" (did you mean cluster_id?)`},
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100, "green": {"trace": "x.csv", "deadlin": "2h"}}}`,
			`unknown field "spec.green.deadlin" (did you mean deadline?)`},
		{`{"spec": {"name": "t", "nodes": 1, "stesp": 100, "zzzzzzzz": 1}, "faults": [{"node_di": "a"}]}`,
			`unknown fields "spec.stesp" (did you mean steps?), "spec.zzzzzzzz", "faults[0].node_di" (did you mean node_id?)`},
		// A misspelt required field: named before what its absence broke.
		{`{"spec": {"nmae": "t", "nodes": 1, "steps": 100}}`, `unknown field "spec.nmae" (did you mean name?); run spec: 1 problem(s)`},
		{`{"spce": {"name": "t", "nodes": 1, "steps": 100}}`, `unknown field "spce" (did you mean spec?); run spec:`},
		// A value of the wrong type: named, not the decoder's retryable error.
		{`{"spec": {"name": "t", "nodes": "two", "steps": 100}}`, `spec.nodes: a string where a whole number belongs`},
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100, "topology_scan": 1}}`, `spec.topology_scan: a number where true or false belongs`},
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100, "node_wait": 120}}`, `spec.node_wait: a number where a duration string ("90s", "2m", "1h30m") belongs`},
		{`[1, 2]`, `the input is an array, not an object: want {"spec": {"name": …, "nodes": …, "steps": …}}`},
		// The spec's fields without the wrapper.
		{`{"name": "t", "nodes": 1, "steps": 100}`, `unknown fields "name", "nodes", "steps" (a job's fields go under "spec": {"spec": {"name": …, "nodes": …}})`},
		// The run's own state, from another run's history.
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100}, "state": {"status": {"step": 40}}}`, `"state" is the run's own, set only when it continues as new`},
		{`{"spec": {"name": "t", "nodes": 1, "steps": 100}}`, ""},
	} {
		cl := &fakeCluster{pool: testNodes("a")}
		env := newRunEnv(t, cl, &fakeChunks{})
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, json.RawMessage(tc.input))
		err := env.GetWorkflowError()
		if tc.unknown == "" {
			require.NoError(t, err, tc.input)
			continue
		}
		var ae *temporal.ApplicationError
		require.True(t, errors.As(err, &ae), "%s: got %v", tc.input, err)
		require.Equal(t, "InvalidSpec", ae.Type())
		require.Contains(t, ae.Message(), "workflow input: "+tc.unknown)
		require.Zero(t, cl.calls, "no node was asked for")
	}
}

// TestTrainingRunRefusesAnotherName: a run started by hand as run/j5 with
// the spec name "other" would store its checkpoints under "other", where
// nothing that knows it as j5 looks; it fails at once. IDs outside run/
// are not checked (the test suite's own).
func TestTrainingRunRefusesAnotherName(t *testing.T) {
	for _, tc := range []struct {
		id, name string
		ok       bool
	}{
		{"run/j5", "other", false},
		{"run/j5", "j5", true},
		{"default-test-workflow-id", "t", true},
	} {
		cl := &fakeCluster{pool: testNodes("a")}
		env := newRunEnv(t, cl, &fakeChunks{})
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: tc.id})
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: tc.name, Nodes: 1, Steps: 100, ChunkSteps: 100}})
		err := env.GetWorkflowError()
		if tc.ok {
			require.NoError(t, err, tc.id)
			continue
		}
		var ae *temporal.ApplicationError
		require.True(t, errors.As(err, &ae), "%s: got %v", tc.id, err)
		require.Equal(t, "InvalidSpec", ae.Type())
		require.Contains(t, ae.Message(), `workflow ID "run/j5" with spec name "other"`)
		require.Zero(t, cl.calls, "no node was asked for")
	}
}

// continueRun runs TrainingRun with in as Temporal starts a run that
// continued as new: an input carrying the run's state is refused from
// anything else.
func continueRun(env *testsuite.TestWorkflowEnvironment, in RunInput) {
	if in.State != nil {
		env.SetContinuedExecutionRunID("the-run-before")
	}
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, in)
}

func TestTrainingRunContinuesAsNew(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 500, ChunkSteps: 100, ChunksPerRun: 2}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(err, &can), "want continue-as-new, got %v", err)
	require.Equal(t, spec.WorkflowTrainingRun, can.WorkflowType.Name)

	// The carried state resumes where the first run stopped.
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	require.NotNil(t, next.State)
	require.EqualValues(t, 200, next.State.Status.Step)
	require.Equal(t, []string{"a"}, next.State.Membership.NodeIDs())

	env2 := newRunEnv(t, cl, ch)
	continueRun(env2, next)
	var can2 *workflow.ContinueAsNewError
	require.True(t, errors.As(env2.GetWorkflowError(), &can2))
	require.NoError(t, decodeArgs(can2, &next))
	env3 := newRunEnv(t, cl, ch)
	continueRun(env3, next)
	require.NoError(t, env3.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env3.GetWorkflowResult(&st))
	require.EqualValues(t, 500, st.Step)
	require.Equal(t, 5, st.Chunks)
	require.Equal(t, 1, cl.calls, "nodes are acquired once, not per continue-as-new")
}

// failFirstChunkFrom100 runs a 3-node, 200-step job (chunks of 100, a
// one-hour heartbeat timeout) whose generation-1 chunk from step 100 ends as
// behave says for each node (hang: blocks until the test ends, as a dead or
// waiting process does) and returns the final status of the recovered run.
func failFirstChunkFrom100(t *testing.T, behave func(node string, hang <-chan struct{}) error) spec.RunStatus {
	t.Helper()
	return failFirstChunkFrom100With(t, func(*fakeChunks) {}, behave)
}

// failFirstChunkFrom100With is failFirstChunkFrom100 with the fake chunks
// set up by setup first.
func failFirstChunkFrom100With(t *testing.T, setup func(*fakeChunks), behave func(node string, hang <-chan struct{}) error) spec.RunStatus {
	t.Helper()
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1")}
	ch := &fakeChunks{}
	setup(ch)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 100 || in.Membership.Generation != 1 {
			return nil
		}
		return behave(in.Membership.Nodes[in.Rank].ID, hang)
	}
	st := runHourHeartbeat(t, cl, ch)
	require.Len(t, st.Recoveries, 1)
	return st
}

// runHourHeartbeat runs 200 steps on 3 of cl's nodes in chunks of 100 with
// a one-hour heartbeat timeout (a failure found sooner was found by other
// means), and returns the completed run's status.
func runHourHeartbeat(t *testing.T, cl *fakeCluster, ch *fakeChunks) spec.RunStatus {
	t.Helper()
	return runHourHeartbeatSteps(t, cl, ch, 200)
}

// runHourHeartbeatSteps is runHourHeartbeat for a run of steps steps.
func runHourHeartbeatSteps(t *testing.T, cl *fakeCluster, ch *fakeChunks, steps int64) spec.RunStatus {
	t.Helper()
	env := newRunEnv(t, cl, ch)
	env.SetTestTimeout(30 * time.Second)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: steps, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour)}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.EqualValues(t, steps, st.Step)
	return st
}

// A killed node never reports; its peers blame it at once. The workflow
// must not wait for the dead node's heartbeat timeout.
func TestTrainingRunCancelsBlamedSilentNode(t *testing.T) {
	st := failFirstChunkFrom100(t, func(node string, hang <-chan struct{}) error {
		if node == "node-2" {
			<-hang // a dead process: no result, no error, until the test ends
			return errors.New("unreachable")
		}
		return temporal.NewApplicationErrorWithCause("rank 1 link lost", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 150})
	})
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes)
	require.Less(t, st.Recoveries[0].DetectSeconds, 60.0, "detected by blame, not by the 1h heartbeat timeout")
}

// TestTrainingRunCancelsUnblamedAfterGrace: node-2 (rank 1) died while the
// group formed. Rank 2 dials it and names it (its address refuses
// connections); rank 0 waits for rank 1 to dial it and notices nothing.
// After blameGrace the waiting rank is cancelled too, instead of the chunk
// waiting for the dead node's (here one hour) heartbeat timeout; only
// node-2 is blamed.
func TestTrainingRunCancelsUnblamedAfterGrace(t *testing.T) {
	st := failFirstChunkFrom100(t, func(node string, hang <-chan struct{}) error {
		if node == "node-3" {
			return temporal.NewApplicationErrorWithCause("connect: peer rank 1 refuses connections", spec.ErrTypePeerFailed,
				errors.New("refused"), spec.PeerFailure{Rank: 1, Step: 100})
		}
		<-hang // node-2 is dead; node-1 waits for it in rendezvous
		return errors.New("unreachable")
	})
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes, "the waiting peer is not blamed")
	require.Less(t, st.Recoveries[0].DetectSeconds, 60.0, "detected by blame and the grace, not by the 1h heartbeat timeout")
	require.Equal(t, []string{"node-1", "spare-1", "node-3"}, st.Nodes)
}

// TestTrainingRunWaitsPastABystander: node-2 (rank 1) died while the group
// formed. node-1 (rank 0) reports first, naming nobody (rank -1: a peer
// hung up on it but is alive, i.e. node-3 giving up); node-3 (rank 2)
// names node-2 after probing its address. The bystander's report must not
// end the chunk before node-3's vote: only node-2 is blamed and replaced.
func TestTrainingRunWaitsPastABystander(t *testing.T) {
	left := make(chan struct{})
	st := failFirstChunkFrom100(t, func(node string, hang <-chan struct{}) error {
		switch node {
		case "node-1":
			defer close(left)
			return temporal.NewApplicationErrorWithCause("tcp: a peer left the forming group alive", spec.ErrTypePeerFailed,
				errors.New("EOF"), spec.PeerFailure{Rank: -1, Step: 100})
		case "node-3":
			<-left
			return temporal.NewApplicationErrorWithCause("connect: rank 1's link broke and its address refuses connections", spec.ErrTypePeerFailed,
				errors.New("refused"), spec.PeerFailure{Rank: 1, Step: 100})
		}
		<-hang // node-2 is dead
		return errors.New("unreachable")
	})
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes)
	require.Less(t, st.Recoveries[0].DetectSeconds, 60.0, "detected by blame, not by the 1h heartbeat timeout")
	require.Equal(t, []string{"node-1", "spare-1", "node-3"}, st.Nodes)
}

// TestTrainingRunAsksAboutAStraggler: node-2 (rank 1) died after the
// chunk's last collective. Its peers finished the chunk and blame nobody;
// a finished node, asked, finds node-2's worker gone, and the run
// replaces it at once instead of waiting out the (one hour) heartbeat
// timeout. A check that fails, finds the node alive or names only ranks
// it was not asked about is asked again.
func TestTrainingRunAsksAboutAStraggler(t *testing.T) {
	noticed := time.Unix(1_800_000_000, 0)
	goneAnswer := func() ([]spec.PeerFailure, error) {
		return []spec.PeerFailure{{Rank: 1, NoticedAt: noticed}}, nil
	}
	for _, tc := range []struct {
		name    string
		answers []func() ([]spec.PeerFailure, error)
	}{
		{"found at once", []func() ([]spec.PeerFailure, error){goneAnswer}},
		{"first check fails", []func() ([]spec.PeerFailure, error){
			func() ([]spec.PeerFailure, error) { return nil, errors.New("no CheckNodes on this build") }, goneAnswer}},
		{"first alive", []func() ([]spec.PeerFailure, error){
			func() ([]spec.PeerFailure, error) { return nil, nil }, goneAnswer}},
		{"first names ranks not asked about", []func() ([]spec.PeerFailure, error){
			func() ([]spec.PeerFailure, error) { return []spec.PeerFailure{{Rank: 7}, {Rank: -1}, {Rank: 0}}, nil }, goneAnswer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ch *fakeChunks
			st := failFirstChunkFrom100With(t, func(c *fakeChunks) {
				ch = c
				calls := 0
				c.gone = func(spec.CheckNodesInput) ([]spec.PeerFailure, error) {
					calls++
					return tc.answers[min(calls, len(tc.answers))-1]()
				}
			}, func(node string, hang <-chan struct{}) error {
				if node == "node-2" {
					<-hang // died after its last step: no result, until the test ends
					return errors.New("unreachable")
				}
				return nil
			})
			rec := st.Recoveries[0]
			require.Equal(t, []string{"node-2"}, rec.FailedNodes)
			require.Contains(t, rec.Reason, "gone before reporting")
			require.EqualValues(t, 200, rec.FailedAtStep, "the peers had finished the chunk")
			require.Equal(t, noticed.UTC(), rec.NoticedAt.UTC())
			require.Less(t, rec.DetectSeconds, 60.0, "found by asking, not by the 1h heartbeat timeout")
			require.Equal(t, []string{"node-1", "spare-1", "node-3"}, st.Nodes)
			require.Len(t, ch.checks, len(tc.answers))
			for _, c := range ch.checks {
				require.Equal(t, []int{1}, c.in.Ranks)
				require.Equal(t, spec.NodeTaskQueue("node-1"), c.queue, "asked of the first finished node")
			}
		})
	}
}

// TestTrainingRunSalvagesAStragglersChunk: node-2 dies after finishing
// the chunk 100–200, whose checkpoint rank 0 committed; the run replaces
// it and resumes from that checkpoint (no step lost, the chunk not rerun)
// instead of from the one at 100. Had rank 0 been the one gone, or the
// chunk the run's last, it would be rerun.
func TestTrainingRunSalvagesAStragglersChunk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dead   string
		frozen bool // silent, not gone: found alive, then times out heartbeating
		steps  int64
		resume int64
	}{
		{"a later rank", "node-2", false, 300, 200},
		{"rank 0", "node-1", false, 300, 100},
		{"the last chunk", "node-2", false, 200, 100},
		{"a later rank frozen", "node-3", true, 300, 200},
		{"rank 0 frozen", "node-1", true, 300, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1")}
			hang := make(chan struct{})
			t.Cleanup(func() { close(hang) })
			asked := make(chan struct{})
			var once sync.Once
			ch := &fakeChunks{gone: func(in spec.CheckNodesInput) ([]spec.PeerFailure, error) {
				once.Do(func() { close(asked) })
				if tc.frozen {
					return nil, nil // its listener accepts
				}
				return []spec.PeerFailure{{Rank: in.Ranks[0]}}, nil
			}}
			ch.fail = func(in spec.ChunkInput) error {
				if in.From == 100 && in.Membership.Generation == 1 && in.Membership.Nodes[in.Rank].ID == tc.dead {
					if tc.frozen {
						<-asked // silent after its last step, until its heartbeat times out
						return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, spec.ChunkProgress{Step: 150, To: 200})
					}
					<-hang // died after its last step
					return errors.New("unreachable")
				}
				return nil
			}
			st := runHourHeartbeatSteps(t, cl, ch, tc.steps)
			require.Len(t, st.Recoveries, 1)
			rec := st.Recoveries[0]
			require.Equal(t, []string{tc.dead}, rec.FailedNodes)
			require.EqualValues(t, tc.resume, rec.ResumeStep)
			require.EqualValues(t, 200, rec.FailedAtStep, "the others finished the chunk")
			require.EqualValues(t, 200-tc.resume, rec.LostSteps)
			require.Len(t, ch.byFrom()[100], map[bool]int{true: 3, false: 6}[tc.resume == 200], "the chunk from 100 rerun only when not salvaged")
			// A salvaged chunk counts as trained (its stretch for energy
			// accounting too, modelled: the lost node's reading is gone);
			// one redone is a lost segment: its energy was spent.
			var trained int64
			var lost []spec.Segment
			for _, seg := range st.Segments {
				require.Zero(t, seg.Joules)
				if seg.Lost {
					lost = append(lost, seg)
					continue
				}
				trained += seg.ToStep - seg.FromStep
			}
			require.EqualValues(t, tc.steps, trained, "segments %+v", st.Segments)
			require.EqualValues(t, tc.steps/100, st.Chunks)
			if tc.resume == 200 {
				require.Empty(t, lost)
			} else {
				require.Len(t, lost, 1, "segments %+v", st.Segments)
				require.Equal(t, spec.Segment{Start: lost[0].Start, End: lost[0].End, Nodes: 3, Generation: 1, FromStep: 100, ToStep: 200,
					WallSeconds: lost[0].End.Sub(lost[0].Start).Seconds(), Chunks: 1, Lost: true}, lost[0])
				require.Greater(t, lost[0].WallSeconds, 0.0)
			}
		})
	}
}

// TestTrainingRunWaitsForALiveStraggler: rank 1 is slow to report after
// its peers finished; asked, the finished node finds it alive, and the
// chunk completes when it reports, with no recovery.
func TestTrainingRunWaitsForALiveStraggler(t *testing.T) {
	asked := make(chan struct{})
	var once sync.Once
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{gone: func(spec.CheckNodesInput) ([]spec.PeerFailure, error) {
		once.Do(func() { close(asked) })
		return nil, nil
	}}
	ch.fail = func(in spec.ChunkInput) error {
		if in.From == 100 && in.Rank == 1 {
			<-asked // reports only once a finished node was asked about it
		}
		return nil
	}
	st := runHourHeartbeat(t, cl, ch)
	require.Empty(t, st.Recoveries)
	require.NotEmpty(t, ch.checks)
	require.Equal(t, []int{1}, ch.checks[0].in.Ranks)
}

// TestTrainingRunBlamesTheSilentOfATie: node-3 (rank 2) died; node-2
// (rank 1) names it, but node-1 (rank 0) names node-2 (it saw node-2 hang
// up). One vote each: node-2 reported itself, so it was alive, and only
// the silent node-3 is replaced.
func TestTrainingRunBlamesTheSilentOfATie(t *testing.T) {
	peerFailed := func(rank int) error {
		return temporal.NewApplicationErrorWithCause(fmt.Sprintf("rank %d lost", rank), spec.ErrTypePeerFailed,
			errors.New("EOF"), spec.PeerFailure{Rank: rank, Step: 120})
	}
	st := failFirstChunkFrom100(t, func(node string, hang <-chan struct{}) error {
		switch node {
		case "node-1":
			return peerFailed(1)
		case "node-2":
			return peerFailed(2)
		}
		<-hang // node-3 is dead
		return errors.New("unreachable")
	})
	require.Equal(t, []string{"node-3"}, st.Recoveries[0].FailedNodes)
	require.Equal(t, []string{"node-1", "node-2", "spare-1"}, st.Nodes)
}

// A node dies; on resume the checkpoint at 100 fails verification, so the
// run falls back to the one before it (here: step 0) and still completes.
func TestTrainingRunFallsBackFromCorruptCheckpoint(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{}
	ch.fail = func(in spec.ChunkInput) error {
		switch {
		case in.Membership.Generation == 1 && in.From == 100:
			return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 110})
		case in.Membership.Generation == 2 && in.Restore != nil && in.Restore.Step == 100:
			// The first checkpoint at 100 is corrupt; the one rewritten
			// after the fallback is fine.
			return temporal.NewNonRetryableApplicationError("checkpoint at step 100 is corrupt: runs/t/ckpt/100/state.bin: sha256 mismatch",
				spec.ErrTypeCorruptCheckpoint, nil)
		}
		return nil
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 50, CheckpointEvery: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.EqualValues(t, 200, st.Step)
	require.Len(t, st.Recoveries, 2)
	require.EqualValues(t, 100, st.Recoveries[0].ResumeStep)
	require.Contains(t, st.Recoveries[1].Reason, "corrupt")
	require.Empty(t, st.Recoveries[1].FailedNodes, "corruption is not a node's fault")
	require.EqualValues(t, 0, st.Recoveries[1].ResumeStep, "fell back past the corrupt checkpoint")
}

// Corrupt checkpoints cost no restart: with max_restarts 1 spent on a lost
// node, the run falls back past three corrupt checkpoints in turn to the
// good one before them and completes. Before, the recovery from the first
// corrupt one gave up ("gave up after 1 restart(s)") with the good
// checkpoint untried.
func TestTrainingRunCorruptCheckpointsCountNoRestart(t *testing.T) {
	corrupt := map[int64]bool{300: true, 400: true, 500: true}
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{}
	ch.fail = func(in spec.ChunkInput) error {
		switch {
		case in.Membership.Generation == 1 && in.From == 500:
			return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 510})
		case in.Membership.Generation >= 2 && in.Membership.Generation <= 4 && in.Restore != nil && corrupt[in.Restore.Step]:
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("checkpoint at step %d is corrupt: sha256 mismatch", in.Restore.Step),
				spec.ErrTypeCorruptCheckpoint, nil)
		}
		return nil
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 600, ChunkSteps: 100, CheckpointEvery: 100, MaxRestarts: 1}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.EqualValues(t, 600, st.Step)
	require.Len(t, st.Recoveries, 4)
	for i, r := range st.Recoveries {
		t.Logf("recovery %d: gen %d failed %v at %d resume %d: %s", i, r.Generation, r.FailedNodes, r.FailedAtStep, r.ResumeStep, r.Reason)
	}
	for i, want := range []int64{500, 400, 300, 200} {
		rec := st.Recoveries[i]
		require.EqualValues(t, want, rec.ResumeStep, "recovery %d", i)
		if i > 0 {
			require.Empty(t, rec.FailedNodes, "recovery %d: corruption is not a node's fault", i)
			require.Contains(t, rec.Reason, "corrupt")
		}
	}
}

// TestTrainingRunMissingCheckpoint: after a node is lost, its replacement
// cannot serve the run. When it never found the run's checkpoints in the
// bucket (CheckpointNotHere: a host that does not mount the shared bucket)
// or has no data set (NodeUnfit) it is the failed node, in its own words,
// and is replaced in turn and kept failed as misconfigured; when the
// checkpoint is gone from a bucket where it was seen (CheckpointGone:
// deleted) the run falls back to the one before, as from a corrupt one,
// and blames nobody. Before, all three failed the run or restarted the
// same nodes until max_restarts ran out.
func TestTrainingRunMissingCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name, typ string
		who, said string // the node that fails the second generation, in its words
		// failed and resume are the second recovery's.
		failed []string
		resume int64
		nodes  []string
	}{
		{"not here", spec.ErrTypeCheckpointNotHere, "spare-1",
			"node spare-1 does not find the run's checkpoint at step 100 (runs/t/ckpt/000000000100/manifest.json) in file:///ckpt, " +
				"where the node that saved it committed it, and has found none of the run's checkpoints there",
			[]string{"spare-1"}, 100, []string{"node-1", "spare-2"}},
		{"no data", spec.ErrTypeNodeUnfit, "spare-1", "node spare-1 has no data set for mlp-mnist: engine: open MNIST file: no such file",
			[]string{"spare-1"}, 100, []string{"node-1", "spare-2"}},
		{"gone", spec.ErrTypeCheckpointGone, "node-1",
			"node node-1 does not find the run's checkpoint at step 100 (runs/t/ckpt/000000000100/manifest.json) in file:///ckpt, " +
				"where it found the run's checkpoints before: it was deleted",
			nil, 0, []string{"node-1", "spare-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1", "spare-2"), failed: map[string]bool{}}
			ch := &fakeChunks{}
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			ch.fail = func(in spec.ChunkInput) error {
				switch {
				case in.Membership.Generation == 1 && in.From == 100:
					return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 110})
				case in.Membership.Generation != 2 || in.Restore == nil || in.Restore.Step != 100:
					return nil
				case in.Membership.Nodes[in.Rank].ID == tc.who:
					return temporal.NewApplicationError(tc.said, tc.typ)
				}
				<-stuck // in rendezvous for the failing node
				return errors.New("unreachable")
			}
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 50, CheckpointEvery: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.EqualValues(t, 200, st.Step)
			require.Len(t, st.Recoveries, 2)
			require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes)
			rec := st.Recoveries[1]
			require.Equal(t, tc.failed, rec.FailedNodes)
			require.EqualValues(t, tc.resume, rec.ResumeStep)
			require.Contains(t, rec.Reason, tc.said)
			require.Equal(t, tc.nodes, st.Nodes)
			cl.mu.Lock()
			defer cl.mu.Unlock()
			require.Equal(t, tc.typ != spec.ErrTypeCheckpointGone, cl.failed["spare-1"], "spare-1 marked failed")
			// Only a node without data stays failed: a bucket is the run's.
			require.Equal(t, tc.typ == spec.ErrTypeNodeUnfit, cl.misconfigured["spare-1"], "spare-1 marked misconfigured (its lease does not reinstate it)")
			require.False(t, cl.misconfigured["node-2"], "node-2 was lost, not misconfigured")
		})
	}
}

// TestTrainingRunSkipsGoneCheckpoints: after a node is lost at 330, the
// checkpoint at 300 is gone from the bucket (deleted), and so is the one
// at 200: the recovery looks the older ones up and resumes from 100 in
// one restart — max_restarts is 2 — instead of one restart per missing
// checkpoint (versionSkipGone). A resumed run keeps its oldest checkpoint
// however it is found: it must not start over on the earlier run's.
func TestTrainingRunSkipsGoneCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gone    []int64 // steps whose manifests are gone (besides 300)
		resumed bool
		asked   []int64
		resume  int64
	}{
		{name: "two gone", gone: []int64{200}, asked: []int64{200, 100}, resume: 100},
		{name: "all gone", gone: []int64{100, 200}, asked: []int64{200, 100}, resume: 0},
		{name: "none other gone", asked: []int64{200}, resume: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1"), failed: map[string]bool{}}
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
				switch {
				case in.Membership.Generation == 1 && in.From == 300 && in.Rank == 0:
					return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 330})
				case in.Membership.Generation == 1 && in.From == 300:
					<-stuck // node-2 died
					return errors.New("unreachable")
				case in.Restore != nil && in.Membership.Generation == 2 && (in.Restore.Step == 300 || slices.Contains(tc.gone, in.Restore.Step)):
					return temporal.NewApplicationError(fmt.Sprintf("node %s does not find the run's checkpoint at step %d: it was deleted",
						in.Membership.Nodes[in.Rank].ID, in.Restore.Step), spec.ErrTypeCheckpointGone)
				}
				return nil
			}}
			env := newRunEnv(t, cl, ch)
			var asked []int64
			env.RegisterActivityWithOptions(func(_ context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
				asked = append(asked, want.Step)
				if slices.Contains(tc.gone, want.Step) {
					return nil, temporal.NewApplicationError("no committed checkpoint", spec.ErrTypeNoSuchCheckpoint)
				}
				return &want, nil
			}, activity.RegisterOptions{Name: spec.ActivityResolveCheckpoint})
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, MaxRestarts: 2}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.EqualValues(t, 400, st.Step)
			require.Equal(t, tc.asked, asked)
			require.Len(t, st.Recoveries, 2)
			require.EqualValues(t, 300, st.Recoveries[0].ResumeStep)
			require.EqualValues(t, tc.resume, st.Recoveries[1].ResumeStep)
			require.Contains(t, st.Recoveries[1].Reason, "does not find the run's checkpoint at step 300")
		})
	}
	t.Run("resumed", func(t *testing.T) {
		ck := earlierCheckpoint
		ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
			if in.Restore != nil {
				return temporal.NewApplicationError(fmt.Sprintf("the checkpoint at step %d was deleted", in.Restore.Step), spec.ErrTypeCheckpointGone)
			}
			return nil
		}}
		env := newRunEnv(t, &fakeCluster{pool: testNodes("a", "b")}, ch)
		var asked []int64
		env.RegisterActivityWithOptions(func(_ context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
			asked = append(asked, want.Step)
			return nil, temporal.NewApplicationError("no committed checkpoint", spec.ErrTypeNoSuchCheckpoint)
		}, activity.RegisterOptions{Name: spec.ActivityResolveCheckpoint})
		last := ck(200)
		prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseFailed, Step: 230, Generation: 1, LastCkpt: &last}
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults(),
			Resume: &prev, ResumeCheckpoints: []spec.CheckpointRef{ck(100), ck(200)}})
		require.ErrorContains(t, env.GetWorkflowError(), "knows no earlier checkpoint to fall back to")
		require.Empty(t, asked, "its oldest checkpoint is kept, not looked up")
		require.EqualValues(t, 100, ch.byFrom()[100][0].Restore.Step, "tried from 100")
		require.Nil(t, ch.byFrom()[0], "nothing trained from step 0")
	})
}

// TestFailureMarks: the Cluster's records of a failure name each node's
// worker process; unfit nodes are failed in their own words (not the
// first one's), as misconfigured when they lack the data set.
func TestFailureMarks(t *testing.T) {
	r := &run{}
	r.st.Status.RunID = "run/t"
	r.st.Membership.Nodes = []spec.Node{{ID: "a", Incarnation: "pa"}, {ID: "b", Incarnation: "pb"}, {ID: "c", Incarnation: "pc"}}
	f := &chunkFailure{failed: []string{"a", "c"}, reason: "node a has no data set (and 1 more: c)",
		unfit: []string{"a", "c"}, unfitWhy: []string{"node a has no data set", "node c does not find the run's checkpoint"}, misconfigured: []string{"a"}}
	require.Equal(t, []spec.MarkFailed{
		{NodeID: "a", RunID: "run/t", Reason: "node a has no data set", Incarnation: "pa", Misconfigured: true},
		{NodeID: "c", RunID: "run/t", Reason: "node c does not find the run's checkpoint", Incarnation: "pc"},
	}, r.failureMarks(f))
	lost := &chunkFailure{failed: []string{"b"}, reason: "peers lost node(s) [b]"}
	require.Equal(t, []spec.MarkFailed{{NodeID: "b", RunID: "run/t", Reason: "peers lost node(s) [b]", Incarnation: "pb"}}, r.failureMarks(lost))
}

// TestTrainingRunFailsOnAnUnsharedBucket: a node that does not see the
// run's committed checkpoint (BucketNotShared: its bucket is not the one
// rank 0 saved to) fails the run at once in its words — no recovery, no
// node blamed — while its peer waits for it in rendezvous.
func TestTrainingRunFailsOnAnUnsharedBucket(t *testing.T) {
	const said = "node node-2 does not find the run's last checkpoint (step 100, runs/t/ckpt/000000000100/manifest.json) in mem://"
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1")}
	ch := &fakeChunks{}
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	ch.fail = func(in spec.ChunkInput) error {
		switch {
		case in.From < 200:
			return nil
		case in.Rank == 1:
			return temporal.NewNonRetryableApplicationError(said, spec.ErrTypeBucketNotShared, nil)
		}
		<-stuck // in rendezvous for node-2
		return errors.New("unreachable")
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.ErrorContains(t, err, "not retryable: chunk from step 200: "+said)
	v, qerr := env.QueryWorkflow(spec.QueryStatus)
	require.NoError(t, qerr)
	var st spec.RunStatus
	require.NoError(t, v.Get(&st))
	require.Empty(t, st.Recoveries, "no recovery: none could restore from a checkpoint some nodes do not see")
	require.EqualValues(t, 200, st.Step)
}

// A node dies while the group is still forming: its peers are blocked in
// rendezvous and report nothing. Its heartbeat timeout must end the chunk
// at once, cancelling the waiting peers, and only it is blamed.
func TestTrainingRunCancelsPeersWaitingForADeadNode(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1")}
	ch := &fakeChunks{}
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 100 || in.Membership.Generation != 1 {
			return nil
		}
		if in.Membership.Nodes[in.Rank].ID == "node-2" {
			return temporal.NewHeartbeatTimeoutError()
		}
		<-stuck // waiting in rendezvous for node-2
		return errors.New("unreachable")
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Len(t, st.Recoveries, 1)
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes, "the waiting peers are not blamed")
	require.Equal(t, []string{"node-1", "spare-1", "node-3"}, st.Nodes)
}

// TestTrainingRunRecoversNodeThatLostState: a node process restarted
// under the same ID between two chunks answers the next one NoState (it
// holds no state at that step, and that step's checkpoint is not
// committed). The run is not failed — nor "canceled" by its peers'
// cancellations —: nobody is marked failed, a new generation on the same
// nodes restores every rank from the last checkpoint, and it completes.
func TestTrainingRunRecoversNodeThatLostState(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1"), failed: map[string]bool{}}
	ch := &fakeChunks{}
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 100 || in.Membership.Generation != 1 {
			return nil
		}
		if in.Membership.Nodes[in.Rank].ID == "node-2" {
			err := errors.New("node node-2 has no state at step 100 and no checkpoint there")
			return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeNoState, err)
		}
		<-stuck // waiting in rendezvous for node-2
		return errors.New("unreachable")
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100, CheckpointEvery: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 200, st.Step)
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.Equal(t, []string{"node-2"}, rec.FailedNodes)
	require.Empty(t, rec.Replacement, "the node is alive: nobody replaces it")
	require.Contains(t, rec.Reason, "restarted and lost their state")
	require.Empty(t, cl.failed, "nobody is marked failed")
	require.Equal(t, []string{"node-1", "node-2", "node-3"}, st.Nodes)
	for _, in := range ch.byFrom()[100] {
		if in.Membership.Generation == 2 {
			require.NotNil(t, in.Restore)
			require.EqualValues(t, 100, in.Restore.Step, "every rank restores the checkpoint")
		}
	}
}

// TestTrainingRunFailsWithTheRanksOwnError: a rank's non-retryable error
// fails the run with that error, even where a rank before it in rank
// order was cancelled because of it: the run is Failed, not Canceled.
func TestTrainingRunFailsWithTheRanksOwnError(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	ch.fail = func(in spec.ChunkInput) error {
		if in.Rank == 2 {
			return temporal.NewNonRetryableApplicationError("bad chunk input", "BadChunkInput", nil)
		}
		<-stuck
		return errors.New("unreachable")
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	err := env.GetWorkflowError()
	require.Error(t, err)
	var ce *temporal.CanceledError
	require.False(t, errors.As(err, &ce), "the run ended canceled: %v", err)
	require.Contains(t, err.Error(), "chunk from step 0: bad chunk input", "the reason is the rank's own error")
}

func TestTrainingRunRoutesInjectedFault(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(spec.SignalInjectFault, spec.InjectFault{NodeID: "b", AtStep: 150})
	}, 0)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	hits := 0
	for from, ins := range ch.byFrom() {
		for _, in := range ins {
			node := in.Membership.Nodes[in.Rank].ID
			if in.KillAtStep != 0 {
				hits++
				require.Equal(t, "b", node)
				require.EqualValues(t, 100, from, "the chunk that contains step 150")
				require.EqualValues(t, 150, in.KillAtStep)
			}
		}
	}
	require.Equal(t, 1, hits, "a fault is delivered once")
}

// TestTrainingRunArmsSignalledFault: a fault signalled while its node
// trains is handed to the node's worker (ArmFault), since the chunk in
// flight cannot learn it from its input; once armed it is no longer
// pending, so no later chunk carries it. A node that refuses drops it; one
// that does not answer leaves it pending for its next chunk.
func TestTrainingRunArmsSignalledFault(t *testing.T) {
	refused := temporal.NewNonRetryableApplicationError("node b does not allow fault injection", "FaultInjectionNotAllowed", nil)
	cases := []struct {
		name    string
		armErr  error
		at      int64
		carried []int64 // KillAtStep of b's chunks, by chunk
	}{
		{name: "armed in the chunk in flight", at: 50},
		{name: "armed for a later chunk", at: 150},
		{name: "refused", armErr: refused, at: 150},
		{name: "not armed: pending", armErr: errors.New("node b is busy"), at: 150, carried: []int64{150}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "b")}
			ch := &fakeChunks{}
			env := newRunEnv(t, cl, ch)
			var mu sync.Mutex
			var arms []spec.ArmFaultInput
			var queues []string
			env.RegisterActivityWithOptions(func(ctx context.Context, in spec.ArmFaultInput) error {
				mu.Lock()
				arms = append(arms, in)
				queues = append(queues, activity.GetInfo(ctx).TaskQueue)
				mu.Unlock()
				return tc.armErr
			}, activity.RegisterOptions{Name: spec.ActivityArmFault})
			// Answered: the environment hands the workflow ArmFault's
			// outcome before the chunk's result that comes after.
			armed := make(chan struct{})
			var once sync.Once
			env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
				if info.ActivityType.Name == spec.ActivityArmFault {
					once.Do(func() { close(armed) })
				}
			})
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 0 && in.Rank == 0 {
					env.SignalWorkflow(spec.SignalInjectFault, spec.InjectFault{NodeID: "b", AtStep: tc.at})
					// The chunk ends once the node has answered for its
					// fault (were it to end before, the next chunk could
					// carry the fault still being armed).
					select {
					case <-armed:
					case <-time.After(10 * time.Second):
						t.Error("ArmFault never called while the chunk ran")
					}
				}
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.NoError(t, env.GetWorkflowError())
			require.Equal(t, []spec.ArmFaultInput{{RunID: "default-test-workflow-id", Fault: spec.InjectFault{NodeID: "b", AtStep: tc.at}}}, arms)
			require.Equal(t, []string{spec.NodeTaskQueue("b")}, queues, "the node's own worker")
			var carried []int64
			for _, from := range []int64{0, 100, 200} {
				for _, in := range ch.byFrom()[from] {
					if in.KillAtStep != 0 {
						require.Equal(t, "b", in.Membership.Nodes[in.Rank].ID)
						carried = append(carried, in.KillAtStep)
					}
				}
			}
			require.Equal(t, tc.carried, carried)
		})
	}
}

// TestTrainingRunResumes: a run given an earlier run's last status starts
// at its last checkpoint, restoring it, in the generation after the
// earlier run's, and keeps its record.
func TestTrainingRunResumes(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	ck := spec.CheckpointRef{URL: "mem://", Run: "run/t", Step: 200, Key: "ckpt/200"}
	prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseFailed, Error: "gave up", Step: 230, Generation: 3, Checkpoints: 2, LastCkpt: &ck,
		InitialLoss: 2.3, Recoveries: []spec.Recovery{{Generation: 2, FailedNodes: []string{"c"}}}}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s, Resume: &prev})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.EqualValues(t, 400, st.Step)
	require.Nil(t, ch.byFrom()[0], "nothing before the checkpoint is trained again")
	first := ch.byFrom()[200]
	require.Len(t, first, 2)
	for _, in := range first {
		require.Equal(t, &ck, in.Restore)
		require.EqualValues(t, 4, in.Membership.Generation)
	}
	require.Len(t, st.Recoveries, 1, "the earlier run's record stays")
	require.True(t, st.Recoveries[0].ResumedAt.IsZero(), "the earlier run's recovery never trained: this run's first step is not its")
	require.InDelta(t, 2.3, st.InitialLoss, 1e-6)
	require.Equal(t, 4, st.Checkpoints, "its two and the two at 300 and 400")
	require.Len(t, st.Resumed, 1)
	require.Equal(t, spec.Resumption{Phase: spec.PhaseFailed, Error: "gave up", Step: 230, FromStep: 200, At: st.Resumed[0].At, Recoveries: 1}, st.Resumed[0])
	require.Empty(t, st.Error)
}

// TestTrainingRunFailureSaysWhy: a run that fails for want of nodes
// says so in its status in the activity's own words, without the IDs and
// types Temporal adds.
// TestTrainingRunResumedCorruptCheckpoint: the checkpoint a resumed run
// starts from turns out corrupt: it falls back to the earlier run's
// checkpoint before it when it was given the list, and without one it
// fails, saying so, rather than train from step 0 over them.
func TestTrainingRunResumedCorruptCheckpoint(t *testing.T) {
	ck := earlierCheckpoint
	for _, withList := range []bool{true, false} {
		t.Run(map[bool]string{true: "falls back", false: "fails"}[withList], func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "b")}
			ch := &fakeChunks{}
			ch.fail = func(in spec.ChunkInput) error {
				if in.Restore != nil && in.Restore.Key == "earlier/200" && in.From == 200 {
					return temporal.NewNonRetryableApplicationError("checkpoint at step 200 is corrupt: earlier/200: sha256 mismatch", spec.ErrTypeCorruptCheckpoint, nil)
				}
				return nil
			}
			env := newRunEnv(t, cl, ch)
			last := ck(200)
			prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseFailed, Step: 230, Generation: 1, LastCkpt: &last}
			in := RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults(), Resume: &prev}
			if withList {
				in.ResumeCheckpoints = []spec.CheckpointRef{ck(100), ck(200)}
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, in)
			if !withList {
				err := env.GetWorkflowError()
				require.Error(t, err)
				require.Contains(t, err.Error(), "knows no earlier checkpoint to fall back to")
				require.Nil(t, ch.byFrom()[0], "nothing trained from step 0")
				return
			}
			require.NoError(t, env.GetWorkflowError())
			again := ch.byFrom()[100]
			require.Len(t, again, 2, "resumed from the checkpoint before the corrupt one")
			require.EqualValues(t, 100, again[0].Restore.Step)
		})
	}
}

// TestTrainingRunUnfitCheckpointFailsAtOnce: the checkpoint a resumed run
// starts from is sound but another job's (CheckpointUnfit: the job file
// changed its learning rate): the run fails at once in the node's words,
// restarting nothing and dropping no checkpoint — before, it took the
// checkpoint for corrupt and fell back past every good one in turn.
func TestTrainingRunUnfitCheckpointFailsAtOnce(t *testing.T) {
	ck := earlierCheckpoint
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{}
	const why = "the checkpoint at step 200 (earlier/200) was written by a run of another job — the job file must match it: LearningRate: state has 0.002, trainer has 0.005"
	ch.fail = func(in spec.ChunkInput) error {
		if in.Restore != nil {
			return temporal.NewNonRetryableApplicationError(why, spec.ErrTypeCheckpointUnfit, nil)
		}
		return nil
	}
	env := newRunEnv(t, cl, ch)
	last := ck(200)
	prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseCompleted, Step: 200, Generation: 1, LastCkpt: &last}
	in := RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults(), Resume: &prev,
		ResumeCheckpoints: []spec.CheckpointRef{ck(100), ck(200)}}
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, in)
	require.Error(t, env.GetWorkflowError())
	v, err := env.QueryWorkflow(spec.QueryStatus)
	require.NoError(t, err)
	var st spec.RunStatus
	require.NoError(t, v.Get(&st))
	require.Equal(t, spec.PhaseFailed, st.Phase)
	require.Contains(t, st.Error, why)
	require.True(t, st.CheckpointUnfit)
	require.Empty(t, st.Recoveries)
	require.Equal(t, &last, st.LastCkpt, "no checkpoint dropped")
	for _, in := range ch.all() {
		require.EqualValues(t, 2, in.Membership.Generation, "one try, on the run's first nodes (the earlier run had 1): %+v", in)
		require.Equal(t, &last, in.Restore)
	}
	require.Zero(t, cl.markSignals+cl.markedInAcquire, "no node blamed")
}

// earlierCheckpoint is an earlier run's checkpoint of run "t" at step.
func earlierCheckpoint(step int64) spec.CheckpointRef {
	return spec.CheckpointRef{URL: "mem://", Run: "t", Step: step, Key: fmt.Sprintf("earlier/%d", step)}
}

func TestTrainingRunFailureSaysWhy(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	env := newRunEnv(t, cl, &fakeChunks{})
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 100, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	werr := env.GetWorkflowError()
	v, err := env.QueryWorkflow(spec.QueryStatus)
	require.NoError(t, err)
	var st spec.RunStatus
	require.NoError(t, v.Get(&st))
	require.Equal(t, spec.PhaseFailed, st.Phase)
	require.Equal(t, "acquire nodes: not enough nodes", st.Error)
	// The Web UI shows the workflow's failure: the status's words, typed
	// by its cause and not retryable (not "wrapError", "retryable: true").
	var ae *temporal.ApplicationError
	require.ErrorAs(t, werr, &ae)
	require.Equal(t, st.Error, ae.Message())
	require.Equal(t, spec.ErrTypeNotEnoughNodes, ae.Type())
	require.True(t, ae.NonRetryable())
}

func TestTrainingRunStartsWithFaults(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s, Faults: []spec.InjectFault{{NodeID: "a", AtStep: 5}}})
	require.NoError(t, env.GetWorkflowError())
	var got []int64
	for _, in := range ch.byFrom()[0] {
		if in.KillAtStep != 0 {
			got = append(got, in.KillAtStep)
			require.Equal(t, "a", in.Membership.Nodes[in.Rank].ID)
		}
	}
	require.Equal(t, []int64{5}, got, "a start-time fault reaches even the first chunk")
}

func TestTimeoutReason(t *testing.T) {
	for _, tc := range []struct {
		timedOut, untaken []string
		want              string
	}{
		{[]string{"a"}, nil, "node(s) [a] stopped heartbeating"},
		{[]string{"a", "b"}, []string{"b"}, "node(s) [a] stopped heartbeating; node(s) [b] never took their task (no worker polled their queue)"},
		{[]string{"b"}, []string{"b"}, "node(s) [b] never took their task (no worker polled their queue)"},
	} {
		if got := timeoutReason(tc.timedOut, tc.untaken); got != tc.want {
			t.Errorf("timeoutReason(%v, %v) = %q, want %q", tc.timedOut, tc.untaken, got, tc.want)
		}
	}
}

// TestTrainingRunCheckpointStorage: a chunk whose checkpoint could not be
// stored is retried once the storage may have hiccuped; when a checkpoint
// had already failed since the last stored one — in the background, or a
// chunk before — the run fails at once, naming both, instead of
// rewinding and retraining up to max_restarts times.
func TestTrainingRunCheckpointStorage(t *testing.T) {
	full := func(step int64) error {
		return temporal.NewApplicationError(fmt.Sprintf("save checkpoint at %d: no space left on device", step), spec.ErrTypeCheckpointStorage)
	}
	for _, tc := range []struct {
		name       string
		fail       func(in spec.ChunkInput) error
		background bool // the upload of the checkpoint at 100 failed, reported by the chunk from 100
		recoveries int
		gaveUp     int64 // the step of the checkpoint it gave up on (0: it did not)
		said       string
	}{
		{"a hiccup", func(in spec.ChunkInput) error {
			if in.Rank == 0 && in.From == 100 && in.Membership.Generation == 1 {
				return full(in.To)
			}
			return nil
		}, false, 1, 0, ""},
		{"keeps failing", func(in spec.ChunkInput) error {
			if in.Rank == 0 && in.From >= 100 {
				return full(in.To)
			}
			return nil
		}, false, 1, 200, "the checkpoint at step 200 could not be stored, twice"},
		{"after a background upload failed", func(in spec.ChunkInput) error {
			if in.Rank == 0 && in.From == 200 {
				return full(in.To)
			}
			return nil
		}, true, 0, 300, "the checkpoint at step 100 could not be stored, nor now the one at 300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1")}
			ch := &fakeChunks{fail: tc.fail}
			if tc.background {
				ch.edit = func(in spec.ChunkInput, res *spec.ChunkResult) {
					if in.Rank == 0 && in.From == 100 {
						res.CheckpointFailed = &spec.CheckpointFailure{Step: 100, Error: "no space left on device"}
						res.Checkpoint = nil // its own still uploading (and failing too)
					}
				}
			}
			env := newRunEnv(t, cl, ch)
			env.SetTestTimeout(30 * time.Second)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			var st spec.RunStatus
			if tc.gaveUp > 0 {
				err := env.GetWorkflowError()
				require.ErrorContains(t, err, "checkpoint storage keeps failing: "+tc.said)
				require.ErrorContains(t, err, "no space left on device")
				// The status query still answers after the failure.
				v, qerr := env.QueryWorkflow(spec.QueryStatus)
				require.NoError(t, qerr)
				require.NoError(t, v.Get(&st))
				require.NotNil(t, st.CheckpointFailed)
				require.EqualValues(t, tc.gaveUp, st.CheckpointFailed.Step)
			} else {
				require.NoError(t, env.GetWorkflowError())
				require.NoError(t, env.GetWorkflowResult(&st))
				require.EqualValues(t, 400, st.Step)
				require.Nil(t, st.CheckpointFailed, "cleared by the checkpoints stored since")
			}
			require.Len(t, st.Recoveries, tc.recoveries)
		})
	}
}

// lostSegment: a failed chunk's stretch in workflow time, moved after
// the segment before it when the nodes' clock ran ahead.
func TestLostSegment(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 10, 0, 0, 0, time.UTC)
	f := &chunkFailure{from: 100, atStep: 130, started: t0, seen: t0.Add(3 * time.Second)}
	for _, tc := range []struct {
		name       string
		before     []spec.Segment
		start, end time.Time
	}{
		{"first", nil, t0, t0.Add(3 * time.Second)},
		{"after", []spec.Segment{{End: t0.Add(-time.Second)}}, t0, t0.Add(3 * time.Second)},
		{"clock ahead", []spec.Segment{{End: t0.Add(10 * time.Second)}}, t0.Add(10 * time.Second), t0.Add(13 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lostSegment(f, 3, 2, tc.before)
			require.Equal(t, spec.Segment{Start: tc.start, End: tc.end, Nodes: 3, Generation: 2, FromStep: 100, ToStep: 130,
				WallSeconds: 3, Chunks: 1, Lost: true}, got)
		})
	}
	f.atStep = 0 // nothing known of how far it got
	require.EqualValues(t, 100, lostSegment(f, 3, 2, nil).ToStep)
}

// TestTrainingRunStartsSmall: a job of 3 nodes with min_nodes 2 starts on
// the 2 nodes free, and grows back to 3 when the third comes free; with
// min_nodes left at nodes it needs all 3.
func TestTrainingRunStartsSmall(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2"), failed: map[string]bool{}}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		switch {
		case in.From == 100 && in.Rank == 0:
			cl.mu.Lock()
			cl.pool = append(cl.pool, testNodes("node-3")...)
			cl.mu.Unlock()
		case in.From == 300 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalPause, nil) // (the chunks take no time: a pause lets the regrow's wait pass)
		}
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 2000, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Equal(t, []string{"node-1", "node-2", "node-3"}, st.Nodes, "grown back to the job's 3")
	require.Len(t, ch.byFrom()[0], 2, "started on the 2 free")
	require.Equal(t, 96, st.GlobalBatch, "the job's global batch throughout")

	cl2 := &fakeCluster{pool: testNodes("node-1", "node-2"), failed: map[string]bool{}}
	env2 := newRunEnv(t, cl2, &fakeChunks{})
	env2.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()})
	require.Error(t, env2.GetWorkflowError(), "min_nodes left at nodes: all 3 needed")
}
