package carbon

import (
	"bytes"
	"errors"
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
		{"long gap, refused where used", `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"2022-07-19T18:00:00Z"},{"carbonIntensity":1,"datetime":"2022-07-19T19:00:00Z"},{"carbonIntensity":1,"datetime":"2022-07-20T19:00:00Z"}]}`, ErrGap, "forecast[2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadElectricityMapsForecast(strings.NewReader(tc.in))
			if errors.Is(tc.wantErr, ErrGap) {
				require.NoError(t, err)
				err = useAll(s)
			}
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

// TestRepeatedReadings: every reader drops a reading repeated with the
// same time and value (or both without one), and refuses the same time
// with another value naming the time and both values where they are.
func TestRepeatedReadings(t *testing.T) {
	type reading struct {
		hour int
		v    string // a JSON number, or null: no value
	}
	h := func(n int) string { return time.Date(2024, 1, 1, n, 0, 0, 0, time.UTC).Format(time.RFC3339) }
	join := func(rs []reading, f func(r reading) string) string {
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = f(r)
		}
		return strings.Join(parts, ",")
	}
	sources := []struct {
		name  string
		nulls bool      // a null reads as a missing step
		where [2]string // where the second and third readings are named
		read  func(rs []reading) (*Series, error)
	}{
		{"csv", true, [2]string{"line 3", "line 4"}, func(rs []reading) (*Series, error) {
			in := "time,DE\n"
			for _, r := range rs {
				in += h(r.hour) + "," + strings.TrimPrefix(r.v, "null") + "\n"
			}
			return ReadCSVOptions(strings.NewReader(in), CSVOptions{})
		}},
		{"em history", true, [2]string{"history[1]", "history[2]"}, func(rs []reading) (*Series, error) {
			return ReadElectricityMapsHistory(strings.NewReader(`{"zone":"DE","history":[`+join(rs, func(r reading) string {
				return `{"carbonIntensity":` + r.v + `,"datetime":"` + h(r.hour) + `"}`
			})+`]}`), JSONOptions{})
		}},
		{"em forecast", false, [2]string{"forecast[1]", "forecast[2]"}, func(rs []reading) (*Series, error) {
			return ReadElectricityMapsForecastOptions(strings.NewReader(`{"zone":"DE","forecast":[`+join(rs, func(r reading) string {
				return `{"carbonIntensity":` + r.v + `,"datetime":"` + h(r.hour) + `"}`
			})+`]}`), JSONOptions{})
		}},
		{"casdk emissions", true, [2]string{"([1])", "([2])"}, func(rs []reading) (*Series, error) {
			return ReadCarbonAwareEmissions(strings.NewReader(`[`+join(rs, func(r reading) string {
				return `{"location":"x","time":"` + h(r.hour) + `","rating":` + r.v + `}`
			})+`]`), JSONOptions{})
		}},
		{"casdk forecasts", false, [2]string{"[0].forecastData[1]", "[0].forecastData[2]"}, func(rs []reading) (*Series, error) {
			fs, err := ReadCarbonAwareForecastsOptions(strings.NewReader(`[{"location":"x","forecastData":[`+join(rs, func(r reading) string {
				return `{"timestamp":"` + h(r.hour) + `","value":` + r.v + `}`
			})+`]}]`), JSONOptions{})
			if err != nil {
				return nil, err
			}
			return fs[0].Series, nil
		}},
		{"uk", false, [2]string{"data[1]", "data[2]"}, func(rs []reading) (*Series, error) {
			uk := func(n int) string { return time.Date(2024, 1, 1, n, 0, 0, 0, time.UTC).Format(ukTime) }
			return ReadUKIntensity(strings.NewReader(`{"data":[`+join(rs, func(r reading) string {
				return `{"from":"` + uk(r.hour) + `","to":"` + uk(r.hour+1) + `","intensity":{"forecast":` + r.v + `}}`
			})+`]}`), JSONOptions{})
		}},
	}
	tests := []struct {
		name   string
		rs     []reading // the second and third share a time
		nulls  bool      // only for sources where null is a missing step
		errHas []string  // nil: read as 10, 20, 30
	}{
		{name: "same value", rs: []reading{{0, "10"}, {1, "20"}, {1, "20"}, {2, "30"}}},
		{name: "other value", rs: []reading{{0, "10"}, {1, "20"}, {1, "25"}, {2, "30"}},
			errHas: []string{"time 2024-01-01T01:00:00Z is given twice with different values", "20 (", "25 ("}},
		{name: "both without a value", rs: []reading{{0, "10"}, {1, "null"}, {1, "null"}, {2, "30"}}, nulls: true},
		{name: "a value and none", rs: []reading{{0, "10"}, {1, "null"}, {1, "20"}, {2, "30"}}, nulls: true,
			errHas: []string{"time 2024-01-01T01:00:00Z is given twice with different values", "no value (", "20 ("}},
	}
	for _, src := range sources {
		for _, tc := range tests {
			if tc.nulls && !src.nulls {
				continue
			}
			t.Run(src.name+"/"+tc.name, func(t *testing.T) {
				s, err := src.read(tc.rs)
				if tc.errHas != nil {
					require.ErrorIs(t, err, ErrIrregular)
					for _, sub := range append(tc.errHas, src.where[0], src.where[1]) {
						assert.Contains(t, err.Error(), sub)
					}
					return
				}
				require.NoError(t, err)
				assert.Equal(t, time.Hour, s.Step)
				assert.True(t, s.Start.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)), "start %s", s.Start)
				assert.Equal(t, []float64{10, 20, 30}, s.Values)
			})
		}
	}
}
