package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// writeTrace writes a plain "time,XX" hourly trace of two days starting
// 2022-03-01 00:00 UTC: 300 g/kWh, except 100 g/kWh from 12:00 to 16:00.
func writeTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("time,XX\n")
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 48 {
		v := 300
		if h := i % 24; h >= 12 && h < 16 {
			v = 100
		}
		fmt.Fprintf(&b, "%s,%d\n", t0.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), v)
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runPlanCarbon(t *testing.T, in spec.CarbonInput) spec.CarbonOutput {
	t.Helper()
	return runPlanCarbonWith(t, &Carbon{}, in)
}

func runPlanCarbonWith(t *testing.T, c *Carbon, in spec.CarbonInput) spec.CarbonOutput {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(c.PlanCarbon)
	v, err := env.ExecuteActivity(c.PlanCarbon, in)
	if err != nil {
		t.Fatal(err)
	}
	var out spec.CarbonOutput
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPlanCarbonPlansAndPrices(t *testing.T) {
	trace := writeTrace(t)
	start := time.Date(2022, 3, 2, 8, 30, 0, 0, time.UTC) // day 2: persistence has a day of history
	p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(12 * time.Hour), Interruptible: true, NodeWatts: 500, BudgetG: 10}.WithDefaults()
	seg := spec.Segment{Start: start, End: start.Add(30 * time.Minute), Nodes: 2, WallSeconds: 1800, FromStep: 0, ToStep: 100}
	out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: start, Now: start, Plan: true, Work: 3 * time.Hour,
		Price: []spec.Segment{seg}})
	if out.PlanError != "" || out.PriceError != "" {
		t.Fatalf("errors: %q %q", out.PlanError, out.PriceError)
	}
	pl := out.Plan
	if len(pl.Slots) != 1 || !pl.Slots[0].Start.Equal(time.Date(2022, 3, 2, 12, 0, 0, 0, time.UTC)) ||
		!pl.Slots[0].End.Equal(time.Date(2022, 3, 2, 15, 0, 0, 0, time.UTC)) || pl.Slots[0].GPerKWh != 100 {
		t.Errorf("plan %+v: want 12:00–15:00 at 100 g/kWh", pl.Slots)
	}
	if pl.BaselineGPerKWh != 300 || pl.ExpectedGPerKWh != 100 || out.NowGPerKWh != 300 {
		t.Errorf("plan %+v, now %v", pl, out.NowGPerKWh)
	}
	// 2 nodes × 500 W × 0.5 h = 0.5 kWh at 300 g/kWh.
	if len(out.Priced) != 1 || !near(out.Priced[0].KWh, 0.5) || !near(out.Priced[0].Grams, 150) || out.Priced[0].Measured {
		t.Errorf("priced %+v", out.Priced)
	}
	// Measured joules win over the model.
	seg.Joules = 3.6e6
	out = runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: start, Now: start, Price: []spec.Segment{seg}})
	if out.Plan != nil || !near(out.Priced[0].KWh, 1) || !out.Priced[0].Measured {
		t.Errorf("measured: %+v", out)
	}
}

// trace_start replays the trace: a run starting now follows the grid of
// 2022-03-02 from 08:00, on whole hours.
func TestPlanCarbonReplaysTrace(t *testing.T) {
	trace := writeTrace(t)
	now := time.Date(2026, 5, 6, 8, 20, 0, 0, time.UTC)
	p := spec.GreenPolicy{Trace: trace, TraceStart: "2022-03-02T08:00:00Z", Deadline: spec.Duration(12 * time.Hour)}.WithDefaults()
	out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: now, Now: now, Plan: true, Work: 2 * time.Hour})
	if out.PlanError != "" {
		t.Fatal(out.PlanError)
	}
	want := time.Date(2026, 5, 6, 12, 0, 0, 0, time.UTC)
	if s := out.Plan.Slots[0]; !s.Start.Equal(want) || !s.End.Equal(want.Add(2*time.Hour)) {
		t.Errorf("slot %+v, want 12:00–14:00 on the run's day", s)
	}
}

// ShiftFor puts a run's start in the trace step that holds trace_start,
// whatever the minute of either: 08:30 replays the 08:00 hour.
func TestShiftFor(t *testing.T) {
	tr := &carbon.Series{Start: time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC), Step: time.Hour, Values: make([]float64, 72)}
	hour := time.Date(2022, 3, 2, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ traceStart, runStart time.Time }{
		{hour, time.Date(2026, 12, 6, 13, 59, 49, 0, time.UTC)},
		{hour.Add(30 * time.Minute), time.Date(2026, 12, 6, 13, 59, 49, 0, time.UTC)},
		{hour.Add(30 * time.Minute), time.Date(2026, 12, 6, 14, 2, 2, 0, time.UTC)},
		{hour.Add(59 * time.Minute), time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)},
		{hour.Add(30 * time.Minute), time.Date(2021, 1, 1, 5, 45, 0, 0, time.UTC)}, // (before the trace)
	} {
		shift := ShiftFor(tr, tc.runStart, tc.traceStart)
		if shift%time.Hour != 0 {
			t.Errorf("trace_start %s, run %s: shift %v is not whole steps", tc.traceStart, tc.runStart, shift)
		}
		if at := tc.runStart.Add(-shift); at.Before(hour) || !at.Before(hour.Add(time.Hour)) {
			t.Errorf("trace_start %s, run %s: the run starts at trace time %s, want within the 08:00 step", tc.traceStart.Format("15:04"), tc.runStart, at)
		}
	}
}

func TestPlanCarbonReportsProblemsAsText(t *testing.T) {
	trace := writeTrace(t)
	start := time.Date(2022, 3, 2, 8, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		p    spec.GreenPolicy
		work time.Duration
		want string
	}{
		"missing trace":  {spec.GreenPolicy{Trace: filepath.Join(t.TempDir(), "none.csv")}, time.Hour, "green.trace"},
		"deadline short": {spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(2 * time.Hour)}, 5 * time.Hour, "deadline too short"},
		"no history":     {spec.GreenPolicy{Trace: trace, TraceStart: "2022-03-01T00:00:00Z"}, time.Hour, "history"},
	} {
		p := tc.p.WithDefaults()
		out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: start, Now: start, Plan: true, Work: tc.work})
		if out.Plan != nil || !strings.Contains(out.PlanError, tc.want) {
			t.Errorf("%s: plan %v, error %q (want it to mention %q)", name, out.Plan, out.PlanError, tc.want)
		}
	}
}

func TestSegmentIntervalsClipsOverlap(t *testing.T) {
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	ivs, err := SegmentIntervals(context.Background(), spec.GreenPolicy{NodeWatts: 100, PUE: 1.5}, []spec.Segment{
		{Start: t0, End: t0.Add(time.Hour), Nodes: 2, WallSeconds: 3600},
		{Start: t0.Add(time.Hour - time.Second), End: t0.Add(2 * time.Hour), Nodes: 1, WallSeconds: 1800},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 2 || !ivs[1].Start.Equal(t0.Add(time.Hour)) {
		t.Fatalf("intervals %+v", ivs)
	}
	// 2 × 100 W × 1.5 × 1 h; then 1 × 100 W × 1.5 × 0.5 h of chunk time.
	if !near(ivs[0].KWh(), 0.3) || !near(ivs[1].KWh(), 0.075) {
		t.Errorf("kWh %v %v", ivs[0].KWh(), ivs[1].KWh())
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// The workflow with the real PlanCarbon on a trace: it waits for the low
// hours (12:00–16:00), trains there, and prices what it used.
func TestTrainingRunWithRealPlanner(t *testing.T) {
	trace := writeTrace(t)
	start := time.Date(2022, 3, 2, 8, 0, 0, 0, time.UTC)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	env.RegisterWorkflowWithOptions(workflows.TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
	env.RegisterActivityWithOptions((&Carbon{}).PlanCarbon, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	node := spec.Node{ID: "a", TaskQueue: spec.NodeTaskQueue("a")}
	env.RegisterActivityWithOptions(func(context.Context, string, spec.AcquireRequest) ([]spec.Node, error) {
		return []spec.Node{node}, nil
	}, activity.RegisterOptions{Name: spec.ActivityAcquireNodes})
	var starts []time.Time
	env.RegisterActivityWithOptions(func(_ context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
		now := env.Now().UTC()
		starts = append(starts, now)
		res := &spec.ChunkResult{NodeID: "a", From: in.From, To: in.To, StartedAt: now, FirstStepAt: now, EndedAt: now.Add(36 * time.Second)}
		if in.Checkpoint {
			res.Checkpoint = &spec.CheckpointRef{Step: in.To, Key: fmt.Sprint(in.To)}
		}
		return res, nil
	}, activity.RegisterOptions{Name: spec.ActivityTrainChunk})
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).Return(nil)
	rs := spec.RunSpec{Name: "g", Nodes: 1, Steps: 300, ChunkSteps: 100, Green: &spec.GreenPolicy{
		Trace: trace, Deadline: spec.Duration(24 * time.Hour), Interruptible: true, Work: spec.Duration(2 * time.Hour), NodeWatts: 1000,
	}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, workflows.RunInput{Spec: rs})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var st spec.RunStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	noon := time.Date(2022, 3, 2, 12, 0, 0, 0, time.UTC)
	if len(starts) != 3 || !starts[0].Equal(noon) || !starts[2].Equal(noon) {
		t.Errorf("chunks started at %v, want all at 12:00", starts)
	}
	g := st.Green
	// 3 chunks × 1 kW × 36 s = 0.03 kWh at 100 g/kWh.
	if g == nil || g.Waits != 1 || !near(g.KWh, 0.03) || !near(g.Grams, 3) || g.Note != "" {
		t.Errorf("green status %+v", g)
	}
	if len(st.Segments) != 1 || st.Segments[0].Chunks != 3 {
		t.Errorf("segments %+v", st.Segments)
	}
}

// TestPlanCarbonOnlinePlanner: planner online prices the present at the
// observed intensity. Today 08:00 is unexpectedly clean (50 g/kWh, where
// yesterday's persistence forecast says 300): a 1-hour interruptible job
// runs now, where planning on the forecast alone waits for 12:00.
func TestPlanCarbonOnlinePlanner(t *testing.T) {
	b, err := os.ReadFile(writeTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "2022-03-02T08:00:00Z,300", "2022-03-02T08:00:00Z,50", 1)
	trace := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(trace, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2022, 3, 2, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		planner string
		want    time.Time
	}{
		{spec.PlannerReplan, time.Date(2022, 3, 2, 12, 0, 0, 0, time.UTC)},
		{spec.PlannerOnline, start},
	} {
		p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(12 * time.Hour), Interruptible: true, Planner: tc.planner}.WithDefaults()
		out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: start, Now: start, Plan: true, Work: time.Hour})
		if out.PlanError != "" {
			t.Fatalf("%s: %s", tc.planner, out.PlanError)
		}
		if s := out.Plan.Slots[0]; !s.Start.Equal(tc.want) {
			t.Errorf("%s: first slot %+v, want from %s", tc.planner, s, tc.want.Format(time.RFC3339))
		}
	}
	// A provider is enough for planner online (see carbon_online_test.go).
	ok := spec.RunSpec{Name: "x", Green: &spec.GreenPolicy{Provider: spec.ProviderUK, Deadline: spec.Duration(time.Hour), Planner: spec.PlannerOnline}}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("online planner on a provider: %v", err)
	}
}

// The batch controller acts on the present intensity, with or without a
// plan: 300 g/kWh at 08:30 is above 1.3 × 200 (shrink, floor at the node
// count), 100 at 13:00 below 0.7 × 200 (grow, capped at max); a hold
// keeps the learning rate's bits.
func TestPlanCarbonBatchController(t *testing.T) {
	trace := writeTrace(t)
	p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(12 * time.Hour), Interruptible: true,
		Batch: &spec.BatchControl{ThresholdG: 200, Min: 16, Max: 80}}.WithDefaults()
	morning := time.Date(2022, 3, 2, 8, 30, 0, 0, time.UTC)
	noon := time.Date(2022, 3, 2, 13, 0, 0, 0, time.UTC)
	scaled := func(lr float64, to, from int) float64 { return lr * float64(to) / float64(from) } // at run time, as the controller does
	tests := []struct {
		name string
		now  time.Time
		plan bool
		in   spec.BatchInput
		want spec.BatchDecision
	}{
		{"dirty shrinks", morning, true, spec.BatchInput{GlobalBatch: 64, LearningRate: 2e-3, Nodes: 2},
			spec.BatchDecision{GlobalBatch: 48, LearningRate: scaled(2e-3, 48, 64), Action: "shrink", GPerKWh: 300}},
		{"without a plan", morning, false, spec.BatchInput{GlobalBatch: 64, LearningRate: 2e-3, Nodes: 2},
			spec.BatchDecision{GlobalBatch: 48, LearningRate: scaled(2e-3, 48, 64), Action: "shrink", GPerKWh: 300}},
		{"floor at the nodes", morning, false, spec.BatchInput{GlobalBatch: 20, LearningRate: 1e-3, Nodes: 18},
			spec.BatchDecision{GlobalBatch: 18, LearningRate: scaled(1e-3, 18, 20), Action: "shrink", GPerKWh: 300}},
		{"clean grows", noon, false, spec.BatchInput{GlobalBatch: 64, LearningRate: 2e-3, Nodes: 2},
			spec.BatchDecision{GlobalBatch: 80, LearningRate: scaled(2e-3, 80, 64), Action: "grow", GPerKWh: 100}},
		{"hold at the cap", noon, false, spec.BatchInput{GlobalBatch: 80, LearningRate: 0.0030000000000000005, Nodes: 2},
			spec.BatchDecision{GlobalBatch: 80, LearningRate: 0.0030000000000000005, Action: "hold", GPerKWh: 100}},
		// With the spec's pair, the rate scales from it (as TrainingRun
		// applies it), not from the rate in force.
		{"from the base pair", noon, false, spec.BatchInput{GlobalBatch: 48, LearningRate: 1.4e-3, Nodes: 2, BaseBatch: 64, BaseLearningRate: 2e-3},
			spec.BatchDecision{GlobalBatch: 60, LearningRate: scaled(2e-3, 60, 64), Action: "grow", GPerKWh: 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: morning, Now: tc.now, Plan: tc.plan, Work: time.Hour, Batch: &in})
			if out.PlanError != "" || out.Batch == nil {
				t.Fatalf("no decision: %+v", out)
			}
			if *out.Batch != tc.want {
				t.Errorf("decision %+v, want %+v", *out.Batch, tc.want)
			}
			if (out.Plan != nil) != tc.plan {
				t.Errorf("plan %v returned with Plan=%v", out.Plan, tc.plan)
			}
		})
	}
	// Without a batch controller in the policy, no decision.
	p.Batch = nil
	in := spec.BatchInput{GlobalBatch: 64, LearningRate: 2e-3, Nodes: 2}
	if out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: morning, Now: morning, Plan: true, Work: time.Hour, Batch: &in}); out.Batch != nil {
		t.Errorf("a decision without a controller: %+v", out.Batch)
	}
}

// writeHourly writes a "time,XX" trace of two days of hourly values from
// 2022-03-01 00:00 UTC, each day the same (persistence then forecasts the
// second day exactly).
func writeHourly(t *testing.T, day [24]float64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("time,XX\n")
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 48 {
		fmt.Fprintf(&b, "%s,%g\n", t0.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), day[i%24])
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanCarbonKeepsMinSlot: a live re-plan knows the run in progress
// from the run's latest trained segments (CarbonInput.Trained: the
// workflow sends them; those priced earlier too), so min_slot holds for
// every slot, the last one included. Day 2: 100 g/kWh 12–14, 150 at 14, 50 at 15, 60 at 16, 300
// otherwise; min_slot 2h. Before, each re-plan saw a fresh job: at 14:00
// with 1 h left it paused for the 15:00 hour (a last slot of one hour),
// and at 13:00 with 2 h left it left its 12:00 slot after an hour for
// 15–17.
func TestPlanCarbonKeepsMinSlot(t *testing.T) {
	var day [24]float64
	for h := range day {
		day[h] = 300
	}
	day[12], day[13], day[14], day[15], day[16] = 100, 100, 150, 50, 60
	trace := writeHourly(t, day)
	at := func(h, m int) time.Time { return time.Date(2022, 3, 2, h, m, 0, 0, time.UTC) }
	chunk := func(from, to time.Time) spec.Segment {
		return spec.Segment{Start: from, End: to, Nodes: 1, WallSeconds: to.Sub(from).Seconds(), Chunks: 1}
	}
	runStart := at(8, 0)
	for _, planner := range []string{spec.PlannerReplan, spec.PlannerOnline} {
		p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(14 * time.Hour), Interruptible: true,
			MinSlot: spec.Duration(2 * time.Hour), Planner: planner}.WithDefaults()
		for _, tc := range []struct {
			name  string
			calls [][]spec.Segment // chunks priced at the calls before the last
			price []spec.Segment   // chunks priced at the last call
			now   time.Time
			work  time.Duration
			want  time.Time // the first slot's start
		}{
			{name: "the last slot: 1 h left after 2 h", price: []spec.Segment{chunk(at(12, 0), at(13, 0)), chunk(at(13, 0), at(14, 0))},
				now: at(14, 0).Add(3 * time.Second), work: time.Hour, want: at(14, 0)},
			{name: "the last slot, the run's first chunks priced earlier", calls: [][]spec.Segment{{chunk(at(12, 0), at(12, 30))}, {chunk(at(12, 30), at(13, 0))}},
				price: []spec.Segment{chunk(at(13, 0), at(14, 0))}, now: at(14, 0).Add(3 * time.Second), work: time.Hour, want: at(14, 0)},
			{name: "2 h into the run, 2 h left: it may pause", calls: [][]spec.Segment{{chunk(at(12, 0), at(13, 0))}},
				price: []spec.Segment{chunk(at(13, 0), at(14, 0))}, now: at(14, 0).Add(3 * time.Second), work: 2 * time.Hour, want: at(15, 0)},
			{name: "an hour into a 2 h slot", price: []spec.Segment{chunk(at(12, 0), at(13, 0))},
				now: at(13, 0).Add(2 * time.Second), work: 2 * time.Hour, want: at(13, 0)},
			{name: "a run of a few minutes goes on", price: []spec.Segment{chunk(at(13, 40), at(13, 50))},
				now: at(13, 50).Add(time.Second), work: 2 * time.Hour, want: at(13, 0)},
			// Not running (it waited, or paused): a fresh slot.
			{name: "after a pause", price: []spec.Segment{chunk(at(12, 0), at(13, 0))},
				now: at(13, 30), work: 2 * time.Hour, want: at(15, 0)},
			{name: "a failed chunk ends the run", price: []spec.Segment{chunk(at(12, 0), at(13, 0)), {Start: at(13, 0), End: at(13, 0).Add(time.Second), Lost: true}},
				now: at(13, 0).Add(2 * time.Second), work: 2 * time.Hour, want: at(15, 0)},
			{name: "no chunk yet", now: at(13, 0), work: time.Hour, want: at(15, 0)},
		} {
			t.Run(planner+"/"+tc.name, func(t *testing.T) {
				c := &Carbon{}
				var trained []spec.Segment
				for _, segs := range tc.calls {
					trained = append(trained, segs...)
				}
				trained = append(trained, tc.price...)
				out := runPlanCarbonWith(t, c, spec.CarbonInput{Policy: p, RunStart: runStart, Now: tc.now, Plan: true, Work: tc.work,
					Price: tc.price, Trained: trained})
				if out.PlanError != "" {
					t.Fatal(out.PlanError)
				}
				if s := out.Plan.Slots[0]; !s.Start.Equal(tc.want) {
					t.Errorf("plan %+v; want the first slot from %s", out.Plan.Slots, tc.want.Format("15:04"))
				}
				for i, s := range out.Plan.Slots {
					if i > 0 && s.End.Sub(s.Start) < 2*time.Hour {
						t.Errorf("slot %d of %+v is shorter than min_slot", i, out.Plan.Slots)
					}
				}
			})
		}
	}
}

// TestPlanCarbonOnlineTiesGoEarliest: planner online on a trace with two
// equal clean windows plans the first (the online prices carried
// least-squares noise of ~1e-6, and the later window won: a run slept
// through the first).
func TestPlanCarbonOnlineTiesGoEarliest(t *testing.T) {
	var b strings.Builder
	b.WriteString("time,XX\n")
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 * 24 {
		v := 300
		if h := i % 24; h == 3 || h == 15 {
			v = 50
		}
		fmt.Fprintf(&b, "%s,%d\n", t0.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), v)
	}
	trace := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2022, 3, 9, 0, 0, 0, 0, time.UTC)
	for _, interruptible := range []bool{true, false} {
		p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(24 * time.Hour), Interruptible: interruptible, Planner: spec.PlannerOnline}.WithDefaults()
		out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: start, Now: start, Plan: true, Work: time.Hour})
		if out.PlanError != "" {
			t.Fatal(out.PlanError)
		}
		if s := out.Plan.Slots[0]; !s.Start.Equal(start.Add(3*time.Hour)) || s.GPerKWh != 50 {
			t.Errorf("interruptible %v: plan %+v; want 03:00 at exactly 50 g/kWh", interruptible, out.Plan.Slots)
		}
	}
}
