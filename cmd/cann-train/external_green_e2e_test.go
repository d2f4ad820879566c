package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalGreenWindow runs the helper-only Python script (pauseScript)
// on two node workers under the embedded server with a green policy on a
// 1-second trace: clean now, dirty for 5 s from ~3 s on, clean after. The
// plan made at launch lets the job start; the first checkpoint uploaded in
// the dirty stretch re-plans, the world is stopped after it, the run waits
// on a timer named for the next window and relaunches from that
// checkpoint once the window opens — no restart counted — and completes.
// Its history is the replay test's trainingrun_external_green.json
// (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata).
func TestExternalGreenWindow(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job green-window e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptCluster(ctx, t, dir, "node-1", "node-2")

	// The trace, made now that the cluster is up.
	t0 := time.Now().UTC().Truncate(time.Second)
	dirty, clean := t0.Add(3*time.Second), t0.Add(8*time.Second)
	trace := writeZoneTrace(t, dir, t0.Add(-time.Minute), t0.Add(10*time.Minute), time.Second, func(ts time.Time) int {
		if !ts.Before(dirty) && ts.Before(clean) {
			return 500
		}
		return 50
	})
	s := spec.RunSpec{Name: "ext-green", Nodes: 2, Steps: 250, CheckpointEvery: 25, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir},
		Green: &spec.GreenPolicy{Trace: trace, Zone: "Z", Forecast: spec.ForecastPerfect, Deadline: spec.Duration(5 * time.Minute),
			Interruptible: true, Work: spec.Duration(5 * time.Second)}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 || st.Green == nil || st.Green.Waits < 1 {
		t.Fatalf("final status %s at step %d, recoveries %d, green %+v", st.Phase, st.Step, len(st.Recoveries), st.Green)
	}
	if st.Green.KWh <= 0 || st.Green.Grams <= 0 {
		t.Errorf("nothing priced: %+v", st.Green)
	}

	// The history: launches, checkpoint signals and the named timer.
	dc := converter.GetDefaultDataConverter()
	type launch struct {
		at time.Time
		in spec.ExternalInput
	}
	var launches []launch
	ckptAt := map[int64]time.Time{}
	timerNamed := false
	hist := fetchHistory(ctx, t, c, run.GetID())
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			var in spec.ExternalInput
			if a.GetActivityType().GetName() == spec.ActivityRunExternal && dc.FromPayloads(a.GetInput(), &in) == nil && in.Rank == 0 {
				launches = append(launches, launch{at: ev.GetEventTime().AsTime(), in: in})
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a := ev.GetWorkflowExecutionSignaledEventAttributes()
			var cs spec.CheckpointSaved
			if a.GetSignalName() == spec.SignalCheckpointSaved && dc.FromPayloads(a.GetInput(), &cs) == nil {
				if _, ok := ckptAt[cs.Ref.Step]; !ok {
					ckptAt[cs.Ref.Step] = ev.GetEventTime().AsTime()
				}
			}
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			var summary string
			if p := ev.GetUserMetadata().GetSummary(); p != nil {
				_ = dc.FromPayload(p, &summary)
			}
			timerNamed = timerNamed || strings.Contains(summary, "green window")
		}
	}
	if len(launches) != 2 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%d launches, want 2 (one stopped for the dirty stretch [%v, %v))", len(launches), dirty, clean)
	}
	first, second := launches[0], launches[1]
	if !first.at.Before(dirty) || first.in.Restore != nil {
		t.Errorf("first launch at %v (restore %v), want a fresh one before %v", first.at, first.in.Restore, dirty)
	}
	if second.at.Before(clean) {
		t.Errorf("relaunched at %v, before the window opened at %v", second.at, clean)
	}
	if second.in.Restore == nil || second.in.Restarts != 0 {
		t.Fatalf("relaunch restores %v with %d restart(s), want a checkpoint and none", second.in.Restore, second.in.Restarts)
	}
	// Stopped after the first checkpoint uploaded in the dirty stretch (the
	// plan's "now" is the workflow task's, a moment after the signal).
	from := second.in.Restore.Step
	if at, ok := ckptAt[from]; !ok || at.Before(dirty.Add(-time.Second)) || !at.Before(clean) {
		t.Errorf("relaunched from step %d, uploaded at %v; want the first checkpoint uploaded in [%v, %v)", from, at, dirty, clean)
	}
	if prev, ok := ckptAt[from-s.CheckpointEvery]; from > s.CheckpointEvery && (!ok || !prev.Before(dirty)) {
		t.Errorf("the checkpoint before it (step %d) was uploaded at %v, not before %v: the world ran on", from-s.CheckpointEvery, prev, dirty)
	}
	if !timerNamed {
		t.Error("no timer named for the green window in the history")
	}
	// The script's own view: the second launch went on from the restored
	// state (the script checks it) to the end.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 2 || len(reps[1]) == 0 || reps[1][0].Step != from+1 || reps[1][len(reps[1])-1].Step != s.Steps {
		t.Errorf("rank-0 reports: %d launches; want the second from step %d to %d", len(reps), from+1, s.Steps)
	}
	recordHistory(t, hist, "trainingrun_external_green.json")
}
