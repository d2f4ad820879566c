package carbon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCSVZoneAndColumn: a zone the Electricity Maps export does not hold
// names the zones it holds (not "unrecognised header"); a column picks
// only an intensity column of an export, by short or header name, and is
// refused on a plain CSV, which has none.
func TestCSVZoneAndColumn(t *testing.T) {
	em := emHeader +
		emRow("2022-01-01 00:00:00", "ES", "133.64", "175.54") +
		emRow("2022-01-01 01:00:00", "ES", "139.1", "181.54")
	plain := "time,DE\n2020-01-01 00:00,1\n2020-01-01 01:00,2\n"
	tests := []struct {
		name   string
		in     string
		opts   CSVOptions
		want   []float64
		errIs  error
		errHas []string
		errNot string
	}{
		{name: "zone the export lacks", in: em, opts: CSVOptions{Zone: "FR"}, errIs: ErrZone,
			errHas: []string{`is for zone "ES", not "FR"`, "Zone Id"}, errNot: "unrecognised header"},
		{name: "zone it holds", in: em, opts: CSVOptions{Zone: "ES"}, want: []float64{133.64, 139.1}},
		{name: "lca by header name", in: em, opts: CSVOptions{Column: "Carbon Intensity gCO₂eq/kWh (LCA)"}, want: []float64{175.54, 181.54}},
		{name: "direct by short name", in: em, opts: CSVOptions{Column: "DIRECT"}, want: []float64{133.64, 139.1}},
		{name: "not an intensity column", in: em, opts: CSVOptions{Column: "Renewable Percentage"}, errIs: ErrHeader,
			errHas: []string{`column "Renewable Percentage" is not an intensity column`, `direct ("Carbon Intensity gCO₂eq/kWh (direct)")`, `lca ("Carbon Intensity gCO₂eq/kWh (LCA)")`}},
		{name: "a column on a plain CSV", in: plain, opts: CSVOptions{Column: "lca"}, errIs: ErrHeader,
			errHas: []string{`a column ("lca")`, "plain CSV", "leave the column out"}},
		{name: "plain CSV without a column", in: plain, want: []float64{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadCSVOptions(strings.NewReader(tc.in), tc.opts)
			if tc.errIs == nil {
				require.NoError(t, err)
				assert.Equal(t, tc.want, s.Values)
				return
			}
			require.ErrorIs(t, err, tc.errIs)
			require.ErrorIs(t, err, ErrHeader)
			for _, h := range tc.errHas {
				assert.Contains(t, err.Error(), h)
			}
			if tc.errNot != "" {
				assert.NotContains(t, err.Error(), tc.errNot)
			}
		})
	}
}

// TestGapErrorSaysHowToGoOn: a use of data inside a gap too long to fill
// says how to go on.
func TestGapErrorSaysHowToGoOn(t *testing.T) {
	s, err := ReadCSV(strings.NewReader("time,DE\n2020-01-01 00:00,1\n2020-01-01 01:00,1\n2020-01-01 02:00,1\n2020-01-01 09:00,1\n"), "")
	require.NoError(t, err)
	err = useAll(s)
	require.ErrorIs(t, err, ErrGap)
	assert.Contains(t, err.Error(), "before 2020-01-01T03:00:00Z or from 2020-01-01T09:00:00Z on — or fill in the missing readings")
}
