package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// writeGapTrace writes a plain "time,XX" hourly trace of ten days from
// 2022-03-01 00:00 UTC (300 g/kWh, 100 from 12:00 to 16:00, a little
// more each day), without the readings of [gapFrom, gapTo) hours from
// its start (none when gapTo ≤ gapFrom).
func writeGapTrace(t *testing.T, gapFrom, gapTo int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("time,XX\n")
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 240 {
		if i >= gapFrom && i < gapTo {
			continue
		}
		v := 300 + i/24
		if h := i % 24; h >= 12 && h < 16 {
			v = 100 + i%7
		}
		fmt.Fprintf(&b, "%s,%d\n", t0.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), v)
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanCarbonTraceWithGap: a policy's trace with a gap too long to
// interpolate (day 8, 02:00–12:00) plans and prices a run clear of it
// exactly as the trace without the gap does, for every forecast and
// planner; a run whose window, or the history its forecast reads, meets
// it gets a plan error naming the gap (the run then trains without
// waiting), and a chunk inside it a pricing error naming it.
func TestPlanCarbonTraceWithGap(t *testing.T) {
	whole, gapped := writeGapTrace(t, 0, 0), writeGapTrace(t, 7*24+2, 7*24+12)
	day := func(d, h int) time.Time { return time.Date(2022, 3, 1+d, h, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name, forecast, planner string
		start                   time.Time
		gap                     bool
	}{
		{"far, persistence, online", spec.ForecastPersistence, spec.PlannerOnline, day(2, 8), false},
		{"far, seasonal, replan", spec.ForecastSeasonal, spec.PlannerReplan, day(1, 8), false},
		{"far, perfect, online", spec.ForecastPerfect, spec.PlannerOnline, day(3, 8), false},
		{"before it, perfect", spec.ForecastPerfect, spec.PlannerReplan, day(6, 14), false},
		{"window across it", spec.ForecastPerfect, spec.PlannerReplan, day(7, 0), true},
		{"the day before it, persistence", spec.ForecastPersistence, spec.PlannerReplan, day(8, 8), true},
		{"the present in it, online", spec.ForecastPersistence, spec.PlannerOnline, day(7, 4), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := func(trace string) spec.CarbonInput {
				p := spec.GreenPolicy{Trace: trace, Deadline: spec.Duration(12 * time.Hour), Interruptible: true, NodeWatts: 500,
					Forecast: tc.forecast, Planner: tc.planner}.WithDefaults()
				seg := spec.Segment{Start: tc.start, End: tc.start.Add(time.Hour), Nodes: 1, WallSeconds: 3600, ToStep: 100}
				return spec.CarbonInput{Policy: p, RunStart: tc.start, Now: tc.start, Plan: true, Work: 3 * time.Hour, Price: []spec.Segment{seg}}
			}
			got := runPlanCarbon(t, in(gapped))
			if tc.gap {
				if got.Plan != nil || !strings.Contains(got.PlanError, "gap too long to interpolate: line 172: no data from 2022-03-08T02:00:00Z to 2022-03-08T12:00:00Z") {
					t.Errorf("plan %+v, error %q; want the gap named", got.Plan, got.PlanError)
				}
				return
			}
			want := runPlanCarbon(t, in(whole))
			if got.PlanError != "" || got.PriceError != "" || want.PlanError != "" {
				t.Fatalf("errors %q %q (whole trace: %q)", got.PlanError, got.PriceError, want.PlanError)
			}
			got.Plan.Source = want.Plan.Source // (the file's name)
			if fmt.Sprint(got.Plan, got.Priced, got.NowGPerKWh) != fmt.Sprint(want.Plan, want.Priced, want.NowGPerKWh) {
				t.Errorf("plan %+v priced %+v; on the trace without the gap %+v %+v", got.Plan, got.Priced, want.Plan, want.Priced)
			}
		})
	}
	// A chunk that ran in the gap cannot be priced: the error names it.
	p := spec.GreenPolicy{Trace: gapped, Deadline: spec.Duration(12 * time.Hour), NodeWatts: 500}.WithDefaults()
	seg := spec.Segment{Start: day(7, 3), End: day(7, 4), Nodes: 1, WallSeconds: 3600, ToStep: 100}
	out := runPlanCarbon(t, spec.CarbonInput{Policy: p, RunStart: day(7, 3), Now: day(7, 4), Price: []spec.Segment{seg}})
	if !strings.Contains(out.PriceError, "no data from 2022-03-08T02:00:00Z to 2022-03-08T12:00:00Z") {
		t.Errorf("price error %q; want the gap named", out.PriceError)
	}
}
