package workflows

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunReplacesStoppingNodes: node-2's worker, then node-3's,
// is stopped (a rolling upgrade) in the middle of a chunk; its ranks end
// the chunk early with a checkpoint there (EndedBy) and the worker leaves
// the Cluster. The run replaces each at once, planning no chunk on it,
// losing no step and counting no restart: with max_restarts 1 the second
// stop would otherwise fail the run.
func TestTrainingRunReplacesStoppingNodes(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1", "spare-2"), failed: map[string]bool{}}
	// By generation, the chunk in which a node stops, and which.
	stops := map[int64]struct {
		from int64
		node string
	}{1: {100, "node-2"}, 2: {130, "node-3"}}
	ch := &fakeChunks{}
	ch.edit = func(in spec.ChunkInput, res *spec.ChunkResult) {
		stop, ok := stops[in.Membership.Generation]
		if !ok || in.From != stop.from {
			return
		}
		by := stop.node
		end := in.From + 30
		res.To, res.EndedBy, res.WeightsSHA256, res.PendingCheckpoint = end, by, fmt.Sprintf("w%d", end), nil
		if in.Rank == 0 {
			res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: end, Key: fmt.Sprintf("ckpt/%d", end)}
		}
		cl.mu.Lock()
		cl.markFailedLocked(spec.MarkFailed{NodeID: by, Reason: spec.ReasonWorkerStopped}) // (its worker's leave)
		cl.mu.Unlock()
	}
	env := newRunEnv(t, cl, ch)
	// What the status says while the replacement is asked for.
	var waiting []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == spec.ActivityAcquireNodes {
			waiting = append(waiting, queryStatus(t, env).Detail)
		}
	})
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100, MaxRestarts: 1}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 300, st.Step)
	require.Len(t, waiting, 3)
	require.True(t, strings.HasPrefix(waiting[1], "replacing node-2, whose worker stopped, at step 130: waiting for 1 free node(s)"),
		"not lost: stopped (%q)", waiting[1])
	require.Len(t, st.Recoveries, 2)
	for i, want := range []struct {
		node, spare string
		step        int64
	}{{"node-2", "spare-1", 130}, {"node-3", "spare-2", 160}} {
		rec := st.Recoveries[i]
		require.Equal(t, []string{want.node}, rec.FailedNodes, "recovery %d", i)
		require.Equal(t, []string{want.spare}, rec.Replacement, "recovery %d", i)
		require.True(t, rec.Stopped, "recovery %d", i)
		require.EqualValues(t, want.step, rec.ResumeStep, "recovery %d", i)
		require.Zero(t, rec.LostSteps, "recovery %d", i)
		require.Contains(t, rec.Reason, want.node+"'s worker stopped; the chunk ended at step "+fmt.Sprint(want.step))
	}
	require.Equal(t, []string{"node-1", "spare-1", "spare-2"}, st.Nodes)
	for _, in := range ch.all() {
		node := in.Membership.Nodes[in.Rank].ID
		if node == "node-2" && in.From >= 130 || node == "node-3" && in.From >= 160 {
			t.Errorf("a chunk from step %d planned on %s after its worker stopped", in.From, node)
		}
		if in.From == 130 || in.From == 160 {
			require.NotNil(t, in.Restore, "the chunk from %d restores the checkpoint where the stop ended the chunk", in.From)
			require.Equal(t, in.From, in.Restore.Step)
		}
	}
}

// TestTrainingRunReplacesNodesStoppingTogether: node-2's and node-3's
// workers stop at once; the chunk's vote names one of them (EndedBy) and
// each of their ranks says its own node was stopping (Stopping). The run
// replaces both at that step in one recovery, counting no restart.
func TestTrainingRunReplacesNodesStoppingTogether(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1", "spare-2"), failed: map[string]bool{}}
	ch := &fakeChunks{}
	ch.edit = endedFor("node-3", func(node string) bool { return node != "node-1" })
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100, MaxRestarts: 1}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.Equal(t, []string{"node-2", "node-3"}, rec.FailedNodes)
	require.Equal(t, []string{"spare-1", "spare-2"}, rec.Replacement)
	require.True(t, rec.Stopped)
	require.EqualValues(t, 130, rec.ResumeStep)
	require.Zero(t, rec.LostSteps)
	require.Contains(t, rec.Reason, "the workers of nodes node-2, node-3 stopped; the chunk ended at step 130 for them")
	require.Equal(t, []string{"node-1", "spare-1", "spare-2"}, st.Nodes)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	require.True(t, cl.failed["node-2"] && cl.failed["node-3"], "both marked failed in the Cluster: %v", cl.failed)
}

// endedFor is a fakeChunks edit: generation 1's chunk from step 100 ends
// early at 130 for node by's worker stopping, with a checkpoint there;
// the ranks of the nodes stopping says so report their own node stopping.
func endedFor(by string, stopping func(node string) bool) func(spec.ChunkInput, *spec.ChunkResult) {
	return func(in spec.ChunkInput, res *spec.ChunkResult) {
		if in.Membership.Generation != 1 || in.From != 100 {
			return
		}
		end := in.From + 30
		res.To, res.EndedBy, res.WeightsSHA256, res.PendingCheckpoint = end, by, fmt.Sprintf("w%d", end), nil
		res.Stopping = stopping(res.NodeID)
		if in.Rank == 0 {
			res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: end, Key: fmt.Sprintf("ckpt/%d", end)}
		}
	}
}

// TestTrainingRunNamesNodesStoppingWithAFailure: node-2's worker is
// stopping (the Cluster said so, Evict.Stopping, and holds it back) when
// the chunk in flight ends for node-3 — early, at a checkpoint, for its
// worker's stop (its ranks voted before node-2's came), or lost. The
// recovery's acquire moves the run off both; the recovery names both, in
// rank order, and says why node-2 went.
func TestTrainingRunNamesNodesStoppingWithAFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lost    bool
		reason  string
		stopped bool
		resume  int64
	}{
		{name: "ended early for the other", reason: "the workers of nodes node-2, node-3 stopped; the chunk ended at step 130 for them", stopped: true, resume: 130},
		// (From the checkpoint at 100, or at 200 where the surviving
		// ranks' came before node-3's loss.)
		{name: "the other lost", lost: true, reason: "; the worker of node-2 was stopping too: moved off with it", resume: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "spare-1", "spare-2"), failed: map[string]bool{}}
			ch := &fakeChunks{}
			if !tc.lost {
				ch.edit = endedFor("node-3", func(node string) bool { return node == "node-3" })
			}
			ch.fail = func(in spec.ChunkInput) error {
				if tc.lost && in.Membership.Generation == 1 && in.From == 100 && in.Membership.Nodes[in.Rank].ID == "node-3" {
					return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, spec.ChunkProgress{Step: 120, To: 200})
				}
				return nil
			}
			env := newRunEnv(t, cl, ch)
			env.SetStartTime(day0)
			env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(time.Hour)
			// The chunk from 100: 1h–2h.
			env.RegisterDelayedCallback(func() {
				cl.mu.Lock()
				cl.markFailedLocked(spec.MarkFailed{NodeID: "node-2", Reason: spec.ReasonWorkerStopped}) // (its worker's leave)
				cl.mu.Unlock()
				env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "node-2", Reason: "its worker is stopping", Stopping: true})
			}, 90*time.Minute)
			var during spec.RunStatus // (node-2 held, its worker stopping: not drained)
			env.RegisterDelayedCallback(func() { during = queryStatus(t, env) }, 91*time.Minute)
			s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 300, ChunkSteps: 100, MaxRestarts: 1}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Len(t, st.Recoveries, 1)
			rec := st.Recoveries[0]
			require.Equal(t, []string{"node-2", "node-3"}, rec.FailedNodes)
			require.Equal(t, []string{"node-2", "node-3"}, rec.Removed)
			require.Equal(t, tc.stopped, rec.Stopped)
			require.GreaterOrEqual(t, rec.ResumeStep, tc.resume)
			if tc.stopped {
				require.Equal(t, tc.resume, rec.ResumeStep)
			}
			require.Contains(t, rec.Reason, tc.reason)
			require.Equal(t, []string{"node-1", "spare-1", "spare-2"}, st.Nodes)
			require.Equal(t, []string{"node-2"}, during.Evicting)
			require.Equal(t, []string{"node-2"}, during.Stopping)
			require.Empty(t, st.Stopping)
		})
	}
}

// TestTrainingRunPauseEndsTheChunkInFlight: a pause signalled while a
// chunk trains asks rank 0's node to end it early (EndChunk, once); the
// chunk comes back short, at its checkpoint, and the run holds there, not
// at the chunk's planned end. Nodes of an older build are not asked: their
// run holds at the planned end.
func TestTrainingRunPauseEndsTheChunkInFlight(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol int
		held     int64
	}{
		{name: "nodes that end chunks early", protocol: spec.ChunkProtocolEndEarly, held: 137},
		{name: "an older build", protocol: spec.ChunkProtocolDataCheck, held: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: speaking(tc.protocol, "a", "b")}
			ch := &fakeChunks{}
			env, starts := controlEnv(t, cl, ch, nil)
			env.SetStartTime(day0)
			ends := newEndChunks(env)
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 100 && in.Rank == 0 {
					env.SignalWorkflow(spec.SignalPause, nil)
				}
			}
			ends.endAt137(ch, tc.protocol)
			var held spec.RunStatus
			env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, time.Hour)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)

			require.Equal(t, spec.PhasePaused, held.Phase)
			require.EqualValues(t, tc.held, held.Step)
			require.NotNil(t, held.LastCkpt)
			require.EqualValues(t, tc.held, held.LastCkpt.Step, "held at a stored checkpoint")
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 400, st.Step)
			asked, queues := ends.calls()
			if tc.protocol < spec.ChunkProtocolEndEarly {
				require.Empty(t, asked)
				return
			}
			require.Len(t, asked, 1)
			require.Equal(t, "pause", asked[0].Why)
			require.Equal(t, spec.NodeTaskQueue("a"), queues[0], "rank 0's node asked")
			var session string
			for _, in := range ch.all() {
				if in.From == 100 {
					session = in.Session
				}
			}
			require.Equal(t, session, asked[0].Session)
			require.Equal(t, day0.Add(2*time.Hour), starts()[2], "the next chunk waited for the resume")
		})
	}
}

// TestTrainingRunGreenWindowEndsTheChunk: an interruptible green run
// whose chunk (two virtual hours each) is still training when the window
// it started in ends (09:00) asks the chunk's nodes to end it then; the
// chunk comes back short and the run waits at that boundary for the next
// window (14:00) instead of training on to the chunk's planned end.
func TestTrainingRunGreenWindowEndsTheChunk(t *testing.T) {
	cl := &fakeCluster{pool: speaking(spec.ChunkProtocolEndEarly, "a", "b")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("08:00"), End: at("09:00"), GPerKWh: 90}, {Start: at("14:00"), End: at("23:00"), GPerKWh: 120}}}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	var mu sync.Mutex
	var asked []spec.EndChunkInput
	var askedAt []time.Time
	env.RegisterActivityWithOptions(func(_ context.Context, in spec.EndChunkInput) error {
		mu.Lock()
		defer mu.Unlock()
		asked, askedAt = append(asked, in), append(askedAt, env.Now().UTC())
		return nil
	}, activity.RegisterOptions{Name: spec.ActivityEndChunk})
	env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(func(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
		res, err := ch.train(ctx, in)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && len(asked) > 0 && asked[len(asked)-1].Session == in.Session {
			end := in.From + 50 // where the ranks agreed
			res.To, res.WeightsSHA256, res.PendingCheckpoint, res.Checkpoint = end, fmt.Sprintf("w%d", end), nil, nil
			if in.Rank == 0 {
				res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: end, Key: fmt.Sprintf("ckpt/%d", end)}
			}
		}
		return res, err
	}).After(2 * time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 300, st.Step)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, asked, 1, "only the chunk that outlived its window")
	require.Equal(t, at("09:00"), askedAt[0])
	require.Equal(t, "the green window ended at 09:00 UTC", asked[0].Why)
	require.Equal(t, []time.Time{at("08:00"), at("14:00"), at("16:00"), at("18:00")}, starts(),
		"the first chunk ended at 50 (at 10:00); the rest waited for the next window")
}

// TestTrainingRunCancelEndsTheChunkInFlight: a run cancelled while a
// chunk trains on nodes that can end it early asks rank 0's node to end
// it (EndChunk) instead of cancelling it; the chunk comes back at its
// checkpoint and the run ends cancelled there, its nodes released. On an
// older build the chunk is cancelled with the run (the steps since the
// last checkpoint lost), and a chunk that does not end within
// the job's cancel_grace (1m by default) is cancelled then.
func TestTrainingRunCancelEndsTheChunkInFlight(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol int
		// deaf: the chunk ignores EndChunk and trains on (two virtual
		// hours a chunk).
		deaf  bool
		grace time.Duration // cancel_grace
		step  int64
	}{
		{name: "nodes that end chunks early", protocol: spec.ChunkProtocolEndEarly, step: 137},
		{name: "an older build", protocol: spec.ChunkProtocolDataCheck, step: 100},
		{name: "a chunk that does not end", protocol: spec.ChunkProtocolEndEarly, deaf: true, step: 100},
		{name: "a chunk that does not end, a longer grace", protocol: spec.ChunkProtocolEndEarly, deaf: true, grace: 10 * time.Minute, step: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: speaking(tc.protocol, "a", "b")}
			ch := &fakeChunks{}
			env := newRunEnv(t, cl, ch)
			env.SetStartTime(day0)
			ends := newEndChunks(env)
			cancelAt := day0.Add(2*time.Hour + 30*time.Minute)
			var draining string // the Web UI's details while the chunk drains
			if tc.deaf {
				env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(2 * time.Hour)
				env.RegisterDelayedCallback(env.CancelWorkflow, cancelAt.Sub(day0))
				env.RegisterDelayedCallback(func() {
					v, err := env.QueryWorkflow("__temporal_workflow_metadata")
					require.NoError(t, err)
					var md sdkpb.WorkflowMetadata
					require.NoError(t, v.Get(&md))
					draining = md.GetCurrentDetails()
					require.Equal(t, spec.PhaseCancelling, queryStatus(t, env).Phase)
				}, cancelAt.Sub(day0)+30*time.Second)
			} else {
				ch.onStart = func(in spec.ChunkInput) {
					if in.From == 100 && in.Rank == 0 {
						env.CancelWorkflow()
					}
				}
				ends.endAt137(ch, tc.protocol)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, CancelGrace: spec.Duration(tc.grace)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			var can *temporal.CanceledError
			require.ErrorAs(t, env.GetWorkflowError(), &can)
			st := queryStatus(t, env)

			require.Equal(t, spec.PhaseCancelled, st.Phase)
			require.EqualValues(t, tc.step, st.Step)
			require.NotNil(t, st.LastCkpt)
			require.EqualValues(t, tc.step, st.LastCkpt.Step, "ended at a stored checkpoint")
			require.Equal(t, fmt.Sprintf("cancelled at step %d; last checkpoint at step %d", tc.step, tc.step), st.Error)
			require.Empty(t, st.Detail)
			cl.mu.Lock()
			require.Equal(t, 1, cl.releases, "its nodes released")
			cl.mu.Unlock()
			asked, _ := ends.calls()
			switch {
			case tc.protocol < spec.ChunkProtocolEndEarly:
				require.Empty(t, asked)
			case tc.deaf:
				require.Len(t, asked, 1)
				grace := max(tc.grace, time.Minute)
				require.Equal(t, cancelAt.Add(grace), st.UpdatedAt.UTC(), "the chunk cancelled after the grace")
				require.Contains(t, draining, "**cancelling** · step 100/400", "the Web UI's phase")
				require.Contains(t, draining, fmt.Sprintf("the chunk in flight ends at a checkpoint first (within %s)", grace),
					"the Web UI says why the cancelled run is still running")
			default:
				require.Len(t, asked, 1)
				require.Equal(t, "the run was cancelled", asked[0].Why)
			}
		})
	}
}

// endChunks plays the EndChunk node activity and records its calls.
type endChunks struct {
	mu     sync.Mutex
	asked  []spec.EndChunkInput
	queues []string
	at     []time.Time   // (the test clock's)
	first  chan struct{} // closed at the first call
}

// endWhereAsked is a fakeChunks edit: a chunk its run asked to end
// (EndChunk for its session) ends 37 steps in, rank 0 with a checkpoint
// there.
func (e *endChunks) endWhereAsked(in spec.ChunkInput, res *spec.ChunkResult) {
	asked, _ := e.calls()
	if !slices.ContainsFunc(asked, func(a spec.EndChunkInput) bool { return a.Session == in.Session }) {
		return
	}
	end := in.From + 37
	res.To, res.WeightsSHA256, res.PendingCheckpoint, res.Checkpoint = end, fmt.Sprintf("w%d", end), nil, nil
	if in.Rank == 0 {
		res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: end, Key: fmt.Sprintf("ckpt/%d", end)}
	}
}

func newEndChunks(env *testsuite.TestWorkflowEnvironment) *endChunks {
	e := &endChunks{first: make(chan struct{})}
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.EndChunkInput) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.asked, e.queues = append(e.asked, in), append(e.queues, activity.GetInfo(ctx).TaskQueue)
		e.at = append(e.at, env.Now().UTC())
		if len(e.asked) == 1 {
			close(e.first)
		}
		return nil
	}, activity.RegisterOptions{Name: spec.ActivityEndChunk})
	return e
}

// calls are the EndChunk inputs so far, and the task queues they went to.
func (e *endChunks) calls() ([]spec.EndChunkInput, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.asked), slices.Clone(e.queues)
}

// times are when the EndChunk calls so far came.
func (e *endChunks) times() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.at)
}

// endAt137 makes ch's chunk from step 100 train, on nodes of protocol
// ChunkProtocolEndEarly, until its node is asked to end it, and then
// come back at step 137 with rank 0's checkpoint there; nodes of an
// older protocol train it to its end.
func (e *endChunks) endAt137(ch *fakeChunks, protocol int) {
	ch.fail = func(in spec.ChunkInput) error {
		if in.From == 100 && protocol >= spec.ChunkProtocolEndEarly {
			select { // the chunk trains until its node is asked to end it
			case <-e.first:
			case <-time.After(10 * time.Second):
			}
		}
		return nil
	}
	ch.edit = func(in spec.ChunkInput, res *spec.ChunkResult) {
		if asked, _ := e.calls(); in.From != 100 || len(asked) == 0 {
			return
		}
		res.To, res.WeightsSHA256, res.PendingCheckpoint, res.Checkpoint = 137, "w137", nil, nil
		if in.Rank == 0 {
			res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: 137, Key: "ckpt/137"}
		}
	}
}

// speaking is testNodes(ids...) registered with chunk protocol protocol.
func speaking(protocol int, ids ...string) []spec.Node {
	nodes := testNodes(ids...)
	for i := range nodes {
		nodes[i].Protocol = protocol
	}
	return nodes
}

// TestTrainingRunStoppingNodeCountsNoRestart: the Cluster tells the run
// that node b's worker is stopping (Evict.Stopping), and b's chunk does
// not end at a checkpoint for it (an older build, or a stop grace too
// short): it times out. The recovery resumes from the last checkpoint but
// counts no restart (Recovery.Stopped), so with max_restarts 1 a second
// such stop (spare-1's) does not fail the run. A node that fails
// without having been said to stop still counts one.
func TestTrainingRunStoppingNodeCountsNoRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		told    bool
		stopped bool
	}{
		{name: "told it stops", told: true, stopped: true},
		{name: "not told", told: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "b", "spare-1", "spare-2"), failed: map[string]bool{}}
			ch := &fakeChunks{}
			// By generation, the node that stops: b in the chunk from 100,
			// spare-1 in its first chunk (from 100 or 200: a's result and
			// checkpoint at 200 may come before b's failure or not).
			stops := map[int64]string{1: "b", 2: "spare-1"}
			ch.fail = func(in spec.ChunkInput) error {
				gen := in.Membership.Generation
				if (gen == 2 || in.From == 100) && in.Membership.Nodes[in.Rank].ID == stops[gen] {
					return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, spec.ChunkProgress{Step: 150, To: 200})
				}
				return nil
			}
			env := newRunEnv(t, cl, ch)
			env.SetStartTime(day0)
			env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(time.Hour)
			if tc.told {
				// The chunk from 100 of generation 1: 1h–2h; generation 2's
				// first: 2h–3h.
				for at, node := range map[time.Duration]string{90 * time.Minute: "b", 150 * time.Minute: "spare-1"} {
					env.RegisterDelayedCallback(func() {
						env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: node, Reason: "its worker is stopping", Stopping: true})
					}, at)
				}
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, MaxRestarts: 1}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			if !tc.stopped {
				require.ErrorContains(t, env.GetWorkflowError(), "gave up after 1 restart(s)")
				return
			}
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Len(t, st.Recoveries, 2)
			for i, gen := range []int64{1, 2} {
				rec := st.Recoveries[i]
				require.Equal(t, []string{stops[gen]}, rec.FailedNodes, "recovery %d", i)
				require.True(t, rec.Stopped, "recovery %d", i)
				require.GreaterOrEqual(t, rec.ResumeStep, int64(100), "recovery %d: from a checkpoint", i)
				require.Contains(t, rec.Reason, "its worker was stopping, SIGTERM: no restart counted")
			}
			require.Equal(t, []string{"a", "spare-2"}, st.Nodes)
		})
	}
}

// TestTrainingRunGrowsBackDuringAChunk: a run that shrank to a and c when
// b was lost trains chunks of two virtual hours. While one trains, it
// asks the Cluster for a free node from when it would have at a boundary
// (10 s after the shrink), and once b's worker is back (20 minutes in) the
// ask finds it: the chunk's nodes are asked to end it, and the run grows
// back at that step instead of at the chunk's planned end. A control
// worker's ask waits up to freeNodesWait for a node, the next following at
// once, so b is found as it comes back; one of an earlier build answers at
// once, and the run asks again 1 minute later, then every 2 (node_wait):
// b is found at the first of those asks after it is back.
func TestTrainingRunGrowsBackDuringAChunk(t *testing.T) {
	legacy := []time.Duration{10 * time.Second, 70 * time.Second}
	for at := 190 * time.Second; at <= 1270*time.Second; at += 2 * time.Minute {
		legacy = append(legacy, at)
	}
	for _, tc := range []struct {
		name     string
		waits    bool
		asks     []time.Duration // after the shrink
		endAfter time.Duration   // when the chunk's end is asked for, after the shrink
	}{
		{"the ask waits", true, []time.Duration{10 * time.Second, 5*time.Minute + 10*time.Second, 10*time.Minute + 10*time.Second,
			15*time.Minute + 10*time.Second}, 20 * time.Minute},
		{"an earlier control worker answers at once", false, legacy, 1270 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: speaking(spec.ChunkProtocolEndEarly, "a", "b", "c")}
			ch := &fakeChunks{fail: loseRank1At100}
			env := newRunEnv(t, cl, ch)
			env.SetStartTime(day0)
			ends := newEndChunks(env)
			// Chunks 0–100 and 100–200 (b lost) take 0–4 h; the shrunk run's
			// chunk from 100 starts at 4 h.
			shrunk := day0.Add(4 * time.Hour)
			back := shrunk.Add(20 * time.Minute)
			asks := freeNodes(env, cl, tc.waits, "b", back)
			ch.edit = func(in spec.ChunkInput, res *spec.ChunkResult) {
				if asked, _ := ends.calls(); in.Membership.Generation != 2 || len(asked) == 0 {
					return
				}
				res.To, res.WeightsSHA256, res.PendingCheckpoint, res.Checkpoint = 137, "w137", nil, nil
				if in.Rank == 0 {
					res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: 137, Key: "ckpt/137"}
				}
			}
			env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(2 * time.Hour)
			s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)

			require.EqualValues(t, 400, st.Step)
			require.Equal(t, tc.asks, since(shrunk, asks()), "the asks for a free node; the last finds b")
			asked, queues := ends.calls()
			require.Len(t, asked, 1)
			require.Equal(t, "growing back to 3 nodes: 1 free node(s)", asked[0].Why)
			require.Equal(t, spec.NodeTaskQueue("a"), queues[0])
			require.Equal(t, []time.Duration{tc.endAfter}, since(shrunk, ends.times()), "when the chunk's end was asked for")
			require.Len(t, st.Rescalings, 1)
			grew := st.Rescalings[0]
			require.True(t, grew.Regrow)
			require.EqualValues(t, 137, grew.AtStep, "grown back where the chunk ended")
			require.Equal(t, []string{"b"}, grew.Added)
			require.Equal(t, []string{"a", "c", "b"}, st.Nodes)
			require.Zero(t, st.TargetNodes)
		})
	}
}

// since is each of times after t0.
func since(t0 time.Time, times []time.Time) []time.Duration {
	var out []time.Duration
	for _, at := range times {
		out = append(out, at.Sub(t0))
	}
	return out
}

// TestTrainingRunReplacesADrainedNodeDuringAChunk: b is drained while
// the run (2 nodes, min_nodes 2) trains chunks of two virtual hours, and
// no node is free: the chunk ends early for the drain, the run keeps b,
// and trains on. While the next chunk trains it asks the Cluster for a
// free node from a minute (evictRetry) after that boundary; once c's
// worker is back (10.5 minutes in), the ask finds it, that chunk ends
// early too, and the run moves off b there. The asks wait up to
// freeNodesWait (c is found as it comes back); a control worker of an
// earlier build answers at once and is asked every minute.
func TestTrainingRunReplacesADrainedNodeDuringAChunk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		waits    bool
		back     time.Duration   // c's worker, after the boundary that kept b
		asks     []time.Duration // after the boundary that kept b
		endAfter time.Duration
		// ends: the second chunk comes back this long after the boundary
		// that kept b (0: at its planned end, two hours on).
		ends time.Duration
	}{
		{"the ask waits", true, 10*time.Minute + 30*time.Second, []time.Duration{time.Minute, 6 * time.Minute}, 10*time.Minute + 30*time.Second, 0},
		{"the ask waits, the chunk ending when asked", true, 10*time.Minute + 30*time.Second, []time.Duration{time.Minute, 6 * time.Minute},
			10*time.Minute + 30*time.Second, 10*time.Minute + 31*time.Second},
		// Found by the ask that follows a whole wait, sooner than the
		// retry time that wait set (a minute on, versionFoundAsks): the
		// boundary takes it, rather than ending the next chunk for it too.
		{"found soon after a whole wait", true, 6*time.Minute + 30*time.Second, []time.Duration{time.Minute, 6 * time.Minute},
			6*time.Minute + 30*time.Second, 6*time.Minute + 31*time.Second},
		{"an earlier control worker answers at once", false, 10*time.Minute + 30*time.Second, []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute,
			5 * time.Minute, 6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute, 11 * time.Minute}, 11 * time.Minute, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ends, asks := drainingBEnding(t, tc.waits, tc.back, tc.ends, nil)

			require.EqualValues(t, 300, st.Step)
			asked, _ := ends.calls()
			require.Len(t, asked, 2)
			require.Equal(t, "drain of b", asked[0].Why)
			require.Equal(t, "replacing b: 1 free node(s)", asked[1].Why)
			require.Equal(t, tc.asks, since(keptB, asks), "the asks for a free node after the boundary that kept b; the last finds c")
			require.Equal(t, tc.endAfter, since(keptB, ends.times())[1], "when the second chunk's end was asked for")
			require.Len(t, st.Rescalings, 2, "the boundary that kept b, then the move")
			require.NotEmpty(t, st.Rescalings[0].Error, "no free node at the first boundary")
			moved := st.Rescalings[1]
			require.Equal(t, []string{"b"}, moved.Removed)
			require.Equal(t, []string{"c"}, moved.Added)
			require.EqualValues(t, 74, moved.AtStep, "where the second chunk ended for it")
			require.Equal(t, []string{"a", "c"}, st.Nodes)
		})
	}
}

// TestTrainingRunAskCutByItsChunkGoesOn: as above, but the chunk after
// the boundary that kept b reaches its end 3 minutes in, while the ask
// that began a minute in still waits. That ask may have held a node for
// the run as it was cancelled (its control worker hears of the cancel at
// its next heartbeat), so the next chunk asks again at once
// (versionCutAsks), not at the boundary's retry time a minute on; its
// ask finds c when c's worker is back and the run moves off b there.
func TestTrainingRunAskCutByItsChunkGoesOn(t *testing.T) {
	st, ends, asks := drainingBEnding(t, true, 10*time.Minute+30*time.Second, 3*time.Minute, nil)

	require.EqualValues(t, 300, st.Step)
	require.Equal(t, []time.Duration{time.Minute, 3 * time.Minute, 8 * time.Minute}, since(keptB, asks),
		"the ask cut by the chunk's end at 3m goes on at once, and the next after its whole wait")
	asked, _ := ends.calls()
	require.Len(t, asked, 2)
	require.Equal(t, "replacing b: 1 free node(s)", asked[1].Why)
	require.Equal(t, 10*time.Minute+30*time.Second, since(keptB, ends.times())[1], "when c's worker came back")
	require.Equal(t, []string{"a", "c"}, st.Nodes)
}

// TestTrainingRunAskEndsNoChunkOnceNodesAreNotWanted: as above, b is
// drained with no node free, kept, and the run's ask for a replacement
// waits while the next chunk trains; b is put back 3 minutes in, and c
// comes free a minute later, while the ask still waits: the ask finds c,
// but the run no longer wants a node, and its chunk trains on to its end
// (it would end early for nothing).
func TestTrainingRunAskEndsNoChunkOnceNodesAreNotWanted(t *testing.T) {
	st, ends, asks := drainingB(t, true, 4*time.Minute, func(env *testsuite.TestWorkflowEnvironment, cl *fakeCluster, _ *spec.RunSpec) {
		env.RegisterDelayedCallback(func() {
			cl.mu.Lock()
			delete(cl.failed, "b")
			cl.mu.Unlock()
			env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "b", Undrained: true})
		}, keptB.Add(3*time.Minute).Sub(day0))
	})

	require.EqualValues(t, 300, st.Step)
	require.Equal(t, []time.Duration{time.Minute}, since(keptB, asks), "one ask, answered when c came free")
	asked, _ := ends.calls()
	require.Len(t, asked, 1, "only the drain ended a chunk")
	require.Equal(t, "drain of b", asked[0].Why)
	require.Len(t, st.Rescalings, 1, "the boundary that kept b")
	require.Equal(t, []string{"a", "b"}, st.Nodes)
}

// TestTrainingRunAsksForAReplacementEveryNodeWait: a job whose node_wait
// (20 s) is shorter than evictRetry asks for a drained node's replacement
// that often (versionEvictNodeWait), as its regrow asks would, and says so.
func TestTrainingRunAsksForAReplacementEveryNodeWait(t *testing.T) {
	st, ends, asks := drainingB(t, false, 2*time.Minute, func(_ *testsuite.TestWorkflowEnvironment, _ *fakeCluster, s *spec.RunSpec) {
		s.NodeWait = spec.Duration(20 * time.Second)
	})
	require.Equal(t, []time.Duration{20 * time.Second, 40 * time.Second, time.Minute, 80 * time.Second, 100 * time.Second, 2 * time.Minute},
		since(keptB, asks), "an ask every node_wait after the boundary that kept b; the last finds c")
	require.Equal(t, 2*time.Minute, since(keptB, ends.times())[1], "the second chunk ended for c")
	require.Contains(t, st.Rescalings[0].Error, "asking again every 20s")
	require.Equal(t, []string{"a", "c"}, st.Nodes)
}

// keptB is when the first chunk of drainingB's run returns, ended for b's
// drain: the boundary that keeps b (no node free); the next trains 2–4 h.
var keptB = day0.Add(2 * time.Hour)

// drainingB runs a run on a and b (min_nodes 2) of chunks of two virtual
// hours, 300 steps: b is drained 30 minutes in, while c is failed, and
// c's worker comes back cBack after keptB; FreeNodes asks wait or not
// (freeNodes). A chunk asked to end ends 37 steps in, with rank 0's
// checkpoint there. more adds a test's own events and may edit the job.
// It returns the run's status, the EndChunk calls and the times of the
// FreeNodes asks.
func drainingB(t *testing.T, waits bool, cBack time.Duration, more func(*testsuite.TestWorkflowEnvironment, *fakeCluster, *spec.RunSpec)) (spec.RunStatus, *endChunks, []time.Time) {
	t.Helper()
	return drainingBEnding(t, waits, cBack, 0, more)
}

// drainingBEnding is drainingB whose second chunk (from keptB) comes back
// secondEnds after keptB (0: two hours), as one asked to end then does.
func drainingBEnding(t *testing.T, waits bool, cBack, secondEnds time.Duration,
	more func(*testsuite.TestWorkflowEnvironment, *fakeCluster, *spec.RunSpec)) (spec.RunStatus, *endChunks, []time.Time) {
	t.Helper()
	cl := &fakeCluster{pool: speaking(spec.ChunkProtocolEndEarly, "a", "b", "c"), failed: map[string]bool{"c": true}}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	env.SetStartTime(day0)
	ends := newEndChunks(env)
	asks := freeNodes(env, cl, waits, "c", keptB.Add(cBack))
	env.RegisterDelayedCallback(func() {
		cl.mu.Lock()
		cl.failed["b"] = true // drained: the Cluster hands it out no more
		cl.mu.Unlock()
		env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "b", Reason: "disk"})
	}, 30*time.Minute)
	s := spec.RunSpec{Name: "t", Nodes: 2, MinNodes: 2, Steps: 300, ChunkSteps: 100}
	if more != nil {
		more(env, cl, &s)
	}
	ch.edit = ends.endWhereAsked
	env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).AfterFn(func() time.Duration {
		if secondEnds > 0 && env.Now().Equal(keptB) {
			return secondEnds
		}
		return 2 * time.Hour
	})
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s.WithDefaults()})
	return result(t, env), ends, asks()
}

// freeNodes plays the FreeNodes activity on cl's nodes (free: neither
// failed nor held), node's worker coming back (no longer failed) at back,
// and returns the times of its calls so far. With waits, it plays a
// control worker whose asks wait (their AcquireRequest.Wait,
// freeNodesWait): an ask with none free returns at back if that comes
// within its wait, else once its wait is over. Without, asks answer at
// once, as an earlier build's did.
func freeNodes(env *testsuite.TestWorkflowEnvironment, cl *fakeCluster, waits bool, node string, back time.Time) (asks func() []time.Time) {
	env.RegisterDelayedCallback(func() {
		cl.mu.Lock()
		delete(cl.failed, node) // its worker came back
		cl.mu.Unlock()
	}, back.Sub(env.Now()))
	var at []time.Time
	count := func(_ context.Context, clusterID string, req spec.AcquireRequest) (int, error) {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.freeLocked(), nil
	}
	asked := func() {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		at = append(at, env.Now().UTC())
	}
	env.RegisterActivityWithOptions(func(ctx context.Context, clusterID string, req spec.AcquireRequest) (int, error) {
		asked()
		return count(ctx, clusterID, req)
	}, activity.RegisterOptions{Name: spec.ActivityFreeNodes})
	if waits {
		env.OnActivity(spec.ActivityFreeNodes, mock.Anything, mock.Anything, mock.Anything).AfterFn(func() time.Duration {
			asked()
			return min(max(back.Sub(env.Now()), 0), freeNodesWait)
		}).Return(count)
	}
	return func() []time.Time {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return slices.Clone(at)
	}
}

// TestTrainingRunStatusShowsItsAskForANode: the status of a run waiting
// for a free node says why and when it asks (spec.NodeAsk): before its
// first ask, the time of that ask; while an ask waits, since when; once
// the node is taken, nothing.
func TestTrainingRunStatusShowsItsAskForANode(t *testing.T) {
	at := map[time.Duration]*spec.NodeAsk{}
	st, _, _ := drainingB(t, true, 10*time.Minute+30*time.Second, func(env *testsuite.TestWorkflowEnvironment, _ *fakeCluster, _ *spec.RunSpec) {
		for _, d := range []time.Duration{30 * time.Second, 3 * time.Minute, 7 * time.Minute, 150 * time.Minute} {
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(spec.QueryStatus)
				require.NoError(t, err)
				var s spec.RunStatus
				require.NoError(t, v.Get(&s))
				at[d] = s.NodeAsk
			}, keptB.Add(d).Sub(day0))
		}
	})
	require.Equal(t, []string{"a", "c"}, st.Nodes)
	require.Equal(t, map[time.Duration]*spec.NodeAsk{
		30 * time.Second:  {Why: "replacing b", Next: keptB.Add(time.Minute)},
		3 * time.Minute:   {Why: "replacing b", WaitingSince: keptB.Add(time.Minute)},
		7 * time.Minute:   {Why: "replacing b", WaitingSince: keptB.Add(6 * time.Minute)},
		150 * time.Minute: nil,
	}, at)
}

// TestTrainingRunStoppedWhilePausedCountsNoRestart: twice, the run (2
// nodes, max_restarts 1) is paused, node b's worker is stopped (SIGTERM:
// the Cluster tells the run, Evict.Stopping) and registers again under
// the same ID (an Undrained evict, "its worker registered again"), and the
// run is resumed: its next chunk finds b's new process without state
// (NoState). That is a planned stop: each recovery resumes from the last
// checkpoint on the same nodes, counts no restart (Recovery.Stopped) and
// says what happened, and the run completes. A worker killed and
// restarted unannounced still costs a restart: the second such loss fails
// the run.
func TestTrainingRunStoppedWhilePausedCountsNoRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		told bool
	}{
		{name: "stopped and back while paused", told: true},
		{name: "killed and back while paused", told: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "b"), failed: map[string]bool{}}
			ch := &fakeChunks{}
			// Chunks take an hour: 0–100 (1h), paused until 1.5h, 100 in
			// generation 1 fails on b (2.5h); 100–200, 200–300 (paused at
			// 4.5h until 5h); 300 in generation 2 fails on b (6h).
			ch.fail = func(in spec.ChunkInput) error {
				gen, node := in.Membership.Generation, in.Membership.Nodes[in.Rank].ID
				if node == "b" && (gen == 1 && in.From == 100 || gen == 2 && in.From == 300) {
					err := fmt.Errorf("node b restarted (process 2) after the run planned this chunk for its process 1")
					return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeNoState, err)
				}
				return nil
			}
			env := newRunEnv(t, cl, ch)
			env.SetStartTime(day0)
			env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(time.Hour)
			// Each pause comes mid-chunk and holds at the chunk's end.
			for _, p := range []struct{ pause, held time.Duration }{
				{30 * time.Minute, time.Hour}, {4 * time.Hour, 4*time.Hour + 30*time.Minute},
			} {
				held := p.held
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, p.pause)
				if tc.told {
					env.RegisterDelayedCallback(func() {
						env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "b", Reason: "its worker is stopping", Stopping: true})
					}, held+5*time.Minute)
					env.RegisterDelayedCallback(func() {
						env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "b", Reason: "its worker registered again", Undrained: true})
					}, held+10*time.Minute)
				}
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, held+30*time.Minute)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, MaxRestarts: 1}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			if !tc.told {
				require.ErrorContains(t, env.GetWorkflowError(), "gave up after 1 restart(s)")
				require.ErrorContains(t, env.GetWorkflowError(), "node(s) [b] restarted and lost their state")
				return
			}
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 400, st.Step)
			require.Len(t, st.Recoveries, 2)
			for i, step := range []int64{100, 300} {
				rec := st.Recoveries[i]
				require.Equal(t, []string{"b"}, rec.FailedNodes, "recovery %d", i)
				require.Equal(t, []string{"b"}, rec.Back, "recovery %d: the same node, its new process", i)
				require.True(t, rec.Stopped, "recovery %d: no restart counted", i)
				require.Equal(t, step, rec.ResumeStep, "recovery %d", i)
				require.Zero(t, rec.LostSteps, "recovery %d", i)
				require.Equal(t, "node b's worker was stopped (SIGTERM) and registered again while the run held it between chunks: "+
					"its new process holds no state, so every rank resumed from the last checkpoint (a planned stop: no restart counted)", rec.Reason, "recovery %d", i)
			}
			require.Equal(t, []string{"a", "b"}, st.Nodes)
			require.Empty(t, cl.failed, "nobody is marked failed")
		})
	}
}
