package carbon

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestObservedPrices: the present step is priced at the latest measurement
// at or before now (never a later one), later steps at the forecast (the
// zero ErrorModel: no correction, no margin), with the measurement's age
// counted in forecast steps and refused beyond maxAge.
func TestObservedPrices(t *testing.T) {
	t0 := time.Date(2024, 3, 4, 8, 0, 0, 0, time.UTC)
	hourly := func(start time.Time, v ...float64) *Series { return &Series{Start: start, Step: time.Hour, Values: v} }
	// Forecast from 08:00: 300 until 12:00, then 100, 100, 300.
	f := hourly(t0, 300, 300, 300, 300, 100, 100, 300)
	now := t0.Add(2*time.Hour + 20*time.Minute) // 10:20, present step 10:00
	tests := []struct {
		name    string
		obs     *Series
		f       *Series
		now     time.Time
		em      ErrorModel
		margin  float64
		want    []float64
		wantAge int
		wantAt  time.Time
		wantErr error
		errHas  string
	}{
		{name: "present measured", obs: hourly(t0, 250, 240, 50), want: []float64{50, 300, 100, 100, 300}, wantAt: t0.Add(2 * time.Hour)},
		{name: "a measurement after now is not read", obs: hourly(t0, 250, 240, 50, 999), want: []float64{50, 300, 100, 100, 300}, wantAt: t0.Add(2 * time.Hour)},
		{name: "margin without an error model changes nothing", obs: hourly(t0, 250, 240, 50), margin: 1, want: []float64{50, 300, 100, 100, 300}, wantAt: t0.Add(2 * time.Hour)},
		{name: "one step old", obs: hourly(t0, 250, 240), want: []float64{240, 300, 100, 100, 300}, wantAge: 1, wantAt: t0.Add(time.Hour)},
		{name: "two steps old", obs: hourly(t0.Add(-time.Hour), 260, 250), want: []float64{250, 300, 100, 100, 300}, wantAge: 2, wantAt: t0},
		{name: "three steps old", obs: hourly(t0.Add(-2*time.Hour), 260, 250), wantErr: ErrNoObservation, errHas: "3 steps"},
		{name: "finer measurements", obs: &Series{Start: t0.Add(2 * time.Hour), Step: 5 * time.Minute, Values: []float64{60, 55, 50, 45, 40, 35}},
			want: []float64{40, 300, 100, 100, 300}, wantAt: t0.Add(2*time.Hour + 20*time.Minute)},
		{name: "coarser measurements overlap the present", obs: hourly(t0.Add(time.Hour), 240, 50),
			f:    &Series{Start: t0.Add(2 * time.Hour), Step: 30 * time.Minute, Values: []float64{300, 300, 300, 300}},
			now:  t0.Add(2*time.Hour + 40*time.Minute),
			want: []float64{50, 300, 300}, wantAt: t0.Add(2 * time.Hour)},
		{name: "forecast starts at the next step", obs: hourly(t0, 250, 240, 50), f: hourly(t0.Add(3*time.Hour), 300, 100, 100, 300),
			want: []float64{50, 300, 100, 100, 300}, wantAt: t0.Add(2 * time.Hour)},
		{name: "bias correction anchored at the measurement", obs: hourly(t0, 250, 240),
			em:   ErrorModel{Step: time.Hour, Coef: [][4]float64{{0, 0, 1, 0}, {0, 1, 1, -1}}, Sigma: []float64{0, 10}},
			want: []float64{240, 240, 40, 40, 240}, wantAge: 1, wantAt: t0.Add(time.Hour)},
		{name: "margin with an error model", obs: hourly(t0, 250, 240, 50), margin: 0.5,
			em:   ErrorModel{Step: time.Hour, Coef: [][4]float64{{0, 0, 1, 0}, {0, 1, 0, 0}}, Sigma: []float64{0, 10}},
			want: []float64{50, 305, 105, 105, 305}, wantAt: t0.Add(2 * time.Hour)},
		{name: "no measurements", wantErr: ErrNoObservation},
		{name: "measurements start after now", obs: hourly(t0.Add(3*time.Hour), 1, 2), wantErr: ErrNoObservation, errHas: "after the decision"},
		{name: "forecast does not cover now", obs: hourly(t0, 250, 240, 50), f: hourly(t0.Add(4*time.Hour), 1, 2), wantErr: ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc, at := f, now
			if tc.f != nil {
				fc = tc.f
			}
			if !tc.now.IsZero() {
				at = tc.now
			}
			p := Online{Margin: tc.margin}
			got, x, err := p.ObservedPrices(tc.obs, fc, tc.em, at, t0.Add(7*time.Hour), 2)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Contains(t, err.Error(), tc.errHas)
				return
			}
			require.NoError(t, err)
			assert.InDeltaSlice(t, tc.want, got.Values, 1e-9)
			assert.Equal(t, tc.wantAge, x.Age)
			assert.True(t, x.Start.Equal(tc.wantAt), "measured step %s, want %s", x.Start, tc.wantAt)
			assert.Equal(t, got.Values[0], x.Value)
			// The prices start at the present step, on the forecast's grid.
			assert.Equal(t, fc.Step, got.Step)
			assert.False(t, got.Start.After(at))
			assert.True(t, at.Before(got.Start.Add(got.Step)))
		})
	}
}

// The deadline cuts the prices, and the forecast's end cuts the deadline.
func TestObservedPricesDeadline(t *testing.T) {
	t0 := time.Date(2024, 3, 4, 8, 0, 0, 0, time.UTC)
	f := &Series{Start: t0, Step: time.Hour, Values: []float64{300, 200, 100}}
	obs := &Series{Start: t0.Add(-time.Hour), Step: time.Hour, Values: []float64{1, 2}}
	got, _, err := Online{}.ObservedPrices(obs, f, ErrorModel{}, t0, t0.Add(90*time.Minute), 2)
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 200}, got.Values)
	got, _, err = Online{}.ObservedPrices(obs, f, ErrorModel{}, t0, t0.Add(48*time.Hour), 2)
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 200, 100}, got.Values)
}

// The UK API's measurements are its actual field only: History fills the
// periods not yet measured with the forecast, Measured leaves them out, so
// the present is priced at the latest actual (a step old here, with the
// forecast of 12:30 in History's last place).
func TestUKMeasuredPricesThePresent(t *testing.T) {
	srv := replay(t, 200, "testdata/uk_fw48h.json", nil)
	p := &UKCarbonIntensity{Client: client(srv, "")}
	ctx := context.Background()
	for _, tc := range []struct {
		now     time.Time
		want    float64 // the present step's price
		wantAge int
	}{
		{time.Date(2018, 1, 20, 12, 10, 0, 0, time.UTC), 263, 0}, // forecast 266, actual 263
		{time.Date(2018, 1, 20, 12, 40, 0, 0, time.UTC), 263, 1}, // 12:30 not yet measured (forecast 259)
	} {
		m, err := p.Measured(ctx, tc.now.Add(-time.Hour), tc.now)
		require.NoError(t, err)
		assert.Equal(t, []float64{268, 263}, m.Values)
		h, err := p.History(ctx, tc.now.Add(-time.Hour), tc.now)
		require.NoError(t, err)
		assert.Equal(t, 259.0, h.Values[2], "History reads the forecast where actual is null")

		f, err := p.Forecast(ctx, tc.now, 2*time.Hour)
		require.NoError(t, err)
		got, x, err := DefaultOnline(true).ObservedPrices(m, f, ErrorModel{}, tc.now, tc.now.Add(2*time.Hour), 2)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got.Values[0], "now %s", tc.now)
		assert.Equal(t, tc.wantAge, x.Age)
		fnow, err := f.At(tc.now)
		require.NoError(t, err)
		assert.NotEqual(t, fnow, got.Values[0], "the present is the measurement, not the forecast")
		assert.Equal(t, f.Values[f.floorIndex(tc.now)+1:f.ceilIndex(tc.now.Add(2*time.Hour))], got.Values[1:])
	}

	// No period measured yet: nothing to observe.
	srv = replay(t, 200, `{"data":[{"from":"2018-01-20T12:00Z","to":"2018-01-20T12:30Z","intensity":{"forecast":266,"actual":null}},`+
		`{"from":"2018-01-20T12:30Z","to":"2018-01-20T13:00Z","intensity":{"forecast":259,"actual":null}}]}`, func(r *http.Request) {
		assert.Equal(t, "/intensity/2018-01-20T11:40Z/2018-01-20T12:40Z", r.URL.Path)
	})
	now := time.Date(2018, 1, 20, 12, 40, 0, 0, time.UTC)
	_, err := (&UKCarbonIntensity{Client: client(srv, "")}).Measured(ctx, now.Add(-time.Hour), now)
	require.ErrorIs(t, err, ErrIrregular)
}
