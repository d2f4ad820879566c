package carbon

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)

func hourly(vals ...float64) *Series {
	return &Series{Start: t0, Step: time.Hour, Values: vals, Zone: "X"}
}

func TestSeriesAt(t *testing.T) {
	s := hourly(10, 20, 30)
	tests := []struct {
		name    string
		at      time.Time
		want    float64
		wantErr error
	}{
		{"start", t0, 10, nil},
		{"inside second", t0.Add(90 * time.Minute), 20, nil},
		{"last instant", t0.Add(3*time.Hour - time.Nanosecond), 30, nil},
		{"end exclusive", t0.Add(3 * time.Hour), 0, ErrOutOfRange},
		{"before", t0.Add(-time.Second), 0, ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.At(tc.at)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSeriesMean(t *testing.T) {
	s := hourly(10, 20, 30)
	tests := []struct {
		name     string
		from, to time.Duration
		want     float64
		wantErr  bool
	}{
		{"one step", 0, time.Hour, 10, false},
		{"all", 0, 3 * time.Hour, 20, false},
		{"unaligned", 30 * time.Minute, 90 * time.Minute, 15, false},
		{"quarter", 2*time.Hour + 15*time.Minute, 2*time.Hour + 30*time.Minute, 30, false},
		{"empty", time.Hour, time.Hour, 0, true},
		{"past end", 2 * time.Hour, 4 * time.Hour, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Mean(t0.Add(tc.from), t0.Add(tc.to))
			if tc.wantErr {
				require.ErrorIs(t, err, ErrOutOfRange)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got, 1e-12)
		})
	}
}

func TestSeriesValidate(t *testing.T) {
	tests := []struct {
		name string
		s    *Series
		ok   bool
	}{
		{"ok", hourly(1, 2), true},
		{"nil", nil, false},
		{"zero step", &Series{Start: t0, Values: []float64{1}}, false},
		{"empty", &Series{Start: t0, Step: time.Hour}, false},
		{"negative", hourly(1, -1), false},
		{"nan", hourly(math.NaN()), false},
		{"inf", hourly(math.Inf(1)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.True(t, errors.Is(err, ErrInvalidSeries), "got %v", err)
			}
		})
	}
}
