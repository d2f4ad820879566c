//go:build record

package workflows

// The green scenarios of the scripted recorder (record_test.go): a green
// run's wait for its window, cut, paused, re-decided and rolled over in
// real time, PlanCarbon played by the unit tests' fakeCarbon on the
// control worker.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

// TestRecordScriptedGreen records the green policy's scenarios.
func TestRecordScriptedGreen(t *testing.T) {
	recordScenarios(t, []scenario{
		{name: "trainingrun_green_unplanned", run: recordGreenUnplanned},
		{name: "trainingrun_green_pause_in_wait", run: recordGreenPauseInWait},
		{name: "trainingrun_green_resume_lost", run: recordGreenResumeLost},
		// (The first run's history has 27 events when its wait starts, its
		// last workflow task having started at event 22: the server
		// suggests continuing as new at its first re-decision.)
		{name: "trainingrun_green_wait_rollover", run: recordGreenWaitRollover,
			opts: dev.ServerOptions{SuggestContinueAsNewEvents: greenRolloverAt}},
	})
}

// greenActivities are runActivities with PlanCarbon played by cb, and a
// record of the real times at which chunks started (rank 0).
func greenActivities(cl *fakeCluster, ch *fakeChunks, cb *fakeCarbon) (control, node map[string]any, starts func() []time.Time) {
	control, node = runActivities(cl, ch)
	control[spec.ActivityPlanCarbon] = cb.plan
	var mu sync.Mutex
	var at []time.Time
	onStart := ch.onStart
	ch.onStart = func(in spec.ChunkInput) {
		if in.Rank == 0 {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		if onStart != nil {
			onStart(in)
		}
	}
	return control, node, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), at...)
	}
}

// waitingGreen: the run waits for its window, the waits'th time.
func waitingGreen(waits int) func(spec.RunStatus) bool {
	return func(st spec.RunStatus) bool {
		return st.Phase == spec.PhaseGreenWait && st.Green != nil && st.Green.Waits == waits
	}
}

// startedBefore: every time in ts lies before t.
func startedBefore(ts []time.Time, t time.Time) bool {
	for _, x := range ts {
		if !x.Before(t) {
			return false
		}
	}
	return true
}

// recordGreenUnplanned: a contiguous job whose first plan fails trains
// at once and, having entered its window so, runs on to the end without
// planning again (versionUnplannedStarts), though its window lies ahead.
func recordGreenUnplanned(t *testing.T, r *recorder) {
	const id = "run/green-unplanned"
	t0 := time.Now()
	window := spec.CarbonSlot{Start: t0.Add(2 * time.Minute), End: t0.Add(time.Hour), GPerKWh: 120}
	nodes := testNodes("a")
	cl, ch := &fakeCluster{pool: nodes}, &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window}, planErrs: 1}
	ch.onStart = func(spec.ChunkInput) { time.Sleep(500 * time.Millisecond) }
	control, node, starts := greenActivities(cl, ch, cb)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "green-unplanned", Nodes: 1, Steps: 300, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv"}}.WithDefaults() // contiguous
	st, err := r.run(id, RunInput{Spec: s}, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 300 || st.Green == nil || !st.Green.Started || st.Green.Waits != 0 {
		t.Fatalf("step %d, green %+v: want 300 steps, started, no wait", st.Step, st.Green)
	}
	if got := starts(); len(got) != 3 || !startedBefore(got, window.Start) {
		t.Fatalf("chunks started at %v: want 3, before the window (%s)", got, window.Start)
	}
	if n := len(cb.planned()); n != 1 {
		t.Fatalf("planned %d times: want once (the failed plan)", n)
	}
	r.save(id, "", "trainingrun_green_unplanned", versionUnplannedStarts)
}

// recordGreenPauseInWait: a contiguous job waiting for its window is
// paused, and resumed: the resume ends the pause only, and the run waits
// for its window again (versionResumeEndsPause); a second resume cuts
// that wait, and the job, trained before its window so, runs on to the
// end (versionOverrideStarts).
func recordGreenPauseInWait(t *testing.T, r *recorder) {
	const id = "run/green-pause-in-wait"
	t0 := time.Now()
	window := spec.CarbonSlot{Start: t0.Add(3 * time.Minute), End: t0.Add(time.Hour), GPerKWh: 120}
	nodes := testNodes("a")
	cl, ch := &fakeCluster{pool: nodes}, &fakeChunks{}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window}}
	ch.onStart = func(spec.ChunkInput) { time.Sleep(500 * time.Millisecond) }
	control, node, starts := greenActivities(cl, ch, cb)
	r.serve(nodes, control, node)
	var resumedAt time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !r.await(id, "waiting for its window", time.Minute, waitingGreen(1)) {
			return
		}
		r.signal(id, spec.SignalPause, nil)
		if !r.await(id, "paused", time.Minute, func(st spec.RunStatus) bool { return st.Phase == spec.PhasePaused }) {
			return
		}
		r.signal(id, spec.SignalResume, nil)
		if !r.await(id, "waiting again", time.Minute, waitingGreen(2)) {
			return
		}
		resumedAt = time.Now()
		r.signal(id, spec.SignalResume, nil)
	}()
	s := spec.RunSpec{Name: "green-pause-in-wait", Nodes: 1, Steps: 200, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv"}}.WithDefaults() // contiguous
	st, err := r.run(id, RunInput{Spec: s}, 5*time.Minute)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if st.Step != 200 || st.Green == nil || !st.Green.Started || st.Green.Waits != 2 {
		t.Fatalf("step %d, green %+v: want 200 steps, started, two waits", st.Step, st.Green)
	}
	if got := starts(); len(got) != 2 || got[0].Before(resumedAt) || !startedBefore(got, window.Start) {
		t.Fatalf("chunks started at %v: want 2, after the second resume (%s), before the window (%s)", got, resumedAt, window.Start)
	}
	r.save(id, "", "trainingrun_green_pause_in_wait", versionResumeEndsPause, versionOverrideStarts)
}

// recordGreenResumeLost: a resume cuts an interruptible run's wait; the
// chunk it lets start fails (node-2 dies, the spare replaces it) and the
// resume carries to the next boundary, which trains at once
// (versionResumeOutlivesLoss); the chunk that completes spends it, and the
// rest waits for the window.
func recordGreenResumeLost(t *testing.T, r *recorder) {
	const id = "run/green-resume-lost"
	t0 := time.Now()
	window := spec.CarbonSlot{Start: t0.Add(45 * time.Second), End: t0.Add(time.Hour), GPerKWh: 120}
	nodes := testNodes("node-1", "node-2", "spare-1")
	cl, ch := &fakeCluster{pool: nodes}, &fakeChunks{}
	// node-2's process dies in the first chunk; node-1's rank sees its
	// link to rank 1 lost a moment later.
	died := make(chan struct{})
	var once sync.Once
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 0 || in.Membership.Generation != 1 {
			return nil
		}
		if in.Membership.Nodes[in.Rank].ID == "node-2" {
			time.Sleep(500 * time.Millisecond)
			once.Do(func() { close(died) })
			return temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: 50})
		}
		select {
		case <-died:
		case <-time.After(10 * time.Second):
		}
		time.Sleep(500 * time.Millisecond)
		return temporal.NewApplicationErrorWithCause("rank 1 link lost", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 50})
	}
	ch.onStart = func(in spec.ChunkInput) {
		if in.Membership.Generation > 1 || in.From > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	cb := &fakeCarbon{slots: []spec.CarbonSlot{window}}
	control, node, starts := greenActivities(cl, ch, cb)
	r.serve(nodes, control, node)
	var resumedAt time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !r.await(id, "waiting for its window", time.Minute, waitingGreen(1)) {
			return
		}
		resumedAt = time.Now()
		r.signal(id, spec.SignalResume, nil)
	}()
	s := spec.RunSpec{Name: "green-resume-lost", Nodes: 2, Steps: 300, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour),
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	st, err := r.run(id, RunInput{Spec: s}, 4*time.Minute)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	got := starts()
	if len(st.Recoveries) != 1 || st.Step != 300 || st.Green == nil || st.Green.Waits != 2 {
		t.Fatalf("step %d, recoveries %+v, green %+v: want 300 steps, one recovery, two waits", st.Step, st.Recoveries, st.Green)
	}
	if len(got) != 4 || got[0].Before(resumedAt) || !startedBefore(got[:2], window.Start) || startedBefore(got[2:3], window.Start) {
		t.Fatalf("chunks started at %v: want the failed one and its retry after the resume (%s) before the window (%s), two more in it",
			got, resumedAt, window.Start)
	}
	r.save(id, "", "trainingrun_green_resume_lost", versionResumeOutlivesLoss)
}

// greenRolloverAt is the history length at which the rollover scenario's
// server suggests continuing as new: more than the first run has when it
// starts waiting, less than it has at its first re-decision.
const greenRolloverAt = 26

// recordGreenWaitRollover: an interruptible run waits for a window an
// hour ahead, deciding again at every step of its signal, at least
// minRecheck (versionRecheckGreenWait); at the first re-decision its
// history is long, and it continues as new there
// (versionRolloverInGreenWait); the next run's decision finds now clean
// and trains. The first run's history is kept.
func recordGreenWaitRollover(t *testing.T, r *recorder) {
	const id = "run/green-wait-rollover"
	t0 := time.Now()
	nodes := testNodes("a")
	cl, ch := &fakeCluster{pool: nodes}, &fakeChunks{}
	var plans atomic.Int32
	cb := &fakeCarbon{step: minRecheck, slotsAt: func(now time.Time) []spec.CarbonSlot {
		if plans.Add(1) == 1 {
			return []spec.CarbonSlot{{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), GPerKWh: 120}}
		}
		// A clean window the first plan had not foreseen.
		return []spec.CarbonSlot{{Start: now.Truncate(minRecheck), End: now.Add(time.Hour), GPerKWh: 40}}
	}}
	control, node, starts := greenActivities(cl, ch, cb)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "green-wait-rollover", Nodes: 1, Steps: 200, ChunkSteps: 100,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true}}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), minRecheck+3*time.Minute)
	defer cancel()
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: spec.ControlTaskQueue}, spec.WorkflowTrainingRun, RunInput{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	first := run.GetRunID()
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		t.Fatal(err)
	}
	if st.Step != 200 || st.Green == nil || st.Green.Waits != 1 {
		t.Fatalf("step %d, green %+v: want 200 steps, one wait across the runs", st.Step, st.Green)
	}
	// Planned at the start and again at the re-decision, on a step of
	// the signal; the chunks trained then.
	planned, got := cb.planned(), starts()
	if len(planned) < 2 || planned[1].Sub(planned[1].Truncate(minRecheck)) > 10*time.Second {
		t.Fatalf("planned at %v: want a re-decision on a %s step", planned, minRecheck)
	}
	if len(got) != 2 || got[0].Before(planned[1]) {
		t.Fatalf("chunks started at %v: want 2, from the re-decision (%s)", got, planned[1])
	}
	// The first run waited, and continued as new (at its re-decision).
	d, err := r.c.DescribeWorkflowExecution(ctx, id, first)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		t.Fatalf("the first run ended %s: want continued as new", s)
	}
	r.save(id, first, "trainingrun_green_wait_rollover", versionRecheckGreenWait, versionRolloverInGreenWait)
}
