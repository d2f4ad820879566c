package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestGreenWaitSurvivesControlRestart (issue 6, acceptance 3, on the real
// server): a run whose grid is dirty for the next ~30 s and clean after
// waits on a durable timer named for the window, the control worker is
// SIGKILLed during the wait and replaced, and the run still trains only
// once the window has opened, and completes.
// writeZoneTrace writes dir/trace.csv, a plain "time,Z" trace from from
// to to every step, the value of each step given by v.
func writeZoneTrace(t *testing.T, dir string, from, to time.Time, step time.Duration, v func(time.Time) int) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("time,Z\n")
	for ts := from; ts.Before(to); ts = ts.Add(step) {
		fmt.Fprintf(&csv, "%s,%d\n", ts.Format(time.RFC3339), v(ts))
	}
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return trace
}

func TestGreenWaitSurvivesControlRestart(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// A 5-second trace: 500 g/kWh until 15–20 s from now, 50 after (the
	// run reaches its wait within ~6 s here).
	const step = 5 * time.Second
	now := time.Now().UTC().Truncate(step)
	greenFrom := now.Add(20 * time.Second)
	trace := writeZoneTrace(t, dir, now.Add(-time.Minute), now.Add(10*time.Minute), step, func(ts time.Time) int {
		if ts.Before(greenFrom) {
			return 500
		}
		return 50
	})

	pc := startProcessCluster(ctx, t, dir, "node-1", "node-2")
	c, l := pc.c, pc.l
	s := spec.RunSpec{Name: "green-restart", Nodes: 2, Steps: 200, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(5 * time.Second),
		Green: &spec.GreenPolicy{Trace: trace, Zone: "Z", Forecast: spec.ForecastPerfect, Deadline: spec.Duration(5 * time.Minute),
			Work: spec.Duration(step)}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	// Wait for the green wait, then kill the control worker in it.
	for {
		st, _, closed, err := readProgress(ctx, c, run.GetID())
		if closed {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run closed before waiting: %+v %v", st, err)
		}
		if err == nil && st.Phase == spec.PhaseGreenWait {
			if !st.WaitUntil.Equal(greenFrom) || st.Step != 0 {
				t.Errorf("waiting until %v at step %d, want until %v at step 0", st.WaitUntil, st.Step, greenFrom)
			}
			break
		}
		if time.Now().After(greenFrom) {
			dumpLogs(t, l.LogDir)
			t.Fatalf("no green wait before the window opened: %+v", st)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	pc.replaceControl(t)
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run failed: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != 200 || st.Green == nil || st.Green.Waits < 1 {
		t.Fatalf("final status %+v (green %+v)", st, st.Green)
	}
	// The history: a timer named for the window, no chunk before it opened,
	// workflow tasks completed by both control workers.
	var timerNamed bool
	hist := fetchHistory(ctx, t, c, run.GetID())
	identities := taskIdentities(hist)
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			var summary string
			if p := ev.GetUserMetadata().GetSummary(); p != nil {
				_ = converter.GetDefaultDataConverter().FromPayload(p, &summary)
			}
			timerNamed = timerNamed || strings.Contains(summary, "green window")
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == spec.ActivityTrainChunk &&
				ev.GetEventTime().AsTime().Before(greenFrom) {
				t.Errorf("a chunk was scheduled at %v, before the window opened at %v", ev.GetEventTime().AsTime(), greenFrom)
			}
		}
	}
	if !timerNamed {
		t.Error("no timer named for the green window in the history")
	}
	if len(identities) < 2 {
		t.Errorf("workflow tasks completed by %d worker(s), want both control workers", len(identities))
	}
}

// TestGreenWindowEndsALongChunk: an interruptible green run of
// 10,000,000-step chunks (about 40 minutes each here) starts a chunk in a
// planned clean window of seconds; when the window ends, a durable timer
// has the run ask the chunk's nodes to end it (EndChunk), and the chunk
// comes back there, at a checkpoint, instead of training on into the
// dirty hours for the rest of its length.
func TestGreenWindowEndsALongChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// 5-second steps: clean (50 g/kWh) now, dirty (500) from 20 s on,
	// clean again from 50 s.
	const step = 5 * time.Second
	now := time.Now().UTC().Truncate(step)
	trace := writeZoneTrace(t, dir, now.Add(-time.Minute), now.Add(10*time.Minute), step, func(ts time.Time) int {
		if ts.Before(now.Add(20*time.Second)) || !ts.Before(now.Add(50*time.Second)) {
			return 50
		}
		return 500
	})
	c, l, _ := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "green-long", Nodes: 2, Steps: 2 * chunk, ChunkSteps: chunk,
		Green: &spec.GreenPolicy{Trace: trace, Zone: "Z", Forecast: spec.ForecastPerfect, Deadline: spec.Duration(5 * time.Minute),
			Work: spec.Duration(10 * time.Second), Interruptible: true}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk back", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Chunks >= 1
	})
	if st.Step <= 0 || st.Step >= chunk || st.LastCkpt == nil || st.LastCkpt.Step != st.Step {
		t.Fatalf("the first chunk came back at step %d (last checkpoint %+v); want it ended early, at a checkpoint", st.Step, st.LastCkpt)
	}
	cancelAndAwait(ctx, t, c, run)
	hist := fetchHistory(ctx, t, c, run.GetID())
	var timer, asked string
	for _, ev := range hist.GetEvents() {
		summary := ""
		if p := ev.GetUserMetadata().GetSummary(); p != nil {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &summary)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			if strings.Contains(summary, "green window's end") && timer == "" {
				timer = summary
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == spec.ActivityEndChunk && asked == "" {
				asked = summary
			}
		}
	}
	if timer == "" || !strings.Contains(asked, "the green window ended at") {
		t.Fatalf("timer %q, EndChunk %q: want a timer to the window's end and the chunk asked to end there", timer, asked)
	}
	t.Logf("%s; %s; the chunk came back at step %d", timer, asked, st.Step)
	recordHistory(t, hist, "trainingrun_green_window_end.json")
}
