package carbon

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGapRuleEverySource checks the configurable gap rule on each reader:
// the same hourly readings with two missing hours (00, 01, 04).
func TestGapRuleEverySource(t *testing.T) {
	h := func(n int) string { return time.Date(2024, 1, 1, n, 0, 0, 0, time.UTC).Format(time.RFC3339) }
	uk := func(n int) string { return time.Date(2024, 1, 1, n, 0, 0, 0, time.UTC).Format(ukTime) }
	sources := []struct {
		name string
		read func(maxGap int) (*Series, error)
	}{
		{"csv", func(m int) (*Series, error) {
			return ReadCSVOptions(strings.NewReader("time,DE\n"+h(0)+",10\n"+h(1)+",40\n"+h(4)+",10\n"), CSVOptions{MaxGapSteps: m})
		}},
		{"em forecast", func(m int) (*Series, error) {
			return ReadElectricityMapsForecastOptions(strings.NewReader(`{"zone":"DE","forecast":[{"carbonIntensity":10,"datetime":"`+h(0)+
				`"},{"carbonIntensity":40,"datetime":"`+h(1)+`"},{"carbonIntensity":10,"datetime":"`+h(4)+`"}]}`), JSONOptions{MaxGapSteps: m})
		}},
		{"em history", func(m int) (*Series, error) {
			return ReadElectricityMapsHistory(strings.NewReader(`{"zone":"DE","history":[{"carbonIntensity":10,"datetime":"`+h(0)+
				`"},{"carbonIntensity":40,"datetime":"`+h(1)+`"},{"carbonIntensity":null,"datetime":"`+h(2)+`"},{"carbonIntensity":10,"datetime":"`+h(4)+`"}]}`), JSONOptions{MaxGapSteps: m})
		}},
		{"casdk forecast", func(m int) (*Series, error) {
			fs, err := ReadCarbonAwareForecastsOptions(strings.NewReader(`[{"location":"x","forecastData":[{"timestamp":"`+h(0)+
				`","value":10},{"timestamp":"`+h(1)+`","value":40},{"timestamp":"`+h(4)+`","value":10}]}]`), JSONOptions{MaxGapSteps: m})
			if err != nil {
				return nil, err
			}
			return fs[0].Series, nil
		}},
		{"casdk emissions", func(m int) (*Series, error) {
			return ReadCarbonAwareEmissions(strings.NewReader(`[{"location":"x","time":"`+h(4)+`","rating":10,"duration":"01:00:00"},{"location":"x","time":"`+h(1)+
				`","rating":40},{"location":"x","time":"`+h(0)+`","rating":10}]`), JSONOptions{MaxGapSteps: m})
		}},
		{"uk", func(m int) (*Series, error) {
			return ReadUKIntensity(strings.NewReader(`{"data":[{"from":"`+uk(0)+`","to":"`+uk(1)+`","intensity":{"forecast":10}},{"from":"`+uk(1)+`","to":"`+uk(2)+
				`","intensity":{"forecast":40}},{"from":"`+uk(4)+`","to":"`+uk(5)+`","intensity":{"forecast":10,"actual":null}}]}`), JSONOptions{MaxGapSteps: m})
		}},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			for _, m := range []int{0, 2, 5} {
				s, err := src.read(m)
				require.NoError(t, err, "max %d", m)
				assert.InDeltaSlice(t, []float64{10, 40, 30, 20, 10}, s.Values, 1e-12)
			}
			for _, m := range []int{1, -1} {
				// The gap is kept: the series reads, and a use of the
				// data in the gap is refused.
				s, err := src.read(m)
				require.NoError(t, err, "max %d", m)
				require.Len(t, s.Gaps(), 1)
				err = useAll(s)
				require.ErrorIs(t, err, ErrGap, "max %d", m)
				var ge *GapError
				require.ErrorAs(t, err, &ge)
				assert.Equal(t, time.Date(2024, 1, 1, 2, 0, 0, 0, time.UTC), ge.Start)
				assert.Equal(t, time.Date(2024, 1, 1, 4, 0, 0, 0, time.UTC), ge.End)
				assert.Equal(t, 2, ge.Missing)
				assert.Contains(t, err.Error(), "no data from 2024-01-01T02:00:00Z to 2024-01-01T04:00:00Z")
			}
		})
	}
}

func TestReadUKIntensityErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		errHas  string
	}{
		{"bad from", `{"data":[{"from":"noon","to":"2018-01-20T12:30Z","intensity":{"forecast":1}}]}`, ErrBadTime, "data[0].from"},
		{"bad to", `{"data":[{"from":"2018-01-20T12:00Z","to":"","intensity":{"forecast":1}}]}`, ErrBadTime, "data[0].to"},
		{"negative", `{"data":[{"from":"2018-01-20T12:00Z","to":"2018-01-20T12:30Z","intensity":{"forecast":-1}}]}`, ErrBadValue, "data[0].intensity.forecast"},
		{"period disagrees", `{"data":[{"from":"2018-01-20T12:00Z","to":"2018-01-20T12:30Z","intensity":{"forecast":1}},{"from":"2018-01-20T12:30Z","to":"2018-01-20T13:30Z","intensity":{"forecast":1}}]}`, ErrIrregular, "data[1]"},
		{"single period", `{"data":[{"from":"2018-01-20T12:00Z","to":"2018-01-20T12:30Z","intensity":{"forecast":1}}]}`, ErrIrregular, "at least 2"},
		{"not json", `<html>`, nil, "decoding UK"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadUKIntensity(strings.NewReader(tc.in), JSONOptions{})
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.errHas)
		})
	}
}

func TestReadCarbonAwareEmissionsErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		errHas  string
	}{
		{"mixed locations", `[{"location":"a","time":"2022-08-23T14:00:00Z","rating":1},{"location":"b","time":"2022-08-23T14:05:00Z","rating":1}]`, ErrJSONAnswer, `"b" at [1].location`},
		{"duration disagrees", `[{"location":"a","time":"2022-08-23T14:00:00Z","rating":1,"duration":"00:10:00"},{"location":"a","time":"2022-08-23T14:05:00Z","rating":1}]`, ErrIrregular, "[0].duration"},
		{"bad duration", `[{"location":"a","time":"2022-08-23T14:00:00Z","rating":1,"duration":"5m"},{"location":"a","time":"2022-08-23T14:05:00Z","rating":1}]`, ErrBadValue, "[0].duration"},
		{"duplicate time", `[{"location":"a","time":"2022-08-23T14:00:00Z","rating":1},{"location":"a","time":"2022-08-23T14:00:00Z","rating":2}]`, ErrIrregular, "given twice with different values: 1 ([0]) and 2 ([1])"},
		{"bad time", `[{"location":"a","time":"later","rating":1}]`, ErrBadTime, "[0].time"},
		{"object", `{"location":"a"}`, nil, "decoding Carbon Aware SDK emissions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCarbonAwareEmissions(strings.NewReader(tc.in), JSONOptions{})
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.errHas)
			assert.NotContains(t, err.Error(), "header", "a JSON file has no header")
		})
	}
}

func TestParseTimeSpan(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"00:05:00", 5 * time.Minute, true},
		{"01:00:00", time.Hour, true},
		{"1.12:24:02", 36*time.Hour + 24*time.Minute + 2*time.Second, true},
		{"00:00:01.5000000", 1500 * time.Millisecond, true},
		{"5m", 0, false},
		{"24:00:00", 0, false},
		{"00:60:00", 0, false},
		{"-1.00:00:00", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTimeSpan(tc.in)
			if !tc.ok {
				require.ErrorIs(t, err, ErrBadValue)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A timestamp without a reading still shows the grid: readings at 0 h and
// 2 h with an empty one at 1 h are an hourly series with 1 h interpolated,
// not a two-hourly one.
func TestMissingReadingsSetTheStep(t *testing.T) {
	h := func(n int) string { return time.Date(2024, 1, 1, n, 0, 0, 0, time.UTC).Format(time.RFC3339) }
	tests := []struct {
		name string
		read func() (*Series, error)
	}{
		{"csv empty cell", func() (*Series, error) {
			return ReadCSV(strings.NewReader("time,DE\n"+h(0)+",10\n"+h(1)+",\n"+h(2)+",30\n"), "")
		}},
		{"em history null", func() (*Series, error) {
			return ReadElectricityMapsHistory(strings.NewReader(`{"zone":"DE","history":[{"carbonIntensity":10,"datetime":"`+h(0)+
				`"},{"carbonIntensity":null,"datetime":"`+h(1)+`"},{"carbonIntensity":30,"datetime":"`+h(2)+`"}]}`), JSONOptions{})
		}},
		{"casdk emissions null", func() (*Series, error) {
			return ReadCarbonAwareEmissions(strings.NewReader(`[{"location":"x","time":"`+h(0)+`","rating":10},{"location":"x","time":"`+h(1)+
				`","rating":null},{"location":"x","time":"`+h(2)+`","rating":30}]`), JSONOptions{})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.read()
			require.NoError(t, err)
			assert.Equal(t, time.Hour, s.Step)
			assert.InDeltaSlice(t, []float64{10, 20, 30}, s.Values, 1e-12)
		})
	}
}
