package carbon

import (
	"errors"
	"fmt"
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
	return &Series{Start: p.Trace.TimeAt(i0), Step: p.Trace.Step, Zone: p.Trace.Zone,
		Values: append([]float64(nil), p.Trace.Values[i0:i1]...)}, nil
}

// Persistence is the day-ahead persistence forecaster: the forecast for a
// step is the trace value 24 h earlier. It never looks into the future:
// when the step 24 h earlier has not finished by now (horizons beyond 24 h)
// it goes back another 24 h, i.e. it uses the latest same-time-of-day value
// whose step ended at or before now. 24 h must be a whole number of steps.
type Persistence struct{ Trace *Series }

// Forecast implements Forecaster.
func (p Persistence) Forecast(now time.Time, horizon time.Duration) (*Series, error) {
	i0, i1, err := forecastRange(p.Trace, now, horizon)
	if err != nil {
		return nil, err
	}
	tr := p.Trace
	const day = 24 * time.Hour
	if day%tr.Step != 0 {
		return nil, fmt.Errorf("%w: step %s does not divide 24h", ErrInvalidSeries, tr.Step)
	}
	perDay := int(day / tr.Step)
	out := &Series{Start: tr.TimeAt(i0), Step: tr.Step, Zone: tr.Zone, Values: make([]float64, 0, i1-i0)}
	for j := i0; j < i1; j++ {
		k := j - perDay
		for tr.TimeAt(k + 1).After(now) { // step k not finished at now
			k -= perDay
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
