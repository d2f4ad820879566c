package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestEnergySummary: the measured segments' energy, mean power and
// training time; the unmeasured ones only counted, a failed chunk's not
// at all (the green report models it); nothing measured, no summary (and
// no line in the status).
func TestEnergySummary(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segs     []spec.Segment
		want     *EnergySummary
		wantLine string
		green    bool // the run has a green policy: its signal prices the run
	}{
		{"none", nil, nil, "", false},
		{"modelled only", []spec.Segment{{WallSeconds: 60}}, &EnergySummary{Segments: 1},
			"energy       not measured: no node had a meter (`cann-train green report x --trace FILE --trace-start TIME` models it)\n", false},
		{"modelled only, green", []spec.Segment{{WallSeconds: 60}}, &EnergySummary{Segments: 1},
			"energy       not measured: no node had a meter (`cann-train green report x` models it)\n", true},
		{"measured", []spec.Segment{{WallSeconds: 60, Joules: 9000}, {WallSeconds: 20, Lost: true}, {WallSeconds: 30, Joules: 4500}},
			&EnergySummary{KWh: 13500 / 3.6e6, MeanWatts: 150, TrainedSeconds: 90, Measured: 2, Segments: 2},
			"energy       0.0037 kWh measured, 150 W over 1m30s of training\n", false},
		{"mixed", []spec.Segment{{WallSeconds: 60, Joules: 12000}, {WallSeconds: 600}},
			&EnergySummary{KWh: 12000 / 3.6e6, MeanWatts: 200, TrainedSeconds: 60, Measured: 1, Segments: 2},
			"energy       0.0033 kWh measured, 200 W over 1m0s of training; 1 of 2 trained stretches (the others ran where a node had no meter)\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := energySummary(tc.segs)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("summary %+v, want %+v", got, tc.want)
			}
			var b bytes.Buffer
			st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseCompleted, Segments: tc.segs, StartedAt: time.Unix(0, 0), UpdatedAt: time.Unix(90, 0)}
			if tc.green {
				st.Green = &spec.GreenStatus{}
			}
			if err := printStatus(&b, st, "table", "", "default"); err != nil {
				t.Fatal(err)
			}
			line := ""
			for _, l := range strings.SplitAfter(b.String(), "\n") {
				if strings.HasPrefix(l, "energy ") {
					line = l
				}
			}
			if line != tc.wantLine {
				t.Errorf("energy line %q, want %q", line, tc.wantLine)
			}
		})
	}
}

// TestProgressLines: to a log or a pipe, watch writes a line when the
// phase changes (or, while the run does not train, its detail) and one
// per tenth of the steps, with the ETA while the run trains; nothing for
// polls that change neither, nor for a detail that comes and goes while
// the run trains (it doubled lines); the speed only while it trains (a
// paused or ended run's was the last chunk's).
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := &progressLines{w: &buf, decile: -1}
	wait := "waiting for 3 free node(s) until 06:52:00 UTC (node_wait 2m0s)"
	t0 := time.Date(2026, 12, 7, 6, 50, 0, 0, time.UTC)
	polls := []struct {
		phase  spec.Phase
		detail string
		step   int64
		at     time.Duration // when the run had the step (and the poll)
	}{
		{spec.PhaseAcquiring, wait, 0, 0},
		{spec.PhaseAcquiring, wait, 0, time.Second},
		{spec.PhaseTraining, "", 0, 2 * time.Second},
		{spec.PhaseTraining, "", 50, 3 * time.Second},
		{spec.PhaseTraining, "reading the carbon intensity from the carbon trace (PlanCarbon)", 99, 4 * time.Second},
		{spec.PhaseTraining, "", 100, 5 * time.Second}, // 100 steps in 3s: 900 left take 27s
		{spec.PhaseTraining, "", 150, 6 * time.Second},
		{spec.PhaseTraining, "", 730, 7 * time.Second}, // 730 in 5s: 270 left take 1.8s
		{spec.PhasePaused, "pausing at step 730: its checkpoint is uploading", 730, 8 * time.Second},
		{spec.PhasePaused, "paused at step 730 (cann-train resume x continues)", 730, 9 * time.Second},
		{spec.PhaseTraining, "", 730, 10 * time.Second},
		{spec.PhaseCompleted, "", 1000, 11 * time.Second},
	}
	for _, q := range polls {
		loss, sps := float32(0.5), 1200.0
		if q.phase == spec.PhaseAcquiring {
			loss, sps = 0, 0 // nothing trained yet: no figures
		}
		at := t0.Add(q.at)
		p.update(spec.RunStatus{Phase: q.phase, Detail: q.detail, TotalSteps: 1000}, q.step, loss, sps, at, at)
	}
	want := []string{
		"acquiring       step 0/1000  (" + wait + ")",
		"training        step 0/1000  loss 0.5  1200 samples/s",
		"training        step 100/1000  ETA 27s  loss 0.5  1200 samples/s",
		"training        step 730/1000  ETA 2s  loss 0.5  1200 samples/s",
		"paused          step 730/1000  loss 0.5  (pausing at step 730: its checkpoint is uploading)",
		"paused          step 730/1000  loss 0.5  (paused at step 730 (cann-train resume x continues))",
		"training        step 730/1000  loss 0.5  1200 samples/s",
		"completed       step 1000/1000  loss 0.5",
	}
	if got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if isTerminal(&buf) {
		t.Error("a buffer is not a terminal")
	}
}

// TestWatchColumns: watch's lines to a log keep their second column in
// one place whatever the phase (waiting-green and waiting-storage are
// wider than the 10 columns it had) or the change said.
func TestWatchColumns(t *testing.T) {
	var b bytes.Buffer
	for _, phase := range append(strings.Split(runPhases(), ", "), string(phaseTerminated), string(phaseTimedOut)) {
		p := &progressLines{w: &b, decile: -1}
		p.update(spec.RunStatus{Phase: spec.Phase(phase), TotalSteps: 10}, 0, 0, 0, time.Time{}, time.Now())
	}
	newChangeTeller(&b, nil).tell(spec.RunStatus{
		Recoveries: []spec.Recovery{{Generation: 2, FailedNodes: []string{"n2"}, Replacement: []string{"n4"}}},
		Rescalings: []spec.Rescaling{{Generation: 3, FromNodes: 2, ToNodes: 3}, {Generation: 4, FromNodes: 3, ToNodes: 2, Regrow: true}},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	col := strings.Index(lines[0], "step ")
	for _, l := range lines {
		second := strings.IndexFunc(l[strings.Index(l, " "):], func(r rune) bool { return r != ' ' }) + strings.Index(l, " ")
		if second != col {
			t.Errorf("%q: second column at %d, want %d", l, second, col)
		}
	}
}

// TestFailureText: a failed run's error as the CLI receives it (the
// server's failure, converted) reads as what each layer said, once.
func TestFailureText(t *testing.T) {
	root := &failurepb.Failure{Message: "acquire 3 nodes for run/x: only 2 live free node(s) after waiting 5s",
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: "NotEnoughNodes"}}}
	act := &failurepb.Failure{Message: "activity error", Cause: root,
		FailureInfo: &failurepb.Failure_ActivityFailureInfo{ActivityFailureInfo: &failurepb.ActivityFailureInfo{
			ActivityType: &commonpb.ActivityType{Name: "AcquireNodes"}, ScheduledEventId: 7, StartedEventId: 8, Identity: "27459@vm@"}}}
	conv := temporal.GetDefaultFailureConverter()
	actErr := conv.FailureToError(act)
	top := &failurepb.Failure{Message: "acquire nodes: " + actErr.Error(), Cause: act,
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: "wrapError"}}}
	// Wrapped twice by the workflow: fmt.Errorf("replace …: %w",
	// fmt.Errorf("acquire nodes: %w", activity error)).
	twice := &failurepb.Failure{Message: "replace node(s) [node-3]: " + top.Message, Cause: top,
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: "wrapError"}}}
	// Since runError: the run's own words over the chain, typed by its cause.
	own := &failurepb.Failure{Message: "acquire nodes: acquire 3 nodes for run/x: only 2 live free node(s) after waiting 5s", Cause: top,
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: "NotEnoughNodes", NonRetryable: true}}}
	untyped := &failurepb.Failure{Message: "chunk from step 200: no peer answered", Cause: top,
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: spec.ErrTypeRunFailed, NonRetryable: true}}}
	plain := &failurepb.Failure{Message: "spec: steps: -5 must be positive",
		FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: "BadSpec"}}}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"activity failure wrapped by the workflow", conv.FailureToError(top),
			"acquire nodes: acquire 3 nodes for run/x: only 2 live free node(s) after waiting 5s (NotEnoughNodes)"},
		{"wrapped twice", conv.FailureToError(twice),
			"replace node(s) [node-3]: acquire nodes: acquire 3 nodes for run/x: only 2 live free node(s) after waiting 5s (NotEnoughNodes)"},
		{"a failed run's own error", conv.FailureToError(own),
			"acquire nodes: acquire 3 nodes for run/x: only 2 live free node(s) after waiting 5s (NotEnoughNodes)"},
		{"a failed run's own error with no type", conv.FailureToError(untyped), "chunk from step 200: no peer answered"},
		{"the workflow's own error", conv.FailureToError(plain), "spec: steps: -5 must be positive (BadSpec)"},
		{"terminated", conv.FailureToError(&failurepb.Failure{Message: "by the operator",
			FailureInfo: &failurepb.Failure_TerminatedFailureInfo{TerminatedFailureInfo: &failurepb.TerminatedFailureInfo{}}}), "terminated"},
		{"not a Temporal error", errors.New("connection refused"), "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := failureText(tc.err); got != tc.want {
				t.Errorf("failureText = %q\nwant          %q\n(from %q)", got, tc.want, tc.err)
			}
		})
	}
	e := &runEnded{id: "run/x", status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, err: conv.FailureToError(top)}
	if !strings.HasPrefix(e.Error(), "run/x failed: acquire nodes: ") || strings.Contains(e.Error(), "scheduledEventID") {
		t.Errorf("runEnded: %s", e)
	}
	var ae *temporal.ApplicationError
	if !errors.As(e, &ae) {
		t.Error("runEnded hides the Temporal error it wraps")
	}
	term := &runEnded{id: "run/x", status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, err: temporal.GetDefaultFailureConverter().FailureToError(&failurepb.Failure{FailureInfo: &failurepb.Failure_TerminatedFailureInfo{TerminatedFailureInfo: &failurepb.TerminatedFailureInfo{}}})}
	if got := term.Error(); got != "run/x terminated" {
		t.Errorf("terminated run: %q", got)
	}
	// Cancelled as its status says it, not Temporal's "canceled" (twice).
	canc := &runEnded{id: "run/x", status: enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, err: temporal.GetDefaultFailureConverter().FailureToError(&failurepb.Failure{Message: "canceled", FailureInfo: &failurepb.Failure_CanceledFailureInfo{CanceledFailureInfo: &failurepb.CanceledFailureInfo{}}})}
	if got := canc.Error(); got != "run/x cancelled" {
		t.Errorf("cancelled run: %q", got)
	}
}

// TestStatusTextNodes: a run still acquiring says it has no nodes yet,
// not "on 0 node(s) []"; one with several ranks per node counts them.
func TestStatusTextNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes   []string
		perNode int
		want    string
	}{
		{nil, 0, "model        mlp-mnist, no nodes yet\n"},
		{[]string{"n1", "n2"}, 0, "model        mlp-mnist on 2 node(s) [n1 n2]\n"},
		{[]string{"n1", "n2"}, 4, "model        mlp-mnist on 2 node(s), 8 ranks [n1 n2]\n"},
	} {
		var b bytes.Buffer
		st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseAcquiring, Model: "mlp-mnist", Nodes: tc.nodes, RanksPerNode: tc.perNode}
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("status text:\n%s\nwant the line %q", b.String(), tc.want)
		}
	}
}

// The scaling line counts ranks, as the figure does: 2 nodes of 2 ranks
// are 4× one rank, not 2×.
func TestStatusTextScalingCountsRanks(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2"}, RanksPerNode: 2,
		ScalingEfficiency: 0.38, Chunks: 3}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	if want := "scaling      38% of 4× one rank"; !strings.Contains(b.String(), want) {
		t.Errorf("status text:\n%s\nwant %q", b.String(), want)
	}
}

// TestStatusTextStaleStep: a live run's wall time runs to now, and a
// script that has not reported a step for a while is said to be stuck
// there; a fresh step says nothing.
func TestStatusTextStaleStep(t *testing.T) {
	now := time.Now()
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: spec.ModelExternal, Nodes: []string{"n1"}, Step: 25, TotalSteps: 60,
		StartedAt: now.Add(-100 * time.Second), UpdatedAt: now.Add(-90 * time.Second)}
	for _, tc := range []struct {
		age  time.Duration
		want bool
	}{{45 * time.Second, true}, {2 * time.Second, false}} {
		sum := summarize(st, "", "default", nil)
		livenow(&sum, st, &spec.ChunkProgress{Step: 25, At: now.Add(-tc.age)}, now)
		var b bytes.Buffer
		if err := printSummary(&b, st, sum, "text"); err != nil {
			t.Fatal(err)
		}
		stale := "no step reported for 45s: the script (a rank stuck in a collective, a slow data loader, a long evaluation) has not moved past step 25"
		if strings.Contains(b.String(), stale) != tc.want || !strings.Contains(b.String(), "wall         100.0s") {
			t.Errorf("step %s old: status text:\n%s\nwant the stale line %v and wall 100.0s", tc.age, b.String(), tc.want)
		}
	}
}

// TestStatusTextStoringStep: a built-in run whose chunk in flight
// stepped to its end and has been silent since is storing its checkpoint:
// status says the bucket has not taken it, not that a node stopped.
func TestStatusTextStoringStep(t *testing.T) {
	now := time.Now()
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2"}, Step: 12000, TotalSteps: 200000}
	for _, tc := range []struct {
		live spec.ChunkProgress
		want string
	}{
		{spec.ChunkProgress{Step: 13000, To: 13000, At: now.Add(-45 * time.Second)},
			"no step reported for 45s: the chunk in flight trained to its end, step 13000, and its rank 0 (node n1) is storing the checkpoint there"},
		{spec.ChunkProgress{Step: 12500, To: 13000, At: now.Add(-45 * time.Second)}, "no step reported for 45s: a node has not moved past step 12000"},
		// Said by the node (ChunkProgress.Storing): the chunk's own, or
		// an earlier chunk's upload it waits for.
		{spec.ChunkProgress{Step: 13000, To: 13000, At: now.Add(-45 * time.Second), Storing: 13000, StoringSince: now.Add(-44 * time.Second)},
			"no step reported for 45s: a node of the chunk in flight has been storing the checkpoint at step 13000 for 44s: the checkpoint bucket has not taken it yet"},
		{spec.ChunkProgress{Step: 13000, To: 13000, At: now.Add(-45 * time.Second), Storing: 12000, StoringSince: now.Add(-40 * time.Second)},
			"has been storing the checkpoint at step 12000 for 40s"},
	} {
		sum := summarize(st, "", "default", nil)
		livenow(&sum, st, &tc.live, now)
		var b bytes.Buffer
		if err := printSummary(&b, st, sum, "text"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) || strings.Count(b.String(), "no step reported") != 1 {
			t.Errorf("chunk at %d of %d: status text:\n%s\nwant %q once", tc.live.Step, tc.live.To, b.String(), tc.want)
		}
	}
}

// TestStatusJSONStepNames: status -o json gives the step reached as
// "steps" (as ever) and as "step", the dashboard's and watch's name, with
// the job's as "total_steps", as the dashboard does too.
func TestStatusJSONStepNames(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Step: 64500, TotalSteps: 400000}
	var b bytes.Buffer
	if err := printStatus(&b, st, "json", "", "default"); err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if string(m["step"]) != "64500" || string(m["steps"]) != "64500" || string(m["total_steps"]) != "400000" {
		t.Errorf("step %s, steps %s, total_steps %s; want 64500, 64500, 400000", m["step"], m["steps"], m["total_steps"])
	}
}

// TestStatusTextCrowded: a node training more ranks than it has cores is
// named with both counts; -o json says it too.
func TestStatusTextCrowded(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2"}, RanksPerNode: 64,
		Crowded: &spec.CrowdedNode{NodeID: "n2", Ranks: 64, Cores: 2}}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	if want := "crowded      n2 trains 64 ranks on 2 core(s): they take turns (32 per core)"; !strings.Contains(b.String(), want) {
		t.Errorf("status text:\n%s\nwant %q", b.String(), want)
	}
	b.Reset()
	if err := printStatus(&b, st, "json", "", "default"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"crowded": {`) {
		t.Errorf("status json lacks crowded:\n%s", b.String())
	}
}

// TestStatusTextCutOff: a node the run left for being cut off from its
// bucket is named, with when the run takes it again; -o json says it too.
func TestStatusTextCutOff(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n4"}, CutOff: []string{"n3"}}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	if want := "cut off      n3 could not reach the run's checkpoint bucket where its peers did: the run took it off and takes it no more until its worker registers again\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status text:\n%s\nwant the line %q", b.String(), want)
	}
	b.Reset()
	if err := printStatus(&b, st, "json", "", "default"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"cut_off": [`) {
		t.Errorf("status json lacks cut_off:\n%s", b.String())
	}
}

// TestStatusTextFirstChunk: before any chunk ended the status shows no
// first loss nor speed of zero, but the chunk in flight's step and loss.
func TestStatusTextFirstChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   spec.RunStatus
		want []string
	}{
		{"no step yet", spec.RunStatus{},
			[]string{"loss         - (no chunk has ended yet)\n", "speed        measured when the first chunk ends"}},
		{"chunk in flight", spec.RunStatus{Step: 19841, Loss: 0.0091},
			[]string{"loss         0.0091 at step 19841 (the chunk in flight's; none has ended yet)\n", "speed        measured when the first chunk ends"}},
		{"a chunk ended", spec.RunStatus{Step: 200, Loss: 0.5, InitialLoss: 2.47, Chunks: 2, StepsPerSec: 1900, SamplesPerSec: 182400},
			[]string{"loss         2.47 → 0.5\n", "speed        1900.0 steps/s over the run; last chunk 182400 samples/s, comm share"}},
		// A loss below 1e-4 keeps its digits (%.4f printed 0.0000).
		{"a tiny loss", spec.RunStatus{Step: 200, Loss: 2.33e-7, InitialLoss: 2.4016, Chunks: 2, StepsPerSec: 1900},
			[]string{"loss         2.402 → 2.33e-07\n"}},
		// (The metric's name in the label column overran it by one.)
		{"evaluated", spec.RunStatus{Step: 200, Loss: 0.5, InitialLoss: 2.47, Chunks: 2, EvalMetric: "test_accuracy", EvalValue: 0.9615},
			[]string{"eval         test_accuracy 0.9615\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			st := tc.st
			st.RunID, st.Phase, st.Model, st.Nodes, st.TotalSteps = "run/x", spec.PhaseTraining, "mlp-mnist", []string{"n1", "n2"}, 200000
			if err := printStatus(&b, st, "text", "", "default"); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("status text:\n%s\nwant %q", b.String(), want)
				}
			}
		})
	}
}

// TestStatusTextCheckpoints: none yet, the last one, and one that could
// not be stored since.
func TestStatusTextCheckpoints(t *testing.T) {
	last := &spec.CheckpointRef{URL: "file:///b", Run: "x", Step: 300, Key: "runs/x/ckpt/000000000300/manifest.json"}
	for _, tc := range []struct {
		name  string
		st    spec.RunStatus
		want  string
		never string
	}{
		{"none yet", spec.RunStatus{}, "checkpoints  0\n", "could not be stored"},
		{"stored", spec.RunStatus{Checkpoints: 3, LastCkpt: last}, "checkpoints  3, last file:///b/runs/x/ckpt/000000000300/manifest.json\n", "could not be stored"},
		{"failed since", spec.RunStatus{Checkpoints: 3, LastCkpt: last, CheckpointFailed: &spec.CheckpointFailure{Step: 400, Error: "no space left on device"}},
			"             the checkpoint at step 400 could not be stored (none since): no space left on device\n", ""},
	} {
		tc.st.RunID, tc.st.Phase, tc.st.Model = "run/x", spec.PhaseTraining, "mlp-mnist"
		var b bytes.Buffer
		if err := printStatus(&b, tc.st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) || tc.never != "" && strings.Contains(b.String(), tc.never) {
			t.Errorf("%s: status text:\n%s\nwant the line %q", tc.name, b.String(), tc.want)
		}
	}
}

// TestStatusTextNodeChanges: rescales, a drained node replaced, one that
// could not be, a drained node still held, one whose worker stops (not
// drained) and a slow one to leave read as what they were; a node the run
// does not hold (an evict signal sent by hand) is not said to be held.
func TestStatusTextNodeChanges(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n3", "n5"},
		MinNodes: 1, GlobalBatch: 64, Evicting: []string{"n3", "n5", "n9"}, Stopping: []string{"n5"}, Leaving: []string{"n1"}, RefusedRescale: "rescale to 0 node(s) refused: want 1..64", Rescalings: []spec.Rescaling{
			{Generation: 2, AtStep: 200, FromNodes: 2, ToNodes: 3, Added: []string{"n3"}},
			{Generation: 3, AtStep: 400, FromNodes: 3, ToNodes: 3, Added: []string{"n4"}, Removed: []string{"n2"}, Reason: "n2 drained: disk"},
			{Generation: 3, AtStep: 600, FromNodes: 3, ToNodes: 3, Reason: "n3 drained", Error: "no free node to take its place"},
		}}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"nodes        min_nodes 1, global batch 64; drained [n3] still held, replaced at a chunk boundary; " +
			"[n5]: worker stopping, replaced at a chunk boundary; slow [n1] replaced at a chunk boundary once a node is free (slow_node: replace)\n",
		"  rescale    gen 2 at step 200: 2 → 3 nodes +[n3]\n",
		"  replace    gen 3 at step 400: 3 → 3 nodes +[n4] −[n2] (n2 drained: disk)\n",
		"  replace    gen 3 at step 600: n3 drained: no free node to take its place\n",
		"  refused    rescale to 0 node(s) refused: want 1..64\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text:\n%s\nwant the line %q", b.String(), want)
		}
	}

	// Shrunk after a failure, then grown back by one of two.
	st = spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n3"},
		MinNodes: 1, TargetNodes: 3, Rescalings: []spec.Rescaling{
			{Generation: 4, AtStep: 800, FromNodes: 1, ToNodes: 2, Added: []string{"n3"}, Reason: "growing back to 3 nodes", Regrow: true},
		}}
	for phase, want := range map[spec.Phase]string{
		spec.PhaseTraining:  "nodes        min_nodes 1; 2 of 3 after losing some: free nodes are taken back at chunk boundaries\n",
		spec.PhaseCompleted: "nodes        min_nodes 1\n",
	} {
		st.Phase = phase
		b.Reset()
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{want, "  regrow     gen 4 at step 800: 1 → 2 nodes +[n3]\n"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: status text:\n%s\nwant the line %q", phase, b.String(), want)
			}
		}
	}

	// Scaled to 4, three free: not "after losing some" (until a loss).
	st = spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2", "n3"},
		MinNodes: 1, TargetNodes: 4, Rescalings: []spec.Rescaling{{Generation: 5, AtStep: 900, FromNodes: 2, ToNodes: 3, Added: []string{"n3"}}}}
	for _, tc := range []struct {
		recs []spec.Recovery
		want string
	}{
		{nil, "nodes        min_nodes 1; 3 of 4 asked for by a scale: it takes more as they come free, at chunk boundaries\n"},
		{[]spec.Recovery{{Generation: 6, Shrunk: true}}, "nodes        min_nodes 1; 3 of 4 after losing some: free nodes are taken back at chunk boundaries\n"},
	} {
		st.Recoveries = tc.recs
		b.Reset()
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("status text:\n%s\nwant the line %q", b.String(), tc.want)
		}
	}

	// Its ask for a free node: waiting, or when it comes; none once ended.
	since := time.Date(2026, 12, 5, 21, 30, 5, 0, time.UTC)
	for _, tc := range []struct {
		phase spec.Phase
		ask   spec.NodeAsk
		want  string
	}{
		{spec.PhaseTraining, spec.NodeAsk{Why: "growing back to 3 nodes", WaitingSince: since},
			"  asking     growing back to 3 nodes: an ask waits for a free node since 21:30:05Z (one ends the chunk in flight early)\n"},
		{spec.PhaseTraining, spec.NodeAsk{Why: "growing back to 3 nodes", Next: since},
			"  asking     growing back to 3 nodes: asks for a free node from 2026-12-05 21:30:05Z on (at the first chunk boundary then, or while a chunk trains)\n"},
		{spec.PhaseFailed, spec.NodeAsk{Why: "growing back to 3 nodes", Next: since}, ""},
	} {
		st.Phase, st.NodeAsk = tc.phase, &tc.ask
		b.Reset()
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "  asking"); got != (tc.want != "") || !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s, %+v: status text:\n%s\nwant the line %q", tc.phase, tc.ask, b.String(), tc.want)
		}
	}
}

// TestPrintStrategy: every candidate's line names what its communication
// is, the codec and its encoding for a compressed job; the chosen one is
// marked and the prediction set against the measured speed.
func TestPrintStrategy(t *testing.T) {
	p := &spec.StrategyPlan{DataParallel: 2, MaxRanks: 2, Reason: "r", PredictedStepSeconds: 2e-3, Candidates: []spec.StrategyCandidate{
		{Ranks: 1, ComputeSeconds: 3e-3, StepSeconds: 3e-3, ExamplesPerSec: 100, Oversubscription: 1},
		{Ranks: 2, ComputeSeconds: 1.5e-3, CommSeconds: 0.5e-3, StepSeconds: 2e-3, ExamplesPerSec: 150, Oversubscription: 1,
			Codec: "sign:1024", CodecSeconds: 0.2e-3},
	}}
	var b strings.Builder
	printStrategy(&b, p, 1, 400)
	var pairs strings.Builder
	printStrategy(&pairs, &spec.StrategyPlan{DataParallel: 4, MaxRanks: 6, Reason: "r"}, 2, 0)
	if want := "data parallel 4 of 6 rank(s), 2 node(s) of 2: r"; !strings.Contains(pairs.String(), want) {
		t.Errorf("missing %q in\n%s", want, pairs.String())
	}
	for _, want := range []string{
		"data parallel 2 of 2 node(s): r",
		"  1 rank(s): step 3 ms = 3 compute + 0 allreduce;",
		"* 2 rank(s): step 2 ms = 1.5 compute + 0.5 sign:1024 exchange (0.2 encoding);",
		"predicted 500 steps/s, measured 400 (×0.80)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// TestWebUI: links point at --ui when given, else beside the frontend at
// port + 1000 (where `cann-train dev` and temporal server start-dev serve
// the UI); "none" and an address without a usable port give no link.
func TestWebUI(t *testing.T) {
	cases := []struct {
		address, ui, want string
		tls               bool
	}{
		{"127.0.0.1:7233", "", "http://127.0.0.1:8233", false},
		{"127.0.0.1:17233", "", "http://127.0.0.1:18233", false},
		{"temporal.example:7233", "", "http://temporal.example:8233", false},
		{"0.0.0.0:7233", "", "http://127.0.0.1:8233", false},
		{"[::1]:7233", "", "http://[::1]:8233", false},
		{"127.0.0.1:7233", "http://ui.example:8080", "http://ui.example:8080", false},
		{"127.0.0.1:7233", "none", "", false},
		{"127.0.0.1:65000", "", "", false},
		{"temporal.example", "", "", false},
		{"ml.a1b2c.tmprl.cloud:7233", "", "https://cloud.temporal.io", true},
		{"temporal.example:7233", "", "", true},
		{"temporal.example:7233", "https://ui.example", "https://ui.example", true},
	}
	for _, tc := range cases {
		e := &env{address: tc.address}
		if tc.tls {
			e.temporal.ConnectionOptions.TLS = &tls.Config{}
		}
		if got := e.webUI(tc.ui); got != tc.want {
			t.Errorf("address %q (TLS %v), --ui %q: %q; want %q", tc.address, tc.tls, tc.ui, got, tc.want)
		}
	}
}

// TestStatusTextRecoveries: a node replaced by a spare, one the run went
// on without, and one whose restarted worker took its rank again.
func TestStatusTextRecoveries(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		rec  spec.Recovery
		want string
	}{
		{"spare", spec.Recovery{Generation: 2, FailedNodes: []string{"n2"}, Replacement: []string{"n4"}, FailedAtStep: 130, ResumeStep: 100, LostSteps: 30},
			"  gen 2: n2 → n4 at step 130, rewound to 100 (30 steps lost)"},
		{"shrunk", spec.Recovery{Generation: 2, FailedNodes: []string{"n2"}, Shrunk: true, FailedAtStep: 130, ResumeStep: 100, LostSteps: 30},
			"  gen 2: n2 → (no spare: shrunk) at step 130"},
		{"back", spec.Recovery{Generation: 2, FailedNodes: []string{"n1"}, FailedAtStep: 1848, ResumeStep: 1800, LostSteps: 48},
			"  gen 2: n1 → n1 (back) at step 1848"},
		{"back, recorded", spec.Recovery{Generation: 2, FailedNodes: []string{"n1"}, Back: []string{"n1"}, Nodes: 3, FailedAtStep: 1848, ResumeStep: 1800, LostSteps: 48},
			"  gen 2: n1 → n1 (back) at step 1848"},
		// Every worker restarted at once (the nodes fell silent: no peer
		// noticed); two were back when the run acquired, one spare.
		{"all lost", spec.Recovery{Generation: 4, FailedNodes: []string{"n1", "n2", "n3", "n4"}, Replacement: []string{"n5"}, Back: []string{"n1", "n3"},
			Nodes: 3, Shrunk: true, FailedAtStep: 5000, ResumeStep: 5000, SeenAt: t0, ResumedAt: t0.Add(1500 * time.Millisecond),
			Reason: "node(s) [n1 n2 n3 n4] stopped heartbeating"},
			"  gen 4: n1 n2 n3 n4 → n5, n1 n3 (back), (no spare: shrunk to 3) at step 5000, rewound to 5000 (0 steps lost); " +
				"no peer noticed first; first step 1.50s after the chunk failed\n"},
		// Every worker restarted at once: n1 came back first and failed
		// the chunk without state; n3 and n4 were not back when the run
		// acquired.
		{"others gone", spec.Recovery{Generation: 2, FailedNodes: []string{"n1"}, Back: []string{"n1"}, Removed: []string{"n3", "n4"},
			Nodes: 2, Shrunk: true, FailedAtStep: 3000, ResumeStep: 3000},
			"  gen 2: n1 → n1 (back), (no spare: shrunk to 2; n3 n4 gone too) at step 3000"},
		// A corrupt checkpoint: no node lost, the run went back one.
		{"corrupt", spec.Recovery{Generation: 3, FailedAtStep: 2500, ResumeStep: 2000, LostSteps: 500, SeenAt: t0,
			ResumedAt: t0.Add(80 * time.Millisecond), Reason: "checkpoint at step 2500 is corrupt: …"},
			"  gen 3: no node lost, restarted on the same nodes; at step 2500, rewound to 2000 (500 steps lost); first step 0.08s after the chunk failed\n      checkpoint at step 2500 is corrupt"},
		// The service was out: every node answered after, none failed.
		{"outage", spec.Recovery{Generation: 5, FailedAtStep: 1000, ResumeStep: 1000, Outage: true, SeenAt: t0,
			ResumedAt: t0.Add(120 * time.Millisecond), Reason: "every node's heartbeats stopped at once …"},
			"  gen 5: service outage, no node lost; at step 1000, rewound to 1000 (0 steps lost); first step 0.12s after the chunk failed\n"},
		// … where no node's word said how far the chunk got.
		{"outage, step unknown", spec.Recovery{Generation: 5, FailedAtStep: 1000, ResumeStep: 1000, Outage: true, StepUnknown: true, SeenAt: t0},
			"  gen 5: service outage, no node lost; the chunk from step 1000 was in flight (how far it got is unknown: no node's word reached the run), " +
				"rewound to 1000 (what it trained was lost)"},
		{"outage, step unknown, behind", spec.Recovery{Generation: 5, FailedAtStep: 1000, ResumeStep: 900, LostSteps: 100, Outage: true, StepUnknown: true, SeenAt: t0},
			"rewound to 900 (100 steps lost, and what it trained)"},
		{"peer noticed", spec.Recovery{Generation: 2, FailedNodes: []string{"n2"}, Replacement: []string{"n4"}, FailedAtStep: 130, ResumeStep: 100, LostSteps: 30,
			NoticedAt: t0, SeenAt: t0.Add(20 * time.Millisecond), ResumedAt: t0.Add(200 * time.Millisecond)},
			"(30 steps lost); detected 0.02s, first step 0.20s after the peer notice\n"},
		// The generation failed before its first step (the next recovery
		// follows): no "first step 0.00s".
		{"no step", spec.Recovery{Generation: 2, FailedNodes: []string{"n2"}, Replacement: []string{"n4"}, FailedAtStep: 130, ResumeStep: 100, LostSteps: 30,
			NoticedAt: t0, SeenAt: t0.Add(10 * time.Millisecond)},
			"(30 steps lost); detected 0.01s after the peer notice; no first step recorded since\n"},
	} {
		st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Recoveries: []spec.Recovery{tc.rec}}
		var b bytes.Buffer
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s: status text:\n%s\nwant %q", tc.name, b.String(), tc.want)
		}
	}
}

// TestStatusTextResumeHint: a failed or cancelled run with a checkpoint
// says how to continue it; a completed one, or one without, does not.
func TestStatusTextResumeHint(t *testing.T) {
	last := &spec.CheckpointRef{URL: "file:///b", Run: "x", Step: 1300, Key: "runs/x/ckpt/000000001300/manifest.json"}
	const hint = "resume       cann-train run -f JOB --name x --resume continues it from step 1300\n"
	for _, tc := range []struct {
		phase spec.Phase
		ck    *spec.CheckpointRef
		step  int64
		want  bool
	}{
		{spec.PhaseFailed, last, 1400, true},
		{spec.PhaseCancelled, last, 1350, true},
		{phaseTerminated, last, 1350, true},
		{phaseTimedOut, last, 1350, true},
		{spec.PhaseFailed, nil, 40, false},
		{spec.PhaseCompleted, last, 2000, false},
		{spec.PhaseTraining, last, 1400, false},
	} {
		st := spec.RunStatus{RunID: "run/x", Phase: tc.phase, Model: "mlp-mnist", Step: tc.step, TotalSteps: 2000, LastCkpt: tc.ck, Error: "x"}
		var b bytes.Buffer
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), hint); got != tc.want {
			t.Errorf("%s at %d (checkpoint %v): hint shown %v, want %v\n%s", tc.phase, tc.step, tc.ck != nil, got, tc.want, b.String())
		}
	}
}

// TestStatusTextResumedData: a resumption whose earlier run trained on
// another data set than the run after it says so; the same data, or an
// unknown one, adds nothing.
func TestStatusTextResumedData(t *testing.T) {
	const note = "on another data set"
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		resumed []spec.Resumption
		now     string
		want    []string
	}{
		{"same data", []spec.Resumption{{Phase: spec.PhaseFailed, FromStep: 200, At: at, DataSHA256: "aaaa"}}, "aaaa", nil},
		{"unknown before", []spec.Resumption{{Phase: spec.PhaseFailed, FromStep: 200, At: at}}, "aaaa", nil},
		{"not yet compared", []spec.Resumption{{Phase: spec.PhaseFailed, FromStep: 200, At: at, DataSHA256: "aaaa"}}, "", nil},
		{"changed", []spec.Resumption{{Phase: spec.PhaseFailed, FromStep: 200, At: at, DataSHA256: "aaaa"}}, "bbbb",
			[]string{"             on another data set: it trained on sha256 aaaa, the run after it on bbbb\n"}},
		{"changed at the first of two", []spec.Resumption{
			{Phase: spec.PhaseFailed, FromStep: 200, At: at, DataSHA256: "aaaa"},
			{Phase: spec.PhaseCancelled, FromStep: 400, At: at, DataSHA256: "bbbb"}}, "bbbb",
			[]string{"resumed      from step 200 at 2026-12-04 09:00:00: an earlier run failed at step 0\n             on another data set: it trained on sha256 aaaa, the run after it on bbbb\nresumed      from step 400"}},
	} {
		st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist", Resumed: tc.resumed, DataSHA256: tc.now}
		var b bytes.Buffer
		if err := printStatus(&b, st, "text", "", "default"); err != nil {
			t.Fatal(err)
		}
		got := b.String()
		if strings.Count(got, note) != len(tc.want) {
			t.Errorf("%s: %d notes of a data change, want %d:\n%s", tc.name, strings.Count(got, note), len(tc.want), got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: status text:\n%s\nwant %q", tc.name, got, w)
			}
		}
	}
}

func TestEndedAs(t *testing.T) {
	for _, tc := range []struct {
		phase spec.Phase
		step  int64
		err   string
		want  string
	}{
		{spec.PhaseCancelled, 200, "cancelled at step 200; last checkpoint at step 100", "cancelled at step 200"},
		{spec.PhaseCancelled, 40, "cancelled at step 40", "cancelled at step 40"},
		{spec.PhaseFailed, 340, "no node to replace node-2 within 5m0s", "failed at step 340: no node to replace node-2 within 5m0s"},
		{spec.PhaseFailed, 340, "checkpoint at step 300 is corrupt; last checkpoint at step 200", "failed at step 340: checkpoint at step 300 is corrupt"},
		{"terminated", 512, "", "terminated at step 512"},
	} {
		if got := endedAs(tc.phase, tc.step, tc.err); got != tc.want {
			t.Errorf("endedAs(%s, %d, %q) = %q, want %q", tc.phase, tc.step, tc.err, got, tc.want)
		}
	}
}

// TestStatusTextExternal: an external job's status leaves out what only
// the built-in engine measures (chunks, comm share, the global batch, the
// gradient exchange) rather than print zeros.
func TestStatusTextExternal(t *testing.T) {
	s := spec.RunSpec{Name: "ddp", Nodes: 2, Steps: 300, External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}}}.WithDefaults()
	st := spec.RunStatus{RunID: "run/ddp", Phase: spec.PhaseCompleted, Model: spec.ModelExternal, Nodes: []string{"n1", "n2"},
		Step: 300, TotalSteps: 300, MinNodes: 2, GlobalBatch: s.GlobalBatch(), Sync: s.NewSyncStatus(), StepsPerSec: 22.3, SamplesPerSec: 3943}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"steps        300/300\n", "speed        22.3 steps/s over the run; last launch 3943 samples/s\n", "nodes        min_nodes 2\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
	for _, not := range []string{"chunk(s)", "comm share", "global batch", "gradients"} {
		if strings.Contains(text, not) {
			t.Errorf("status text of an external job says %q:\n%s", not, text)
		}
	}
	// A script that reports no samples_per_sec: its samples/s unknown, not 0.
	st.SamplesPerSec = 0
	b.Reset()
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	if want := "speed        22.3 steps/s over the run; samples/s - (the script reports no samples_per_sec)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status text lacks %q:\n%s", want, b.String())
	}
	// Paused in its first launch: no speed measured yet, and none said.
	st.Phase, st.StepsPerSec, st.SamplesPerSec = spec.PhasePaused, 0, 0
	b.Reset()
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "speed") {
		t.Errorf("status text of an external job with no launch ended says a speed:\n%s", b.String())
	}
	// Failed before its job said anything: no total, no loss (not zeros).
	st.Phase, st.Step, st.TotalSteps = spec.PhaseFailed, 0, 0
	b.Reset()
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"steps        0 (the job has not said its total yet)\n", "loss         - (none reported)\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text of an external job that reported nothing lacks %q:\n%s", want, b.String())
		}
	}
}

// TestChangeTellerSkipsTheResumedRuns: a run resumed from an earlier one
// carries its recoveries and node-count changes over; `run --resume
// --wait` says only the new ones (it said the earlier run's as news).
func TestChangeTellerSkipsTheResumedRuns(t *testing.T) {
	earlier := spec.RunStatus{
		Recoveries: []spec.Recovery{{Generation: 2, FailedNodes: []string{"a2"}, Replacement: []string{"a2"}, FailedAtStep: 97, ResumeStep: 75}},
		Rescalings: []spec.Rescaling{{Generation: 3, FromNodes: 2, ToNodes: 3}},
	}
	now := earlier
	now.Recoveries = append(slices.Clone(earlier.Recoveries), spec.Recovery{Generation: 5, FailedNodes: []string{"b1"}, Replacement: []string{"b9"}, FailedAtStep: 310, ResumeStep: 300})
	for _, tc := range []struct {
		name   string
		before *spec.RunStatus
		want   []string
	}{
		{"a watch: every change, in the order they came", nil, []string{"gen 2", "gen 3 at step 0: 2 → 3 nodes", "gen 5"}},
		{"a resumed run: the new ones", &earlier, []string{"gen 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tl := newChangeTeller(&b, tc.before)
			if !tl.news(now) {
				t.Fatal("no news")
			}
			tl.tell(now)
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("told %d lines; want %d:\n%s", len(lines), len(tc.want), b.String())
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d %q; want it to say %q", i+1, lines[i], w)
				}
			}
			if tl.news(now) {
				t.Error("news after telling it")
			}
		})
	}
}

func TestLiveResumed(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	rec := spec.Recovery{Generation: 2, FailedNodes: []string{"n2"}, NoticedAt: t0, SeenAt: t0.Add(time.Second)}
	recorded := rec
	recorded.ResumedAt = t0.Add(3 * time.Second)
	for _, tc := range []struct {
		name    string
		st      spec.RunStatus
		first   time.Time
		want    time.Time
		wantOut string
	}{
		{"the running launch's first step", spec.RunStatus{Recoveries: []spec.Recovery{rec}}, t0.Add(5 * time.Second), t0.Add(5 * time.Second),
			"detected 1.00s, first step 5.00s after the peer notice"},
		{"no first step yet", spec.RunStatus{Recoveries: []spec.Recovery{rec}}, time.Time{}, time.Time{}, "no first step recorded since"},
		{"the workflow's own figure wins", spec.RunStatus{Recoveries: []spec.Recovery{recorded}}, t0.Add(5 * time.Second), recorded.ResumedAt, "first step 3.00s"},
		{"a step before the recovery", spec.RunStatus{Recoveries: []spec.Recovery{rec}}, t0.Add(time.Second / 2), time.Time{}, "no first step recorded since"},
		{"an earlier run's recovery", spec.RunStatus{Recoveries: []spec.Recovery{rec}, Resumed: []spec.Resumption{{Recoveries: 1}}},
			t0.Add(time.Hour), time.Time{}, "no first step recorded since"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.st.RunID, tc.st.Phase = "run/x", spec.PhaseTraining
			liveResumed(&tc.st, tc.first)
			if got := tc.st.Recoveries[0].ResumedAt; !got.Equal(tc.want) {
				t.Errorf("ResumedAt %v; want %v", got, tc.want)
			}
			var b bytes.Buffer
			if err := printStatus(&b, tc.st, "text", "", "default"); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.wantOut) {
				t.Errorf("status says\n%s\nwant %q", b.String(), tc.wantOut)
			}
		})
	}
	var none spec.RunStatus
	liveResumed(&none, t0) // no recovery: nothing to complete (and no panic)
}

func TestStatusTextRefusedSignal(t *testing.T) {
	st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseTraining, Model: "mlp-mnist",
		RefusedSignal:  `green-override signal refused: its payload {"until":"tomorrow"}: parsing time "tomorrow"`,
		IgnoredSignals: []string{`"pasue" (did you mean pause?)`, `"stop"`}}
	var b bytes.Buffer
	if err := printStatus(&b, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"signal       green-override signal refused: its payload {\"until\":\"tomorrow\"}",
		"signal       ignored, not a run's: \"pasue\" (did you mean pause?), \"stop\" (a run's signals: pause, resume,"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status says\n%s\nwant %q", b.String(), want)
		}
	}
}

// Under an hour waited reads as a duration (27s, not "0.01 h"), a plan
// for less than a second of training as "under 1s" (not "0s").
func TestPrintGreenShortTimes(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	pl := &spec.CarbonPlan{MadeAt: now.Add(-time.Minute), Deadline: now.Add(time.Hour), Work: spec.Duration(300 * time.Millisecond)}
	g := &spec.GreenStatus{Policy: spec.GreenPolicy{Trace: "x.csv"}.WithDefaults(), Plan: pl, Waits: 1, WaitedSeconds: 27.4}
	for _, tc := range []struct {
		live bool
		want string
	}{
		{true, "plan       0 slot(s) for under 1s of training"},
		{true, "1 green wait(s), 27s waited"},
		{false, "for under 1s of training then left"},
	} {
		var b bytes.Buffer
		printGreen(&b, g, tc.live, now)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("live %v:\n%s\nwant %q", tc.live, b.String(), tc.want)
		}
	}
}

// The green lines: a pricing problem in its own line, worded for a run
// that goes on or has ended; the wait in progress counted in "h waited".
func TestPrintGreenPricingAndWaiting(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	g := &spec.GreenStatus{Policy: spec.GreenPolicy{Provider: spec.ProviderUK}.WithDefaults(), Waits: 2, WaitedSeconds: 1800,
		WaitingSince: now.Add(-90 * time.Minute), Note: "green plan failed: x; training without waiting", PriceNote: "carbon: 503"}
	for _, tc := range []struct {
		live bool
		want []string
	}{
		{true, []string{"2 green wait(s), 2.00 h waited", "note       green plan failed: x", "pricing    the last chunks not priced yet (tried again at the next chunk boundary): carbon: 503"}},
		{false, []string{"pricing    the last chunks not priced (the run has ended; `cann-train green report` prices it again): carbon: 503"}},
	} {
		var b bytes.Buffer
		printGreen(&b, g, tc.live, now)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("live %v:\n%s\nwant %q", tc.live, b.String(), w)
			}
		}
	}
}

// An ended run's plan is history: its windows are not shown as to come
// (a completed run showed "plan 1 slot(s) for 0s of training … green
// window 19:44–19:45"), nor its last reading as the present.
func TestPrintGreenPlanOfAnEndedRun(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	pl := &spec.CarbonPlan{MadeAt: now.Add(-time.Hour), Deadline: now.Add(time.Hour), Work: spec.Duration(20 * time.Minute),
		Slots: []spec.CarbonSlot{{Start: now.Add(10 * time.Minute), End: now.Add(30 * time.Minute), GPerKWh: 50}}}
	g := &spec.GreenStatus{Policy: spec.GreenPolicy{Trace: "x.csv"}.WithDefaults(), Plan: pl, NowGPerKWh: 180}
	for _, tc := range []struct {
		live       bool
		want, miss []string
	}{
		{true, []string{"  plan       1 slot(s) for 20m0s of training", "g/kWh); now 180 g/kWh; 0 green wait(s)",
			"g/kWh expected vs 0 over the same work started now"}, []string{"last plan", "last read", "running now"}},
		{false, []string{"  last plan  made 13:00 UTC, for 20m0s of training then left", "g/kWh); last read 180 g/kWh; 0 green wait(s)"},
			[]string{"slot(s)", "now 180"}},
	} {
		var b bytes.Buffer
		printGreen(&b, g, tc.live, now)
		for _, want := range tc.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("live %v:\n%s\nwant %q", tc.live, b.String(), want)
			}
		}
		for _, miss := range tc.miss {
			if strings.Contains(b.String(), miss) {
				t.Errorf("live %v:\n%s\nwant no %q", tc.live, b.String(), miss)
			}
		}
	}
}

// TestPrintGreenOverriddenPlan: while a green override sets the policy
// aside, and after a run ended under one, the plan made before it is not
// shown as the windows the run follows (status showed "green window
// 02:37–02:38 UTC" while the run trained at once): it is marked
// overridden, without its windows.
func TestPrintGreenOverriddenPlan(t *testing.T) {
	now := time.Date(2026, 12, 7, 2, 30, 0, 0, time.UTC)
	pl := &spec.CarbonPlan{MadeAt: now.Add(-10 * time.Minute), Deadline: now.Add(time.Hour), Work: spec.Duration(time.Minute),
		Slots: []spec.CarbonSlot{{Start: now.Add(7 * time.Minute), End: now.Add(8 * time.Minute), GPerKWh: 50}}}
	until := now.Add(time.Hour)
	for _, tc := range []struct {
		name       string
		live       bool
		overridden bool
		until      time.Time
		want, miss []string
	}{
		{name: "not overridden", live: true, want: []string{"  plan       1 slot(s) for 1m0s of training", "    green window 02:37–02:38 UTC"}, miss: []string{"overridden"}},
		{name: "overridden until", live: true, overridden: true, until: until,
			want: []string{"  override   policy ignored until 03:30 UTC",
				"  plan       (overridden until 03:30 UTC) 1 slot(s) planned 02:20 UTC, not followed: the run trains at once, and plans again once the override ends"},
			miss: []string{"green window", "g/kWh expected"}},
		{name: "overridden for good", live: true, overridden: true,
			want: []string{"  plan       (overridden for good) 1 slot(s) planned 02:20 UTC, not followed: the run trains at once (green override --clear restores the policy)"},
			miss: []string{"green window"}},
		{name: "override over, not yet noted", live: true, overridden: true, until: now.Add(-time.Minute),
			want: []string{"(overridden until 02:29 UTC, ended) 1 slot(s) planned 02:20 UTC, not followed: the run plans again at its next chunk boundary"},
			miss: []string{"green window"}},
		{name: "ended under an override", overridden: true, until: until,
			want: []string{"  last plan  made 02:20 UTC, for 1m0s of training then left (overridden until 03:30 UTC: not followed)"},
			miss: []string{"green window", "slot(s)"}},
		{name: "ended, not overridden", want: []string{"for 1m0s of training then left\n"}, miss: []string{"overridden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &spec.GreenStatus{Policy: spec.GreenPolicy{Trace: "x.csv"}.WithDefaults(), Plan: pl, Overridden: tc.overridden, OverrideUntil: tc.until}
			var b bytes.Buffer
			printGreen(&b, g, tc.live, now)
			for _, want := range tc.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("%s\nwant %q", b.String(), want)
				}
			}
			for _, miss := range tc.miss {
				if strings.Contains(b.String(), miss) {
					t.Errorf("%s\nwant no %q", b.String(), miss)
				}
			}
		})
	}
}

// A guessed Web UI is linked only where something listens at it (a dev
// server started with --ui-port 0 has none); a given one always.
func TestUILinkOnlyWhereListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if port <= 1000 {
		t.Fatalf("port %d: no frontend port 1000 below it", port)
	}
	e := &env{address: fmt.Sprintf("127.0.0.1:%d", port-1000)}
	want := fmt.Sprintf("http://127.0.0.1:%d", port)
	if got := e.uiLink(""); got != want {
		t.Errorf("listening: %q, want %q", got, want)
	}
	ln.Close()
	if got := e.uiLink(""); got != "" {
		t.Errorf("nothing listening: %q, want no link", got)
	}
	if got := e.uiLink("http://ui.example:8080"); got != "http://ui.example:8080" {
		t.Errorf("--ui given: %q", got)
	}
}

// A status query unanswered because the run's workflow task keeps failing
// says so, not that no control worker answered.
func TestNoAnswerOfAFailingTask(t *testing.T) {
	e := &noAnswerError{id: "run/x", query: "status"}
	if !strings.Contains(e.Error(), "no control worker answered") {
		t.Errorf("first attempt: %q", e.Error())
	}
	e.taskAttempts = 6
	if got := e.Error(); !strings.Contains(got, "its workflow task has failed 5 time(s) in a row") || strings.Contains(got, "no control worker") {
		t.Errorf("a failing task: %q", got)
	}
}

// TestStepMark: a watched run's step holds while it trains on in one
// generation (a poll between a launch's end and the status taking it in
// said the launch's start), and goes back after a recovery or a pause.
func TestStepMark(t *testing.T) {
	training := func(gen int64) spec.RunStatus { return spec.RunStatus{Phase: spec.PhaseTraining, Generation: gen} }
	var m stepMark
	for i, tc := range []struct {
		st         spec.RunStatus
		step, want int64
	}{
		{training(1), 10, 10},
		{training(1), 35, 35},
		{training(1), 30, 35}, // the status before it took in the launch's end
		{training(1), 40, 40},
		{training(2), 30, 30}, // a recovery rewound it
		{spec.RunStatus{Phase: spec.PhasePaused, Generation: 2}, 30, 30},
		{training(2), 20, 20}, // resumed from an earlier checkpoint
	} {
		if got := m.hold(tc.st, tc.step); got != tc.want {
			t.Errorf("poll %d (%s gen %d, step %d): %d, want %d", i, tc.st.Phase, tc.st.Generation, tc.step, got, tc.want)
		}
	}
}

// TestStatusTextLogs: the live log tails say where each process's whole
// log is on its node, and the launch's directory in the run's bucket
// (run_<name>_g<generation>_e<launch>, the directories `gen N` is in).
func TestStatusTextLogs(t *testing.T) {
	st := spec.RunStatus{RunID: "run/ddp", Phase: spec.PhaseTraining, Model: spec.ModelExternal, Nodes: []string{"node-1", "node-2"}, Step: 5, TotalSteps: 300}
	for _, tc := range []struct {
		name string
		logs []spec.NodeLogs
		want []string
	}{
		{"with the node's directory", []spec.NodeLogs{
			{Node: "node-1", Session: "run/ddp/g2/e3", Dir: "/w/node-1/runs/ddp/worlds/run_ddp_g2_e3", Procs: []spec.ProcessTail{{Process: "rank-0", Lines: []string{"step 5"}}}},
			{Node: "node-2", NodeRank: 1, Session: "run/ddp/g2/e3", Dir: "/w/node-2/runs/ddp/worlds/run_ddp_g2_e3", Procs: []spec.ProcessTail{{Process: "rank-1", Rank: 1}}},
		}, []string{
			"logs         last 20 lines per process, live (whole logs: on each node, the file named; in the run's bucket under runs/ddp/logs/run_ddp_g2_e3/ once the launch ends)\n",
			"  rank-0 on node-1: /w/node-1/runs/ddp/worlds/run_ddp_g2_e3/rank-0.log\n    | step 5\n",
			"  rank-1 on node-2: /w/node-2/runs/ddp/worlds/run_ddp_g2_e3/rank-1.log\n    (no output yet)\n",
		}},
		{"from an older node worker", []spec.NodeLogs{{Node: "node-1", Procs: []spec.ProcessTail{{Process: "rank-0"}}}},
			[]string{"(whole logs: on the nodes; in the run's bucket once the launch ends)\n", "  rank-0 on node-1\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := summarize(st, "", "default", nil)
			sum.Logs = tc.logs
			var b bytes.Buffer
			if err := printSummary(&b, st, sum, "text"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("status\n%s\nwant %q", b.String(), w)
				}
			}
		})
	}
}

// TestStatusLineOfAnEndedRun: a run Temporal ended while it was paused
// (terminated) keeps its last detail without the hints to act on it — a
// resume cannot reach it — while a live run keeps them.
func TestStatusLineOfAnEndedRun(t *testing.T) {
	for _, tc := range []struct {
		phase spec.Phase
		want  string
	}{
		{phaseTerminated, "terminated: paused at step 1230"},
		{spec.PhasePaused, "paused at step 1230 (cann-train resume T continues)"},
		{spec.PhaseTraining, "training: paused at step 1230 (cann-train resume T continues) (pause requested: holds at the next chunk boundary)"},
	} {
		s := Summary{Status: tc.phase, Detail: "paused at step 1230 (cann-train resume T continues)", PauseRequested: true}
		if got := statusLine(s); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.phase, got, tc.want)
		}
	}
}

// TestLiveOfPrefersTheStoringNode: of the chunk's beats, the furthest step
// is the run's progress; at the same step, the node that says it stores
// the checkpoint (rank 0, its peers done and waiting) wins, whatever the
// order the server lists them in. A launch the run stopped (its
// activities cancel-requested) is not progress, however far it got.
func TestLiveOfPrefersTheStoringNode(t *testing.T) {
	done := pendingBeat{progress: spec.ChunkProgress{Step: 300, To: 300}}
	storing := pendingBeat{progress: spec.ChunkProgress{Step: 300, To: 300, Storing: 300}}
	behind := pendingBeat{progress: spec.ChunkProgress{Step: 250, To: 300, Storing: 200}}
	for _, tc := range []struct {
		name  string
		beats []pendingBeat
		want  int64 // live.Storing
	}{
		{"storing last", []pendingBeat{done, storing}, 300},
		{"storing first", []pendingBeat{storing, done}, 300},
		{"none storing", []pendingBeat{done, done}, 0},
		{"a node behind storing", []pendingBeat{behind, done}, 0},
		// A stopped launch's nodes train on until they see the stop:
		// their steps are not the run's.
		{"a stopped launch further on", []pendingBeat{storing, {progress: spec.ChunkProgress{Step: 307, To: 400}, stopping: true}}, 300},
	} {
		live, _ := liveOf(tc.beats, nil)
		if live == nil || live.Step != 300 || live.Storing != tc.want {
			t.Errorf("%s: live %+v; want step 300, storing %d", tc.name, live, tc.want)
		}
	}
	stopped := pendingBeat{progress: spec.ChunkProgress{Step: 107, To: 300}, stopping: true}
	if live, _ := liveOf([]pendingBeat{stopped, stopped}, nil); live != nil {
		t.Errorf("only a stopped launch's beats: live %+v; want none", live)
	}
}
