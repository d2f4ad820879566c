package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/spec"
)

// asyncChunks plays a node whose rank 0 uploads checkpoints in the
// background when asked: the chunk reports them pending, the node's next
// chunk committed.
type asyncChunks struct {
	*fakeChunks
	mu      sync.Mutex
	pending map[string]spec.CheckpointRef
	// lost, when set, names the chunks whose node is gone: each ends once
	// the run cancelled it and gone is closed (the test environment does
	// not cancel an activity's context, and one still running stops its
	// clock).
	lost func(in spec.ChunkInput) bool
	gone chan struct{}
}

func (a *asyncChunks) train(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
	if a.lost != nil && a.lost(in) {
		<-a.gone
		return nil, temporal.NewCanceledError("the node is gone")
	}
	res, err := a.fakeChunks.train(ctx, in)
	if err != nil || in.Rank != 0 {
		return res, err
	}
	node := in.Membership.Nodes[0].ID
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pending[node]; ok {
		res.EarlierCheckpoint = &p
		delete(a.pending, node)
	}
	if in.AsyncCheckpoint && res.Checkpoint != nil {
		a.pending[node] = *res.Checkpoint
		pc := *res.Checkpoint
		pc.Key = ""
		res.PendingCheckpoint, res.Checkpoint = &pc, nil
	}
	return res, nil
}

func newAsyncEnv(t *testing.T, cl *fakeCluster, fail func(spec.ChunkInput) error, resolve func(context.Context, spec.CheckpointRef) (*spec.CheckpointRef, error)) (*asyncChunks, func(spec.RunSpec) (spec.RunStatus, error)) {
	ch, env := asyncEnv(t, cl, fail, resolve)
	return ch, func(s spec.RunSpec) (spec.RunStatus, error) {
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		var st spec.RunStatus
		if err := env.GetWorkflowError(); err != nil {
			return st, err
		}
		return st, env.GetWorkflowResult(&st)
	}
}

func asyncEnv(t *testing.T, cl *fakeCluster, fail func(spec.ChunkInput) error, resolve func(context.Context, spec.CheckpointRef) (*spec.CheckpointRef, error)) (*asyncChunks, *testsuite.TestWorkflowEnvironment) {
	ch := &asyncChunks{fakeChunks: &fakeChunks{fail: fail}, pending: map[string]spec.CheckpointRef{}}
	env := newRunEnv(t, cl, ch.fakeChunks)
	env.RegisterActivityWithOptions(ch.train, activity.RegisterOptions{Name: spec.ActivityTrainChunk, DisableAlreadyRegisteredCheck: true})
	if resolve != nil {
		env.RegisterActivityWithOptions(resolve, activity.RegisterOptions{Name: spec.ActivityResolveCheckpoint})
	}
	return ch, env
}

func TestAsyncCheckpointsCommitOneChunkLater(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch, run := newAsyncEnv(t, cl, nil, nil)
	st, err := run(spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100}.WithDefaults())
	require.NoError(t, err)
	require.EqualValues(t, 300, st.Step)
	require.EqualValues(t, 300, st.LastCkpt.Step, "the last chunk saves synchronously")
	require.Equal(t, 3, st.Checkpoints, "100 and 200 reported by the following chunks, 300 by its own")
	chunks := ch.byFrom()
	require.True(t, chunks[0][0].AsyncCheckpoint)
	require.True(t, chunks[100][0].AsyncCheckpoint)
	require.False(t, chunks[200][0].AsyncCheckpoint, "last chunk")
}

// TestAsyncCheckpointResolvedAfterLoss: rank 0's node dies while its
// checkpoint at 100 is known only as pending; the recovery finds it in the
// bucket and resumes there (or, when it is not there, from the start).
// A storage that does not answer the lookup holds the run in
// waiting-storage — 15 s, then 30 s; a resume cuts a wait short — until
// it does (versionResolveWaits): the recovery does not rewind past a
// checkpoint that may be stored.
func TestAsyncCheckpointResolvedAfterLoss(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	none := temporal.NewApplicationError("none", spec.ErrTypeNoSuchCheckpoint)
	for _, tc := range []struct {
		name string
		// lookups: the answers to the lookups in turn (nil: found;
		// past the end: found).
		lookups  []error
		resumeAt time.Duration // from the loss (0: none)
		// at: queries from the loss; each finds the run holding, until
		// the offset in waitUntil.
		at, waitUntil []time.Duration
		asked         int
		resume        int64
	}{
		{name: "found", asked: 1, resume: 100},
		{name: "missing", lookups: []error{none}, asked: 1, resume: 0},
		// Three tries a lookup (the second 1 s after the first, the third
		// at once); holds of 15 s, then 30 s.
		{name: "storage down, then found", lookups: slices.Repeat([]error{refused}, 6),
			at: []time.Duration{5 * time.Second, 30 * time.Second}, waitUntil: []time.Duration{17 * time.Second, 49 * time.Second},
			asked: 7, resume: 100},
		{name: "storage down, a resume, then missing", lookups: []error{refused, refused, refused, none},
			resumeAt: 5 * time.Second, at: []time.Duration{4 * time.Second}, waitUntil: []time.Duration{17 * time.Second},
			asked: 4, resume: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1"), failed: map[string]bool{}}
			// Rank 0's process is gone, its pending upload unreported.
			lost := func(in spec.ChunkInput) bool {
				return in.From == 100 && in.Membership.Generation == 1 && in.Rank == 0
			}
			fail := func(in spec.ChunkInput) error {
				if in.From != 100 || in.Membership.Generation != 1 {
					return nil
				}
				return temporal.NewApplicationErrorWithCause("peer 0 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 0, Step: 130})
			}
			var (
				mu    sync.Mutex
				asked []spec.CheckpointRef
			)
			resolve := func(_ context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, want)
				if n := len(asked); n <= len(tc.lookups) && tc.lookups[n-1] != nil {
					return nil, tc.lookups[n-1]
				}
				out := want
				out.Key = "ckpt/100"
				return &out, nil
			}
			ch, env := asyncEnv(t, cl, fail, resolve)
			ch.lost, ch.gone = lost, make(chan struct{})
			var once sync.Once
			env.SetOnActivityCanceledListener(func(info *activity.Info) {
				if info.ActivityType.Name == spec.ActivityTrainChunk {
					once.Do(func() { close(ch.gone) })
				}
			})
			env.SetTestTimeout(30 * time.Second)
			start := env.Now()
			if tc.resumeAt > 0 {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, tc.resumeAt)
			}
			held := make([]spec.RunStatus, len(tc.at))
			for i, d := range tc.at {
				env.RegisterDelayedCallback(func() { held[i] = queryStatus(t, env) }, d)
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100,
				MaxRestarts: 1}.WithDefaults()})
			st := result(t, env)
			require.EqualValues(t, 300, st.Step)
			require.Len(t, asked, tc.asked)
			for _, a := range asked {
				require.EqualValues(t, 100, a.Step)
			}
			require.Len(t, st.Recoveries, 1, "a storage that does not answer is no recovery")
			rec := st.Recoveries[0]
			require.Equal(t, "peers lost node(s) [node-1]: peer 0 reset", rec.Reason, "the peers' words, not the lost rank's cancellation")
			require.Equal(t, tc.resume, rec.ResumeStep)
			require.Equal(t, 130-tc.resume, rec.LostSteps)
			require.WithinDuration(t, start, rec.SeenAt, 0, "the loss is at the start: the queries' offsets count from it")
			require.Empty(t, st.Detail)
			for i, want := range tc.waitUntil {
				h := held[i]
				require.Equal(t, spec.PhaseStorageWait, h.Phase, "at %v", tc.at[i])
				require.WithinDuration(t, start.Add(want), h.WaitUntil, 0, "at %v", tc.at[i])
				require.Contains(t, h.Detail, "the checkpoint storage did not say whether the checkpoint at step 100, uploading when the node was lost, is stored (dial tcp 127.0.0.1:9000: connect: connection refused); the run asks again at")
			}
		})
	}
}

// uploads plays ResolveCheckpoint: every checkpoint asked for is in the
// bucket when uploaded, else not there yet; asked lists the steps.
func uploads(uploaded bool) (func(context.Context, spec.CheckpointRef) (*spec.CheckpointRef, error), func() []int64) {
	var mu sync.Mutex
	var steps []int64
	resolve := func(_ context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
		mu.Lock()
		steps = append(steps, want.Step)
		mu.Unlock()
		if !uploaded {
			return nil, temporal.NewApplicationError("not there yet", spec.ErrTypeNoSuchCheckpoint)
		}
		out := want
		out.Key = fmt.Sprintf("ckpt/%d", want.Step)
		return &out, nil
	}
	return resolve, func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(steps)
	}
}

// TestPendingCheckpointSettles: a run that pauses, or is cancelled, while
// its last chunk's checkpoint is still uploading looks it up first: the
// status names the step it holds at (a later run --resume continues
// there), not the checkpoint before it. Missing in the bucket, it stays
// pending and the status keeps the older one.
func TestPendingCheckpointSettles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		paused   bool // else cancelled while the chunk from 100 trains
		uploaded bool
		want     string
		wantLast int64
	}{
		{"paused", true, true, "cancelled at step 200; last checkpoint at step 200", 200},
		{"paused, upload missing", true, false, "cancelled at step 200; last checkpoint at step 100", 100},
		{"cancelled in a chunk", false, true, "cancelled at step 100; last checkpoint at step 100", 100},
		{"cancelled, upload missing", false, false, "cancelled at step 100", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("n1", "n2")}
			resolve, asked := uploads(tc.uploaded)
			ch, env := asyncEnv(t, cl, nil, resolve)
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 100 && in.Rank == 0 {
					if tc.paused {
						env.SignalWorkflow(spec.SignalPause, nil)
					} else {
						env.CancelWorkflow()
					}
				}
			}
			var held spec.RunStatus
			if tc.paused {
				env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, time.Hour)
				env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Hour)
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()})
			require.True(t, env.IsWorkflowCompleted())
			var ce *temporal.CanceledError
			require.ErrorAs(t, env.GetWorkflowError(), &ce)
			st := queryStatus(t, env)
			require.Equal(t, tc.want, st.Error)
			if tc.wantLast == 0 {
				require.Nil(t, st.LastCkpt)
			} else {
				require.EqualValues(t, tc.wantLast, st.LastCkpt.Step)
			}
			if tc.paused {
				require.Equal(t, spec.PhasePaused, held.Phase)
				require.EqualValues(t, 200, held.Step)
				require.EqualValues(t, tc.wantLast, held.LastCkpt.Step, "the hold settles the upload before the cancel")
				require.Equal(t, "paused at step 200 (cann-train resume t continues)", held.Detail, "settled (or given up on)")
				require.EqualValues(t, 200, asked()[0], "looked up by the hold")
				if tc.uploaded {
					require.Len(t, asked(), 1, "found by the hold; the cancel has nothing left to settle")
					require.Equal(t, 2, st.Checkpoints)
				}
			} else {
				require.Equal(t, []int64{100}, asked()[:1])
			}
		})
	}
}

// TestNodeChangeSettlesUpload: a rescale at a boundary whose checkpoint
// is still uploading waits for the upload and changes there (before, one
// more chunk trained on the old nodes to checkpoint synchronously); when
// the upload does not appear, that is still what happens.
func TestNodeChangeSettlesUpload(t *testing.T) {
	for _, uploaded := range []bool{true, false} {
		t.Run(map[bool]string{true: "uploaded", false: "missing"}[uploaded], func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
			resolve, asked := uploads(uploaded)
			ch, env := asyncEnv(t, cl, nil, resolve)
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 100 && in.Rank == 0 {
					env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
				}
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 500, ChunkSteps: 100}.WithDefaults()})
			st := result(t, env)
			require.EqualValues(t, 500, st.Step)
			require.Len(t, st.Rescalings, 1)
			chunks := ch.byFrom()
			require.Equal(t, int64(200), asked()[0], "the upload at the boundary looked up")
			if uploaded {
				require.EqualValues(t, 200, st.Rescalings[0].AtStep, "changed at the boundary after the signal")
				require.Len(t, chunks[200], 3)
				require.EqualValues(t, 200, chunks[200][0].Restore.Step, "from the settled checkpoint")
				return
			}
			require.EqualValues(t, 300, st.Rescalings[0].AtStep, "one more chunk checkpoints first")
			require.Len(t, chunks[200], 2)
			require.True(t, chunks[200][0].Checkpoint)
			require.False(t, chunks[200][0].AsyncCheckpoint, "synchronously: the change waits for it")
			require.Len(t, chunks[300], 3)
			require.EqualValues(t, 300, chunks[300][0].Restore.Step)
		})
	}
}

// A run that fails with a checkpoint's upload pending (a node lost, no
// spare to replace it) looks it up first: its status counts the
// checkpoint and names it, so --resume and checkpoint ls find it
// (versionFailResolves). Before, it said "checkpoints 0".
func TestAsyncCheckpointResolvedAtFailure(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3"), failed: map[string]bool{}}
	fail := func(in spec.ChunkInput) error {
		if in.From != 100 {
			return nil
		}
		return temporal.NewApplicationErrorWithCause("peer 2 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 2, Step: 130})
	}
	var asked []int64
	resolve := func(_ context.Context, p spec.CheckpointRef) (*spec.CheckpointRef, error) {
		asked = append(asked, p.Step)
		p.Key = fmt.Sprintf("ckpt/%d", p.Step)
		return &p, nil
	}
	_, env := asyncEnv(t, cl, fail, resolve)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100,
		NodeWait: spec.Duration(time.Second)}.WithDefaults()})
	require.Error(t, env.GetWorkflowError(), "no spare: the run fails")
	st := queryStatus(t, env)
	require.Equal(t, spec.PhaseFailed, st.Phase)
	require.Equal(t, []int64{100}, asked, "the pending checkpoint looked up once")
	require.NotNil(t, st.LastCkpt)
	require.EqualValues(t, 100, st.LastCkpt.Step)
	require.Equal(t, 1, st.Checkpoints)
}
