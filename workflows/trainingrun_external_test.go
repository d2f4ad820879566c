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
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// fakeWorlds plays RunExternal: every node runs until step `end`; the
// first node commits checkpoints (by signal, as the real node does).
// behave(in) may fail a node or make it hang until cancelled.
type fakeWorlds struct {
	mu     sync.Mutex
	env    *testsuite.TestWorkflowEnvironment
	inputs []spec.ExternalInput
	end    int64
	// ckpts are the steps the first node commits in every launch (those
	// past the launch's start).
	ckpts  []int64
	behave func(in spec.ExternalInput) error
	// stop ends a hanging launch's activity when the workflow cancels it
	// (the test environment does not cancel an activity's context itself).
	stop map[string]context.CancelFunc
	// early holds cancellations that arrived before their activity ran
	// (under load the workflow may cancel a launch whose second node has
	// not started yet): that activity stops as soon as it starts.
	early map[string]bool
	// gone answers CheckNodes (nil: every node alive).
	gone func(spec.CheckNodesInput) ([]spec.PeerFailure, error)
	// failCkpt is a step of ckpts whose upload fails (0: none); refuse
	// more such steps, in the first launch only. A first node asked to keep refused uploads
	// (KeepRefused) says it kept them.
	failCkpt int64
	refuse   []int64
	// finalRefused: the first node's final upload is refused — its
	// result's CheckpointFailed when it keeps it, else a CheckpointStorage
	// error.
	finalRefused bool
	// before, when set, runs before the first node signals its checkpoint
	// at step.
	before func(in spec.ExternalInput, step int64)
}

func (f *fakeWorlds) cancelled(info *activity.Info) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if stop := f.stop[info.ActivityID]; stop != nil {
		stop()
		return
	}
	if f.early == nil {
		f.early = map[string]bool{}
	}
	f.early[info.ActivityID] = true
}

var errHang = fmt.Errorf("hang")

func (f *fakeWorlds) run(ctx context.Context, in spec.ExternalInput) (*spec.ChunkResult, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	f.mu.Lock()
	f.inputs = append(f.inputs, in)
	if f.stop == nil {
		f.stop = map[string]context.CancelFunc{}
	}
	id := activity.GetInfo(ctx).ActivityID
	f.stop[id] = stop
	if f.early[id] {
		stop()
	}
	f.mu.Unlock()
	from := int64(0)
	if in.Restore != nil {
		from = in.Restore.Step
	}
	if in.Rank == 0 {
		for _, s := range f.ckpts {
			if s <= from {
				continue
			}
			if f.before != nil {
				f.before(in, s)
			}
			if s == f.failCkpt || slices.Contains(f.refuse, s) && in.Restore == nil {
				f.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
					Ref: spec.CheckpointRef{Run: in.Spec.Name, Step: s}, Failed: "write: no space left on device", Kept: in.KeepRefused})
				continue
			}
			f.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
				Ref:  spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: s, Key: fmt.Sprintf("ckpt/%d", s), SHA256: fmt.Sprint(s)},
				Loss: 2.3 / float32(1+s), From: from, FirstLoss: 2.3 / float32(1+from)})
		}
	}
	if f.behave != nil {
		if err := f.behave(in); err == errHang {
			<-ctx.Done()
			return nil, ctx.Err()
		} else if err != nil {
			return nil, err
		}
	}
	t0 := time.Unix(1_700_000_000, 0)
	res := &spec.ChunkResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, From: from, To: f.end,
		FirstLoss: 2.3 / float32(1+from), LastLoss: 2.3 / float32(1+f.end), Seconds: 10,
		StartedAt: t0, FirstStepAt: t0.Add(time.Second), EndedAt: t0.Add(10 * time.Second)}
	if from >= f.end {
		// Restored at its last step, the script trains and reports nothing.
		res.To, res.FirstLoss, res.LastLoss, res.FirstStepAt = from, 0, 0, time.Time{}
	}
	if f.finalRefused && in.Rank == 0 {
		refused := spec.CheckpointFailure{Step: res.To, Error: "save checkpoint: no space left on device"}
		if !in.KeepRefused {
			return nil, temporal.NewApplicationError(refused.Error, spec.ErrTypeCheckpointStorage, refused)
		}
		res.CheckpointFailed = &refused
	}
	return res, nil
}

func (f *fakeWorlds) launches() [][]spec.ExternalInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]spec.ExternalInput
	at := map[string]int{} // session → index in out, in order of first start
	for _, in := range f.inputs {
		i, ok := at[in.Session]
		if !ok {
			i = len(out)
			at[in.Session] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], in)
	}
	// The ranks of one launch start concurrently: order them by rank.
	for _, l := range out {
		slices.SortFunc(l, func(a, b spec.ExternalInput) int { return a.Rank - b.Rank })
	}
	return out
}

func newExternalEnv(t *testing.T, cl *fakeCluster, w *fakeWorlds) *testsuite.TestWorkflowEnvironment {
	env := newRunEnv(t, cl, &fakeChunks{gone: w.gone})
	w.env = env
	env.SetOnActivityCanceledListener(w.cancelled)
	env.RegisterActivityWithOptions(w.run, activity.RegisterOptions{Name: spec.ActivityRunExternal})
	env.RegisterActivityWithOptions(func(context.Context) (int, error) { return 29500, nil },
		activity.RegisterOptions{Name: spec.ActivityReservePort})
	env.RegisterActivityWithOptions(func(context.Context) (spec.EnergyReading, error) {
		return spec.EnergyReading{Reason: "no energy meter"}, nil
	}, activity.RegisterOptions{Name: spec.ActivityReadEnergy})
	return env
}

// completeExternal runs the external job s to completion on cl and w and
// returns its final status.
func completeExternal(t *testing.T, cl *fakeCluster, w *fakeWorlds, s spec.RunSpec) spec.RunStatus {
	t.Helper()
	env := newExternalEnv(t, cl, w)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	return st
}

func externalSpec(nodes int) spec.RunSpec {
	return spec.RunSpec{Name: "ddp", Nodes: nodes, Steps: 100, MaxRestarts: 3, HeartbeatTimeout: spec.Duration(10 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 2, Workdir: "/w"}}.WithDefaults()
}

func TestExternalRunCompletes(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100, ckpts: []int64{40, 80}}
	env := newExternalEnv(t, cl, w)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Equal(t, spec.ModelExternal, st.Model)
	require.EqualValues(t, 100, st.Step)
	require.EqualValues(t, 100, st.TotalSteps)
	require.Equal(t, 2, st.Checkpoints)
	require.EqualValues(t, 80, st.LastCkpt.Step)
	require.InDelta(t, 2.3, st.InitialLoss, 1e-6)
	require.InDelta(t, 2.3/101, st.Loss, 1e-6)
	require.Empty(t, st.Recoveries)
	ls := w.launches()
	require.Len(t, ls, 1)
	require.Len(t, ls[0], 2)
	for rank, in := range ls[0] {
		require.Equal(t, rank, in.Rank)
		require.Equal(t, 29500, in.MasterPort)
		require.Nil(t, in.Restore)
		require.Zero(t, in.Restarts)
	}
}

// TestExternalRunEndsShortOfItsSteps: a script that exits 0 before the
// job's steps fails the run (ShortOfSteps), saying where it stopped —
// `run --wait` and a pipeline after it must not take it for a trained
// model; one that reaches them, or a job that gives no steps, completes.
func TestExternalRunEndsShortOfItsSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps int64
		end   int64
		want  string  // the failure; "" completes
		ckpts []int64 // committed by rank 0 (a script that never reports)
	}{
		{"short", 150, 100, "the script ended (exit status 0) at step 100, short of the job's 150 steps; a job that gives steps completes only there", nil},
		{"no step", 150, 0, "the script ended (exit status 0) without reporting a step (cann_train.report), short of the job's 150 steps (did it run its training loop?)", nil},
		{"no step, checkpoints committed", 150, 0, "without reporting a step (cann_train.report), short of the job's 150 steps, " +
			"though rank 0 committed checkpoints up to step 150: call cann_train.report(step)", []int64{50, 150}},
		{"all its steps", 150, 150, "", nil},
		{"steps unknown", 0, 100, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
			env := newExternalEnv(t, cl, &fakeWorlds{end: tc.end, ckpts: tc.ckpts})
			s := externalSpec(2)
			s.Steps = tc.steps
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			var st spec.RunStatus
			if tc.want == "" {
				require.NoError(t, env.GetWorkflowError())
				require.NoError(t, env.GetWorkflowResult(&st))
				require.Equal(t, spec.PhaseCompleted, st.Phase)
				require.Empty(t, st.Detail)
				return
			}
			err := env.GetWorkflowError()
			var ae *temporal.ApplicationError
			require.True(t, errors.As(err, &ae), "want the run failed, got %v", err)
			require.Equal(t, spec.ErrTypeShortOfSteps, ae.Type())
			require.True(t, ae.NonRetryable())
			require.Contains(t, ae.Message(), tc.want)
			st = queryStatus(t, env)
			require.Equal(t, spec.PhaseFailed, st.Phase)
			require.Contains(t, st.Error, tc.want)
			require.EqualValues(t, tc.end, st.Step)
			require.Positive(t, cl.releases, "its nodes are released")
		})
	}
}

// TestExternalStartFailureRepeated: a launch that fails before any rank
// reported a step (RankExit.NoStep: an import error) and then fails the
// same way again fails the run, not retryable, instead of relaunching it
// until max_restarts run out; failures that differ, that come from node
// workers that do not say NoStep, or that follow steps, are retried as
// before.
func TestExternalStartFailureRepeated(t *testing.T) {
	noTorch := "Traceback (most recent call last):\n  File \"train.py\", line 20, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n"
	exit := func(rank int, tail string, noStep bool, step int64) error {
		return temporal.NewApplicationError(fmt.Sprintf("rank-%d on node node-1 exited with status 1 at step %d; log tail:\n%s", rank, step, tail),
			spec.ErrTypeRankExited, spec.RankExit{Rank: rank, Process: fmt.Sprintf("rank-%d", rank), Node: "node-1", ExitCode: 1,
				Step: step, LogTail: tail, Program: "python3 = /usr/bin/python3", NoStep: noStep})
	}
	for _, tc := range []struct {
		name     string
		launch   func(n int, in spec.ExternalInput) error // n: the launch, from 1
		launches int
		want     string
		ckpts    []int64 // the first node commits in every launch
	}{
		{"the same import error", func(n int, in spec.ExternalInput) error {
			return exit(n%2, noTorch, true, 0) // (another rank each time: the same failure)
		}, 2, "not retryable: launch from step 0: the job failed the same way on two launches in a row, before any rank reported a step — " +
			"relaunching would only fail again (check the program it runs and its imports", nil},
		{"another failure, then the same twice", func(n int, in spec.ExternalInput) error {
			if n == 1 {
				return exit(0, "RuntimeError: Address already in use\n", true, 0)
			}
			return exit(0, noTorch, true, 0)
		}, 3, "the job failed the same way on two launches in a row", nil},
		// Launches that restored a checkpoint run a program that ran
		// before: the hint is not its imports.
		{"restored, then the same failure twice", func(n int, in spec.ExternalInput) error {
			if n == 1 {
				return exit(0, "ValueError: nan loss\n", false, 60)
			}
			return exit(0, "RuntimeError: checkpoint shape mismatch\n", true, 50)
		}, 3, "relaunching would only fail again (the launches restored the checkpoint of step 50, so the program ran before: " +
			"look at loading that checkpoint, or at what changed on these nodes", []int64{50}},
		{"an older node worker", func(n int, in spec.ExternalInput) error {
			return exit(0, noTorch, false, 0)
		}, 4, "gave up after 3 restart(s)", nil},
		{"after steps", func(n int, in spec.ExternalInput) error {
			return exit(0, "ValueError: nan loss\n", false, 7)
		}, 4, "gave up after 3 restart(s)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1")}
			w := &fakeWorlds{end: 100, ckpts: tc.ckpts}
			w.behave = func(in spec.ExternalInput) error {
				return tc.launch(len(w.launches()), in)
			}
			env := newExternalEnv(t, cl, w)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(1)})
			err := env.GetWorkflowError()
			require.ErrorContains(t, err, tc.want)
			require.Len(t, w.launches(), tc.launches)
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseFailed, st.Phase)
			require.Len(t, st.Recoveries, tc.launches-1)
			if tc.launches < 4 && tc.ckpts == nil {
				require.Contains(t, st.Error, "No module named 'torch'") // the log tail
			}
		})
	}
}

// TestExternalMaxRestartsNone: spec.NoRestarts (a job file's
// max_restarts: 0) fails the run at the first failure, and the nodes are
// told 0 (TORCHELASTIC_MAX_RESTARTS); an input's 0 (runs started before
// NoRestarts) is still the default.
func TestExternalMaxRestartsNone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      int
		launches int
		want     string
		node     int // MaxRestarts in the nodes' input
	}{
		{"none", spec.NoRestarts, 1, "no restarts allowed (max_restarts: 0): ", 0},
		{"unset", 0, spec.DefaultMaxRestarts + 1, fmt.Sprintf("gave up after %d restart(s)", spec.DefaultMaxRestarts), spec.DefaultMaxRestarts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeWorlds{end: 100, behave: func(in spec.ExternalInput) error {
				return temporal.NewApplicationError("rank-1 on node node-1 exited with status 1 at step 23", spec.ErrTypeRankExited,
					spec.RankExit{Rank: 1, ExitCode: 1, Step: 23})
			}}
			env := newExternalEnv(t, &fakeCluster{pool: testNodes("node-1")}, w)
			s := externalSpec(1)
			s.MaxRestarts = tc.max // (the workflow applies the defaults)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.ErrorContains(t, env.GetWorkflowError(), tc.want)
			ls := w.launches()
			require.Len(t, ls, tc.launches)
			require.Equal(t, tc.node, ls[0][0].Spec.MaxRestarts)
		})
	}
}

// loseNode2 is a two-node world (and a spare) whose first launch, after
// checkpoints at steps 20 and 40, ends with node2 on node-2 and node1 on
// node-1; relaunches finish.
func loseNode2(node2, node1 error) (*fakeCluster, *fakeWorlds) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare"), failed: map[string]bool{}}
	w := &fakeWorlds{end: 100, ckpts: []int64{20, 40}}
	w.behave = func(in spec.ExternalInput) error {
		switch {
		case in.Restore != nil:
			return nil
		case in.Rank == 1:
			return node2
		}
		return node1
	}
	return cl, w
}

// requireNode2Replaced checks loseNode2's outcome: one recovery, node-2
// replaced by the spare, the world relaunched from step 40.
func requireNode2Replaced(t *testing.T, st spec.RunStatus) spec.Recovery {
	t.Helper()
	require.Equal(t, []string{"node-1", "spare"}, st.Nodes)
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.Equal(t, []string{"node-2"}, rec.FailedNodes)
	require.Equal(t, []string{"spare"}, rec.Replacement)
	require.EqualValues(t, 40, rec.ResumeStep)
	return rec
}

// TestExternalRunReplacesDeadNode: node-2 dies (heartbeat timeout) at
// step 57 while node-1's ranks exit when they lose their peers; the run
// replaces node-2 with the spare and relaunches from the checkpoint at
// step 40, counting one restart.
// TestExternalRunSaysACheckpointFailed: a world's upload that failed is
// in the status (the world goes on) until a later checkpoint is stored.
func TestExternalRunSaysACheckpointFailed(t *testing.T) {
	for _, tc := range []struct {
		fail int64
		want *spec.CheckpointFailure
	}{
		{80, &spec.CheckpointFailure{Step: 80, Error: "write: no space left on device"}},
		{40, nil}, // the one at 80 was stored since
	} {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
		w := &fakeWorlds{end: 100, ckpts: []int64{40, 80}, failCkpt: tc.fail}
		st := completeExternal(t, cl, w, externalSpec(2))
		require.Equal(t, tc.want, st.CheckpointFailed, "upload at %d failed", tc.fail)
		require.Equal(t, 1, st.Checkpoints)
	}
}

// TestExternalRunGivesUpOnFailingStorage: a world whose in-flight upload
// failed and whose final upload fails too ends the run at once, naming
// both, instead of relaunching it up to max_restarts times.
func TestExternalRunGivesUpOnFailingStorage(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100, ckpts: []int64{40, 80}, failCkpt: 80}
	w.behave = func(in spec.ExternalInput) error {
		if in.Rank == 0 {
			return temporal.NewApplicationError("save checkpoint: no space left on device", spec.ErrTypeCheckpointStorage,
				spec.CheckpointFailure{Step: 100, Error: "save checkpoint: no space left on device"})
		}
		return nil
	}
	env := newExternalEnv(t, cl, w)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.ErrorContains(t, err, "checkpoint storage keeps failing: the checkpoint at step 80 could not be stored, nor now the one at 100")
	require.Len(t, w.launches(), 1, "no relaunch")
}

// TestExternalRunWaitsToReadItsCheckpoint: after node-2 is lost, the
// relaunch's nodes cannot read the checkpoint at 40 twice (the storage is
// down): the run holds in waiting-storage, counts no restart and blames
// no node, then relaunches from 40 and completes.
func TestExternalRunWaitsToReadItsCheckpoint(t *testing.T) {
	cl, w := loseNode2(temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 57, LastCheckpoint: 40}),
		temporal.NewApplicationError("rank-1 on node node-1 exited with status 1 at step 56", spec.ErrTypeRankExited,
			spec.RankExit{Rank: 1, Process: "rank-1", Node: "node-1", ExitCode: 1, Step: 56}))
	lose := w.behave
	var (
		mu       sync.Mutex
		launches = map[string]bool{}
	)
	w.behave = func(in spec.ExternalInput) error {
		if in.Restore == nil {
			return lose(in)
		}
		mu.Lock()
		launches[in.Session] = true
		n := len(launches)
		mu.Unlock()
		if n <= 2 {
			return unreadable(in.Membership.Nodes[in.Rank].ID, 40)
		}
		return nil
	}
	env := newExternalEnv(t, cl, w)
	var during []spec.RunStatus
	for _, d := range []time.Duration{5 * time.Second, 30 * time.Second} {
		env.RegisterDelayedCallback(func() { during = append(during, queryStatus(t, env)) }, d)
	}
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	st := result(t, env)
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	requireNode2Replaced(t, st)
	ls := w.launches()
	require.Len(t, ls, 4)
	for _, l := range ls[1:] {
		require.EqualValues(t, 40, l[0].Restore.Step)
		require.Equal(t, 1, l[0].Restarts, "a hold for the storage is no restart")
	}
	// Held 15 s, then 30 s: waiting at 5 s and at 30 s.
	require.Len(t, during, 2)
	for _, h := range during {
		require.Equal(t, spec.PhaseStorageWait, h.Phase)
		require.Contains(t, h.Detail, "cannot read the checkpoint at step 40")
	}
	require.Equal(t, []string{"node-2"}, failedIn(cl))
}

func TestExternalRunReplacesDeadNode(t *testing.T) {
	cl, w := loseNode2(temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 57, LastCheckpoint: 40}),
		temporal.NewApplicationError("rank-1 on node node-1 exited with status 1 at step 56", spec.ErrTypeRankExited,
			spec.RankExit{Rank: 1, Process: "rank-1", Node: "node-1", ExitCode: 1, Step: 56}))
	st := completeExternal(t, cl, w, externalSpec(2))
	rec := requireNode2Replaced(t, st)
	require.EqualValues(t, 57, rec.FailedAtStep)
	require.EqualValues(t, 17, rec.LostSteps)
	require.InDelta(t, 2.3/41, rec.ResumeLoss, 1e-6, "the loss curve goes on from the checkpoint")
	require.InDelta(t, 2.3, st.InitialLoss, 1e-6, "the first launch's first loss, although it failed")
	require.Contains(t, rec.Reason, "node-2")
	ls := w.launches()
	require.Len(t, ls, 2)
	second := ls[1]
	require.EqualValues(t, 40, second[0].Restore.Step)
	require.Equal(t, 1, second[0].Restarts)
	require.Equal(t, "spare", second[1].Membership.Nodes[1].ID)
	require.NotEqual(t, ls[0][0].Session, second[0].Session)
	require.Equal(t, 2, st.Checkpoints) // 20 and 40 once: no step past 40 was committed again
}

// TestExternalRunStopsWorldOnBlame: node-2's worker dies at step 57 and
// its processes with it (its activity would end only at its one-hour
// heartbeat timeout); node-1 finds node-2's address refusing connections
// and reports PeerFailed naming it. The run stops the world at once,
// replaces node-2 with the spare and relaunches from step 40.
func TestExternalRunStopsWorldOnBlame(t *testing.T) {
	cl, w := loseNode2(errHang, // dead: never reports
		temporal.NewApplicationErrorWithCause("node node-2: 127.0.0.1:9 has refused connections for 250ms (its process is gone)",
			spec.ErrTypePeerFailed, errors.New("refused"), spec.PeerFailure{Rank: 1, Step: 57}))
	s := externalSpec(2)
	s.HeartbeatTimeout = spec.Duration(time.Hour)
	st := completeExternal(t, cl, w, s)
	rec := requireNode2Replaced(t, st)
	require.Less(t, rec.DetectSeconds, 60.0, "stopped on the blame, not at the 1 h heartbeat timeout")
	ls := w.launches()
	require.Len(t, ls, 2)
	require.Equal(t, "spare", ls[1][1].Membership.Nodes[1].ID)
}

// TestExternalRunAsksAboutAStraggler: node-1's ranks finish the job;
// node-2's worker dies before it reports (nobody watches it: its
// neighbour is done). Asked, node-1 finds it gone, and the run relaunches
// on the spare at once instead of waiting out the (one hour) heartbeat
// timeout.
func TestExternalRunAsksAboutAStraggler(t *testing.T) {
	cl, w := loseNode2(errHang, nil)
	var asked []spec.CheckNodesInput
	w.gone = func(in spec.CheckNodesInput) ([]spec.PeerFailure, error) {
		asked = append(asked, in)
		return []spec.PeerFailure{{Rank: 1}}, nil
	}
	s := externalSpec(2)
	s.HeartbeatTimeout = spec.Duration(time.Hour)
	st := completeExternal(t, cl, w, s)
	rec := requireNode2Replaced(t, st)
	require.Contains(t, rec.Reason, "gone before reporting")
	require.Less(t, rec.DetectSeconds, 60.0, "found by asking, not at the 1 h heartbeat timeout")
	require.Len(t, asked, 1)
	require.Equal(t, []int{1}, asked[0].Ranks)
	require.Len(t, w.launches(), 2)
}

// TestExternalRunEndsFromLastCheckpoint: a world uploads its last step's
// checkpoint, then both nodes miss their heartbeats (a stalled server);
// the relaunch restores that checkpoint and has nothing left to train.
// The run completes at the last step and keeps the checkpoint's loss
// (before: the empty launch's, 0).
func TestExternalRunEndsFromLastCheckpoint(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1", "spare-2"), failed: map[string]bool{}}
	w := &fakeWorlds{end: 100, ckpts: []int64{50, 100}}
	w.behave = func(in spec.ExternalInput) error {
		if in.Restore != nil {
			return nil
		}
		return temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 22, LastCheckpoint: 0})
	}
	st := completeExternal(t, cl, w, externalSpec(2))
	require.EqualValues(t, 100, st.Step)
	require.EqualValues(t, 100, st.LastCkpt.Step)
	require.Len(t, st.Recoveries, 1)
	require.EqualValues(t, 100, st.Recoveries[0].ResumeStep)
	require.InDelta(t, 2.3, st.InitialLoss, 1e-6)
	require.InDelta(t, 2.3/101, st.Loss, 1e-6, "the last checkpoint's loss, not the empty launch's")
	ls := w.launches()
	require.Len(t, ls, 2)
	require.EqualValues(t, 100, ls[1][0].Restore.Step)
}

// TestExternalRunRestartsWorldOnRankExit: a rank exits non-zero while
// the other node's ranks hang; after the grace period those are cancelled
// and the world relaunches on the same nodes (nobody is marked failed).
// A checkpoint signal from the stopped launch is ignored.
// TestExternalRunRankExitStopsTheWorldSoon: a rank's exit is the whole
// story — its worker is alive and said so —, so the other nodes' hanging
// processes get 2 s to end by themselves, not the heartbeat timeout (10 s)
// and 5 s more: the world is relaunched within seconds.
func TestExternalRunRankExitStopsTheWorldSoon(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2"), failed: map[string]bool{}}
	w := &fakeWorlds{end: 100, ckpts: []int64{30}}
	w.behave = func(in spec.ExternalInput) error {
		switch {
		case in.Restore != nil:
			return nil
		case in.Rank == 1:
			return temporal.NewApplicationError("rank-3 on node node-2 exited with status 1 at step 33",
				spec.ErrTypeRankExited, spec.RankExit{Rank: 3, Process: "rank-3", Node: "node-2", ExitCode: 1, Step: 33})
		}
		return errHang // (its process waits for the lost rank)
	}
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(60 * time.Second)
	s := externalSpec(2)
	s.HeartbeatTimeout = spec.Duration(10 * time.Second)
	start := time.Now()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	took := time.Since(start)
	require.NoError(t, env.GetWorkflowError())
	st := result(t, env)
	require.Len(t, st.Recoveries, 1)
	require.Less(t, took, 10*time.Second, "the hanging node waited out the heartbeat grace (15 s)")
}

func TestExternalRunRestartsWorldOnRankExit(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare"), failed: map[string]bool{}}
	w := &fakeWorlds{end: 100, ckpts: []int64{30}}
	w.behave = func(in spec.ExternalInput) error {
		if in.Restore != nil {
			return nil
		}
		if in.Rank == 1 {
			return temporal.NewApplicationError("rank-3 on node node-2 exited with status 1 at step 33; log tail:\nValueError: nan loss",
				spec.ErrTypeRankExited, spec.RankExit{Rank: 3, Process: "rank-3", Node: "node-2", ExitCode: 1, Step: 33})
		}
		return errHang
	}
	env := newExternalEnv(t, cl, w)
	// The hanging node's activity keeps the test clock real: wait out a
	// short grace period (1 s heartbeat timeout + 2 s).
	env.SetTestTimeout(30 * time.Second)
	env.RegisterDelayedCallback(func() {
		// A late upload from a launch that was stopped.
		env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: "run/ddp/g0/e0",
			Ref: spec.CheckpointRef{Step: 35, Key: "ckpt/35"}})
	}, time.Second)
	s := externalSpec(2)
	s.HeartbeatTimeout = spec.Duration(time.Second)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.Empty(t, rec.FailedNodes)
	require.Contains(t, rec.Reason, "rank-3 on node node-2 exited with status 1")
	require.EqualValues(t, 30, rec.ResumeStep)
	require.EqualValues(t, 33, rec.FailedAtStep)
	require.Equal(t, []string{"node-1", "node-2"}, st.Nodes)
	require.EqualValues(t, 30, st.LastCkpt.Step)
	require.Empty(t, cl.failed)
}

func TestExternalRunGivesUp(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1")}
	w := &fakeWorlds{end: 100}
	w.behave = func(in spec.ExternalInput) error {
		return temporal.NewApplicationError("rank-0 on node node-1 exited with status 2 at step 0", spec.ErrTypeRankExited,
			spec.RankExit{Rank: 0, ExitCode: 2})
	}
	env := newExternalEnv(t, cl, w)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(1)})
	err := env.GetWorkflowError()
	require.Error(t, err)
	require.Contains(t, err.Error(), "gave up after 3 restart(s)")
	require.Contains(t, err.Error(), "exited with status 2")
	require.Len(t, w.launches(), 4)
	// A job that cannot start on a node is not restarted.
	w2 := &fakeWorlds{end: 100, behave: func(spec.ExternalInput) error {
		return temporal.NewNonRetryableApplicationError("start rank-0: \"python3\" not found in PATH", spec.ErrTypeBadJob, nil)
	}}
	env = newExternalEnv(t, &fakeCluster{pool: testNodes("node-1")}, w2)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(1)})
	require.ErrorContains(t, env.GetWorkflowError(), "not found in PATH")
	require.Len(t, w2.launches(), 1)
}

// hangFirst is a fakeWorlds behaviour: the first launch (the one without
// a checkpoint to restore) runs until cancelled; its rank 0 first sends
// the given signals, in order, as if the user did. Later launches finish.
func hangFirst(w *fakeWorlds, signals ...string) func(spec.ExternalInput) error {
	return func(in spec.ExternalInput) error {
		if in.Restore != nil {
			return nil
		}
		if in.Rank == 0 {
			for _, s := range signals {
				w.env.SignalWorkflow(s, nil)
			}
		}
		return errHang
	}
}

// runPaused runs an external job whose first launch hangs until paused;
// setup may add callbacks. Once the run holds, held checks its status and
// the run is resumed.
func runPaused(t *testing.T, w *fakeWorlds, setup func(*testsuite.TestWorkflowEnvironment), held func(spec.RunStatus)) spec.RunStatus {
	t.Helper()
	return runPausedOn(t, testNodes("node-1", "node-2", "spare"), w, setup, held)
}

// runPausedOn is runPaused on the nodes pool.
func runPausedOn(t *testing.T, pool []spec.Node, w *fakeWorlds, setup func(*testsuite.TestWorkflowEnvironment), held func(spec.RunStatus)) spec.RunStatus {
	t.Helper()
	cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	if setup != nil {
		setup(env)
	}
	sawHold := false
	// The clock jumps an hour only once no activity runs: after the world
	// stopped (while it runs, the clock is the wall clock).
	env.RegisterDelayedCallback(func() {
		held(queryStatus(t, env))
		sawHold = true
		env.SignalWorkflow(spec.SignalResume, nil)
	}, time.Hour)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	require.NoError(t, env.GetWorkflowError())
	require.True(t, sawHold)
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 100, st.Step)
	require.Empty(t, st.Recoveries, "a pause is not a failure")
	require.False(t, st.PauseRequested)
	return st
}

// TestExternalRunPauseAfterCheckpoint: a pause stops the world once the
// next checkpoint (step 40) is uploaded — not before, not at the one
// uploaded before the pause (20) — and holds at that step, deaf to what
// the stopped world still uploads; the resume relaunches the world on the
// same nodes from there without counting a restart.
func TestExternalRunPauseAfterCheckpoint(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	sent := false
	runPaused(t, w, func(env *testsuite.TestWorkflowEnvironment) {
		// Wall-clock times (the first launch runs): the pause, then later
		// the next checkpoint.
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, 300*time.Millisecond)
		env.RegisterDelayedCallback(func() {
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseTraining, st.Phase, "stopped before the next checkpoint")
			require.True(t, st.PauseRequested)
			require.EqualValues(t, 20, st.LastCkpt.Step)
			env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: fmt.Sprintf("%s/g%d/e1", st.RunID, st.Generation),
				Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: 40, Key: "ckpt/40"}})
			sent = true
		}, 600*time.Millisecond)
		// Held (the clock jumps once the world stopped): an upload the
		// stopped world finished late is not taken.
		env.RegisterDelayedCallback(func() {
			st := queryStatus(t, env)
			env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: fmt.Sprintf("%s/g%d/e1", st.RunID, st.Generation),
				Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: 60, Key: "ckpt/60"}})
		}, 30*time.Minute)
	}, func(st spec.RunStatus) {
		require.True(t, sent)
		require.Equal(t, spec.PhasePaused, st.Phase)
		require.EqualValues(t, 40, st.Step)
		require.EqualValues(t, 40, st.LastCkpt.Step)
		require.Contains(t, st.Detail, "paused at step 40")
	})
	ls := w.launches()
	require.Len(t, ls, 2)
	require.Len(t, ls[1], 2)
	for _, in := range ls[1] {
		require.EqualValues(t, 40, in.Restore.Step)
		require.Zero(t, in.Restarts)
		require.Equal(t, []string{"node-1", "node-2"}, in.Membership.NodeIDs(), "the nodes were kept")
		require.EqualValues(t, 1, in.Membership.Generation)
	}
}

// TestExternalRunPauseRequestsACheckpoint: on nodes that take checkpoint
// requests, a pause asks the world's first node for a checkpoint (it
// picks the step: 57), then the other node is given that step; the world
// stops once the checkpoint at 57 is uploaded — long before the job's
// next periodic one — and holds there.
func TestExternalRunPauseRequestsACheckpoint(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	pool := speaking(spec.ChunkProtocolCheckpointRequest, "node-1", "node-2", "spare")
	var mu sync.Mutex
	var asked []string // "node: step asked"
	runPausedOn(t, pool, w, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
			q := activity.GetInfo(ctx).TaskQueue
			mu.Lock()
			asked = append(asked, fmt.Sprintf("%s: %d", q, in.Step))
			mu.Unlock()
			if in.Step == 0 {
				return 57, nil // the first node picks the step
			}
			// Every rank knows it: the first node's rank 0 commits the
			// checkpoint when it gets there.
			return commitAsked(env, in), nil
		}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, 300*time.Millisecond)
	}, func(st spec.RunStatus) {
		require.Equal(t, spec.PhasePaused, st.Phase)
		require.EqualValues(t, 57, st.Step)
		require.EqualValues(t, 57, st.LastCkpt.Step)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{spec.NodeTaskQueue("node-1") + ": 0", spec.NodeTaskQueue("node-2") + ": 57"}, asked)
	ls := w.launches()
	require.Len(t, ls, 2)
	require.EqualValues(t, 57, ls[1][0].Restore.Step)
	require.Zero(t, ls[1][0].Restarts)
}

// TestExternalRunStopsAnUnreportedWorld: a pause, or a drained node to
// leave, asks the world for a checkpoint; its first node answers that
// the processes have reported no step since their launch (still
// starting: spec.StepUnreported). The run stops the world at once
// instead of waiting for its next periodic checkpoint, asks no other
// node, and relaunches from the last checkpoint (20), no restart counted.
func TestExternalRunStopsAnUnreportedWorld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		signal func(env *testsuite.TestWorkflowEnvironment, cl *fakeCluster)
		nodes  []string // of the second launch
	}{
		{"pause", func(env *testsuite.TestWorkflowEnvironment, _ *fakeCluster) {
			env.SignalWorkflow(spec.SignalPause, nil)
		}, []string{"node-1", "node-2"}},
		{"drain", func(env *testsuite.TestWorkflowEnvironment, cl *fakeCluster) {
			cl.mu.Lock()
			cl.failed["node-2"] = true // drained: not handed out
			cl.mu.Unlock()
			env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "node-2", Reason: "swap the disk"})
		}, []string{"node-1", "spare"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeWorlds{end: 100, ckpts: []int64{20}}
			w.behave = hangFirst(w)
			pool := speaking(spec.ChunkProtocolCheckpointRequest, "node-1", "node-2", "spare")
			cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
			env := newExternalEnv(t, cl, w)
			env.SetTestTimeout(15 * time.Second)
			var mu sync.Mutex
			var asked []spec.CheckpointRequest
			env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
				mu.Lock()
				asked = append(asked, in)
				mu.Unlock()
				return spec.StepUnreported, nil
			}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
			var held spec.RunStatus
			env.RegisterDelayedCallback(func() { tc.signal(env, cl) }, 300*time.Millisecond)
			// (The clock jumps only once no activity runs: the world stopped.)
			env.RegisterDelayedCallback(func() {
				held = queryStatus(t, env)
				env.SignalWorkflow(spec.SignalResume, nil)
			}, time.Hour)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
			require.NoError(t, env.GetWorkflowError())
			var st spec.RunStatus
			require.NoError(t, env.GetWorkflowResult(&st))
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Empty(t, st.Recoveries)
			mu.Lock()
			require.Len(t, asked, 1, "only the first node asked: %+v", asked)
			require.True(t, asked[0].StopUnreported)
			require.Zero(t, asked[0].Step)
			mu.Unlock()
			ls := w.launches()
			require.Len(t, ls, 2, "stopped once, at once")
			for _, in := range ls[1] {
				require.EqualValues(t, 20, in.Restore.Step)
				require.Zero(t, in.Restarts)
				require.Equal(t, tc.nodes, in.Membership.NodeIDs())
			}
			if tc.name == "pause" {
				require.Equal(t, spec.PhasePaused, held.Phase)
				require.EqualValues(t, 20, held.Step)
				return
			}
			require.Len(t, st.Rescalings, 1)
			require.EqualValues(t, 20, st.Rescalings[0].AtStep)
			require.Equal(t, []string{"node-2"}, st.Rescalings[0].Removed)
		})
	}
}

// commitAsked plays rank 0's node committing the checkpoint a request
// asked of it (in.Step), and answers the request with that step.
func commitAsked(env *testsuite.TestWorkflowEnvironment, in spec.CheckpointRequest) int64 {
	env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
		Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: in.Step, Key: fmt.Sprintf("ckpt/%d", in.Step)}})
	return in.Step
}

// TestExternalRunAsksAgainAfterAResume: a pause asks the world for a
// checkpoint (57) and is withdrawn before it is uploaded: the world
// trains on past it. A later pause in the same launch asks again (the
// first node picks 80) and the run holds there, not at the job's next
// periodic checkpoint.
func TestExternalRunAsksAgainAfterAResume(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	pool := speaking(spec.ChunkProtocolCheckpointRequest, "node-1", "node-2", "spare")
	var mu sync.Mutex
	var asked []string // "node: step asked"
	picks := []int64{57, 80}
	runPausedOn(t, pool, w, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, fmt.Sprintf("%s: %d", activity.GetInfo(ctx).TaskQueue, in.Step))
			if in.Step == 0 {
				step := picks[0]
				picks = picks[1:]
				return step, nil
			}
			if in.Step == 57 {
				env.SignalWorkflow(spec.SignalResume, nil) // withdrawn before the checkpoint
			}
			return commitAsked(env, in), nil
		}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, 300*time.Millisecond)
		env.RegisterDelayedCallback(func() {
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseTraining, st.Phase, "the withdrawn pause stopped nothing")
			require.EqualValues(t, 57, st.LastCkpt.Step)
			env.SignalWorkflow(spec.SignalPause, nil)
		}, 600*time.Millisecond)
	}, func(st spec.RunStatus) {
		require.Equal(t, spec.PhasePaused, st.Phase)
		require.EqualValues(t, 80, st.Step)
	})
	mu.Lock()
	defer mu.Unlock()
	n1, n2 := spec.NodeTaskQueue("node-1"), spec.NodeTaskQueue("node-2")
	require.Equal(t, []string{n1 + ": 0", n2 + ": 57", n1 + ": 0", n2 + ": 80"}, asked)
	ls := w.launches()
	require.Len(t, ls, 2)
	require.EqualValues(t, 80, ls[1][0].Restore.Step)
}

// TestExternalRunUnreportedAfterAResume: the first node's answer that the
// world is still starting comes after the pause was withdrawn: the world
// trains on, and a later pause does not stop it at once on that old news
// — it asks again, and the world, reporting now, is held at the step
// picked then (45), not at the checkpoint before (20).
func TestExternalRunUnreportedAfterAResume(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	pool := speaking(spec.ChunkProtocolCheckpointRequest, "node-1", "node-2", "spare")
	var mu sync.Mutex
	firsts := 0
	runPausedOn(t, pool, w, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case in.Step == 0 && firsts == 0:
				firsts++
				env.SignalWorkflow(spec.SignalResume, nil) // (delivered before the answer)
				return spec.StepUnreported, nil
			case in.Step == 0:
				return 45, nil
			}
			return commitAsked(env, in), nil
		}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, 300*time.Millisecond)
		env.RegisterDelayedCallback(func() {
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseTraining, st.Phase, "the withdrawn pause stopped nothing")
			env.SignalWorkflow(spec.SignalPause, nil)
		}, 600*time.Millisecond)
	}, func(st spec.RunStatus) {
		require.Equal(t, spec.PhasePaused, st.Phase)
		require.EqualValues(t, 45, st.Step)
	})
	ls := w.launches()
	require.Len(t, ls, 2)
	require.EqualValues(t, 45, ls[1][0].Restore.Step)
}

// TestExternalRunPauseTwiceStopsAtOnce: a second pause before any
// checkpoint stops the world at once; the resume restores the last
// checkpoint uploaded before the pause.
func TestExternalRunPauseTwiceStopsAtOnce(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w, spec.SignalPause, spec.SignalPause)
	runPaused(t, w, nil, func(st spec.RunStatus) {
		require.Equal(t, spec.PhasePaused, st.Phase)
		require.EqualValues(t, 20, st.Step)
	})
	ls := w.launches()
	require.Len(t, ls, 2)
	require.EqualValues(t, 20, ls[1][0].Restore.Step)
	require.Zero(t, ls[1][0].Restarts)
}

// TestExternalRunRefusesARescale: an external job keeps its world size;
// a rescale is refused in those words (it read "want 2..0").
func TestExternalRunRefusesARescale(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	pause := hangFirst(w, spec.SignalPause, spec.SignalPause)
	w.behave = func(in spec.ExternalInput) error {
		if in.Restore == nil && in.Rank == 0 {
			w.env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		}
		return pause(in)
	}
	runPaused(t, w, nil, func(st spec.RunStatus) {
		require.Equal(t, "rescale to 3 node(s) refused: an external job keeps its world size (2 nodes)", st.RefusedRescale)
	})
}

// TestExternalRunResumeBeforeCheckpoint: a pause withdrawn before the
// next checkpoint stops nothing.
func TestExternalRunResumeBeforeCheckpoint(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100}
	w.behave = func(in spec.ExternalInput) error {
		if in.Rank == 0 {
			w.env.SignalWorkflow(spec.SignalPause, nil)
			w.env.SignalWorkflow(spec.SignalResume, nil)
			w.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
				Ref: spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: 40, Key: "ckpt/40"}})
		}
		return nil
	}
	completeExternal(t, cl, w, externalSpec(2))
	require.Len(t, w.launches(), 1)
}

// suggestThenCheckpoint is a behave for the first launch: its rank 0 has
// the server suggest continue-as-new (set on the environment's loop, ahead
// of the signal: this is the activity's goroutine) and commits a
// checkpoint at step; then every rank returns end (errHang: hangs until
// stopped). Relaunches run to the end.
func suggestThenCheckpoint(w *fakeWorlds, step int64, end error) func(spec.ExternalInput) error {
	return func(in spec.ExternalInput) error {
		if in.Restore != nil {
			return nil
		}
		if in.Rank == 0 {
			w.env.RegisterDelayedCallback(func() { w.env.SetContinueAsNewSuggested(true) }, 0)
			w.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
				Ref: spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: step, Key: fmt.Sprint("ckpt/", step)}})
		}
		return end
	}
}

// TestExternalRunRollsOver: once the server suggests continue-as-new, a
// launch is stopped after its next uploaded checkpoint (not at one
// uploaded before the suggestion), the run continues as new with that
// checkpoint and relaunches from it on the same nodes, no restart counted.
func TestExternalRunRollsOver(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100, ckpts: []int64{20}} // 20: before the suggestion
	w.behave = suggestThenCheckpoint(w, 40, errHang)
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "want continue-as-new, got %v", env.GetWorkflowError())
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	st := next.State.Status
	require.EqualValues(t, 40, st.Step)
	require.EqualValues(t, 40, st.LastCkpt.Step)
	require.Equal(t, 1, st.Rollovers)
	require.Empty(t, st.Recoveries)
	require.Zero(t, next.State.Restarts)
	require.Empty(t, next.State.Session, "the stopped launch's late uploads are not taken")
	require.Len(t, w.launches(), 1)

	env2 := newExternalEnv(t, cl, w)
	continueRun(env2, next)
	require.NoError(t, env2.GetWorkflowError())
	require.NoError(t, env2.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 100, st.Step)
	require.Equal(t, 1, st.Rollovers)
	ls := w.launches()
	require.Len(t, ls, 2)
	for _, in := range ls[1] {
		require.EqualValues(t, 40, in.Restore.Step)
		require.Zero(t, in.Restarts)
		require.Equal(t, []string{"node-1", "node-2"}, in.Membership.NodeIDs(), "the nodes were kept")
	}
	require.Equal(t, 1, cl.calls, "nodes are acquired once")
}

// TestExternalRunNoRolloverAtLastStep: a checkpoint at the job's last
// step stops nothing, suggestion or not: that world is about to finish.
func TestExternalRunNoRolloverAtLastStep(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100}
	w.behave = suggestThenCheckpoint(w, 100, nil)
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Zero(t, st.Rollovers)
	require.Len(t, w.launches(), 1)
}

// TestExternalRunRollsOverOnceGrown: a launch that began with a long
// history (thousands of nodes' activities) is not stopped at the first
// checkpoint the server suggests continue-as-new at, only once it has
// doubled that history: rolling over at once would relaunch it forever.
func TestExternalRunRollsOverOnceGrown(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
	w := &fakeWorlds{end: 100}
	w.behave = suggestThenCheckpoint(w, 40, errHang) // at 3,000 events, as when the launch began
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	env.SetCurrentHistoryLength(3000)
	sent := false
	// Wall-clock time (the launch runs): the history has doubled by the
	// next checkpoint.
	env.RegisterDelayedCallback(func() {
		st := queryStatus(t, env)
		require.EqualValues(t, 40, st.LastCkpt.Step)
		require.Zero(t, st.Rollovers, "rolled over before the launch doubled its history")
		env.SetCurrentHistoryLength(6000)
		env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: fmt.Sprintf("%s/g%d/e1", st.RunID, st.Generation),
			Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: 60, Key: "ckpt/60"}})
		sent = true
	}, 300*time.Millisecond)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "want continue-as-new, got %v", env.GetWorkflowError())
	require.True(t, sent)
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	require.EqualValues(t, 60, next.State.Status.Step, "stopped after the checkpoint that doubled the history")
	require.Equal(t, 1, next.State.Status.Rollovers)
}

// TestExternalRunFailsWithTheRanksOwnError: one node cannot start its
// processes (non-retryable) while the other's run until cancelled; the
// run fails with the first node's reason, not as Canceled.
func TestExternalRunFailsWithTheRanksOwnError(t *testing.T) {
	w := &fakeWorlds{end: 100}
	w.behave = func(in spec.ExternalInput) error {
		if in.Rank == 1 {
			return temporal.NewNonRetryableApplicationError("start rank-1: \"python3\" not found in PATH", spec.ErrTypeBadJob, nil)
		}
		return errHang
	}
	env := newExternalEnv(t, &fakeCluster{pool: testNodes("node-1", "node-2")}, w)
	env.SetTestTimeout(15 * time.Second)
	s := externalSpec(2)
	s.HeartbeatTimeout = spec.Duration(time.Second) // the survivors' grace: 3 s of wall clock
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	err := env.GetWorkflowError()
	require.Error(t, err)
	require.Len(t, w.launches(), 1, "a job that cannot start is not relaunched")
	var ce *temporal.CanceledError
	require.False(t, errors.As(err, &ce), "the run ended canceled: %v", err)
	require.ErrorContains(t, err, "launch from step 0: start rank-1: \"python3\" not found in PATH",
		"the reason is the node's own error, not the cancellation of the others")
}

// TestExternalRunLeavesDrainedNode: a node of an external job is drained
// (the Cluster tells the run): the world stops after its next checkpoint
// upload and relaunches from it with a free node in the drained one's
// rank, no restart counted. With no node free it relaunches on the same
// nodes and says so.
func TestExternalRunLeavesDrainedNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pool  []string
		nodes []string // of the second launch
	}{
		{"a spare takes its rank", []string{"node-1", "node-2", "spare"}, []string{"node-1", "spare"}},
		{"no spare", []string{"node-1", "node-2"}, []string{"node-1", "node-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeWorlds{end: 100, ckpts: []int64{20}}
			w.behave = hangFirst(w)
			cl := &fakeCluster{pool: testNodes(tc.pool...), failed: map[string]bool{}}
			env := newExternalEnv(t, cl, w)
			env.SetTestTimeout(15 * time.Second)
			var before spec.RunStatus
			env.RegisterDelayedCallback(func() {
				cl.mu.Lock()
				cl.failed["node-2"] = true // drained: not handed out
				cl.mu.Unlock()
				env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "node-2", Reason: "swap the disk"})
			}, 300*time.Millisecond)
			env.RegisterDelayedCallback(func() {
				before = queryStatus(t, env)
				env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{
					Session: fmt.Sprintf("%s/g%d/e1", before.RunID, before.Generation),
					Ref:     spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: 40, Key: "ckpt/40"}})
			}, 600*time.Millisecond)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
			require.NoError(t, env.GetWorkflowError())
			var st spec.RunStatus
			require.NoError(t, env.GetWorkflowResult(&st))

			require.Equal(t, spec.PhaseTraining, before.Phase, "the world runs until the next checkpoint")
			require.Equal(t, []string{"node-2"}, before.Evicting)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 100, st.Step)
			require.Empty(t, st.Recoveries, "leaving a drained node is not a failure")
			ls := w.launches()
			require.Len(t, ls, 2, "stopped once, after the checkpoint at 40")
			for _, in := range ls[1] {
				require.EqualValues(t, 40, in.Restore.Step)
				require.Zero(t, in.Restarts)
				require.Equal(t, tc.nodes, in.Membership.NodeIDs())
			}
			require.Len(t, st.Rescalings, 1)
			rec := st.Rescalings[0]
			require.Equal(t, "node-2 drained: swap the disk", rec.Reason)
			require.EqualValues(t, 40, rec.AtStep)
			if len(tc.pool) == 3 {
				require.Equal(t, []string{"node-2"}, rec.Removed)
				require.Equal(t, []string{"spare"}, rec.Added)
				require.Empty(t, rec.Error)
			} else {
				require.Contains(t, rec.Error, "kept until the job's nodes next change")
			}
		})
	}
}

// TestExternalRunLeavesDrainedNodeWhilePaused: a node drained while the
// job is paused (no world runs) is left at the relaunch: nothing to stop.
func TestExternalRunLeavesDrainedNodeWhilePaused(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w, spec.SignalPause, spec.SignalPause) // stops at once
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare"), failed: map[string]bool{}}
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	env.RegisterDelayedCallback(func() {
		cl.mu.Lock()
		cl.failed["node-2"] = true
		cl.mu.Unlock()
		env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "node-2"})
	}, 30*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, time.Hour)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	ls := w.launches()
	require.Len(t, ls, 2)
	for _, in := range ls[1] {
		require.EqualValues(t, 20, in.Restore.Step)
		require.Equal(t, []string{"node-1", "spare"}, in.Membership.NodeIDs())
	}
	require.Len(t, st.Rescalings, 1)
	require.Equal(t, []string{"node-2"}, st.Rescalings[0].Removed)
	require.Empty(t, st.Evicting)
}

// TestExternalRunCancelled: cancelling an external job's workflow stops
// its world (the nodes' activities are cancelled), gives the nodes back and
// ends Canceled with where it stopped — no relaunch, no recovery.
func TestExternalRunCancelled(t *testing.T) {
	w := &fakeWorlds{end: 100, ckpts: []int64{20}}
	w.behave = hangFirst(w)
	cl := &fakeCluster{pool: testNodes("node-1", "node-2"), failed: map[string]bool{}}
	env := newExternalEnv(t, cl, w)
	env.SetTestTimeout(15 * time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 300*time.Millisecond)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
	var ce *temporal.CanceledError
	require.True(t, errors.As(env.GetWorkflowError(), &ce), "want Canceled, got %v", env.GetWorkflowError())
	st := queryStatus(t, env)
	require.Equal(t, spec.PhaseCancelled, st.Phase)
	require.Equal(t, "cancelled at step 20; last checkpoint at step 20", st.Error)
	require.Empty(t, st.Recoveries)
	require.Len(t, w.launches(), 1, "not relaunched")
	require.Equal(t, 1, cl.releases)
}

// TestExternalRunReplacesAHostThatCannotLaunch: the job trained to its
// checkpoint at 40 when node-2 died; the spare that replaces it cannot
// launch the job (BadJob: its python is missing) while node-1 does. The
// job is sound — that host lacks it: the spare is replaced too, marked
// misconfigured, and the run completes on the second spare. The same
// BadJob from every node of the world fails the run, naming the error
// (the job's fault: a typo, or no host has it).
func TestExternalRunReplacesAHostThatCannotLaunch(t *testing.T) {
	const missing = `start rank-2: "python3" not found in PATH`
	for _, tc := range []struct {
		name    string
		noHost  func(node string) bool // the nodes that cannot launch the job after the loss
		fails   bool
		nodes   []string
		launchN int
	}{
		{"the spare lacks it", func(n string) bool { return n == "spare" }, false, []string{"node-1", "spare-2"}, 3},
		{"no node launches it", func(string) bool { return true }, true, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, w := loseNode2(temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 57, LastCheckpoint: 40}), errHang)
			cl.pool = testNodes("node-1", "node-2", "spare", "spare-2")
			cl.misconfigured = map[string]bool{}
			lose := w.behave
			w.behave = func(in spec.ExternalInput) error {
				switch {
				case in.Restore == nil:
					return lose(in)
				case tc.noHost(in.Membership.Nodes[in.Rank].ID):
					return temporal.NewNonRetryableApplicationError(missing, spec.ErrTypeBadJob, nil)
				case slices.Contains(in.Membership.NodeIDs(), "spare"):
					return errHang // launched: waits for the spare's ranks until cancelled
				}
				return nil
			}
			env := newExternalEnv(t, cl, w)
			env.SetTestTimeout(30 * time.Second)
			s := externalSpec(2)
			s.HeartbeatTimeout = spec.Duration(time.Second) // the survivors' grace: 3 s of wall clock
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.Len(t, w.launches(), tc.launchN)
			if tc.fails {
				require.True(t, env.IsWorkflowCompleted())
				require.ErrorContains(t, env.GetWorkflowError(), missing)
				return
			}
			st := result(t, env)
			require.Equal(t, tc.nodes, st.Nodes)
			require.Len(t, st.Recoveries, 2)
			require.Equal(t, []string{"spare"}, st.Recoveries[1].FailedNodes)
			require.Contains(t, st.Recoveries[1].Reason, missing)
			require.EqualValues(t, 40, st.Recoveries[1].ResumeStep)
			cl.mu.Lock()
			defer cl.mu.Unlock()
			require.True(t, cl.misconfigured["spare"], "the host that lacks the job stays out of the pool until its worker registers again")
		})
	}
}

// TestExternalRunCancelAsksACheckpoint: a run cancelled while its world
// runs on nodes that take checkpoint requests asks the world for one
// and ends cancelled at it (no step lost); when the first node cannot ask
// (nothing reported yet) or the world goes past the step without taking
// it, and on an older build, the world stops at once, back at the last
// checkpoint (20).
func TestExternalRunCancelAsksACheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol int
		pick     int64 // the first node's answer
		missed   bool  // the world goes past it without a checkpoint
		step     int64
		asked    int
	}{
		{name: "takes the request", protocol: spec.ChunkProtocolCheckpointRequest, pick: 57, step: 57, asked: 2},
		{name: "cannot be asked", protocol: spec.ChunkProtocolCheckpointRequest, pick: 0, step: 20, asked: 1},
		{name: "misses the request", protocol: spec.ChunkProtocolCheckpointRequest, pick: 57, missed: true, step: 20, asked: 2},
		{name: "an older build", protocol: spec.ChunkProtocolEndEarly, step: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := speaking(tc.protocol, "node-1", "node-2")
			cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
			w := &fakeWorlds{end: 100, ckpts: []int64{20}}
			w.behave = hangFirst(w)
			env := newExternalEnv(t, cl, w)
			env.SetTestTimeout(15 * time.Second)
			var mu sync.Mutex
			asked := 0
			env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
				mu.Lock()
				asked++
				mu.Unlock()
				require.Equal(t, "the run was cancelled", in.Why)
				if in.Step == 0 {
					return tc.pick, nil
				}
				env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session, Missed: tc.missed,
					Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: in.Step, Key: fmt.Sprintf("ckpt/%d", in.Step), SHA256: "s"}})
				return in.Step, nil
			}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
			env.RegisterDelayedCallback(env.CancelWorkflow, 300*time.Millisecond)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(2)})
			require.True(t, env.IsWorkflowCompleted())
			var can *temporal.CanceledError
			require.ErrorAs(t, env.GetWorkflowError(), &can)
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseCancelled, st.Phase)
			require.EqualValues(t, tc.step, st.LastCkpt.Step)
			require.Equal(t, fmt.Sprintf("cancelled at step %d; last checkpoint at step %d", tc.step, tc.step), st.Error)
			require.Empty(t, st.Recoveries)
			mu.Lock()
			require.Equal(t, tc.asked, asked)
			mu.Unlock()
			cl.mu.Lock()
			require.Equal(t, 1, cl.releases, "its nodes released")
			cl.mu.Unlock()
			require.Len(t, w.launches(), 1)
		})
	}
}

// TestExternalRecoveryKeepsItsFirstStep: a recovery's first step after
// it is recorded as soon as the relaunched world says it — at its first
// checkpoint (CheckpointSaved.FirstStepAt) or as it fails
// (RankExit.FirstStepAt) — so that a launch that fails later keeps it;
// before, only a launch that ended cleanly recorded it.
func TestExternalRecoveryKeepsItsFirstStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		ckpt bool // the second launch uploads a checkpoint before it fails
	}{
		{"at a checkpoint", true},
		{"as it fails", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1")}
			w := &fakeWorlds{end: 100, ckpts: []int64{30}}
			var firstAt time.Time
			w.behave = func(in spec.ExternalInput) error {
				n := len(w.launches())
				if n > 2 {
					return nil
				}
				crash := spec.RankExit{Rank: 0, Process: "rank-0", Node: "node-1", ExitCode: 1, Step: 33}
				if n == 2 {
					firstAt = w.env.Now().Add(time.Second)
					crash.Step, crash.FirstStepAt = 55, firstAt
					if tc.ckpt {
						crash.FirstStepAt = time.Time{} // (the checkpoint said it)
						w.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: in.Session,
							Ref:  spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: 50, Key: "ckpt/50"},
							From: 30, FirstLoss: 0.5, FirstStepAt: firstAt})
					}
				}
				return temporal.NewApplicationError(fmt.Sprintf("rank-0 on node node-1 exited with status 1 at step %d", crash.Step),
					spec.ErrTypeRankExited, crash)
			}
			st := completeExternal(t, cl, w, externalSpec(1))
			require.Len(t, st.Recoveries, 2)
			first := st.Recoveries[0]
			require.True(t, first.ResumedAt.Equal(firstAt), "first recovery's first step %v, want %v", first.ResumedAt, firstAt)
			if tc.ckpt {
				require.InDelta(t, 0.5, first.ResumeLoss, 1e-6)
			}
			require.False(t, st.Recoveries[1].ResumedAt.IsZero(), "the last recovery's first step (its launch completed)")
		})
	}
}
