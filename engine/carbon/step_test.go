package carbon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepIsTheMostCommonSpacing: the step is the most common spacing, so
// one reading off an hourly grid is refused naming its line (it named the
// first well-placed row after the smallest spacing, or turned the trace
// into a half-hour grid of interpolated values); missing rows and a finer
// stretch that dominates are read as before.
func TestStepIsTheMostCommonSpacing(t *testing.T) {
	t1 := time.Date(2022, 3, 1, 0, 0, 0, 0, time.UTC)
	// hours is a "time,ES" CSV of n hourly rows from t1 (line k+2 is hour
	// k), with the times of the given lines replaced and the given lines
	// left out.
	hours := func(n int, moved map[int]time.Duration, drop ...int) string {
		var b strings.Builder
		b.WriteString("time,ES\n")
		for k := range n {
			line := k + 2
			if containsInt(drop, line) {
				continue
			}
			at := t1.Add(time.Duration(k) * time.Hour)
			if d, ok := moved[line]; ok {
				at = at.Add(d)
			}
			fmt.Fprintf(&b, "%s,%d\n", at.Format("2006-01-02 15:04:05"), 100+k)
		}
		return b.String()
	}
	tests := []struct {
		name     string
		in       string
		wantStep time.Duration
		wantLen  int
		errHas   []string
	}{
		{"one row a minute late", hours(48, map[int]time.Duration{42: time.Minute}), 0, 0,
			[]string{"line 42: time 2022-03-02T16:01:00Z is 1h1m0s after the reading before it (line 41, 2022-03-02T15:00:00Z)",
				"not on the trace's grid of 1h0m0s (its most common spacing, 45 of 47)"}},
		{"one row a second late", hours(48, map[int]time.Duration{42: time.Second}), 0, 0, []string{"line 42:", "grid of 1h0m0s"}},
		{"one row at half past", hours(48, map[int]time.Duration{42: 30 * time.Minute}), 0, 0,
			[]string{"line 42: time 2022-03-02T16:30:00Z is 1h30m0s after", "grid of 1h0m0s"}},
		{"the first row off the grid", hours(48, map[int]time.Duration{2: -10 * time.Minute}), 0, 0,
			[]string{"line 3: time 2022-03-01T01:00:00Z is 1h10m0s after the reading before it (line 2"}},
		{"missing rows keep the hourly grid", hours(48, nil, 10, 20, 21), time.Hour, 48, nil},
		// Grids mixed: read on the most common one; where the other
		// does not fit it, that is named (resample such a file).
		{"a week of half hours after a day of hours", hours(24, nil) + halfHours(t1.Add(24*time.Hour), 24*7*2), 30 * time.Minute, 24*2 + 24*7*2, nil},
		{"a day of half hours after a week of hours", hours(24*7, nil) + halfHours(t1.Add(7*24*time.Hour), 48), 0, 0,
			[]string{"line 171: time 2022-03-08T00:30:00Z is 30m0s after the reading before it (line 170", "grid of 1h0m0s (its most common spacing, 168 of 215)"}},
		{"as many 1 h as 2 h spacings: the smaller", "time,ES\n2022-03-01 00:00,1\n2022-03-01 01:00,2\n2022-03-01 03:00,4\n", time.Hour, 4, nil},
		// A tie goes to the larger spacing where most rows lie on its
		// grid (the audit's offgrid.csv was read as a 30-minute trace
		// with 00:30 and 02:30 interpolated).
		{"as many 30 min as 1 h spacings, most rows hourly: the row off the hour", "time,ES\n2022-03-01 00:00,1\n2022-03-01 01:00,2\n2022-03-01 01:30,3\n2022-03-01 02:00,4\n2022-03-01 03:00,5\n", 0, 0,
			[]string{"line 4: time 2022-03-01T01:30:00Z is 30m0s after the reading before it", "grid of 1h0m0s (its most common spacing, 2 of 4)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadCSV(strings.NewReader(tc.in), "")
			if tc.errHas != nil {
				require.ErrorIs(t, err, ErrIrregular)
				for _, want := range tc.errHas {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantStep, s.Step)
			assert.Len(t, s.Values, tc.wantLen)
		})
	}
}

// halfHours is n half-hourly rows from at, without a header.
func halfHours(at time.Time, n int) string {
	var b strings.Builder
	for k := range n {
		fmt.Fprintf(&b, "%s,%d\n", at.Add(time.Duration(k)*30*time.Minute).Format("2006-01-02 15:04:05"), 50+k)
	}
	return b.String()
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
