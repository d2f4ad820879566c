package carbon

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// useAll reads all of s (its mean), as a use of the whole series does.
func useAll(s *Series) error {
	_, err := s.Mean(s.Start, s.End())
	return err
}

// hourlyCSV is a plain hourly trace of n readings from start, value(i) at
// step i, without the readings at the steps skip says.
func hourlyCSV(start time.Time, n int, value func(int) float64, skip func(int) bool) string {
	var b strings.Builder
	b.WriteString("time,XX\n")
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		fmt.Fprintf(&b, "%s,%g\n", start.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), value(i))
	}
	return b.String()
}

// TestGapKeptRefusedWhereUsed: a gap longer than the reader interpolates
// is kept in the series; At, Mean and Slice refuse exactly the ranges
// that overlap it, naming the gap, the range and how to go on, and serve
// the rest as before.
func TestGapKeptRefusedWhereUsed(t *testing.T) {
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	// Readings at 0–2 h and 7–9 h: 3 h–7 h (4 steps) missing.
	s, err := ReadCSV(strings.NewReader(hourlyCSV(t0, 10, func(i int) float64 { return float64(10 * i) },
		func(i int) bool { return i >= 3 && i < 7 })), "")
	require.NoError(t, err)
	require.Equal(t, []GapError{{Start: h(3), End: h(7), Missing: 4, Step: time.Hour, Max: 2, Where: "line 5"}}, s.Gaps())
	require.Len(t, s.Values, 10)
	tests := []struct {
		name     string
		from, to time.Time
		gap      bool
	}{
		{"before", h(0), h(3), false},
		{"after", h(7), h(10), false},
		{"one step before", h(2), h(3), false},
		{"into it", h(2), h(4), true},
		{"out of it", h(6), h(8), true},
		{"inside", h(4), h(5), true},
		{"the gap", h(3), h(7), true},
		{"across", h(0), h(10), true},
		{"partial steps around", h(2).Add(30 * time.Minute), h(7).Add(30 * time.Minute), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, merr := s.Mean(tc.from, tc.to)
			sl, serr := s.Slice(tc.from, tc.to)
			_, aerr := s.At(tc.from)
			if !tc.gap {
				require.NoError(t, merr)
				require.NoError(t, serr)
				require.NoError(t, aerr)
				assert.Empty(t, sl.Gaps())
				assert.Equal(t, s.Values[s.floorIndex(tc.from):s.ceilIndex(tc.to)], sl.Values)
				return
			}
			for _, err := range []error{merr, serr} {
				require.ErrorIs(t, err, ErrGap)
				var ge *GapError
				require.ErrorAs(t, err, &ge)
				assert.Equal(t, h(3), ge.Start)
				assert.Equal(t, h(7), ge.End)
				assert.Equal(t, s.TimeAt(s.floorIndex(tc.from)), ge.From)
				assert.Equal(t, s.TimeAt(s.ceilIndex(tc.to)), ge.To)
				assert.Contains(t, err.Error(), "line 5: no data from "+h(3).Format(time.RFC3339)+" to "+h(7).Format(time.RFC3339)+
					" (4 missing steps of 1h0m0s; at most 2 are interpolated), and "+ge.From.Format(time.RFC3339)+" to "+ge.To.Format(time.RFC3339)+" needs data there")
				assert.Contains(t, err.Error(), "before "+h(3).Format(time.RFC3339)+" or from "+h(7).Format(time.RFC3339)+" on — or fill in the missing readings")
			}
			if inGap := !tc.from.Before(h(3)) && tc.from.Before(h(7)); inGap {
				require.ErrorIs(t, aerr, ErrGap)
			}
		})
	}
	// Short gaps stay interpolated: no gap kept.
	s, err = ReadCSV(strings.NewReader(hourlyCSV(t0, 10, func(i int) float64 { return float64(10 * i) },
		func(i int) bool { return i >= 3 && i < 5 })), "")
	require.NoError(t, err)
	assert.Empty(t, s.Gaps())
	require.NoError(t, useAll(s))
	assert.InDeltaSlice(t, []float64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, s.Values, 1e-12)
}

// TestForecastersAroundGap: each forecaster is refused exactly when what
// it reads — the window itself (perfect), the day before (persistence),
// the days before and one step (seasonal) — overlaps a gap, and otherwise
// forecasts what it forecasts on the trace without the gap.
func TestForecastersAroundGap(t *testing.T) {
	value := func(i int) float64 { return 200 + 80*math.Sin(float64(i)*2*math.Pi/24) + float64(i%7) }
	day := func(d, hr int) time.Time { return t0.Add(time.Duration(24*d+hr) * time.Hour) }
	// Day 10, 05:00 to 15:00 missing.
	g0, g1 := int(day(10, 5).Sub(t0)/time.Hour), int(day(10, 15).Sub(t0)/time.Hour)
	whole, err := ReadCSV(strings.NewReader(hourlyCSV(t0, 24*20, value, nil)), "")
	require.NoError(t, err)
	gapped, err := ReadCSV(strings.NewReader(hourlyCSV(t0, 24*20, value, func(i int) bool { return i >= g0 && i < g1 })), "")
	require.NoError(t, err)
	require.Len(t, gapped.Gaps(), 1)
	fcs := map[string]func(*Series) Forecaster{
		"perfect":     func(s *Series) Forecaster { return Perfect{s} },
		"persistence": func(s *Series) Forecaster { return Persistence{s} },
		"seasonal":    func(s *Series) Forecaster { return Seasonal{Trace: s} },
	}
	tests := []struct {
		fc      string
		now     time.Time
		horizon time.Duration
		gap     bool
	}{
		{"perfect", day(2, 0), 48 * time.Hour, false},
		{"perfect", day(9, 0), 29 * time.Hour, false},
		{"perfect", day(9, 0), 30 * time.Hour, true},
		{"perfect", day(10, 14), time.Hour, true},
		{"perfect", day(10, 15), 24 * time.Hour, false},
		{"persistence", day(11, 0), 24 * time.Hour, true},
		{"persistence", day(11, 15), 24 * time.Hour, false},
		{"persistence", day(11, 14), 24 * time.Hour, true},
		{"persistence", day(11, 0), 5 * time.Hour, false}, // reads day 10, 00:00–05:00 only
		{"persistence", day(11, 0), 6 * time.Hour, true},
		{"persistence", day(10, 0), 48 * time.Hour, false}, // its window is not read
		{"seasonal", day(8, 0), 24 * time.Hour, false},
		{"seasonal", day(17, 15), 24 * time.Hour, true}, // the anomaly reads day 10, 14:00
		{"seasonal", day(17, 16), 24 * time.Hour, false},
		{"seasonal", day(12, 0), 6 * time.Hour, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s at %s for %s", tc.fc, tc.now.Format("02T15"), tc.horizon), func(t *testing.T) {
			want, err := fcs[tc.fc](whole).Forecast(tc.now, tc.horizon)
			require.NoError(t, err)
			got, err := fcs[tc.fc](gapped).Forecast(tc.now, tc.horizon)
			if tc.gap {
				require.ErrorIs(t, err, ErrGap)
				assert.Contains(t, err.Error(), "no data from "+day(10, 5).Format(time.RFC3339)+" to "+day(10, 15).Format(time.RFC3339))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

// cutRows is the real trace file with the rows whose time starts with
// one of drop left out.
func cutRows(t *testing.T, file string, drop ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(traceDir, file))
	require.NoError(t, err)
	var out bytes.Buffer
	n := 0
	for line := range bytes.Lines(b) {
		cut := false
		for _, d := range drop {
			cut = cut || bytes.HasPrefix(line, []byte(d))
		}
		if cut {
			n++
			continue
		}
		out.Write(line)
	}
	require.Equal(t, len(drop), n, "rows cut")
	return out.Bytes()
}

// esWithGap is the Spanish 2022 trace, whole and with 2022-06-01 10:00–
// 19:00 cut out (the audit's case: ten missing hours).
func esWithGap(t *testing.T) (whole, gapped *Series) {
	t.Helper()
	var drop []string
	for hr := 10; hr <= 19; hr++ {
		drop = append(drop, fmt.Sprintf("2022-06-01 %02d:00", hr))
	}
	whole = loadTrace(t, realTraces[0])
	gapped, err := ReadCSV(bytes.NewReader(cutRows(t, realTraces[0].file, drop...)), "ES")
	require.NoError(t, err)
	require.Equal(t, []GapError{{Start: time.Date(2022, 6, 1, 10, 0, 0, 0, time.UTC), End: time.Date(2022, 6, 1, 20, 0, 0, 0, time.UTC),
		Missing: 10, Step: time.Hour, Max: 2, Where: "line 3636"}}, gapped.Gaps())
	return whole, gapped
}

// TestPlanFarFromGapUnchanged: on the real Spanish trace with ten hours
// cut out in June, every policy and forecast plans a job in March exactly
// as on the whole trace; a job whose window, or the history its forecast
// reads, meets the gap is refused naming it.
func TestPlanFarFromGapUnchanged(t *testing.T) {
	whole, gapped := esWithGap(t)
	fcs := map[string]func(*Series) Forecaster{
		"perfect":     func(s *Series) Forecaster { return Perfect{s} },
		"persistence": func(s *Series) Forecaster { return Persistence{s} },
		"seasonal":    func(s *Series) Forecaster { return Seasonal{Trace: s} },
	}
	policies := map[string]func(tr *Series, fc Forecaster, job Job) (Result, error){
		"once":   Evaluate,
		"replan": EvaluateReplanned,
		"online": func(tr *Series, fc Forecaster, job Job) (Result, error) {
			return EvaluateOnline(tr, fc, job, DefaultOnline(job.Interruptible))
		},
	}
	march := time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC)
	jobs := []Job{
		{Work: 2 * time.Hour, Start: march, Deadline: march.Add(12 * time.Hour)},
		{Work: 10 * time.Hour, Start: march, Deadline: march.Add(48 * time.Hour), Interruptible: true},
		{Work: 10 * time.Hour, Start: march, Deadline: march.Add(48 * time.Hour), Interruptible: true, MinSlot: 3 * time.Hour},
	}
	for fcName, mk := range fcs {
		for polName, eval := range policies {
			for _, job := range jobs {
				want, err := eval(whole, mk(whole), job)
				require.NoError(t, err)
				got, err := eval(gapped, mk(gapped), job)
				require.NoError(t, err, "%s %s %+v", fcName, polName, job)
				assert.Equal(t, want, got, "%s %s %+v", fcName, polName, job)
			}
		}
	}
	at := func(m time.Month, d, hr int) time.Time { return time.Date(2022, m, d, hr, 0, 0, 0, time.UTC) }
	tests := []struct {
		name, fc string
		start    time.Time
		deadline time.Duration
		gap      bool
	}{
		{"window across the gap", "perfect", at(6, 1, 0), 12 * time.Hour, true},
		{"window ends at the gap", "perfect", at(5, 31, 22), 12 * time.Hour, false},
		{"window from the gap's end", "perfect", at(6, 1, 20), 12 * time.Hour, false},
		{"persistence reads the gap", "persistence", at(6, 2, 8), 12 * time.Hour, true},
		{"persistence a day after the gap", "persistence", at(6, 2, 20), 12 * time.Hour, false},
		{"seasonal reads the gap", "seasonal", at(6, 5, 8), 12 * time.Hour, true},
		{"seasonal a week and a step after the gap", "seasonal", at(6, 8, 21), 12 * time.Hour, false},
	}
	for _, tc := range tests {
		for polName, eval := range policies {
			t.Run(tc.name+"/"+polName, func(t *testing.T) {
				job := Job{Work: 2 * time.Hour, Start: tc.start, Deadline: tc.start.Add(tc.deadline), Interruptible: true}
				got, err := eval(gapped, fcs[tc.fc](gapped), job)
				if tc.gap {
					require.ErrorIs(t, err, ErrGap)
					assert.Contains(t, err.Error(), "line 3636: no data from 2022-06-01T10:00:00Z to 2022-06-01T20:00:00Z")
					return
				}
				require.NoError(t, err)
				if polName == "online" && tc.start.After(at(6, 1, 20)) {
					// Its error model reads the week before: after a gap,
					// the part after it, as on the trace cut there (with
					// the past forecasts that read the gap left out, as
					// those without history are; a seasonal forecast on
					// the cut trace averages fewer days instead).
					cut, err := gapped.Slice(at(6, 1, 20), gapped.End())
					require.NoError(t, err)
					want, err := eval(cut, fcs[tc.fc](cut), job)
					require.NoError(t, err)
					if tc.fc == "seasonal" {
						assert.Equal(t, want.Slots[0].End.Sub(want.Slots[0].Start), got.Slots[0].End.Sub(got.Slots[0].Start))
						return
					}
					assert.Equal(t, want, got)
					return
				}
				want, err := eval(whole, fcs[tc.fc](whole), job)
				require.NoError(t, err)
				assert.Equal(t, want, got)
			})
		}
	}
}

// TestOnlineHistoryAfterGap: the online policy's error model, which reads
// the week before the job, starts after a gap in it, as it starts at the
// trace's start: a job a few days after the gap is decided as on the
// trace cut at the gap — not refused, and not fitted on the
// placeholders in the gap.
func TestOnlineHistoryAfterGap(t *testing.T) {
	_, gapped := esWithGap(t)
	cut, err := gapped.Slice(time.Date(2022, 6, 1, 20, 0, 0, 0, time.UTC), gapped.End())
	require.NoError(t, err)
	start := time.Date(2022, 6, 4, 8, 0, 0, 0, time.UTC)
	for _, job := range []Job{
		{Work: 3 * time.Hour, Start: start, Deadline: start.Add(24 * time.Hour)},
		{Work: 10 * time.Hour, Start: start, Deadline: start.Add(48 * time.Hour), Interruptible: true, MinSlot: 2 * time.Hour},
	} {
		p := DefaultOnline(job.Interruptible)
		em, err := EstimateErrors(gapped, Persistence{gapped}, start, 48*time.Hour, 0, p.Correction)
		require.NoError(t, err)
		emCut, err := EstimateErrors(cut, Persistence{cut}, start, 48*time.Hour, 0, p.Correction)
		require.NoError(t, err)
		assert.Equal(t, emCut, em)
		assert.Equal(t, int(start.Sub(time.Date(2022, 6, 2, 20, 0, 0, 0, time.UTC))/time.Hour), em.Samples,
			"past forecasts from a day after the gap's end on")
		want, err := EvaluateOnline(cut, Persistence{cut}, job, p)
		require.NoError(t, err)
		got, err := EvaluateOnline(gapped, Persistence{gapped}, job, p)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

// TestObservedAroundGap: a live provider's measurements with a gap around
// now price the present at the last reading before it (older, so its age
// counts); a forecast with a gap where the plan reads it is refused.
func TestObservedAroundGap(t *testing.T) {
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	obs, err := ReadCSV(strings.NewReader(hourlyCSV(t0, 10, func(i int) float64 { return float64(100 + i) },
		func(i int) bool { return i >= 3 && i < 7 })), "")
	require.NoError(t, err)
	f := &Series{Start: h(5), Step: time.Hour, Values: []float64{50, 60, 70, 80}}
	tests := []struct {
		name    string
		now     time.Time
		maxAge  int
		want    Observation
		wantErr error
	}{
		{"in the gap: the reading before it", h(5).Add(10 * time.Minute), 5, Observation{Start: h(2), Step: time.Hour, Value: 102, Age: 3}, nil},
		{"in the gap, too old", h(5), 2, Observation{}, ErrNoObservation},
		{"after the gap", h(7), 0, Observation{Start: h(7), Step: time.Hour, Value: 107}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ff := f
			if tc.now.Equal(h(7)) {
				ff = &Series{Start: h(7), Step: time.Hour, Values: []float64{50, 60}}
			}
			prices, x, err := Online{}.ObservedPrices(obs, ff, ErrorModel{}, tc.now, ff.End(), tc.maxAge)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, x)
			assert.Equal(t, tc.want.Value, prices.Values[0])
		})
	}
	// A forecast with a long gap: refused where the plan reads it.
	fg, err := ReadElectricityMapsForecastOptions(strings.NewReader(`{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"`+h(7).Format(time.RFC3339)+`"},`+
		`{"carbonIntensity":2,"datetime":"`+h(8).Format(time.RFC3339)+`"},{"carbonIntensity":3,"datetime":"`+h(12).Format(time.RFC3339)+`"}]}`), JSONOptions{})
	require.NoError(t, err)
	_, _, err = Online{}.ObservedPrices(obs, fg, ErrorModel{}, h(7), fg.End(), 2)
	require.ErrorIs(t, err, ErrGap)
	assert.Contains(t, err.Error(), "forecast[2]")
	// Online.Prices on a trace whose present lies in a gap.
	_, err = Online{}.Prices(obs, Perfect{obs}, ErrorModel{}, h(4), h(9))
	require.ErrorIs(t, err, ErrGap)
	assert.Contains(t, err.Error(), "the observed present at "+h(4).Format(time.RFC3339))
}
