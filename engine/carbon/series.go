package carbon

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (or an I/O / decoding error) with %w, so callers can use errors.Is.
var (
	// ErrOutOfRange: a time or window lies outside the series.
	ErrOutOfRange = errors.New("carbon: time outside series")
	// ErrInvalidSeries: a Series violates its invariants.
	ErrInvalidSeries = errors.New("carbon: invalid series")
	// ErrHeader: a CSV header is not a recognised form, or the requested
	// zone/column is not in it.
	ErrHeader = errors.New("carbon: unrecognised header")
	// ErrZone: a trace holds other zones than the one asked for (its
	// messages name the zones it holds); errors.Is(err, ErrHeader) holds
	// for it too.
	ErrZone error = &aliasError{msg: "carbon: zone not in the trace", alias: ErrHeader}
	// ErrJSONAnswer: a JSON answer is none of the known shapes, the zone
	// (region, location) asked for is not the one it is for or not among
	// those it holds, or it holds several and none was asked for. It is
	// the JSON counterpart of ErrHeader, in JSON words (its messages name
	// the field), and errors.Is(err, ErrHeader) holds for it too.
	ErrJSONAnswer error = &aliasError{msg: "carbon: JSON answer", alias: ErrHeader}
	// ErrBadTime: a timestamp cannot be parsed.
	ErrBadTime = errors.New("carbon: bad timestamp")
	// ErrBadValue: an intensity is non-numeric, non-finite, negative or
	// above MaxIntensity.
	ErrBadValue = errors.New("carbon: bad intensity value")
	// ErrIrregular: timestamps are duplicated, out of order or off the
	// inferred step grid, or too few to infer a step.
	ErrIrregular = errors.New("carbon: irregular time steps")
	// ErrGap: more than MaxInterpolatedSteps consecutive steps are missing.
	ErrGap = errors.New("carbon: gap too long to interpolate")
)

// MaxIntensity is the highest intensity the readers accept (g/kWh). No
// grid emits more than about 1200 g/kWh (lignite plants; the dirtiest
// national grids average 700–900), so a larger reading is a glitch or a
// unit slip (g/MWh, mg/kWh): one such value in the history the online
// planner fits its correction on used to send jobs to the worst hours.
// The readers refuse it with ErrBadValue naming where it is, rather than
// plan on it (a warning would go unseen in a control worker's log, and
// the reading would still distort the plan); remove the reading and it
// is interpolated like any missing one.
const MaxIntensity = 5000

// valueProblem says why v is not an intensity the readers accept ("" when
// it is one).
func valueProblem(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
		return "is not a finite non-negative number"
	case v > MaxIntensity:
		return fmt.Sprintf("is above %d g/kWh, more than any grid emits (a glitch or another unit, e.g. g/MWh): "+
			"correct or remove the reading (a removed one is interpolated)", MaxIntensity)
	}
	return ""
}

// aliasError is a sentinel with its own words that also matches another
// sentinel (errors.Is follows Unwrap).
type aliasError struct {
	msg   string
	alias error
}

func (e *aliasError) Error() string { return e.msg }
func (e *aliasError) Unwrap() error { return e.alias }

// MaxInterpolatedSteps and MaxInterpolatedSpan set the default longest
// run of missing steps that the readers fill by linear interpolation: two
// steps, or as many as fit in an hour on a finer grid (a 15-minute hole in
// a 5-minute trace is as short as one missing step of a 15-minute trace).
// A longer gap is kept in the series (see [Series.Gaps]): the trace reads,
// and only a use that needs data inside the gap — a plan's window, the
// history a forecast reads, a report's range — is refused, with a
// *GapError (ErrGap). Each reader's options (CSVOptions.MaxGapSteps,
// JSONOptions.MaxGapSteps, the providers' MaxGapSteps) can change it.
const (
	MaxInterpolatedSteps = 2
	MaxInterpolatedSpan  = time.Hour
)

// maxGapSteps resolves an options value for a grid of step: 0 means the
// default (MaxInterpolatedSteps, or MaxInterpolatedSpan's worth of steps
// when that is more), a negative value means "interpolate nothing".
func maxGapSteps(n int, step time.Duration) int {
	switch {
	case n == 0:
		return max(MaxInterpolatedSteps, int(MaxInterpolatedSpan/step))
	case n < 0:
		return 0
	}
	return n
}

// GapError reports a run of missing steps longer than the reader
// interpolates, met by a use that needs data inside it (From–To, when
// known). It matches ErrGap with errors.Is; use errors.As for the times.
type GapError struct {
	// Start is the first missing step, End the reading after the gap: the
	// missing range is [Start, End).
	Start, End time.Time
	Missing    int           // missing steps
	Step       time.Duration // inferred step
	Max        int           // the most missing steps that are interpolated
	Where      string        // the reading after the gap ("line 12", "forecast[3]")
	// From and To are the range the refused use needed data over, which
	// overlaps the gap (zero in Series.Gaps).
	From, To time.Time
}

func (e *GapError) Error() string {
	const f = time.RFC3339
	msg := fmt.Sprintf("%s: %s: no data from %s to %s (%d missing steps of %s; at most %d are interpolated)",
		ErrGap, e.Where, e.Start.UTC().Format(f), e.End.UTC().Format(f), e.Missing, e.Step, e.Max)
	if e.From.IsZero() && e.To.IsZero() {
		return msg
	}
	return msg + fmt.Sprintf(", and %s to %s needs data there: the rest of the trace is usable — place what needs it "+
		"(a plan's window and the history its forecast reads, a report's range) before %s or from %s on — or fill in the missing readings",
		e.From.UTC().Format(f), e.To.UTC().Format(f), e.Start.UTC().Format(f), e.End.UTC().Format(f))
}

// Is makes errors.Is(err, ErrGap) true.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// Series is a regular carbon-intensity time series. Values[i] (gCO2eq/kWh)
// holds for the half-open interval [Start+i*Step, Start+(i+1)*Step).
//
// A series read from a trace may hold gaps longer than its reader
// interpolates (see [Series.Gaps]): Values holds placeholders there, linear
// between the readings around the gap, so that indexes stay regular, and
// every function of this package that reads a range of the series (At,
// Mean, Slice, the forecasters, Plan, Oracle, the online policy) refuses
// one that overlaps a gap with a *GapError. Copying the struct keeps its
// gaps (moving Start moves them with it); a Series built from Values alone
// has none, so take a part of one with Slice, which refuses a gap, rather
// than from its Values.
type Series struct {
	Start  time.Time
	Step   time.Duration
	Values []float64 // gCO2eq/kWh
	Zone   string

	gaps []gap // ascending, disjoint
}

// gap is a run of missing steps [i0, i1) of a series, too long to
// interpolate.
type gap struct {
	i0, i1 int
	max    int    // the reader's limit, for messages
	where  string // the reading after the gap
}

// Gaps returns the series' gaps too long to interpolate, oldest first
// (none for a series without them): the ranges a use of the series must
// stay clear of.
func (s *Series) Gaps() []GapError {
	out := make([]GapError, 0, len(s.gaps))
	for _, g := range s.gaps {
		out = append(out, *s.gapError(g, 0, 0))
	}
	return out
}

func (s *Series) gapError(g gap, from, to int) *GapError {
	e := &GapError{Start: s.TimeAt(g.i0).UTC(), End: s.TimeAt(g.i1).UTC(), Missing: g.i1 - g.i0, Step: s.Step, Max: g.max, Where: g.where}
	if from < to {
		e.From, e.To = s.TimeAt(from).UTC(), s.TimeAt(to).UTC()
	}
	return e
}

// gapIn is nil when steps [i0, i1) are clear of the series' gaps, else a
// *GapError for the first gap they overlap (From–To: those steps).
func (s *Series) gapIn(i0, i1 int) error {
	if len(s.gaps) == 0 || i0 >= i1 {
		return nil
	}
	// The first gap ending after i0.
	k, _ := slices.BinarySearchFunc(s.gaps, i0, func(g gap, i int) int { return cmp.Compare(g.i1, i+1) })
	if k < len(s.gaps) && s.gaps[k].i0 < i1 {
		return s.gapError(s.gaps[k], i0, i1)
	}
	return nil
}

// gapEndBefore is the end of the last gap that starts at or before step
// i, or 0 when none does: where the stretch of data up to i begins, as
// if the trace had been cut there (after i when i lies in that gap).
func (s *Series) gapEndBefore(i int) int {
	k, _ := slices.BinarySearchFunc(s.gaps, i, func(g gap, i int) int { return cmp.Compare(g.i0, i+1) })
	if k == 0 {
		return 0
	}
	return s.gaps[k-1].i1
}

// lastReading is step i, or when i lies in a gap the step before the gap
// (a gap lies between readings).
func (s *Series) lastReading(i int) int {
	if len(s.gaps) == 0 {
		return i
	}
	k, _ := slices.BinarySearchFunc(s.gaps, i, func(g gap, i int) int { return cmp.Compare(g.i1, i+1) })
	if k < len(s.gaps) && s.gaps[k].i0 <= i {
		return s.gaps[k].i0 - 1
	}
	return i
}

// Slice is the part of s over the whole steps covering [from, to): it
// fails with ErrOutOfRange when that is not inside s, and with a
// *GapError when it overlaps one of s's gaps. It shares Values with s.
func (s *Series) Slice(from, to time.Time) (*Series, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: empty interval [%s, %s)", ErrOutOfRange, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	i0, i1 := s.floorIndex(from), s.ceilIndex(to)
	if i0 < 0 || i1 > len(s.Values) {
		return nil, fmt.Errorf("%w: [%s, %s) not inside [%s, %s)", ErrOutOfRange,
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339),
			s.Start.UTC().Format(time.RFC3339), s.End().UTC().Format(time.RFC3339))
	}
	if err := s.gapIn(i0, i1); err != nil {
		return nil, err
	}
	return &Series{Start: s.TimeAt(i0), Step: s.Step, Zone: s.Zone, Values: s.Values[i0:i1:i1]}, nil
}

// Validate checks the invariants: positive step, at least one value, every
// value finite and non-negative.
func (s *Series) Validate() error {
	if s == nil {
		return fmt.Errorf("%w: nil series", ErrInvalidSeries)
	}
	if s.Step <= 0 {
		return fmt.Errorf("%w: step %s is not positive", ErrInvalidSeries, s.Step)
	}
	if len(s.Values) == 0 {
		return fmt.Errorf("%w: no values", ErrInvalidSeries)
	}
	for i, v := range s.Values {
		if !(v >= 0 && v <= math.MaxFloat64) { // negative, NaN or +Inf
			return fmt.Errorf("%w: value %d is %v", ErrInvalidSeries, i, v)
		}
	}
	return nil
}

// End is the exclusive end of the series: Start + len(Values)*Step.
func (s *Series) End() time.Time {
	return s.Start.Add(time.Duration(len(s.Values)) * s.Step)
}

// TimeAt is the start time of step i.
func (s *Series) TimeAt(i int) time.Time {
	return s.Start.Add(time.Duration(i) * s.Step)
}

// At returns the intensity of the step that contains t (a *GapError when
// that step lies in a gap).
func (s *Series) At(t time.Time) (float64, error) {
	i, err := s.index(t)
	if err != nil {
		return 0, err
	}
	if err := s.gapIn(i, i+1); err != nil {
		return 0, err
	}
	return s.Values[i], nil
}

func (s *Series) index(t time.Time) (int, error) {
	if t.Before(s.Start) || !t.Before(s.End()) {
		return 0, fmt.Errorf("%w: %s not in [%s, %s)", ErrOutOfRange,
			t.UTC().Format(time.RFC3339), s.Start.UTC().Format(time.RFC3339), s.End().UTC().Format(time.RFC3339))
	}
	return int(t.Sub(s.Start) / s.Step), nil
}

// floorIndex is the (possibly out-of-range) index of the step containing t.
func (s *Series) floorIndex(t time.Time) int {
	d := t.Sub(s.Start)
	i := d / s.Step
	if d%s.Step < 0 {
		i--
	}
	return int(i)
}

// ceilIndex is the index of the first step starting at or after t.
func (s *Series) ceilIndex(t time.Time) int {
	i := s.floorIndex(t)
	if s.TimeAt(i).Before(t) {
		i++
	}
	return i
}

// Mean is the time-weighted mean intensity over [from, to). The interval
// must be non-empty and lie inside the series, clear of its gaps. Steps
// partially covered count in proportion to their overlap, so Mean works
// for intervals that are not aligned to the step grid (e.g. a plan made on
// an hourly forecast evaluated on a 15-minute trace).
func (s *Series) Mean(from, to time.Time) (float64, error) {
	if !from.Before(to) {
		return 0, fmt.Errorf("%w: empty interval [%s, %s)", ErrOutOfRange, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	if from.Before(s.Start) || to.After(s.End()) {
		return 0, fmt.Errorf("%w: [%s, %s) not inside [%s, %s)", ErrOutOfRange,
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339),
			s.Start.UTC().Format(time.RFC3339), s.End().UTC().Format(time.RFC3339))
	}
	i0 := s.floorIndex(from)
	i1 := s.ceilIndex(to)
	if err := s.gapIn(i0, i1); err != nil {
		return 0, err
	}
	var sum float64
	for i := i0; i < i1; i++ {
		a, b := s.TimeAt(i), s.TimeAt(i+1)
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		sum += s.Values[i] * float64(b.Sub(a))
	}
	return sum / float64(to.Sub(from)), nil
}

// point is one timestamped reading with a human-readable origin
// ("line 12", "forecast[3]") used in error messages.
type point struct {
	t       time.Time
	v       float64
	where   string
	missing bool // a timestamp without a reading (an empty cell, a null)
}

// newestFirst reports whether every point is strictly older than the one
// before it, as in exports and API answers that list the latest reading
// first. Any other disorder is left for buildSeries to refuse.
func newestFirst(pts []point) bool {
	if len(pts) < 2 {
		return false
	}
	for i := 1; i < len(pts); i++ {
		if !pts[i].t.Before(pts[i-1].t) {
			return false
		}
	}
	return true
}

// dropRepeats drops a point that repeats the one before it, the same time
// with the same value or both without one (overlapping exports
// concatenated, an answer listing a reading twice), and refuses the same
// time with another value (ErrIrregular), naming the time and both values.
// pts is not modified.
func dropRepeats(pts []point) ([]point, error) {
	var out []point // nil until a point is dropped
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if !a.t.Equal(b.t) {
			if out != nil {
				out = append(out, b)
			}
			continue
		}
		if a.missing != b.missing || a.v != b.v {
			return nil, fmt.Errorf("%w: time %s is given twice with different values: %s (%s) and %s (%s)", ErrIrregular,
				b.t.UTC().Format(time.RFC3339), a.value(), a.where, b.value(), b.where)
		}
		if out == nil {
			out = append(make([]point, 0, len(pts)-1), pts[:i]...)
		}
	}
	if out == nil {
		return pts, nil
	}
	return out, nil
}

// value is the point's value for messages.
func (p point) value() string {
	if p.missing {
		return "no value"
	}
	return strconv.FormatFloat(p.v, 'g', -1, 64)
}

// inferStep is the most common of the spacings counted in count. Of
// equally common ones it takes the largest whose grid (from the first
// point) every point off it merely splits — it lies between two points on
// the grid one step apart —: rows at 00:00, 01:00, 01:30, 02:00 and 03:00
// are an hourly trace with a row off its grid (which buildSeries then
// refuses), not a 30-minute one with two readings missing. Otherwise the
// smallest: 00:00, 01:00 and 03:00 are an hourly trace with a reading
// missing.
func inferStep(pts []point, count map[time.Duration]int) time.Duration {
	best := 0
	var tied []time.Duration
	for d, n := range count {
		switch {
		case n > best:
			best, tied = n, append(tied[:0], d)
		case n == best:
			tied = append(tied, d)
		}
	}
	slices.Sort(tied)
	for _, d := range slices.Backward(tied[1:]) {
		if splitsOnly(pts, d) {
			return d
		}
	}
	return tied[0]
}

// splitsOnly: every point off the grid of d from pts[0] lies between two
// points on it d apart.
func splitsOnly(pts []point, d time.Duration) bool {
	on := func(i int) bool { return pts[i].t.Sub(pts[0].t)%d == 0 }
	prev := 0 // the last point on the grid
	for i := 1; i < len(pts); i++ {
		if on(i) {
			prev = i
			continue
		}
		next := i + 1
		for next < len(pts) && !on(next) {
			next++
		}
		if next == len(pts) || pts[next].t.Sub(pts[prev].t) != d {
			return false
		}
		i = next - 1
	}
	return true
}

// buildSeries turns time-ordered points (oldest first, or all newest
// first) into a regular Series: it drops repeated points (dropRepeats),
// infers the step as the most common spacing between consecutive points
// (inferStep breaks ties), checks that every spacing is a
// whole number of steps — a point off that grid is refused
// (ErrIrregular) naming it and the point before, rather than turning an
// hourly trace into a finer grid of interpolated values —, fills gaps of
// at most maxGap missing steps (an options value, see maxGapSteps)
// linearly and keeps longer ones as the series' gaps (placeholders in
// Values, linear too, that no use reads: see Series). Missing points count
// for the order and the step only: the series runs from the first reading
// to the last, and a missing point inside it is a missing step.
func buildSeries(pts []point, zone string, maxGap int) (*Series, error) {
	pts, err := dropRepeats(pts)
	if err != nil {
		return nil, err
	}
	readings := 0
	for _, p := range pts {
		if !p.missing {
			readings++
		}
	}
	if readings < 2 {
		return nil, fmt.Errorf("%w: need at least 2 readings to infer the step, got %d", ErrIrregular, readings)
	}
	if newestFirst(pts) {
		pts = slices.Clone(pts)
		slices.Reverse(pts)
	}
	count := map[time.Duration]int{}
	for i := 1; i < len(pts); i++ {
		d := pts[i].t.Sub(pts[i-1].t)
		if d <= 0 {
			return nil, fmt.Errorf("%w: %s: time %s is not after %s (%s)", ErrIrregular,
				pts[i].where, pts[i].t.UTC().Format(time.RFC3339), pts[i-1].t.UTC().Format(time.RFC3339), pts[i-1].where)
		}
		count[d]++
	}
	step := inferStep(pts, count)
	for i := 1; i < len(pts); i++ {
		if d := pts[i].t.Sub(pts[i-1].t); d%step != 0 {
			return nil, fmt.Errorf("%w: %s: time %s is %s after the reading before it (%s, %s): not on the trace's grid of %s "+
				"(its most common spacing, %d of %d); fix or remove that reading",
				ErrIrregular, pts[i].where, pts[i].t.UTC().Format(time.RFC3339), d, pts[i-1].where,
				pts[i-1].t.UTC().Format(time.RFC3339), step, count[step], len(pts)-1)
		}
	}
	maxGap = maxGapSteps(maxGap, step)
	if readings < len(pts) {
		pts = slices.DeleteFunc(slices.Clone(pts), func(p point) bool { return p.missing })
	}
	s := &Series{Start: pts[0].t.UTC(), Step: step, Zone: zone}
	s.Values = append(s.Values, pts[0].v)
	for i := 1; i < len(pts); i++ {
		d := pts[i].t.Sub(pts[i-1].t)
		missing := int(d/step) - 1
		if missing > maxGap {
			// Kept as a gap (placeholders below): refused where used.
			n := len(s.Values)
			s.gaps = append(s.gaps, gap{i0: n, i1: n + missing, max: maxGap, where: pts[i].where})
		}
		a, b := pts[i-1].v, pts[i].v
		for k := 1; k <= missing; k++ {
			f := float64(k) / float64(missing+1)
			s.Values = append(s.Values, a+(b-a)*f)
		}
		s.Values = append(s.Values, b)
	}
	return s, nil
}
