package carbon

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixed is a Forecaster that returns a given series or error.
type fixed struct {
	s   *Series
	err error
}

func (f fixed) Forecast(time.Time, time.Duration) (*Series, error) { return f.s, f.err }

func TestEvaluate(t *testing.T) {
	// 15-minute trace: hour h has quarters valued 10*h + q.
	tr := &Series{Start: t0, Step: 15 * time.Minute, Zone: "Q"}
	for h := range 6 {
		for q := range 4 {
			tr.Values = append(tr.Values, float64(10*h+q))
		}
	}
	job := Job{Work: time.Hour, Start: t0.Add(2 * time.Hour), Deadline: t0.Add(6 * time.Hour)}
	tests := []struct {
		name         string
		fc           Forecaster
		wantRealized float64
		wantPlanned  float64
		wantErr      error
	}{
		// Hourly forecast that wrongly prefers hour 4: realized is the
		// trace's mean over [4h, 5h) = 41.5.
		{"coarser forecast", fixed{s: &Series{Start: t0.Add(2 * time.Hour), Step: time.Hour, Values: []float64{9, 9, 1, 9}}}, 41.5, 1, nil},
		{"perfect", Perfect{tr}, 21.5, 21.5, nil},
		{"forecast error", fixed{err: errors.New("boom")}, 0, 0, nil},
		{"forecast too short", fixed{s: &Series{Start: t0.Add(2 * time.Hour), Step: time.Hour, Values: []float64{1}}}, 0, 0, ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Evaluate(tr, tc.fc, job)
			if tc.wantRealized == 0 { // the error cases
				require.Error(t, err)
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
				}
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tc.wantRealized, res.RealizedGPerKWh, 1e-12)
			assert.InDelta(t, tc.wantPlanned, res.PlannedGPerKWh, 1e-12)
			assert.InDelta(t, 21.5, res.BaselineGPerKWh, 1e-12)
			assert.InDelta(t, 21.5, res.OracleGPerKWh, 1e-12)
			assert.InDelta(t, 100*(21.5-tc.wantRealized)/21.5, res.SavingsPct, 1e-9)
			assert.InDelta(t, 0, res.OracleSavingsPct, 1e-12)
		})
	}
}
