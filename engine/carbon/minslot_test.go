package carbon

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withHistory is a day of history (value 9) before vals, hourly from t0;
// the job's hours count from the returned start.
func withHistory(vals ...float64) (*Series, time.Time) {
	v := make([]float64, 24, 24+len(vals))
	for i := range v {
		v[i] = 9
	}
	return hourly(append(v, vals...)...), t0.Add(24 * time.Hour)
}

// policies are the ways a job is run in these tests, each measured on the
// trace: planned once, re-planned every step, and decided online, all on
// the forecaster fc.
func policies(fc func(*Series) Forecaster) map[string]func(*Series, Job) (Result, error) {
	return map[string]func(*Series, Job) (Result, error){
		"once":   func(s *Series, j Job) (Result, error) { return Evaluate(s, fc(s), j) },
		"replan": func(s *Series, j Job) (Result, error) { return EvaluateReplanned(s, fc(s), j) },
		"online": func(s *Series, j Job) (Result, error) {
			return EvaluateOnline(s, fc(s), j, DefaultOnline(j.Interruptible))
		},
	}
}

func perfect(s *Series) Forecaster     { return Perfect{s} }
func persistence(s *Series) Forecaster { return Persistence{s} }

// TestMinSlotHoldsForTheLastSlot: every slot lasts MinSlot, the last one
// included, under every policy; with a perfect forecast all of them
// realize the oracle (before, online and replan ran 4–6 and 7–8 here: a
// last slot of one hour, cheaper than the oracle's 4–7).
func TestMinSlotHoldsForTheLastSlot(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name string
		vals []float64 // hours from the start
		job  Job       // Start and Deadline relative: filled in below
		want []span    // hours from the start
	}{
		{"the last slot", []float64{9, 9, 9, 9, 1, 1, 5, 2, 9, 9, 9, 9},
			Job{Work: 3 * h, MinSlot: 2 * h, Interruptible: true}, []span{{4, 7}}},
		{"the last slot after a pause", []float64{1, 1, 9, 9, 1, 1, 5, 2, 9, 9, 9, 9},
			Job{Work: 5 * h, MinSlot: 2 * h, Interruptible: true}, []span{{0, 2}, {4, 7}}},
		{"work shorter than the min slot: one slot", []float64{9, 9, 2, 1, 9, 1, 9, 9},
			Job{Work: 2 * h, MinSlot: 3 * h, Interruptible: true}, []span{{2, 4}}},
		{"contiguous", []float64{9, 9, 9, 9, 1, 1, 5, 2, 9, 9, 9, 9},
			Job{Work: 3 * h}, []span{{4, 7}}},
	}
	for _, tc := range tests {
		s, start := withHistory(tc.vals...)
		tc.job.Start, tc.job.Deadline = start, start.Add(time.Duration(len(tc.vals))*h)
		orc, err := Oracle(s, tc.job)
		require.NoError(t, err)
		for name, run := range policies(perfect) {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				res, err := run(s, tc.job)
				require.NoError(t, err)
				var got []span
				for _, sl := range res.Slots {
					got = append(got, span{int(sl.Start.Sub(start) / h), int(sl.End.Sub(start) / h)})
				}
				assert.Equal(t, tc.want, got)
				assert.InDelta(t, orc.ExpectedGPerKWh, res.RealizedGPerKWh, 1e-9, "realized vs oracle")
			})
		}
	}
}

// TestPoliciesKeepMinSlot: on random small traces, every policy's slots
// last at least the min slot (or the whole work, when it is shorter), add
// up to the work, and never beat the oracle; with a perfect forecast they
// realize it.
func TestPoliciesKeepMinSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 2))
	for trial := range 120 {
		L := 3 + rng.IntN(12)
		n := 1 + rng.IntN(L)
		mm := 1 + rng.IntN(min(n+1, 5))
		vals := make([]float64, 24+L)
		for i := range vals {
			vals[i] = float64(1 + rng.IntN(6))
		}
		s := hourly(vals...)
		start := t0.Add(24 * time.Hour)
		job := Job{Work: time.Duration(n) * time.Hour, Start: start, Deadline: start.Add(time.Duration(L) * time.Hour),
			Interruptible: true, MinSlot: time.Duration(mm) * time.Hour}
		orc, err := Oracle(s, job)
		require.NoError(t, err)
		for fcName, fc := range map[string]func(*Series) Forecaster{"perfect": perfect, "persistence": persistence} {
			for name, run := range policies(fc) {
				res, err := run(s, job)
				require.NoError(t, err, "trial %d %s %s", trial, fcName, name)
				checkRealizedSlots(t, job, time.Hour, res.Slots)
				for i, sl := range res.Slots {
					require.GreaterOrEqual(t, sl.End.Sub(sl.Start), time.Duration(min(n, mm))*time.Hour,
						"trial %d %s %s: slot %d of %v (vals %v, n %d, min %d)", trial, fcName, name, i, res.Slots, vals[24:], n, mm)
				}
				require.LessOrEqual(t, orc.ExpectedGPerKWh, res.RealizedGPerKWh+1e-9, "trial %d %s %s: oracle beaten", trial, fcName, name)
				if fcName == "perfect" {
					require.InDelta(t, orc.ExpectedGPerKWh, res.RealizedGPerKWh, 1e-9, "trial %d %s: perfect forecast", trial, name)
				}
			}
		}
	}
}

// bruteRunning is bruteForce for a re-plan of a job running with a run of
// r0 steps in progress before position 0 (running), min slot mm counted
// from that run's start (at most r0+n): every run at least mm long, the
// first one counting r0 when it starts at 0; a running job whose run is
// shorter than mm must go on at 0.
func bruteRunning(v []float64, n, mm int, running bool, r0 int) float64 {
	if running {
		mm = min(mm, r0+n)
	} else {
		r0, mm = 0, min(mm, n)
	}
	L := len(v)
	best := math.Inf(1)
	for mask := uint32(0); mask < 1<<L; mask++ {
		if bits.OnesCount32(mask) != n {
			continue
		}
		run, open, ok := r0, running, true // open: in a run (one begun within the step before counts, at 0 steps)
		var sum float64
		for i := 0; i <= L && ok; i++ {
			if i < L && mask&(1<<i) != 0 {
				run++
				open = true
				sum += v[i]
				continue
			}
			if open && run < mm {
				ok = false
			}
			run, open = 0, false
		}
		if ok {
			best = math.Min(best, sum/float64(n))
		}
	}
	return best
}

// TestPlanRunningMatchesBruteForce: a re-plan of a running job (Job.Running)
// is the best schedule that honours the run in progress.
func TestPlanRunningMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 51))
	for trial := range 400 {
		L := 1 + rng.IntN(13)
		n := 1 + rng.IntN(L)
		mm := 1 + rng.IntN(5)
		running := rng.IntN(3) != 0
		r0 := rng.IntN(mm + 2)
		v := make([]float64, L)
		for i := range v {
			v[i] = float64(rng.IntN(6))
		}
		job := Job{Work: time.Duration(n) * time.Hour, Start: t0, Deadline: t0.Add(time.Duration(L) * time.Hour),
			Interruptible: true, MinSlot: time.Duration(mm) * time.Hour}
		if running {
			job.Running = max(time.Duration(r0)*time.Hour, time.Nanosecond) // a run begun within the step before: 0 whole steps
		}
		want := bruteRunning(v, n, mm, running, r0)
		sc, err := Plan(hourly(v...), job)
		require.NoError(t, err, "trial %d", trial)
		require.InDelta(t, want, sc.ExpectedGPerKWh, 1e-9, "trial %d v=%v n=%d mm=%d running=%v r0=%d: %v", trial, v, n, mm, running, r0, sc.Slots)
		orc, err := Oracle(hourly(v...), job)
		require.NoError(t, err)
		require.InDelta(t, want, orc.ExpectedGPerKWh, 1e-9, "trial %d oracle", trial)
		if running && r0 < mm {
			require.Equal(t, t0, sc.Slots[0].Start, "trial %d: a run shorter than the min slot goes on", trial)
		}
	}
	// A running contiguous job runs on from the start, however dear.
	sc, err := Plan(hourly(9, 9, 1, 1), Job{Work: 2 * time.Hour, Start: t0, Deadline: t0.Add(4 * time.Hour), Running: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, []span{{0, 2}}, spans(sc))
}

// TestOracleHasNoBudgetWall: the German 15-minute trace with a 1 h min slot
// and 10 h of work in 12 h (green plan failed with "oracle search too
// large: more than 20000000 nodes") is solved exactly, as Plan solves it.
func TestOracleHasNoBudgetWall(t *testing.T) {
	s := loadTrace(t, realTraces[2])
	start := time.Date(2020, 1, 13, 16, 8, 0, 0, time.UTC)
	job := Job{Work: 10 * time.Hour, Start: start, Deadline: start.Add(12 * time.Hour), Interruptible: true, MinSlot: time.Hour}
	orc, err := Oracle(s, job)
	require.NoError(t, err)
	f, err := Perfect{s}.Forecast(job.Start, job.Deadline.Sub(job.Start))
	require.NoError(t, err)
	plan, err := Plan(f, job)
	require.NoError(t, err)
	assert.InDelta(t, orc.ExpectedGPerKWh, plan.ExpectedGPerKWh, 1e-9)
	checkSchedule(t, s, job, orc)
	res, err := EvaluateOnline(s, Persistence{s}, job, DefaultOnline(true))
	require.NoError(t, err)
	assert.NoError(t, res.OracleErr)
	assert.LessOrEqual(t, res.OracleGPerKWh, res.RealizedGPerKWh+1e-9)
}

// TestEvaluateWithoutOracle: an oracle too large to compute (here: the
// table limit lowered, a plan on an hourly forecast of a 15-minute trace)
// leaves the evaluation standing, with the oracle's figures NaN and the
// reason in OracleErr.
func TestEvaluateWithoutOracle(t *testing.T) {
	defer func(n int) { maxPlanCells = n }(maxPlanCells)
	maxPlanCells = 20 // the forecast's plan needs 10 states, the trace's oracle 136
	tr := &Series{Start: t0, Step: 15 * time.Minute, Zone: "Q"}
	for h := range 6 {
		for q := range 4 {
			tr.Values = append(tr.Values, float64(10*h+q))
		}
	}
	fc := fixed{s: &Series{Start: t0, Step: time.Hour, Values: []float64{9, 9, 1, 1, 9, 9}}}
	job := Job{Work: 2 * time.Hour, Start: t0, Deadline: t0.Add(6 * time.Hour), Interruptible: true, MinSlot: 2 * time.Hour}
	res, err := Evaluate(tr, fc, job)
	require.NoError(t, err)
	require.ErrorIs(t, res.OracleErr, ErrSearchTooLarge)
	assert.True(t, math.IsNaN(res.OracleGPerKWh) && math.IsNaN(res.OracleSavingsPct))
	assert.InDelta(t, 6.5, res.BaselineGPerKWh, 1e-12)  // hours 0–2 of the trace
	assert.InDelta(t, 26.5, res.RealizedGPerKWh, 1e-12) // hours 2–4, the forecast's

	// Without the limit, the same evaluation has its oracle.
	maxPlanCells = 1 << 30
	res, err = Evaluate(tr, fc, job)
	require.NoError(t, err)
	assert.NoError(t, res.OracleErr)
	assert.InDelta(t, 6.5, res.OracleGPerKWh, 1e-12)
	_, err = Oracle(tr, Job{Work: time.Hour, Start: t0, Deadline: t0.Add(7 * time.Hour)})
	assert.True(t, errors.Is(err, ErrOutOfRange), "a job outside the trace still fails: %v", err)
}

// TestSavingsNoise: intensities equal but for summation order give 0 %
// saved, not −2e-14 %.
func TestSavingsNoise(t *testing.T) {
	for _, tc := range []struct {
		base, x, want float64
	}{
		{4.5009999999999994, 4.501, 0},
		{4.501, 4.5009999999999994, 0},
		{100, 90, 10},
		{0, 5, 0},
		{100, 100.001, -0.001},
	} {
		assert.InDelta(t, tc.want, savings(tc.base, tc.x), 1e-9, "%v %v", tc.base, tc.x)
		if tc.want == 0 {
			assert.Equal(t, 0.0, savings(tc.base, tc.x), "%v %v: exactly 0", tc.base, tc.x)
		}
	}
	assert.True(t, math.IsNaN(savings(1, math.NaN())))
}
