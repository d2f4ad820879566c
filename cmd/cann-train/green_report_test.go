package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/spec"
)

// esSeries is esTrace read.
func esSeries(t *testing.T) *carbon.Series {
	t.Helper()
	f, err := os.Open(esTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	series, err := carbon.ReadCSV(f, "")
	if err != nil {
		t.Fatal(err)
	}
	return series
}

func esTrace(t *testing.T) string {
	t.Helper()
	trace := filepath.Join("..", "..", "..", "shared", "data", "carbon", "ES_2022_hourly.csv")
	if _, err := os.Stat(trace); err != nil {
		t.Fatalf("real trace missing (CI lays shared/ beside the repo): %v", err)
	}
	return trace
}

// A run that waited for its slot: the report prices each segment on the
// trace, the baseline is the same work from the run's start, and the SVG
// shows the chunks and the plan.
func TestGreenReport(t *testing.T) {
	trace, series := esTrace(t), esSeries(t)
	day := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	h := func(hour float64) time.Time { return day.Add(time.Duration(hour * float64(time.Hour))) }
	ci := func(hour float64) float64 {
		v, err := series.At(h(hour))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	policy := spec.GreenPolicy{Trace: trace, Interruptible: true, NodeWatts: 250, PUE: 1.2}.WithDefaults()
	st := spec.RunStatus{
		RunID: "run/green", Phase: spec.PhaseCompleted, StartedAt: h(8),
		Segments: []spec.Segment{
			{Start: h(13), End: h(14), Nodes: 2, WallSeconds: 3600, FromStep: 0, ToStep: 500},
			// A chunk that failed after 15 minutes (a node lost); the rest
			// was trained again on one node.
			{Start: h(14), End: h(14.25), Nodes: 2, WallSeconds: 900, FromStep: 500, ToStep: 530, Lost: true},
			{Start: h(15), End: h(15.5), Nodes: 1, WallSeconds: 1800, FromStep: 500, ToStep: 600, Joules: 0.5 * 3.6e6},
		},
		Green: &spec.GreenStatus{Policy: policy, Waits: 1, WaitedSeconds: 5 * 3600, BudgetG: 500,
			Plan:     &spec.CarbonPlan{MadeAt: h(8), Slots: []spec.CarbonSlot{{Start: h(13), End: h(16), GPerKWh: 100}}},
			Schedule: []spec.BatchChange{{FromStep: 500, GlobalBatch: 48, LearningRate: 1.5e-3}}},
	}
	rep, tl, err := greenReport(context.Background(), st, policy)
	if err != nil {
		t.Fatal(err)
	}
	kwh1 := 2 * 250 * 1.2 / 1000.0 // modelled: 2 nodes × 250 W × PUE 1.2 × 1 h
	lost := kwh1 / 4
	want := kwh1*ci(13) + lost*ci(14) + 0.5*ci(15)
	base := kwh1*ci(8) + lost*ci(9) + 0.5*ci(9) // back to back from 08:00
	if !near(rep.KWh, kwh1+lost+0.5) || !near(rep.Grams, want) || !near(rep.BaselineGrams, base) {
		t.Errorf("kWh %v g %v baseline %v; want %v, %v, %v", rep.KWh, rep.Grams, rep.BaselineGrams, kwh1+lost+0.5, want, base)
	}
	if !near(rep.LostKWh, lost) || !near(rep.LostGrams, lost*ci(14)) || !rep.Segments[1].Lost || rep.Segments[0].Lost {
		t.Errorf("lost %v kWh %v g, segments %+v; want the failed chunk's %v kWh", rep.LostKWh, rep.LostGrams, rep.Segments, lost)
	}
	if !near(rep.SavingsPct, 100*(base-want)/base) || rep.Energy != "mixed" || len(rep.Segments) != 3 || !rep.Segments[2].Measured {
		t.Errorf("report %+v", rep)
	}
	var out bytes.Buffer
	if err := printGreenReport(&out, rep, "json"); err != nil {
		t.Fatal(err)
	}
	var back greenReportJSON
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Waits != 1 || back.BudgetG != 500 || len(back.BatchSchedule) != 1 {
		t.Errorf("json %v: %s", err, out.String())
	}
	svg := filepath.Join(t.TempDir(), "t.svg")
	if err := writeSVG(svg, tl); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(svg)
	if strings.Count(string(b), `class="chunk"`) != 2 || strings.Count(string(b), `class="lost"`) != 1 || strings.Count(string(b), `class="planned"`) != 1 {
		t.Errorf("svg lacks the chunks or the plan:\n%.400s", b)
	}
	out.Reset()
	if err := printGreenReport(&out, rep, "text"); err != nil || !strings.Contains(out.String(), "saved") ||
		!strings.Contains(out.String(), "batch      step 500: 48 (lr 0.0015)") ||
		!strings.Contains(out.String(), "lost       0.1500 kWh") || !strings.Contains(out.String(), "500–530 (lost)") {
		t.Errorf("text report %v:\n%s", err, out.String())
	}
}

// TestGreenReportReplaysATrace: a run of today priced on a trace of 2022
// needs --trace-start (the error says so); with it, the run's start is
// the trace's time, each segment priced where it falls from there.
func TestGreenReportReplaysATrace(t *testing.T) {
	trace := esTrace(t)
	start := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	st := spec.RunStatus{RunID: "run/today", Phase: spec.PhaseCompleted, StartedAt: start,
		Segments: []spec.Segment{{Start: start.Add(time.Hour), End: start.Add(2 * time.Hour), Nodes: 1, WallSeconds: 3600, ToStep: 100}}}
	policy := spec.GreenPolicy{Trace: trace, NodeWatts: 1000, PUE: 1}.WithDefaults()
	if _, _, err := greenReport(context.Background(), st, policy); !errors.Is(err, carbon.ErrOutOfRange) ||
		!strings.Contains(err.Error(), "(--trace-start T replays the trace from T at the run's start)") {
		t.Fatalf("a 2022 trace for a run of today: %v; want it out of range, naming --trace-start", err)
	}
	policy.TraceStart = "2022-03-01T08:00:00Z"
	rep, _, err := greenReport(context.Background(), st, policy)
	if err != nil {
		t.Fatal(err)
	}
	at9, err := esSeries(t).At(time.Date(2022, 3, 1, 9, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !near(rep.KWh, 1) || !near(rep.Grams, at9) {
		t.Errorf("%v kWh, %v g; want 1 kWh at the trace's 09:00 (%v g/kWh)", rep.KWh, rep.Grams, at9)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestStatusShowsControlsAndGreen(t *testing.T) {
	t0 := time.Date(2022, 3, 1, 9, 0, 0, 0, time.UTC)
	st := spec.RunStatus{
		RunID: "run/x", Phase: spec.PhaseGreenWait, Model: spec.ModelMLPMNIST, Step: 200, TotalSteps: 600,
		Nodes: []string{"a", "b"}, Detail: "waiting for the green window until 2022-03-01T14:00:00Z (green window 14:00–18:00 UTC, 120 g/kWh)",
		WaitUntil: t0.Add(5 * time.Hour), PauseRequested: true, PendingNodes: 3, MinNodes: 2, GlobalBatch: 64,
		Rescalings: []spec.Rescaling{{Generation: 2, AtStep: 100, FromNodes: 3, ToNodes: 2, Removed: []string{"c"}}},
		Green: &spec.GreenStatus{
			Policy: spec.GreenPolicy{Trace: "es.csv", Interruptible: true}.WithDefaults(),
			Plan: &spec.CarbonPlan{MadeAt: t0, Work: spec.Duration(time.Hour), Deadline: t0.Add(24 * time.Hour),
				Slots: []spec.CarbonSlot{{Start: t0.Add(5 * time.Hour), End: t0.Add(9 * time.Hour), GPerKWh: 120}}},
			KWh: 0.2, Grams: 480, GPerKWh: 240, BudgetG: 500, BudgetUsedPct: 96, BudgetAlert: true,
		},
	}
	var out bytes.Buffer
	if err := printStatus(&out, st, "text", "", "default"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"status       waiting-green: waiting for the green window until 2022-03-01 14:00 UTC (green window 14:00–18:00 UTC, 120 g/kWh) (pause requested",
		"nodes        min_nodes 2, global batch 64; rescale to 3 pending",
		"gen 2 at step 100: 3 → 2 nodes −[c]",
		"plan       1 slot(s)", "    green window 14:00–18:00 UTC, 120 g/kWh",
		"budget     500 g, 96.0% used — ALERT",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printStatus(&out, st, "json", "", "default"); err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Green == nil || len(s.Green.Plan.Slots) != 1 || s.WaitUntil.IsZero() {
		t.Errorf("json status %v:\n%s", err, out.String())
	}
}

// TestGreenReportAuditItems: a failed chunk that trained no step (a node
// restarted during a green wait) is neither listed nor drawn (its energy
// still counts); the budget line says EXCEEDED or ALERT as status does;
// a run without a green policy, priced on --trace, is labelled with the
// trace only (not "persistence forecast, online planner").
func TestGreenReportAuditItems(t *testing.T) {
	trace := esTrace(t)
	day := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	h := func(hour float64) time.Time { return day.Add(time.Duration(hour * float64(time.Hour))) }
	policy := spec.GreenPolicy{Trace: trace, Interruptible: true, NodeWatts: 250, PUE: 1.2}.WithDefaults()
	segs := []spec.Segment{
		{Start: h(10), End: h(11), Nodes: 1, WallSeconds: 3600, FromStep: 0, ToStep: 500},
		{Start: h(12), End: h(12).Add(300 * time.Millisecond), Nodes: 1, FromStep: 500, ToStep: 500, Lost: true},
		{Start: h(13), End: h(14), Nodes: 1, WallSeconds: 3600, FromStep: 500, ToStep: 1000},
	}
	for _, tc := range []struct {
		name      string
		budget    float64
		green     bool
		wantText  []string
		wantNot   []string
		wantLabel string
	}{
		{name: "exceeded", budget: 10, green: true, wantText: []string{"% used — EXCEEDED"}, wantNot: []string{"500–500"},
			wantLabel: "persistence forecast, online planner"},
		{name: "alert", budget: 96.4, green: true, wantText: []string{"97.0% used — ALERT (≥ 95%)"}, wantNot: []string{"lost       0.0000"}},
		{name: "within", budget: 1e6, green: true, wantNot: []string{"EXCEEDED", "ALERT"}},
		{name: "no green policy", wantNot: []string{"forecast", "planner", "budget"},
			wantLabel: trace + "; the run has no green policy (priced only)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := spec.RunStatus{RunID: "run/g", Phase: spec.PhaseCompleted, StartedAt: h(8), Segments: segs}
			if tc.green {
				st.Green = &spec.GreenStatus{Policy: policy, BudgetG: tc.budget}
			}
			rep, tl, err := greenReport(context.Background(), st, policy)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Segments) != 2 || rep.Segments[1].FromStep != 500 || rep.Segments[1].Lost || len(tl.Lost) != 0 || len(tl.Chunks) != 2 {
				t.Errorf("segments %+v, timeline lost %v chunks %v: want the two that trained", rep.Segments, tl.Lost, tl.Chunks)
			}
			if rep.LostKWh <= 0 {
				t.Errorf("the failed chunk's energy is not counted: %+v", rep)
			}
			var out bytes.Buffer
			if err := printGreenReport(&out, rep, "text"); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
			for _, not := range tc.wantNot {
				if strings.Contains(out.String(), not) {
					t.Errorf("report has %q:\n%s", not, out.String())
				}
			}
			if tc.wantLabel != "" && !strings.Contains(rep.Source, tc.wantLabel) {
				t.Errorf("signal %q; want it to say %q", rep.Source, tc.wantLabel)
			}
		})
	}
}

// TestGreenReportTraceChecks: --trace does not inherit the policy's zone
// or column (the audit's run with zone XX could not be priced on the ES
// trace), and a trace_start that replays the run outside the trace is
// refused before pricing, naming what the trace holds and the starts that
// fit (it failed with a "time outside series" of shifted times).
func TestGreenReportTraceChecks(t *testing.T) {
	trace := esTrace(t)
	start := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	st := spec.RunStatus{RunID: "run/g5", Phase: spec.PhaseCompleted, StartedAt: start,
		Green:    &spec.GreenStatus{Policy: spec.GreenPolicy{Trace: "/elsewhere/xx.csv", Zone: "XX", Column: "lca", TraceStart: "2031-09-11T20:44:00Z"}},
		Segments: []spec.Segment{{Start: start.Add(time.Hour), End: start.Add(3 * time.Hour), Nodes: 1, WallSeconds: 7200, ToStep: 100}}}
	p := reportPolicy(st, trace, "", "2022-03-01T08:00:00Z")
	if p.Trace != trace || p.Zone != "" || p.Column != "" || p.TraceStart != "2022-03-01T08:00:00Z" {
		t.Fatalf("policy for --trace %+v", p)
	}
	if err := checkReportTrace(st, p, true); err != nil {
		t.Fatalf("the ES trace without the policy's zone: %v", err)
	}
	if p := reportPolicy(st, trace, "ES", ""); p.Zone != "ES" || p.TraceStart != "2031-09-11T20:44:00Z" {
		t.Fatalf("--zone ES: %+v", p)
	}
	for _, tc := range []struct{ ts, want string }{
		{"2023-03-01T08:00:00Z", "holds 2022-01-01T00:00:00Z to 2023-01-01T00:00:00Z: trace_start 2023-03-01T08:00:00Z replays the run's 3h0m0s " +
			"(2026-12-07T02:00:00Z to 2026-12-07T05:00:00Z) from 2023-03-01T08:00:00Z to 2023-03-01T11:00:00Z, outside it; " +
			"give a --trace-start between 2022-01-01T00:00:00Z and 2022-12-31T21:00:00Z"},
		{"2022-12-31T22:00:00Z", "outside it; give a --trace-start between"},
		{"2021-12-31T22:00:00Z", "outside it; give a --trace-start between"},
	} {
		err := checkReportTrace(st, reportPolicy(st, trace, "", tc.ts), true)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("trace_start %s: %v; want %q", tc.ts, err, tc.want)
		}
	}
	if err := checkReportTrace(st, reportPolicy(st, trace, "FR", ""), true); !errors.Is(err, carbon.ErrZone) {
		t.Errorf("--zone FR on the ES export: %v", err)
	}
}

// TestGreenReportOverriddenPlan: the timeline of a run whose plan an
// override set aside (during the override, or after it ended under one)
// does not draw that plan's windows as dashed "planned" boxes, and its
// title says why; without the override they are drawn.
func TestGreenReportOverriddenPlan(t *testing.T) {
	trace := esTrace(t)
	day := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	h := func(hour float64) time.Time { return day.Add(time.Duration(hour * float64(time.Hour))) }
	policy := spec.GreenPolicy{Trace: trace, Interruptible: true, NodeWatts: 250, PUE: 1.2}.WithDefaults()
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name       string
		phase      spec.Phase
		overridden bool
		until      time.Time
		planned    int
		title      string
	}{
		{"followed", spec.PhaseTraining, false, time.Time{}, 1, ""},
		{"overridden until", spec.PhaseTraining, true, until, 0, "plan not drawn (overridden until " + until.Format(time.RFC3339) + ")"},
		{"ended under an override for good", spec.PhaseCompleted, true, time.Time{}, 0, "plan not drawn (overridden for good)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := spec.RunStatus{RunID: "run/ov", Phase: tc.phase, StartedAt: h(8),
				Segments: []spec.Segment{{Start: h(8), End: h(9), Nodes: 1, WallSeconds: 3600, ToStep: 100}},
				Green: &spec.GreenStatus{Policy: policy, Overridden: tc.overridden, OverrideUntil: tc.until,
					Plan: &spec.CarbonPlan{MadeAt: h(8), Slots: []spec.CarbonSlot{{Start: h(13), End: h(14), GPerKWh: 100}}}}}
			rep, tl, err := greenReport(context.Background(), st, policy)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Planned) != 1 {
				t.Errorf("json planned %v; want the plan listed", rep.Planned)
			}
			svg := filepath.Join(t.TempDir(), "t.svg")
			if err := writeSVG(svg, tl); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(svg)
			if n := strings.Count(string(b), `class="planned"`); n != tc.planned {
				t.Errorf("%d planned boxes; want %d", n, tc.planned)
			}
			if !strings.Contains(tl.Title, tc.title) || (tc.title == "") != !strings.Contains(tl.Title, "overridden") {
				t.Errorf("title %q; want %q", tl.Title, tc.title)
			}
		})
	}
}

// TestGreenReportGap: on a trace with a gap too long to interpolate, a
// run priced clear of the gap is priced as on the whole trace; a replay
// across the gap is refused before pricing, naming it and the
// --trace-start values that clear it; a run whose timeline crosses it is
// refused naming it.
func TestGreenReportGap(t *testing.T) {
	whole := esTrace(t)
	gapped := filepath.Join(t.TempDir(), "gap.csv")
	writeWithout(t, whole, gapped, "2022-06-01 1") // 10:00–19:00 missing
	start := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	st := spec.RunStatus{RunID: "run/gap", Phase: spec.PhaseCompleted, StartedAt: start,
		Segments: []spec.Segment{{Start: start.Add(time.Hour), End: start.Add(3 * time.Hour), Nodes: 1, WallSeconds: 7200, ToStep: 100}}}
	for _, tc := range []struct {
		name, ts string
		fail     []string
	}{
		{name: "far from the gap", ts: "2022-03-01T08:00:00Z"},
		{name: "ends at the gap", ts: "2022-06-01T07:00:00Z"},
		{name: "across the gap", ts: "2022-06-01T08:00:00Z", fail: []string{"no data from 2022-06-01T10:00:00Z to 2022-06-01T20:00:00Z (10 missing steps before line 3636",
			"trace_start 2022-06-01T08:00:00Z replays the run's 3h0m0s", "give a --trace-start at or before 2022-06-01T07:00:00Z or at or after 2022-06-01T20:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := reportPolicy(st, gapped, "", tc.ts).WithDefaults()
			err := checkReportTrace(st, p, true)
			if tc.fail != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.fail {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v\nwant %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := greenReport(context.Background(), st, p)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := greenReport(context.Background(), st, reportPolicy(st, whole, "", tc.ts).WithDefaults())
			if err != nil {
				t.Fatal(err)
			}
			if got.Grams != want.Grams || got.BaselineGrams != want.BaselineGrams {
				t.Errorf("priced %v g (baseline %v) on the trace with a gap; %v (%v) on the whole", got.Grams, got.BaselineGrams, want.Grams, want.BaselineGrams)
			}
		})
	}
	// The run's timeline crosses the gap (the run waited through it):
	// refused, naming it (at the run's times: the trace replayed from
	// 06:00 puts 10:00 at 06:00 of the run's day), rather than drawn from
	// made-up readings.
	wait := st
	wait.Segments = []spec.Segment{{Start: start, End: start.Add(time.Hour), Nodes: 1, WallSeconds: 3600, ToStep: 50},
		{Start: start.Add(14 * time.Hour), End: start.Add(15 * time.Hour), Nodes: 1, WallSeconds: 3600, FromStep: 50, ToStep: 100}}
	_, _, err := greenReport(context.Background(), wait, reportPolicy(wait, gapped, "", "2022-06-01T06:00:00Z").WithDefaults())
	if !errors.Is(err, carbon.ErrGap) || !strings.Contains(err.Error(), "the report's timeline") || !strings.Contains(err.Error(), "line 3636: no data from 2026-12-07T06:00:00Z to 2026-12-07T16:00:00Z") {
		t.Errorf("a timeline across the gap: %v", err)
	}
}

// writeWithout copies the trace src to dst without the rows that begin
// with any of drop.
func writeWithout(t *testing.T, src, dst string, drop ...string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for line := range bytes.Lines(b) {
		keep := true
		for _, d := range drop {
			keep = keep && !bytes.HasPrefix(line, []byte(d))
		}
		if keep {
			out.Write(line)
		}
	}
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
