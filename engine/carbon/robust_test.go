package carbon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// periodic is days of an hourly trace from t0 repeating day, with the
// values at the given hours (from t0) replaced.
func periodic(days int, day []float64, set map[int]float64) *Series {
	s := &Series{Start: t0, Step: time.Hour, Zone: "X"}
	for range days {
		s.Values = append(s.Values, day...)
	}
	for i, v := range set {
		s.Values[i] = v
	}
	return s
}

// twoWindows is a day at 300.3 g/kWh with two equal clean windows, 03–05
// and 15–17, at 50.1 (decimals: a mean of them carries rounding noise).
var twoWindows = func() []float64 {
	day := make([]float64, 24)
	for h := range day {
		day[h] = 300.3
		if h == 3 || h == 4 || h == 15 || h == 16 {
			day[h] = 50.1
		}
	}
	return day
}()

// TestOnlineEqualPricesTie: on an exactly periodic trace the online
// prices of equal steps are equal (they carried least-squares noise of
// ~1e-6, and the later of two equal windows could win), so the earliest
// window is planned, for both job kinds, both corrections and both
// forecasters (the seasonal one's means add noise of their own).
func TestOnlineEqualPricesTie(t *testing.T) {
	s := periodic(17, twoWindows, nil)
	start := t0.Add(15 * 24 * time.Hour)
	for fcName, fc := range map[string]Forecaster{"persistence": Persistence{s}, "seasonal": Seasonal{Trace: s}} {
		for _, interruptible := range []bool{true, false} {
			for _, p := range []Online{DefaultOnline(interruptible), {Correction: CorrectBias}} {
				name := fmt.Sprintf("%s/%s/%s", fcName, kindName(interruptible), p.Correction)
				job := Job{Work: 2 * time.Hour, Start: start, Deadline: start.Add(24 * time.Hour), Interruptible: interruptible}
				em, err := EstimateErrors(s, fc, start, 24*time.Hour, p.History, p.Correction)
				require.NoError(t, err)
				prices, err := p.Prices(s, fc, em, start, job.Deadline)
				require.NoError(t, err)
				for h := range 12 {
					require.InDelta(t, twoWindows[h], prices.Values[h], 1e-9, "%s: price at %02d:00", name, h)
					require.Equal(t, prices.Values[h], prices.Values[h+12], "%s: prices at %02d:00 and %02d:00 (%v)", name, h, h+12, prices.Values)
				}
				res, err := EvaluateOnline(s, fc, job, p)
				require.NoError(t, err)
				require.Len(t, res.Slots, 1, name)
				assert.Equal(t, start.Add(3*time.Hour), res.Slots[0].Start, "%s: the earlier window", name)
			}
		}
	}
}

// TestNoisyPricesTie: a fit whose coefficients carry rounding noise (here
// 1e-12 relative, different at every horizon; fitLinear's own is about
// 1e-14) still prices equal forecasts equally: prices are on a 1e-6 g/kWh
// grid, so the earliest of two equal windows is planned.
func TestNoisyPricesTie(t *testing.T) {
	s := periodic(17, twoWindows, nil)
	start := t0.Add(15 * 24 * time.Hour)
	em := ErrorModel{Step: time.Hour, Coef: make([][4]float64, 25), Sigma: make([]float64, 25), Samples: 100}
	for h := range em.Coef {
		noise := 1e-12 * float64((h*7)%5-2)
		em.Coef[h] = [4]float64{0, 1 + noise, 0, 0}
	}
	em.Coef[0] = [4]float64{0, 0, 1, 0}
	for _, interruptible := range []bool{true, false} {
		p := DefaultOnline(interruptible)
		prices, err := p.Prices(s, Persistence{s}, em, start, start.Add(24*time.Hour))
		require.NoError(t, err)
		for h := range 12 {
			require.Equal(t, prices.Values[h], prices.Values[h+12], "prices at %02d:00 and %02d:00", h, h+12)
		}
		job := Job{Work: 2 * time.Hour, Start: start, Deadline: start.Add(24 * time.Hour), Interruptible: interruptible}
		plan, err := Plan(prices, job)
		require.NoError(t, err)
		assert.Equal(t, start.Add(3*time.Hour), plan.Slots[0].Start, kindName(interruptible))
	}
	assert.Equal(t, 133.64, price(133.64), "a reading keeps its value")
	assert.Equal(t, 50.0, price(50.0000000001))
	assert.Equal(t, 0.0, price(-3))
}

// TestOnlineIgnoresGlitches: one absurd reading in the history week (or a
// few in a row) does not change what the online policy does: a job on a
// periodic trace (150 g/kWh at night and morning, 100 from noon) runs at
// 100 as without it. Before, one reading of 5000 sent it to 150 (0 %
// saved), and σ and the coefficients came out of that one reading.
func TestOnlineIgnoresGlitches(t *testing.T) {
	day := make([]float64, 24)
	for h := range day {
		day[h] = 150
		if h >= 12 {
			day[h] = 100
		}
	}
	at := 3*24 + 8 // day 4, 08:00
	start := t0.Add(8 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		set  map[int]float64
	}{
		{"clean", nil},
		{"spike 300", map[int]float64{at: 300}},
		{"spike 1000", map[int]float64{at: 1000}},
		{"spike 5000", map[int]float64{at: 5000}},
		{"a dip to 0", map[int]float64{at + 5: 0}},
		{"three readings of 3000", map[int]float64{at: 3000, at + 1: 3000, at + 2: 3000}},
		{"two spikes", map[int]float64{at: 5000, at + 30: 4000}},
	} {
		s := periodic(10, day, tc.set)
		for _, interruptible := range []bool{true, false} {
			t.Run(tc.name+"/"+kindName(interruptible), func(t *testing.T) {
				job := Job{Work: 4 * time.Hour, Start: start, Deadline: start.Add(24 * time.Hour), Interruptible: interruptible}
				res, err := EvaluateOnline(s, Persistence{s}, job, DefaultOnline(interruptible))
				require.NoError(t, err)
				assert.InDelta(t, 100, res.RealizedGPerKWh, 1e-9, "slots %v", res.Slots)
				em, err := EstimateErrors(s, Persistence{s}, start, 24*time.Hour, 0, CorrectLinear)
				require.NoError(t, err)
				for h := 1; h < len(em.Coef); h++ {
					require.Equal(t, [4]float64{0, 1, 0, 0}, em.Coef[h], "horizon %d: the history's forecasts are exact but for the glitch", h)
					require.Zero(t, em.Sigma[h], "horizon %d", h)
				}
			})
		}
	}
}

// TestGlitchesOnRealTraces: a reading of 5000 g/kWh in the week before a
// job leaves the online policy's error model almost as it is without it:
// the glitch's past forecasts are left out, not fitted. (Before, the
// corrected price of a typical step moved by tens of g/kWh.)
func TestGlitchesOnRealTraces(t *testing.T) {
	for _, rt := range realTraces {
		full := loadTrace(t, rt)
		for _, start := range []time.Time{full.Start.Add(40 * 24 * time.Hour), full.Start.Add(200 * 24 * time.Hour)} {
			s := traceWindow(full, start.Add(-16*24*time.Hour), start.Add(49*time.Hour))
			spiked := &Series{Start: s.Start, Step: s.Step, Zone: s.Zone, Values: append([]float64(nil), s.Values...)}
			spiked.Values[s.floorIndex(start.Add(-50*time.Hour))] = 5000
			var typical float64
			for _, v := range s.Values {
				typical += v / float64(len(s.Values))
			}
			clean, err := EstimateErrors(s, Persistence{s}, start, 48*time.Hour, 0, CorrectLinear)
			require.NoError(t, err)
			glitch, err := EstimateErrors(spiked, Persistence{spiked}, start, 48*time.Hour, 0, CorrectLinear)
			require.NoError(t, err)
			for h := 1; h < len(clean.Coef); h++ {
				pc, _ := clean.price(h, typical, typical, typical)
				pg, _ := glitch.price(h, typical, typical, typical)
				require.InDelta(t, pc, pg, 0.05*typical, "%s %s horizon %d: %v vs %v", rt.zone, start, h, clean.Coef[h], glitch.Coef[h])
				require.InDelta(t, clean.Sigma[h], glitch.Sigma[h], 0.1*clean.Sigma[h]+0.01*typical, "%s horizon %d: σ", rt.zone, h)
			}
		}
	}
}

// TestReadersRefuseAbsurdIntensities: a reading above MaxIntensity is
// refused where it is (a glitch or another unit), one at it is read.
func TestReadersRefuseAbsurdIntensities(t *testing.T) {
	rows := func(v string) string {
		return "time,ES\n2022-03-01 00:00,150\n2022-03-01 01:00," + v + "\n2022-03-01 02:00,150\n"
	}
	s, err := ReadCSV(strings.NewReader(rows("5000")), "")
	require.NoError(t, err)
	assert.Equal(t, []float64{150, 5000, 150}, s.Values)
	for _, v := range []string{"5000.5", "1e9", "180000"} {
		_, err := ReadCSV(strings.NewReader(rows(v)), "")
		require.ErrorIs(t, err, ErrBadValue, v)
		assert.Contains(t, err.Error(), `line 3 column 2 (ES): "`+v+`" is above 5000 g/kWh`)
	}
	js := `{"zone":"DE","history":[{"carbonIntensity":300,"datetime":"2022-03-01T00:00:00.000Z"},` +
		`{"carbonIntensity":6000,"datetime":"2022-03-01T01:00:00.000Z"}]}`
	_, err = ReadElectricityMapsHistory(strings.NewReader(js), JSONOptions{})
	require.ErrorIs(t, err, ErrBadValue)
	assert.Contains(t, err.Error(), "history[1].carbonIntensity: carbon: bad intensity value: 6000 is above 5000 g/kWh")
}
