package workflows

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunDecidesAutoCodec: with compression: auto the warm-up's
// chunk ends at the warm-up's last step, the ranks' measurements decide
// the codec once (the slowest link wins), every later chunk carries it —
// the chunks redone after a recovery too — and the status shows the
// decision and the traffic.
func TestTrainingRunDecidesAutoCodec(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1")}
	var failed atomic.Bool
	ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
		// Rank 0 loses rank 1 once, in the first chunk after the
		// decision; the run rewinds to step 0 (no checkpoint yet).
		if in.From == 20 && in.Rank == 0 && failed.CompareAndSwap(false, true) {
			return temporal.NewApplicationErrorWithCause("peer lost", spec.ErrTypePeerFailed, nil, spec.PeerFailure{Rank: 1, Step: 25})
		}
		return nil
	}}
	env := newRunEnv(t, cl, ch)
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
		res, err := ch.train(ctx, in)
		if err != nil {
			return nil, err
		}
		// Rank 2's link is slow: 1 MB/s against 1 ms of computation.
		bw := 1e9
		if in.Rank == 2 {
			bw = 1e6
		}
		res.Sync = &spec.ChunkSync{Phase: "test", BytesSent: 100, DenseBytes: 400, BytesPerSec: bw, ComputeSeconds: 1e-3}
		return res, nil
	}, activity.RegisterOptions{Name: spec.ActivityTrainChunk})
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 220, ChunkSteps: 50, CheckpointEvery: 100,
		Compression: &spec.CompressionPolicy{Codec: "auto", WarmupSteps: 20}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Len(t, st.Recoveries, 1)

	sy := st.Sync
	require.NotNil(t, sy)
	require.Equal(t, "auto", sy.Policy)
	require.Equal(t, "topk:0.001", sy.Codec, "rank 2's slow link needs the most compressing codec")
	require.EqualValues(t, 20, sy.DecidedAtStep)
	require.Contains(t, sy.Decision, "topk:0.001")
	require.InDelta(t, 4, sy.TrafficReduction, 1e-9)

	chunks := ch.byFrom()
	require.Contains(t, chunks, int64(0))
	redone := 0
	for from, ins := range chunks {
		for _, in := range ins {
			switch {
			case in.Membership.Generation == 1 && from == 0:
				require.EqualValues(t, 20, in.To, "the warm-up chunk ends at the warm-up's last step")
				require.Empty(t, in.Codec, "no codec before the decision")
			case in.Membership.Generation > 1 && from == 0:
				redone++
				require.Equal(t, "topk:0.001", in.Codec, "the redone warm-up carries the decision")
				require.EqualValues(t, 50, in.To, "decided: no more stop at the warm-up's end")
			default:
				require.Equal(t, "topk:0.001", in.Codec, "chunk from %d", from)
			}
		}
	}
	require.Equal(t, 3, redone, "the recovery redoes the run from step 0 on every rank")
}
