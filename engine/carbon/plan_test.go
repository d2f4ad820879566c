package carbon

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type span struct{ from, to int } // hours after t0

func spans(sc Schedule) []span {
	var out []span
	for _, s := range sc.Slots {
		out = append(out, span{int(s.Start.Sub(t0) / time.Hour), int(s.End.Sub(t0) / time.Hour)})
	}
	return out
}

func TestPlan(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name         string
		vals         []float64
		job          Job
		want         []span
		wantExpected float64
		wantBaseline float64
		wantErr      error
	}{
		{"contiguous lowest window", []float64{5, 4, 1, 2, 9, 0}, Job{Work: 2 * h, Deadline: t0.Add(6 * h)},
			[]span{{2, 4}}, 1.5, 4.5, nil},
		{"contiguous tie earliest", []float64{1, 1, 5, 1, 1}, Job{Work: 2 * h, Deadline: t0.Add(5 * h)},
			[]span{{0, 2}}, 1, 1, nil},
		{"interruptible cheapest steps", []float64{5, 1, 9, 0, 7, 2}, Job{Work: 3 * h, Deadline: t0.Add(6 * h), Interruptible: true},
			[]span{{1, 2}, {3, 4}, {5, 6}}, 1, 5, nil},
		{"interruptible tie earliest", []float64{3, 1, 1, 1, 3}, Job{Work: 2 * h, Deadline: t0.Add(5 * h), Interruptible: true},
			[]span{{1, 3}}, 1, 2, nil},
		{"interruptible min slot", []float64{0, 9, 0, 9, 1, 1, 9}, Job{Work: 2 * h, Deadline: t0.Add(7 * h), Interruptible: true, MinSlot: 2 * h},
			[]span{{4, 6}}, 1, 4.5, nil},
		{"min slot longer than work is clamped", []float64{9, 0, 9, 0, 9}, Job{Work: h, Deadline: t0.Add(5 * h), Interruptible: true, MinSlot: 3 * h},
			[]span{{1, 2}}, 0, 9, nil},
		{"start and deadline respected", []float64{0, 5, 6, 7, 0}, Job{Work: 2 * h, Start: t0.Add(h), Deadline: t0.Add(4 * h), Interruptible: true},
			[]span{{1, 3}}, 5.5, 5.5, nil},
		{"unaligned start rounds up, deadline down", []float64{0, 5, 6, 7, 0}, Job{Work: h, Start: t0.Add(30 * time.Minute), Deadline: t0.Add(4*h + 30*time.Minute)},
			[]span{{1, 2}}, 5, 5, nil},
		{"work rounds up to steps", []float64{3, 1, 1, 3}, Job{Work: 90 * time.Minute, Deadline: t0.Add(4 * h)},
			[]span{{1, 3}}, 1, 2, nil},
		{"deadline shorter than work", []float64{1, 2, 3}, Job{Work: 4 * h, Deadline: t0.Add(3 * h)}, nil, 0, 0, ErrDeadlineTooShort},
		{"deadline too short after alignment", []float64{1, 2, 3}, Job{Work: 2 * h, Start: t0.Add(30 * time.Minute), Deadline: t0.Add(2*h + 30*time.Minute)}, nil, 0, 0, ErrDeadlineTooShort},
		{"window outside forecast", []float64{1, 2, 3}, Job{Work: 2 * h, Start: t0.Add(2 * h), Deadline: t0.Add(5 * h)}, nil, 0, 0, ErrOutOfRange},
		{"zero work", []float64{1, 2, 3}, Job{Deadline: t0.Add(3 * h)}, nil, 0, 0, ErrInvalidJob},
		{"negative min slot", []float64{1, 2, 3}, Job{Work: h, Deadline: t0.Add(3 * h), MinSlot: -h}, nil, 0, 0, ErrInvalidJob},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.job.Start.IsZero() {
				tc.job.Start = t0
			}
			sc, err := Plan(hourly(tc.vals...), tc.job)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, spans(sc))
			assert.InDelta(t, tc.wantExpected, sc.ExpectedGPerKWh, 1e-12)
			assert.InDelta(t, tc.wantBaseline, sc.BaselineGPerKWh, 1e-12)

			orc, err := Oracle(hourly(tc.vals...), tc.job)
			require.NoError(t, err)
			assert.InDelta(t, sc.ExpectedGPerKWh, orc.ExpectedGPerKWh, 1e-12)
		})
	}
}

// bruteForce enumerates every subset of the window's steps and returns the
// minimum mean over feasible ones (n steps, every maximal run ≥ mm, or one
// contiguous run when !interruptible).
func bruteForce(v []float64, n, mm int, interruptible bool) float64 {
	L := len(v)
	best := math.Inf(1)
	for mask := uint32(0); mask < 1<<L; mask++ {
		if bits.OnesCount32(mask) != n {
			continue
		}
		runs, run, ok := 0, 0, true
		var sum float64
		for i := 0; i <= L; i++ {
			if i < L && mask&(1<<i) != 0 {
				run++
				sum += v[i]
				continue
			}
			if run > 0 {
				runs++
				if run < mm {
					ok = false
				}
			}
			run = 0
		}
		if !ok || (!interruptible && runs != 1) {
			continue
		}
		best = math.Min(best, sum/float64(n))
	}
	return best
}

func TestPlanAndOracleMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		L := 1 + rng.IntN(14)
		n := 1 + rng.IntN(L)
		mm := 1 + rng.IntN(n)
		interruptible := rng.IntN(3) != 0
		v := make([]float64, L)
		for i := range v {
			v[i] = float64(rng.IntN(6)) // small integers: many ties
		}
		job := Job{Work: time.Duration(n) * time.Hour, Start: t0, Deadline: t0.Add(time.Duration(L) * time.Hour),
			Interruptible: interruptible, MinSlot: time.Duration(mm) * time.Hour}
		want := bruteForce(v, n, mm, interruptible)
		s := hourly(v...)
		sc, err := Plan(s, job)
		require.NoError(t, err, "trial %d", trial)
		orc, err := Oracle(s, job)
		require.NoError(t, err, "trial %d", trial)
		require.InDelta(t, want, sc.ExpectedGPerKWh, 1e-9, "trial %d plan v=%v n=%d mm=%d int=%v", trial, v, n, mm, interruptible)
		require.InDelta(t, want, orc.ExpectedGPerKWh, 1e-9, "trial %d oracle v=%v n=%d mm=%d int=%v", trial, v, n, mm, interruptible)
		checkSchedule(t, s, job, sc)
		checkSchedule(t, s, job, orc)
	}
}

// checkSchedule verifies feasibility: slots inside the window, ordered,
// disjoint and non-adjacent, covering the work, each at least the min slot.
func checkSchedule(t *testing.T, s *Series, job Job, sc Schedule) {
	t.Helper()
	w, err := jobWindow(s, job)
	require.NoError(t, err)
	total := 0
	var prevEnd time.Time
	for i, sl := range sc.Slots {
		steps := int(sl.End.Sub(sl.Start) / s.Step)
		total += steps
		require.GreaterOrEqual(t, steps, w.mm, "slot %d shorter than min slot", i)
		require.False(t, sl.Start.Before(s.TimeAt(w.a)), "slot %d before start", i)
		require.False(t, sl.End.After(s.TimeAt(w.b)), "slot %d after deadline", i)
		if i > 0 {
			require.True(t, sl.Start.After(prevEnd), "slot %d not after previous", i)
		}
		prevEnd = sl.End
	}
	require.Equal(t, w.n, total)
	if !job.Interruptible {
		require.Len(t, sc.Slots, 1)
	}
}

func TestPlanDeterministic(t *testing.T) {
	v := []float64{2, 1, 1, 2, 1, 1, 2, 1, 1, 2}
	job := Job{Work: 4 * time.Hour, Start: t0, Deadline: t0.Add(10 * time.Hour), Interruptible: true, MinSlot: 2 * time.Hour}
	first, err := Plan(hourly(v...), job)
	require.NoError(t, err)
	assert.Equal(t, []span{{1, 3}, {4, 6}}, spans(first))
	for range 5 {
		again, err := Plan(hourly(v...), job)
		require.NoError(t, err)
		assert.Equal(t, first, again)
	}
}
