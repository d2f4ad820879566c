package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cann-train/cann-train/spec"
)

// Tests for the watching audit (/tmp/s55/watch/report.md, findings 6–17):
// watch, status and the dashboard as a demanding user reads them.

// chunkBeat is a pending TrainChunk activity scheduled at scheduled whose
// last heartbeat says step (stopping: its cancel was requested).
func chunkBeat(t *testing.T, step int64, at, scheduled time.Time, stopping bool) *workflowpb.PendingActivityInfo {
	t.Helper()
	details, err := converter.GetDefaultDataConverter().ToPayloads(spec.ChunkProgress{Step: step, To: step + 500, Loss: 0.05, SamplesPerSec: 10000, At: at})
	if err != nil {
		t.Fatal(err)
	}
	state := enumspb.PENDING_ACTIVITY_STATE_STARTED
	if stopping {
		state = enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
	}
	return &workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: spec.ActivityTrainChunk}, State: state,
		HeartbeatDetails: details, ScheduledTime: timestamppb.New(scheduled)}
}

// TestETAMeterBetweenHeartbeats (audit #6): the step moves once per
// heartbeat while watch polls three times a second; measured to the
// poll, the speed fell between two heartbeats and the ETA climbed by a
// fifth each second. Measured to the newest step's time it holds still
// between heartbeats and only falls.
func TestETAMeterBetweenHeartbeats(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	st := spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 30000, Generation: 1}
	var m etaMeter
	var last time.Duration
	var step int64
	for poll := 0; poll <= 40; poll++ {
		now := t0.Add(time.Duration(poll) * 300 * time.Millisecond)
		beat := now.Truncate(time.Second) // the heartbeat a second's polls read
		step = 2000 + 300*int64(beat.Sub(t0)/time.Second)
		eta, ok := m.estimate(st, step, beat, now)
		if !ok {
			continue // (not settled yet)
		}
		if last != 0 && eta > last {
			t.Errorf("poll %d (step %d): ETA %v, up from %v", poll, step, eta, last)
		}
		last = eta
	}
	if want := time.Duration(30000-step) * time.Second / 300; last < want-time.Second || last > want+time.Second {
		t.Errorf("ETA %v at the end; want about %v (300 steps/s)", last, want)
	}
}

// recoveryServer is a run that fails at step 2897 in a chunk from step
// 2643 (its checkpoint), as watch polls it: training at 2831, then
// acquiring a replacement while the failed chunk's activities are still
// pending (one at 2827), then training again in generation 2 from 2643 —
// at 2700 — beside them.
func recoveryServer(t *testing.T) (*runServer, func(poll int)) {
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	seen := t0.Add(10 * time.Second)
	ckpt := &spec.CheckpointRef{URL: "file:///b", Run: "long", Step: 2643, Key: "runs/long/ckpt/000000002643/manifest.json"}
	old := []*workflowpb.PendingActivityInfo{
		chunkBeat(t, 2827, t0.Add(9*time.Second), t0, true),
		chunkBeat(t, 2790, t0.Add(8*time.Second), t0, false), // (the lost node's, until its heartbeat timeout)
	}
	training := spec.RunStatus{RunID: "run/long", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2", "n3"},
		Step: 2643, TotalSteps: 40000, Generation: 1, Loss: 0.06, Chunks: 5, LastCkpt: ckpt}
	acquiring := training
	acquiring.Phase, acquiring.Detail = spec.PhaseAcquiring, "replacing n2, lost in the chunk from step 2643: waiting for 1 free node(s)"
	recovered := training
	recovered.Generation = 2
	recovered.Recoveries = []spec.Recovery{{Generation: 2, FailedNodes: []string{"n2"}, Replacement: []string{"n4"}, FailedAtStep: 2897,
		ResumeStep: 2643, LostSteps: 254, SeenAt: seen, Reason: "n2 lost"}}
	f := newRunServer(map[string]*serverRun{"run/long": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}})
	set := func(poll int) {
		r := f.runs["run/long"]
		switch poll {
		case 1:
			r.query, r.pending = &training, []*workflowpb.PendingActivityInfo{chunkBeat(t, 2831, t0.Add(9*time.Second), t0, false)}
		case 2:
			r.query, r.pending = &acquiring, old
		default:
			r.query, r.pending = &recovered, append([]*workflowpb.PendingActivityInfo{chunkBeat(t, 2700, seen.Add(3*time.Second), seen.Add(time.Second), false)}, old...)
		}
	}
	return f, set
}

// TestReadLiveAfterAFailure (audit #7): while a run acquires or
// recovers after a failure it shows the step it resumes from (its last
// checkpoint), not a heartbeat of the failed chunk; once it trains again,
// the failed chunk's activities still pending are not its progress.
func TestReadLiveAfterAFailure(t *testing.T) {
	f, set := recoveryServer(t)
	for _, tc := range []struct {
		poll     int
		phase    spec.Phase
		step     int64 // the status's, as readLive gives it
		liveStep int64 // 0: no live progress
	}{
		{1, spec.PhaseTraining, 2643, 2831},
		{2, spec.PhaseAcquiring, 2643, 0},
		{3, spec.PhaseTraining, 2643, 2700},
	} {
		set(tc.poll)
		st, live, closed, err := readProgress(context.Background(), f, "run/long")
		if err != nil || closed {
			t.Fatalf("poll %d: %v (closed %v)", tc.poll, err, closed)
		}
		got := int64(0)
		if live != nil {
			got = live.Step
		}
		if st.Phase != tc.phase || st.Step != tc.step || got != tc.liveStep {
			t.Errorf("poll %d: %s at step %d, live %d; want %s at %d, live %d", tc.poll, st.Phase, st.Step, got, tc.phase, tc.step, tc.liveStep)
		}
	}
	// A run acquiring at its start keeps its step (0, or the checkpoint
	// a resumed run starts from).
	st := spec.RunStatus{Phase: spec.PhaseAcquiring, Step: 400, LastCkpt: &spec.CheckpointRef{Step: 400}}
	if !rewinding(st) || resumeStep(st) != 400 || resumeStep(spec.RunStatus{Phase: spec.PhaseAcquiring}) != 0 {
		t.Errorf("resumeStep of a resumed run's start: %d", resumeStep(st))
	}
}

// TestWatchLinesAfterAFailure (audit #7): watch to a pipe says the resume
// step while the run replaces its node, and its first line in the new
// generation is the new chunk's step — neither says the failed chunk's
// 2827.
func TestWatchLinesAfterAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, set := recoveryServer(t)
	f.fail = func(call string, n int) error {
		if call != "describe" {
			return nil
		}
		if n > 3 {
			cancel() // (Ctrl-C, after three polls)
			return context.Canceled
		}
		set(n)
		return nil
	}
	var w bytes.Buffer
	if _, err := watchRun(ctx, f, "run/long", &w, false, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	want := []string{"training        step 2831/40000", "acquiring       step 2643/40000  loss 0.06  (replacing n2", "recovered       gen 2: n2 → n4 at step 2897, rewound to 2643",
		"training        step 2700/40000"}
	if len(lines) != len(want) {
		t.Fatalf("watch wrote:\n%s\nwant %d lines", w.String(), len(want))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, want[i]) {
			t.Errorf("line %d %q; want it to begin %q", i+1, l, want[i])
		}
	}
	// The dashboard reads the run as status does.
	f.fail = nil
	rows, _, err := dashboardRows(context.Background(), f, "default", dashboardQuery(""), 20, "")
	if err != nil || len(rows) != 1 || rows[0].Step != 2700 {
		t.Errorf("dashboard: %+v, %v; want step 2700", rows, err)
	}
}

// TestWatchJSONLEndsOnce (audit #12): a run whose status says completed
// a poll before its workflow closes gets one last line, not two.
func TestWatchJSONLEndsOnce(t *testing.T) {
	done := spec.RunStatus{RunID: "run/done", Phase: spec.PhaseCompleted, Model: "mlp-mnist", Step: 400, TotalSteps: 400, Loss: 0.25}
	training := done
	training.Phase, training.Step = spec.PhaseTraining, 300
	f := newRunServer(map[string]*serverRun{"run/done": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, query: &training}})
	f.fail = func(call string, n int) error {
		r := f.runs["run/done"]
		switch {
		case call != "describe":
		case n == 2:
			r.query = &done // (the workflow closing: its status says so first)
		case n == 3:
			r.status, r.result = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, done
		}
		return nil
	}
	var w bytes.Buffer
	if _, err := watchRun(context.Background(), f, "run/done", &w, true, nil); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, l := range strings.Split(strings.TrimSpace(w.String()), "\n") {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		statuses = append(statuses, line["status"].(string))
	}
	if strings.Join(statuses, " ") != "training completed" {
		t.Errorf("lines' statuses %v; want training, then completed once:\n%s", statuses, w.String())
	}
}

// TestDashboardFitsTheTerminal (audit #8): on a terminal the table fits
// its width — DETAIL cut to the room left, and on a narrow one columns
// dropped (STARTED and MODEL first) rather than each row wrapping onto
// two or three lines; to a file or a pipe (0) it is as wide as it is.
func TestDashboardFitsTheTerminal(t *testing.T) {
	started := time.Date(2026, 12, 7, 8, 0, 0, 0, time.Local)
	rows := []dashboardRow{
		{WorkflowID: "run/long1", Execution: "running", Status: spec.PhasePaused, Model: "mlp-mnist", Nodes: 3, Step: 2143, Steps: 40000, Loss: 0.04368,
			read: true, StartedAt: started, Detail: "paused at step 2143 (cann-train resume long1 continues)"},
		{WorkflowID: "run/green1", Execution: "running", Status: spec.PhaseGreenWait, Model: "mlp-mnist", Nodes: 1, Steps: 1000, read: true,
			StartedAt: started, Detail: "waiting for the green window until 2026-12-07T11:00:00Z (green window 11:00–12:00 UTC)"},
	}
	for _, tc := range []struct {
		cols  int
		has   []string // in the header
		never []string
	}{
		{0, []string{"MODEL", "STARTED", "DETAIL"}, nil},
		{200, []string{"MODEL", "STARTED", "DETAIL"}, nil},
		{100, []string{"DETAIL"}, []string{"STARTED"}},
		{80, []string{"STEP", "DETAIL"}, []string{"STARTED", "MODEL"}},
		{40, []string{"RUN", "STATUS", "STEP"}, []string{"MODEL", "SAMPLES/S"}},
	} {
		var b bytes.Buffer
		if err := printDashboardTo(&b, rows, "", 0, 20, tc.cols); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d columns: %d lines:\n%s", tc.cols, len(lines), b.String())
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); tc.cols > 0 && n > tc.cols-1 {
				t.Errorf("%d columns: a line of %d:\n%s", tc.cols, n, b.String())
			}
		}
		for _, h := range tc.has {
			if !strings.Contains(lines[0], h) {
				t.Errorf("%d columns: header %q lacks %s", tc.cols, lines[0], h)
			}
		}
		for _, h := range tc.never {
			if strings.Contains(lines[0], h) {
				t.Errorf("%d columns: header %q has %s", tc.cols, lines[0], h)
			}
		}
		if !strings.HasPrefix(lines[1], "long1  ") || !strings.Contains(lines[1], "2143/40000") {
			t.Errorf("%d columns: row %q", tc.cols, lines[1])
		}
		if tc.cols == 0 && !strings.HasSuffix(lines[1], "paused at step 2143 (cann-train resume long1 continues)") {
			t.Errorf("to a file: row %q; want its whole detail", lines[1])
		}
	}
	// As printed before: the same table to a file or a pipe.
	var a, b bytes.Buffer
	if printDashboard(&a, rows, "", 0, 20) != nil || printDashboardTo(&b, rows, "", 0, 20, 0) != nil || a.String() != b.String() {
		t.Errorf("printDashboard:\n%s\nwant\n%s", a.String(), b.String())
	}
}

// TestDashboardSpeedOnlyWhileTraining (audit #9): a paused, waiting or
// ended run's row has no samples/s (its last chunk's was shown as if it
// trained on).
func TestDashboardSpeedOnlyWhileTraining(t *testing.T) {
	for _, tc := range []struct {
		phase spec.Phase
		sps   string
	}{
		{spec.PhaseTraining, "22800"},
		{spec.PhasePaused, "-"},
		{spec.PhaseGreenWait, "-"},
		{spec.PhaseCompleted, "-"},
	} {
		var r dashboardRow
		r.WorkflowID, r.Execution = "run/x", "running"
		r.addStatus(spec.RunStatus{RunID: "run/x", Phase: tc.phase, Model: "m", Nodes: []string{"n1"}, Step: 2143, TotalSteps: 40000, Loss: 0.04, SamplesPerSec: 22800}, nil)
		if got := dashboardCells(r)[6]; got != tc.sps {
			t.Errorf("%s: samples/s %q, want %q", tc.phase, got, tc.sps)
		}
	}
}

// TestStatusJSONEvalMetric (audit #17): a run with no evaluation (failed
// before one, an external job) has eval_metric null, not 0 (0 % accuracy);
// one with an evaluation has its figure, and a quickstart's summary keeps
// its own fields beside them.
func TestStatusJSONEvalMetric(t *testing.T) {
	failed := spec.RunStatus{RunID: "run/f", Phase: spec.PhaseFailed, Model: "mlp-mnist", Step: 40, TotalSteps: 400, Error: "x"}
	done := spec.RunStatus{RunID: "run/d", Phase: spec.PhaseCompleted, Model: "mlp-mnist", Step: 400, TotalSteps: 400, EvalMetric: "test_accuracy", EvalValue: 0.9615}
	for _, tc := range []struct {
		st   spec.RunStatus
		want string
	}{
		{failed, "null"},
		{done, "0.9615"},
	} {
		var b bytes.Buffer
		if err := printStatus(&b, tc.st, "json", "", "default"); err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if string(m["eval_metric"]) != tc.want || m["workflow_id"] == nil || m["recoveries"] == nil {
			t.Errorf("%s: eval_metric %s, want %s:\n%s", tc.st.RunID, m["eval_metric"], tc.want, b.String())
		}
		var sum Summary // (read back, as scripts and the end-to-end tests do)
		if err := json.Unmarshal(b.Bytes(), &sum); err != nil || sum.EvalMetric != tc.st.EvalValue || sum.WorkflowID != tc.st.RunID {
			t.Errorf("%s: read back %+v, %v", tc.st.RunID, sum, err)
		}
	}
	var b bytes.Buffer
	q := quickstartResult(done, "", "default", nil, false, "file:///b")
	if err := printQuickstartSummary(&b, done, q, "json"); err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || string(m["eval_metric"]) != "0.9615" || !strings.Contains(string(m["server"]), "stopped with the quickstart") {
		t.Errorf("quickstart summary: %v\n%s", err, b.String())
	}
}

// TestQuickstartSummaryHints (audit #14): once the quickstart's server
// has stopped (no --keep), its summary names no command that asks it as
// if it would work: `green report` failed with "connection refused".
func TestQuickstartSummaryHints(t *testing.T) {
	st := spec.RunStatus{RunID: "run/mnist-demo", Phase: spec.PhaseCompleted, Model: "mlp-mnist", Nodes: []string{"node-1"}, Step: 1000, TotalSteps: 1000,
		Chunks: 10, Segments: []spec.Segment{{WallSeconds: 3}}, SlowNodes: []spec.SlowNode{{NodeID: "node-1", Factor: 2, Chunks: 3, Since: 400}}}
	for _, tc := range []struct {
		name  string
		keep  bool
		want  []string
		never []string
	}{
		{"server stopped", false,
			[]string{"energy       not measured: no node had a meter (with `--keep` the server stays up for `cann-train green report mnist-demo --trace FILE --trace-start TIME` to model it)\n"},
			[]string{"nodes drain", "(`cann-train green report"}},
		{"kept", true, []string{"(`cann-train green report mnist-demo --trace FILE --trace-start TIME` models it)\n", "`cann-train nodes drain node-1`"}, []string{"--keep"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printQuickstartSummary(&b, st, quickstartResult(st, "", "default", nil, tc.keep, "file:///b"), "text"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("summary:\n%s\nwant %q", b.String(), w)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(b.String(), w) {
					t.Errorf("summary:\n%s\nhas %q", b.String(), w)
				}
			}
		})
	}
	// `status` of a run on a server that is up keeps its hints.
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil || !strings.Contains(b.String(), "(`cann-train green report mnist-demo --trace FILE") {
		t.Errorf("status: %v\n%s", err, b.String())
	}
}

// TestProgressLineSpeedWhileTraining: a jsonl line gives samples/s only
// while the run trains (a paused run's last chunk's is no speed of now).
func TestProgressLineSpeedWhileTraining(t *testing.T) {
	for phase, want := range map[spec.Phase]float64{spec.PhaseTraining: 22800, spec.PhasePaused: 0, spec.PhaseCompleted: 0, spec.PhaseStorageWait: 0} {
		line := progressLine("run/x", spec.RunStatus{Phase: phase}, 2143, 0.04, 22800)
		if got := line["samples_per_sec"]; got != want {
			t.Errorf("%s: samples_per_sec %v, want %v", phase, got, want)
		}
	}
}
