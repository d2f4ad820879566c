package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cann-train/cann-train/spec"
)

// TestDashboardNarrowTerminalMoreAndHeader: on a terminal, the "… N more"
// line and `--watch`'s header are cut to its width as the table's rows
// are (they wrapped, and the redraw broke); to a file or a pipe (0) they
// are whole.
func TestDashboardNarrowTerminalMoreAndHeader(t *testing.T) {
	rows := []dashboardRow{{WorkflowID: "run/a", Execution: "running", Status: spec.PhaseTraining, read: true, Step: 5, Steps: 10}}
	now := time.Date(2026, 12, 7, 14, 3, 4, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		more, cols         int
		silent, last       time.Time
		wantMore, wantHead string // (cols 0: the whole line)
	}{
		{name: "more, counted, 40 columns", more: 37, cols: 40},
		{name: "more, not counted, 30 columns", more: -1, cols: 30},
		{name: "server silent, a table read, 40 columns", more: 3, cols: 40, silent: now.Add(-time.Minute), last: now.Add(-2 * time.Minute)},
		{name: "server silent, none read, 25 columns", cols: 25, silent: now.Add(-time.Minute)},
		{name: "wide enough", more: 37, cols: 200, silent: now.Add(-time.Minute), last: now.Add(-2 * time.Minute),
			wantMore: "… 37 more run(s) not listed: --limit 57 lists them all"},
		{name: "to a file", more: 37, silent: now.Add(-time.Minute), last: now.Add(-2 * time.Minute),
			wantMore: "… 37 more run(s) not listed: --limit 57 lists them all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printDashboardTo(&b, rows, "", tc.more, 20, tc.cols); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			lines = append(lines, watchHeader(now, 2*time.Second, "127.0.0.1:7233", tc.silent, tc.last, tc.cols)...)
			for _, l := range lines {
				if n := utf8.RuneCountInString(l); tc.cols > 0 && n > tc.cols-1 {
					t.Errorf("%d columns: a line of %d: %q", tc.cols, n, l)
				}
			}
			if tc.more != 0 && !strings.HasPrefix(lines[2], "… ") {
				t.Errorf("want the more line after the table:\n%s", strings.Join(lines, "\n"))
			}
			if tc.wantMore != "" && lines[2] != tc.wantMore {
				t.Errorf("more line %q, want %q", lines[2], tc.wantMore)
			}
		})
	}
	// Wide enough (or to a file), the header is as before.
	for _, cols := range []int{0, 200} {
		got := watchHeader(now, 2*time.Second, "127.0.0.1:7233", now.Add(-time.Minute), now.Add(-2*time.Minute), cols)
		want := []string{"cann-train dashboard  " + now.Format("15:04:05") + "  every 2s (Ctrl-C ends)",
			"server 127.0.0.1:7233 not answering since " + now.Add(-time.Minute).Format("15:04:05") + ", retrying; the runs as of " +
				now.Add(-2*time.Minute).Format("15:04:05") + ":"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%d columns: header %q, want %q", cols, got, want)
		}
	}
	if got := watchHeader(now, time.Second, "", time.Time{}, time.Time{}, 0); len(got) != 1 {
		t.Errorf("server answering: header %q, want one line", got)
	}
}

// TestWatchBarOnAStandardTerminal: on an 80-column terminal the live line
// has a bar (it had none: the bar was dropped whenever every figure did
// not fit beside one). The bar shrinks to barMin before anything goes;
// then samples/s — the last figure, cut first — makes room for it, but
// not the ETA nor the loss: narrower still, no bar, and the line as it was.
func TestWatchBarOnAStandardTerminal(t *testing.T) {
	training := spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 400000}
	barOf := func(line string) string {
		i, j := strings.Index(line, " ["), strings.Index(line, "]")
		if i < 0 || j < i {
			return ""
		}
		return line[i+2 : j]
	}
	for _, tc := range []struct {
		cols        int
		bar         int // its width (0: none)
		want, never []string
	}{
		{cols: 80, bar: 14, want: []string{"training         32001/400000   8% [#-------------]  ETA 5m34s  loss 0.0071"}, never: []string{"samples/s"}},
		{cols: 76, bar: 10, want: []string{"  ETA 5m34s  loss 0.0071"}, never: []string{"samples/s"}},
		{cols: 75, want: []string{"training         32001/400000   8%  ETA 5m34s  loss 0.0071  38368 samples…"}},
		{cols: 70, want: []string{"training         32001/400000   8%  ETA 5m34s  loss 0.0071  38368 sa…"}},
		{cols: 94, bar: 28, never: []string{"samples/s"}},
		{cols: 95, bar: 10, want: []string{"  ETA 5m34s  loss 0.0071  38368 samples/s"}},
		{cols: 120, bar: 30, want: []string{"  ETA 5m34s  loss 0.0071  38368 samples/s"}},
	} {
		line := barLine(training, 32001, 0.0071, 38368, 334*time.Second, true, tc.cols)
		if n := utf8.RuneCountInString(line); n > tc.cols-1 {
			t.Errorf("%d columns: %q is %d wide", tc.cols, line, n)
		}
		if got := len(barOf(line)); got != tc.bar {
			t.Errorf("%d columns: %q: a bar of %d, want %d", tc.cols, line, got, tc.bar)
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%d columns: %q lacks %q", tc.cols, line, w)
			}
		}
		for _, w := range tc.never {
			if strings.Contains(line, w) {
				t.Errorf("%d columns: %q has %q", tc.cols, line, w)
			}
		}
	}
	// Where samples/s makes room for the bar, the bar still keeps its
	// width as the figures change (and as samples/s is 0 or not).
	for cols := 76; cols <= 94; cols++ {
		a := barOf(barLine(training, 32001, 0.0071, 38368, 334*time.Second, true, cols))
		b := barOf(barLine(training, 32001, 0.00712, 0, 34*time.Second, false, cols))
		if a == "" || len(a) != len(b) {
			t.Errorf("%d columns: bar %q, then %q", cols, a, b)
		}
	}
}

// TestGreenStatusClockTimes: a green run's status writes every clock time
// as its green windows do — "14:00 UTC" on the day, "2026-12-08 14:00 UTC"
// on another — not RFC 3339 on some lines (the wait's until, the
// override's) beside "14:00–18:00 UTC"; -o json keeps RFC 3339.
func TestGreenStatusClockTimes(t *testing.T) {
	now := time.Date(2026, 12, 7, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(4*time.Hour + 30*time.Minute), "14:00 UTC"},
		{now.Add(4*time.Hour + 30*time.Minute + 59*time.Second), "14:00 UTC"},
		{now.Add(24 * time.Hour), "2026-12-08 09:30 UTC"},
		{now.Add(-10 * time.Hour), "2026-12-06 23:30 UTC"},
		{time.Date(2026, 12, 7, 15, 0, 0, 0, time.FixedZone("CET", 3600)), "14:00 UTC"},
	} {
		if got := greenClock(tc.t, now); got != tc.want {
			t.Errorf("greenClock(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
	for _, tc := range []struct{ detail, want string }{
		{"waiting for the green window until 2026-12-07T14:00:00Z (green window 14:00–18:00 UTC, 120 g/kWh); `cann-train green override g` trains now",
			"waiting for the green window until 14:00 UTC (green window 14:00–18:00 UTC, 120 g/kWh); `cann-train green override g` trains now"},
		{"waiting for the green window until 2026-12-08T02:00:00Z (green window 2026-12-08 02:00–04:00 UTC, 80 g/kWh)",
			"waiting for the green window until 2026-12-08 02:00 UTC (green window 2026-12-08 02:00–04:00 UTC, 80 g/kWh)"},
		{"waiting for the green window until 2026-12-07T14:00:30Z (green window 14:00:30–14:01:30 UTC, 80 g/kWh)",
			"waiting for the green window until 14:00:30 UTC (green window 14:00:30–14:01:30 UTC, 80 g/kWh)"},
		{"paused at step 200 (cann-train resume x continues)", "paused at step 200 (cann-train resume x continues)"},
	} {
		if got := greenDetail(tc.detail, now); got != tc.want {
			t.Errorf("greenDetail(%q)\n= %q\nwant %q", tc.detail, got, tc.want)
		}
	}

	// The whole status of a green run waiting for its window, planned
	// today with a deadline tomorrow, under an override.
	made := now.Add(-30 * time.Minute)
	st := spec.RunStatus{RunID: "run/g", Phase: spec.PhaseGreenWait, Model: spec.ModelMLPMNIST, Step: 200, TotalSteps: 600, Nodes: []string{"a"},
		Detail:    "waiting for the green window until 2026-12-07T14:00:00Z (green window 14:00–18:00 UTC, 120 g/kWh)",
		WaitUntil: time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC),
		Green: &spec.GreenStatus{Policy: spec.GreenPolicy{Trace: "es.csv", Interruptible: true}.WithDefaults(),
			Overridden: true, OverrideUntil: now.Add(26 * time.Hour),
			Plan: &spec.CarbonPlan{MadeAt: made, Work: spec.Duration(time.Hour), Deadline: made.Add(48 * time.Hour),
				Slots: []spec.CarbonSlot{{Start: now.Add(4*time.Hour + 30*time.Minute), End: now.Add(8*time.Hour + 30*time.Minute), GPerKWh: 120}}}}}
	sum := summarize(st, "", "default", nil)
	var b bytes.Buffer
	if err := printSummaryAt(&b, st, sum, now); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"status       " + string(spec.PhaseGreenWait) + ": waiting for the green window until 14:00 UTC (green window 14:00–18:00 UTC, 120 g/kWh)",
		"  override   policy ignored until 2026-12-08 11:30 UTC\n",
		"(overridden until 2026-12-08 11:30 UTC) 1 slot(s) planned 09:00 UTC, not followed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if rfc := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`); rfc.MatchString(text) {
		t.Errorf("status has an RFC 3339 time (%q):\n%s", rfc.FindString(text), text)
	}
	// Not under an override: the plan's deadline too.
	st.Green.Overridden, st.Green.OverrideUntil = false, time.Time{}
	b.Reset()
	if err := printSummaryAt(&b, st, summarize(st, "", "default", nil), now); err != nil {
		t.Fatal(err)
	}
	if want := "of training by 2026-12-09 09:00 UTC: 0 g/kWh expected vs 0 over the same work started now (planned 09:00 UTC)"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
	// -o json: RFC 3339, the detail as the run says it.
	b.Reset()
	if err := printStatus(&b, st, "json", "", "default"); err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(b.Bytes(), &js); err != nil {
		t.Fatal(err)
	}
	if js["detail"] != st.Detail || js["wait_until"] != "2026-12-07T14:00:00Z" {
		t.Errorf("-o json: detail %q, wait_until %q; want them as the run says them", js["detail"], js["wait_until"])
	}
	// The dashboard's DETAIL, and watch's lines, as status's.
	var r dashboardRow
	r.WorkflowID, r.Execution = st.RunID, "running"
	r.addStatus(st, nil)
	if got := dashboardCells(r)[10]; strings.Contains(got, "T14:00:00Z") || !strings.Contains(got, "until ") {
		t.Errorf("dashboard detail %q: want the wait's time as status writes it", got)
	}
	if r.Detail != st.Detail {
		t.Errorf("dashboard JSON detail %q, want %q", r.Detail, st.Detail)
	}
	var w bytes.Buffer
	p := &progressLines{w: &w, decile: -1}
	p.update(st, 200, 0, 0, time.Time{}, time.Now())
	(&liveBar{w: &w, cols: func() int { return 300 }}).draw(st, 200, 0, 0, time.Time{}, time.Now())
	if strings.Contains(w.String(), "T14:00:00Z") || strings.Count(w.String(), "green window until ") != 2 {
		t.Errorf("watch's lines: want the wait's time as status writes it:\n%q", w.String())
	}
}

// TestStatusExternalCancelledBeforeCheckpoint: an external job cancelled
// before its script stored a checkpoint ends "cancelled before its first
// checkpoint", not "cancelled at step 0" (its step is recorded at its
// checkpoints: 0 is not where it stopped) — in status, the dashboard and
// watch's lines; a run whose step is known keeps its words, and -o json
// the run's.
func TestStatusExternalCancelledBeforeCheckpoint(t *testing.T) {
	external := func(mod func(*spec.RunStatus)) spec.RunStatus {
		st := spec.RunStatus{RunID: "run/ddp", Phase: spec.PhaseCancelled, Model: spec.ModelExternal, TotalSteps: 1000,
			Nodes: []string{"n1"}, Error: "cancelled at step 0"}
		if mod != nil {
			mod(&st)
		}
		return st
	}
	ckpt := &spec.CheckpointRef{URL: "file:///b", Key: "run_ddp/step-40", Step: 40}
	for _, tc := range []struct {
		name    string
		st      spec.RunStatus
		unknown bool
		end     string // status's ended line, less its label
	}{
		{"external, no checkpoint", external(nil), true,
			"cancelled before its first checkpoint (an external job's step is known only at its checkpoints)"},
		{"external, a checkpoint", external(func(s *spec.RunStatus) {
			s.Step, s.LastCkpt, s.Checkpoints, s.Error = 40, ckpt, 1, "cancelled at step 40; last checkpoint at step 40"
		}), false, "cancelled at step 40; last checkpoint at step 40"},
		{"external, a checkpoint kept on a node", external(func(s *spec.RunStatus) {
			s.Step, s.KeptOnNode = 120, &spec.KeptCheckpoint{Step: 120, Node: "n1"}
			s.Error = "cancelled at step 120; node n1 keeps the checkpoint at step 120 that the bucket refused"
		}), false, "cancelled at step 120; node n1 keeps the checkpoint at step 120 that the bucket refused"},
		{"external, a checkpoint refused", external(func(s *spec.RunStatus) {
			s.Step, s.CheckpointFailed, s.Error = 60, &spec.CheckpointFailure{Step: 60, Error: "503"}, "cancelled at step 60"
		}), false, "cancelled at step 60"},
		{"built-in model at step 0", external(func(s *spec.RunStatus) { s.Model = spec.ModelMLPMNIST }), false, "cancelled at step 0"},
		{"external, failed", external(func(s *spec.RunStatus) { s.Phase, s.Error = spec.PhaseFailed, "rank 0 exited 1" }), false, "rank 0 exited 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stepUnknownAtEnd(tc.st); got != tc.unknown {
				t.Errorf("stepUnknownAtEnd = %v, want %v", got, tc.unknown)
			}
			var b bytes.Buffer
			if err := printStatus(&b, tc.st, "text", "", "default"); err != nil {
				t.Fatal(err)
			}
			label := "ended        "
			if tc.st.Phase != spec.PhaseCancelled {
				label = "error        "
			}
			if !strings.Contains(b.String(), label+tc.end+"\n") {
				t.Errorf("status lacks %q:\n%s", label+tc.end, b.String())
			}
			if tc.unknown && (strings.Contains(b.String(), "at step 0") || strings.Contains(b.String(), "steps        0") ||
				!strings.Contains(b.String(), "steps        -/1000 (not known: it stored no checkpoint")) {
				t.Errorf("status says step 0:\n%s", b.String())
			}
			// -o json: the run's own words.
			b.Reset()
			if err := printStatus(&b, tc.st, "json", "", "default"); err != nil {
				t.Fatal(err)
			}
			var js map[string]any
			if err := json.Unmarshal(b.Bytes(), &js); err != nil || js["error"] != tc.st.Error {
				t.Errorf("-o json: error %q (%v), want %q", js["error"], err, tc.st.Error)
			}
			// The dashboard's DETAIL.
			var r dashboardRow
			r.WorkflowID, r.Execution = tc.st.RunID, "canceled"
			r.addStatus(tc.st, nil)
			if r.Detail != tc.end {
				t.Errorf("dashboard detail %q, want %q", r.Detail, tc.end)
			}
			// watch: the last line, on a terminal and to a file.
			var w bytes.Buffer
			p := &progressLines{w: &w, decile: -1}
			p.update(tc.st, tc.st.Step, 0, 0, time.Time{}, time.Now())
			bar := barLine(tc.st, tc.st.Step, 0, 0, 0, false, 200)
			for _, line := range []string{strings.TrimSuffix(w.String(), "\n"), bar} {
				before := strings.Contains(line, "before its first checkpoint")
				if before != tc.unknown || tc.unknown && strings.Contains(line, " 0/1000") {
					t.Errorf("watch's line %q: want it to say the step is unknown: %v", line, tc.unknown)
				}
			}
		})
	}
}
