package energy

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cann-train/cann-train/engine/carbon"
)

// JoulesPerKWh converts joules to kWh.
const JoulesPerKWh = 3.6e6

// Interval is energy used during [Start, End).
type Interval struct {
	Start, End time.Time
	Joules     float64
}

// KWh is the interval's energy in kWh.
func (iv Interval) KWh() float64 { return iv.Joules / JoulesPerKWh }

func (iv Interval) check() error {
	if !iv.Start.Before(iv.End) {
		return fmt.Errorf("%w: empty interval [%s, %s)", ErrInvalid, iv.Start.UTC().Format(time.RFC3339), iv.End.UTC().Format(time.RFC3339))
	}
	if !finiteNonNeg(iv.Joules) {
		return fmt.Errorf("%w: %v J in [%s, %s)", ErrInvalid, iv.Joules, iv.Start.UTC().Format(time.RFC3339), iv.End.UTC().Format(time.RFC3339))
	}
	return nil
}

// Accountant collects energy intervals, either by sampling a Meter or by
// Add. Intervals must come in time order and must not overlap.
type Accountant struct {
	Meter Meter

	intervals []Interval
	sampling  bool
	lastT     time.Time
	lastJ     float64
}

// Sample reads the Meter at now. The first sample (and the first after
// Break) only starts a run; each later one records the interval since the
// previous sample with the energy the Meter reports for it, and returns it.
func (a *Accountant) Sample(ctx context.Context, now time.Time) (Interval, bool, error) {
	if a.Meter == nil {
		return Interval{}, false, fmt.Errorf("%w: accountant has no meter", ErrInvalid)
	}
	j, err := a.Meter.Joules(ctx, now)
	if err != nil {
		return Interval{}, false, fmt.Errorf("energy: sample at %s: %w", now.UTC().Format(time.RFC3339), err)
	}
	if !a.sampling {
		if n := len(a.intervals); n > 0 && now.Before(a.intervals[n-1].End) {
			return Interval{}, false, fmt.Errorf("%w: sample at %s before the last interval's end %s", ErrInvalid,
				now.UTC().Format(time.RFC3339), a.intervals[n-1].End.UTC().Format(time.RFC3339))
		}
		a.sampling, a.lastT, a.lastJ = true, now, j
		return Interval{}, false, nil
	}
	iv := Interval{Start: a.lastT, End: now, Joules: j - a.lastJ}
	if err := a.Add(iv); err != nil {
		return Interval{}, false, err
	}
	a.lastT, a.lastJ = now, j
	return iv, true, nil
}

// Break ends the current run of samples (the job paused): the time until
// the next Sample is not charged.
func (a *Accountant) Break() { a.sampling = false }

// Add records an interval measured elsewhere (e.g. reported by a node).
func (a *Accountant) Add(iv Interval) error {
	if err := iv.check(); err != nil {
		return err
	}
	if n := len(a.intervals); n > 0 && iv.Start.Before(a.intervals[n-1].End) {
		return fmt.Errorf("%w: interval starting %s overlaps the previous one ending %s", ErrInvalid,
			iv.Start.UTC().Format(time.RFC3339), a.intervals[n-1].End.UTC().Format(time.RFC3339))
	}
	a.intervals = append(a.intervals, iv)
	return nil
}

// Intervals returns a copy of the recorded intervals.
func (a *Accountant) Intervals() []Interval { return slices.Clone(a.intervals) }

// Report prices the recorded intervals; see Account.
func (a *Accountant) Report(s *carbon.Series, runNow time.Time) (Report, error) {
	return Account(s, a.intervals, runNow)
}

// IntervalCO2 is one priced interval.
type IntervalCO2 struct {
	Interval
	KWh     float64
	GPerKWh float64 // time-weighted mean intensity over the interval
	Grams   float64 // KWh × GPerKWh
}

// Report is the emissions of a run and its run-now baseline.
type Report struct {
	Intervals []IntervalCO2
	KWh       float64
	Grams     float64
	GPerKWh   float64 // Grams / KWh (energy-weighted mean intensity); 0 without energy
	// HasBaseline is set when Account was given a run-now time.
	HasBaseline     bool
	BaselineGrams   float64
	BaselineGPerKWh float64
	// SavingsPct is 100 × (BaselineGrams − Grams) / BaselineGrams (0 when
	// the baseline is 0).
	SavingsPct float64
}

// Account prices intervals on s: each interval's kWh times the
// time-weighted mean intensity of s over it (carbon.Series.Mean). With a
// non-zero runNow it also prices the run-now baseline: the same intervals,
// same durations and energy, laid back-to-back from runNow (pauses
// removed), and reports the savings. Intervals must be ordered, disjoint
// and covered by s (ErrOutOfRange from the carbon package otherwise).
func Account(s *carbon.Series, ivs []Interval, runNow time.Time) (Report, error) {
	if err := s.Validate(); err != nil {
		return Report{}, fmt.Errorf("energy: account: %w", err)
	}
	rep := Report{Intervals: make([]IntervalCO2, 0, len(ivs))}
	for i, iv := range ivs {
		if err := iv.check(); err != nil {
			return Report{}, fmt.Errorf("energy: interval %d: %w", i, err)
		}
		if i > 0 && iv.Start.Before(ivs[i-1].End) {
			return Report{}, fmt.Errorf("%w: interval %d starts before interval %d ends", ErrInvalid, i, i-1)
		}
		ci, err := s.Mean(iv.Start, iv.End)
		if err != nil {
			return Report{}, fmt.Errorf("energy: interval %d intensity: %w", i, err)
		}
		p := IntervalCO2{Interval: iv, KWh: iv.KWh(), GPerKWh: ci}
		p.Grams = p.KWh * ci
		rep.Intervals = append(rep.Intervals, p)
		rep.KWh += p.KWh
		rep.Grams += p.Grams
	}
	if rep.KWh > 0 {
		rep.GPerKWh = rep.Grams / rep.KWh
	}
	if runNow.IsZero() {
		return rep, nil
	}
	rep.HasBaseline = true
	t := runNow
	for i, iv := range ivs {
		end := t.Add(iv.End.Sub(iv.Start))
		ci, err := s.Mean(t, end)
		if err != nil {
			return Report{}, fmt.Errorf("energy: baseline interval %d intensity: %w", i, err)
		}
		rep.BaselineGrams += iv.KWh() * ci
		t = end
	}
	if rep.KWh > 0 {
		rep.BaselineGPerKWh = rep.BaselineGrams / rep.KWh
	}
	if rep.BaselineGrams > 0 {
		rep.SavingsPct = 100 * (rep.BaselineGrams - rep.Grams) / rep.BaselineGrams
	}
	return rep, nil
}

// Span is a time range drawn on a timeline.
type Span struct {
	Start, End time.Time
}

// Chunks merges contiguous intervals (one ends where the next starts) into
// the spans that ran.
func Chunks(ivs []Interval) []Span {
	var out []Span
	for _, iv := range ivs {
		if n := len(out); n > 0 && out[n-1].End.Equal(iv.Start) {
			out[n-1].End = iv.End
			continue
		}
		out = append(out, Span{Start: iv.Start, End: iv.End})
	}
	return out
}

// SlotSpans converts planned slots (carbon.Schedule.Slots) to spans.
func SlotSpans(slots []carbon.Slot) []Span {
	out := make([]Span, len(slots))
	for i, s := range slots {
		out[i] = Span{Start: s.Start, End: s.End}
	}
	return out
}
