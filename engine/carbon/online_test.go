package carbon

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnlineNoFuture: the decision (and plan) at time t, the error model
// and the whole run's slots before t do not change when the trace after
// the present step is altered.
func TestOnlineNoFuture(t *testing.T) {
	for _, rt := range realTraces {
		full := loadTrace(t, rt)
		rng := rand.New(rand.NewPCG(11, uint64(len(rt.zone))))
		for trial := range 12 {
			interruptible := trial%2 == 1
			lo := full.Start.Add(10 * 24 * time.Hour)
			start := lo.Add(time.Duration(rng.Int64N(int64(full.End().Add(-60*time.Hour).Sub(lo)/time.Minute))) * time.Minute)
			job := Job{Work: 10 * time.Hour, Start: start, Deadline: start.Add(48 * time.Hour), Interruptible: interruptible}
			if trial%4 == 3 {
				job.MinSlot = 3 * time.Hour
			}
			s := traceWindow(full, start.Add(-16*24*time.Hour), job.Deadline.Add(full.Step))
			i := s.ceilIndex(start) + rng.IntN(30*int(time.Hour/s.Step))
			now := s.TimeAt(i)
			for _, p := range []Online{DefaultOnline(interruptible), {Correction: CorrectBias, Margin: 1}, {Correction: CorrectLinear, Lag: s.Step}} {
				alt := &Series{Start: s.Start, Step: s.Step, Zone: s.Zone, Values: append([]float64(nil), s.Values...)}
				for j := i + 1; j < len(alt.Values); j++ {
					alt.Values[j] = 1000 * rng.Float64()
				}
				decideAt := func(tr *Series) (bool, Schedule, ErrorModel) {
					em, err := EstimateErrors(tr, Persistence{tr}, s.TimeAt(s.ceilIndex(start)).Add(-p.Lag), job.Deadline.Sub(start)+time.Hour, p.History, p.Correction)
					require.NoError(t, err)
					st := OnlineState{Job: job, Now: now, Remaining: 5 * time.Hour, RunLength: 0}
					run, plan, err := p.Decide(tr, Persistence{tr}, em, st)
					require.NoError(t, err)
					fast, _, err := p.decide(tr, Persistence{tr}, em, st, false, &dpScratch{})
					require.NoError(t, err)
					require.Equal(t, run, fast, "fast path and Plan disagree")
					return run, plan, em
				}
				r1, p1, e1 := decideAt(s)
				r2, p2, e2 := decideAt(alt)
				assert.Equal(t, r1, r2, "%s trial %d: decision at %s depends on the future", rt.zone, trial, now)
				assert.Equal(t, p1, p2)
				assert.Equal(t, e1, e2)

				// The whole run: slots before now are the same.
				res1, err := EvaluateOnline(s, Persistence{s}, job, p)
				require.NoError(t, err)
				res2, err := EvaluateOnline(alt, Persistence{alt}, job, p)
				require.NoError(t, err)
				assert.Equal(t, slotsBefore(res1.Slots, now), slotsBefore(res2.Slots, now), "%s trial %d", rt.zone, trial)
			}
		}
	}
}

// slotsBefore clips slots (times only) to before t.
func slotsBefore(slots []Slot, t time.Time) []Slot {
	var out []Slot
	for _, s := range slots {
		if !s.Start.Before(t) {
			break
		}
		out = append(out, Slot{Start: s.Start, End: minTime(s.End, t)})
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestOnlinePerfectIsOracle: with the perfect forecast (errors all zero,
// nothing to correct) the online policy realizes the oracle's cost, and
// its fast decisions equal Plan's, on many real jobs of both kinds.
func TestOnlinePerfectIsOracle(t *testing.T) {
	for _, rt := range realTraces {
		full := loadTrace(t, rt)
		rng := rand.New(rand.NewPCG(5, uint64(len(rt.zone))))
		for trial := range 16 {
			n := 1 + rng.IntN(24)
			slack := rng.IntN(48)
			lo := full.Start.Add(8 * 24 * time.Hour)
			start := lo.Add(time.Duration(rng.Int64N(int64(full.End().Add(-80*time.Hour).Sub(lo)/time.Minute))) * time.Minute)
			job := Job{Work: time.Duration(n) * time.Hour, Start: start, Deadline: start.Add(time.Duration(n+slack+1) * time.Hour), Interruptible: trial%2 == 1}
			s := traceWindow(full, start.Add(-9*24*time.Hour), job.Deadline.Add(full.Step))
			for _, p := range []Online{DefaultOnline(job.Interruptible), {Correction: CorrectBias, Margin: 0.5}} {
				res, err := EvaluateOnline(s, Perfect{s}, job, p)
				require.NoError(t, err, "%s trial %d", rt.zone, trial)
				assert.InDelta(t, res.OracleGPerKWh, res.RealizedGPerKWh, 1e-9, "%s trial %d %+v", rt.zone, trial, job)
				checkRealizedSlots(t, job, s.Step, res.Slots)
			}
		}
	}
}

func TestOnlineSmall(t *testing.T) {
	h := time.Hour
	// 4 days of history with a repeating day, then the job's day.
	day := []float64{5, 4, 3, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2, 3, 4, 5, 6}
	tr := &Series{Start: t0, Step: h, Zone: "T"}
	for range 5 {
		tr.Values = append(tr.Values, day...)
	}
	start := t0.Add(4 * 24 * h)
	em, err := EstimateErrors(tr, Persistence{tr}, start, 24*h, 0, CorrectLinear)
	require.NoError(t, err)
	require.Equal(t, 72, em.Samples) // forecasts from hour 24 on (persistence needs a day, two beyond 24 h ahead)
	t.Run("threshold rule", func(t *testing.T) {
		job := Job{Work: 2 * h, Start: start, Deadline: start.Add(8 * h), Interruptible: true}
		res, err := EvaluateOnline(tr, Persistence{tr}, job, DefaultOnline(true))
		require.NoError(t, err)
		assert.Equal(t, []Slot{{Start: start.Add(3 * h), End: start.Add(5 * h), MeanIntensity: 1.5}}, res.Slots)
	})
	t.Run("no history: plain forecast", func(t *testing.T) {
		m, err := EstimateErrors(tr, Persistence{tr}, t0.Add(h), 24*h, 0, CorrectLinear)
		require.NoError(t, err)
		assert.Zero(t, m.Samples)
		v, sigma := m.price(3, 7, 1, 2)
		assert.Equal(t, 7.0, v)
		assert.Zero(t, sigma)
	})
	t.Run("little history: the forecast as it is", func(t *testing.T) {
		// Ten past forecasts (hours 24–33): below minFitSamples, so no
		// horizon is corrected; with 72 (above) the fit moves some.
		short, err := EstimateErrors(tr, Persistence{tr}, t0.Add(34*h), 6*h, 0, CorrectLinear)
		require.NoError(t, err)
		require.Equal(t, 10, short.Samples)
		for hz := 1; hz < len(short.Coef); hz++ {
			assert.Equal(t, [4]float64{0, 1, 0, 0}, short.Coef[hz], "horizon %d", hz)
		}
		noisy := *tr
		noisy.Values = append([]float64(nil), tr.Values...)
		for i := range noisy.Values {
			noisy.Values[i] += float64(i % 7) // breaks the daily repetition
		}
		long, err := EstimateErrors(&noisy, Persistence{&noisy}, start, 6*h, 0, CorrectLinear)
		require.NoError(t, err)
		require.GreaterOrEqual(t, long.Samples, minFitSamples)
		assert.NotEqual(t, [4]float64{0, 1, 0, 0}, long.Coef[1])
	})
	t.Run("deadline too short", func(t *testing.T) {
		job := Job{Work: 10 * h, Start: start, Deadline: start.Add(8 * h)}
		_, err := EvaluateOnline(tr, Persistence{tr}, job, DefaultOnline(false))
		require.ErrorIs(t, err, ErrDeadlineTooShort)
		_, _, err = DefaultOnline(false).Decide(tr, Persistence{tr}, em, OnlineState{Job: Job{Deadline: start.Add(2 * h)}, Now: start, Remaining: 3 * h})
		require.ErrorIs(t, err, ErrDeadlineTooShort)
	})
	t.Run("no remaining work", func(t *testing.T) {
		_, _, err := DefaultOnline(false).Decide(tr, Persistence{tr}, em, OnlineState{Job: Job{Deadline: start.Add(2 * h)}, Now: start})
		require.ErrorIs(t, err, ErrInvalidJob)
	})
	t.Run("outside the trace", func(t *testing.T) {
		_, err := DefaultOnline(true).Prices(tr, Persistence{tr}, em, tr.End(), tr.End().Add(2*h))
		require.ErrorIs(t, err, ErrOutOfRange)
	})
	t.Run("no history for the forecast", func(t *testing.T) {
		_, err := DefaultOnline(true).Prices(tr, Persistence{tr}, ErrorModel{}, t0.Add(h), t0.Add(4*h))
		require.ErrorIs(t, err, ErrNoHistory)
	})
	t.Run("contiguous commits", func(t *testing.T) {
		run, _, err := DefaultOnline(false).Decide(tr, Persistence{tr}, em, OnlineState{
			Job: Job{Work: 4 * h, Start: start, Deadline: start.Add(20 * h)}, Now: start.Add(12 * h), Remaining: 2 * h, RunLength: 2 * h})
		require.NoError(t, err)
		assert.True(t, run, "a started contiguous job runs to its end")
	})
}
