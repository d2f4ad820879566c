package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/spec"
)

func TestGreenPlan(t *testing.T) {
	trace := filepath.Join("..", "..", "..", "shared", "data", "carbon", "ES_2022_hourly.csv")
	if _, err := os.Stat(trace); err != nil {
		t.Fatalf("real trace missing (CI lays shared/ beside the repo): %v", err)
	}
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append([]string{"green", "plan"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	for _, c := range []struct{ fc, policy string }{{"perfect", "once"}, {"persistence", "once"}, {"perfect", "online"}, {"persistence", "online"}, {"persistence", "replan"}} {
		fc := c.fc
		out, err := run("--trace", trace, "--start", "2022-03-01T08:00:00Z", "--work", "10h", "--deadline", "48h",
			"--forecast", fc, "--policy", c.policy, "--interruptible", "-o", "json")
		if err != nil {
			t.Fatalf("%s %s: %v", fc, c.policy, err)
		}
		var p greenPlanJSON
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		// Each slot's g_per_kwh is the trace's over it: weighted by its
		// hours, they give the realized intensity; a forecast's only
		// where the plan was made once.
		hours, grams := 0.0, 0.0
		for _, s := range p.Slots {
			hours += s.DurationH
			grams += s.DurationH * s.GPerKWh
			if (s.Forecast != nil) != (c.policy == "once") {
				t.Errorf("%s %s: slot %+v; want a forecast's intensity only where planned once", fc, c.policy, s)
			}
		}
		if math.Abs(grams/hours-p.Realized) > 1e-6*p.Realized {
			t.Errorf("%s %s: the slots' intensities average %.3f g/kWh; want the realized %.3f", fc, c.policy, grams/hours, p.Realized)
		}
		if p.Oracle == nil || p.OracleSavings == nil {
			t.Fatalf("%s %s: no oracle: %s", fc, c.policy, out)
		}
		if hours != 10 || !(*p.Oracle <= p.Realized && p.Realized <= p.Baseline+1e-9) {
			t.Errorf("%s: %.1f h planned; oracle %.1f ≤ realized %.1f ≤ baseline %.1f must hold", fc, hours, *p.Oracle, p.Realized, p.Baseline)
		}
		if fc == "perfect" && p.Realized != *p.Oracle {
			t.Errorf("a perfect forecast must realize the oracle: %.3f vs %.3f", p.Realized, *p.Oracle)
		}
	}
	// A saved UK Carbon Intensity API answer reads as a trace too.
	uk := filepath.Join("..", "..", "engine", "carbon", "testdata", "uk_fw48h.json")
	out, err := run("--trace", uk, "--start", "2018-01-20T11:30:00Z", "--work", "1h", "--deadline", "3h", "--forecast", "perfect", "-o", "json")
	var p greenPlanJSON
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || len(p.Slots) == 0 || p.Oracle == nil || p.Realized != *p.Oracle {
		t.Errorf("UK API answer as a trace: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("time,ES\n2022-01-01T00:00:00Z,100\n2022-01-01T01:00:00Z,oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run("--trace", bad, "--start", "2022-01-01T00:00:00Z", "--work", "1h", "--deadline", "2h"); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("malformed trace: want an error naming line 3, got %v", err)
	}
	for _, policy := range []string{"once", "online"} {
		if _, err := run("--trace", trace, "--start", "2022-03-01T08:00:00Z", "--work", "10h", "--deadline", "5h", "--policy", policy); err == nil || !strings.Contains(err.Error(), "deadline") {
			t.Errorf("%s: deadline shorter than the work: %v", policy, err)
		}
	}
	if _, err := run("--trace", trace, "--start", "2022-03-01T08:00:00Z", "--work", "1h", "--deadline", "5h", "--policy", "hope"); err == nil || !strings.Contains(err.Error(), "--policy") {
		t.Errorf("unknown policy: %v", err)
	}
	for _, args := range [][]string{{"--work", "-1h", "--deadline", "5h"}, {"--work", "0s", "--deadline", "5h"},
		{"--work", "1h", "--deadline", "-5h"}, {"--work", "1h", "--deadline", "5h", "--min-slot", "-1m"}} {
		_, err := run(append([]string{"--trace", trace, "--start", "2022-03-01T08:00:00Z", "--interruptible"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "work and deadline must be positive, min-slot not negative") {
			t.Errorf("%v: want an error saying a duration is out of range, got %v", args, err)
		}
	}
	if _, err := run("--trace", trace, "--start", "2022-03-01T08:00:00Z", "--deadline", "5h"); err == nil || !strings.Contains(err.Error(), "are required") {
		t.Errorf("no --work: %v", err)
	}
	// Jobs that fit before their deadline but not on the trace's grid say
	// so, and what would fit; a min slot longer than the deadline, as in a
	// job file.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--start", "2022-03-01T08:00:00Z", "--work", "90m", "--deadline", "100m"},
			"--work 1h30m0s takes 2 whole step(s) of the trace's 1h0m0s grid, and 1 lie between 2022-03-01T08:00Z (--start, rounded up to the grid) and 2022-03-01T09:00Z (the deadline, rounded down): plans run on whole trace steps; --deadline 2h0m0s fits"},
		{[]string{"--start", "2022-03-01T08:30:00Z", "--work", "10h", "--deadline", "10h"}, "--deadline 10h30m0s fits"},
		{[]string{"--start", "2022-03-01T08:00:00Z", "--work", "1h", "--deadline", "5h", "--min-slot", "6h", "--interruptible"}, "--min-slot 6h0m0s is longer than --deadline 5h0m0s"},
	} {
		if _, err := run(append([]string{"--trace", trace}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
	// A window outside the trace, or without the day of history a
	// forecast needs before it, says which starts would do.
	for _, c := range []struct{ start, fc, want string }{
		{"2022-12-31T20:00:00Z", "persistence", "start between 2022-01-02T00:00Z (a persistence forecast needs a day of the trace before it) and 2022-12-30T00:00Z"},
		{"2022-01-01T00:00:00Z", "seasonal", "start between 2022-01-02T00:00Z (a seasonal forecast"},
		{"2021-12-31T00:00:00Z", "perfect", "start between 2022-01-01T00:00Z and 2022-12-30T00:00Z"},
	} {
		_, err := run("--trace", trace, "--start", c.start, "--work", "10h", "--deadline", "48h", "--forecast", c.fc)
		if err == nil || !strings.Contains(err.Error(), "covers 2022-01-01T00:00Z to 2023-01-01T00:00Z") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start %s, %s: %v; want %q", c.start, c.fc, err, c.want)
		}
	}
}

func TestParseInstant(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2022-03-01T08:00:00Z", time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC), true},
		{"2022-03-01T09:00:00+01:00", time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC), true},
		{"2022-03-01T08:00", time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC), true},
		{"2022-03-01 08:00", time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC), true},
		{"2022-03-01", time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC), true},
		// What the hints print, seconds without a zone (UTC), offsets
		// without a colon: the forms the trace readers take.
		{"2022-01-02T00:00Z", time.Date(2022, 1, 2, 0, 0, 0, 0, time.UTC), true},
		{"2022-03-27T01:00:00", time.Date(2022, 3, 27, 1, 0, 0, 0, time.UTC), true},
		{"2022-03-27 01:00:00", time.Date(2022, 3, 27, 1, 0, 0, 0, time.UTC), true},
		{"2022-03-27T03:00:00+0200", time.Date(2022, 3, 27, 1, 0, 0, 0, time.UTC), true},
		{"2022-03-27 03:00 +0200", time.Date(2022, 3, 27, 1, 0, 0, 0, time.UTC), true},
		{"2022-03-27 01:00:00 UTC", time.Date(2022, 3, 27, 1, 0, 0, 0, time.UTC), true},
		{"03/01/2022", time.Time{}, false},
		{"2022-13-01", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tc := range tests {
		got, err := parseInstant(tc.in)
		if (err == nil) != tc.ok || !got.Equal(tc.want) {
			t.Errorf("parseInstant(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestCheckGreenTrace: a job's trace that would leave its run without a
// green policy — one that does not read, or does not hold the run's
// start — fails `run -f` and `quickstart -f`; one not on this host is a
// note for `run` (the control worker may have it), an error for
// quickstart (its control worker runs here).
func TestCheckGreenTrace(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	b.WriteString("time,ES\n")
	for h := range 96 {
		fmt.Fprintf(&b, "%s,%d\n", t0.Add(time.Duration(h)*time.Hour).Format("2006-01-02 15:04"), 100+h)
	}
	good := filepath.Join(dir, "es.csv")
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(good, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("time,ES\n2022-03-01 00:00,100\n2022-03-01 01:00,lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Ten days with 2022-03-06 10:00–20:00 missing: a gap too long to
	// interpolate.
	var gb strings.Builder
	gb.WriteString("time,ES\n")
	for h := range 240 {
		if h >= 5*24+10 && h < 5*24+20 {
			continue
		}
		fmt.Fprintf(&gb, "%s,%d\n", t0.Add(time.Duration(h)*time.Hour).Format("2006-01-02 15:04"), 100+h)
	}
	gappy := filepath.Join(dir, "gappy.csv")
	if err := os.WriteFile(gappy, []byte(gb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	inside, after := t0.Add(29*time.Hour), t0.Add(120*time.Hour)
	day := spec.Duration(24 * time.Hour)
	for _, tc := range []struct {
		name       string
		g          *spec.GreenPolicy
		now        time.Time
		local      bool
		note, fail string
	}{
		{name: "no policy", now: after},
		{name: "the run's start inside", g: &spec.GreenPolicy{Trace: good}, now: inside},
		{name: "replayed from inside", g: &spec.GreenPolicy{Trace: good, TraceStart: "2022-03-02T10:00:00Z", Deadline: day}, now: after},
		{name: "now outside", g: &spec.GreenPolicy{Trace: good}, now: after,
			fail: "holds 2022-03-01T00:00:00Z to 2022-03-05T00:00:00Z: the run's start (now, 2022-03-06T00:00:00Z) is outside it; " +
				"set green.trace_start to a time inside it to replay it (e.g. trace_start: 2022-03-01T00:00:00Z)"},
		// Plans would all fail: the forecast's day of history, the window
		// to the deadline.
		{name: "no day before it", g: &spec.GreenPolicy{Trace: good, TraceStart: "2022-03-01T05:00:00Z", Deadline: day}, now: after,
			fail: "trace_start 2022-03-01T05:00:00Z leaves its plans without the trace they need — the window to the deadline (24h0m0s), " +
				"and a persistence forecast a day of it before the start; start between 2022-03-02T00:00:00Z and 2022-03-04T00:00:00Z"},
		{name: "no day needed: perfect", g: &spec.GreenPolicy{Trace: good, TraceStart: "2022-03-01T05:00:00Z", Deadline: day, Forecast: spec.ForecastPerfect}, now: after},
		{name: "deadline past the end", g: &spec.GreenPolicy{Trace: good, TraceStart: "2022-03-04T05:00:00Z", Deadline: day}, now: after,
			fail: "start between 2022-03-02T00:00:00Z and 2022-03-04T00:00:00Z"},
		// A deadline longer than the trace: no "start between" an end
		// before its beginning, but what fits.
		{name: "deadline longer than the trace", g: &spec.GreenPolicy{Trace: good, TraceStart: "2022-03-02T05:00:00Z", Deadline: spec.Duration(100 * time.Hour)}, now: after,
			fail: "it holds 96h0m0s of data, 72h0m0s after the day a persistence forecast reads before the start; green.deadline must be at most 72h0m0s; " +
				"green.deadline 100h0m0s is longer, so no start fits"},
		{name: "work longer than the deadline", g: &spec.GreenPolicy{Provider: spec.ProviderUK, Work: spec.Duration(3 * time.Hour), Deadline: spec.Duration(2 * time.Hour)},
			now: after, fail: "green.work 3h0m0s is longer than green.deadline 2h0m0s"},
		{name: "replayed from outside", g: &spec.GreenPolicy{Trace: good, TraceStart: "2021-12-31T00:00:00Z"}, now: inside,
			fail: "the run's start (trace_start 2021-12-31T00:00:00Z) is outside it; move green.trace_start inside it"},
		{name: "does not read", g: &spec.GreenPolicy{Trace: bad}, now: inside, fail: "line 3"},
		// A gap refuses only the runs whose window, or the history their
		// forecast reads, meets it.
		{name: "clear of a gap", g: &spec.GreenPolicy{Trace: gappy, TraceStart: "2022-03-08T00:00:00Z", Deadline: day}, now: after},
		{name: "clear of a gap, before it", g: &spec.GreenPolicy{Trace: gappy, TraceStart: "2022-03-05T10:00:00Z", Deadline: day}, now: after},
		{name: "window across a gap", g: &spec.GreenPolicy{Trace: gappy, TraceStart: "2022-03-06T00:00:00Z", Deadline: day, Forecast: spec.ForecastPerfect}, now: after,
			fail: "green.trace " + gappy + ": no data from 2022-03-06T10:00:00Z to 2022-03-06T20:00:00Z (10 missing steps before line 132; up to 2 are interpolated), " +
				"and trace_start 2022-03-06T00:00:00Z puts the run's window (to the deadline, 24h0m0s) there; " +
				"set green.trace_start at or before 2022-03-05T10:00:00Z, or at or after 2022-03-06T20:00:00Z, or fill in the missing readings"},
		{name: "the day before across a gap", g: &spec.GreenPolicy{Trace: gappy, TraceStart: "2022-03-07T08:00:00Z", Deadline: day}, now: after,
			fail: "puts the run's window (to the deadline, 24h0m0s, and the 24h0m0s before it that a persistence forecast reads) there; " +
				"set green.trace_start at or before 2022-03-05T10:00:00Z, or at or after 2022-03-07T20:00:00Z"},
		{name: "not here", g: &spec.GreenPolicy{Trace: filepath.Join(dir, "none.csv")}, now: inside,
			note: "does not open here"},
		{name: "not here, quickstart", g: &spec.GreenPolicy{Trace: filepath.Join(dir, "none.csv")}, now: inside, local: true,
			fail: "green.trace: open "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			note, err := checkGreenTrace(tc.g, tc.now, tc.local)
			switch {
			case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)):
				t.Fatalf("err %v; want it to say %q", err, tc.fail)
			case tc.fail == "" && err != nil:
				t.Fatalf("err %v", err)
			case !strings.Contains(note, tc.note) || (tc.note == "") != (note == ""):
				t.Fatalf("note %q; want %q", note, tc.note)
			}
		})
	}
}

func TestSavedText(t *testing.T) {
	for _, tc := range []struct {
		pct  float64
		want string
	}{
		{12.34, "12.3% saved"}, {0.04, "0.0% saved"}, {-0.04, "0.0% saved"}, {-3.6, "3.6% more than running now"},
	} {
		if got := savedText(tc.pct); got != tc.want {
			t.Errorf("%g: %q, want %q", tc.pct, got, tc.want)
		}
	}
}

// TestGreenPlanAuditCases: min_slot holds for the last slot under every
// policy (realized never beats the oracle); the hindsight oracle of a
// 15-minute trace with a 1 h min slot is computed (it failed with "oracle
// search too large"); a saving that is summation noise is 0 in JSON (it
// was -1.97e-14); --min-slot without --interruptible is refused; --start
// takes a date, as its help says.
func TestGreenPlanAuditCases(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "carbon")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("real traces missing (CI lays shared/ beside the repo): %v", err)
	}
	run := func(args ...string) (greenPlanJSON, string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append([]string{"green", "plan"}, args...))
		err := root.Execute()
		var p greenPlanJSON
		if err == nil && strings.HasPrefix(out.String(), "{") {
			err = json.Unmarshal(out.Bytes(), &p)
		}
		return p, out.String(), err
	}
	es, de, no := filepath.Join(dir, "ES_2022_hourly.csv"), filepath.Join(dir, "DE_2020_15min_letswaitawhile.csv"), filepath.Join(dir, "NO_2022_hourly.csv")
	for _, tc := range []struct {
		name       string
		args       []string
		minSlot    time.Duration
		wantSlots  int
		wantSaving *float64
		wantErr    string
	}{
		{name: "min slot, online", args: []string{"--trace", es, "--start", "2022-04-03T06:00:00Z", "--work", "3h", "--deadline", "12h",
			"--interruptible", "--min-slot", "2h", "--forecast", "perfect", "--policy", "online"}, minSlot: 2 * time.Hour, wantSlots: 1},
		{name: "min slot, replan", args: []string{"--trace", es, "--start", "2022-04-03T06:00:00Z", "--work", "3h", "--deadline", "12h",
			"--interruptible", "--min-slot", "2h", "--forecast", "perfect", "--policy", "replan"}, minSlot: 2 * time.Hour, wantSlots: 1},
		{name: "min slot, 15-minute trace, replan", args: []string{"--trace", de, "--start", "2020-09-06T09:44:00Z", "--work", "3h", "--deadline", "24h",
			"--interruptible", "--min-slot", "2h", "--policy", "replan"}, minSlot: 2 * time.Hour},
		{name: "oracle of a 15-minute trace with a 1 h min slot", args: []string{"--trace", de, "--start", "2020-01-13T16:08:00Z", "--work", "10h",
			"--deadline", "12h", "--interruptible", "--min-slot", "1h"}, minSlot: time.Hour},
		{name: "summation noise saves nothing", args: []string{"--trace", no, "--start", "2022-06-01T08:30:00Z", "--work", "10h", "--deadline", "48h",
			"--interruptible"}, wantSaving: new(float64)},
		{name: "a date for --start", args: []string{"--trace", es, "--start", "2022-03-09", "--work", "2h", "--deadline", "24h"}},
		{name: "min slot of a contiguous job", args: []string{"--trace", es, "--start", "2022-03-09T00:00:00Z", "--work", "2h", "--deadline", "24h",
			"--min-slot", "1h"}, wantErr: "--min-slot 1h0m0s is the shortest slot of an interruptible job: add --interruptible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, out, err := run(append(tc.args, "-o", "json")...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if p.Oracle == nil || *p.Oracle > p.Realized+1e-9 {
				t.Errorf("oracle %v, realized %v: the oracle must be computed and not beaten", p.Oracle, p.Realized)
			}
			for i, s := range p.Slots {
				if s.End.Sub(s.Start) < tc.minSlot {
					t.Errorf("slot %d of %+v is shorter than the min slot %v", i, p.Slots, tc.minSlot)
				}
			}
			if tc.wantSlots > 0 && len(p.Slots) != tc.wantSlots {
				t.Errorf("slots %+v; want %d", p.Slots, tc.wantSlots)
			}
			if tc.wantSaving != nil && !strings.Contains(out, `"savings_pct": 0,`) {
				t.Errorf("savings %v; want exactly 0:\n%s", p.SavingsPct, out)
			}
		})
	}
	var out bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
	root.SetArgs([]string{"green", "plan", "--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "(2022-03-01, 2022-03-01T08:00Z, 2022-03-27T01:00:00, 2022-03-27 03:00+0200)") {
		t.Errorf("--start's help does not say it takes a date: %v\n%s", err, out.String())
	}
}

// TestPrintGreenPlanWithoutOracle: a plan whose oracle could not be
// computed is printed all the same, saying so (null in JSON).
func TestPrintGreenPlanWithoutOracle(t *testing.T) {
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	tr := &carbon.Series{Start: t0, Step: time.Hour, Values: []float64{300, 100, 100, 300}}
	r := carbon.Result{BaselineGPerKWh: 200, PlannedGPerKWh: 100, RealizedGPerKWh: 100, SavingsPct: 50,
		OracleGPerKWh: math.NaN(), OracleSavingsPct: math.NaN(), OracleErr: fmt.Errorf("oracle: %w", carbon.ErrSearchTooLarge),
		Slots: []carbon.Slot{{Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour), MeanIntensity: 100}}}
	var out bytes.Buffer
	if err := printGreenPlan(&env{out: &out, err: &out}, r, tr, false, "text", nil); err != nil ||
		!strings.Contains(out.String(), "oracle    not computed: oracle: carbon: plan too large") || !strings.Contains(out.String(), "50.0% saved") {
		t.Errorf("%v\n%s", err, out.String())
	}
	out.Reset()
	if err := printGreenPlan(&env{out: &out, err: &out}, r, tr, false, "json", nil); err != nil ||
		!strings.Contains(out.String(), `"oracle_g_per_kwh": null`) || !strings.Contains(out.String(), `"oracle_error": "oracle: carbon: plan too large"`) {
		t.Errorf("%v\n%s", err, out.String())
	}
}

// TestGreenPlanTimeHints: the times an error prints are read back by
// --start (the audit's hint 2022-01-02T00:00Z was refused), and a
// --deadline longer than the trace says how much it holds and the longest
// deadline that fits, instead of "start between" an end before the start.
func TestGreenPlanTimeHints(t *testing.T) {
	es := filepath.Join("..", "..", "..", "shared", "data", "carbon", "ES_2022_hourly.csv")
	dir := t.TempDir()
	short := filepath.Join(dir, "short.csv")
	var b strings.Builder
	b.WriteString("time,ES\n")
	t0 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	for h := range 4 {
		fmt.Fprintf(&b, "%s,%d\n", t0.Add(time.Duration(h)*time.Hour).Format("2006-01-02 15:04"), 100+h)
	}
	if err := os.WriteFile(short, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := func(args ...string) error {
		var out bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
		root.SetArgs(append([]string{"green", "plan"}, args...))
		return root.Execute()
	}
	err := plan("--trace", es, "--start", "2022-01-01T00:00:00Z", "--work", "2h", "--deadline", "24h")
	if err == nil || !strings.Contains(err.Error(), "start between 2022-01-02T00:00Z") {
		t.Fatalf("err %v; want the earliest start", err)
	}
	if err := plan("--trace", es, "--start", "2022-01-02T00:00Z", "--work", "2h", "--deadline", "24h"); err != nil {
		t.Fatalf("the hint's time is refused: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", es, "--start", "2022-03-01T08:00:00Z", "--work", "1h", "--deadline", "100000h"},
			"it holds 8760h0m0s of data, 8736h0m0s after the day a persistence forecast reads before the start; --deadline must be at most 8736h0m0s; " +
				"--deadline 100000h0m0s is longer, so no --start fits"},
		{[]string{"--trace", short, "--start", "2022-03-01T00:00:00Z", "--work", "1h", "--deadline", "5h", "--forecast", "perfect", "--interruptible"},
			"it holds 4h0m0s of data; --deadline must be at most 4h0m0s; --deadline 5h0m0s is longer"},
	} {
		err := plan(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "start between") {
			t.Errorf("err %v; want %q", err, tc.want)
		}
	}
}

// TestGreenPlanSaysWhatItAnswered: JSON and text give the window on the
// trace's grid (the start rounded up, the deadline down), the work in
// steps, the policy and forecast, and the trace's zone and range.
func TestGreenPlanSaysWhatItAnswered(t *testing.T) {
	es := filepath.Join("..", "..", "..", "shared", "data", "carbon", "ES_2022_hourly.csv")
	args := []string{"green", "plan", "--trace", es, "--start", "2022-03-01T08:30:00Z", "--work", "90m", "--deadline", "10h", "--interruptible"}
	var out bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
	root.SetArgs(append(args, "-o", "json"))
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var p greenPlanJSON
	if err := json.Unmarshal(out.Bytes(), &p); err != nil || p.GreenQuestion == nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := GreenQuestion{Start: time.Date(2022, 3, 1, 9, 0, 0, 0, time.UTC), Deadline: time.Date(2022, 3, 1, 18, 0, 0, 0, time.UTC),
		Step: "1h0m0s", WorkSteps: 2, Policy: "online", Forecast: "persistence", Zone: "ES",
		TraceStart: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC), TraceEnd: time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)}
	if *p.GreenQuestion != want {
		t.Errorf("question %+v; want %+v", *p.GreenQuestion, want)
	}
	out.Reset()
	root = newRootCmd(&env{out: &out, err: &out, command: childCommand})
	root.SetArgs(args)
	if err := root.Execute(); err != nil || !strings.Contains(out.String(),
		"window    2022-03-01T09:00Z – 2022-03-01T18:00Z on the trace's 1h0m0s grid (--start rounded up, the deadline down), 2 step(s) of work; online policy, persistence forecast") {
		t.Errorf("%v\n%s", err, out.String())
	}
}

// TestGreenPlanFarGap: a gap too long to interpolate refuses only the
// plans that need data inside it (the audit's trace, ten hours of June
// cut out, refused every plan): a plan in March prints exactly what it
// prints on the whole trace, for every forecast and policy; a window, or
// the history its forecast reads, that meets the gap is refused naming
// the gap and the starts that clear it.
func TestGreenPlanFarGap(t *testing.T) {
	whole := filepath.Join("..", "..", "..", "shared", "data", "carbon", "ES_2022_hourly.csv")
	gapped := filepath.Join(t.TempDir(), "gapfar.csv")
	writeWithout(t, whole, gapped, "2022-06-01 1") // 10:00–19:00 missing
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append([]string{"green", "plan"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	for _, c := range []struct{ fc, policy string }{{"perfect", "once"}, {"persistence", "online"}, {"seasonal", "replan"}, {"seasonal", "online"}} {
		for _, job := range [][]string{{"--work", "2h", "--deadline", "12h"}, {"--work", "10h", "--deadline", "48h", "--interruptible", "--min-slot", "2h"}} {
			args := append([]string{"--start", "2022-03-01T08:00:00Z", "--forecast", c.fc, "--policy", c.policy, "-o", "json"}, job...)
			want, err := run(append([]string{"--trace", whole}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(append([]string{"--trace", gapped}, args...)...)
			if err != nil || got != want {
				t.Errorf("%v: %v\n%s\nwant the whole trace's\n%s", args, err, got, want)
			}
		}
	}
	for _, c := range []struct {
		start, fc, deadline string
		want                []string
	}{
		{"2022-06-01T02:00:00Z", "perfect", "12h", []string{gapped + ": no data from 2022-06-01T10:00Z to 2022-06-01T20:00Z (10 missing steps before line 3636; up to 2 are interpolated), " +
			"and the job's window (--start 2022-06-01T02:00Z to its deadline 2022-06-01T14:00Z) needs data there: start at or before 2022-05-31T22:00Z, or at or after 2022-06-01T20:00Z, or fill in the missing readings"}},
		{"2022-06-02T08:00:00Z", "persistence", "12h", []string{"(--start 2022-06-02T08:00Z to its deadline 2022-06-02T20:00Z, and the 24h0m0s before it that a persistence forecast reads) needs data there: " +
			"start at or before 2022-05-31T22:00Z, or at or after 2022-06-02T20:00Z"}},
		{"2022-06-05T08:00:00Z", "seasonal", "12h", []string{"and the 169h0m0s before it that a seasonal forecast reads", "or at or after 2022-06-08T21:00Z"}},
	} {
		_, err := run("--trace", gapped, "--start", c.start, "--work", "2h", "--deadline", c.deadline, "--forecast", c.fc)
		if !errors.Is(err, carbon.ErrGap) {
			t.Errorf("%s %s: %v; want the gap refused", c.start, c.fc, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %v\nwant %q", c.start, c.fc, err, w)
			}
		}
	}
	// The starts it names plan.
	for _, c := range []struct{ start, fc string }{{"2022-05-31T22:00:00Z", "persistence"}, {"2022-06-02T20:00:00Z", "persistence"}, {"2022-06-08T21:00:00Z", "seasonal"}} {
		if _, err := run("--trace", gapped, "--start", c.start, "--work", "2h", "--deadline", "12h", "--forecast", c.fc); err != nil {
			t.Errorf("%s %s: %v", c.start, c.fc, err)
		}
	}
}
