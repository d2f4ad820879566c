package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// day0 is the virtual start of the green tests: 08:00 UTC.
var day0 = time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC)

func at(hhmm string) time.Time {
	t, err := time.Parse("15:04", hhmm)
	if err != nil {
		panic(err)
	}
	return time.Date(day0.Year(), day0.Month(), day0.Day(), t.Hour(), t.Minute(), 0, 0, time.UTC)
}

// fakeCarbon plays PlanCarbon: the plan is fixed (one slot), every chunk
// costs gramsPerChunk.
type fakeCarbon struct {
	mu            sync.Mutex
	calls         []spec.CarbonInput
	slots         []spec.CarbonSlot
	gramsPerChunk float64
	// planErrs: the first planErrs plans fail (PlanError); priceErrs: the
	// first priceErrs calls that price fail (PriceError).
	planErrs, priceErrs int
	// step is the plans' Step; slotsAt, when set, gives the slots of a
	// plan made at now (else slots).
	step    time.Duration
	slotsAt func(now time.Time) []spec.CarbonSlot
}

func (f *fakeCarbon) plan(_ context.Context, in spec.CarbonInput) (spec.CarbonOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in)
	var out spec.CarbonOutput
	if len(in.Price) > 0 && f.priceErrs > 0 {
		f.priceErrs--
		out.PriceError = "carbon: the provider answered 503"
	} else {
		for range in.Price {
			out.Priced = append(out.Priced, spec.PricedSegment{KWh: 0.1, GPerKWh: 10 * f.gramsPerChunk, Grams: f.gramsPerChunk})
		}
	}
	if in.Plan && f.planErrs > 0 {
		f.planErrs--
		out.PlanError = "carbon: deadline too short for the work"
	} else if in.Plan {
		slots := f.slots
		if f.slotsAt != nil {
			slots = f.slotsAt(in.Now)
		}
		out.Plan = &spec.CarbonPlan{MadeAt: in.Now, Slots: slots, Work: spec.Duration(in.Work), Step: spec.Duration(f.step)}
		out.NowGPerKWh = 300
	}
	return out, nil
}

func (f *fakeCarbon) planned() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, c := range f.calls {
		if c.Plan {
			out = append(out, c.Now)
		}
	}
	return out
}

// controlEnv is newRunEnv plus PlanCarbon and a record of the virtual
// times at which chunks started (rank 0 only).
func controlEnv(t *testing.T, cl *fakeCluster, ch *fakeChunks, cb *fakeCarbon) (*testsuite.TestWorkflowEnvironment, func() []time.Time) {
	env := newRunEnv(t, cl, ch)
	if cb != nil {
		env.RegisterActivityWithOptions(cb.plan, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	}
	var mu sync.Mutex
	var starts []time.Time
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name != spec.ActivityTrainChunk {
			return
		}
		var in spec.ChunkInput
		if args.Get(&in) == nil && in.Rank == 0 {
			mu.Lock()
			starts = append(starts, env.Now().UTC())
			mu.Unlock()
		}
	})
	return env, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), starts...)
	}
}

func queryStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) spec.RunStatus {
	t.Helper()
	v, err := env.QueryWorkflow(spec.QueryStatus)
	require.NoError(t, err)
	var st spec.RunStatus
	require.NoError(t, v.Get(&st))
	return st
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) spec.RunStatus {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	return st
}

// A pause that arrives mid-chunk holds the run at the next boundary; the
// step stays put until the resume; then the run completes.
func TestTrainingRunPauseResume(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env, starts := controlEnv(t, cl, ch, nil)
	env.SetStartTime(day0)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 100 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalPause, nil)
		}
	}
	var held []spec.RunStatus
	for _, d := range []time.Duration{time.Hour, 2 * time.Hour} {
		env.RegisterDelayedCallback(func() { held = append(held, queryStatus(t, env)) }, d)
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour+time.Minute)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.Len(t, held, 2)
	for _, h := range held {
		require.Equal(t, spec.PhasePaused, h.Phase)
		require.EqualValues(t, 200, h.Step, "held at the boundary after the chunk that was running")
		require.True(t, h.PauseRequested)
		require.Contains(t, h.Detail, "paused at step 200")
	}
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 400, st.Step)
	require.False(t, st.PauseRequested)
	got := starts()
	require.Len(t, got, 4)
	require.Equal(t, []time.Time{day0, day0}, got[:2])
	for _, s := range got[2:] {
		require.Equal(t, day0.Add(2*time.Hour+time.Minute), s, "no chunk ran while paused")
	}
}

// A signal under a name the run does not know (`temporal workflow signal
// --name pasue`) changes nothing; the status names it with the name it
// most likely meant, while a known one not read yet is not listed.
func TestTrainingRunNamesIgnoredSignals(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 100 && in.Rank == 0 {
			env.SignalWorkflow("pasue", nil)
			env.SignalWorkflow("stop-now", map[string]bool{"force": true})
			env.SignalWorkflow(spec.SignalPause, nil)
		}
	}
	var held spec.RunStatus
	env.RegisterDelayedCallback(func() {
		held = queryStatus(t, env)
		env.SignalWorkflow(spec.SignalResume, nil)
	}, time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, spec.PhasePaused, held.Phase, "the pause acted on")
	require.Equal(t, []string{`"pasue" (did you mean pause?)`, `"stop-now"`}, held.IgnoredSignals)
	require.EqualValues(t, 300, st.Step)
}

// TestTrainingRunDescribesItsHandlers: the Web UI lists a run's query and
// signals with what each does and the command that sends it (the
// workflow's metadata query).
func TestTrainingRunDescribesItsHandlers(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	var md sdkpb.WorkflowMetadata
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 100 && in.Rank == 0 {
			v, err := queryInActivity(env, "__temporal_workflow_metadata")
			require.NoError(t, err)
			require.NoError(t, v.Get(&md))
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	result(t, env)
	described := map[string]string{}
	for _, q := range md.GetDefinition().GetQueryDefinitions() {
		described[q.GetName()] = q.GetDescription()
	}
	for _, sig := range md.GetDefinition().GetSignalDefinitions() {
		described[sig.GetName()] = sig.GetDescription()
	}
	for name, cmd := range map[string]string{
		spec.QueryStatus: "`cann-train status`", spec.SignalPause: "`cann-train pause RUN`", spec.SignalResume: "`cann-train resume RUN`",
		spec.SignalRescale: "`cann-train scale RUN N`", spec.SignalGreenOverride: "`cann-train green override RUN`",
		spec.SignalEvict: "`cann-train nodes drain`", spec.SignalInjectFault: "`cann-train fault kill|freeze",
	} {
		require.Contains(t, described[name], cmd, "%s: %q", name, described[name])
	}
}

func TestIgnoredSignals(t *testing.T) {
	for _, tc := range []struct {
		unread, want []string
	}{
		{nil, nil},
		{[]string{spec.SignalPause, spec.SignalCheckpointSaved}, nil},
		{[]string{"resme", "Pause", "scale"}, []string{`"Pause" (did you mean pause?)`, `"resme" (did you mean resume?)`, `"scale" (did you mean rescale?)`}},
		{[]string{"xyzzy-plugh"}, []string{`"xyzzy-plugh"`}},
	} {
		require.Equal(t, tc.want, ignoredSignals(tc.unread), "%v", tc.unread)
	}
}

// Outside the planned slot the run waits on a timer until the slot starts
// (visible in the status), then trains.
func TestTrainingRunGreenWaitThenRun(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}, gramsPerChunk: 1}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	var timers []time.Duration
	env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
	var waiting spec.RunStatus
	env.RegisterDelayedCallback(func() { waiting = queryStatus(t, env) }, 5*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.Equal(t, spec.PhaseGreenWait, waiting.Phase)
	require.Equal(t, at("14:00"), waiting.WaitUntil.UTC())
	require.Contains(t, waiting.Detail, "green window 14:00–18:00 UTC, 120 g/kWh); `cann-train green override t` trains now")
	require.EqualValues(t, 0, waiting.Step)
	require.NotNil(t, waiting.Green)
	require.Len(t, waiting.Green.Plan.Slots, 1)
	require.Equal(t, day0, waiting.Green.WaitingSince.UTC(), "the wait in progress, since")
	require.InDelta(t, 5*3600, waiting.Green.Waited(at("13:00")), 1, "counted before it ends")
	require.Contains(t, timers, 6*time.Hour, "a durable timer to the slot start")

	require.Equal(t, []time.Time{at("14:00"), at("14:00"), at("14:00")}, starts(), "every chunk in the slot")
	require.EqualValues(t, 300, st.Step)
	require.Equal(t, 1, st.Green.Waits)
	require.InDelta(t, 6*3600, st.Green.WaitedSeconds, 1)
	require.True(t, st.Green.WaitingSince.IsZero())
	require.InDelta(t, 3, st.Green.Grams, 1e-9, "every chunk priced, the last one at the end")
	require.Equal(t, []time.Time{day0, at("14:00"), at("14:00"), at("14:00")}, cb.planned(), "re-planned at every boundary")
	require.Equal(t, spec.PhaseCompleted, st.Phase)
}

// A contiguous job whose first plan fails trains at once and, having
// entered its window so, runs on to the end: the later plans (which would
// find a window ahead) are not made. Before, it trained one chunk and
// then parked mid-run for the window.
func TestTrainingRunContiguousUnplannedRunsOn(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}, planErrs: 1, priceErrs: 1}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 300, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv"}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, []time.Time{day0, day0, day0}, starts(), "no wait after the first chunk")
	require.Zero(t, st.Green.Waits)
	require.True(t, st.Green.Started)
	require.Equal(t, []time.Time{day0}, cb.planned(), "planned once: the failed plan")
	require.Equal(t, "green plan failed: carbon: deadline too short for the work; training without waiting", st.Green.Note,
		"the plan's failure stays in the status")
	require.Empty(t, st.Green.PriceNote, "the chunk priced later clears the pricing note")
}

// A pause between two chunks ends their segment: the chunks closer than
// segmentGap merge, but never across a hold, which would price and meter
// the hold as training (green report's figures).
func TestTrainingRunSegmentsBreakAtHolds(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	env.SetStartTime(day0)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 10 {
			env.SignalWorkflow(spec.SignalPause, nil)
		}
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, time.Minute)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 40, ChunkSteps: 10}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	var spans [][2]int64
	for _, sg := range st.Segments {
		spans = append(spans, [2]int64{sg.FromStep, sg.ToStep})
	}
	require.Equal(t, [][2]int64{{0, 20}, {20, 40}}, spans, "chunks 9 s apart merge; not across the pause")
}

// A resume cuts a green wait short: the next chunk starts at once; the
// boundary after it plans again.
func TestTrainingRunResumeCutsGreenWait(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 200, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, []time.Time{at("10:00"), at("14:00")}, starts())
	require.Equal(t, 2, st.Green.Waits)
}

// A pause while the run waits for its window, and the resume that ends
// it, leave the wait as it was: the run waits for the window again
// (versionResumeEndsPause); a second resume, in that wait, cuts it. Before,
// the resume that ended the pause cut the wait too, and a contiguous job
// ran to the end at once in the hours it was waiting out.
func TestTrainingRunResumeEndsOnlyThePause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resumes []time.Duration // after day0 (08:00); the pause comes at 09:00
		want    []time.Time
	}{
		{"waits again", []time.Duration{2 * time.Hour}, []time.Time{at("14:00"), at("14:00")}},
		{"a second resume cuts the wait", []time.Duration{2 * time.Hour, 3 * time.Hour}, []time.Time{at("11:00"), at("11:00")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a")}
			ch := &fakeChunks{}
			cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
			env, starts := controlEnv(t, cl, ch, cb)
			env.SetStartTime(day0)
			var paused spec.RunStatus
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, time.Hour)
			env.RegisterDelayedCallback(func() { paused = queryStatus(t, env) }, 90*time.Minute)
			for _, d := range tc.resumes {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, d)
			}
			s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 200, ChunkSteps: 100,
				Green: &spec.GreenPolicy{Trace: "es.csv"}}.WithDefaults() // contiguous
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, spec.PhasePaused, paused.Phase)
			require.Equal(t, tc.want, starts())
			require.EqualValues(t, 200, st.Step)
		})
	}
}

// A resume spent on a chunk that fails (node-2 lost, replaced by the
// spare) carries to the next boundary: the recovered run trains at once
// instead of waiting for 14:00 again; the chunk that completes spends it,
// and the boundary after plans again (versionResumeOutlivesLoss).
func TestTrainingRunResumeOutlivesAFailedChunk(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1")}
	ch := &fakeChunks{}
	// node-2 dies only once node-1's chunk has started: a failure that
	// reached the run first would cancel node-1's chunk before it started,
	// and the test environment reports no start for a chunk cancelled so.
	firstStarted := make(chan struct{})
	var once sync.Once
	ch.onStart = func(in spec.ChunkInput) {
		if in.Membership.Generation == 1 && in.Rank == 0 {
			once.Do(func() { close(firstStarted) })
		}
	}
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 0 || in.Membership.Generation != 1 {
			return nil
		}
		if in.Membership.Nodes[in.Rank].ID == "node-2" {
			select {
			case <-firstStarted:
			case <-time.After(10 * time.Second):
				return errors.New("node-1's first chunk never started")
			}
			return temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 50}) // a dead process
		}
		return temporal.NewApplicationErrorWithCause("rank 1 link lost", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 50})
	}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour),
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Len(t, st.Recoveries, 1)
	got := starts()
	require.Len(t, got, 4, "the failed chunk, its retry, and two more")
	require.Equal(t, at("10:00"), got[0], "the resume let the first chunk start")
	require.True(t, got[1].Before(at("10:05")), "the recovered run trained at once (%s), not at the window", got[1].Format(time.TimeOnly))
	require.Equal(t, []time.Time{at("14:00"), at("14:00")}, got[2:], "the completed chunk spent the resume")
	require.Equal(t, 2, st.Green.Waits)
}

// A contiguous job that trains before its window — a resume cut the
// wait short, or an override set the policy aside and was then cleared —
// has entered its window and runs on to the end; before, the next
// boundary parked it mid-run until its planned window (14:00).
func TestTrainingRunContiguousRunsOnAfterOverrideOrResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		at2h  func(env *testsuite.TestWorkflowEnvironment)
		chunk func(env *testsuite.TestWorkflowEnvironment, in spec.ChunkInput)
	}{
		{"resume", func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(spec.SignalResume, nil) }, nil},
		{"override cleared", func(env *testsuite.TestWorkflowEnvironment) {
			env.SignalWorkflow(spec.SignalGreenOverride, spec.GreenOverride{})
		}, func(env *testsuite.TestWorkflowEnvironment, in spec.ChunkInput) {
			if in.From == 100 {
				env.SignalWorkflow(spec.SignalGreenOverride, spec.GreenOverride{Clear: true})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a")}
			ch := &fakeChunks{}
			cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
			env, starts := controlEnv(t, cl, ch, cb)
			env.SetStartTime(day0)
			env.RegisterDelayedCallback(func() { tc.at2h(env) }, 2*time.Hour)
			if tc.chunk != nil {
				ch.onStart = func(in spec.ChunkInput) { tc.chunk(env, in) }
			}
			s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 300, ChunkSteps: 100,
				Green: &spec.GreenPolicy{Trace: "es.csv"}}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, []time.Time{at("10:00"), at("10:00"), at("10:00")}, starts(), "once it trains, it runs on")
			require.True(t, st.Green.Started)
			require.Equal(t, 1, st.Green.Waits)
		})
	}
}

// A run waiting for its window decides again at every step of the signal
// (the plan's Step): the 11:00 re-plan finds now clean (a window the 08:00
// plan had not foreseen) and the run trains then, not at 14:00; the wait
// counts once, and re-checks happen on the hour.
func TestTrainingRunGreenWaitDecidesEveryStep(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{step: time.Hour, slotsAt: func(now time.Time) []spec.CarbonSlot {
		if !now.Before(at("11:00")) && now.Before(at("12:00")) {
			return []spec.CarbonSlot{{Start: at("11:00"), End: at("12:00"), GPerKWh: 40}}
		}
		return []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}
	}}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0.Add(20 * time.Minute)) // 08:20
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 200, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, []time.Time{at("11:00"), at("11:00")}, starts(), "trained at the 11:00 decision")
	require.Equal(t, []time.Time{at("08:20"), at("09:00"), at("10:00"), at("11:00"), at("11:00")}, cb.planned(),
		"decided again on every hour of the wait")
	require.Equal(t, 1, st.Green.Waits, "one wait, re-checked")
}

// A green wait that fills the history continues as new at a re-decision
// (versionRolloverInGreenWait) and the next run waits on — one wait, not
// two — until its window: before, a wait of days grew one history.
func TestTrainingRunGreenWaitContinuesAsNew(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{step: time.Hour, slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
	env, _ := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0.Add(20 * time.Minute)) // 08:20
	// At 10:20 the history is long.
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 2*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 200, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, at("11:00"), env.Now().UTC(), "at the first re-decision after the history filled")
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	require.True(t, next.State.GreenRecheck, "the wait goes on in the next run")
	require.Equal(t, spec.PhaseGreenWait, next.State.Status.Phase)
	require.EqualValues(t, 0, next.State.Status.Step)
	require.Equal(t, 1, next.State.Status.Green.Waits)
	ch.mu.Lock()
	require.Empty(t, ch.inputs, "no chunk ran")
	ch.mu.Unlock()

	env2, starts := controlEnv(t, cl, ch, cb)
	env2.SetStartTime(at("11:00"))
	continueRun(env2, next)
	st := result(t, env2)
	require.Equal(t, []time.Time{at("14:00"), at("14:00")}, starts(), "trained in the window")
	require.Equal(t, 1, st.Green.Waits, "one wait, across the two runs")
	require.Equal(t, 1, cl.calls, "its node kept across")
}

// recentSegments: what PlanCarbon is sent of the run's training, so that
// a re-plan knows the run in progress (min_slot holds for its last slot
// too) without the control worker remembering it.
func TestRecentSegments(t *testing.T) {
	seg := func(from, to string) spec.Segment { return spec.Segment{Start: at(from), End: at(to)} }
	segs := []spec.Segment{seg("08:00", "09:00"), seg("10:00", "11:30"), seg("12:00", "13:00")}
	for _, tc := range []struct {
		now  string
		keep time.Duration
		want int // the last want segments
	}{
		{"13:00", time.Hour, 1},
		{"13:00", 90 * time.Minute, 2},
		{"13:00", 10 * time.Hour, 3},
		{"15:00", time.Hour, 0},
	} {
		got := recentSegments(segs, at(tc.now), tc.keep)
		require.Equal(t, segs[len(segs)-tc.want:], got, "now %s, keep %s", tc.now, tc.keep)
	}
	require.Empty(t, recentSegments(nil, at("13:00"), time.Hour))
}

// Rescale up, then down, each at the next chunk boundary: a new generation
// from the checkpoint at the current step, the global batch unchanged.
func TestTrainingRunRescaleUpAndDown(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3", "n4")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		switch {
		case in.From == 100 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 4})
		case in.From == 300 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 1})
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, MinNodes: 1, Steps: 500, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.EqualValues(t, 500, st.Step)
	require.Equal(t, []string{"n1"}, st.Nodes)
	require.EqualValues(t, 3, st.Generation)
	require.Len(t, st.Rescalings, 2)
	up, down := st.Rescalings[0], st.Rescalings[1]
	require.Equal(t, spec.Rescaling{Generation: 2, AtStep: 200, FromNodes: 2, ToNodes: 4, Added: []string{"n3", "n4"},
		At: up.At, ResumeStep: 200}, up)
	require.Equal(t, []string{"n2", "n3", "n4"}, down.Removed)
	require.EqualValues(t, 400, down.AtStep)
	require.Equal(t, 64, st.GlobalBatch)

	want := map[int64]struct {
		world int
		gen   int64
	}{0: {2, 1}, 100: {2, 1}, 200: {4, 2}, 300: {4, 2}, 400: {1, 3}}
	for from, ins := range ch.byFrom() {
		w := want[from]
		require.Len(t, ins, w.world, "chunk from %d", from)
		for _, in := range ins {
			require.Equal(t, w.gen, in.Membership.Generation)
			require.Equal(t, 64, in.GlobalBatch, "rescaled runs keep the global batch")
			if from == 200 || from == 400 {
				require.EqualValues(t, from, in.Restore.Step, "a new generation resumes from the checkpoint at the current step")
			}
		}
	}
	require.Equal(t, []string{"n1"}, ids(cl.held), "the Cluster got the released nodes back")
}

// With several ranks per node a rescale counts ranks: every rank needs an
// example of the global batch (2 per rank × 2 nodes × 4 ranks = 16), so 5
// nodes (20 ranks) are refused and 4 (16) taken; a rescale without a count
// is refused too, and the status says why.
func TestTrainingRunRescaleCountsRanks(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3", "n4", "n5")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		switch {
		case in.From == 100 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 5})
		case in.From == 200 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 4})
		case in.From == 300 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, map[string]any{"node": 4}) // a misspelt field: no count
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, RanksPerNode: 4, BatchPerRank: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, `a rescale signal refused: its payload {"node":4}: json: unknown field "node" (want {"nodes": N})`, st.RefusedRescale,
		"the status says why the last rescale was refused")

	require.EqualValues(t, 400, st.Step)
	require.Equal(t, 16, st.GlobalBatch)
	require.Equal(t, 4, st.RanksPerNode)
	require.Len(t, st.Rescalings, 1, "5 nodes of 4 ranks refused")
	require.Equal(t, 4, st.Rescalings[0].ToNodes)
	require.Len(t, st.Nodes, 4)
}

// Control signals whose payloads do not decode (sent by hand: `temporal
// workflow signal --input '{"nodes": "two"}'`) are refused, named in the
// status, and the run goes on: a later rescale is applied. (With Receive
// in the selector's callbacks every workflow task panicked from then on.)
func TestTrainingRunRefusesMalformedSignals(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		switch {
		case in.From == 100 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, map[string]any{"nodes": "two"})
			env.SignalWorkflow(spec.SignalEvict, []byte{0xff}) // (a binary payload)
			env.SignalWorkflow(spec.SignalPause, "anything")   // (read as no payload)
			env.SignalWorkflow(spec.SignalResume, 42)
		case in.From == 200 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		case in.From == 300 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalGreenOverride, map[string]any{"until": "tomorrow"})
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.EqualValues(t, 400, st.Step)
	require.Len(t, st.Rescalings, 1, "the rescale after the malformed ones")
	require.Equal(t, 3, st.Rescalings[0].ToNodes)
	require.Empty(t, st.RefusedRescale, "an accepted rescale clears the refusal")
	require.Equal(t, `green-override signal refused: its payload {"until":"tomorrow"}: parsing time "tomorrow" as "2006-01-02T15:04:05Z07:00": cannot parse "tomorrow" as "2006"`,
		st.RefusedSignal, "the status keeps the last refusal")
	require.False(t, st.PauseRequested)
}

// TestTrainingRunRefusesUnknownSignalFields: a rescale or green-override
// payload that names a field its type lacks is refused, not read without
// it: a misspelt "clear" turned the override on, and the run trained
// outside its window; a rescale with a stray field was applied.
func TestTrainingRunRefusesUnknownSignalFields(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	var mid spec.RunStatus
	ch.onStart = func(in spec.ChunkInput) {
		switch {
		case in.From == 100 && in.Rank == 0:
			env.SignalWorkflow(spec.SignalGreenOverride, map[string]any{"clearr": true})
		case in.From == 200 && in.Rank == 0:
			v, err := queryInActivity(env, spec.QueryStatus)
			require.NoError(t, err)
			require.NoError(t, v.Get(&mid))
			env.SignalWorkflow(spec.SignalRescale, map[string]any{"nodes": 3, "force": true})
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, `green-override signal refused: its payload {"clearr":true}: json: unknown field "clearr"`, mid.RefusedSignal)
	require.Empty(t, st.Rescalings, "the rescale with a stray field is refused")
	require.Equal(t, `a rescale signal refused: its payload {"force":true,"nodes":3}: json: unknown field "force" (want {"nodes": N})`, st.RefusedRescale)
	require.Len(t, st.Nodes, 2)
}

// TestTrainingRunRescaleDuringRescale: a rescale signalled while another
// is under way (its nodes being acquired) is applied after it, not
// dropped when the first ends: after a scale-up (which grows as a
// shrunk run grows back: here at the same boundary), and after a
// scale-down (versionNewerRescale; before, the run stayed on 2 nodes).
func TestTrainingRunRescaleDuringRescale(t *testing.T) {
	for _, tc := range []struct {
		name          string
		nodes, min    int
		first, second int
		want          []string
	}{
		{"up, then down", 2, 0, 3, 2, []string{"n1", "n2"}},
		{"down, then down", 3, 1, 2, 1, []string{"n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
			ch := &fakeChunks{}
			env, _ := controlEnv(t, cl, ch, nil)
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 100 && in.Rank == 0 {
					env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: tc.first})
				}
			}
			var once sync.Once
			cl.onAcquire = func(req spec.AcquireRequest) {
				if req.Count == tc.first {
					once.Do(func() { env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: tc.second}) })
				}
			}
			s := spec.RunSpec{Name: "t", Nodes: tc.nodes, MinNodes: tc.min, Steps: 400, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.EqualValues(t, 400, st.Step)
			require.Len(t, st.Rescalings, 2, "both rescales applied: %+v", st.Rescalings)
			require.Equal(t, []int{tc.first, tc.second}, []int{st.Rescalings[0].ToNodes, st.Rescalings[1].ToNodes})
			require.GreaterOrEqual(t, st.Rescalings[1].AtStep, st.Rescalings[0].AtStep)
			require.Equal(t, tc.want, st.Nodes)
			require.Zero(t, st.PendingNodes)
			require.Len(t, ch.byFrom()[300], tc.second, "the last chunk on the second rescale's nodes")
		})
	}
}

// With checkpoints sparser than chunks, a rescale first lets one chunk
// checkpoint, so that no trained step is lost.
func TestTrainingRunRescaleWaitsForCheckpoint(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 0 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, CheckpointEvery: 400}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	chunks := ch.byFrom()
	require.Len(t, chunks[100], 2, "the chunk after the signal still runs on 2 nodes")
	require.True(t, chunks[100][0].Checkpoint, "…and checkpoints at its end")
	require.Len(t, chunks[200], 3)
	require.EqualValues(t, 200, chunks[200][0].Restore.Step)
	require.False(t, chunks[200][0].Checkpoint, "back to the checkpoint schedule")
	require.EqualValues(t, 200, st.Rescalings[0].AtStep)
}

// loseRank1At100 fails the first generation's chunk from step 100: its
// peers lost rank 1 at step 130.
func loseRank1At100(in spec.ChunkInput) error {
	if in.From != 100 || in.Membership.Generation != 1 {
		return nil
	}
	return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 130})
}

// A node fails and no spare is free: the run goes on with the healthy
// nodes (min_nodes allows it) from the last checkpoint.
func TestTrainingRunShrinksWithoutSpare(t *testing.T) {
	fail := loseRank1At100
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{fail: fail}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.EqualValues(t, 300, st.Step)
	require.Equal(t, []string{"a", "c"}, st.Nodes)
	require.Len(t, st.Recoveries, 1)
	rec := st.Recoveries[0]
	require.True(t, rec.Shrunk)
	require.Equal(t, []string{"b"}, rec.FailedNodes)
	require.Empty(t, rec.Replacement)
	require.EqualValues(t, 100, rec.ResumeStep)
	for _, in := range ch.byFrom()[200] {
		require.Len(t, in.Membership.Nodes, 2)
		require.Equal(t, 96, in.GlobalBatch, "the global batch of the 3 nodes it started with")
	}

	// Without min_nodes below nodes the run fails clearly, as before.
	cl2 := &fakeCluster{pool: testNodes("a", "b", "c")}
	env2 := newRunEnv(t, cl2, &fakeChunks{fail: fail})
	s.MinNodes = 3
	env2.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	err := env2.GetWorkflowError()
	require.Error(t, err)
	require.Contains(t, err.Error(), "replace node(s) [b] (peers lost node(s) [b]: lost): ", "says why b was lost")
}

// A run that went on with fewer nodes grows back when the lost node's
// worker returns. It asks only once time has passed since the shrink (it
// had just taken every free node; here the chunks take no time, so a
// pause lets an hour pass): at 400 nothing is free, and it does not ask
// again for a minute (not at 500); after the next pause the returned node
// takes the next rank at 600, from the checkpoint there. A rescale then
// sets the size itself: nothing to grow back to.
func TestTrainingRunGrowsBackAfterShrinking(t *testing.T) {
	fail := loseRank1At100
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{fail: fail}
	env, _ := controlEnv(t, cl, ch, nil)
	var shrunk spec.RunStatus
	calls := map[int64]int{} // acquires before the chunk from
	ch.onStart = func(in spec.ChunkInput) {
		if in.Rank != 0 {
			return
		}
		cl.mu.Lock()
		calls[in.From] = cl.calls
		if in.From == 500 {
			delete(cl.failed, "b") // its worker came back
		}
		cl.mu.Unlock()
		switch in.From {
		case 300, 500:
			env.SignalWorkflow(spec.SignalPause, nil)
		case 700:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 2})
		}
	}
	env.RegisterDelayedCallback(func() {
		shrunk = queryStatus(t, env)
		env.SignalWorkflow(spec.SignalResume, nil)
	}, time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 2*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 900, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.EqualValues(t, 900, st.Step)
	require.Equal(t, []string{"a", "c"}, shrunk.Nodes, "paused at 400 on the two left")
	require.Equal(t, 3, shrunk.TargetNodes)
	require.Equal(t, map[int64]int{0: 1, 100: 2, 200: 2, 300: 2, 400: 3, 500: 3, 600: 4, 700: 4, 800: 5}, calls,
		"start; recovery (before the retried chunk from 100); no ask until time passed; at 400 one that found nothing free; none at 500, a minute not passed; at 600 the regrow; at 800 the rescale")
	chunks := ch.byFrom()
	for from, n := range map[int64]int{200: 2, 300: 2, 400: 2, 500: 2, 600: 3, 800: 2} {
		require.Len(t, chunks[from], n, "chunk from %d", from)
	}
	require.EqualValues(t, 600, chunks[600][0].Restore.Step)
	require.Equal(t, "b", chunks[600][2].Membership.Nodes[2].ID, "the returning node takes the next rank")
	require.Len(t, st.Rescalings, 2, "the ask that found nothing is not recorded")
	grew := st.Rescalings[0]
	require.True(t, grew.Regrow)
	require.Equal(t, spec.Rescaling{Generation: 3, AtStep: 600, FromNodes: 2, ToNodes: 3, Added: []string{"b"}, At: grew.At,
		ResumeStep: 600, Reason: "growing back to 3 nodes", Regrow: true}, grew)
	require.Equal(t, 2, st.Rescalings[1].ToNodes)
	require.Zero(t, st.TargetNodes, "the rescale to 2 is the plan now")
	require.Len(t, chunks[800], 2, "…and it stays at 2")
}

// green-override ends a wait and ignores the policy until its time; then
// the plan applies again.
func TestTrainingRunGreenOverride(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: at("14:00"), End: at("18:00"), GPerKWh: 120}}}
	env, starts := controlEnv(t, cl, ch, cb)
	env.SetStartTime(day0)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(spec.SignalGreenOverride, spec.GreenOverride{Until: at("10:00")})
	}, time.Hour) // 09:00
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 0 {
			env.SignalWorkflow(spec.SignalPause, nil) // hold until 11:00
		}
	}
	var overridden spec.RunStatus
	env.RegisterDelayedCallback(func() { overridden = queryStatus(t, env) }, 90*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, 3*time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 300, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	// 09:00 the override ends the wait; 11:00 the resume ends the pause,
	// and only the pause (versionResumeEndsPause): the override is over,
	// so the chunks left wait for the slot.
	require.Equal(t, []time.Time{at("09:00"), at("14:00"), at("14:00")}, starts())
	require.True(t, overridden.Green.Overridden)
	require.Equal(t, at("10:00"), overridden.Green.OverrideUntil.UTC())
	require.False(t, st.Green.Overridden)

	// For good: no wait at all.
	cb2 := &fakeCarbon{slots: cb.slots}
	env2, starts2 := controlEnv(t, &fakeCluster{pool: testNodes("a")}, &fakeChunks{}, cb2)
	env2.SetStartTime(day0)
	env2.RegisterDelayedCallback(func() { env2.SignalWorkflow(spec.SignalGreenOverride, spec.GreenOverride{}) }, time.Minute)
	env2.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st2 := result(t, env2)
	require.Equal(t, []time.Time{day0.Add(time.Minute), day0.Add(time.Minute), day0.Add(time.Minute)}, starts2())
	require.True(t, st2.Green.Overridden)
	require.Equal(t, []time.Time{day0}, cb2.planned(), "no planning while overridden")
}

// The carbon budget alerts once at 95 %: log, memo and status.
func TestTrainingRunCarbonBudgetAlert(t *testing.T) {
	for _, tc := range []struct {
		budget float64
		alert  bool
	}{{52, true}, {53, false}} { // 5 chunks × 10 g = 50 g: 96 % and 94 %
		cb := &fakeCarbon{slots: []spec.CarbonSlot{{Start: day0, End: day0.Add(24 * time.Hour), GPerKWh: 100}}, gramsPerChunk: 10}
		env, _ := controlEnv(t, &fakeCluster{pool: testNodes("a")}, &fakeChunks{}, cb)
		env.SetStartTime(day0)
		var memos []map[string]any
		env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
			memos = append(memos, args.Get(0).(map[string]any))
		}).Return(nil)
		s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 500, ChunkSteps: 100,
			Green: &spec.GreenPolicy{Trace: "es.csv", BudgetG: tc.budget}}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		st := result(t, env)
		g := st.Green
		require.InDelta(t, 50, g.Grams, 1e-9)
		require.InDelta(t, 0.5, g.KWh, 1e-9)
		require.InDelta(t, 100*50/tc.budget, g.BudgetUsedPct, 1e-9)
		require.Equal(t, tc.alert, g.BudgetAlert, "budget %v", tc.budget)
		require.False(t, g.BudgetExceeded)
		if !tc.alert {
			require.Empty(t, memos)
			continue
		}
		require.Len(t, memos, 1, "alerted once")
		m := memos[0][spec.MemoCarbon].(map[string]any)
		require.Equal(t, true, m["alert"])
		require.InDelta(t, 50, m["used_g"], 1e-9)
	}
}

// Controls and the new size cross continue-as-new.
func TestTrainingRunContinueAsNewKeepsControls(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 0 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
		}
		if in.From == 100 && in.Rank == 0 {
			// Delivered in the same workflow task as the chunk's end.
			env.SignalWorkflowSkippingWorkflowTask(spec.SignalPause, nil)
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, ChunksPerRun: 2}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	require.Equal(t, 3, next.State.Size)
	require.Len(t, next.State.Membership.Nodes, 3)
	require.True(t, next.State.Ctl.Paused, "a pause signalled just before continue-as-new is carried")
	require.Len(t, next.State.Status.Rescalings, 1)

	env2, _ := controlEnv(t, cl, ch, nil)
	env2.RegisterDelayedCallback(func() { env2.SignalWorkflow(spec.SignalResume, nil) }, time.Hour)
	continueRun(env2, next)
	st := result(t, env2)
	require.EqualValues(t, 400, st.Step)
	require.Len(t, st.Nodes, 3)
}

// A node the run holds is drained (the Cluster stops handing it out and
// signals the run): at the next chunk boundary a free node takes its rank;
// without one the run goes on without it down to min_nodes; short of
// that it keeps the node, says so once, and asks again a minute later.
func TestTrainingRunEvictsDrainedNode(t *testing.T) {
	cases := []struct {
		name     string
		pool     []string
		minNodes int
		// freeAfterPause: the run pauses after the first try and a node
		// frees up while it holds (the retry finds it).
		freeAfterPause string
		// putBack: the node is undrained before the boundary.
		putBack    bool
		nodes      []string // at the end
		rescalings []spec.Rescaling
	}{
		{name: "replaced", pool: []string{"n1", "n2", "n3"}, minNodes: 2, nodes: []string{"n1", "n3"},
			rescalings: []spec.Rescaling{{Generation: 2, AtStep: 200, FromNodes: 2, ToNodes: 2, Added: []string{"n3"},
				Removed: []string{"n2"}, ResumeStep: 200, Reason: "n2 drained: swap the disk"}}},
		{name: "shrunk", pool: []string{"n1", "n2"}, minNodes: 1, nodes: []string{"n1"},
			rescalings: []spec.Rescaling{{Generation: 2, AtStep: 200, FromNodes: 2, ToNodes: 1,
				Removed: []string{"n2"}, ResumeStep: 200, Reason: "n2 drained: swap the disk"}}},
		{name: "put back in time", pool: []string{"n1", "n2", "n3"}, minNodes: 2, putBack: true, nodes: []string{"n1", "n2"}},
		{name: "kept, then replaced", pool: []string{"n1", "n2"}, minNodes: 2, freeAfterPause: "n3",
			nodes: []string{"n1", "n3"},
			rescalings: []spec.Rescaling{
				{Generation: 1, AtStep: 200, FromNodes: 2, ToNodes: 2, ResumeStep: 200, Reason: "n2 drained: swap the disk"},
				{Generation: 2, AtStep: 300, FromNodes: 2, ToNodes: 2, Added: []string{"n3"}, Removed: []string{"n2"},
					ResumeStep: 300, Reason: "n2 drained: swap the disk"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes(tc.pool...)}
			ch := &fakeChunks{}
			env, _ := controlEnv(t, cl, ch, nil)
			env.SetStartTime(day0)
			var during spec.RunStatus
			ch.onStart = func(in spec.ChunkInput) {
				switch {
				case in.From == 100 && in.Rank == 0:
					cl.mu.Lock()
					cl.failed = map[string]bool{"n2": true} // drained: not handed out
					cl.mu.Unlock()
					env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "n2", Reason: "swap the disk"})
					if tc.putBack {
						cl.mu.Lock()
						cl.failed = nil
						cl.mu.Unlock()
						env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "n2", Undrained: true})
					}
				case in.From == 200 && in.Rank == 0 && tc.freeAfterPause != "":
					env.SignalWorkflow(spec.SignalPause, nil)
				}
			}
			if tc.freeAfterPause != "" {
				// Held at step 300 meanwhile; a minute is long past at the resume.
				env.RegisterDelayedCallback(func() { during = queryStatus(t, env) }, time.Hour)
				env.RegisterDelayedCallback(func() {
					cl.mu.Lock()
					cl.pool = append(cl.pool, testNodes(tc.freeAfterPause)...)
					cl.mu.Unlock()
					env.SignalWorkflow(spec.SignalResume, nil)
				}, 2*time.Hour)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, MinNodes: tc.minNodes, Steps: 400, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)

			require.EqualValues(t, 400, st.Step)
			require.Equal(t, tc.nodes, st.Nodes)
			require.Empty(t, st.Evicting, "nothing left to move off")
			require.Len(t, st.Rescalings, len(tc.rescalings))
			for i, want := range tc.rescalings {
				got := st.Rescalings[i]
				want.At = got.At
				if want.Added == nil && want.Removed == nil {
					require.Contains(t, got.Error, "no free node to take its place")
					want.Error = got.Error
				}
				require.Equal(t, want, got)
			}
			if len(tc.rescalings) == 0 {
				for from, ins := range ch.byFrom() {
					require.Len(t, ins, 2, "chunk from %d", from)
					require.EqualValues(t, 1, ins[0].Membership.Generation, "chunk from %d: the membership never changed", from)
				}
				return
			}
			last := tc.rescalings[len(tc.rescalings)-1]
			for from, ins := range ch.byFrom() {
				want := len(tc.pool)
				if from >= last.AtStep {
					want = len(tc.nodes)
				} else if want > 2 {
					want = 2
				}
				require.Len(t, ins, want, "chunk from %d", from)
				for _, in := range ins {
					if from == last.AtStep {
						require.EqualValues(t, from, in.Restore.Step, "the new membership resumes from the checkpoint at the current step")
					}
					if from >= last.AtStep {
						require.NotEqual(t, "n2", in.Membership.Nodes[in.Rank].ID, "chunk from %d ran on the drained node", from)
					}
				}
			}
			if tc.freeAfterPause != "" {
				require.Equal(t, []string{"n2"}, during.Evicting, "the status names the drained node it still holds")
				require.Len(t, during.Rescalings, 1)
			}
		})
	}
}

// A cancelled run (cann-train cancel, temporal workflow cancel) ends
// Canceled — not Failed after a recovery attempt on a cancelled context —
// and gives its nodes back, whether a chunk was training or it held
// paused.
func TestTrainingRunCancelled(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("n1", "n2")}
			ch := &fakeChunks{}
			env, _ := controlEnv(t, cl, ch, nil)
			ch.onStart = func(in spec.ChunkInput) {
				if in.From == 100 && in.Rank == 0 {
					if paused {
						env.SignalWorkflow(spec.SignalPause, nil)
					} else {
						env.CancelWorkflow()
					}
				}
			}
			if paused {
				env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			var ce *temporal.CanceledError
			require.True(t, errors.As(err, &ce), "want Canceled, got %v", err)
			st := queryStatus(t, env)
			require.Equal(t, spec.PhaseCancelled, st.Phase)
			want := "cancelled at step 100; last checkpoint at step 100"
			if paused {
				want = "cancelled at step 200; last checkpoint at step 200"
			}
			require.Equal(t, want, st.Error)
			require.Empty(t, st.Recoveries, "a cancellation is not a failure to recover from")
			require.Equal(t, 1, cl.releases, "the nodes go back to the Cluster")
			require.Equal(t, 1, cl.calls, "no replacement was asked for")
		})
	}
}

// regrowTarget: the size lost, but no more ranks than the smallest global
// batch the carbon batch controller has set gives examples to.
func TestRegrowTarget(t *testing.T) {
	for _, tc := range []struct {
		name          string
		target, ranks int
		schedule      []spec.BatchChange
		want          int
	}{
		{"no controller", 4, 1, nil, 4},
		{"batch shrank below the target", 4, 1, []spec.BatchChange{{FromStep: 100, GlobalBatch: 3}}, 3},
		{"in ranks of a node", 4, 2, []spec.BatchChange{{FromStep: 100, GlobalBatch: 6}}, 3},
		{"none to grow to", 0, 1, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec.RunSpec{Name: "t", Nodes: 4, RanksPerNode: tc.ranks, BatchPerRank: 8, Steps: 400, ChunkSteps: 100}.WithDefaults()
			r := &run{spec: s}
			r.st.Status.TargetNodes = tc.target
			r.st.Status.Green = &spec.GreenStatus{Schedule: tc.schedule}
			require.Equal(t, tc.want, r.regrowTarget())
		})
	}
}

// nodesWanted: a waiting run's FreeNodes ask holds as many free nodes as
// its next boundary could take — up to its regrow target, plus one per
// drained node it keeps.
func TestNodesWanted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  int
		members []string
		evicts  []string // drained, the run asking again (EvictRetry)
		want    int
	}{
		{"lost two of four", 4, []string{"a", "b"}, nil, 2},
		{"lost one, one drained", 4, []string{"a", "b", "c"}, []string{"c"}, 2},
		{"two drained", 0, []string{"a", "b", "c"}, []string{"b", "c"}, 2},
		{"a drained node it no longer holds", 0, []string{"a", "b"}, []string{"c"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec.RunSpec{Name: "t", Nodes: 4, Steps: 400, ChunkSteps: 100}.WithDefaults()
			r := &run{spec: s}
			r.st.Status.TargetNodes = tc.target
			r.st.Membership.Nodes = testNodes(tc.members...)
			for _, id := range tc.evicts {
				r.st.Ctl.Evict = append(r.st.Ctl.Evict, spec.Evict{NodeID: id})
			}
			if len(tc.evicts) > 0 {
				r.st.Ctl.EvictRetry = day0
			}
			require.Equal(t, tc.want, r.nodesWanted())
		})
	}
}

// A rescale to the size a shrunk run has keeps it there: no growing back
// when the lost node returns.
func TestTrainingRunStaysShrunkWhenAsked(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{fail: loseRank1At100}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.Rank != 0 {
			return
		}
		switch in.From {
		case 200:
			cl.mu.Lock()
			delete(cl.failed, "b")
			cl.mu.Unlock()
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 2})
		case 300:
			env.SignalWorkflow(spec.SignalPause, nil)
		}
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 600, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.EqualValues(t, 600, st.Step)
	require.Equal(t, []string{"a", "c"}, st.Nodes)
	require.Zero(t, st.TargetNodes)
	require.Empty(t, st.Rescalings)
	require.Len(t, ch.byFrom()[500], 2, "an hour on, b free, still two")
}

// The asks of a run below its size back off: a minute, then doubling up
// to 16 minutes.
func TestNextRegrowWait(t *testing.T) {
	var got []time.Duration
	w := time.Duration(0)
	for range 7 {
		w = nextRegrowWait(w)
		got = append(got, w)
	}
	require.Equal(t, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 16 * time.Minute, 16 * time.Minute}, got)
}

// While PlanCarbon runs (a provider slow to answer), the status says what
// the run waits for, and no more once it has answered.
func TestTrainingRunSaysItAsksTheCarbonSignal(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	var during []string
	first := true
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.CarbonInput) (spec.CarbonOutput, error) {
		if first {
			first = false
			v, err := queryInActivity(env, spec.QueryStatus)
			var st spec.RunStatus
			if err == nil && v.Get(&st) == nil {
				during = append(during, st.Detail)
			}
		}
		return spec.CarbonOutput{Plan: &spec.CarbonPlan{MadeAt: in.Now}}, nil
	}, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	s := spec.RunSpec{Name: "t", Nodes: 1, Steps: 100, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Provider: spec.ProviderUK, Interruptible: true}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, []string{"reading the carbon intensity from the uk API (PlanCarbon)"}, during)
	require.Empty(t, st.Detail)
}

// TestTrainingRunScaleUpTakesWhatIsFree: a rescale to 4 nodes with one
// free takes it at once and trains on, 3 nodes, growing to 4 when the
// fourth comes free — not stopping to wait node_wait for both.
func TestTrainingRunScaleUpTakesWhatIsFree(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.Rank != 0 {
			return
		}
		switch in.From {
		case 100:
			env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 4})
		case 300:
			cl.mu.Lock()
			cl.pool = append(cl.pool, testNodes("n4")...)
			cl.mu.Unlock()
			env.SignalWorkflow(spec.SignalPause, nil) // (chunks take no time: a pause lets the next ask come)
		}
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, MinNodes: 1, Steps: 800, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	chunks := ch.byFrom()
	require.Len(t, chunks[200], 3, "the free node taken at once, the run training on")
	require.Equal(t, []string{"n1", "n2", "n3", "n4"}, st.Nodes, "the fourth taken when it came free")
	require.Zero(t, st.TargetNodes)
	require.Equal(t, 3, st.Rescalings[0].ToNodes)
	require.False(t, st.Rescalings[0].Regrow, "recorded as the rescale")
}

// TestTrainingRunScaleAsksSoonForTheRest: a run on a and b is scaled to 4
// nodes mid-chunk with only c free; d's worker registers 20 s after the
// boundary that took c. The scale asks for the missing node a second
// after that boundary (an ask that waits for one to come free), not a
// minute later as a run growing back after a loss does: d is found as it
// comes back, the chunk is ended for it and the run grows to 4 there.
func TestTrainingRunScaleAsksSoonForTheRest(t *testing.T) {
	cl := &fakeCluster{pool: speaking(spec.ChunkProtocolEndEarly, "a", "b", "c", "d"), failed: map[string]bool{"d": true}}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	env.SetStartTime(day0)
	ends := newEndChunks(env)
	scaled := day0.Add(2 * time.Hour) // the boundary of the chunk the scale ended
	asks := freeNodes(env, cl, true, "d", scaled.Add(20*time.Second))
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 4}) }, 30*time.Minute)
	ch.edit = ends.endWhereAsked
	env.OnActivity(spec.ActivityTrainChunk, mock.Anything, mock.Anything).Return(ch.train).After(2 * time.Hour)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.EqualValues(t, 300, st.Step)
	require.Equal(t, []time.Duration{time.Second}, since(scaled, asks()), "the first ask for the missing node")
	asked, _ := ends.calls()
	require.Len(t, asked, 2, "ended for the scale, then for d")
	require.Equal(t, "growing back to 4 nodes: 1 free node(s)", asked[1].Why)
	require.Equal(t, 20*time.Second, ends.times()[1].Sub(scaled), "the chunk ended as d came back")
	require.Len(t, st.Rescalings, 2)
	require.Equal(t, []string{"c"}, st.Rescalings[0].Added)
	require.EqualValues(t, 37, st.Rescalings[0].AtStep)
	require.Equal(t, []string{"d"}, st.Rescalings[1].Added)
	require.EqualValues(t, 74, st.Rescalings[1].AtStep, "grown to 4 where the chunk ended for d")
	require.Equal(t, []string{"a", "b", "c", "d"}, st.Nodes)
	require.Zero(t, st.TargetNodes)
}

// TestTrainingRunRefusesARescaleWithoutPayload: `temporal workflow signal
// --name rescale` without --input is refused saying that it has no
// payload, not as a rescale to 0 nodes; the run trains on.
func TestTrainingRunRefusesARescaleWithoutPayload(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("n1", "n2", "n3")}
	ch := &fakeChunks{}
	env, _ := controlEnv(t, cl, ch, nil)
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 100 && in.Rank == 0 {
			env.SignalWorkflow(spec.SignalRescale, nil)
		}
	}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, `a rescale signal refused: it has no payload (want {"nodes": N})`, st.RefusedRescale)
	require.EqualValues(t, 300, st.Step)
	require.Empty(t, st.Rescalings)
	require.Len(t, st.Nodes, 2)
}

// TestGrams: the Web UI's carbon figure keeps a short run's fraction of a
// gram, and a long run's whole grams.
func TestGrams(t *testing.T) {
	for g, want := range map[float64]string{0: "0", 0.1449: "0.145", 2.5: "2.5", 99.94: "99.9", 184.4: "184", 12345.6: "12346"} {
		if got := grams(g); got != want {
			t.Errorf("grams(%v) = %q, want %q", g, got, want)
		}
	}
}
