package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/engine/energy"
	"github.com/cann-train/cann-train/spec"
)

// Carbon holds the PlanCarbon activity's dependencies. Traces read from
// files are kept (per path, zone, column and modification time), so a
// re-plan at every chunk boundary does not re-read a year of data.
type Carbon struct {
	// HTTP is the client for provider APIs; nil means http.DefaultClient.
	HTTP *http.Client
	// Getenv reads API tokens; nil means os.Getenv.
	Getenv func(string) string
	// ProviderTimeout bounds one provider request (0: providerTimeout).
	ProviderTimeout time.Duration

	mu     sync.Mutex
	traces map[traceKey]*carbon.Series
	// down are the providers that did not answer lately (by
	// providerKey): not asked again before until.
	down map[string]providerDown
}

// providerDown is a provider that did not answer: why, and until when
// PlanCarbon answers for it without asking.
type providerDown struct {
	err   error
	until time.Time
}

// Provider requests: one is bounded by providerTimeout (a provider answers
// in about a second), and a provider that did not answer (a timeout, a
// 5xx) is not asked again for providerRest: each chunk boundary would
// otherwise wait out the timeout of every attempt of PlanCarbon (three
// of 30 s each, before).
const (
	providerTimeout = 10 * time.Second
	providerRest    = 2 * time.Minute
)

func providerKey(p spec.GreenPolicy) string {
	return p.Provider + "|" + p.ProviderURL + "|" + p.Zone
}

// providerResting is the error to answer with, without asking, for a
// provider that did not answer lately (nil: ask it).
func (c *Carbon) providerResting(p spec.GreenPolicy, now time.Time) error {
	if p.Provider == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.down[providerKey(p)]
	if !ok || !now.Before(d.until) {
		return nil
	}
	return fmt.Errorf("%w (not asked again before %s UTC)", d.err, d.until.UTC().Format("15:04:05"))
}

// noteUnanswered records that p's provider did not answer (err); not
// when the activity itself was cancelled.
func (c *Carbon) noteUnanswered(ctx context.Context, p spec.GreenPolicy, err error) {
	if p.Provider == "" || ctx.Err() != nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down == nil {
		c.down = map[string]providerDown{}
	}
	c.down[providerKey(p)] = providerDown{err: fmt.Errorf("%s did not answer at %s UTC: %w", p.Provider, now.UTC().Format("15:04:05"), err), until: now.Add(providerRest)}
}

type traceKey struct {
	path, zone, column string
	mod                time.Time
}

// PlanCarbon prices the finished chunks in in.Price (energy by the nodes'
// measured joules, else the policy's power model; intensity from the
// signal's actual values) and, when in.Plan is set, plans in.Work of
// training between in.Now and the deadline on the signal's forecast with
// engine/carbon.Plan. Signal and planning problems come back as text in
// the output — the run then trains without waiting — never as a failed
// run; only transient errors (an API timeout) fail the attempt.
func (c *Carbon) PlanCarbon(ctx context.Context, in spec.CarbonInput) (spec.CarbonOutput, error) {
	var out spec.CarbonOutput
	p := in.Policy.WithDefaults()
	if err := c.providerResting(p, time.Now()); err != nil {
		// Answered at once, as a problem the run trains on with (no retry
		// of the activity): the chunks stay unpriced until it answers.
		out.PlanError, out.PriceError = err.Error(), err.Error()
		return out, nil
	}
	sig, err := c.Open(p, in.RunStart)
	if err != nil {
		out.PlanError, out.PriceError = err.Error(), err.Error()
		return out, nil
	}
	if len(in.Price) > 0 {
		priced, err := PriceSegments(ctx, sig, p, in.Price)
		if err != nil {
			if transient(ctx, err) {
				c.noteUnanswered(ctx, p, err)
				return out, err
			}
			out.PriceError = err.Error()
		}
		out.Priced = priced
	}
	trained := make([]spec.Segment, len(in.Trained))
	for i, s := range in.Trained {
		if s.Lost {
			s.Start = s.End // a failed chunk: a break in the run
		}
		trained[i] = s
	}
	if !in.Plan && in.Batch == nil {
		return out, nil
	}
	// The batch controller acts on the intensity the planner prices the
	// present at (the observed present with the online planner), so a
	// decision without a plan (a contiguous run inside its window) plans
	// all the same and keeps only that.
	plan, now, err := PlanWork(ctx, sig, p, in.RunStart, in.Now, in.Work, trained)
	if err != nil {
		if transient(ctx, err) {
			c.noteUnanswered(ctx, p, err)
			return out, err
		}
		out.PlanError = err.Error()
		return out, nil
	}
	out.NowGPerKWh = now
	if in.Plan {
		out.Plan = plan
	}
	if in.Batch != nil && p.Batch != nil {
		d, err := AdjustBatch(*p.Batch, *in.Batch, now)
		if err != nil {
			out.PlanNote = "batch controller: " + err.Error()
		} else {
			out.Batch = &d
			activity.GetLogger(ctx).Info("carbon batch controller", "action", d.Action, "g_per_kwh", now,
				"global_batch", d.GlobalBatch, "learning_rate", d.LearningRate)
		}
	}
	if n, ok := sig.(noter); ok {
		if notes := n.Notes(); len(notes) > 0 {
			out.PlanNote = strings.Join(notes, "; ")
			activity.GetLogger(ctx).Warn("carbon plan made with less than the policy asks", "note", out.PlanNote)
		}
	}
	if in.Plan {
		activity.GetLogger(ctx).Info("carbon plan", "slots", len(plan.Slots), "expected_g_per_kwh", plan.ExpectedGPerKWh,
			"baseline_g_per_kwh", plan.BaselineGPerKWh, "work", plan.Work.D(), "now_g_per_kwh", now)
	}
	return out, nil
}

// AdjustBatch is the batch controller's decision at intensity gPerKWh
// (engine/carbon.AdjustBatch with the policy's threshold and bounds, the
// lower bound raised to the node count, the learning rate scaled from the
// input's base pair when it has one, as TrainingRun applies it).
func AdjustBatch(c spec.BatchControl, cur spec.BatchInput, gPerKWh float64) (spec.BatchDecision, error) {
	pol := carbon.BatchPolicy{Threshold: c.ThresholdG, MinBatch: max(c.Min, cur.Nodes, 1), MaxBatch: c.Max,
		Base: carbon.BatchState{Batch: cur.BaseBatch, LR: cur.BaseLearningRate}}
	next, act, err := carbon.AdjustBatch(gPerKWh, pol, carbon.BatchState{Batch: cur.GlobalBatch, LR: cur.LearningRate})
	if err != nil {
		return spec.BatchDecision{}, err
	}
	return spec.BatchDecision{GlobalBatch: next.Batch, LearningRate: next.LR, Action: act.String(), GPerKWh: gPerKWh}, nil
}

// transient: worth another attempt (a timeout or an HTTP 429/5xx).
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var se *carbon.StatusError
	return errors.As(err, &se) && (se.StatusCode == http.StatusTooManyRequests || se.StatusCode >= 500)
}

// Signal is a policy's source of carbon intensity.
type Signal interface {
	// Forecast is the predicted intensity from the step containing now for
	// about horizon (it may end sooner: planning stays inside it).
	Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*carbon.Series, error)
	// Actual is the measured intensity covering [from, to).
	Actual(ctx context.Context, from, to time.Time) (*carbon.Series, error)
}

// Open returns the signal a policy names: its trace file (shifted so that
// runStart falls on trace_start when that is set) or its provider API.
// With planner online the signal's Forecast is the online policy's prices
// (onlineSignal on a trace, onlineProviderSignal on a provider).
func (c *Carbon) Open(p spec.GreenPolicy, runStart time.Time) (Signal, error) {
	if p.Provider != "" {
		sig, err := c.provider(p)
		if err != nil || p.Planner != spec.PlannerOnline {
			return sig, err
		}
		return &onlineProviderSignal{providerSignal: sig, name: p.Provider, policy: carbon.DefaultOnline(p.Interruptible)}, nil
	}
	tr, err := c.trace(p)
	if err != nil {
		return nil, err
	}
	if ts, ok, err := p.TraceStartTime(); err != nil {
		return nil, fmt.Errorf("green.trace_start: %w", err)
	} else if ok {
		shifted := *tr
		shifted.Start = tr.Start.Add(ShiftFor(tr, runStart, ts))
		tr = &shifted
	}
	var fc carbon.Forecaster = carbon.Persistence{Trace: tr}
	switch p.Forecast {
	case spec.ForecastPerfect:
		fc = carbon.Perfect{Trace: tr}
	case spec.ForecastSeasonal:
		fc = carbon.Seasonal{Trace: tr}
	}
	if p.Planner == spec.PlannerOnline {
		return onlineSignal{traceSignal: traceSignal{trace: tr, fc: fc}, policy: carbon.DefaultOnline(p.Interruptible),
			runStart: runStart, deadline: runStart.Add(p.Deadline.D())}, nil
	}
	return traceSignal{trace: tr, fc: fc}, nil
}

// onlineSignal forecasts with engine/carbon.Online's prices: the observed
// present, and the forecast corrected by coefficients fitted on its own
// errors over the week before the run started (the same at every call).
type onlineSignal struct {
	traceSignal
	policy             carbon.Online
	runStart, deadline time.Time
}

func (o onlineSignal) Forecast(_ context.Context, now time.Time, horizon time.Duration) (*carbon.Series, error) {
	deadline := now.Add(horizon)
	if end := o.trace.End(); deadline.After(end) {
		deadline = end
	}
	em, err := carbon.EstimateErrors(o.trace, o.fc, o.runStart, o.deadline.Sub(o.runStart), o.policy.History, o.policy.Correction)
	if err != nil {
		return nil, err
	}
	return o.policy.Prices(o.trace, o.fc, em, now, deadline)
}

// ShiftFor is how far a trace moves so that runStart falls on the trace
// step containing traceStart: a whole number of steps, so the trace keeps
// its grid (hours stay on the hour). (Counted from that step's start: from
// traceStart itself, a trace_start of 08:30 put half the runs in the 09:00
// step, by the minute they started.)
func ShiftFor(tr *carbon.Series, runStart, traceStart time.Time) time.Duration {
	floor := func(d time.Duration) time.Duration {
		k := d / tr.Step
		if d%tr.Step < 0 {
			k--
		}
		return k * tr.Step
	}
	step := tr.Start.Add(floor(traceStart.Sub(tr.Start))) // the step containing traceStart
	return floor(runStart.Sub(step))
}

func (c *Carbon) trace(p spec.GreenPolicy) (*carbon.Series, error) {
	fi, err := os.Stat(p.Trace)
	if err != nil {
		return nil, fmt.Errorf("green.trace: %w", err)
	}
	key := traceKey{path: p.Trace, zone: p.Zone, column: p.Column, mod: fi.ModTime()}
	c.mu.Lock()
	s, ok := c.traces[key]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	f, err := os.Open(p.Trace)
	if err != nil {
		return nil, fmt.Errorf("green.trace: %w", err)
	}
	defer f.Close()
	s, err = carbon.ReadTrace(f, carbon.TraceOptions{Zone: p.Zone, Column: p.Column})
	if err != nil {
		return nil, fmt.Errorf("green.trace %s: %w", p.Trace, err)
	}
	c.mu.Lock()
	if c.traces == nil {
		c.traces = map[traceKey]*carbon.Series{}
	}
	c.traces[key] = s
	c.mu.Unlock()
	return s, nil
}

type traceSignal struct {
	trace *carbon.Series
	fc    carbon.Forecaster
}

func (t traceSignal) Forecast(_ context.Context, now time.Time, horizon time.Duration) (*carbon.Series, error) {
	// Stay inside the trace: a deadline past its end plans up to the end.
	if end := t.trace.End(); now.Add(horizon).After(end) {
		horizon = end.Sub(now)
	}
	return t.fc.Forecast(now, horizon)
}

func (t traceSignal) Actual(context.Context, time.Time, time.Time) (*carbon.Series, error) {
	return t.trace, nil
}

// historian is what the provider clients offer besides carbon.Provider.
type historian interface {
	carbon.Provider
	History(ctx context.Context, from, to time.Time) (*carbon.Series, error)
}

type providerSignal struct{ p historian }

func (c *Carbon) provider(p spec.GreenPolicy) (providerSignal, error) {
	cl := carbon.Client{BaseURL: p.ProviderURL, HTTP: c.HTTP, Getenv: c.Getenv, Timeout: cmp.Or(c.ProviderTimeout, providerTimeout)}
	switch p.Provider {
	case spec.ProviderElectricityMaps:
		em := &carbon.ElectricityMaps{Client: cl, Zone: p.Zone}
		switch p.Column {
		case "lca":
			em.EmissionFactorType = "lifecycle"
		case "direct":
			em.EmissionFactorType = "direct"
		}
		return providerSignal{em}, nil
	case spec.ProviderCarbonAwareSDK:
		return providerSignal{&carbon.CarbonAwareSDK{Client: cl, Location: p.Zone}}, nil
	case spec.ProviderUK:
		return providerSignal{&carbon.UKCarbonIntensity{Client: cl, Region: p.Zone}}, nil
	}
	return providerSignal{}, fmt.Errorf("green.provider: unknown provider %q", p.Provider)
}

func (s providerSignal) Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*carbon.Series, error) {
	return s.p.Forecast(ctx, now, horizon)
}

// Actual asks the provider for its measurements over at least the last
// observeWindow up to to: a shorter range (a run of a few minutes) holds
// one reading or none, and a series needs two to know its step.
func (s providerSignal) Actual(ctx context.Context, from, to time.Time) (*carbon.Series, error) {
	if early := to.Add(-observeWindow); early.Before(from) {
		from = early
	}
	return s.p.History(ctx, from, to)
}

// measurer is a provider that can read measurements alone (the UK API's
// History fills unmeasured periods with the forecast; Measured does not).
type measurer interface {
	Measured(ctx context.Context, from, to time.Time) (*carbon.Series, error)
}

// Planner online on a live provider: how stale a measurement may stand for
// the present step (in forecast steps), and the shortest window of
// measurements asked for (long enough for two readings on an hourly grid).
const (
	maxObservedAge = 2
	observeWindow  = 3 * time.Hour
)

// onlineProviderSignal is planner online on a provider: at each call the
// step containing now is priced at the provider's latest measurement (its
// History, or Measured, over a short window ending at now; up to
// maxObservedAge steps old), later steps at the provider's own forecast,
// uncorrected: a provider publishes no past forecasts to fit
// engine/carbon.Online's correction on, so its ErrorModel is the zero one
// (no correction, no margin). Planning on these prices is then the online
// decision rule. Without a usable measurement the present is priced at the
// forecast, and Notes says so.
type onlineProviderSignal struct {
	providerSignal
	name   string
	policy carbon.Online

	mu    sync.Mutex
	notes []string
}

func (o *onlineProviderSignal) Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*carbon.Series, error) {
	f, err := o.p.Forecast(ctx, now, horizon)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	// The present step: f's step containing now, or the one before f when
	// f starts at the next step (as the Carbon Aware SDK's does).
	cur := f.Start.Add(ShiftFor(f, now, f.Start))
	from := now.Add(-max(observeWindow, now.Sub(cur)+(maxObservedAge+1)*f.Step))
	read := o.p.History
	if m, ok := o.p.(measurer); ok {
		read = m.Measured
	}
	obs, err := read(ctx, from, now)
	if err == nil {
		var prices *carbon.Series
		var x carbon.Observation
		prices, x, err = o.policy.ObservedPrices(obs, f, carbon.ErrorModel{}, now, now.Add(horizon), maxObservedAge)
		if err == nil {
			if x.Age > 0 {
				o.note(fmt.Sprintf("green.planner online: %s has no measurement of the present step %s yet; priced it at the latest, %s (%d step(s) old, %.4g g/kWh)",
					o.name, cur.UTC().Format(time.RFC3339), x.Start.UTC().Format(time.RFC3339), x.Age, x.Value))
			}
			return prices, nil
		}
		if !errors.Is(err, carbon.ErrNoObservation) {
			return nil, err
		}
	} else if ctx.Err() != nil {
		return nil, fmt.Errorf("%s measurements: %w", o.name, err)
	}
	o.note(fmt.Sprintf("green.planner online: no usable %s measurement of the present (%v); priced the present step at the forecast", o.name, err))
	return f, nil
}

func (o *onlineProviderSignal) note(s string) {
	o.mu.Lock()
	o.notes = append(o.notes, s)
	o.mu.Unlock()
}

// Notes returns and clears what the signal made do without (see noter).
func (o *onlineProviderSignal) Notes() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.notes
	o.notes = nil
	return n
}

// noter is a Signal that can report having planned with less than its
// policy asks (a stale or missing observation), so the activity says so.
type noter interface {
	Notes() []string
}

// runningSince is when the run in progress at now began, from the chunks
// it trained (oldest first): the start of the latest stretch of chunks
// each beginning within slack of the previous one's end, provided the last
// ends within slack of now (zero when the run is not training: it waited,
// paused or has not started). slack is min(2 minutes, half a forecast
// step): a chunk boundary takes seconds, a green pause at least a step.
func runningSince(trained []spec.Segment, now time.Time, step time.Duration) time.Time {
	slack := min(2*time.Minute, step/2)
	n := len(trained)
	if n == 0 {
		return time.Time{}
	}
	last := trained[n-1]
	if d := now.Sub(last.End); d > slack || d < -slack || !last.Start.Before(last.End) {
		return time.Time{}
	}
	from := last.Start
	for i := n - 2; i >= 0; i-- {
		s := trained[i]
		if !s.Start.Before(s.End) || from.Sub(s.End) > slack {
			break
		}
		if s.Start.Before(from) {
			from = s.Start
		}
	}
	return from
}

// PlanWork places work of training from now until the policy's deadline
// (runStart + deadline, cut to the end of the forecast) on sig's forecast.
// The step containing now counts as available, so a run inside a slot is
// not sent to wait for the next step. Zero work means one forecast step.
// It also returns the forecast intensity now.
//
// trained are the run's latest trained segments, oldest first
// (spec.CarbonInput.Trained). When they show it training up to now, the plan continues
// that run (engine/carbon.Job.Running): it keeps an interruptible run
// going until the run has lasted min_slot, and never pauses it with less
// than min_slot of work left, so every slot lasts min_slot, the last one
// included; a contiguous run goes on to its end. A run counts the whole
// steps it trained before the step containing now.
func PlanWork(ctx context.Context, sig Signal, p spec.GreenPolicy, runStart, now time.Time, work time.Duration, trained []spec.Segment) (*spec.CarbonPlan, float64, error) {
	deadline := runStart.Add(p.Deadline.D())
	if !now.Before(deadline) {
		return nil, 0, fmt.Errorf("the green deadline %s has passed", deadline.UTC().Format(time.RFC3339))
	}
	f, err := sig.Forecast(ctx, now, deadline.Sub(now))
	if err != nil {
		return nil, 0, fmt.Errorf("forecast: %w", err)
	}
	if err := f.Validate(); err != nil {
		return nil, 0, fmt.Errorf("forecast: %w", err)
	}
	start := f.Start
	if now.After(start) {
		start = start.Add(now.Sub(f.Start) / f.Step * f.Step)
	}
	if work <= 0 {
		work = f.Step
	}
	if end := f.End(); deadline.After(end) {
		deadline = end
	}
	job := carbon.Job{Work: work, Start: start, Deadline: deadline, Interruptible: p.Interruptible, MinSlot: p.MinSlot.D()}
	if from := runningSince(trained, now, f.Step); !from.IsZero() {
		// Its whole steps before start (a chunk boundary's seconds of
		// delay forgiven); a run begun within this step is running too.
		job.Running = max(start.Sub(from)+min(2*time.Minute, f.Step/2), time.Nanosecond)
	}
	sc, err := carbon.Plan(f, job)
	if err != nil {
		return nil, 0, err
	}
	plan := &spec.CarbonPlan{MadeAt: now, Work: spec.Duration(work), Deadline: deadline, Step: spec.Duration(f.Step),
		ExpectedGPerKWh: sc.ExpectedGPerKWh, BaselineGPerKWh: sc.BaselineGPerKWh, Source: p.Source()}
	for _, s := range sc.Slots {
		plan.Slots = append(plan.Slots, spec.CarbonSlot{Start: s.Start, End: s.End, GPerKWh: s.MeanIntensity})
	}
	nowCI, _ := f.At(now)
	return plan, nowCI, nil
}

// SegmentIntervals turns trained segments into energy intervals: the
// nodes' measured joules when they reported them, otherwise the policy's
// power model (node_watts × nodes × PUE) read by an energy.ModelMeter over
// the segment's chunk time. Intervals are ordered and disjoint (a segment
// overlapping its predecessor by clock skew is clipped).
func SegmentIntervals(ctx context.Context, p spec.GreenPolicy, segs []spec.Segment) ([]energy.Interval, error) {
	p = p.WithDefaults()
	out := make([]energy.Interval, 0, len(segs))
	for i, s := range segs {
		iv := energy.Interval{Start: s.Start, End: s.End, Joules: s.Joules}
		if n := len(out); n > 0 && iv.Start.Before(out[n-1].End) {
			iv.Start = out[n-1].End
		}
		if !iv.Start.Before(iv.End) {
			continue
		}
		if iv.Joules <= 0 {
			m := &energy.ModelMeter{Model: energy.Model{Devices: max(1, s.Nodes), BusyW: p.NodeWatts, PUE: p.PUE}}
			if _, err := m.Joules(ctx, s.Start); err != nil {
				return nil, fmt.Errorf("segment %d: %w", i, err)
			}
			busy := time.Duration(s.WallSeconds * float64(time.Second))
			if busy <= 0 || busy > s.End.Sub(s.Start) {
				busy = s.End.Sub(s.Start)
			}
			j, err := m.Joules(ctx, s.Start.Add(busy))
			if err != nil {
				return nil, fmt.Errorf("segment %d: %w", i, err)
			}
			iv.Joules = j
		}
		out = append(out, iv)
	}
	return out, nil
}

// PriceSegments prices each segment on the signal's actual intensity:
// energy as SegmentIntervals gives it, CO2 = kWh × the time-weighted mean
// intensity over the segment. The result has one entry per segment.
func PriceSegments(ctx context.Context, sig Signal, p spec.GreenPolicy, segs []spec.Segment) ([]spec.PricedSegment, error) {
	out := make([]spec.PricedSegment, len(segs))
	if len(segs) == 0 {
		return out, nil
	}
	from, to := segs[0].Start, segs[0].End
	for _, s := range segs[1:] {
		if s.Start.Before(from) {
			from = s.Start
		}
		if s.End.After(to) {
			to = s.End
		}
	}
	actual, err := sig.Actual(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("actual intensity: %w", err)
	}
	for i, s := range segs {
		ivs, err := SegmentIntervals(ctx, p, []spec.Segment{s})
		if err != nil {
			return nil, err
		}
		if len(ivs) == 0 {
			continue
		}
		rep, err := energy.Account(actual, ivs, time.Time{})
		if err != nil {
			return nil, fmt.Errorf("price chunk %d–%d: %w", s.FromStep, s.ToStep, err)
		}
		out[i] = spec.PricedSegment{KWh: rep.KWh, GPerKWh: rep.GPerKWh, Grams: rep.Grams, Measured: s.Joules > 0}
	}
	return out, nil
}
