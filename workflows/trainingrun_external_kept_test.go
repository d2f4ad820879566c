package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// keepingNodes are test nodes of this build: their first node keeps the
// uploads the bucket refuses (spec.ChunkProtocolStoreKept).
func keepingNodes(ids ...string) []spec.Node {
	out := testNodes(ids...)
	for i := range out {
		out[i].Protocol = spec.ChunkProtocolVersion
	}
	return out
}

// fakeKept plays ActivityStoreKept: each try takes the next answer
// (the last repeats); a nil answer stores the checkpoint at the step
// asked.
type fakeKept struct {
	mu      sync.Mutex
	answers []func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
	asked   []spec.StoreKeptInput
	nodes   []string // the node each try ran on (its task queue)
}

func (k *fakeKept) store(ctx context.Context, in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
	k.mu.Lock()
	n := len(k.asked)
	k.asked = append(k.asked, in)
	k.nodes = append(k.nodes, activity.GetInfo(ctx).TaskQueue)
	var answer func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
	if len(k.answers) > 0 {
		answer = k.answers[min(n, len(k.answers)-1)]
	}
	k.mu.Unlock()
	if answer != nil {
		return answer(in)
	}
	return spec.StoreKeptResult{Checkpoint: &spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: in.Step,
		Key: fmt.Sprintf("ckpt/%d", in.Step), SHA256: fmt.Sprint(in.Step)}}, nil
}

func refusedAgain(in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
	return spec.StoreKeptResult{Failed: &spec.CheckpointFailure{Step: in.Step, Error: "save checkpoint: no space left on device"},
		Kept: fmt.Sprintf("/w/kept/run_ddp/step-%012d-ab.pack", in.Step)}, nil
}

func keptEnv(t *testing.T, cl *fakeCluster, w *fakeWorlds, k *fakeKept) *testsuite.TestWorkflowEnvironment {
	env := newExternalEnv(t, cl, w)
	env.RegisterActivityWithOptions(k.store, activity.RegisterOptions{Name: spec.ActivityStoreKept})
	return env
}

// TestExternalRunHoldsForItsStorage: an external job on nodes that keep
// refused uploads holds, as a built-in run does, when its bucket refuses
// its checkpoints: a second refusal in a row stops the world at once, a
// refused final upload ends it; the run waits in waiting-storage and asks
// the first node to store what it kept, then relaunches from it (or
// completes) — no restart, no recovery, nothing retrained. A kept
// checkpoint lost, or older nodes, fall back as before.
func TestExternalRunHoldsForItsStorage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []spec.Node
		ckpts   []int64
		refuse  []int64
		final   bool
		answers []func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
		// want
		launchFrom []int64 // each launch's restore step
		tries      int     // StoreKept tries
		last       int64   // the last stored checkpoint's step
		recovered  string  // the one recovery's reason ("": none)
		failed     string  // the run's error ("": completes)
	}{
		{name: "second refusal in a row", nodes: keepingNodes("node-1", "node-2"), ckpts: []int64{40, 80, 120}, refuse: []int64{80, 120},
			answers:    []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain, refusedAgain, nil},
			launchFrom: []int64{0, 120}, tries: 3, last: 120},
		{name: "final upload refused", nodes: keepingNodes("node-1", "node-2"), ckpts: []int64{40}, final: true,
			answers:    []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain, nil},
			launchFrom: []int64{0}, tries: 2, last: 200},
		{name: "one refusal: the world goes on", nodes: keepingNodes("node-1", "node-2"), ckpts: []int64{40, 80, 120}, refuse: []int64{80},
			launchFrom: []int64{0}, last: 120},
		{name: "kept checkpoint lost", nodes: keepingNodes("node-1", "node-2"), ckpts: []int64{40, 80, 120}, refuse: []int64{80, 120},
			answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){func(in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
				return spec.StoreKeptResult{}, temporal.NewNonRetryableApplicationError("node node-1 keeps no checkpoint of run run/ddp at step 120 to store: none in /w/kept",
					spec.ErrTypeNothingKept, nil)
			}},
			launchFrom: []int64{0, 40}, tries: 1, last: 120, recovered: "the checkpoint at step 120 kept for the storage is lost: node node-1 keeps no checkpoint"},
		{name: "older nodes: the final refusal fails the run", nodes: testNodes("node-1", "node-2"), ckpts: []int64{40, 80}, refuse: []int64{80}, final: true,
			launchFrom: []int64{0}, failed: "checkpoint storage keeps failing: the checkpoint at step 80 could not be stored, nor now the one at 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: tc.nodes}
			w := &fakeWorlds{end: 200, ckpts: tc.ckpts, refuse: tc.refuse, finalRefused: tc.final}
			w.behave = func(in spec.ExternalInput) error {
				// The first launch's world trains on until stopped when the
				// run holds for its second refusal.
				if in.Restore == nil && len(tc.refuse) == 2 {
					return errHang
				}
				return nil
			}
			k := &fakeKept{answers: tc.answers}
			env := keptEnv(t, cl, w, k)
			var during []spec.RunStatus
			if tc.tries > 1 {
				env.RegisterDelayedCallback(func() { during = append(during, queryStatus(t, env)) }, 10*time.Second)
			}
			s := externalSpec(2)
			s.Steps = 200
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			var from []int64
			for _, l := range w.launches() {
				at := int64(0)
				if l[0].Restore != nil {
					at = l[0].Restore.Step
				}
				from = append(from, at)
				require.Equal(t, tc.nodes[0].Protocol > 0, l[0].KeepRefused, "the first node is asked to keep refused uploads")
				if len(l) > 1 {
					require.False(t, l[1].KeepRefused, "the others upload nothing")
				}
			}
			require.Equal(t, tc.launchFrom, from, "launches")
			require.Len(t, k.asked, tc.tries, "store tries")
			for i, in := range k.asked {
				require.Equal(t, spec.NodeTaskQueue("node-1"), k.nodes[i], "the first node stores what it kept")
				require.EqualValues(t, map[bool]int64{true: 200, false: 120}[tc.final], in.Step)
			}
			if tc.failed != "" {
				require.ErrorContains(t, env.GetWorkflowError(), tc.failed)
				return
			}
			st := result(t, env)
			require.EqualValues(t, 200, st.Step)
			if tc.recovered == "" {
				require.Empty(t, st.Recoveries)
			} else {
				require.Len(t, st.Recoveries, 1)
				require.Contains(t, st.Recoveries[0].Reason, tc.recovered)
				require.EqualValues(t, 40, st.Recoveries[0].ResumeStep)
			}
			if tc.tries > 1 {
				// Held meanwhile, saying what it waits for.
				require.NotEmpty(t, during)
				h := during[0]
				require.Equal(t, spec.PhaseStorageWait, h.Phase)
				require.Contains(t, h.Detail, "node node-1 keeps the one at step")
				require.NotNil(t, h.CheckpointFailed)
				require.Nil(t, st.CheckpointFailed, "cleared once stored")
			}
			require.NotNil(t, st.LastCkpt)
			require.Equal(t, tc.last, st.LastCkpt.Step)
		})
	}
}

// TestExternalStorageHoldCrossesContinueAsNew: an external job's hold for
// its final checkpoint goes on across continue-as-new (here after every
// try) from the state it carries, and completes once the first node
// stores it: no relaunch.
func TestExternalStorageHoldCrossesContinueAsNew(t *testing.T) {
	cl := &fakeCluster{pool: keepingNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 200, ckpts: []int64{40}, finalRefused: true}
	k := &fakeKept{answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain, nil}}
	s := externalSpec(2)
	s.Steps, s.ChunksPerRun = 200, 1
	in := RunInput{Spec: s}
	for execs := 1; ; execs++ {
		require.LessOrEqual(t, execs, 4, "still holding after %d executions", execs)
		env := keptEnv(t, cl, w, k)
		continueRun(env, in)
		var can *workflow.ContinueAsNewError
		if !errors.As(env.GetWorkflowError(), &can) {
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 200, st.LastCkpt.Step)
			require.Greater(t, execs, 1, "continued as new during the hold")
			break
		}
		require.NoError(t, decodeArgs(can, &in))
		require.True(t, in.State.StorageHeld && in.State.KeptFinal, "the hold for the final checkpoint is carried")
		require.EqualValues(t, 200, in.State.Status.Step)
	}
	require.Len(t, k.asked, 2, "refused once more, then stored")
	require.Len(t, w.launches(), 1, "not relaunched")
}

// TestExternalCancelledWhileHeld: an external job cancelled while it holds
// for its storage (at 120, kept after a second refusal in a row) has its
// first node store the kept checkpoint once more before it ends
// (versionKeptOnCancel): stored, the run ends cancelled at 120; refused
// again, at its last stored checkpoint (40), its end naming the node and
// the file that keeps 120. Either way without the hold's words or retry
// time.
func TestExternalCancelledWhileHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		onCancel func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
		last     int64
		err      string
	}{
		{name: "stored", last: 120, err: "cancelled at step 120; last checkpoint at step 120"},
		{name: "refused again", onCancel: refusedAgain, last: 40,
			err: "cancelled at step 120; last checkpoint at step 40; node node-1 keeps the checkpoint at step 120 that the bucket refused (/w/kept/run_ddp/step-000000000120-ab.pack): `cann-train checkpoint store-kept` stores it"},
		{name: "nothing kept", last: 40, onCancel: func(in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
			return spec.StoreKeptResult{}, temporal.NewNonRetryableApplicationError("node node-1 keeps no checkpoint of run run/ddp at step 120 to store: none in /w/kept",
				spec.ErrTypeNothingKept, nil)
		}, err: "cancelled at step 120; last checkpoint at step 40; the checkpoint at step 120 that node node-1 kept when the bucket refused it was not stored: node node-1 keeps no checkpoint of run run/ddp at step 120 to store: none in /w/kept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: keepingNodes("node-1", "node-2")}
			w := &fakeWorlds{end: 200, ckpts: []int64{40, 80, 120}, refuse: []int64{80, 120}}
			w.behave = func(in spec.ExternalInput) error {
				if in.Restore == nil {
					return errHang // trains on until the run stops it
				}
				return nil
			}
			k := &fakeKept{answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain, tc.onCancel}}
			env := keptEnv(t, cl, w, k)
			var held spec.RunStatus
			env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, 5*time.Second)
			env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Second) // within the 15 s before the next try
			s := externalSpec(2)
			s.Steps = 200
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := requireCancelled(t, env)
			require.Contains(t, st.Error, tc.err)
			require.Equal(t, spec.PhaseStorageWait, held.Phase)
			require.True(t, held.Detail != "" && !held.WaitUntil.IsZero(), "while held: %+v", held)
			require.True(t, st.Detail == "" && st.WaitUntil.IsZero(), "ended: detail %q, until %v", st.Detail, st.WaitUntil)
			require.EqualValues(t, tc.last, st.LastCkpt.Step)
			if tc.name == "refused again" {
				require.Equal(t, &spec.KeptCheckpoint{Step: 120, Node: "node-1", File: "/w/kept/run_ddp/step-000000000120-ab.pack"}, st.KeptOnNode)
			} else {
				require.Nil(t, st.KeptOnNode)
			}
			require.Len(t, k.asked, 2, "one try of the hold, one as the run ends")
			require.EqualValues(t, 120, k.asked[1].Step)
			require.Len(t, w.launches(), 1, "not relaunched")
		})
	}
}

// TestExternalCancelledDuringAStoreTry: an external job holds at 120 and
// continues as new during the hold (its launch's state is gone); it is
// cancelled while its first node is storing the kept checkpoint (the try
// the cancellation cancels). As the run ends the node is asked once more,
// stores it, and the run ends at 120.
func TestExternalCancelledDuringAStoreTry(t *testing.T) {
	cl := &fakeCluster{pool: keepingNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 200, ckpts: []int64{40, 80, 120}, refuse: []int64{80, 120}}
	w.behave = func(in spec.ExternalInput) error {
		if in.Restore == nil {
			return errHang
		}
		return nil
	}
	storing := make(chan struct{}) // the second try runs
	stopped := make(chan struct{}) // … and is cancelled
	blocked := func(in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
		close(storing)
		<-stopped
		return spec.StoreKeptResult{}, context.Canceled
	}
	k := &fakeKept{answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain, blocked, nil}}
	s := externalSpec(2)
	s.Steps, s.ChunksPerRun = 200, 1
	env := keptEnv(t, cl, w, k)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can, "continued as new during the hold")
	var in RunInput
	require.NoError(t, decodeArgs(can, &in))
	require.True(t, in.State.StorageHeld)

	env = keptEnv(t, cl, w, k)
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name == spec.ActivityStoreKept {
			close(stopped)
			return
		}
		w.cancelled(info)
	})
	go func() {
		<-storing
		env.CancelWorkflow()
	}()
	continueRun(env, in)
	st := requireCancelled(t, env)
	require.Equal(t, "cancelled at step 120; last checkpoint at step 120", st.Error)
	require.Len(t, k.asked, 3, "one refused, one cancelled, one as the run ends")
	require.Len(t, w.launches(), 1)
}

// TestExternalCancelStopsAtAKeptCheckpoint: a run cancelled while its
// world trains asks it for a checkpoint; the bucket refuses it and the
// first node keeps it. The world stops at once — not after the cancel
// grace (a minute, longer than the test's time) — and the node stores
// the kept checkpoint as the run ends: cancelled at 57, nothing lost.
func TestExternalCancelStopsAtAKeptCheckpoint(t *testing.T) {
	cl := &fakeCluster{pool: keepingNodes("node-1", "node-2"), failed: map[string]bool{}}
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	k := &fakeKept{}
	env := keptEnv(t, cl, w, k)
	env.SetTestTimeout(15 * time.Second)
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
		if in.Step == 0 {
			return 57, nil
		}
		env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session, Kept: true,
			Ref: spec.CheckpointRef{Run: "ddp", Step: in.Step}, Failed: "save checkpoint: no space left on device"})
		return in.Step, nil
	}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
	env.RegisterDelayedCallback(env.CancelWorkflow, 300*time.Millisecond)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	st := requireCancelled(t, env)
	require.Equal(t, "cancelled at step 57; last checkpoint at step 57", st.Error)
	require.Len(t, k.asked, 1)
	require.EqualValues(t, 57, k.asked[0].Step)
	require.Equal(t, "node-1", k.nodes[0][len(k.nodes[0])-len("node-1"):], "asked of the first node (%s)", k.nodes[0])
	require.Len(t, w.launches(), 1)
	cl.mu.Lock()
	require.Equal(t, 1, cl.releases, "its nodes released")
	cl.mu.Unlock()
}

// TestExternalRunStoresTheKeptCheckpointAfterALoss: node-2 dies after the
// bucket refused the checkpoint at 40 (kept by node-1) — the first refusal,
// which stops nothing. Before the recovery, node-1 stores it: the world
// relaunches on the spare from 40, not 20. Refused again, or with node-1
// the node lost, the recovery goes back to 20 as before.
func TestExternalRunStoresTheKeptCheckpointAfterALoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
		lose    string // the node lost
		tries   int
		resume  int64
	}{
		{name: "stored", lose: "node-2", tries: 1, resume: 40},
		{name: "refused again", lose: "node-2", answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain}, tries: 1, resume: 20},
		{name: "the first node lost", lose: "node-1", tries: 0, resume: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timedOut := temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 57, LastCheckpoint: 20})
			exited := temporal.NewApplicationError("rank-1 exited with status 1 at step 56", spec.ErrTypeRankExited,
				spec.RankExit{Rank: 1, Process: "rank-1", ExitCode: 1, Step: 56})
			node1, node2 := exited, error(timedOut)
			if tc.lose == "node-1" {
				node1, node2 = timedOut, exited
			}
			cl, w := loseNode2(node2, node1)
			cl.pool = keepingNodes("node-1", "node-2", "spare")
			w.refuse = []int64{40}
			k := &fakeKept{answers: tc.answers}
			env := keptEnv(t, cl, w, k)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
			st := result(t, env)
			require.Len(t, st.Recoveries, 1)
			rec := st.Recoveries[0]
			require.Equal(t, []string{tc.lose}, rec.FailedNodes)
			require.Equal(t, tc.resume, rec.ResumeStep)
			require.Len(t, k.asked, tc.tries)
			for _, in := range k.asked {
				require.EqualValues(t, 40, in.Step)
			}
			l := w.launches()
			require.Len(t, l, 2)
			require.NotNil(t, l[1][0].Restore)
			require.Equal(t, tc.resume, l[1][0].Restore.Step)
		})
	}
}

// TestExternalRunPausesAtAKeptCheckpoint: a pause waits for the world's
// next checkpoint; the bucket refuses it (the first refusal) and the first
// node keeps it: the world stops at once, the node stores it, and the run
// pauses there — not at the job's checkpoint after. A resume relaunches
// from it. A later checkpoint stored before the world stopped makes the
// hold needless: the run pauses there.
//
// The world's uploads after its checkpoint at 40 are signalled while the
// run asks it for a checkpoint, and reach the workflow together, with that
// request's answer: "before the world stopped" is then certain, not a race
// between two signals and the stop (a stopped launch's later uploads are
// ignored by design).
func TestExternalRunPausesAtAKeptCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored []int64 // stored after the refused 80, before the stop
		at     int64   // where the run pauses
		tries  int
	}{
		{name: "the kept one", at: 80, tries: 1},
		{name: "a later one stored meanwhile", stored: []int64{120}, at: 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: keepingNodes("node-1", "node-2")}
			w := &fakeWorlds{end: 200, ckpts: []int64{40}}
			k := &fakeKept{}
			env := keptEnv(t, cl, w, k)
			w.behave = func(in spec.ExternalInput) error {
				if in.Restore != nil {
					return nil
				}
				if in.Rank == 0 {
					env.SignalWorkflow(spec.SignalPause, nil) // after its checkpoint at 40
				}
				return errHang // trains on until stopped
			}
			asked := 0
			env.RegisterActivityWithOptions(func(_ context.Context, in spec.CheckpointRequest) (int64, error) {
				asked++
				if asked == 1 {
					env.SignalWorkflowSkippingWorkflowTask(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session, Kept: true,
						Ref: spec.CheckpointRef{Run: "ddp", Step: 80}, Failed: "write: no space left on device"})
					for _, s := range tc.stored {
						env.SignalWorkflowSkippingWorkflowTask(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
							Ref:  spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: s, Key: fmt.Sprintf("ckpt/%d", s), SHA256: fmt.Sprint(s)},
							Loss: 2.3 / float32(1+s), FirstLoss: 2.3})
					}
				}
				return 0, nil // the world cannot be asked: it stops after its next checkpoint
			}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
			var paused spec.RunStatus
			env.RegisterDelayedCallback(func() {
				paused = queryStatus(t, env)
				env.SignalWorkflow(spec.SignalResume, nil)
			}, time.Hour)
			s := externalSpec(2)
			s.Steps = 200
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, 1, asked, "the run asked the world for a checkpoint for its pause, once")
			require.Equal(t, spec.PhasePaused, paused.Phase)
			require.Equal(t, tc.at, paused.Step)
			require.Equal(t, tc.at, paused.LastCkpt.Step)
			require.Len(t, k.asked, tc.tries)
			ls := w.launches()
			require.Len(t, ls, 2)
			require.NotNil(t, ls[1][0].Restore)
			require.Equal(t, tc.at, ls[1][0].Restore.Step, "relaunched from where it paused")
			require.Empty(t, st.Recoveries)
		})
	}
}

// TestExternalLossAfterAKeptCheckpointCountsItsTraining: a world stores
// its checkpoint at 20, the bucket refuses the one at 40 (node-1 keeps
// it), and node-2 dies at 57. Stored before the recovery, the checkpoint
// at 40 makes the training up to it the run's: the launch's lost segment
// starts at 40, when the run heard of it, and a trained one reaches 40
// (versionKeptLossTrained). Refused again, the lost segment starts at the
// stored 20, as before.
func TestExternalLossAfterAKeptCheckpointCountsItsTraining(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []func(spec.StoreKeptInput) (spec.StoreKeptResult, error)
		lostAt  int64 // the lost segment's first step
	}{
		{name: "stored", lostAt: 40},
		{name: "refused again", answers: []func(spec.StoreKeptInput) (spec.StoreKeptResult, error){refusedAgain}, lostAt: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const tick = 300 * time.Millisecond
			timedOut := temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 57, LastCheckpoint: 20})
			exited := temporal.NewApplicationError("rank-1 exited with status 1 at step 56", spec.ErrTypeRankExited,
				spec.RankExit{Rank: 1, Process: "rank-1", ExitCode: 1, Step: 56})
			cl, w := loseNode2(timedOut, exited)
			cl.pool = keepingNodes("node-1", "node-2", "spare")
			w.refuse = []int64{40}
			// The first launch's checkpoints and its loss a tick apart.
			gates := map[int64]chan struct{}{20: make(chan struct{}), 40: make(chan struct{}), 57: make(chan struct{})}
			w.before = func(in spec.ExternalInput, step int64) {
				if in.Restore == nil {
					<-gates[step]
				}
			}
			behave := w.behave
			w.behave = func(in spec.ExternalInput) error {
				if in.Restore == nil {
					<-gates[57]
				}
				return behave(in)
			}
			k := &fakeKept{answers: tc.answers}
			env := keptEnv(t, cl, w, k)
			for i, step := range []int64{20, 40, 57} {
				env.RegisterDelayedCallback(func() { close(gates[step]) }, time.Duration(i+1)*tick)
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
			st := result(t, env)
			require.Len(t, st.Recoveries, 1)
			require.Equal(t, tc.lostAt, st.Recoveries[0].ResumeStep)
			var lost []spec.Segment
			var trained spec.Segment // the first launch's last
			for _, sg := range st.Segments {
				if sg.Lost {
					lost = append(lost, sg)
				} else if sg.Generation == 1 {
					trained = sg
				}
			}
			require.Len(t, lost, 1, "segments %+v", st.Segments)
			require.Equal(t, tc.lostAt, lost[0].FromStep, "segments %+v", st.Segments)
			require.EqualValues(t, 57, lost[0].ToStep)
			require.Equal(t, tc.lostAt, trained.ToStep, "the first launch's training recorded up to %d: %+v", tc.lostAt, st.Segments)
			require.True(t, lost[0].Start.Equal(trained.End), "the lost stretch starts where the trained one ends: %+v", st.Segments)
		})
	}
}

// requireCancelled checks that the run ended Canceled, its status saying
// so, and returns that status.
func requireCancelled(t *testing.T, env *testsuite.TestWorkflowEnvironment) spec.RunStatus {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	var can *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	st := queryStatus(t, env)
	require.Equal(t, spec.PhaseCancelled, st.Phase)
	return st
}
