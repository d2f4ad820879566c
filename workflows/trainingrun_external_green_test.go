package workflows

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/spec"
)

// greenWorlds plays RunExternal for the green tests: every launch runs
// until the workflow cancels it or the test lets the running ones finish
// (done). Checkpoints are sent by the test, from delayed callbacks: the
// test environment's clock stands still while an activity runs and jumps
// to each callback's time, so the checkpoints' times — and the pace the
// run measures from them — are exact.
type greenWorlds struct {
	mu        sync.Mutex
	env       *testsuite.TestWorkflowEnvironment
	launches  []greenLaunch // rank 0 of each launch
	cancelled int
	stop      map[string]context.CancelFunc
	finish    chan struct{}
	end       int64
	// meter plays ReadEnergy on a node at the environment's time (nil:
	// the nodes have no meter); reads counts the calls.
	meter func(node string, now time.Time) spec.EnergyReading
	reads int
	// crash, when set and closed, makes rank 1 of the first launch exit
	// with status 1 at step 25; the first launch's ranks heartbeat
	// meanwhile (the grace after a failure runs on the wall clock while
	// activities run), and a relaunch finishes at once. first is the
	// first launch's session.
	crash chan struct{}
	first string
}

func (g *greenWorlds) readEnergy(ctx context.Context) (spec.EnergyReading, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	node := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, spec.NodeTaskQueue(""))
	if g.meter == nil {
		return spec.EnergyReading{Reason: "node " + node + " has no energy meter"}, nil
	}
	return g.meter(node, g.env.Now()), nil
}

type greenLaunch struct {
	in spec.ExternalInput
	at time.Time
}

func (g *greenWorlds) run(ctx context.Context, in spec.ExternalInput) (*spec.ChunkResult, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	g.mu.Lock()
	g.stop[activity.GetInfo(ctx).ActivityID] = stop
	if in.Rank == 0 {
		g.launches = append(g.launches, greenLaunch{in: in, at: g.env.Now().UTC()})
	}
	if g.first == "" {
		g.first = in.Session
	}
	firstLaunch := in.Session == g.first
	g.mu.Unlock()
	from := int64(0)
	if in.Restore != nil {
		from = in.Restore.Step
	}
	var crash <-chan struct{}
	var beat <-chan time.Time
	finish := g.finish
	if g.crash != nil {
		if in.Rank == 1 && firstLaunch {
			crash = g.crash
		}
		if !firstLaunch {
			finish = closed
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		beat = tick.C
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-crash:
			return nil, temporal.NewApplicationError("rank-1 on node node-2 exited with status 1 at step 25", spec.ErrTypeRankExited,
				spec.RankExit{Rank: 1, Process: "rank-1", Node: "node-2", ExitCode: 1, Step: 25})
		case <-beat:
			activity.RecordHeartbeat(ctx)
		case <-finish:
			done = true
		}
	}
	return &spec.ChunkResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, From: from, To: g.end,
		FirstLoss: 2.3 / float32(1+from), LastLoss: 2.3 / float32(1+g.end)}, nil
}

// closed is a closed channel: a receive from it never waits.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (g *greenWorlds) cancel(info *activity.Info) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if stop := g.stop[info.ActivityID]; stop != nil {
		g.cancelled++
		stop()
	}
}

func (g *greenWorlds) all() []greenLaunch {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]greenLaunch(nil), g.launches...)
}

// checkpoint uploads step from the current launch, as its first node does.
func (g *greenWorlds) checkpoint(t *testing.T, step int64) {
	t.Helper()
	l := g.all()
	require.NotEmpty(t, l, "no launch to checkpoint")
	g.env.SignalWorkflow(spec.SignalCheckpointSaved, spec.CheckpointSaved{Session: l[len(l)-1].in.Session,
		Ref:  spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: step, Key: fmt.Sprintf("ckpt/%d", step)},
		Loss: 2.3 / float32(1+step)})
}

// greenEnv is an external job's test environment with PlanCarbon played
// by cb (nil: register your own), and a record of the timers' durations.
func greenEnv(t *testing.T, cb *fakeCarbon) (*testsuite.TestWorkflowEnvironment, *greenWorlds, func() []time.Duration) {
	t.Helper()
	return greenEnvOn(t, cb, testNodes("node-1", "node-2"))
}

// greenEnvOn is greenEnv on the nodes pool.
func greenEnvOn(t *testing.T, cb *fakeCarbon, pool []spec.Node) (*testsuite.TestWorkflowEnvironment, *greenWorlds, func() []time.Duration) {
	t.Helper()
	cl := &fakeCluster{pool: pool}
	env := newRunEnv(t, cl, &fakeChunks{})
	env.SetStartTime(day0)
	env.SetTestTimeout(20 * time.Second)
	g := &greenWorlds{env: env, stop: map[string]context.CancelFunc{}, finish: make(chan struct{}), end: 100}
	env.SetOnActivityCanceledListener(g.cancel)
	env.RegisterActivityWithOptions(g.run, activity.RegisterOptions{Name: spec.ActivityRunExternal})
	env.RegisterActivityWithOptions(func(context.Context) (int, error) { return 29500, nil },
		activity.RegisterOptions{Name: spec.ActivityReservePort})
	env.RegisterActivityWithOptions(g.readEnergy, activity.RegisterOptions{Name: spec.ActivityReadEnergy})
	if cb != nil {
		env.RegisterActivityWithOptions(cb.plan, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	}
	var mu sync.Mutex
	var timers []time.Duration
	env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		timers = append(timers, d)
	})
	return env, g, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), timers...)
	}
}

// withoutStragglerChecks drops the timers of checkStragglers (a node may
// finish a little before the other) from ds.
func withoutStragglerChecks(ds []time.Duration) []time.Duration {
	return slices.DeleteFunc(ds, func(d time.Duration) bool {
		for w := stragglerWait; w < time.Hour; w *= 2 {
			if d == w {
				return true
			}
		}
		return false
	})
}

func greenExternalSpec(g spec.GreenPolicy) spec.RunSpec {
	s := externalSpec(2)
	s.Green = &g
	return s.WithDefaults()
}

// plans are the PlanCarbon calls that planned (not only priced).
func (f *fakeCarbon) plans() []spec.CarbonInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []spec.CarbonInput
	for _, c := range f.calls {
		if c.Plan {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeCarbon) setSlots(slots ...spec.CarbonSlot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slots = slots
}

const ms = time.Millisecond

var window14 = spec.CarbonSlot{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}

// Outside its slot an external job waits before launching, on the
// durable timer named for the window, planned with its green.work
// estimate; in the slot it launches and re-plans at every checkpoint with
// the pace measured between them.
func TestExternalGreenWaitsBeforeLaunch(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window14}, gramsPerChunk: 1}
	env, g, timers := greenEnv(t, cb)
	var waiting spec.RunStatus
	env.RegisterDelayedCallback(func() { waiting = queryStatus(t, env) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 40) }, 6*time.Hour+300*ms)
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 80) }, 6*time.Hour+600*ms)
	// The last checkpoint, the forecast now dirty: no plan stops a world
	// that is about to finish.
	env.RegisterDelayedCallback(func() {
		cb.setSlots(spec.CarbonSlot{Start: at("20:00"), End: at("22:00"), GPerKWh: 80})
		g.checkpoint(t, 100)
	}, 6*time.Hour+750*ms)
	env.RegisterDelayedCallback(func() { close(g.finish) }, 6*time.Hour+900*ms)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
		Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})})
	st := result(t, env)

	require.Equal(t, spec.PhaseGreenWait, waiting.Phase)
	require.Equal(t, at("14:00"), waiting.WaitUntil.UTC())
	require.Contains(t, waiting.Detail, "green window 14:00–18:00 UTC, 120 g/kWh")
	require.Contains(t, timers(), 6*time.Hour, "a durable timer to the slot start")

	l := g.all()
	require.Len(t, l, 1)
	require.Equal(t, at("14:00"), l[0].at, "launched when the slot opened")
	require.Nil(t, l[0].in.Restore)
	require.Zero(t, g.cancelled)

	plans := cb.plans()
	require.Len(t, plans, 4, "before the launch, after the wait, at each checkpoint")
	for i, want := range []struct {
		now  time.Time
		work time.Duration
	}{
		{day0, 10 * time.Hour}, // the estimate, all 100 steps left
		{at("14:00"), 10 * time.Hour},
		{at("14:00").Add(300 * ms), 450 * ms}, // 40 steps in 0.3 s, 60 left
		{at("14:00").Add(600 * ms), 150 * ms}, // 80 steps in 0.6 s, 20 left
	} {
		require.Equal(t, want.now, plans[i].Now.UTC(), "plan %d", i)
		require.InDelta(t, want.work, plans[i].Work, float64(ms), "plan %d's work", i)
		require.Equal(t, day0, plans[i].RunStart.UTC(), "the deadline counts from the run's start")
	}
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 100, st.Step)
	require.Empty(t, st.Recoveries)
	require.Equal(t, 1, st.Green.Waits)
	require.InDelta(t, 6*3600, st.Green.WaitedSeconds, 1)
	// Trained: 0→40, 40→80, 80→100, then to the end, each priced once.
	require.InDelta(t, 4, st.Green.Grams, 1e-9)
	require.Len(t, st.Segments, 1)
	require.InDelta(t, 0.9, st.Segments[0].WallSeconds, 1e-9)
	require.EqualValues(t, 0, st.Segments[0].FromStep)
	require.EqualValues(t, 100, st.Segments[0].ToStep)
}

// A plan at a checkpoint that puts the run outside its slots stops the
// world after that checkpoint — not before, although the forecast moved
// earlier — waits for the slot, and relaunches from the checkpoint on the
// same nodes without counting a restart.
func TestExternalGreenStopsAfterCheckpoint(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("10:00"), GPerKWh: 90}, window14}, gramsPerChunk: 1}
	env, g, _ := greenEnv(t, cb)
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 20) }, 300*ms)
	// The forecast moves: from now on the clean hours are 14:00–18:00.
	env.RegisterDelayedCallback(func() { cb.setSlots(window14) }, 450*ms)
	var before spec.RunStatus
	env.RegisterDelayedCallback(func() {
		before = queryStatus(t, env)
		require.Zero(t, g.cancelled, "stopped before the checkpoint")
		g.checkpoint(t, 40)
	}, 600*ms)
	var waiting spec.RunStatus
	env.RegisterDelayedCallback(func() { waiting = queryStatus(t, env) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 60) }, 6*time.Hour+300*ms)
	env.RegisterDelayedCallback(func() { close(g.finish) }, 6*time.Hour+600*ms)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
		Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})})
	st := result(t, env)

	require.Equal(t, spec.PhaseTraining, before.Phase)
	require.EqualValues(t, 20, before.LastCkpt.Step)

	require.Equal(t, spec.PhaseGreenWait, waiting.Phase)
	require.EqualValues(t, 40, waiting.Step, "held at the checkpoint the plan stopped at")
	require.Equal(t, at("14:00"), waiting.WaitUntil.UTC())
	require.Contains(t, waiting.Detail, "green window 14:00–18:00 UTC, 120 g/kWh")

	l := g.all()
	require.Len(t, l, 2)
	require.Equal(t, day0, l[0].at)
	require.Equal(t, at("14:00"), l[1].at)
	require.EqualValues(t, 40, l[1].in.Restore.Step)
	require.Zero(t, l[1].in.Restarts, "a green stop is not a restart")
	require.Equal(t, []string{"node-1", "node-2"}, l[1].in.Membership.NodeIDs())
	require.EqualValues(t, 1, l[1].in.Membership.Generation, "the nodes were kept")
	require.Equal(t, 2, g.cancelled, "the first world's two nodes")

	var nows []time.Time
	var works []time.Duration
	for _, p := range cb.plans() {
		nows = append(nows, p.Now.UTC())
		works = append(works, p.Work)
	}
	require.Equal(t, []time.Time{day0, day0.Add(300 * ms), day0.Add(600 * ms), day0.Add(600 * ms), at("14:00"),
		at("14:00").Add(300 * ms)}, nows, "launch, checkpoints 20 and 40, the boundary after the stop, after the wait, checkpoint 60")
	for i, want := range []time.Duration{10 * time.Hour, 1200 * ms, 900 * ms, 900 * ms, 900 * ms, 600 * ms} {
		require.InDelta(t, want, works[i], float64(ms), "plan %d's work", i)
	}

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 100, st.Step)
	require.Empty(t, st.Recoveries)
	require.False(t, st.PauseRequested)
	require.Equal(t, 1, st.Green.Waits)
	require.EqualValues(t, 60, st.LastCkpt.Step)
	require.InDelta(t, 4, st.Green.Grams, 1e-9, "0→20, 20→40, 40→60, 60→100")
}

// On nodes that take checkpoint requests, an interruptible run's world is
// asked for a checkpoint when its window ends (10:00), not left to train
// into the dirty hours until its next periodic one: the plan at that
// checkpoint (step 37) stops it, and it relaunches from there at 14:00.
// A world still starting is stopped at once by the plan made then.
// (The worlds are mocked with a duration, so that the clock runs on
// while they do: the first would train until 20:00.)
func TestExternalGreenAsksACheckpointAtTheWindowsEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		// starting: the world's first node answers that its processes
		// have reported no step yet (spec.StepUnreported): the plan is
		// made at once, and stops it at the window's end.
		starting bool
		// refused: the bucket refuses the checkpoint asked for, and the
		// first node keeps it (spec.ChunkProtocolStoreKept): the world
		// stops at once all the same, and the run stores it first
		// (versionKeptForStop).
		refused bool
		asked   []string
		held    int64
	}{
		{name: "reporting", asked: []string{"10:00 " + spec.NodeTaskQueue("node-1") + " 0", "10:00 " + spec.NodeTaskQueue("node-2") + " 37"}, held: 37},
		{name: "still starting", starting: true, asked: []string{"10:00 " + spec.NodeTaskQueue("node-1") + " 0"}, held: 0},
		{name: "refused, kept", refused: true, asked: []string{"10:00 " + spec.NodeTaskQueue("node-1") + " 0", "10:00 " + spec.NodeTaskQueue("node-2") + " 37"}, held: 37},
	} {
		t.Run(tc.name, func(t *testing.T) { greenAsksAtTheWindowsEnd(t, tc.starting, tc.refused, tc.asked, tc.held) })
	}
}

func greenAsksAtTheWindowsEnd(t *testing.T, starting, refused bool, wantAsked []string, held int64) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("10:00"), GPerKWh: 90}, window14}, gramsPerChunk: 1}
	protocol := spec.ChunkProtocolCheckpointRequest
	if refused {
		protocol = spec.ChunkProtocolStoreKept
	}
	env, _, _ := greenEnvOn(t, cb, speaking(protocol, "node-1", "node-2"))
	k := &fakeKept{}
	env.RegisterActivityWithOptions(k.store, activity.RegisterOptions{Name: spec.ActivityStoreKept})
	var mu sync.Mutex
	var asked []string    // "time queue step"
	var launches []string // "time from"
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var in spec.ExternalInput
		if info.ActivityType.Name != spec.ActivityRunExternal || args.Get(&in) != nil || in.Rank != 0 {
			return
		}
		from := int64(0)
		if in.Restore != nil {
			from = in.Restore.Step
		}
		mu.Lock()
		launches = append(launches, fmt.Sprintf("%s %d", env.Now().UTC().Format("15:04"), from))
		mu.Unlock()
	})
	world := func(_ context.Context, in spec.ExternalInput) (*spec.ChunkResult, error) {
		from := int64(0)
		if in.Restore != nil {
			from = in.Restore.Step
		}
		return &spec.ChunkResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, From: from, To: 100,
			FirstLoss: 2.3 / float32(1+from), LastLoss: 2.3 / 101}, nil
	}
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%s %s %d", env.Now().UTC().Format("15:04"), activity.GetInfo(ctx).TaskQueue, in.Step))
		mu.Unlock()
		require.Equal(t, "the green window ended at 10:00 UTC", in.Why)
		if in.Step == 0 && starting {
			require.True(t, in.StopUnreported)
			return spec.StepUnreported, nil
		}
		if in.Step == 0 {
			return 37, nil
		}
		// Every node told: rank 0 commits it.
		c := spec.CheckpointSaved{Session: in.Session,
			Ref: spec.CheckpointRef{URL: "mem://", Run: "ddp", Step: in.Step, Key: fmt.Sprintf("ckpt/%d", in.Step)}, Loss: 0.1}
		if refused {
			c = spec.CheckpointSaved{Session: in.Session, Ref: spec.CheckpointRef{Run: "ddp", Step: in.Step},
				Failed: "save checkpoint: no space left on device", Kept: true}
		}
		env.SignalWorkflow(spec.SignalCheckpointSaved, c)
		return in.Step, nil
	}, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
	env.OnActivity(spec.ActivityRunExternal, mock.Anything, mock.Anything).Return(world).After(10 * time.Hour).Times(2)
	env.OnActivity(spec.ActivityRunExternal, mock.Anything, mock.Anything).Return(world).After(time.Minute)
	var waiting spec.RunStatus
	env.RegisterDelayedCallback(func() { waiting = queryStatus(t, env) }, at("12:00").Sub(day0))
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
		Trace: "es.csv", Interruptible: true, Work: spec.Duration(20 * time.Hour)})})
	st := result(t, env)

	mu.Lock()
	require.Equal(t, wantAsked, asked)
	require.Equal(t, []string{"08:00 0", fmt.Sprintf("14:00 %d", held)}, launches)
	mu.Unlock()
	require.Equal(t, spec.PhaseGreenWait, waiting.Phase)
	require.EqualValues(t, held, waiting.Step, "held at the checkpoint asked for at the window's end (or the last one)")
	if held > 0 {
		segs := waiting.Segments
		require.NotEmpty(t, segs)
		require.EqualValues(t, held, segs[len(segs)-1].ToStep, "the launch's training recorded up to where it stopped")
	}
	if refused {
		require.Len(t, k.asked, 1, "the kept checkpoint stored")
		require.EqualValues(t, held, k.asked[0].Step)
	} else {
		require.Empty(t, k.asked)
	}
	require.Equal(t, at("14:00"), waiting.WaitUntil.UTC())
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Empty(t, st.Recoveries)
}

// A resume or an override cuts the wait after a green stop short: the
// world relaunches at once from the checkpoint. After a resume the next
// checkpoint plans again (and stops again); after an override for good
// nothing is planned any more.
func TestExternalGreenResumeAndOverrideCutWait(t *testing.T) {
	for _, tc := range []struct {
		name    string
		signal  string
		arg     any
		starts  []time.Time
		resumes []int64
		waits   int
	}{
		{"resume", spec.SignalResume, nil, []time.Time{day0, at("10:00"), at("14:00")}, []int64{40, 60}, 2},
		{"override", spec.SignalGreenOverride, spec.GreenOverride{}, []time.Time{day0, at("10:00")}, []int64{40}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("10:00"), GPerKWh: 90}, window14}}
			env, g, _ := greenEnv(t, cb)
			env.RegisterDelayedCallback(func() {
				cb.setSlots(window14)
				g.checkpoint(t, 40)
			}, 300*ms)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(tc.signal, tc.arg) }, 2*time.Hour)
			env.RegisterDelayedCallback(func() { g.checkpoint(t, 60) }, 2*time.Hour+300*ms)
			done := 2*time.Hour + 600*ms
			if len(tc.starts) == 3 {
				done = 6*time.Hour + 300*ms
			}
			env.RegisterDelayedCallback(func() { close(g.finish) }, done)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
				Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})})
			st := result(t, env)
			l := g.all()
			var starts []time.Time
			var resumes []int64
			for _, x := range l {
				starts = append(starts, x.at)
				if x.in.Restore != nil {
					resumes = append(resumes, x.in.Restore.Step)
				}
				require.Zero(t, x.in.Restarts)
			}
			require.Equal(t, tc.starts, starts)
			require.Equal(t, tc.resumes, resumes)
			require.Equal(t, tc.waits, st.Green.Waits)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Empty(t, st.Recoveries)
			if tc.signal == spec.SignalGreenOverride {
				require.True(t, st.Green.Overridden)
				for _, p := range cb.plans() {
					require.True(t, p.Now.Before(at("10:00")), "planned at %v while overridden", p.Now)
				}
			}
		})
	}
}

// An external run paused in its green wait and resumed waits for the
// window again (versionResumeEndsPause): the resume ends the pause only.
func TestExternalGreenResumeEndsOnlyThePause(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("10:00"), GPerKWh: 90}, window14}}
	env, g, _ := greenEnv(t, cb)
	env.RegisterDelayedCallback(func() {
		cb.setSlots(window14)
		g.checkpoint(t, 40)
	}, 300*ms)
	var paused spec.RunStatus
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, 2*time.Hour)
	env.RegisterDelayedCallback(func() { paused = queryStatus(t, env) }, 2*time.Hour+time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { close(g.finish) }, 6*time.Hour+300*ms)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
		Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})})
	st := result(t, env)
	var starts []time.Time
	for _, x := range g.all() {
		starts = append(starts, x.at)
	}
	require.Equal(t, spec.PhasePaused, paused.Phase)
	require.Equal(t, []time.Time{day0, at("14:00")}, starts, "the resume at 11:00 ended the pause, not the wait")
	require.Equal(t, spec.PhaseCompleted, st.Phase)
}

// A script that never uploads a checkpoint is planned at launch only (with
// steps unknown: green.work less the time trained): once it runs nothing
// stops it; what it trained is priced at the end.
func TestExternalGreenWithoutCheckpoints(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window14}, gramsPerChunk: 2}
	env, g, _ := greenEnv(t, cb)
	env.RegisterDelayedCallback(func() { cb.setSlots(spec.CarbonSlot{Start: at("20:00"), End: at("22:00")}) }, 6*time.Hour+300*ms)
	env.RegisterDelayedCallback(func() { close(g.finish) }, 6*time.Hour+600*ms)
	s := greenExternalSpec(spec.GreenPolicy{Trace: "es.csv", Work: spec.Duration(3 * time.Hour)})
	s.Steps = 0
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	l := g.all()
	require.Len(t, l, 1)
	require.Equal(t, at("14:00"), l[0].at)
	require.Zero(t, g.cancelled)
	plans := cb.plans()
	require.Len(t, plans, 2)
	for _, p := range plans {
		require.Equal(t, 3*time.Hour, p.Work)
	}
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.True(t, st.Green.Started, "a non-interruptible run entered its window")
	require.InDelta(t, 2, st.Green.Grams, 1e-9)
	require.Len(t, st.Segments, 1)
	require.InDelta(t, 0.6, st.Segments[0].WallSeconds, 1e-9)
}

// With the real planner on a trace: the cleanest hours (14:00–18:00) lie
// past the deadline (12:00), so the job waits only for the best slot
// before it, 10:00–12:00, and trains there; a deadline shorter than the
// work is the built-in runs' stated fallback — train now, with a note.
func TestExternalGreenDeadline(t *testing.T) {
	var csv strings.Builder
	csv.WriteString("time,XX\n")
	for h := range 48 {
		v := map[int]int{8: 300, 9: 300, 10: 100, 11: 200, 12: 300, 13: 300, 14: 20, 15: 20, 16: 20, 17: 20}[h%24]
		if v == 0 {
			v = 400
		}
		fmt.Fprintf(&csv, "%s,%d\n", day0.Truncate(24*time.Hour).Add(time.Duration(h)*time.Hour).Format(time.RFC3339), v)
	}
	trace := filepath.Join(t.TempDir(), "trace.csv")
	require.NoError(t, os.WriteFile(trace, []byte(csv.String()), 0o644))

	for _, tc := range []struct {
		name   string
		work   time.Duration
		launch time.Time
		note   string
	}{
		{"fits", 2 * time.Hour, at("10:00"), ""},
		{"too short", 5 * time.Hour, day0, "deadline too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, g, _ := greenEnv(t, nil)
			env.RegisterActivityWithOptions((&activities.Carbon{}).PlanCarbon, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
			// Callbacks while the launch runs (the clock then follows
			// the wall clock from the launch on).
			off := tc.launch.Sub(day0)
			var plans []*spec.CarbonPlan
			if tc.note == "" {
				env.RegisterDelayedCallback(func() { plans = append(plans, queryStatus(t, env).Green.Plan) }, off+100*ms)
				env.RegisterDelayedCallback(func() { g.checkpoint(t, 50) }, off+300*ms)
				env.RegisterDelayedCallback(func() { plans = append(plans, queryStatus(t, env).Green.Plan) }, off+450*ms)
			}
			env.RegisterDelayedCallback(func() { close(g.finish) }, off+600*ms)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: greenExternalSpec(spec.GreenPolicy{
				Trace: trace, Forecast: spec.ForecastPerfect, Deadline: spec.Duration(4 * time.Hour), Interruptible: true,
				Work: spec.Duration(tc.work)})})
			st := result(t, env)
			l := g.all()
			require.Len(t, l, 1)
			require.Equal(t, tc.launch, l[0].at)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			if tc.note != "" {
				require.Contains(t, st.Green.Note, tc.note)
				require.Contains(t, st.Green.Note, "training without waiting")
				require.Zero(t, st.Green.Waits)
				return
			}
			require.Equal(t, 1, st.Green.Waits)
			require.Len(t, plans, 2)
			for _, p := range plans {
				require.NotNil(t, p)
				require.Equal(t, at("12:00"), p.Deadline.UTC())
				for _, sl := range p.Slots {
					require.False(t, sl.End.After(at("12:00")), "slot %v past the deadline", sl)
				}
			}
			require.Equal(t, at("10:00"), plans[0].Slots[0].Start.UTC())
			require.Less(t, time.Duration(plans[1].Work), time.Second, "re-planned with the measured pace")
			require.Empty(t, st.Green.Note)
		})
	}
}

// An external green run whose nodes have energy meters prices measured
// energy: the nodes' meters are read before each launch, at checkpoints
// at most every external.meter_every (here 0.6 s; the checkpoints between
// wait for the next reading), when a world is stopped and at its end; a
// segment carries the nodes' shares of their host's energy between
// readings × PUE — not the green wait between two launches. A node
// without a reading turns the rest of its launch to the model (all ranks
// or none, every checkpoint recorded at once again); the next launch
// measures again.
func TestExternalGreenMeasuredEnergy(t *testing.T) {
	// One host (both nodes' Host is ""), 400 W, read as a host meter
	// that has counted since before the run.
	host := func(now time.Time) float64 { return 1000 + 400*now.Sub(day0).Seconds() }
	const pue = 1.5
	j := func(d time.Duration) float64 { return 400 * d.Seconds() * pue }
	for _, tc := range []struct {
		name   string
		meter  func(node string, now time.Time) spec.EnergyReading
		priced []float64 // the joules of the segments PlanCarbon priced
		segs   []float64 // the run's segments' joules
		reads  int
	}{
		// Read at the launch, at 0.7 s (checkpoint 20), at the stop after
		// checkpoint 40 (30 and 40 pending), at the relaunch and at the
		// end (60 pending).
		{"measured", func(_ string, now time.Time) spec.EnergyReading {
			return spec.EnergyReading{Joules: host(now), Meter: "rapl"}
		}, []float64{j(700 * ms), j(300 * ms), j(500 * ms)},
			[]float64{j(1000 * ms), j(500 * ms)}, 10},
		// Read at the launches only; every checkpoint recorded at once.
		{"a node without a meter", func(node string, now time.Time) spec.EnergyReading {
			if node == "node-2" {
				return spec.EnergyReading{Reason: "node node-2 has no energy meter"}
			}
			return spec.EnergyReading{Joules: host(now), Meter: "rapl"}
		}, []float64{0, 0, 0, 0, 0}, []float64{0, 0}, 4},
		// node-2's meter fails at 0.7 s: the first launch is modelled from
		// its start, the second measured.
		{"a meter failing during the first launch", func(node string, now time.Time) spec.EnergyReading {
			if node == "node-2" && now.After(day0) && now.Before(at("10:00")) {
				return spec.EnergyReading{Reason: "node node-2: powercap: permission denied"}
			}
			return spec.EnergyReading{Joules: host(now), Meter: "rapl"}
		}, []float64{0, 0, 0, j(500 * ms)}, []float64{0, j(500 * ms)}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("10:00"), GPerKWh: 90}, window14}, gramsPerChunk: 1}
			env, g, _ := greenEnv(t, cb)
			g.meter = tc.meter
			env.RegisterDelayedCallback(func() { g.checkpoint(t, 20) }, 700*ms)
			env.RegisterDelayedCallback(func() { g.checkpoint(t, 30) }, 900*ms)
			env.RegisterDelayedCallback(func() { cb.setSlots(window14) }, 950*ms)
			env.RegisterDelayedCallback(func() { g.checkpoint(t, 40) }, 1000*ms)
			env.RegisterDelayedCallback(func() { g.checkpoint(t, 60) }, 6*time.Hour+400*ms)
			env.RegisterDelayedCallback(func() { close(g.finish) }, 6*time.Hour+500*ms)
			sp := greenExternalSpec(spec.GreenPolicy{Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour), PUE: pue})
			sp.External.MeterEvery = spec.Duration(600 * ms)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: sp})
			st := result(t, env)

			require.Equal(t, spec.PhaseCompleted, st.Phase)
			l := g.all()
			require.Len(t, l, 2, "stopped for the green window and relaunched")
			require.EqualValues(t, 40, l[1].in.Restore.Step)
			require.Equal(t, 1, st.Green.Waits)
			var priced []float64
			for _, c := range cb.calls {
				for _, s := range c.Price {
					priced = append(priced, s.Joules)
				}
			}
			require.InDeltaSlice(t, tc.priced, priced, 1e-6)
			require.Len(t, st.Segments, 2)
			for i, want := range []struct {
				wall     time.Duration
				from, to int64
			}{{1000 * ms, 0, 40}, {500 * ms, 40, 100}} {
				require.InDelta(t, tc.segs[i], st.Segments[i].Joules, 1e-6, "segment %d", i)
				require.InDelta(t, want.wall.Seconds(), st.Segments[i].WallSeconds, 1e-9, "segment %d", i)
				require.Equal(t, want.from, st.Segments[i].FromStep, "segment %d", i)
				require.Equal(t, want.to, st.Segments[i].ToStep, "segment %d", i)
			}
			require.Equal(t, tc.reads, g.reads, "meter readings")
			require.InDelta(t, float64(len(tc.priced)), st.Green.Grams, 1e-9, "each piece priced once")
		})
	}
}

// An external run without a green policy records its trained stretches
// and reads its nodes' meters the same way (PUE 1: the facility's
// overhead is a policy's), so that `green report --trace` can price it
// afterwards; nothing plans. The pace of a checkpoint waiting for a
// reading counts at once.
func TestExternalRunMeasuredWithoutPolicy(t *testing.T) {
	env, g, timers := greenEnv(t, nil)
	g.meter = func(_ string, now time.Time) spec.EnergyReading {
		return spec.EnergyReading{Joules: 7 + 250*now.Sub(day0).Seconds(), Meter: "npu-smi"}
	}
	var mid spec.RunStatus
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 40) }, 400*ms)
	env.RegisterDelayedCallback(func() { mid = queryStatus(t, env) }, 500*ms)
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 80) }, 700*ms)
	env.RegisterDelayedCallback(func() { close(g.finish) }, 900*ms)
	sp := externalSpec(2)
	sp.External.MeterEvery = spec.Duration(600 * ms)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: sp})
	st := result(t, env)

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Nil(t, st.Green)
	require.Empty(t, withoutStragglerChecks(timers()), "no green wait")
	require.Empty(t, mid.Segments, "checkpoint 40 waits for a reading")
	require.Len(t, st.Segments, 1)
	sg := st.Segments[0]
	require.Equal(t, day0, sg.Start.UTC())
	require.Equal(t, day0.Add(900*ms), sg.End.UTC())
	require.EqualValues(t, 0, sg.FromStep)
	require.EqualValues(t, 100, sg.ToStep)
	require.InDelta(t, 250*0.9, sg.Joules, 1e-6, "the host's 250 W over 0.9 s, counted once")
	require.Equal(t, 2, sg.Chunks, "recorded at checkpoint 80 (0.7 s ≥ 0.6) and at the end")
	require.Equal(t, 6, g.reads, "2 nodes at the launch, at checkpoint 80 and at the end")
}

// meter_every bounds the readings: by default 3 minutes per node (a round
// is three history events per node), or what the job sets.
func TestMeterEvery(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		set   time.Duration
		want  time.Duration
	}{
		{1, 0, 3 * time.Minute},
		{2, 0, 6 * time.Minute},
		{16, 0, 48 * time.Minute},
		{16, 10 * time.Minute, 10 * time.Minute},
	} {
		r := &run{spec: externalSpec(tc.nodes)}
		r.spec.External.MeterEvery = spec.Duration(tc.set)
		r.st.Membership.Nodes = testNodes(make([]string, tc.nodes)...)
		if got := r.meterEvery(); got != tc.want {
			t.Errorf("%d nodes, meter_every %v: every %v, want %v", tc.nodes, tc.set, got, tc.want)
		}
	}
}

// A resume that cut the wait is not spent by a launch that fails before
// its first checkpoint (node-2's rank exits): the relaunch starts at once,
// not at the 14:00 window (versionResumeOutlivesLoss).
func TestExternalGreenResumeOutlivesALostLaunch(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window14}, gramsPerChunk: 1}
	env, g, _ := greenEnv(t, cb)
	g.crash = make(chan struct{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
	env.RegisterDelayedCallback(func() { close(g.crash) }, 2*time.Hour+time.Second)
	sp := greenExternalSpec(spec.GreenPolicy{Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})
	sp.HeartbeatTimeout = spec.Duration(time.Second)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: sp})
	st := result(t, env)
	require.Len(t, st.Recoveries, 1)
	l := g.all()
	require.Len(t, l, 2)
	require.Equal(t, at("10:00"), l[0].at, "the resume launched it")
	require.True(t, l[1].at.Before(at("10:05")), "relaunched at once (%s), not at the window", l[1].at.Format(time.TimeOnly))
}

// A launch that fails costs what it trained after its last checkpoint: a
// lost segment, priced like the others; the relaunch trains those steps
// again from the checkpoint.
func TestExternalGreenLostLaunch(t *testing.T) {
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: at("18:00"), GPerKWh: 90}}, gramsPerChunk: 1}
	env, g, _ := greenEnv(t, cb)
	g.crash = make(chan struct{})
	env.RegisterDelayedCallback(func() { g.checkpoint(t, 20) }, 700*ms)
	env.RegisterDelayedCallback(func() { close(g.crash) }, time.Second)
	sp := greenExternalSpec(spec.GreenPolicy{Trace: "es.csv", Interruptible: true, Work: spec.Duration(10 * time.Hour)})
	sp.HeartbeatTimeout = spec.Duration(time.Second) // the grace after the crash: 2 s (wall clock)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: sp})
	st := result(t, env)

	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.Len(t, st.Recoveries, 1)
	l := g.all()
	require.Len(t, l, 2)
	require.EqualValues(t, 20, l[1].in.Restore.Step)
	var lost []spec.Segment
	for _, sg := range st.Segments {
		if sg.Lost {
			lost = append(lost, sg)
		}
	}
	require.Len(t, lost, 1, "segments %+v", st.Segments)
	require.Equal(t, day0.Add(700*ms), lost[0].Start.UTC(), "from the last checkpoint")
	require.False(t, lost[0].End.Before(day0.Add(time.Second)), "to the failure")
	require.EqualValues(t, 20, lost[0].FromStep)
	require.EqualValues(t, 25, lost[0].ToStep, "the step the rank exited at")
	require.Equal(t, 2, lost[0].Nodes)
	var priced int
	for _, c := range cb.calls {
		for _, sg := range c.Price {
			if sg.Lost {
				priced++
			}
		}
	}
	require.Equal(t, 1, priced, "the lost segment priced")
}
