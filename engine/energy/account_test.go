package energy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cann-train/cann-train/engine/carbon"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }

// hourly intensity: high in the morning, low from 04:00.
var series = &carbon.Series{Start: t0, Step: time.Hour, Zone: "DE", Values: []float64{400, 400, 300, 300, 100, 100, 200, 200}}

const kWh = JoulesPerKWh

func TestAccount(t *testing.T) {
	tests := []struct {
		name        string
		ivs         []Interval
		runNow      time.Time
		wantKWh     float64
		wantG       float64
		wantPer     []float64 // grams per interval
		wantBaseG   float64
		wantSavings float64
	}{
		{"aligned, no baseline", []Interval{{at(4), at(5), 2 * kWh}, {at(5), at(6), 2 * kWh}}, time.Time{},
			4, 400, []float64{200, 200}, 0, 0},
		{"shifted to the low hours vs run now", []Interval{{at(4), at(5), 2 * kWh}, {at(5), at(6), 2 * kWh}}, at(0),
			4, 400, []float64{200, 200}, 1600, 75},
		{"unaligned uses the time-weighted mean", []Interval{{at(1.5), at(2.5), 1 * kWh}}, at(1.5),
			1, 350, []float64{350}, 350, 0},
		{"pause removed from the baseline", []Interval{{at(0), at(1), 1 * kWh}, {at(4), at(5), 1 * kWh}}, at(0),
			2, 500, []float64{400, 100}, 800, 37.5},
		{"worse than run now", []Interval{{at(6), at(8), 2 * kWh}}, at(4),
			2, 400, []float64{400}, 200, -100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Account(series, tc.ivs, tc.runNow)
			require.NoError(t, err)
			assert.InDelta(t, tc.wantKWh, rep.KWh, 1e-9)
			assert.InDelta(t, tc.wantG, rep.Grams, 1e-9)
			assert.InDelta(t, tc.wantG/tc.wantKWh, rep.GPerKWh, 1e-9)
			require.Len(t, rep.Intervals, len(tc.wantPer))
			for i, g := range tc.wantPer {
				assert.InDelta(t, g, rep.Intervals[i].Grams, 1e-9, "interval %d", i)
			}
			assert.Equal(t, !tc.runNow.IsZero(), rep.HasBaseline)
			assert.InDelta(t, tc.wantBaseG, rep.BaselineGrams, 1e-9)
			assert.InDelta(t, tc.wantSavings, rep.SavingsPct, 1e-9)
		})
	}
}

func TestAccountErrors(t *testing.T) {
	tests := []struct {
		name    string
		ivs     []Interval
		runNow  time.Time
		wantErr error
	}{
		{"overlap", []Interval{{at(0), at(2), 1}, {at(1), at(3), 1}}, time.Time{}, ErrInvalid},
		{"empty interval", []Interval{{at(1), at(1), 1}}, time.Time{}, ErrInvalid},
		{"negative energy", []Interval{{at(1), at(2), -1}}, time.Time{}, ErrInvalid},
		{"outside series", []Interval{{at(7), at(9), 1}}, time.Time{}, carbon.ErrOutOfRange},
		{"baseline outside series", []Interval{{at(4), at(6), 1}}, at(7), carbon.ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Account(series, tc.ivs, tc.runNow)
			require.ErrorIs(t, err, tc.wantErr)
		})
	}
	_, err := Account(&carbon.Series{}, nil, time.Time{})
	require.ErrorIs(t, err, carbon.ErrInvalidSeries)
}

func TestAccountantSamplesMeter(t *testing.T) {
	ctx := context.Background()
	// 2 devices × (400 W busy + 100 W idle) = 1 kW at full load.
	a := &Accountant{Meter: &ModelMeter{Model: Model{Devices: 2, BusyW: 400, IdleW: 100}}}
	for _, h := range []float64{4, 4.5, 5} {
		_, _, err := a.Sample(ctx, at(h))
		require.NoError(t, err)
	}
	a.Break() // paused 05:00–06:00: not charged
	_, ok, err := a.Sample(ctx, at(6))
	require.NoError(t, err)
	assert.False(t, ok, "first sample after a break only starts a run")
	iv, ok, err := a.Sample(ctx, at(7))
	require.NoError(t, err)
	require.True(t, ok)
	assert.InDelta(t, 1*kWh, iv.Joules, 1e-6)

	ivs := a.Intervals()
	require.Len(t, ivs, 3)
	assert.Equal(t, []Span{{at(4), at(5)}, {at(6), at(7)}}, Chunks(ivs))

	rep, err := a.Report(series, at(0))
	require.NoError(t, err)
	assert.InDelta(t, 2, rep.KWh, 1e-9)
	assert.InDelta(t, 100+200, rep.Grams, 1e-6)
	assert.InDelta(t, 400+400, rep.BaselineGrams, 1e-6)
	assert.InDelta(t, 62.5, rep.SavingsPct, 1e-9)

	require.ErrorIs(t, a.Add(Interval{at(6.5), at(8), 1}), ErrInvalid)
	_, _, err = (&Accountant{}).Sample(ctx, at(0))
	require.ErrorIs(t, err, ErrInvalid)
}
