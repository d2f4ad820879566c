package spec

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Green-policy values.
const (
	// ForecastPersistence forecasts each step with the value a day earlier.
	ForecastPersistence = "persistence"
	// ForecastPerfect uses the trace itself (clairvoyant; for studies).
	ForecastPerfect = "perfect"
	// ForecastSeasonal forecasts each step with its time of day's mean over
	// the last week plus the current anomaly, decaying by the hour.
	ForecastSeasonal = "seasonal"

	// PlannerReplan plans the remaining work on the forecast at every
	// chunk boundary; PlannerOnline (the default: better than re-planning
	// in every zone and job kind of the savings report) plans it on prices that
	// take the observed present and the forecast corrected by its own
	// past errors (engine/carbon.Online). On a trace file the correction
	// is fitted on the trace's past; on a provider the present is the
	// provider's latest measurement and the future its own forecast,
	// uncorrected (providers publish no past forecasts to fit on).
	PlannerReplan = "replan"
	PlannerOnline = "online"

	// ProviderElectricityMaps, ProviderCarbonAwareSDK and ProviderUK name
	// the carbon-signal APIs a policy may read instead of a trace file.
	ProviderElectricityMaps = "electricitymaps"
	ProviderCarbonAwareSDK  = "carbon-aware-sdk"
	ProviderUK              = "uk"
)

// GreenPolicy makes a run carbon-aware: before each chunk the run plans its
// remaining work on a carbon-intensity forecast and, outside the chosen
// slots, waits on a durable timer for the next one. The intensity comes
// from a trace file (read by the control worker) or a provider API.
type GreenPolicy struct {
	// Trace is a carbon-intensity trace on the control worker: a CSV
	// (Electricity Maps export or "time,<zone>…") or a saved API answer
	// (Electricity Maps history or forecast, UK Carbon Intensity national
	// or regional, Carbon Aware SDK emissions or forecasts; see
	// carbon.ReadTrace); exclusive with Provider.
	Trace string `yaml:"trace" json:"trace,omitempty"`
	// Zone selects the trace's zone (Electricity Maps "Zone Id", the
	// column of a plain CSV, a UK region's short name or id, a Carbon
	// Aware SDK location), the Electricity Maps zone, the Carbon Aware
	// SDK location, or the uk provider's region (an id 1–17 or a
	// postcode's outward code; empty: national).
	Zone string `yaml:"zone" json:"zone,omitempty"`
	// Column picks the Electricity Maps export column: direct (default) or lca.
	Column string `yaml:"column" json:"column,omitempty"`
	// TraceStart replays a historical trace: the run's start is mapped to
	// this trace time (RFC 3339; whole trace steps), so a run today follows
	// the grid of that day. Empty: trace times are real times.
	TraceStart string `yaml:"trace_start" json:"trace_start,omitempty"`
	// Provider reads a live API instead of a trace: electricitymaps,
	// carbon-aware-sdk or uk.
	Provider string `yaml:"provider" json:"provider,omitempty"`
	// ProviderURL overrides the provider's base URL (required for the
	// Carbon Aware SDK, which has no public deployment).
	ProviderURL string `yaml:"provider_url" json:"provider_url,omitempty"`
	// Forecast is how a trace is forecast: persistence (default),
	// seasonal or perfect.
	Forecast string `yaml:"forecast" json:"forecast,omitempty"`
	// Planner is online (default) or replan (see PlannerOnline).
	Planner string `yaml:"planner" json:"planner,omitempty"`
	// Deadline, from the run's start, by which training must be done.
	// Unset (or 0, which the job file's decoding cannot tell from unset:
	// both decode to a zero Duration before the defaults are applied)
	// means 48h.
	Deadline Duration `yaml:"deadline" json:"deadline,omitempty"`
	// Interruptible runs may train in several slots; otherwise in one
	// contiguous window.
	Interruptible bool `yaml:"interruptible" json:"interruptible,omitempty"`
	// MinSlot is the shortest slot of an interruptible run.
	MinSlot Duration `yaml:"min_slot" json:"min_slot,omitempty"`
	// Work estimates the whole run's training time; the plan uses it until
	// the first chunk has measured the real pace. Zero: one forecast step.
	Work Duration `yaml:"work" json:"work,omitempty"`
	// BudgetG is an optional carbon budget in gCO2eq; the run alerts once
	// at 95 % of it (log, memo, status).
	BudgetG float64 `yaml:"budget_g" json:"budget_g,omitempty"`
	// NodeWatts is the modelled power of one busy node, used when no
	// measured energy is reported. Default 300 W.
	NodeWatts float64 `yaml:"node_watts" json:"node_watts,omitempty"`
	// PUE is the facility overhead factor (≥ 1). Default 1.
	PUE float64 `yaml:"pue" json:"pue,omitempty"`
	// Batch turns on the carbon-aware batch controller (built-in runs).
	Batch *BatchControl `yaml:"batch" json:"batch,omitempty"`
}

// BatchControl is the carbon-aware batch controller: at every chunk
// boundary where the present intensity is known, a run whose grid is
// dirtier than 1.3 × ThresholdG trains on with 0.75 × its global batch,
// one cleaner than 0.7 × ThresholdG with 1.25 × (rounded up), within
// [Min, Max] and never below the node count; the learning rate scales
// with the batch (linear scaling rule). Each change takes effect at the
// next chunk's first step and is recorded in the run's batch schedule, so
// recoveries and replays train the same batches.
type BatchControl struct {
	// ThresholdG is the reference intensity in gCO2eq/kWh (required).
	ThresholdG float64 `yaml:"threshold_g" json:"threshold_g"`
	// Min and Max bound the global batch; defaults: half and twice the
	// run's global batch (batch_per_rank × nodes).
	Min int `yaml:"min" json:"min,omitempty"`
	Max int `yaml:"max" json:"max,omitempty"`
}

// MNISTTrainExamples is the size of the built-in model's training set: no
// global batch may exceed it.
const MNISTTrainExamples = 60000

// validate checks the batch controller of a run whose global batch
// is global on nodes nodes (after defaults).
func (c *BatchControl) validate(global, ranks int, bad func(field, format string, args ...any)) {
	if !(c.ThresholdG > 0 && c.ThresholdG < 1e6) {
		bad("green.batch.threshold_g", "required: the reference intensity in g/kWh, e.g. 200 (got %g)", c.ThresholdG)
	}
	if c.Min < ranks {
		bad("green.batch.min", "%d is below the rank count %d (nodes × ranks_per_node): every rank needs an example per step", c.Min, ranks)
	}
	if c.Max < c.Min || c.Max > MNISTTrainExamples {
		bad("green.batch.max", "%d out of range min (%d)..%d (the training set)", c.Max, c.Min, MNISTTrainExamples)
	}
	if global < c.Min || global > c.Max {
		bad("green.batch", "the run's global batch %d (batch_per_rank × nodes × ranks_per_node) is outside [min %d, max %d]", global, c.Min, c.Max)
	}
}

// BatchChange is one change of the global batch and the learning rate
// from a step on (the controller's decisions, in step order).
type BatchChange struct {
	FromStep     int64   `json:"from_step"`
	GlobalBatch  int     `json:"global_batch"`
	LearningRate float64 `json:"learning_rate"`
}

// BatchInput asks PlanCarbon for the controller's decision: the batch and
// learning rate in force, the rank count (Nodes: nodes × ranks per node,
// the smallest batch allowed), and
// the spec's pair that the learning rate scales from (zero in histories
// before it existed: the rate in force is scaled instead).
type BatchInput struct {
	GlobalBatch      int     `json:"global_batch"`
	LearningRate     float64 `json:"learning_rate"`
	Nodes            int     `json:"nodes"`
	BaseBatch        int     `json:"base_batch,omitempty"`
	BaseLearningRate float64 `json:"base_learning_rate,omitempty"`
}

// BatchDecision is the controller's answer: the batch and learning rate
// for the next chunk, the action ("shrink", "grow" or "hold") and the
// intensity it acted on.
type BatchDecision struct {
	GlobalBatch  int     `json:"global_batch"`
	LearningRate float64 `json:"learning_rate"`
	Action       string  `json:"action"`
	GPerKWh      float64 `json:"g_per_kwh"`
}

// WithDefaults fills the unset fields.
func (g GreenPolicy) WithDefaults() GreenPolicy {
	if g.Forecast == "" {
		g.Forecast = ForecastPersistence
	}
	if g.Planner == "" {
		g.Planner = PlannerOnline
	}
	if g.Deadline == 0 {
		g.Deadline = Duration(48 * time.Hour)
	}
	if g.NodeWatts == 0 {
		g.NodeWatts = 300
	}
	if g.PUE == 0 {
		g.PUE = 1
	}
	return g
}

// TraceStartTime parses TraceStart; ok is false when it is empty.
func (g GreenPolicy) TraceStartTime() (t time.Time, ok bool, err error) {
	if g.TraceStart == "" {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339, g.TraceStart)
	return t.UTC(), err == nil, err
}

// Source names where the intensity comes from, for people.
func (g GreenPolicy) Source() string {
	if g.Provider != "" {
		s := g.Provider
		if g.Zone != "" {
			s += " " + g.Zone
		}
		if g.Planner == PlannerOnline {
			s += ", online planner"
		}
		return s
	}
	s := g.Trace
	if g.Zone != "" {
		s += " (" + g.Zone + ")"
	}
	if g.TraceStart != "" {
		s += " replayed from " + g.TraceStart
	}
	s += ", " + g.Forecast + " forecast"
	if g.Planner == PlannerOnline {
		s += ", online planner"
	}
	return s
}

// ukRegion is a UK Carbon Intensity API region: its id (1–17) or a
// postcode's outward code.
var ukRegion = regexp.MustCompile(`^(?:[1-9]|1[0-7]|[A-Za-z]{1,2}[0-9][A-Za-z0-9]?)$`)

// validate appends the policy's problems, with fields under "green.".
func (g GreenPolicy) validate(bad func(field, format string, args ...any)) {
	switch {
	case g.Trace == "" && g.Provider == "":
		bad("green", "needs a trace file (green.trace) or a provider (green.provider)")
	case g.Trace != "" && g.Provider != "":
		bad("green.provider", "give either green.trace or green.provider, not both")
	}
	switch g.Provider {
	case "":
	case ProviderUK:
		if g.Zone != "" && !ukRegion.MatchString(g.Zone) {
			bad("green.zone", "uk: %q is neither a region id (1–17) nor a postcode's outward code such as RG10; leave it empty for national data", g.Zone)
		}
	case ProviderElectricityMaps:
		if g.Zone == "" {
			bad("green.zone", "electricitymaps needs a zone, e.g. DE")
		}
	case ProviderCarbonAwareSDK:
		if g.Zone == "" || g.ProviderURL == "" {
			bad("green.provider_url", "carbon-aware-sdk needs a location (green.zone) and its WebAPI URL (green.provider_url)")
		}
	default:
		bad("green.provider", "unknown provider %q (known: %s, %s, %s)", g.Provider, ProviderElectricityMaps, ProviderCarbonAwareSDK, ProviderUK)
	}
	if g.ProviderURL != "" && !strings.Contains(g.ProviderURL, "://") {
		bad("green.provider_url", "%q is not a URL", g.ProviderURL)
	}
	if g.Forecast != ForecastPersistence && g.Forecast != ForecastPerfect && g.Forecast != ForecastSeasonal {
		bad("green.forecast", "unknown forecast %q (known: %s, %s, %s)", g.Forecast, ForecastPersistence, ForecastSeasonal, ForecastPerfect)
	}
	switch g.Planner {
	case "", PlannerReplan:
	case PlannerOnline:
		if g.Trace == "" && g.Provider == "" {
			bad("green.planner", "online needs a trace file (green.trace) or a provider (green.provider) to observe the present intensity")
		}
	default:
		bad("green.planner", "unknown planner %q (known: %s, %s)", g.Planner, PlannerReplan, PlannerOnline)
	}
	if g.TraceStart != "" {
		if g.Trace == "" {
			bad("green.trace_start", "only a trace file can be replayed")
		} else if _, _, err := g.TraceStartTime(); err != nil {
			bad("green.trace_start", "%q: want RFC 3339, e.g. 2022-03-01T08:00:00Z", g.TraceStart)
		}
	}
	durations := []struct {
		field string
		d     Duration
	}{{"green.deadline", g.Deadline}, {"green.min_slot", g.MinSlot}, {"green.work", g.Work}}
	for _, d := range durations {
		if d.d < 0 {
			bad(d.field, "not a duration: want e.g. 4h or 90m")
		}
	}
	if g.Deadline == 0 {
		bad("green.deadline", "must be positive")
	}
	switch {
	case g.Deadline > 0 && g.MinSlot > g.Deadline:
		bad("green.min_slot", "%s is longer than the deadline %s", g.MinSlot.D(), g.Deadline.D())
	case g.MinSlot > 0 && !g.Interruptible:
		// As green plan refuses --min-slot without --interruptible: a
		// contiguous run trains in one slot, and min_slot would be
		// silently ignored.
		bad("green.min_slot", "%s is the shortest slot of an interruptible run: add interruptible: true "+
			"(without it the run trains in one slot of its work)", g.MinSlot.D())
	}
	if g.BudgetG < 0 {
		bad("green.budget_g", "must not be negative, got %g", g.BudgetG)
	}
	if !(g.NodeWatts > 0 && g.NodeWatts < 1e6) {
		bad("green.node_watts", "%g out of range (0, 1e6)", g.NodeWatts)
	}
	if !(g.PUE >= 1 && g.PUE < 10) {
		bad("green.pue", "%g out of range [1, 10)", g.PUE)
	}
}

// CarbonSlot is one planned slot of training.
type CarbonSlot struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	GPerKWh float64   `json:"g_per_kwh"` // forecast mean intensity
}

// Label is how a slot reads in the Web UI and the CLI, e.g.
// "green window 14:00–18:00 UTC, 120 g/kWh"; the date is added when the
// slot is not on now's day.
func (s CarbonSlot) Label(now time.Time) string {
	const day = "2006-01-02"
	a, b := s.Start.UTC(), s.End.UTC()
	clock := "15:04"
	if a.Second() != 0 || b.Second() != 0 { // traces finer than a minute
		clock = "15:04:05"
	}
	oneDay := b.Add(-time.Nanosecond).Format(day) == a.Format(day)
	var when string
	switch {
	case oneDay && a.Format(day) == now.UTC().Format(day):
		when = a.Format(clock) + "–" + b.Format(clock)
	case oneDay:
		when = a.Format(day+" "+clock) + "–" + b.Format(clock)
	default:
		when = a.Format(day+" "+clock) + "–" + b.Format(day+" "+clock)
	}
	return fmt.Sprintf("green window %s UTC, %.0f g/kWh", when, s.GPerKWh)
}

// CarbonPlan is the placement of a run's remaining work.
type CarbonPlan struct {
	MadeAt   time.Time    `json:"made_at"`
	Work     Duration     `json:"work"` // remaining training time planned
	Deadline time.Time    `json:"deadline"`
	Slots    []CarbonSlot `json:"slots"`
	// Step is the signal's time step (its forecast's grid): a run waiting
	// for a slot decides again every step (0: from a build before it).
	Step Duration `json:"step,omitempty"`
	// ExpectedGPerKWh is the slots' mean forecast intensity;
	// BaselineGPerKWh that of running the same work now.
	ExpectedGPerKWh float64 `json:"expected_g_per_kwh"`
	BaselineGPerKWh float64 `json:"baseline_g_per_kwh"`
	Source          string  `json:"source"`
}

// Segment is a stretch of chunks trained back to back on one membership:
// what energy accounting prices. WallSeconds sums the chunks' durations;
// Joules is measured energy when nodes report it (0: modelled).
type Segment struct {
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Nodes       int       `json:"nodes"`
	Generation  int64     `json:"generation"`
	FromStep    int64     `json:"from_step"`
	ToStep      int64     `json:"to_step"`
	WallSeconds float64   `json:"wall_s"`
	Joules      float64   `json:"joules,omitempty"`
	Chunks      int       `json:"chunks"`
	// Lost: a chunk that failed (a node lost in it) and was rewound: its
	// energy was spent all the same (modelled: the nodes report none from
	// a failed chunk); FromStep–ToStep are the steps it reached, trained
	// again later. Such a segment is never merged with others.
	Lost bool `json:"lost,omitempty"`
}

// PricedSegment is a segment's energy and emissions.
type PricedSegment struct {
	KWh      float64 `json:"kwh"`
	GPerKWh  float64 `json:"g_per_kwh"`
	Grams    float64 `json:"grams"`
	Measured bool    `json:"measured,omitempty"`
}

// CarbonInput asks the PlanCarbon activity to price finished chunks and,
// when Plan is set, to plan Work of training from Now.
type CarbonInput struct {
	Policy   GreenPolicy   `json:"policy"`
	RunStart time.Time     `json:"run_start"`
	Now      time.Time     `json:"now"`
	Plan     bool          `json:"plan"`
	Work     time.Duration `json:"work"`
	Price    []Segment     `json:"price,omitempty"`
	// Trained are the run's latest trained segments, oldest first (those
	// ending within its min_slot and an hour of now): a re-plan continues
	// the run in progress, if they show it training up to now, until it
	// has lasted min_slot. (Empty from runs before it: the re-plan then
	// knows of no run in progress.)
	Trained []Segment `json:"trained,omitempty"`
	// Batch, with a plan and a batch controller, asks for its decision.
	Batch *BatchInput `json:"batch,omitempty"`
}

// CarbonOutput is PlanCarbon's answer. Problems reading the signal or
// planning come back as text (the run then trains without waiting) rather
// than failing the run.
type CarbonOutput struct {
	Plan      *CarbonPlan `json:"plan,omitempty"`
	PlanError string      `json:"plan_error,omitempty"`
	// PlanNote says what the plan made do without, when it was made
	// with less than the policy asks (planner online on a provider with no
	// measurement of the present step: a stale one or the forecast stood
	// for it). The plan stands.
	PlanNote   string          `json:"plan_note,omitempty"`
	NowGPerKWh float64         `json:"now_g_per_kwh"`
	Priced     []PricedSegment `json:"priced,omitempty"`
	PriceError string          `json:"price_error,omitempty"`
	// Batch is the batch controller's decision (nil: none asked, or no
	// present intensity to act on).
	Batch *BatchDecision `json:"batch,omitempty"`
}

// GreenStatus is the carbon side of a run's status.
type GreenStatus struct {
	Policy GreenPolicy `json:"policy"`
	Plan   *CarbonPlan `json:"plan,omitempty"`
	// Note is the last planning problem (the run trained on), or what the
	// plan made do without; PriceNote why the last chunks are not priced
	// (empty once they are). (Before PriceNote, Note held both.)
	Note      string `json:"note,omitempty"`
	PriceNote string `json:"price_note,omitempty"`
	// Overridden: the policy is ignored (green-override), until
	// OverrideUntil or, when that is zero, for good.
	Overridden    bool      `json:"overridden,omitempty"`
	OverrideUntil time.Time `json:"override_until,omitzero"`
	Waits         int       `json:"waits"`
	WaitedSeconds float64   `json:"waited_s"`
	// WaitingSince is when the wait in progress began (zero: none);
	// WaitedSeconds adds it only when it ends.
	WaitingSince time.Time `json:"waiting_since,omitzero"`
	NowGPerKWh   float64   `json:"now_g_per_kwh"`
	// KWh and Grams sum the priced chunks; GPerKWh = Grams / KWh.
	KWh            float64 `json:"kwh"`
	Grams          float64 `json:"grams"`
	GPerKWh        float64 `json:"g_per_kwh"`
	BudgetG        float64 `json:"budget_g,omitempty"`
	BudgetUsedPct  float64 `json:"budget_used_pct,omitempty"`
	BudgetAlert    bool    `json:"budget_alert,omitempty"`
	BudgetExceeded bool    `json:"budget_exceeded,omitempty"`
	// Started: a non-interruptible run has entered its window and runs on.
	Started bool `json:"started,omitempty"`
	// With a batch controller: the global batch and learning rate in
	// force, the last decision, and the schedule of changes so far (the
	// run's record: every chunk trains under it).
	Batch        int           `json:"batch,omitempty"`
	LearningRate float64       `json:"learning_rate,omitempty"`
	BatchAction  string        `json:"batch_action,omitempty"`
	Schedule     []BatchChange `json:"schedule,omitempty"`
}

// Waited is the seconds the run has waited for green windows up to now,
// the wait in progress included.
func (g *GreenStatus) Waited(now time.Time) float64 {
	w := g.WaitedSeconds
	if !g.WaitingSince.IsZero() && now.After(g.WaitingSince) {
		w += now.Sub(g.WaitingSince).Seconds()
	}
	return w
}

// BudgetAlertFraction is the share of the carbon budget that raises the alert.
const BudgetAlertFraction = 0.95

// Rescale is the SignalRescale payload: the node count to train on from
// the next chunk boundary.
type Rescale struct {
	Nodes int `json:"nodes"`
}

// GreenOverride is the SignalGreenOverride payload: ignore the green policy
// until Until (zero: for good); Clear restores it.
type GreenOverride struct {
	Until time.Time `json:"until,omitzero"`
	Clear bool      `json:"clear,omitempty"`
}

// Rescaling records one applied change of the node count.
type Rescaling struct {
	Generation int64     `json:"generation"`
	AtStep     int64     `json:"at_step"`
	FromNodes  int       `json:"from_nodes"`
	ToNodes    int       `json:"to_nodes"`
	Added      []string  `json:"added,omitempty"`
	Removed    []string  `json:"removed,omitempty"`
	At         time.Time `json:"at"`
	// ResumeStep is the checkpoint step the new membership starts from.
	ResumeStep int64 `json:"resume_step"`
	// Error: the Cluster could not fill the request; the run trained on
	// with its nodes.
	Error string `json:"error,omitempty"`
	// Reason says why the membership changed when no rescale asked for
	// it, e.g. "node-2 drained: swap the disk" (empty: a rescale).
	Reason string `json:"reason,omitempty"`
	// Regrow: the run took free nodes back after it had gone on with
	// fewer (RunStatus.TargetNodes).
	Regrow bool `json:"regrow,omitempty"`
}
