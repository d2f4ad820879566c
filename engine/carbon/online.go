package carbon

import (
	"fmt"
	"math"
	"slices"
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
// the zero ErrorModel is returned. A gap of obs (see [Series.Gaps])
// before anchor ends the history as the trace's start does: the model is
// the one of the trace cut at the gap. Horizons without samples reuse the
// longest estimated one. history ≤ 0 means [DefaultErrorHistory].
//
// The fit is robust to glitches in the history (one reading of 5000 g/kWh
// in a week of 100s sent the online policy to the dearest hours): a past
// forecast is left out of the fit and of σ at horizon h when a reading it
// involves (the present it was issued at, the step h ahead) or its value
// at h is an isolated spike — more than [spikeScales] robust scales of the
// history's step-to-step changes above (or below) both neighbours —, or
// when its error at issue time, or at h, lies more than [glitchScales]
// robust scales (1.4826 × the median absolute deviation of those errors,
// at least 1 % of the median intensity) from the median error: a bad
// reading, a unit slip or an outage, not weather. (On the real traces in
// shared/data/carbon the largest isolated step is 36 scales and the
// persistence forecast's largest error 38; a few of the seasonal
// forecast's errors in Norway lie beyond 50.) The least squares
// themselves fit the forecast's error on centred predictors, leaving out
// one the others already explain (the observed present and its forecast
// on an exactly periodic trace, any predictor on a flat one): it keeps
// its prior, the forecast as it is, so an exact history gives exactly
// the forecast, without the rounding noise that broke ties.
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
	// A gap before the anchor ends the history as the trace's start does:
	// only the stretch of data holding the anchor is read (as if the
	// trace were cut at the gap), and past forecasts that would read the
	// gap are skipped like those without enough history.
	from := obs.gapEndBefore(a)
	var hist []past
	for s := max(from, a-int(history/step)); s < a; s++ {
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
	// Scales: the floor is 1 % of the median intensity of the history;
	// spikes are measured against the step-to-step changes of the
	// history.
	seen := obs.Values[hist[0].s : a+1]
	floor := 0.01 * median(seen)
	jumps := make([]float64, 0, len(seen))
	for i := 1; i < len(seen); i++ {
		jumps = append(jumps, math.Abs(seen[i]-seen[i-1]))
	}
	jump := math.Max(1.4826*median(jumps), floor)
	// spikeObs: reading i is an isolated spike (the present, a, has no
	// next reading yet: never).
	spikeObs := func(i int) bool { return i < a && isolatedSpike(obs.Values[from:], i-from, jump) }
	// Past forecasts whose error at issue time is a glitch.
	e0 := make([]float64, len(hist))
	for k, p := range hist {
		e0[k] = obs.Values[p.s] - p.f[0]
	}
	bad0 := glitches(e0, floor)
	m := ErrorModel{Step: step, Coef: make([][4]float64, H+1), Sigma: make([]float64, H+1), Samples: len(hist)}
	m.Coef[0] = [4]float64{0, 0, 1, 0}
	rows := make([][3]float64, 0, len(hist)) // f(h), x(a), f(a)
	ys := make([]float64, 0, len(hist))
	eh := make([]float64, 0, len(hist))
	for h := 1; h <= H; h++ {
		rows, ys, eh = rows[:0], ys[:0], eh[:0]
		for k, p := range hist {
			if len(p.f) <= h || bad0[k] || spikeObs(p.s) || spikeObs(p.s+h) || isolatedSpike(p.f, h, jump) {
				continue
			}
			rows = append(rows, [3]float64{p.f[h], obs.Values[p.s], p.f[0]})
			ys = append(ys, obs.Values[p.s+h])
			eh = append(eh, obs.Values[p.s+h]-p.f[h])
		}
		badH := glitches(eh, floor)
		n := 0
		for k := range rows {
			if !badH[k] {
				rows[n], ys[n] = rows[k], ys[k]
				n++
			}
		}
		rows, ys = rows[:n], ys[:n]
		if n == 0 {
			m.Coef[h], m.Sigma[h] = m.Coef[h-1], m.Sigma[h-1]
			continue
		}
		var c [4]float64
		switch {
		case n < minFitSamples:
			// Too little history to fit on (a run near its trace's
			// start): the forecast as it is.
			c = [4]float64{0, 1, 0, 0}
		case corr == CorrectLinear:
			c = fitLinear(rows, ys)
		default:
			var sxx, sxy float64
			for k, r := range rows {
				e0, eh := r[1]-r[2], ys[k]-r[0]
				sxx += e0 * e0
				sxy += e0 * eh
			}
			beta := 0.0
			if sxx > 0 {
				beta = sxy / sxx
			}
			c = [4]float64{0, 1, beta, -beta}
		}
		var ss float64
		for k, r := range rows {
			e := ys[k] - (c[0] + c[1]*r[0] + c[2]*r[1] + c[3]*r[2])
			ss += e * e
		}
		m.Coef[h], m.Sigma[h] = c, math.Sqrt(ss/float64(n))
	}
	return m, nil
}

// spikeScales is how far (in robust scales of the step-to-step changes)
// a reading must stand above or below both of its neighbours to be an
// isolated spike, a glitch EstimateErrors leaves out. (On the real traces
// in shared/data/carbon the largest such step is 36 scales, in Norway.)
const spikeScales = 100

// isolatedSpike: v[i] lies more than spikeScales·scale above both of its
// neighbours, or below both (false at either end of v).
func isolatedSpike(v []float64, i int, scale float64) bool {
	if i <= 0 || i+1 >= len(v) {
		return false
	}
	l, r := v[i]-v[i-1], v[i]-v[i+1]
	lim := spikeScales * scale
	return (l > lim && r > lim) || (l < -lim && r < -lim)
}

// glitchScales is how many robust scales from the median an error of a
// past forecast may lie before EstimateErrors leaves it out as a glitch.
const glitchScales = 50

// glitches marks the errors e that lie more than glitchScales robust
// scales (1.4826 × MAD, at least floor) from their median.
func glitches(e []float64, floor float64) []bool {
	bad := make([]bool, len(e))
	if len(e) == 0 {
		return bad
	}
	med := median(e)
	dev := make([]float64, len(e))
	for i, x := range e {
		dev[i] = math.Abs(x - med)
	}
	limit := glitchScales * math.Max(1.4826*median(dev), floor)
	for i, d := range dev {
		bad[i] = d > limit
	}
	return bad
}

// median of x (the upper one of an even count); x is not modified.
func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	y := slices.Clone(x)
	slices.Sort(y)
	return y[len(y)/2]
}

// minFitSamples is the fewest past forecasts per horizon the correction
// is fitted on; with fewer (less than a day of history on an hourly
// grid), the horizon keeps the raw forecast: four coefficients fitted on a
// handful of points follow their noise.
const minFitSamples = 24

// fitLinear is the least-squares fit y ≈ c0 + c1·r[0] + c2·r[1] + c3·r[2],
// r[0] the forecast f(h). It fits the forecast's error y − r[0] (so c1 is
// 1 plus the fitted coefficient), on centred predictors (the intercept
// then separates), taken in order, each only if the ones before leave more
// than 1e-10 of its variance unexplained: a predictor the others determine
// (collinear, or constant over the history) keeps its prior — the
// forecast as it is — instead of a near-singular solve. An exact history
// (a periodic trace and persistence) then gives exactly the forecast, and
// a flat one does not throw the forecast away.
func fitLinear(rows [][3]float64, y []float64) [4]float64 {
	z := make([]float64, len(y))
	for k, r := range rows {
		z[k] = y[k] - r[0]
	}
	c := fitCentred(rows, z)
	c[1]++
	return c
}

// fitCentred is fitLinear's least squares for z without the prior.
func fitCentred(rows [][3]float64, y []float64) [4]float64 {
	n := float64(len(rows))
	var mean [3]float64
	var my float64
	for k, r := range rows {
		for j := range 3 {
			mean[j] += r[j] / n
		}
		my += y[k] / n
	}
	var cov [3][3]float64
	var cy [3]float64
	for k, r := range rows {
		var d [3]float64
		for j := range 3 {
			d[j] = r[j] - mean[j]
		}
		for i := range 3 {
			for j := range 3 {
				cov[i][j] += d[i] * d[j]
			}
			cy[i] += d[i] * (y[k] - my)
		}
	}
	// Gaussian elimination in predictor order (cov is symmetric positive
	// semi-definite, so no pivoting is needed among kept predictors).
	a, b := cov, cy
	var kept [3]bool
	for j := range 3 {
		if cov[j][j] <= 0 || a[j][j] <= 1e-10*cov[j][j] {
			continue // explained by the predictors before it
		}
		kept[j] = true
		for i := j + 1; i < 3; i++ {
			f := a[i][j] / a[j][j]
			for k := j; k < 3; k++ {
				a[i][k] -= f * a[j][k]
			}
			b[i] -= f * b[j]
		}
	}
	var beta [3]float64
	for i := 2; i >= 0; i-- {
		if !kept[i] {
			continue
		}
		s := b[i]
		for k := i + 1; k < 3; k++ {
			if kept[k] {
				s -= a[i][k] * beta[k]
			}
		}
		beta[i] = s / a[i][i]
	}
	c := [4]float64{my, beta[0], beta[1], beta[2]}
	for j := range 3 {
		c[0] -= beta[j] * mean[j]
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
	if err := obs.gapIn(a, a+1); err != nil {
		return nil, fmt.Errorf("online: the observed present at %s: %w", obs.TimeAt(a).UTC().Format(time.RFC3339), err)
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
		out.Values = append(out.Values, price(v))
	}
	return out, nil
}

// pricesPerGram sets the grid Online's prices are rounded to: 1e-6
// g/kWh, finer than any trace's readings (the real ones have at most
// three decimals) and coarser than the rounding noise of the fitted
// corrections, so that steps the forecast prices alike compare equal and
// Plan's "earliest on ties" decides between them (with that noise, the
// latest of equal windows often won).
const pricesPerGram = 1e6

// price is v as Online prices it: not below 0, on the 1/pricesPerGram grid
// (a reading with up to six decimals keeps its exact value).
func price(v float64) float64 {
	return math.Round(max(0, v)*pricesPerGram) / pricesPerGram
}

// Decide says whether the job runs the step starting at st.Now, and returns
// the plan of the remaining work on Online's prices (see [Online]). It
// reads obs and fc only up to the present (the anchor step); em must come
// from the past too (e.g. [EstimateErrors] at the job start). A deadline
// that cannot hold the remaining work fails with ErrDeadlineTooShort.
func (p Online) Decide(obs *Series, fc Forecaster, em ErrorModel, st OnlineState) (bool, Schedule, error) {
	return p.decide(obs, fc, em, st, true, nil)
}

// decide is Decide; without wantPlan, one-step interruptible and contiguous
// jobs take Plan's decision for the first step directly (the same choice,
// ties included, without building the schedule), and with sc, so do
// interruptible jobs with a longer minimum slot (sc.firstMove, see
// decide.go).
func (p Online) decide(obs *Series, fc Forecaster, em ErrorModel, st OnlineState, wantPlan bool, sc *dpScratch) (bool, Schedule, error) {
	if st.Remaining <= 0 {
		return false, Schedule{}, fmt.Errorf("online: %w: remaining work %s is not positive", ErrInvalidJob, st.Remaining)
	}
	if err := obs.Validate(); err != nil {
		return false, Schedule{}, fmt.Errorf("online: %w", err)
	}
	now := obs.TimeAt(obs.ceilIndex(st.Now))
	sub := st.Job
	sub.Start, sub.Work, sub.Running = now, st.Remaining, st.RunLength
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
			// window is cheaper (sums in Plan's order and compared as
			// Plan does, so ties break alike).
			var first float64
			for s := 0; s+w.n <= len(v); s++ {
				var sum float64
				for _, x := range v[s : s+w.n] {
					sum += x
				}
				if s == 0 {
					first = sum
				} else if cheaper(sum, first) {
					return false, Schedule{}, nil
				}
			}
			return true, Schedule{}, nil
		case w.mm == 1 && (!w.running || w.r0 >= 1):
			// The threshold rule: now is among the w.n cheapest steps
			// (earliest on ties).
			cheaper := 0
			for _, x := range v[1:] {
				if x < v[0] {
					cheaper++
				}
			}
			return cheaper < w.n, Schedule{}, nil
		case sc != nil && (!w.running || w.r0 >= w.mm) && (len(v)-w.n+1)*w.n <= maxPlanCells:
			// Plan's choice for the first step (runsDP's first state),
			// without the plan: see decide.go.
			return sc.firstMove(v, w.n, w.mm, w.running), Schedule{}, nil
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
	orc, orcErr, err := hindsight(trace, job)
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
	return evaluateOnline(trace, fc, job, p, em, orc, orcErr, true)
}

// evaluateOnline is EvaluateOnline with the error model and oracle given;
// fast lets the decisions of interruptible jobs with a minimum slot skip
// Plan where firstMove can tell (the same decisions; false is the old
// path, which the tests compare it with).
func evaluateOnline(trace *Series, fc Forecaster, job Job, p Online, em ErrorModel, orc Schedule, orcErr error, fast bool) (Result, error) {
	step := trace.Step
	t := trace.TimeAt(trace.ceilIndex(job.Start))
	remaining := time.Duration((job.Work+step-1)/step) * step
	var slots []Slot
	var run time.Duration
	planned, first := 0.0, true
	var sc *dpScratch
	if fast {
		sc = &dpScratch{}
	}
	for remaining > 0 {
		ok, plan, err := p.decide(trace, fc, em, OnlineState{Job: job, Now: t, Remaining: remaining, RunLength: run}, first, sc)
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
	return result(trace, orc, orcErr, planned, slots, true)
}
