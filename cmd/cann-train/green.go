package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/spec"
)

func newGreenCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "green",
		Short: "Carbon-aware planning of training time",
	}
	var trace, zone, column, startArg, forecast, policy, output string
	var work, deadline, minSlot time.Duration
	var interruptible bool
	plan := &cobra.Command{
		Use:   "plan --trace FILE --start T --work 10h --deadline 48h",
		Short: "Plan a job's run time on a carbon-intensity trace; compare with running now and with hindsight",
		Long: `Reads a carbon-intensity trace (Electricity Maps CSV export, or a plain
"time,<zone>" CSV), plans --work of training before --deadline using a
forecast (perfect: the trace itself; persistence: the value a day earlier;
seasonal: last week's mean for the time of day + the current anomaly),
and reports the mean intensity of running now (baseline), of the plan by the
forecast (planned) and by the actual trace (realized), and of the best plan in
hindsight (oracle), in gCO2eq/kWh.

--policy says how the forecast is used: online (the default: decide at
every trace step with the observed present intensity and the forecast
corrected by its own past errors; see engine/carbon.Online), once (plan at
--start and follow the plan) or replan (re-plan at every trace step on a
fresh forecast). On the real traces of the README's savings table, with the
persistence forecast online keeps more of the oracle's savings than once or
replan in every zone and job kind (40–72 % of them on the held-out halves),
but replan on the seasonal forecast beats it in 7 of the 12 rows.

Plans run on the trace's grid (hourly for most traces): --start rounds up
to the next step, the deadline down, and --work and --min-slot up to whole
steps, so a 10-second job is priced as one step and "run now" at 08:30 as
from 09:00. --start is a time as the trace readers take it: RFC 3339, a
date, or a date and a time to the minute or second (T or a space between),
with an offset (Z, +02:00, +0200) or without one, taken as UTC
(2022-03-01, 2022-03-01T08:00Z, 2022-03-27T01:00:00, 2022-03-27 03:00+0200).

--min-slot (with --interruptible) is the shortest slot: every slot lasts at
least that long, the last one included, so a job never pauses with less
than --min-slot of work left (with less work than --min-slot, the job runs
in one slot). The oracle is the best schedule in hindsight under the same
rule, so realized ≥ oracle always holds.

Short gaps in the trace (two steps, or up to an hour on a finer grid) are
interpolated; a longer one refuses only a plan whose window, or the history
its forecast reads before --start (persistence: a day; seasonal: a week and
a step), meets it, naming the gap and the starts that clear it. A plan clear
of it is the plan on the trace without it.`,
		Example: `  cann-train green plan --trace ../shared/data/carbon/ES_2022_hourly.csv \
      --start 2022-03-01T08:00:00Z --work 10h --deadline 48h --forecast persistence --interruptible -o json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			if policy != "once" && policy != "replan" && policy != "online" {
				return fmt.Errorf("--policy %q: want once, replan or online", policy)
			}
			fl := cmd.Flags()
			if trace == "" || startArg == "" || !fl.Changed("work") || !fl.Changed("deadline") {
				return errors.New("--trace, --start, --work and --deadline are required")
			}
			if work <= 0 || deadline <= 0 || minSlot < 0 {
				return fmt.Errorf("--work %v, --deadline %v, --min-slot %v: work and deadline must be positive, min-slot not negative", work, deadline, minSlot)
			}
			if work > deadline {
				return fmt.Errorf("--work %v does not fit before --deadline %v: no plan finishes in time", work, deadline)
			}
			if minSlot > deadline {
				return fmt.Errorf("--min-slot %v is longer than --deadline %v", minSlot, deadline)
			}
			if minSlot > 0 && !interruptible {
				return fmt.Errorf("--min-slot %v is the shortest slot of an interruptible job: add --interruptible "+
					"(without it the job runs in one slot of --work)", minSlot)
			}
			start, err := parseInstant(startArg)
			if err != nil {
				return fmt.Errorf("--start %q: want %s", startArg, instantForms)
			}
			f, err := os.Open(trace)
			if err != nil {
				return err
			}
			defer f.Close()
			series, err := carbon.ReadTrace(f, carbon.TraceOptions{Zone: zone, Column: column})
			if err != nil {
				return fmt.Errorf("%s: %w", trace, err)
			}
			var fc carbon.Forecaster
			switch forecast {
			case "perfect":
				fc = carbon.Perfect{Trace: series}
			case "persistence":
				fc = carbon.Persistence{Trace: series}
			case "seasonal":
				fc = carbon.Seasonal{Trace: series}
			default:
				return fmt.Errorf("--forecast %q: want persistence, seasonal or perfect", forecast)
			}
			job := carbon.Job{Work: work, Start: start, Deadline: start.Add(deadline), Interruptible: interruptible, MinSlot: minSlot}
			var res carbon.Result
			switch policy {
			case "once":
				res, err = carbon.Evaluate(series, fc, job)
			case "replan":
				res, err = carbon.EvaluateReplanned(series, fc, job)
			case "online":
				res, err = carbon.EvaluateOnline(series, fc, job, carbon.DefaultOnline(interruptible))
			}
			if errors.Is(err, carbon.ErrOutOfRange) || errors.Is(err, carbon.ErrNoHistory) {
				// The window must lie within the trace, and a forecast
				// other than perfect needs a day of it before the start.
				const day = "2006-01-02T15:04Z" // parseInstant reads it back
				earliest, latest := planStarts(series, forecast, deadline)
				why := ""
				if forecast != spec.ForecastPerfect {
					why = fmt.Sprintf(" (a %s forecast needs a day of the trace before it)", forecast)
				}
				if earliest.After(latest) {
					return fmt.Errorf("%s covers %s to %s: %s; --deadline %v is longer, so no --start fits (%w)",
						trace, series.Start.UTC().Format(day), series.End().UTC().Format(day), traceRoom(series, forecast, "--deadline"), deadline, err)
				}
				return fmt.Errorf("%s covers %s to %s; the job's window is --start %s plus --deadline %v: "+
					"start between %s%s and %s, or shorten --deadline (%w)", trace, series.Start.UTC().Format(day), series.End().UTC().Format(day),
					start.UTC().Format(day), deadline, earliest.UTC().Format(day), why, latest.UTC().Format(day), err)
			}
			if errors.Is(err, carbon.ErrDeadlineTooShort) {
				return gridTooShort(series, start, work, deadline)
			}
			if ge := (*carbon.GapError)(nil); errors.As(err, &ge) {
				// Only a window (and the history its forecast reads)
				// that meets a gap is refused: say which starts clear it.
				const day = "2006-01-02T15:04Z"
				return fmt.Errorf("%s: %s, and the job's window (--start %s to its deadline %s%s) needs data there: %s (%w)",
					trace, gapText(ge, day), start.UTC().Format(day), start.Add(deadline).UTC().Format(day),
					historyText(forecast, series.Step), gapStarts(series, ge, forecast, deadline, "start", day), err)
			}
			if err != nil {
				return err
			}
			q := planQuestion(series, job, policy, forecast, zone, column)
			return printGreenPlan(e, res, series, policy == "once", output, &q)
		},
	}
	f := plan.Flags()
	f.StringVar(&trace, "trace", "", "carbon-intensity trace: CSV, or JSON as the Electricity Maps, UK Carbon Intensity or Carbon Aware SDK APIs answer")
	f.StringVar(&zone, "zone", "", "zone (Electricity Maps Zone Id, the column of a plain CSV, a UK region's short name or id, a Carbon Aware SDK location)")
	f.StringVar(&column, "column", "", `intensity column of an Electricity Maps export (default "direct"; e.g. "lca")`)
	f.StringVar(&startArg, "start", "", "earliest start: "+instantForms)
	f.DurationVar(&work, "work", 0, "training time needed")
	f.DurationVar(&deadline, "deadline", 0, "deadline, from --start")
	f.DurationVar(&minSlot, "min-slot", 0, "shortest slot of an interruptible job (needs --interruptible), the last slot included")
	f.BoolVar(&interruptible, "interruptible", false, "the job may pause between slots")
	f.StringVar(&forecast, "forecast", "persistence", "persistence (a day ago), seasonal (last week's mean for the time of day + the current anomaly) or perfect")
	f.StringVar(&policy, "policy", "online", "online (decide every step with the observed present and an error-corrected forecast; the best of the three on the real traces), once (plan at the start and follow the plan) or replan (re-plan every step on a fresh forecast)")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	cmd.AddCommand(plan, newGreenReportCmd(e), newGreenOverrideCmd(e))
	return cmd
}

// greenPlanJSON is `green plan -o json`. Intensities are rounded to 12
// significant digits and percentages to 9 decimals, below which there is
// only summation noise (a baseline of 4.5009999999999994 against a
// realized 4.501 gave savings of −1.97e-14 %).
// Oracle and OracleSavings are null, and OracleError says why, when the
// oracle could not be computed (the plan stands).
type greenPlanJSON struct {
	// The question answered, on the trace's grid (omitted where unknown).
	*GreenQuestion
	Baseline      float64    `json:"baseline_g_per_kwh"`
	Planned       float64    `json:"planned_g_per_kwh"`
	Realized      float64    `json:"realized_g_per_kwh"`
	Oracle        *float64   `json:"oracle_g_per_kwh"`
	SavingsPct    float64    `json:"savings_pct"`
	OracleSavings *float64   `json:"oracle_savings_pct"`
	OracleError   string     `json:"oracle_error,omitempty"`
	Slots         []slotJSON `json:"slots"`
}

// GreenQuestion is what a plan answered: the job's window on the trace's
// grid (the start rounded up, the deadline down), its work in whole steps,
// the policy and forecast, and the trace (its zone or column where given,
// and the range it holds).
type GreenQuestion struct {
	Start      time.Time `json:"start"`
	Deadline   time.Time `json:"deadline"`
	Step       string    `json:"step"`
	WorkSteps  int       `json:"work_steps"`
	Policy     string    `json:"policy"`
	Forecast   string    `json:"forecast"`
	Zone       string    `json:"zone,omitempty"`
	Column     string    `json:"column,omitempty"`
	TraceStart time.Time `json:"trace_start"`
	TraceEnd   time.Time `json:"trace_end"`
}

// planQuestion is job's question on series.
func planQuestion(series *carbon.Series, job carbon.Job, policy, forecast, zone, column string) GreenQuestion {
	step := series.Step
	start := job.Start.Truncate(step)
	if start.Before(job.Start) {
		start = start.Add(step)
	}
	return GreenQuestion{Start: start.UTC(), Deadline: job.Deadline.Truncate(step).UTC(), Step: step.String(),
		WorkSteps: int((job.Work + step - 1) / step), Policy: policy, Forecast: forecast, Zone: cmp.Or(zone, series.Zone), Column: column,
		TraceStart: series.Start.UTC(), TraceEnd: series.End().UTC()}
}

// slotJSON is a slot of `green plan -o json`: GPerKWh the trace's mean
// over it (what the slot emitted), Forecast the forecast's mean a plan made
// once at the start gave it (the online and re-planning policies decide
// step by step, on forecasts that change: none).
type slotJSON struct {
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	GPerKWh   float64   `json:"g_per_kwh"`
	Forecast  *float64  `json:"forecast_g_per_kwh,omitempty"`
	DurationH float64   `json:"hours"`
}

// roundG rounds an intensity to 12 significant digits.
func roundG(x float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 12, 64), 64)
	if err != nil {
		return x
	}
	return r
}

// roundPct rounds a percentage to 9 decimals, without a negative zero.
func roundPct(x float64) float64 {
	r := math.Round(x*1e9) / 1e9
	if r == 0 {
		return 0
	}
	return r
}

// printGreenPlan writes r, each slot with the trace's intensity over it
// and, where planned once (r's slots then carry the forecast's), the
// forecast's.
func printGreenPlan(e *env, r carbon.Result, trace *carbon.Series, planned bool, output string, q *GreenQuestion) error {
	out := greenPlanJSON{GreenQuestion: q, Baseline: roundG(r.BaselineGPerKWh), Planned: roundG(r.PlannedGPerKWh), Realized: roundG(r.RealizedGPerKWh),
		SavingsPct: roundPct(r.SavingsPct), Slots: []slotJSON{}}
	if r.OracleErr == nil {
		orc, orcSaved := roundG(r.OracleGPerKWh), roundPct(r.OracleSavingsPct)
		out.Oracle, out.OracleSavings = &orc, &orcSaved
	} else {
		out.OracleError = r.OracleErr.Error()
	}
	for _, s := range r.Slots {
		actual, err := trace.Mean(s.Start, s.End)
		if err != nil {
			return fmt.Errorf("slot %s: %w", s.Start.Format(time.RFC3339), err)
		}
		js := slotJSON{Start: s.Start, End: s.End, GPerKWh: roundG(actual), DurationH: s.End.Sub(s.Start).Hours()}
		if planned {
			fc := roundG(s.MeanIntensity)
			js.Forecast = &fc
		}
		out.Slots = append(out.Slots, js)
	}
	if output == "json" {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	oracle := "not computed: " + out.OracleError
	if out.Oracle != nil {
		oracle = fmt.Sprintf("%7.1f g/kWh (%s in hindsight)", *out.Oracle, savedText(*out.OracleSavings))
	}
	if q != nil {
		const hm = "2006-01-02T15:04Z"
		fmt.Fprintf(e.out, "window    %s – %s on the trace's %s grid (--start rounded up, the deadline down), %d step(s) of work; %s policy, %s forecast\n",
			q.Start.Format(hm), q.Deadline.Format(hm), q.Step, q.WorkSteps, q.Policy, q.Forecast)
	}
	fmt.Fprintf(e.out, "run now   %7.1f g/kWh\nplanned   %7.1f g/kWh (by the forecast)\nrealized  %7.1f g/kWh (%s)\noracle    %s\n",
		out.Baseline, out.Planned, out.Realized, savedText(out.SavingsPct), oracle)
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT START\tEND\tHOURS\tg/kWh\tFORECAST g/kWh")
	for _, s := range out.Slots {
		fc := "-"
		if s.Forecast != nil {
			fc = fmt.Sprintf("%.1f", *s.Forecast)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.1f\t%s\n", s.Start.Format(time.RFC3339), s.End.Format(time.RFC3339), s.DurationH, s.GPerKWh, fc)
	}
	return tw.Flush()
}

// instantForms says what parseInstant reads, for flag help and errors.
const instantForms = "RFC 3339, a date, or a date and a time to the minute or second, with an offset (Z, +02:00, +0200) " +
	"or without one, taken as UTC (2022-03-01, 2022-03-01T08:00Z, 2022-03-27T01:00:00, 2022-03-27 03:00+0200)"

// parseInstant reads a time as the trace readers do (carbon.ParseTime:
// RFC 3339, a date and a time to the minute or second with or without an
// offset, Unix seconds…; without a zone, UTC), or a bare date (UTC
// midnight); it reads back every time the green commands print.
func parseInstant(s string) (time.Time, error) {
	t, err := carbon.ParseTime(s)
	if err == nil {
		return t.UTC(), nil
	}
	if d, derr := time.Parse(time.DateOnly, strings.TrimSpace(s)); derr == nil {
		return d.UTC(), nil
	}
	return time.Time{}, err
}

// traceRoom says how much of tr a plan can use — after the day a
// forecast other than perfect reads before the start — and the longest
// deadline (named by flag) that fits, for a deadline longer than that.
func traceRoom(tr *carbon.Series, forecast, flag string) string {
	earliest, _ := planStarts(tr, forecast, 0)
	room := tr.End().Sub(earliest)
	if forecast == spec.ForecastPerfect {
		return fmt.Sprintf("it holds %v of data; %s must be at most %v", tr.End().Sub(tr.Start), flag, room)
	}
	if room <= 0 {
		return fmt.Sprintf("it holds %v of data, less than the day a %s forecast reads before the start: no plan fits; use a longer trace or the perfect forecast",
			tr.End().Sub(tr.Start), forecast)
	}
	return fmt.Sprintf("it holds %v of data, %v after the day a %s forecast reads before the start; %s must be at most %v",
		tr.End().Sub(tr.Start), room, forecast, flag, room)
}

// checkGreenTrace reads a job's green.trace as the control worker will,
// so that a trace it cannot use fails the start instead of the run
// training without its policy (its plan fails, and the run trains on,
// saying so in its status): an error for a trace that does not read, or
// that does not hold the run's window (from its start — now, or
// trace_start — to its deadline, and the day before it that a forecast
// other than perfect reads); where the file is not on this host, a note
// (local: the control worker runs here, so an error). Any policy whose
// work is longer than its deadline is an error too: no plan could meet it.
func checkGreenTrace(g *spec.GreenPolicy, now time.Time, local bool) (note string, err error) {
	if g == nil {
		return "", nil
	}
	if g.Work > 0 && g.Deadline > 0 && g.Work > g.Deadline {
		return "", fmt.Errorf("green.work %s is longer than green.deadline %s: no plan can finish the run by its deadline (lengthen the deadline, or shorten the work estimate)",
			g.Work.D(), g.Deadline.D())
	}
	if g.Trace == "" {
		return "", nil
	}
	f, err := os.Open(g.Trace)
	if err != nil {
		if local {
			return "", fmt.Errorf("green.trace: %w", err)
		}
		return fmt.Sprintf("(green.trace %s does not open here (%v): the control worker reads it on its host; "+
			"where it cannot, the run trains without its green policy, saying so in its status)", g.Trace, err), nil
	}
	defer f.Close()
	tr, err := carbon.ReadTrace(f, carbon.TraceOptions{Zone: g.Zone, Column: g.Column})
	if err != nil {
		return "", fmt.Errorf("green.trace %s: %w", g.Trace, err)
	}
	start, replay, err := g.TraceStartTime()
	if err != nil {
		return "", fmt.Errorf("green.trace_start: %w", err)
	}
	if !replay {
		start = now.UTC()
	}
	if start.Before(tr.Start) || !start.Before(tr.End()) {
		when, fix := "now, "+start.Format(time.RFC3339), "set green.trace_start to a time inside it to replay it"
		if replay {
			when, fix = "trace_start "+start.Format(time.RFC3339), "move green.trace_start inside it"
		}
		return "", fmt.Errorf("green.trace %s holds %s to %s: the run's start (%s) is outside it; %s (e.g. trace_start: %s)",
			g.Trace, tr.Start.Format(time.RFC3339), tr.End().Format(time.RFC3339), when, fix, tr.Start.Format(time.RFC3339))
	}
	forecast := cmp.Or(g.Forecast, spec.ForecastPersistence)
	earliest, latest := planStarts(tr, forecast, g.Deadline.D())
	why := ""
	if forecast != spec.ForecastPerfect {
		why = fmt.Sprintf(", and a %s forecast a day of it before the start", forecast)
	}
	if earliest.After(latest) {
		return "", fmt.Errorf("green.trace %s holds %s to %s: %s; green.deadline %s is longer, so no start fits",
			g.Trace, tr.Start.Format(time.RFC3339), tr.End().Format(time.RFC3339), traceRoom(tr, forecast, "green.deadline"), g.Deadline.D())
	}
	if start.Before(earliest) || start.After(latest) {
		what := "trace_start"
		if !replay {
			what = "the run's start (now)"
		}
		return "", fmt.Errorf("green.trace %s holds %s to %s: %s %s leaves its plans without the trace they need — the window to the deadline (%s)%s; "+
			"start between %s and %s (green.trace_start), or shorten green.deadline",
			g.Trace, tr.Start.Format(time.RFC3339), tr.End().Format(time.RFC3339), what, start.Format(time.RFC3339), g.Deadline.D(), why,
			earliest.Format(time.RFC3339), latest.Format(time.RFC3339))
	}
	// A gap too long to interpolate refuses only the plans that need data
	// inside it: the window to the deadline and the history the forecast
	// reads before the start.
	from := maxT(tr.Start, start.Add(-forecastHistory(forecast, tr.Step)))
	to := maxT(start.Add(g.Deadline.D()), start.Add(tr.Step))
	if _, err := tr.Slice(from, to); err != nil {
		var ge *carbon.GapError
		if !errors.As(err, &ge) {
			return "", fmt.Errorf("green.trace %s: %w", g.Trace, err)
		}
		what, set := "trace_start "+start.Format(time.RFC3339), "set green.trace_start"
		if !replay {
			what = "the run's start (now, " + start.Format(time.RFC3339) + ")"
		}
		return "", fmt.Errorf("green.trace %s: %s, and %s puts the run's window (to the deadline, %s%s) there; %s",
			g.Trace, gapText(ge, time.RFC3339), what, g.Deadline.D(), historyText(forecast, tr.Step),
			gapStarts(tr, ge, forecast, g.Deadline.D(), set, time.RFC3339))
	}
	return "", nil
}

// forecastHistory is how far before a plan's start its forecast reads
// the trace: nothing for perfect, the day before for persistence, a week
// and a step for seasonal (engine/carbon's Seasonal: the anomaly of the
// step before the start too).
func forecastHistory(forecast string, step time.Duration) time.Duration {
	switch forecast {
	case spec.ForecastPerfect:
		return 0
	case spec.ForecastSeasonal:
		return 7*24*time.Hour + step
	}
	return 24 * time.Hour
}

// historyText is ", and the … before it that a … forecast reads" for a
// forecast that reads history ("" for perfect).
func historyText(forecast string, step time.Duration) string {
	h := forecastHistory(forecast, step)
	if h == 0 {
		return ""
	}
	return fmt.Sprintf(", and the %v before it that a %s forecast reads", h, forecast)
}

// gapText names a gap of a trace: its missing range and the reading after
// it.
func gapText(ge *carbon.GapError, layout string) string {
	return fmt.Sprintf("no data from %s to %s (%d missing steps before %s; up to %d are interpolated)",
		ge.Start.UTC().Format(layout), ge.End.UTC().Format(layout), ge.Missing, ge.Where, ge.Max)
}

// gapStarts says which starts (what: "start", "set green.trace_start")
// keep a plan of deadline, and the history its forecast reads, clear of
// the gap ge — the window ending by the gap's start, or the history
// beginning at its end — among those tr holds (planStarts), or that none
// does; and that the readings can be filled in.
func gapStarts(tr *carbon.Series, ge *carbon.GapError, forecast string, deadline time.Duration, what, layout string) string {
	earliest, latest := planStarts(tr, forecast, deadline)
	before, after := ge.Start.Add(-deadline), ge.End.Add(forecastHistory(forecast, tr.Step))
	var opts []string
	if !before.Before(earliest) {
		opts = append(opts, "at or before "+before.UTC().Format(layout))
	}
	if !after.After(latest) {
		opts = append(opts, "at or after "+after.UTC().Format(layout))
	}
	if len(opts) == 0 {
		return "no start clears the gap on this trace; fill in the missing readings"
	}
	return what + " " + strings.Join(opts, ", or ") + ", or fill in the missing readings"
}

// planStarts are the first and last starts whose plans a trace holds:
// every plan covers the start to the deadline, and a forecast other than
// perfect reads the day before the start.
func planStarts(tr *carbon.Series, forecast string, deadline time.Duration) (earliest, latest time.Time) {
	earliest = tr.Start
	if forecast != spec.ForecastPerfect {
		earliest = earliest.Add(24 * time.Hour)
	}
	return earliest, tr.End().Add(-deadline)
}

// savedText says a saving against running now: "12.3% saved", "0.0%
// saved" (not "-0.0%"), or "3.6% more than running now" for a loss.
func savedText(pct float64) string {
	switch {
	case math.Abs(pct) < 0.05:
		return "0.0% saved"
	case pct < 0:
		return fmt.Sprintf("%.1f%% more than running now", -pct)
	}
	return fmt.Sprintf("%.1f%% saved", pct)
}

// gridTooShort explains a job that fits before its deadline but not on the
// trace's grid: plans run on whole trace steps — the start rounded up to
// the next step, the deadline down, the work up to whole steps.
func gridTooShort(series *carbon.Series, start time.Time, work, deadline time.Duration) error {
	step := series.Step
	need := int((work + step - 1) / step)
	from := start.Truncate(step)
	if from.Before(start) {
		from = from.Add(step)
	}
	to := start.Add(deadline).Truncate(step)
	have := max(0, int(to.Sub(from)/step))
	const hm = "2006-01-02T15:04Z"
	return fmt.Errorf("--work %v takes %d whole step(s) of the trace's %v grid, and %d lie between %s (--start, rounded up to the grid) "+
		"and %s (the deadline, rounded down): plans run on whole trace steps; --deadline %v fits", work, need, step, have,
		from.UTC().Format(hm), to.UTC().Format(hm), from.Add(time.Duration(need)*step).Sub(start))
}
