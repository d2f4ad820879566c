package workflows

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

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

// autoChunks registers a TrainChunk that reports every rank's gradient
// exchange over a 1 MB/s link (topk pays); restored is the codec whose
// state the checkpoints hold (the ranks of an undecided chunk that
// restore one compress with it and report it).
func autoChunks(t *testing.T, cl *fakeCluster, ch *fakeChunks, restored string) *testsuite.TestWorkflowEnvironment {
	env := newRunEnv(t, cl, ch)
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
		res, err := ch.train(ctx, in)
		if err != nil {
			return nil, err
		}
		res.Sync = &spec.ChunkSync{Phase: "test", Codec: in.Codec, BytesSent: 100, DenseBytes: 400, BytesPerSec: 1e6, ComputeSeconds: 1e-3}
		if in.Codec == "" && in.Restore != nil && in.Restore.Step == in.From {
			res.Sync.Codec = restored
		}
		return res, nil
	}, activity.RegisterOptions{Name: spec.ActivityTrainChunk, DisableAlreadyRegisteredCheck: true})
	return env
}

// TestAutoCodecDecidedBeforeAPause: the decision falls when the warm-up's
// last chunk reports, so a run paused there already holds it (a later
// run --resume keeps it) and the next chunk carries it.
func TestAutoCodecDecidedBeforeAPause(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env := autoChunks(t, cl, ch, "")
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 0 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalPause, nil)
		}
	}
	var held spec.RunStatus
	env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 100, ChunkSteps: 50,
		Compression: &spec.CompressionPolicy{Codec: "auto", WarmupSteps: 20}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, spec.PhasePaused, held.Phase)
	require.EqualValues(t, 20, held.Step)
	require.Equal(t, "topk:0.001", held.Sync.Codec, "decided before the hold")
	require.EqualValues(t, 20, held.Sync.DecidedAtStep)
	require.Equal(t, "topk:0.001", st.Sync.Codec)
	for _, in := range ch.byFrom()[20] {
		require.Equal(t, "topk:0.001", in.Codec)
		require.False(t, in.Calibrate)
	}
}

// TestResumedAutoCodecMeasuresAgain: a run resumed past its warm-up with
// the codec undecided (the earlier run ended at the warm-up's end before
// deciding, or only its bucket is left) has no measurements: its first
// chunk trains uncompressed and calibrates, and the decision falls at
// that chunk's end — not "none" from no measurement.
func TestResumedAutoCodecMeasuresAgain(t *testing.T) {
	for _, tc := range []struct {
		name, restored, want string
	}{
		{"measured", "", "topk:0.001"},
		// The earlier run had decided (only its bucket is left): the
		// checkpoint's error-feedback state is sign's, and so the codec.
		{"carried by the checkpoint", "sign:1024", "sign:1024"},
	} {
		t.Run(tc.name, func(t *testing.T) { resumedAutoCodec(t, tc.restored, tc.want) })
	}
}

func resumedAutoCodec(t *testing.T, restored, want string) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env := autoChunks(t, cl, ch, restored)
	ck := spec.CheckpointRef{URL: "mem://", Run: "run/t", Step: 100, Key: "ckpt/100"}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 250, ChunkSteps: 50,
		Compression: &spec.CompressionPolicy{Codec: "auto", WarmupSteps: 20}}.WithDefaults()
	prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseCancelled, Step: 100, Generation: 1, Checkpoints: 1, LastCkpt: &ck,
		Sync: s.NewSyncStatus()}
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s, Resume: &prev})
	st := result(t, env)
	chunks := ch.byFrom()
	require.Len(t, chunks[100], 2)
	for _, in := range chunks[100] {
		require.True(t, in.Calibrate, "the first chunk measures")
		require.Empty(t, in.Codec)
	}
	for _, from := range []int64{150, 200} {
		for _, in := range chunks[from] {
			require.Equal(t, want, in.Codec, "chunk from %d", from)
			require.False(t, in.Calibrate)
		}
	}
	require.Equal(t, want, st.Sync.Codec)
	require.EqualValues(t, 150, st.Sync.DecidedAtStep)
	require.NotContains(t, st.Sync.Decision, "no rank measured")
	if restored != "" {
		require.Equal(t, "the checkpoint this run resumed from (step 100) carries the earlier run's sign:1024", st.Sync.Decision)
	}
}
