package carbon

import (
	"fmt"
	"math"
	"time"
)

// Online decision policy.
//
// A run that re-decides at every step (as TrainingRun does at chunk
// boundaries) knows more than its forecaster: providers report the current
// intensity, and the forecaster's own past errors say how far to trust it.
// [Online] uses both, without ever reading past the present:
//
//  1. The present is observed: the step containing the decision time is
//     priced at its observed value x(a) (a is the anchor, the present step
//     minus [Online.Lag]).
//  2. The forecast is bias-corrected: with e = x(a) − f(a) the forecast's
//     error right now, step a+h is priced f(a+h) + β(h)·e, where β(h) is
//     the least-squares coefficient of the forecaster's error h steps ahead
//     on its error at issue time, over the forecasts it issued in the
//     [Online.History] before the job start (β(0) = 1; no fitted decay: the
//     decay is whatever the grid's own error persistence is). With
//     [CorrectLinear] (the default) the price is the least-squares linear
//     predictor from f(a+h), x(a) and f(a) instead (see [Correction]).
//  3. Future steps carry a risk margin: + z·σ(h), σ(h) the RMS of the
//     corrected forecast's past errors at horizon h, z = [Online.Margin].
//     The cheapest windows of a noisy forecast are biased low (the minimum
//     of noisy estimates is optimistic), so waiting for them must promise
//     more than the noise.
//
// The remaining work is then planned with [Plan] on these prices (so the
// deadline and MinSlot rules are Plan's): an interruptible job runs now iff
// the observed present is among the cheapest steps of the remaining horizon
// (with one-step slots: iff x(now) ≤ the k-th cheapest price ahead, k the
// remaining work — the threshold rule of Let's Wait Awhile); a contiguous
// job starts now iff the window starting now is priced no higher than every
// later window (the present observed, the rest corrected, later windows
// with the margin). The deadline forces the rest: Plan never places work
// past it, and when the slack is gone the only plan starts now.
type Online struct {
	// Margin is z, the risk margin in RMS errors σ(h); 0 trusts the
	// corrected forecast as is. [DefaultOnline] gives the cross-validated
	// value.
	Margin float64
	// Correction is how the observed present corrects the forecast.
	Correction Correction
	// History is how far back the error model looks (default
	// [DefaultErrorHistory], one weekly cycle).
	History time.Duration
	// Lag is the age of the latest observation: 0 means the provider's
	// current reading is the value of the step in progress (Electricity
	// Maps "latest", the UK API's current period); one step means only
	// finished steps are known. Rounded up to whole steps.
	Lag time.Duration
}

// DefaultErrorHistory is the default [Online.History]: one week, so the
// error model sees every day of the week once.
const DefaultErrorHistory = 7 * 24 * time.Hour

// DefaultOnline is the policy chosen by cross-validation on the first
// half (in time) of each real trace in shared/data/carbon, one choice per
// job kind shared by all zones, among both corrections and margins z in
// {−1, −0.5, −0.25, 0, 0.25, 0.5, 1} (TestSavingsReport re-runs the
// selection and reports the held-out second half): the linear correction,
// z = −0.25 for contiguous jobs (a slightly optimistic price for later
// windows: the job will see them before it commits) and z = 0 for
// interruptible ones.
func DefaultOnline(interruptible bool) Online {
	if interruptible {
		return Online{Correction: CorrectLinear}
	}
	return Online{Correction: CorrectLinear, Margin: -0.25}
}

// Correction is how [Online] corrects the forecast with the observed
// present, from the forecaster's past errors (least squares over the
// [Online.History], per horizon h):
//
//   - [CorrectBias]: f(a+h) + β(h)·e, e = x(a) − f(a) the error now;
//   - [CorrectLinear]: c(h) + α(h)·f(a+h) + β(h)·x(a) + γ(h)·f(a), the
//     best linear predictor from the forecast, the present and the
//     forecast of the present (CorrectBias is α = 1, γ = −β, c = 0).
type Correction int

const (
	// CorrectBias adds the error now, scaled per horizon.
	CorrectBias Correction = iota
	// CorrectLinear regresses on the forecast and the observed present.
	CorrectLinear
)

func (c Correction) String() string {
	if c == CorrectLinear {
		return "linear"
	}
	return "bias"
}

// ErrorModel is a forecaster's error structure at one anchor, estimated
// from its past forecasts. Step anchor+h is priced
// Coef[h][0] + Coef[h][1]·f(anchor+h) + Coef[h][2]·x(anchor) + Coef[h][3]·f(anchor)
// (x observed, f forecast at the anchor); Sigma[h] is the RMS error of that
// price over the history. Horizon 0 is the observed present (Sigma 0).
// Samples is the number of past forecasts used. The zero ErrorModel (no
// history) prices every future step at the forecast itself, without
// margin.
type ErrorModel struct {
	Step    time.Duration
	Coef    [][4]float64
	Sigma   []float64
	Samples int
}

// price is the corrected price of step anchor+h and its RMS error.
func (m ErrorModel) price(h int, fh, xa, fa float64) (float64, float64) {
	switch {
	case h == 0:
		return xa, 0
	case len(m.Coef) == 0:
		return fh, 0
	}
	h = min(h, len(m.Coef)-1)
	c := m.Coef[h]
	return c[0] + c[1]*fh + c[2]*xa + c[3]*fa, m.Sigma[h]
}

// EstimateErrors estimates fc's ErrorModel on the observed trace obs, for
// horizons 0..horizon (in steps of obs) ahead of anchor, from the forecasts
// fc issued at each step s of the history before anchor and the observed
// values of the steps s+h ≤ anchor only: nothing after anchor is read.
// Forecasts fc cannot issue (not enough history) are skipped; with none,
// the zero ErrorModel is returned. Horizons without samples reuse the
// longest estimated one. history ≤ 0 means [DefaultErrorHistory].
func EstimateErrors(obs *Series, fc Forecaster, anchor time.Time, horizon, history time.Duration, corr Correction) (ErrorModel, error) {
	if err := obs.Validate(); err != nil {
		return ErrorModel{}, fmt.Errorf("error model: %w", err)
	}
	if history <= 0 {
		history = DefaultErrorHistory
	}
	step := obs.Step
	a := obs.floorIndex(anchor)
	H := int((horizon + step - 1) / step)
	if H < 1 || a < 0 || a >= len(obs.Values) {
		return ErrorModel{}, nil
	}
	type past struct {
		s int
		f []float64
	}
	var hist []past
	for s := max(0, a-int(history/step)); s < a; s++ {
		hMax := min(H, a-s)
		f, err := fc.Forecast(obs.TimeAt(s), time.Duration(hMax+1)*step)
		if err != nil || f.Step != step || !f.Start.Equal(obs.TimeAt(s)) || len(f.Values) < hMax+1 {
			continue // not enough history yet, or a forecast on another grid
		}
		hist = append(hist, past{s, f.Values[:hMax+1]})
	}
	if len(hist) == 0 {
		return ErrorModel{}, nil
	}
	m := ErrorModel{Step: step, Coef: make([][4]float64, H+1), Sigma: make([]float64, H+1), Samples: len(hist)}
	m.Coef[0] = [4]float64{0, 0, 1, 0}
	for h := 1; h <= H; h++ {
		var c [4]float64
		n := 0
		switch corr {
		case CorrectLinear:
			var xtx [4][4]float64
			var xty [4]float64
			for _, p := range hist {
				if len(p.f) <= h {
					continue
				}
				row := [4]float64{1, p.f[h], obs.Values[p.s], p.f[0]}
				y := obs.Values[p.s+h]
				for i := range 4 {
					for j := range 4 {
						xtx[i][j] += row[i] * row[j]
					}
					xty[i] += row[i] * y
				}
				n++
			}
			if n > 0 {
				c = solve4(xtx, xty)
			}
		default:
			var sxx, sxy float64
			for _, p := range hist {
				if len(p.f) <= h {
					continue
				}
				e0, eh := obs.Values[p.s]-p.f[0], obs.Values[p.s+h]-p.f[h]
				sxx += e0 * e0
				sxy += e0 * eh
				n++
			}
			beta := 0.0
			if sxx > 0 {
				beta = sxy / sxx
			}
			c = [4]float64{0, 1, beta, -beta}
		}
		if n == 0 {
			m.Coef[h], m.Sigma[h] = m.Coef[h-1], m.Sigma[h-1]
			continue
		}
		if n < minFitSamples {
			// Too little history to fit on (a run near its trace's
			// start): the forecast as it is.
			c = [4]float64{0, 1, 0, 0}
		}
		var ss float64
		for _, p := range hist {
			if len(p.f) > h {
				r := obs.Values[p.s+h] - (c[0] + c[1]*p.f[h] + c[2]*obs.Values[p.s] + c[3]*p.f[0])
				ss += r * r
			}
		}
		m.Coef[h], m.Sigma[h] = c, math.Sqrt(ss/float64(n))
	}
	return m, nil
}

// minFitSamples is the fewest past forecasts per horizon the correction
// is fitted on; with fewer (less than a day of history on an hourly
// grid), the horizon keeps the raw forecast: four coefficients fitted on a
// handful of points follow their noise.
const minFitSamples = 24

// solve4 solves the normal equations xtx·c = xty by Gaussian elimination
// with partial pivoting, after a tiny ridge (1e-9 of the mean diagonal) so
// that collinear predictors (a forecast that equals the present) stay
// solvable; the intercept is not penalised.
func solve4(xtx [4][4]float64, xty [4]float64) [4]float64 {
	var diag float64
	for i := range 4 {
		diag += xtx[i][i] / 4
	}
	for i := 1; i < 4; i++ {
		xtx[i][i] += 1e-9*diag + 1e-12
	}
	a := xtx
	b := xty
	for col := range 4 {
		p := col
		for r := col + 1; r < 4; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		b[col], b[p] = b[p], b[col]
		if a[col][col] == 0 {
			return [4]float64{0, 1, 0, 0} // degenerate: the forecast as is
		}
		for r := col + 1; r < 4; r++ {
			f := a[r][col] / a[col][col]
			for k := col; k < 4; k++ {
				a[r][k] -= f * a[col][k]
			}
			b[r] -= f * b[col]
		}
	}
	var c [4]float64
	for i := 3; i >= 0; i-- {
		s := b[i]
		for k := i + 1; k < 4; k++ {
			s -= a[i][k] * c[k]
		}
		c[i] = s / a[i][i]
	}
	return c
}

// OnlineState is where a job stands at a decision.
type OnlineState struct {
	// Job is the whole job (its Start, Deadline, kind and MinSlot).
	Job Job
	// Now is the decision time, on obs's step grid (rounded up if not).
	Now time.Time
	// Remaining is the work still to do (> 0).
	Remaining time.Duration
	// RunLength is how long the job has been running without a pause up to
	// Now (0: not running). A started contiguous job, or an interruptible
	// one whose run is shorter than MinSlot, keeps running.
	RunLength time.Duration
}

// Prices returns the prices Online plans on at the decision time now: a
// series on obs's grid from the step containing now to the deadline.
// Only obs up to the anchor (now's step minus Lag) and what fc issues at
// the anchor are read.
func (p Online) Prices(obs *Series, fc Forecaster, em ErrorModel, now, deadline time.Time) (*Series, error) {
	if err := obs.Validate(); err != nil {
		return nil, fmt.Errorf("online: %w", err)
	}
	step := obs.Step
	i := obs.floorIndex(now)
	lag := int((p.Lag + step - 1) / step)
	a := i - lag
	b := obs.ceilIndex(deadline)
	if a < 0 || i >= len(obs.Values) || b <= i {
		return nil, fmt.Errorf("online: %w: decision at %s, deadline %s, observed trace [%s, %s)", ErrOutOfRange,
			now.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339),
			obs.Start.UTC().Format(time.RFC3339), obs.End().UTC().Format(time.RFC3339))
	}
	f, err := fc.Forecast(obs.TimeAt(a), obs.TimeAt(b).Sub(obs.TimeAt(a)))
	if err != nil {
		return nil, fmt.Errorf("online: forecast at %s: %w", obs.TimeAt(a).UTC().Format(time.RFC3339), err)
	}
	if f.Step != step || !f.Start.Equal(obs.TimeAt(a)) || len(f.Values) < b-a {
		return nil, fmt.Errorf("online: %w: forecast [%s, %s) step %s is not on the trace's grid (step %s) from %s to %s",
			ErrOutOfRange, f.Start.UTC().Format(time.RFC3339), f.End().UTC().Format(time.RFC3339), f.Step, step,
			obs.TimeAt(a).UTC().Format(time.RFC3339), obs.TimeAt(b).UTC().Format(time.RFC3339))
	}
	out := &Series{Start: obs.TimeAt(i), Step: step, Zone: obs.Zone, Values: make([]float64, 0, b-i)}
	for j := i; j < b; j++ {
		v, sigma := em.price(j-a, f.Values[j-a], obs.Values[a], f.Values[0])
		if j > i {
			v += p.Margin * sigma
		}
		out.Values = append(out.Values, max(0, v))
	}
	return out, nil
}

// Decide says whether the job runs the step starting at st.Now, and returns
// the plan of the remaining work on Online's prices (see [Online]). It
// reads obs and fc only up to the present (the anchor step); em must come
// from the past too (e.g. [EstimateErrors] at the job start). A deadline
// that cannot hold the remaining work fails with ErrDeadlineTooShort.
func (p Online) Decide(obs *Series, fc Forecaster, em ErrorModel, st OnlineState) (bool, Schedule, error) {
	return p.decide(obs, fc, em, st, true)
}

// decide is Decide; without wantPlan, one-step interruptible and contiguous
// jobs take Plan's decision for the first step directly (the same choice,
// ties included, without building the schedule).
func (p Online) decide(obs *Series, fc Forecaster, em ErrorModel, st OnlineState, wantPlan bool) (bool, Schedule, error) {
	if st.Remaining <= 0 {
		return false, Schedule{}, fmt.Errorf("online: %w: remaining work %s is not positive", ErrInvalidJob, st.Remaining)
	}
	if err := obs.Validate(); err != nil {
		return false, Schedule{}, fmt.Errorf("online: %w", err)
	}
	now := obs.TimeAt(obs.ceilIndex(st.Now))
	sub := st.Job
	sub.Start, sub.Work = now, st.Remaining
	if sub.Deadline.Sub(now) < st.Remaining {
		return false, Schedule{}, fmt.Errorf("online: %w: %s of work left at %s, deadline %s", ErrDeadlineTooShort,
			st.Remaining, now.UTC().Format(time.RFC3339), sub.Deadline.UTC().Format(time.RFC3339))
	}
	prices, err := p.Prices(obs, fc, em, now, sub.Deadline)
	if err != nil {
		return false, Schedule{}, err
	}
	committed := st.RunLength > 0 && (!st.Job.Interruptible || st.RunLength < st.Job.MinSlot)
	if !wantPlan {
		w, err := jobWindow(prices, sub)
		if err != nil {
			return false, Schedule{}, fmt.Errorf("online: %w", err)
		}
		v := prices.Values[w.a:w.b]
		switch {
		case committed:
			return true, Schedule{}, nil
		case !sub.Interruptible:
			// Plan's earliest lowest window starts now iff no later
			// window is strictly cheaper
			// window (sums in Plan's order, so ties break alike).
			var first float64
			for s := 0; s+w.n <= len(v); s++ {
				var sum float64
				for _, x := range v[s : s+w.n] {
					sum += x
				}
				if s == 0 {
					first = sum
				} else if sum < first {
					return false, Schedule{}, nil
				}
			}
			return true, Schedule{}, nil
		case w.mm == 1:
			// The threshold rule: now is among the w.n cheapest steps
			// (earliest on ties).
			cheaper := 0
			for _, x := range v[1:] {
				if x < v[0] {
					cheaper++
				}
			}
			return cheaper < w.n, Schedule{}, nil
		}
	}
	plan, err := Plan(prices, sub)
	if err != nil {
		return false, Schedule{}, fmt.Errorf("online: %w", err)
	}
	if committed {
		return true, plan, nil // a contiguous job runs to its end; a run lasts at least MinSlot
	}
	return !plan.Slots[0].Start.After(now), plan, nil
}

// EvaluateOnline runs job under policy p the way a TrainingRun would: at
// every step of trace from the job start it calls [Online.Decide] (trace
// observed up to that step, fc issued then, the ErrorModel estimated once
// from the History before the job start) and runs the step if told to;
// the result is measured on trace. PlannedGPerKWh is the first plan's mean
// price. Decisions at a step never depend on the trace after it.
func EvaluateOnline(trace *Series, fc Forecaster, job Job, p Online) (Result, error) {
	orc, err := Oracle(trace, job)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	step := trace.Step
	t := trace.TimeAt(trace.ceilIndex(job.Start))
	lag := time.Duration((p.Lag+step-1)/step) * step
	em, err := EstimateErrors(trace, fc, t.Add(-lag), job.Deadline.Sub(t)+lag, p.History, p.Correction)
	if err != nil {
		return Result{}, fmt.Errorf("evaluate: %w", err)
	}
	return evaluateOnline(trace, fc, job, p, em, orc)
}

// evaluateOnline is EvaluateOnline with the error model and oracle given.
func evaluateOnline(trace *Series, fc Forecaster, job Job, p Online, em ErrorModel, orc Schedule) (Result, error) {
	step := trace.Step
	t := trace.TimeAt(trace.ceilIndex(job.Start))
	remaining := time.Duration((job.Work+step-1)/step) * step
	var slots []Slot
	var run time.Duration
	planned, first := 0.0, true
	for remaining > 0 {
		ok, plan, err := p.decide(trace, fc, em, OnlineState{Job: job, Now: t, Remaining: remaining, RunLength: run}, first)
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: decision at %s: %w", t.UTC().Format(time.RFC3339), err)
		}
		if first {
			planned, first = plan.ExpectedGPerKWh, false
		}
		if ok {
			if n := len(slots); n > 0 && slots[n-1].End.Equal(t) {
				slots[n-1].End = t.Add(step)
			} else {
				slots = append(slots, Slot{Start: t, End: t.Add(step)})
			}
			run += step
			remaining -= step
		} else {
			run = 0
		}
		t = t.Add(step)
	}
	return measure(trace, orc, planned, slots)
}

// measure prices slots on trace and compares them with the oracle.
func measure(trace *Series, orc Schedule, planned float64, slots []Slot) (Result, error) {
	var sum float64
	var dur time.Duration
	for i, s := range slots {
		m, err := trace.Mean(s.Start, s.End)
		if err != nil {
			return Result{}, fmt.Errorf("evaluate: realized: %w", err)
		}
		slots[i].MeanIntensity = m
		sum += m * float64(s.End.Sub(s.Start))
		dur += s.End.Sub(s.Start)
	}
	res := Result{
		BaselineGPerKWh: orc.BaselineGPerKWh,
		PlannedGPerKWh:  planned,
		RealizedGPerKWh: sum / float64(dur),
		OracleGPerKWh:   orc.ExpectedGPerKWh,
		Slots:           slots,
	}
	if b := res.BaselineGPerKWh; b > 0 {
		res.SavingsPct = 100 * (b - res.RealizedGPerKWh) / b
		res.OracleSavingsPct = 100 * (b - res.OracleGPerKWh) / b
	}
	return res, nil
}
