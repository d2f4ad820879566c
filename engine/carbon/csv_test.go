package carbon

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const emHeader = "Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA),Low Carbon Percentage,Renewable Percentage,Data Source,Data Estimated,Data Estimation Method\n"

func emRow(ts, zone string, direct, lca string) string {
	return ts + ",Spain,Spain," + zone + "," + direct + "," + lca + ",76.35,42.94,entsoe.eu,false,\n"
}

func TestReadCSV(t *testing.T) {
	em := emHeader +
		emRow("2022-01-01 00:00:00", "ES", "133.64", "175.54") +
		emRow("2022-01-01 01:00:00", "ES", "139.1", "181.54") +
		emRow("2022-01-01 02:00:00", "ES", "147.66", "191.58")
	tests := []struct {
		name      string
		in        string
		opts      CSVOptions
		wantZone  string
		wantStep  time.Duration
		wantStart time.Time
		want      []float64
		wantErr   error
		errHas    []string // substrings the error message must contain
	}{
		{name: "em direct", in: em, wantZone: "ES", wantStep: time.Hour, wantStart: t0, want: []float64{133.64, 139.1, 147.66}},
		{name: "em lca", in: em, opts: CSVOptions{Column: "lca"}, wantZone: "ES", wantStep: time.Hour, wantStart: t0, want: []float64{175.54, 181.54, 191.58}},
		{name: "em newer header, life cycle", in: "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%),Renewable energy percentage (RE%),Data source,Data estimated,Data estimation method\n" +
			strings.Join(strings.SplitAfter(em, "\n")[1:], ""), opts: CSVOptions{Column: "lca"}, wantZone: "ES", wantStep: time.Hour, wantStart: t0, want: []float64{175.54, 181.54, 191.58}},
		{name: "em zone given", in: em, opts: CSVOptions{Zone: "es"}, wantZone: "es", wantStep: time.Hour, wantStart: t0, want: []float64{133.64, 139.1, 147.66}},
		{name: "em bom", in: "\ufeff" + em, wantZone: "ES", wantStep: time.Hour, wantStart: t0, want: []float64{133.64, 139.1, 147.66}},
		{name: "em multi zone filtered", in: emHeader +
			emRow("2022-01-01 00:00:00", "ES", "1", "2") + emRow("2022-01-01 00:00:00", "PT", "9", "9") +
			emRow("2022-01-01 01:00:00", "ES", "3", "4") + emRow("2022-01-01 01:00:00", "PT", "9", "9"),
			opts: CSVOptions{Zone: "ES"}, wantZone: "ES", wantStep: time.Hour, wantStart: t0, want: []float64{1, 3}},
		{name: "em mixed zones without selection", in: emHeader +
			emRow("2022-01-01 00:00:00", "ES", "1", "2") + emRow("2022-01-01 00:00:00", "PT", "9", "9"),
			wantErr: ErrHeader, errHas: []string{"line 3", "PT"}},
		{name: "em zone absent", in: em, opts: CSVOptions{Zone: "FR"}, wantErr: ErrHeader, errHas: []string{"FR"}},
		{name: "em bad column", in: em, opts: CSVOptions{Column: "nope"}, wantErr: ErrHeader},
		{name: "plain 15min rfc3339", in: "time,DE\n2020-01-01T00:00:00Z,1\n2020-01-01T00:15:00Z,2\n2020-01-01T00:30:00+00:00,3\n",
			wantZone: "DE", wantStep: 15 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{1, 2, 3}},
		{name: "plain offset converted to UTC", in: "time,DE\n2020-01-01T01:00:00+01:00,1\n2020-01-01T02:00:00+01:00,2\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{1, 2}},
		{name: "plain several zones select", in: "time,DE,GB,FR\n2020-01-01 00:00:00,1,10,100\n2020-01-01 01:00:00,2,20,200\n",
			opts: CSVOptions{Zone: "gb"}, wantZone: "GB", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "plain several zones no selection", in: "time,DE,GB\n2020-01-01 00:00:00,1,10\n", wantErr: ErrHeader, errHas: []string{"DE", "GB"}},
		{name: "plain zone mismatch", in: "time,DE\n2020-01-01 00:00:00,1\n", opts: CSVOptions{Zone: "FR"}, wantErr: ErrHeader},
		{name: "no time column", in: "when,DE\n2020-01-01 00:00:00,1\n", wantErr: ErrHeader},
		{name: "watttime labels beside the value", in: "point_time,value,frequency,market,ba,datatype,version\n" +
			"2023-01-01T00:00:00+00:00,900.5,300,mer,CAISO_NORTH,moer,3.2\n2023-01-01T00:05:00+00:00,910,300,mer,CAISO_NORTH,moer,3.2\n",
			wantZone: "value", wantStep: 5 * time.Minute, wantStart: time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{900.5, 910}},
		{name: "a second time column and a zone name", in: "datetime,timestamp,zone_name,carbon_intensity_avg\n" +
			"2020-01-01T00:00:00.000Z,1577836800000,DE,300\n2020-01-01T01:00:00.000Z,1577840400000,DE,310\n",
			wantZone: "carbon_intensity_avg", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{300, 310}},
		{name: "interval columns, the actual reading", in: "from,to,forecast,actual,index\n2018-01-20T12:00Z,2018-01-20T12:30Z,266,263,moderate\n2018-01-20T12:30Z,2018-01-20T13:00Z,270,268,moderate\n",
			wantZone: "actual", wantStep: 30 * time.Minute, wantStart: time.Date(2018, 1, 20, 12, 0, 0, 0, time.UTC), want: []float64{263, 268}},
		{name: "several readings, none by name", in: "from,to,forecast,low,high\n2018-01-20T12:00Z,2018-01-20T12:30Z,266,263,270\n",
			wantErr: ErrHeader, errHas: []string{"forecast", "low", "high"}},
		{name: "older electricity maps export", in: "datetime,timestamp,zone_name,carbon_intensity_avg,carbon_intensity_production_avg,carbon_intensity_import_avg,total_production_avg,power_origin_percent_fossil_avg\n" +
			"2020-01-01T00:00:00.000Z,1577836800000,DE,300,290,350,50000,40\n2020-01-01T01:00:00.000Z,1577840400000,DE,310,300,340,51000,41\n",
			wantZone: "carbon_intensity_avg", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{300, 310}},
		{name: "older export, another column chosen", in: "datetime,zone_name,carbon_intensity_avg,carbon_intensity_production_avg\n" +
			"2020-01-01T00:00:00Z,DE,300,290\n2020-01-01T01:00:00Z,DE,310,300\n", opts: CSVOptions{Zone: "carbon_intensity_production_avg"},
			wantZone: "carbon_intensity_production_avg", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{290, 300}},
		{name: "two columns named as readings", in: "time,actual,carbon_intensity\n2020-01-01 00:00,1,2\n", wantErr: ErrHeader, errHas: []string{"several zone columns"}},
		{name: "interval columns, one reading chosen", in: "from,to,forecast,actual,index\n2018-01-20T12:00Z,2018-01-20T12:30Z,266,263,moderate\n2018-01-20T12:30Z,2018-01-20T13:00Z,270,268,moderate\n",
			opts: CSVOptions{Zone: "actual"}, wantZone: "actual", wantStep: 30 * time.Minute, wantStart: time.Date(2018, 1, 20, 12, 0, 0, 0, time.UTC), want: []float64{263, 268}},
		{name: "a label column named as the zone", in: "time,ba,value\n2020-01-01 00:00,X,1\n2020-01-01 01:00,X,2\n", opts: CSVOptions{Zone: "ba"}, wantErr: ErrBadValue},
		{name: "gap of one interpolated", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 00:15,20\n2020-01-01 00:45,40\n",
			wantZone: "DE", wantStep: 15 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30, 40}},
		{name: "gap of two interpolated", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,40\n2020-01-01 04:00,10\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 40, 30, 20, 10}},
		{name: "gap of three kept, refused where used", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,40\n2020-01-01 05:00,10\n",
			wantErr: ErrGap, errHas: []string{"line 4", "2020-01-01T02:00:00Z", "2020-01-01T05:00:00Z", "3 missing"}},
		{name: "5-minute grid, a 15-minute hole interpolated", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 00:05,20\n2020-01-01 00:25,60\n",
			wantZone: "DE", wantStep: 5 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30, 40, 50, 60}},
		{name: "5-minute grid, an hour missing interpolated", in: "time,DE\n2020-01-01 00:00,0\n2020-01-01 00:05,0\n2020-01-01 01:10,130\n",
			wantZone: "DE", wantStep: 5 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
			want: []float64{0, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130}},
		{name: "5-minute grid, over an hour kept, refused where used", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 00:05,20\n2020-01-01 01:15,60\n",
			wantErr: ErrGap, errHas: []string{"line 4", "13 missing", "at most 12"}},
		{name: "non-numeric", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,abc\n",
			wantErr: ErrBadValue, errHas: []string{"line 3", "column 2", "abc"}},
		{name: "empty value is a missing step", in: emHeader + emRow("2022-01-01 00:00:00", "ES", "10", "1") +
			emRow("2022-01-01 01:00:00", "ES", "", "1") + emRow("2022-01-01 02:00:00", "ES", "30", "1"),
			wantZone: "ES", wantStep: time.Hour, wantStart: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30}},
		{name: "empty values beyond the gap limit, refused where used", in: emHeader + emRow("2022-01-01 00:00:00", "ES", "10", "1") +
			emRow("2022-01-01 01:00:00", "ES", "", "1") + emRow("2022-01-01 02:00:00", "ES", "", "1") +
			emRow("2022-01-01 03:00:00", "ES", "", "1") + emRow("2022-01-01 04:00:00", "ES", "50", "1"),
			wantErr: ErrGap, errHas: []string{"line 6", "2022-01-01T01:00:00Z", "3 missing", "3 rows have no value in Carbon Intensity"}},
		{name: "only empty values", in: emHeader + emRow("2022-01-01 00:00:00", "ES", "", "1") + emRow("2022-01-01 01:00:00", "ES", "", "1"),
			wantErr: ErrIrregular, errHas: []string{"got 0", "2 rows have no value in"}},
		{name: "negative", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,-1\n",
			wantErr: ErrBadValue, errHas: []string{"line 3", "column 2"}},
		{name: "missing-value markers are missing steps", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,NaN\n2020-01-01 02:00,na\n2020-01-01 03:00,40\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30, 40}},
		{name: "missing-value markers beyond the gap limit, refused where used", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,NaN\n2020-01-01 02:00,null\n" +
			"2020-01-01 03:00,N/A\n2020-01-01 04:00,40\n",
			wantErr: ErrGap, errHas: []string{"line 6", "3 missing", "3 rows have no value in DE"}},
		{name: "infinity", in: "time,DE\n2020-01-01 00:00,Inf\n", wantErr: ErrBadValue, errHas: []string{"line 2", "Inf"}},
		{name: "bad time", in: "time,DE\n2020-01-01 00:00,10\n01/02/2020,10\n", wantErr: ErrBadTime, errHas: []string{"line 3", "column 1"}},
		{name: "semicolons", in: "time;DE\n2020-01-01 00:00;10\n2020-01-01 01:00;20\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "semicolons, decimal commas", in: "time;DE\n2020-01-01 00:00;212,5\n2020-01-01 01:00;20\n2020-01-01 02:00;0,25\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{212.5, 20, 0.25}},
		{name: "a quoted decimal comma between commas is not a number", in: "time,DE\n2020-01-01 00:00,\"212,5\"\n",
			wantErr: ErrBadValue, errHas: []string{"line 2", "212,5"}},
		{name: "semicolons, thousands separators are not guessed", in: "time;DE\n2020-01-01 00:00;1.212,5\n",
			wantErr: ErrBadValue, errHas: []string{"line 2", "1.212,5"}},
		{name: "only label columns", in: "time,zone\n2020-01-01 00:00,212\n2020-01-01 01:00,20\n",
			wantErr: ErrHeader, errHas: []string{"no zone column", `["zone"]`, "read as labels", "pass a zone"}},
		{name: "only label columns, one named", in: "time,zone\n2020-01-01 00:00,212\n2020-01-01 01:00,20\n", opts: CSVOptions{Zone: "zone"},
			wantZone: "zone", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{212, 20}},
		{name: "tabs", in: "time\tDE\n2020-01-01 00:00\t10\n2020-01-01 01:00\t20\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "UTC suffix, slashes, basic offset, fractions", in: "time,DE\n2020-01-01 00:00:00 UTC,1\n2020/01/01 01:00,2\n2020-01-01 03:00:00+0100,3\n2020-01-01 03:00:00.000,4\n2020-01-01 04:00:00.5 gmt,5\n",
			wantErr: ErrIrregular, errHas: []string{"line 6"}}, // the last is half a second off the grid: read, then refused
		{name: "UTC suffix, slashes, basic offset", in: "time,DE\n2020-01-01 00:00:00 UTC,1\n2020/01/01 01:00,2\n2020-01-01 03:00:00+0100,3\n2020-01-01 03:00:00.000,4\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{1, 2, 3, 4}},
		{name: "day first is ambiguous", in: "time,DE\n01/02/2020 00:00,1\n", wantErr: ErrBadTime, errHas: []string{"01/02/2020"}},
		{name: "offsets after a space, with minutes", in: "time,DE\n2022-02-25 01:00:00 +0100,1\n2022-02-25 02:00+0100,2\n" +
			"2022-02-25 03:00 +01:00,3\n2022-02-25T04:00:00 +0100,4\n2022-02-25T05:00+01:00,5\n2022-02-25 05:00:00.000 +0000,6\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2022, 2, 25, 0, 0, 0, 0, time.UTC), want: []float64{1, 2, 3, 4, 5, 6}},
		{name: "bad time names the accepted forms", in: "time,DE\n25.02.2022 01:00,1\n", wantErr: ErrBadTime,
			errHas: []string{`"25.02.2022 01:00"`, "RFC 3339", "YYYY-MM-DD HH:MM[:SS", "+01:00", "+0100", "after a space", "YYYY/MM/DD",
				`" UTC"`, "Unix seconds", "milliseconds"}},
		{name: "unix seconds", in: "timestamp,DE\n1577836800,10\n1577838600,20\n",
			wantZone: "DE", wantStep: 30 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "unix milliseconds", in: "timestamp,DE\n1577836800000,10\n1577837100000,20\n",
			wantZone: "DE", wantStep: 5 * time.Minute, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "offset times", in: "time,DE\n2020-01-01T01:00:00+01:00,10\n2020-01-01T02:00:00+01:00,20\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20}},
		{name: "repeated row dropped", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,1\n2020-01-01 01:00,1\n2020-01-01 02:00,2\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 1, 2}},
		{name: "duplicate time, other value", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,1\n2020-01-01 01:00,2\n",
			wantErr: ErrIrregular, errHas: []string{"time 2020-01-01T01:00:00Z is given twice with different values: 1 (line 3) and 2 (line 4)"}},
		{name: "duplicate time, a value and none", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,\n2020-01-01 01:00,2\n",
			wantErr: ErrIrregular, errHas: []string{"time 2020-01-01T01:00:00Z is given twice with different values: no value (line 3) and 2 (line 4)"}},
		{name: "repeated row without a value dropped", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,\n2020-01-01 01:00,\n2020-01-01 02:00,30\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30}},
		{name: "newest first", in: "time,DE\n2020-01-01 03:00,40\n2020-01-01 02:00,30\n2020-01-01 00:00,10\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), want: []float64{10, 20, 30, 40}},
		{name: "newest first, repeated row dropped", in: "time,DE\n2020-01-01 02:00,30\n2020-01-01 02:00,30\n2020-01-01 01:00,20\n",
			wantZone: "DE", wantStep: time.Hour, wantStart: time.Date(2020, 1, 1, 1, 0, 0, 0, time.UTC), want: []float64{20, 30}},
		{name: "newest first, then out of order", in: "time,DE\n2020-01-01 02:00,30\n2020-01-01 01:00,20\n2020-01-01 03:00,40\n",
			wantErr: ErrIrregular, errHas: []string{"line 3", "not after"}},
		{name: "off grid", in: "time,DE\n2020-01-01 00:00,10\n2020-01-01 01:00,1\n2020-01-01 02:30,1\n",
			wantErr: ErrIrregular, errHas: []string{"line 4"}},
		{name: "single row", in: "time,DE\n2020-01-01 00:00,10\n", wantErr: ErrIrregular},
		{name: "empty input", in: "", wantErr: ErrHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadCSVOptions(strings.NewReader(tc.in), tc.opts)
			if errors.Is(tc.wantErr, ErrGap) {
				// A long gap reads; a use of the data in it is refused.
				require.NoError(t, err)
				err = useAll(s)
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				for _, sub := range tc.errHas {
					assert.Contains(t, err.Error(), sub)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantZone, s.Zone)
			assert.Equal(t, tc.wantStep, s.Step)
			assert.True(t, tc.wantStart.Equal(s.Start), "start %s", s.Start)
			assert.InDeltaSlice(t, tc.want, s.Values, 1e-12)
		})
	}
}

func TestReadCSVRaggedRowNamesLine(t *testing.T) {
	_, err := ReadCSV(strings.NewReader("time,DE\n2020-01-01 00:00,1\n2020-01-01 01:00,1,7\n"), "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 3")
}

// FuzzReadCSV: any bytes give a valid series or an error, never a panic.
func FuzzReadCSV(f *testing.F) {
	f.Add([]byte(emHeader + emRow("2022-01-01 00:00:00", "ES", "1", "2") + emRow("2022-01-01 01:00:00", "ES", "", "2") +
		emRow("2022-01-01 02:00:00", "ES", "3", "4")))
	f.Add([]byte("time,DE\n2020-01-01 00:00,10\n2020-01-01 00:15,20\n2020-01-01 00:45,40\n"))
	f.Add([]byte("time;DE\n1577836800;10\n1577838600;x\n"))
	f.Add([]byte("\ufefftimestamp\tA\tB\n2020-01-01T00:00Z\t1\t2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadCSVOptions(bytes.NewReader(data), CSVOptions{})
		if err == nil {
			if verr := s.Validate(); verr != nil {
				t.Fatalf("accepted an invalid series: %v", verr)
			}
		}
	})
}
