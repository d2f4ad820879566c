package carbon

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadElectricityMapsForecastFixture(t *testing.T) {
	f, err := os.Open("testdata/em_forecast.json")
	require.NoError(t, err)
	defer f.Close()
	s, err := ReadElectricityMapsForecast(f)
	require.NoError(t, err)
	assert.Equal(t, "DE", s.Zone)
	assert.Equal(t, time.Hour, s.Step)
	assert.True(t, s.Start.Equal(time.Date(2022, 7, 19, 18, 0, 0, 0, time.UTC)))
	// 20:00 is missing and interpolated.
	assert.InDeltaSlice(t, []float64{320, 310, 300, 290, 280}, s.Values, 1e-12)
}

func TestReadElectricityMapsForecastErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		errHas  string
	}{
		{"not json", "{", nil, "decoding"},
		{"null value", `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"2022-07-19T18:00:00Z"},{"carbonIntensity":null,"datetime":"2022-07-19T19:00:00Z"}]}`, ErrBadValue, "forecast[1]"},
		{"negative", `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"2022-07-19T18:00:00Z"},{"carbonIntensity":-2,"datetime":"2022-07-19T19:00:00Z"}]}`, ErrBadValue, "forecast[1]"},
		{"bad time", `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"yesterday"}]}`, ErrBadTime, "forecast[0]"},
		{"long gap", `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"2022-07-19T18:00:00Z"},{"carbonIntensity":1,"datetime":"2022-07-19T19:00:00Z"},{"carbonIntensity":1,"datetime":"2022-07-20T19:00:00Z"}]}`, ErrGap, "forecast[2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadElectricityMapsForecast(strings.NewReader(tc.in))
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.errHas)
		})
	}
}

func TestReadCarbonAwareForecastsFixture(t *testing.T) {
	f, err := os.Open("testdata/casdk_forecasts.json")
	require.NoError(t, err)
	defer f.Close()
	fs, err := ReadCarbonAwareForecasts(f)
	require.NoError(t, err)
	require.Len(t, fs, 2)

	ne := fs[0]
	assert.Equal(t, "northeurope", ne.Location)
	assert.Equal(t, 10*time.Minute, ne.WindowSize)
	require.Len(t, ne.Optimal, 1)
	assert.Equal(t, 448.44, ne.Optimal[0].Value)
	assert.Equal(t, 5*time.Minute, ne.Series.Step)
	assert.True(t, ne.Series.Start.Equal(time.Date(2022, 7, 19, 18, 45, 0, 0, time.UTC)))
	assert.Equal(t, []float64{532.02, 500.5, 448.44, 460}, ne.Series.Values)

	// Singular optimalDataPoint (tutorial form) is accepted too.
	require.Len(t, fs[1].Optimal, 1)
	assert.Equal(t, 200.0, fs[1].Optimal[0].Value)

	s, err := SelectLocation(fs, "WESTUS")
	require.NoError(t, err)
	assert.Equal(t, []float64{210, 200}, s.Values)
	_, err = SelectLocation(fs, "eastus")
	require.ErrorIs(t, err, ErrHeader)

	// A plan on the SDK forecast agrees with the SDK's own optimal window.
	sc, err := Plan(ne.Series, Job{Work: ne.WindowSize, Start: ne.Series.Start, Deadline: ne.Series.End()})
	require.NoError(t, err)
	require.Len(t, sc.Slots, 1)
	assert.True(t, sc.Slots[0].Start.Equal(ne.Optimal[0].Timestamp), "plan %s, sdk %s", sc.Slots[0].Start, ne.Optimal[0].Timestamp)
}

func TestReadCarbonAwareForecastsErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		errHas  string
	}{
		{"object not array", `{"location":"x"}`, nil, "decoding"},
		{"duration mismatch", `[{"location":"x","forecastData":[{"timestamp":"2022-07-19T18:45:00Z","duration":10,"value":1},{"timestamp":"2022-07-19T18:50:00Z","duration":10,"value":1}]}]`, ErrIrregular, "forecastData[0].duration"},
		{"null value", `[{"location":"x","forecastData":[{"timestamp":"2022-07-19T18:45:00Z","duration":5}]}]`, ErrBadValue, "[0].forecastData[0]"},
		{"bad time", `[{"location":"x","forecastData":[{"timestamp":"soon","value":1}]}]`, ErrBadTime, "[0].forecastData[0].timestamp"},
		{"out of order", `[{"location":"x","forecastData":[{"timestamp":"2022-07-19T18:50:00Z","value":1},{"timestamp":"2022-07-19T18:45:00Z","value":1}]}]`, ErrIrregular, "forecastData[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCarbonAwareForecasts(strings.NewReader(tc.in))
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.errHas)
		})
	}
}
