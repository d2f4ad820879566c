package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// asyncChunks plays a node whose rank 0 uploads checkpoints in the
// background when asked: the chunk reports them pending, the node's next
// chunk committed.
type asyncChunks struct {
	*fakeChunks
	mu      sync.Mutex
	pending map[string]spec.CheckpointRef
}

func (a *asyncChunks) train(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
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
	ch := &asyncChunks{fakeChunks: &fakeChunks{fail: fail}, pending: map[string]spec.CheckpointRef{}}
	env := newRunEnv(t, cl, ch.fakeChunks)
	env.RegisterActivityWithOptions(ch.train, activity.RegisterOptions{Name: spec.ActivityTrainChunk, DisableAlreadyRegisteredCheck: true})
	if resolve != nil {
		env.RegisterActivityWithOptions(resolve, activity.RegisterOptions{Name: spec.ActivityResolveCheckpoint})
	}
	return ch, func(s spec.RunSpec) (spec.RunStatus, error) {
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		var st spec.RunStatus
		if err := env.GetWorkflowError(); err != nil {
			return st, err
		}
		return st, env.GetWorkflowResult(&st)
	}
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
func TestAsyncCheckpointResolvedAfterLoss(t *testing.T) {
	for _, found := range []bool{true, false} {
		t.Run(map[bool]string{true: "found", false: "missing"}[found], func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1"), failed: map[string]bool{}}
			dead := make(chan struct{})
			t.Cleanup(func() { close(dead) })
			fail := func(in spec.ChunkInput) error {
				if in.From != 100 || in.Membership.Generation != 1 {
					return nil
				}
				if in.Membership.Nodes[in.Rank].ID == "node-1" {
					<-dead // rank 0's process is gone, its pending upload unreported
					return errors.New("unreachable")
				}
				return temporal.NewApplicationErrorWithCause("peer 0 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 0, Step: 130})
			}
			var asked []spec.CheckpointRef
			resolve := func(_ context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
				asked = append(asked, want)
				if !found {
					return nil, temporal.NewNonRetryableApplicationError("none", "NoSuchCheckpoint", nil)
				}
				out := want
				out.Key = "ckpt/100"
				return &out, nil
			}
			_, run := newAsyncEnv(t, cl, fail, resolve)
			st, err := run(spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100}.WithDefaults())
			require.NoError(t, err)
			require.EqualValues(t, 300, st.Step)
			require.Len(t, asked, 1)
			require.EqualValues(t, 100, asked[0].Step)
			require.Len(t, st.Recoveries, 1)
			require.Equal(t, "peers lost node(s) [node-1]: peer 0 reset", st.Recoveries[0].Reason, "the peers' words, not the lost rank's cancellation")
			if found {
				require.EqualValues(t, 100, st.Recoveries[0].ResumeStep)
				require.EqualValues(t, 30, st.Recoveries[0].LostSteps)
			} else {
				require.EqualValues(t, 0, st.Recoveries[0].ResumeStep)
			}
		})
	}
}
