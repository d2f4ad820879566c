package carbon

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFirstMoveMatchesRunsDP: firstMove takes position 0 exactly when
// runsDP's plan does, on random prices, on prices full of ties (small
// integers, the same value everywhere), and on prices with the 1e-6 grid's
// rounding noise, running or not.
func TestFirstMoveMatchesRunsDP(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 2))
	var sc dpScratch
	for trial := range 6000 {
		W := 1 + rng.IntN(60)
		n := 1 + rng.IntN(W)
		mm := 1 + rng.IntN(8)
		on := rng.IntN(3) == 0
		if !on {
			mm = min(mm, n)
		}
		v := make([]float64, W)
		for i := range v {
			switch trial % 4 {
			case 0:
				v[i] = float64(rng.IntN(4))
			case 1:
				v[i] = 7
			case 2:
				v[i] = price(100 + 50*rng.Float64())
			default:
				v[i] = price(float64(rng.IntN(3))*0.1 + 1e-7*float64(rng.IntN(3)))
			}
		}
		chosen, err := runsDP(v, n, mm, on)
		require.NoError(t, err)
		want := len(chosen) > 0 && chosen[0] == 0
		require.Equal(t, want, sc.firstMove(v, n, mm, on), "trial %d v=%v n=%d mm=%d on=%v", trial, v, n, mm, on)
	}
}

// TestOnlineFastMatchesPlan: EvaluateOnline's decisions (interruptible
// jobs with a minimum slot take firstMove's) are the decisions of Plan at
// every step (the old path), on the real traces.
func TestOnlineFastMatchesPlan(t *testing.T) {
	for _, rt := range realTraces {
		full := loadTrace(t, rt)
		rng := rand.New(rand.NewPCG(17, uint64(len(rt.file))))
		for trial := range 6 {
			lo := full.Start.Add(10 * 24 * time.Hour)
			start := lo.Add(time.Duration(rng.Int64N(int64(full.End().Add(-100*time.Hour).Sub(lo)/time.Minute))) * time.Minute)
			work := time.Duration(1+rng.IntN(20)) * time.Hour
			job := Job{Work: work, Start: start, Deadline: start.Add(work + time.Duration(rng.IntN(60))*time.Hour),
				Interruptible: true, MinSlot: time.Duration(1+rng.IntN(4)) * time.Hour}
			s := traceWindow(full, start.Add(-9*24*time.Hour), job.Deadline.Add(full.Step))
			for _, p := range []Online{DefaultOnline(true), {Correction: CorrectBias, Margin: 0.5}} {
				tt := s.TimeAt(s.ceilIndex(job.Start))
				em, err := EstimateErrors(s, Persistence{s}, tt, job.Deadline.Sub(tt), p.History, p.Correction)
				require.NoError(t, err)
				fast, err := evaluateOnline(s, Persistence{s}, job, p, em, Schedule{}, nil, true)
				require.NoError(t, err)
				old, err := evaluateOnline(s, Persistence{s}, job, p, em, Schedule{}, nil, false)
				require.NoError(t, err)
				require.Equal(t, old.Slots, fast.Slots, "%s trial %d %+v", rt.zone, trial, job)
			}
		}
	}
}

// BenchmarkOnlineMinSlot: the online policy on 100 h of work in a 720 h
// window of the Spanish hourly trace with a 3 h minimum slot, deciding
// with Plan at every step (old) and with firstMove (new).
//
//	go test -run XXX -bench OnlineMinSlot -benchtime 3x ./engine/carbon
func BenchmarkOnlineMinSlot(b *testing.B) {
	s := loadTrace(b, realTraces[0])
	start := time.Date(2022, 1, 5, 0, 0, 0, 0, time.UTC)
	job := Job{Work: 100 * time.Hour, Start: start, Deadline: start.Add(720 * time.Hour), Interruptible: true, MinSlot: 3 * time.Hour}
	p := DefaultOnline(true)
	tt := s.TimeAt(s.ceilIndex(job.Start))
	em, err := EstimateErrors(s, Persistence{s}, tt, job.Deadline.Sub(tt), p.History, p.Correction)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fast bool
	}{{"old", false}, {"new", true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := evaluateOnline(s, Persistence{s}, job, p, em, Schedule{}, nil, c.fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
