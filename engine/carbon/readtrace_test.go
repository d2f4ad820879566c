package carbon

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadTraceFixtures: every API answer of testdata reads through
// ReadTrace as through its own reader, to the same series or the same
// error (the UK one as a trace: actual where measured), and a CSV as
// ReadCSVOptions reads it.
func TestReadTraceFixtures(t *testing.T) {
	open := func(name string) *os.File {
		f, err := os.Open("testdata/" + name)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, tc := range []struct {
		file string
		zone string
		own  func() (*Series, error)
	}{
		{"em_history.json", "", func() (*Series, error) { return ReadElectricityMapsHistory(open("em_history.json"), JSONOptions{}) }},
		{"em_past_range.json", "", func() (*Series, error) { return ReadElectricityMapsHistory(open("em_past_range.json"), JSONOptions{}) }},
		{"em_forecast.json", "", func() (*Series, error) { return ReadElectricityMapsForecast(open("em_forecast.json")) }},
		{"uk_fw48h.json", "", func() (*Series, error) {
			return ReadUKIntensity(open("uk_fw48h.json"), JSONOptions{PreferActual: true})
		}},
		{"casdk_bylocation.json", "", func() (*Series, error) {
			return ReadCarbonAwareEmissions(open("casdk_bylocation.json"), JSONOptions{})
		}},
		{"casdk_forecasts.json", "northeurope", func() (*Series, error) {
			fs, err := ReadCarbonAwareForecasts(open("casdk_forecasts.json"))
			if err != nil {
				return nil, err
			}
			return SelectLocation(fs, "northeurope")
		}},
		{"../" + traceDir + "/ES_2022_hourly.csv", "", func() (*Series, error) {
			return ReadCSVOptions(open("../"+traceDir+"/ES_2022_hourly.csv"), CSVOptions{})
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			want, wantErr := tc.own()
			got, err := ReadTrace(open(tc.file), TraceOptions{Zone: tc.zone})
			if wantErr != nil { // em_past_range.json has a gap too long to fill
				require.EqualError(t, err, wantErr.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

// TestReadTraceShapes: UK regional answers (one region's periods, as an
// array or an object; every region per period, picked by short name or
// id), the byte-order mark, and the refusals: a document of no known
// shape names its keys; several forecast locations or regions and no zone
// name them.
func TestReadTraceShapes(t *testing.T) {
	period := func(from, to string, v int) string {
		return `{"from":"` + from + `","to":"` + to + `","intensity":{"forecast":` + strconv.Itoa(v) + `,"index":"low"}}`
	}
	periods := period("2024-03-01T00:00Z", "2024-03-01T00:30Z", 100) + "," + period("2024-03-01T00:30Z", "2024-03-01T01:00Z", 120)
	region := func(id int, name string, v int) string {
		return `{"regionid":` + strconv.Itoa(id) + `,"dnoregion":"x","shortname":"` + name + `","intensity":{"forecast":` + strconv.Itoa(v) + `,"index":"low"},"generationmix":[]}`
	}
	allRegions := `{"data":[{"from":"2024-03-01T00:00Z","to":"2024-03-01T00:30Z","regions":[` + region(13, "London", 100) + "," + region(1, "North Scotland", 5) + `]},` +
		`{"from":"2024-03-01T00:30Z","to":"2024-03-01T01:00Z","regions":[` + region(13, "London", 130) + "," + region(1, "North Scotland", 7) + `]}]}`
	start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	casdkPoints := `{"location":"x","timestamp":"2024-03-01T00:00:00Z","duration":30,"value":1},{"location":"x","timestamp":"2024-03-01T00:30:00Z","duration":30,"value":2}`
	for _, tc := range []struct {
		name, in, zone string
		wantZone       string
		want           []float64
		errHas         []string
	}{
		{name: "uk one region, array", in: `{"data":[{"regionid":13,"dnoregion":"UKPN London","shortname":"London","postcode":"SE1","data":[` + periods + `]}]}`,
			wantZone: "London", want: []float64{100, 120}},
		{name: "uk one region, object", in: `{"data":{"regionid":13,"shortname":"London","data":[` + periods + `]}}`,
			wantZone: "London", want: []float64{100, 120}},
		{name: "uk one region, object, another named", in: `{"data":{"regionid":13,"shortname":"London","data":[` + periods + `]}}`, zone: "Wales",
			errHas: []string{`region "London", not "Wales"`}},
		{name: "uk every region, by name", in: allRegions, zone: "north scotland", wantZone: "North Scotland", want: []float64{5, 7}},
		{name: "uk every region, by id", in: allRegions, zone: "13", wantZone: "London", want: []float64{100, 130}},
		{name: "uk every region, none named", in: allRegions, errHas: []string{"data[0].regions", "London", "North Scotland", "pass a zone"}},
		{name: "uk every region, unknown", in: allRegions, zone: "Mars", errHas: []string{`region "Mars" not among`}},
		{name: "one forecast location of several", in: `[{"location":"a","forecastData":[` + casdkPoints + `]},{"location":"b","forecastData":[` + casdkPoints + `]}]`,
			zone: "B", wantZone: "b", want: []float64{1, 2}},
		{name: "bom", in: "\ufeff" + `{"data":[` + periods + `]}`, wantZone: "GB", want: []float64{100, 120}},
		{name: "unknown shape", in: `{"zone":"DE","values":[1,2]}`, errHas: []string{`["values" "zone"]`, "none of the known answers"}},
		{name: "array of numbers", in: `[1,2,3]`, errHas: []string{"not valid JSON", "array of 1"}},
		{name: "broken json", in: `{"data":[`, errHas: []string{"not valid JSON"}},
		{name: "several forecast locations", in: `[{"location":"a","forecastData":[` + casdkPoints + `]},{"location":"b","forecastData":[` + casdkPoints + `]}]`,
			errHas: []string{`["a" "b"]`, "pass a zone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadTrace(strings.NewReader(tc.in), TraceOptions{Zone: tc.zone})
			if tc.errHas != nil {
				require.Error(t, err)
				for _, sub := range tc.errHas {
					assert.Contains(t, err.Error(), sub)
				}
				assert.NotContains(t, err.Error(), "header", "a JSON file has no header")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantZone, s.Zone)
			assert.Equal(t, 30*time.Minute, s.Step)
			assert.True(t, s.Start.Equal(start), "start %s", s.Start)
			assert.Equal(t, tc.want, s.Values)
		})
	}
}

// TestReadTraceZone: the zone asked for checks or selects in every JSON
// answer, without case as in a CSV: an Electricity Maps answer for another
// zone, a Carbon Aware SDK emissions answer without that location, a
// national UK answer asked for a region are refused naming what the file
// holds, in JSON words (ErrJSONAnswer, an ErrHeader without "header"), and
// a location is picked out of several.
func TestReadTraceZone(t *testing.T) {
	file := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		require.NoError(t, err)
		return string(b)
	}
	h := func(n int) string { return time.Date(2024, 3, 1, n, 0, 0, 0, time.UTC).Format(time.RFC3339) }
	emission := func(loc string, n, v int) string {
		return `{"location":"` + loc + `","time":"` + h(n) + `","rating":` + strconv.Itoa(v) + `,"duration":"01:00:00"}`
	}
	// /emissions/bylocations: each location's readings, newest first.
	byLocations := "[" + strings.Join([]string{emission("westus", 1, 20), emission("westus", 0, 10),
		emission("eastus", 1, 200), emission("eastus", 0, 100)}, ",") + "]"
	history := func(zone string, elemZone string) string {
		return `{"zone":"` + zone + `","history":[{"zone":"` + elemZone + `","carbonIntensity":10,"datetime":"` + h(0) +
			`"},{"zone":"` + elemZone + `","carbonIntensity":20,"datetime":"` + h(1) + `"}]}`
	}
	pastRange := `{"zone":"FR","data":[{"zone":"FR","carbonIntensity":10,"datetime":"` + h(0) +
		`"},{"zone":"FR","carbonIntensity":20,"datetime":"` + h(1) + `"}]}`
	for _, tc := range []struct {
		name, in, zone string
		wantZone       string
		want           []float64 // nil: not checked
		errHas         []string
	}{
		{name: "em history, its zone without case", in: file("em_history.json"), zone: "de", wantZone: "DE"},
		{name: "em history, another zone", in: file("em_history.json"), zone: "FR",
			errHas: []string{`zone: the Electricity Maps history is for zone "DE", not "FR"`}},
		{name: "em history, an element for another zone", in: history("", "DE"), zone: "FR",
			errHas: []string{`history[0].zone: the Electricity Maps history is for zone "DE", not "FR"`}},
		{name: "em history, no zone asked", in: history("DE", "DE"), wantZone: "DE", want: []float64{10, 20}},
		{name: "em past-range, its zone", in: pastRange, zone: "fr", wantZone: "FR", want: []float64{10, 20}},
		{name: "em past-range, another zone", in: pastRange, zone: "DE",
			errHas: []string{`zone: the Electricity Maps past-range answer is for zone "FR", not "DE"`}},
		{name: "em forecast, its zone", in: file("em_forecast.json"), zone: "De", wantZone: "DE"},
		{name: "em forecast, another zone", in: file("em_forecast.json"), zone: "FR",
			errHas: []string{`zone: the Electricity Maps forecast is for zone "DE", not "FR"`}},
		{name: "casdk emissions, its location", in: file("casdk_bylocation.json"), zone: "caiso_north", wantZone: "CAISO_NORTH"},
		{name: "casdk emissions, another location", in: file("casdk_bylocation.json"), zone: "eastus",
			errHas: []string{`location "eastus" not among the elements' locations ["CAISO_NORTH"]`}},
		{name: "casdk bylocations, one picked", in: byLocations, zone: "EastUS", wantZone: "eastus", want: []float64{100, 200}},
		{name: "casdk bylocations, the other picked", in: byLocations, zone: "westus", wantZone: "westus", want: []float64{10, 20}},
		{name: "casdk bylocations, none of them", in: byLocations, zone: "northeurope",
			errHas: []string{`location "northeurope" not among the elements' locations ["westus" "eastus"]`}},
		{name: "casdk bylocations, none asked", in: byLocations,
			errHas: []string{`several locations: "westus" at [0].location, "eastus" at [2].location`, "pass a zone"}},
		{name: "casdk forecasts, another location", in: file("casdk_forecasts.json"), zone: "eastus",
			errHas: []string{`location "eastus" not among ["northeurope" "westus"]`}},
		{name: "uk national, a region asked", in: file("uk_fw48h.json"), zone: "London",
			errHas: []string{"the answer is national", `no region "London"`, "regional answers"}},
		{name: "uk national, a region id asked", in: file("uk_fw48h.json"), zone: "13",
			errHas: []string{"the answer is national", `no region "13"`, "regional answers"}},
		{name: "uk national, GB asked", in: file("uk_fw48h.json"), zone: "gb", wantZone: "GB"},
		{name: "uk regional, its region", in: file("uk_regional_fw48h.json"), zone: "LONDON", wantZone: "London"},
		{name: "uk regional, another region", in: file("uk_regional_fw48h.json"), zone: "Wales",
			errHas: []string{`data: region "London", not "Wales"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadTrace(strings.NewReader(tc.in), TraceOptions{Zone: tc.zone})
			if tc.errHas != nil {
				require.ErrorIs(t, err, ErrJSONAnswer)
				require.ErrorIs(t, err, ErrHeader)
				for _, sub := range tc.errHas {
					assert.Contains(t, err.Error(), sub)
				}
				assert.NotContains(t, err.Error(), "header", "a JSON file has no header")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantZone, s.Zone)
			if tc.want != nil {
				assert.Equal(t, h(0), s.Start.Format(time.RFC3339))
				assert.Equal(t, tc.want, s.Values)
			}
		})
	}
}
