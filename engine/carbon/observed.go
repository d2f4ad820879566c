package carbon

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoObservation: a live provider has no measurement recent enough to
// stand for the present (none at or before the decision time, or the
// latest is older than the caller allows).
var ErrNoObservation = errors.New("carbon: no recent observation")

// Observation is the measurement [Online.ObservedPrices] priced the
// present step at.
type Observation struct {
	// Start and Step are the measured period, on the observed series' grid.
	Start time.Time
	Step  time.Duration
	// Value is the measured intensity (g/kWh).
	Value float64
	// Age is how old the measurement is in steps of the forecast: 0 when
	// the measured period overlaps the present step, 1 when it ends where
	// the present step begins (the step before), and so on (rounded up).
	Age int
}

// ObservedPrices is [Online.Prices] for a live provider, which publishes a
// forecast issued now and measurements of the recent past but no trace of
// past forecasts: obs is what the provider measured over a short window
// ending at now (e.g. its History), f its forecast, on its own grid,
// covering the step containing now or starting at the next step (the
// Carbon Aware SDK's forecast begins at the next period): then the present
// step is the one before f, priced by the measurement alone.
//
// The present step (f's step containing now) is priced at the latest
// measurement in obs that starts at or before now, provided it is at most
// maxAge steps of f old (see [Observation.Age]); otherwise it fails with
// ErrNoObservation and the caller decides what stands for the present.
// Unlike Prices with a [Online.Lag], an older measurement still prices the
// present step itself (the latest reading stands for the present: it is
// what the observation replaces the forecast for). Later steps, up to the
// deadline or the end of f, are priced by em at horizon j−a, a the
// measurement's step on f's grid, plus the margin z·σ(h), as Prices does.
// A provider gives no past forecasts to fit em on, so callers pass the
// zero ErrorModel: later steps are then f itself, with no margin. A
// non-zero em needs f to cover the anchor step a.
//
// Nothing in obs after now is read; obs and f may have different steps.
func (p Online) ObservedPrices(obs, f *Series, em ErrorModel, now, deadline time.Time, maxAge int) (*Series, Observation, error) {
	if err := f.Validate(); err != nil {
		return nil, Observation{}, fmt.Errorf("online: forecast: %w", err)
	}
	step := f.Step
	i := f.floorIndex(now)
	b := min(f.ceilIndex(deadline), len(f.Values))
	if i < -1 || i >= len(f.Values) || b <= i {
		return nil, Observation{}, fmt.Errorf("online: %w: decision at %s, deadline %s, forecast [%s, %s)", ErrOutOfRange,
			now.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339),
			f.Start.UTC().Format(time.RFC3339), f.End().UTC().Format(time.RFC3339))
	}
	x, err := latestObservation(obs, now, f.TimeAt(i), step, maxAge)
	if err != nil {
		return nil, x, err
	}
	a := i - x.Age
	if err := f.gapIn(i, b); err != nil {
		return nil, x, fmt.Errorf("online: forecast: %w", err)
	}
	var fa float64
	if len(em.Coef) > 0 {
		if em.Step != 0 && em.Step != step {
			return nil, x, fmt.Errorf("online: %w: error model step %s, forecast step %s", ErrOutOfRange, em.Step, step)
		}
		if a < 0 {
			return nil, x, fmt.Errorf("online: %w: the error model needs the forecast at the measured step %s; it starts at %s",
				ErrOutOfRange, f.TimeAt(a).UTC().Format(time.RFC3339), f.Start.UTC().Format(time.RFC3339))
		}
		if err := f.gapIn(a, a+1); err != nil {
			return nil, x, fmt.Errorf("online: forecast at the measured step: %w", err)
		}
		fa = f.Values[a]
	}
	out := &Series{Start: f.TimeAt(i), Step: step, Zone: f.Zone, Values: make([]float64, 0, b-i)}
	out.Values = append(out.Values, price(x.Value))
	for j := i + 1; j < b; j++ {
		v, sigma := em.price(j-a, f.Values[j], x.Value, fa)
		out.Values = append(out.Values, price(v+p.Margin*sigma))
	}
	return out, x, nil
}

// latestObservation is obs's latest step starting at or before now (the
// last reading before a gap, when now lies in one), with
// its age in steps of step before cur (the start of the present step); an
// age above maxAge fails with ErrNoObservation.
func latestObservation(obs *Series, now, cur time.Time, step time.Duration, maxAge int) (Observation, error) {
	if obs == nil {
		return Observation{}, fmt.Errorf("online: %w: no measurements", ErrNoObservation)
	}
	if err := obs.Validate(); err != nil {
		return Observation{}, fmt.Errorf("online: %w: %w", ErrNoObservation, err)
	}
	k := obs.lastReading(min(obs.floorIndex(now), len(obs.Values)-1))
	if k < 0 {
		return Observation{}, fmt.Errorf("online: %w: the measurements start at %s, after the decision at %s", ErrNoObservation,
			obs.Start.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	x := Observation{Start: obs.TimeAt(k), Step: obs.Step, Value: obs.Values[k]}
	if gap := cur.Sub(x.Start.Add(obs.Step)); gap >= 0 {
		x.Age = int((gap+step-1)/step) + 1
	}
	if x.Age > maxAge {
		return x, fmt.Errorf("online: %w: the latest measurement (%s, %.4g g/kWh) is %d steps of %s before the present step %s (at most %d allowed)",
			ErrNoObservation, x.Start.UTC().Format(time.RFC3339), x.Value, x.Age, step, cur.UTC().Format(time.RFC3339), maxAge)
	}
	return x, nil
}
