package carbon

import (
	"bytes"
	"fmt"
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
		{"out of order", `[{"location":"x","forecastData":[{"timestamp":"2022-07-19T18:50:00Z","value":1},{"timestamp":"2022-07-19T18:45:00Z","value":1},{"timestamp":"2022-07-19T18:55:00Z","value":1}]}]`, ErrIrregular, "forecastData[1]"},
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

// FuzzReadJSON: whatever a provider sends (these bodies come from the
// network), every JSON reader, and ReadTrace, returns a valid series or an
// error, never a panic. Seeded with the recorded responses in testdata.
func FuzzReadJSON(f *testing.F) {
	for _, name := range []string{"em_forecast.json", "em_history.json", "em_past_range.json", "casdk_bylocation.json",
		"casdk_forecasts.json", "uk_fw48h.json"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"forecast":[{"carbonIntensity":1,"datetime":"2020-01-01T00:00:00Z"},{"carbonIntensity":null,"datetime":"x"}]}`))
	f.Add([]byte(`[{"forecastData":[{"timestamp":"2020-01-01T00:00:00Z","duration":0,"value":-1}]}]`))
	f.Add([]byte(`{"data":[{"from":"2020-01-01T00:00Z","to":"2020-01-01T00:00Z","intensity":{"forecast":1e400}}]}`))
	f.Add([]byte(`{"data":{"regionid":1,"shortname":"x","data":[{"from":"2020-01-01T00:00Z","to":"2020-01-01T00:30Z","intensity":{"forecast":1}}]}}`))
	f.Add([]byte(`{"data":[{"from":"2020-01-01T00:00Z","to":"2020-01-01T00:30Z","regions":[{"regionid":1,"intensity":{"forecast":1}}]}]}`))
	f.Add([]byte(`{"data":[{"regionid":null,"data":null}]}`))
	f.Add([]byte("time,DE\n2020-01-01 00:00,1\n2020-01-01 01:00,2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := func(reader string, s *Series, err error) {
			if err == nil {
				if s == nil {
					t.Fatalf("%s: nil series without an error", reader)
				}
				if verr := s.Validate(); verr != nil {
					t.Fatalf("%s accepted an invalid series: %v", reader, verr)
				}
			}
		}
		opts := JSONOptions{}
		s, err := ReadElectricityMapsForecastOptions(bytes.NewReader(data), opts)
		valid("ReadElectricityMapsForecast", s, err)
		s, err = ReadElectricityMapsHistory(bytes.NewReader(data), opts)
		valid("ReadElectricityMapsHistory", s, err)
		s, err = ReadCarbonAwareEmissions(bytes.NewReader(data), opts)
		valid("ReadCarbonAwareEmissions", s, err)
		for _, o := range []TraceOptions{{}, {Zone: "x"}, {Zone: "1"}} {
			s, err = ReadTrace(bytes.NewReader(data), o)
			valid("ReadTrace", s, err)
		}
		for _, z := range []string{"x", "1"} {
			s, err = ReadUKIntensity(bytes.NewReader(data), JSONOptions{Zone: z})
			valid("ReadUKIntensity", s, err)
		}
		for _, o := range []JSONOptions{{}, {PreferActual: true}, {ActualOnly: true, MaxGapSteps: -1}} {
			s, err = ReadUKIntensity(bytes.NewReader(data), o)
			valid("ReadUKIntensity", s, err)
		}
		fs, err := ReadCarbonAwareForecastsOptions(bytes.NewReader(data), opts)
		if err == nil {
			for i, fc := range fs {
				if fc.Series != nil {
					valid(fmt.Sprintf("ReadCarbonAwareForecasts[%d]", i), fc.Series, nil)
				}
			}
		}
	})
}
