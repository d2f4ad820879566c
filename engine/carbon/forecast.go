package carbon

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrNoHistory: a forecaster lacks the past data it needs.
var ErrNoHistory = errors.New("carbon: not enough history for forecast")

// Forecaster predicts intensity for [now, now+horizon). The returned series
// starts at the step that contains now and covers at least now+horizon.
type Forecaster interface {
	Forecast(now time.Time, horizon time.Duration) (*Series, error)
}

// forecastRange is the index range of trace steps covering [now, now+horizon).
func forecastRange(tr *Series, now time.Time, horizon time.Duration) (int, int, error) {
	if err := tr.Validate(); err != nil {
		return 0, 0, fmt.Errorf("forecast: %w", err)
	}
	if horizon <= 0 {
		return 0, 0, fmt.Errorf("%w: horizon %s is not positive", ErrOutOfRange, horizon)
	}
	i0, i1 := tr.floorIndex(now), tr.ceilIndex(now.Add(horizon))
	if i0 < 0 || i1 > len(tr.Values) {
		return 0, 0, fmt.Errorf("%w: forecast [%s, %s) not inside trace [%s, %s)", ErrOutOfRange,
			now.UTC().Format(time.RFC3339), now.Add(horizon).UTC().Format(time.RFC3339),
			tr.Start.UTC().Format(time.RFC3339), tr.End().UTC().Format(time.RFC3339))
	}
	return i0, i1, nil
}

// Perfect is the clairvoyant forecaster: it returns the trace itself.
type Perfect struct{ Trace *Series }

// Forecast implements Forecaster.
func (p Perfect) Forecast(now time.Time, horizon time.Duration) (*Series, error) {
	i0, i1, err := forecastRange(p.Trace, now, horizon)
	if err != nil {
		return nil, err
	}
	if err := p.Trace.gapIn(i0, i1); err != nil {
		return nil, fmt.Errorf("perfect forecast: %w", err)
	}
	return &Series{Start: p.Trace.TimeAt(i0), Step: p.Trace.Step, Zone: p.Trace.Zone,
		Values: append([]float64(nil), p.Trace.Values[i0:i1]...)}, nil
}

// Persistence is the day-ahead persistence forecaster: the forecast for a
// step is the trace value 24 h earlier. It never looks into the future:
// when the step 24 h earlier has not finished by now (horizons beyond 24 h)
// it goes back another 24 h, i.e. it uses the latest same-time-of-day value
// whose step ended at or before now. 24 h must be a whole number of steps.
// It reads the day before now (or, for a horizon under a day, the same
// hours a day earlier): a gap there (see [Series.Gaps]) fails with a
// *GapError.
type Persistence struct{ Trace *Series }

// Forecast implements Forecaster.
func (p Persistence) Forecast(now time.Time, horizon time.Duration) (*Series, error) {
	i0, i1, err := forecastRange(p.Trace, now, horizon)
	if err != nil {
		return nil, err
	}
	tr := p.Trace
	perDay, err := stepsPerDay(tr)
	if err != nil {
		return nil, err
	}
	if err := historyGap(tr, i0, max(0, i0-perDay), min(i0, i1-perDay), "a persistence forecast"); err != nil {
		return nil, err
	}
	out := &Series{Start: tr.TimeAt(i0), Step: tr.Step, Zone: tr.Zone, Values: make([]float64, 0, i1-i0)}
	for j := i0; j < i1; j++ {
		// Step k has finished at now iff k+1 ≤ i0 (i0 the step holding
		// now): go back whole days until it has, in one division rather
		// than a day at a time (a horizon of months made every forecast
		// quadratic in it).
		k := j - perDay
		if k >= i0 {
			k -= perDay * ((k-i0)/perDay + 1)
		}
		if k < 0 {
			return nil, fmt.Errorf("%w: step at %s needs trace data from %s, before the trace start %s",
				ErrNoHistory, tr.TimeAt(j).UTC().Format(time.RFC3339), tr.TimeAt(k).UTC().Format(time.RFC3339),
				tr.Start.UTC().Format(time.RFC3339))
		}
		out.Values = append(out.Values, tr.Values[k])
	}
	return out, nil
}

// Seasonal forecasts from the recent past only, like Persistence, but
// less noisily: a step's forecast is the mean of the same time of day over
// the last Days days (every value finished by now), plus the current
// anomaly — how far the latest finished step sits above or below its own
// seasonal mean — decayed by Decay per hour ahead, since a windy or cloudy
// spell lasts for hours. Days 0 means 7, Decay 0 means 0.9. It reads the
// Days days (and one step) before now: a gap there (see [Series.Gaps])
// fails with a *GapError.
type Seasonal struct {
	Trace *Series
	Days  int
	Decay float64
}

// Forecast implements Forecaster.
func (p Seasonal) Forecast(now time.Time, horizon time.Duration) (*Series, error) {
	i0, i1, err := forecastRange(p.Trace, now, horizon)
	if err != nil {
		return nil, err
	}
	tr := p.Trace
	perDay, err := stepsPerDay(tr)
	if err != nil {
		return nil, err
	}
	days, decay := p.Days, p.Decay
	if days <= 0 {
		days = 7
	}
	if decay <= 0 || decay > 1 {
		decay = 0.9
	}
	last := tr.floorIndex(now) - 1 // the latest step finished by now
	// What it reads: the same times of day over the last days days, for
	// the steps ahead and for the latest finished one (the anomaly).
	if err := historyGap(tr, i0, max(0, last-days*perDay), i0, fmt.Sprintf("a seasonal forecast (%d days)", days)); err != nil {
		return nil, err
	}
	// mean of the same time of day over the last days days, all finished by now.
	seasonal := func(j int) (float64, error) {
		var sum float64
		n := 0
		k := j - perDay
		if k >= i0 { // not finished at now (k+1 > i0): skip those days at once
			k -= perDay * ((k-i0)/perDay + 1)
		}
		for ; n < days && k >= 0; k -= perDay {
			sum += tr.Values[k]
			n++
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: step at %s has no finished same-time-of-day value before %s",
				ErrNoHistory, tr.TimeAt(j).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		return sum / float64(n), nil
	}
	var anomaly float64
	if last >= 0 {
		if m, err := seasonal(last); err == nil {
			anomaly = tr.Values[last] - m
		}
	}
	out := &Series{Start: tr.TimeAt(i0), Step: tr.Step, Zone: tr.Zone, Values: make([]float64, 0, i1-i0)}
	for j := i0; j < i1; j++ {
		m, err := seasonal(j)
		if err != nil {
			return nil, err
		}
		hours := tr.TimeAt(j).Sub(tr.TimeAt(last)).Hours()
		out.Values = append(out.Values, max(0, m+anomaly*math.Pow(decay, hours)))
	}
	return out, nil
}

// historyGap is nil when the steps [h0, h1) a forecast issued at step i0
// reads (what) are clear of tr's gaps, else the *GapError, saying so.
func historyGap(tr *Series, i0, h0, h1 int, what string) error {
	if err := tr.gapIn(h0, h1); err != nil {
		return fmt.Errorf("%s issued at %s reads the trace before it: %w", what, tr.TimeAt(i0).UTC().Format(time.RFC3339), err)
	}
	return nil
}

// stepsPerDay is how many of tr's steps make 24 h, which they must divide.
func stepsPerDay(tr *Series) (int, error) {
	const day = 24 * time.Hour
	if day%tr.Step != 0 {
		return 0, fmt.Errorf("%w: step %s does not divide 24h", ErrInvalidSeries, tr.Step)
	}
	return int(day / tr.Step), nil
}
