package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/engine/energy"
	"github.com/cann-train/cann-train/spec"
)

func newGreenReportCmd(e *env) *cobra.Command {
	var output, svg, trace, zone, traceStart string
	cmd := &cobra.Command{
		Use:   "report RUN",
		Short: "Energy and CO2 of a run's chunks, against running it right away",
		Long: `Prices the run's trained segments: energy is what the nodes measured, or else
the policy's power model (node_watts × nodes × PUE) over the chunks' recorded
durations; CO2 = Σ energy × the carbon intensity over each segment. The
baseline lays the same segments back to back from the run's start (run-now);
savings are relative to it. The intensity comes from the run's green policy
(its trace or provider); --trace prices a run without one, or points at the
trace where this machine keeps it, and --trace-start replays a past trace from
that time at the run's start (a policy's trace_start). --svg draws the
timeline: intensity, the chunks that ran and the planned slots.`,
		Example: `  cann-train green report mnist-green
  cann-train green report mnist-green -o json --svg mnist-green.svg
  cann-train green report mnist-demo --trace ../shared/data/carbon/ES_2022_hourly.csv --trace-start 2022-03-01T08:00:00Z`,
		Args: wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			if traceStart != "" {
				ts, err := parseInstant(traceStart)
				if err != nil {
					return fmt.Errorf("--trace-start %q: want %s", traceStart, instantForms)
				}
				traceStart = ts.Format(time.RFC3339) // as a policy's trace_start is written
			}
			ctx := cmd.Context()
			c, err := dialQuiet(ctx, e)
			if err != nil {
				return err
			}
			defer c.Close()
			st, _, _, err := readProgress(ctx, c, runID(args[0]))
			if err != nil && st.RunID == "" {
				return err
			}
			policy := reportPolicy(st, trace, zone, traceStart)
			if policy.Trace == "" && policy.Provider == "" {
				return fmt.Errorf("%s has no green policy: give --trace FILE to price it", st.RunID)
			}
			if err := checkReportTrace(st, policy, trace != ""); err != nil {
				return err
			}
			rep, tl, err := greenReport(ctx, st, policy.WithDefaults())
			if err != nil {
				return err
			}
			if svg != "" {
				if err := writeSVG(svg, tl); err != nil {
					return err
				}
				fmt.Fprintf(e.err, "timeline written to %s\n", svg)
			}
			return printGreenReport(e.out, rep, output)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "text or json")
	f.StringVar(&svg, "svg", "", "write an SVG timeline to this file")
	f.StringVar(&trace, "trace", "", "carbon-intensity CSV to price with (instead of the policy's signal)")
	f.StringVar(&zone, "zone", "", "zone of --trace (not the policy's: a plain CSV's column, an Electricity Maps Zone Id…)")
	f.StringVar(&traceStart, "trace-start", "", "replay the trace from this time at the run's start: "+instantForms)
	return cmd
}

// reportPolicy is the policy a report prices st with: the run's, with
// --trace (and its --zone: the policy's zone and column were for its own
// signal, not this file) and --trace-start in place of its own.
func reportPolicy(st spec.RunStatus, trace, zone, traceStart string) spec.GreenPolicy {
	var policy spec.GreenPolicy
	if st.Green != nil {
		policy = st.Green.Policy
	}
	if trace != "" {
		policy.Trace, policy.Provider, policy.Zone, policy.Column = trace, "", zone, ""
	}
	if traceStart != "" {
		policy.TraceStart = traceStart
	}
	return policy
}

// checkReportTrace refuses, before pricing, a trace file (given, or the
// policy's where it opens here) that does not read, or that does not hold
// the run: from its start to its last segment's end, replayed from
// trace_start where set (as `run` refuses a trace_start outside the
// trace).
func checkReportTrace(st spec.RunStatus, policy spec.GreenPolicy, given bool) error {
	if policy.Trace == "" || len(st.Segments) == 0 {
		return nil
	}
	f, err := os.Open(policy.Trace)
	if err != nil {
		if given {
			return fmt.Errorf("--trace: %w", err)
		}
		return nil // the control worker's path: greenReport says what it can
	}
	defer f.Close()
	tr, err := carbon.ReadTrace(f, carbon.TraceOptions{Zone: policy.Zone, Column: policy.Column})
	if err != nil {
		if !given && policy.Zone != "" && errors.Is(err, carbon.ErrHeader) {
			return fmt.Errorf("green.trace %s: %w (zone %q comes from the run's policy; pass --trace with --zone)", policy.Trace, err, policy.Zone)
		}
		return fmt.Errorf("green.trace %s: %w", policy.Trace, err)
	}
	ts, replay, err := policy.TraceStartTime()
	if err != nil || !replay {
		return nil // a run priced at its own times: greenReport names what is missing
	}
	start := st.StartedAt
	if start.IsZero() || st.Segments[0].Start.Before(start) {
		start = st.Segments[0].Start
	}
	end := st.Segments[len(st.Segments)-1].End
	span := end.Sub(start)
	if ts.Before(tr.Start) || ts.Add(span).After(tr.End()) {
		latest := tr.End().Add(-span)
		fix := fmt.Sprintf("give a --trace-start between %s and %s", tr.Start.Format(time.RFC3339), latest.Format(time.RFC3339))
		if latest.Before(tr.Start) {
			fix = "the trace is shorter than the run: price it on a longer one"
		}
		return fmt.Errorf("%s holds %s to %s: trace_start %s replays the run's %v (%s to %s) from %s to %s, outside it; %s",
			policy.Trace, tr.Start.Format(time.RFC3339), tr.End().Format(time.RFC3339), ts.Format(time.RFC3339),
			span.Round(time.Second), start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339),
			ts.Format(time.RFC3339), ts.Add(span).Format(time.RFC3339), fix)
	}
	if _, err := tr.Slice(ts, ts.Add(max(span, tr.Step))); err != nil {
		var ge *carbon.GapError
		if !errors.As(err, &ge) {
			return fmt.Errorf("%s: %w", policy.Trace, err)
		}
		var fix []string
		if before := ge.Start.Add(-span); !before.Before(tr.Start) {
			fix = append(fix, "at or before "+before.Format(time.RFC3339))
		}
		if after := ge.End; !after.Add(span).After(tr.End()) {
			fix = append(fix, "at or after "+after.Format(time.RFC3339))
		}
		how := "fill in the missing readings"
		if len(fix) > 0 {
			how = "give a --trace-start " + strings.Join(fix, " or ") + ", or " + how
		}
		return fmt.Errorf("%s: %s, and trace_start %s replays the run's %v (%s to %s) from %s to %s, across it; %s",
			policy.Trace, gapText(ge, time.RFC3339), ts.Format(time.RFC3339), span.Round(time.Second),
			start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), ts.Format(time.RFC3339), ts.Add(span).Format(time.RFC3339), how)
	}
	return nil
}

// replayHint names --trace-start after an error that a trace not holding
// the run's time gave ("" for any other).
func replayHint(err error, policy spec.GreenPolicy) string {
	if errors.Is(err, carbon.ErrOutOfRange) && policy.Trace != "" && policy.TraceStart == "" {
		return " (--trace-start T replays the trace from T at the run's start)"
	}
	return ""
}

// greenReportJSON is `green report -o json`.
type greenReportJSON struct {
	WorkflowID      string     `json:"workflow_id"`
	Status          spec.Phase `json:"status"`
	Source          string     `json:"source"`
	Energy          string     `json:"energy"` // measured, modelled or mixed
	KWh             float64    `json:"kwh"`
	Grams           float64    `json:"grams"`
	GPerKWh         float64    `json:"g_per_kwh"`
	BaselineGrams   float64    `json:"baseline_grams"`
	BaselineGPerKWh float64    `json:"baseline_g_per_kwh"`
	SavingsPct      float64    `json:"savings_pct"`
	// LostKWh and LostGrams are the part of KWh and Grams spent in chunks
	// that failed and were trained again (lost segments).
	LostKWh       float64           `json:"lost_kwh,omitempty"`
	LostGrams     float64           `json:"lost_grams,omitempty"`
	Waits         int               `json:"waits"`
	WaitedHours   float64           `json:"waited_h"`
	BudgetG       float64           `json:"budget_g,omitempty"`
	BudgetUsedPct float64           `json:"budget_used_pct,omitempty"`
	Segments      []segmentJSON     `json:"segments"`
	Planned       []spec.CarbonSlot `json:"planned"`
	Policy        spec.GreenPolicy  `json:"policy"`
	// BatchSchedule is the carbon batch controller's changes (green.batch).
	BatchSchedule []spec.BatchChange `json:"batch_schedule,omitempty"`
}

type segmentJSON struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Nodes    int       `json:"nodes"`
	FromStep int64     `json:"from_step"`
	ToStep   int64     `json:"to_step"`
	KWh      float64   `json:"kwh"`
	GPerKWh  float64   `json:"g_per_kwh"`
	Grams    float64   `json:"grams"`
	Measured bool      `json:"measured"`
	// Lost: a failed chunk, rewound (its steps were trained again).
	Lost bool `json:"lost,omitempty"`
}

// greenReport prices st's segments on policy's actual intensity (see the
// report command) and builds the timeline to draw.
func greenReport(ctx context.Context, st spec.RunStatus, policy spec.GreenPolicy) (greenReportJSON, energy.Timeline, error) {
	out := greenReportJSON{WorkflowID: st.RunID, Status: st.Phase, Source: reportSource(st, policy), Policy: policy,
		Segments: []segmentJSON{}, Planned: []spec.CarbonSlot{}}
	var tl energy.Timeline
	if len(st.Segments) == 0 {
		return out, tl, fmt.Errorf("%s has trained no chunk yet", st.RunID)
	}
	ivs, err := activities.SegmentIntervals(ctx, policy, st.Segments)
	if err != nil {
		return out, tl, err
	}
	if len(ivs) != len(st.Segments) {
		return out, tl, errors.New("overlapping segments: the nodes' clocks disagree by more than a chunk")
	}
	runNow := st.StartedAt
	if runNow.IsZero() || st.Segments[0].Start.Before(runNow) {
		runNow = st.Segments[0].Start
	}
	from, to := runNow, st.Segments[len(st.Segments)-1].End
	var busy time.Duration
	for _, iv := range ivs {
		busy += iv.End.Sub(iv.Start)
	}
	to = maxT(to, runNow.Add(busy))
	// A plan an override set aside was not followed: the timeline does
	// not draw its windows (the JSON still lists them, with the policy's
	// override in the status).
	overridden := overrideText(st.Green, time.Now())
	if st.Green != nil && st.Green.Plan != nil {
		out.Planned = st.Green.Plan.Slots
		for _, s := range out.Planned {
			if overridden == "" { // (a plan not drawn does not widen the timeline)
				to = maxT(to, s.End)
			}
		}
	}
	sig, err := (&activities.Carbon{}).Open(policy, st.StartedAt)
	if err != nil {
		return out, tl, err
	}
	actual, err := sig.Actual(ctx, from, to)
	if err != nil {
		return out, tl, fmt.Errorf("carbon intensity for %s – %s: %w%s", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339),
			err, replayHint(err, policy))
	}
	rep, err := energy.Account(actual, ivs, runNow)
	if err != nil {
		return out, tl, fmt.Errorf("price %s: %w%s", st.RunID, err, replayHint(err, policy))
	}
	out.KWh, out.Grams, out.GPerKWh = rep.KWh, rep.Grams, rep.GPerKWh
	out.BaselineGrams, out.BaselineGPerKWh, out.SavingsPct = rep.BaselineGrams, rep.BaselineGPerKWh, rep.SavingsPct
	measured := 0
	for i, p := range rep.Intervals {
		seg := st.Segments[i]
		if seg.Joules > 0 {
			measured++
		}
		if seg.Lost {
			out.LostKWh += p.KWh
			out.LostGrams += p.Grams
		}
		if trainedNothing(seg) {
			continue
		}
		out.Segments = append(out.Segments, segmentJSON{Start: p.Start, End: p.End, Nodes: seg.Nodes, FromStep: seg.FromStep,
			ToStep: seg.ToStep, KWh: p.KWh, GPerKWh: p.GPerKWh, Grams: p.Grams, Measured: seg.Joules > 0, Lost: seg.Lost})
	}
	switch measured {
	case 0:
		out.Energy = "modelled"
	case len(rep.Intervals):
		out.Energy = "measured"
	default:
		out.Energy = "mixed"
	}
	if g := st.Green; g != nil {
		out.Waits, out.WaitedHours = g.Waits, g.Waited(time.Now())/3600
		out.BudgetG = g.BudgetG
		out.BatchSchedule = g.Schedule
		if g.BudgetG > 0 {
			out.BudgetUsedPct = 100 * out.Grams / g.BudgetG
		}
	}
	pad := 2 * actual.Step
	var trained, lost []energy.Interval
	for i, iv := range ivs {
		switch {
		case trainedNothing(st.Segments[i]):
		case st.Segments[i].Lost:
			lost = append(lost, iv)
		default:
			trained = append(trained, iv)
		}
	}
	curve, err := cutSeries(actual, from, to, pad)
	if err != nil {
		return out, tl, fmt.Errorf("the report's timeline %s – %s: %w", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
	}
	tl = energy.Timeline{
		Series:  curve,
		Chunks:  energy.Chunks(trained),
		Lost:    energy.Chunks(lost),
		Planned: energy.SlotSpans(toCarbonSlots(out.Planned)),
		Title: fmt.Sprintf("%s: %.1f g CO2eq (%.0f g/kWh), %.1f%% below running now — %s",
			st.RunID, out.Grams, out.GPerKWh, out.SavingsPct, out.Source),
	}
	if overridden != "" {
		tl.Planned = nil
		if len(out.Planned) > 0 {
			tl.Title += " — plan not drawn (" + overridden + ")"
		}
	}
	return out, tl, nil
}

// reportSource names the signal a report prices with: the policy's (its
// trace or provider, forecast and planner), or for a run without a green
// policy only the trace (--trace, --trace-start): no forecast or planner
// placed that run.
func reportSource(st spec.RunStatus, policy spec.GreenPolicy) string {
	if st.Green != nil {
		return policy.Source()
	}
	s := policy.Trace
	if policy.Zone != "" {
		s += " (" + policy.Zone + ")"
	}
	if policy.TraceStart != "" {
		s += " replayed from " + policy.TraceStart
	}
	return s + "; the run has no green policy (priced only)"
}

// trainedNothing: a failed chunk that reached no step (a node lost before
// the chunk's first step, during a green wait say): not a segment worth a
// row or a bar, though what energy it is given still counts in the totals.
func trainedNothing(s spec.Segment) bool {
	return s.Lost && s.ToStep <= s.FromStep
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func toCarbonSlots(in []spec.CarbonSlot) []carbon.Slot {
	out := make([]carbon.Slot, len(in))
	for i, s := range in {
		out[i] = carbon.Slot{Start: s.Start, End: s.End, MeanIntensity: s.GPerKWh}
	}
	return out
}

// cutSeries is the part of s covering [from, to) (whole steps, within s),
// widened by pad on either side where s holds data there: a gap of s too
// long to interpolate inside [from, to) itself is refused (a
// *carbon.GapError), rather than drawn from made-up readings.
func cutSeries(s *carbon.Series, from, to time.Time, pad time.Duration) (*carbon.Series, error) {
	var err error
	for _, p := range [][2]time.Duration{{pad, pad}, {0, pad}, {pad, 0}, {0, 0}} {
		var cut *carbon.Series
		if cut, err = s.Slice(cutRange(s, from.Add(-p[0]), to.Add(p[1]))); err == nil {
			return cut, nil
		}
	}
	return nil, err
}

// cutRange is [from, to) clamped to s's whole steps, at least one.
func cutRange(s *carbon.Series, from, to time.Time) (time.Time, time.Time) {
	i0 := int(from.Sub(s.Start) / s.Step)
	if from.Before(s.Start) {
		i0 = 0
	}
	i1 := int((to.Sub(s.Start) + s.Step - 1) / s.Step)
	i0, i1 = max(0, min(i0, len(s.Values)-1)), max(1, min(i1, len(s.Values)))
	if i1 <= i0 {
		i1 = i0 + 1
	}
	return s.TimeAt(i0), s.TimeAt(i1)
}

func writeSVG(path string, tl energy.Timeline) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := energy.RenderSVG(f, tl); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func printGreenReport(w io.Writer, r greenReportJSON, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "run        %s (%s)\n", r.WorkflowID, r.Status)
	fmt.Fprintf(w, "signal     %s\n", r.Source)
	fmt.Fprintf(w, "energy     %.4f kWh (%s)\n", r.KWh, r.Energy)
	fmt.Fprintf(w, "CO2        %.2f g at %.1f g/kWh\n", r.Grams, r.GPerKWh)
	fmt.Fprintf(w, "run now    %.2f g at %.1f g/kWh → %s\n", r.BaselineGrams, r.BaselineGPerKWh, savedText(r.SavingsPct))
	if r.LostKWh >= 0.5e-4 { // (what prints as 0.0000 kWh is a chunk that failed at once)
		fmt.Fprintf(w, "lost       %.4f kWh, %.2f g in chunks that failed and were trained again\n", r.LostKWh, r.LostGrams)
	}
	if r.Waits > 0 {
		fmt.Fprintf(w, "waited     %.2f h in %d green wait(s)\n", r.WaitedHours, r.Waits)
	}
	if r.BudgetG > 0 {
		alert := ""
		switch {
		case r.BudgetUsedPct >= 100:
			alert = " — EXCEEDED"
		case r.BudgetUsedPct >= 100*spec.BudgetAlertFraction:
			alert = fmt.Sprintf(" — ALERT (≥ %.0f%%)", 100*spec.BudgetAlertFraction)
		}
		fmt.Fprintf(w, "budget     %.4g g, %.1f%% used%s\n", r.BudgetG, r.BudgetUsedPct, alert)
	}
	if len(r.BatchSchedule) > 0 {
		var ch []string
		for _, b := range r.BatchSchedule {
			ch = append(ch, fmt.Sprintf("step %d: %d (lr %.4g)", b.FromStep, b.GlobalBatch, b.LearningRate))
		}
		fmt.Fprintf(w, "batch      %s\n", strings.Join(ch, "; "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEGMENT START\tEND\tNODES\tSTEPS\tkWh\tg/kWh\tg")
	for _, s := range r.Segments {
		steps := fmt.Sprintf("%d–%d", s.FromStep, s.ToStep)
		if s.Lost {
			steps += " (lost)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.4f\t%.1f\t%.2f\n", s.Start.UTC().Format(time.RFC3339), s.End.UTC().Format(time.RFC3339),
			s.Nodes, steps, s.KWh, s.GPerKWh, s.Grams)
	}
	return tw.Flush()
}

func newGreenOverrideCmd(e *env) *cobra.Command {
	var forD time.Duration
	var until string
	var clear bool
	cmd := &cobra.Command{
		Use:   "override RUN [--for 6h | --until T | --clear]",
		Short: "Ignore a run's green policy, for good or for a while",
		Long: `Tells the run to stop waiting for green windows: a wait in progress ends and
the next chunks run at once, until --until (a time as green plan --start takes
it) or for --for, or for good when neither is given. --clear restores the
policy.`,
		Example: `  cann-train green override mnist-green --for 6h
  cann-train green override mnist-green --clear`,
		Args: wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := spec.GreenOverride{Clear: clear}
			switch {
			case clear && (forD != 0 || until != ""):
				return errors.New("--clear takes neither --for nor --until")
			case forD != 0 && until != "":
				return errors.New("give --for or --until, not both")
			case forD > 0:
				o.Until = time.Now().Add(forD).UTC()
			case until != "":
				t, err := parseInstant(until)
				if err != nil {
					return fmt.Errorf("--until %q: want %s", until, instantForms)
				}
				o.Until = t.UTC()
				if !o.Until.After(time.Now()) {
					return fmt.Errorf("--until %s has passed", o.Until.Format(time.RFC3339))
				}
			}
			ctx := cmd.Context()
			c, id, st, unanswered, err := openRun(ctx, e, args[0], "green override")
			if err != nil {
				return err
			}
			defer c.Close()
			switch {
			case unanswered:
				// (No status to check: the signal is recorded all the same.)
				fmt.Fprintf(e.err, "  whether %s has a green policy could not be checked: a run without one ignores the override\n", id)
			case st.Green == nil:
				return fmt.Errorf("%s has no green policy: nothing to override (a job file's green: block sets one)", id)
			}
			if err := signalRun(ctx, c, id, spec.SignalGreenOverride, o); err != nil {
				return err
			}
			switch {
			case clear:
				fmt.Fprintf(e.out, "%s: green policy restored\n", id)
			case o.Until.IsZero():
				fmt.Fprintf(e.out, "%s: green policy ignored from now on\n", id)
			default:
				fmt.Fprintf(e.out, "%s: green policy ignored until %s\n", id, o.Until.Format(time.RFC3339))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&forD, "for", 0, "ignore the policy for this long")
	atLeast(f, "1ns", "for")
	f.StringVar(&until, "until", "", "ignore the policy until this time: "+instantForms)
	f.BoolVar(&clear, "clear", false, "apply the policy again")
	return cmd
}
