package carbon

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ramp is a series of n steps of the given size whose value is its index.
func ramp(n int, step time.Duration) *Series {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i)
	}
	return &Series{Start: t0, Step: step, Values: v, Zone: "R"}
}

func TestForecasters(t *testing.T) {
	tr := ramp(24*4, time.Hour) // four days, value = hour index
	tests := []struct {
		name      string
		fc        Forecaster
		now       time.Time
		horizon   time.Duration
		wantStart time.Time
		want      []float64
		wantErr   error
	}{
		{"perfect aligned", Perfect{tr}, t0.Add(5 * time.Hour), 3 * time.Hour, t0.Add(5 * time.Hour), []float64{5, 6, 7}, nil},
		{"perfect unaligned covers now and end", Perfect{tr}, t0.Add(5*time.Hour + 30*time.Minute), 2 * time.Hour, t0.Add(5 * time.Hour), []float64{5, 6, 7}, nil},
		{"perfect past end", Perfect{tr}, t0.Add(95 * time.Hour), 2 * time.Hour, time.Time{}, nil, ErrOutOfRange},
		{"perfect zero horizon", Perfect{tr}, t0, 0, time.Time{}, nil, ErrOutOfRange},
		{"persistence day ahead", Persistence{tr}, t0.Add(30 * time.Hour), 3 * time.Hour, t0.Add(30 * time.Hour), []float64{6, 7, 8}, nil},
		{"persistence beyond a day goes back two days", Persistence{tr}, t0.Add(50 * time.Hour), 26 * time.Hour,
			t0.Add(50 * time.Hour), append(seq(26, 50), 26, 27), nil},
		{"persistence unaligned now", Persistence{tr}, t0.Add(30*time.Hour + 10*time.Minute), time.Hour, t0.Add(30 * time.Hour), []float64{6, 7}, nil},
		{"persistence no history", Persistence{tr}, t0.Add(10 * time.Hour), time.Hour, time.Time{}, nil, ErrNoHistory},
		{"persistence bad step", Persistence{ramp(100, 7*time.Hour)}, t0.Add(70 * time.Hour), time.Hour, time.Time{}, nil, ErrInvalidSeries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.fc.Forecast(tc.now, tc.horizon)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.True(t, tc.wantStart.Equal(f.Start), "start %s", f.Start)
			assert.Equal(t, tr.Step, f.Step)
			assert.Equal(t, tc.want, f.Values)
		})
	}
}

func seq(from, to int) []float64 {
	var out []float64
	for i := from; i < to; i++ {
		out = append(out, float64(i))
	}
	return out
}

func TestPerfectDoesNotAlias(t *testing.T) {
	tr := ramp(10, time.Hour)
	f, err := Perfect{tr}.Forecast(t0, 2*time.Hour)
	require.NoError(t, err)
	f.Values[0] = 99
	assert.Equal(t, 0.0, tr.Values[0])
}

// TestSeasonal: on a trace that repeats daily with a persistent offset
// after now, the seasonal forecast recovers the daily shape and carries the
// current anomaly into the next hours; it never reads an unfinished step.
func TestSeasonal(t *testing.T) {
	s := &Series{Start: t0, Step: time.Hour, Zone: "Z"}
	for d := range 10 {
		for h := range 24 {
			v := float64(100 + 10*h)
			if d == 9 {
				v += 50 // today runs 50 above the usual day
			}
			s.Values = append(s.Values, v)
		}
	}
	now := t0.Add(9*24*time.Hour + 6*time.Hour) // 06:00 on day 9: 00–05 finished
	f, err := Seasonal{Trace: s, Days: 7, Decay: 0.5}.Forecast(now, 4*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The anomaly at 05:00 is +50; one hour later it counts half, then a quarter…
	want := []float64{160 + 25, 170 + 12.5, 180 + 6.25, 190 + 3.125}
	for i, w := range want {
		if math.Abs(f.Values[i]-w) > 1e-9 {
			t.Errorf("step %d: %v, want %v", i, f.Values[i], w)
		}
	}
	// No history before the trace: a clear error.
	if _, err := (Seasonal{Trace: s}).Forecast(t0.Add(2*time.Hour), time.Hour); !errors.Is(err, ErrNoHistory) {
		t.Errorf("no history: %v", err)
	}
}
