package carbon

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// traceDir holds the real traces (see its README for sources and licences:
// ES/NO "Carbon-intensity data © Electricity Maps (electricitymaps.com),
// ODbL 1.0"; DE from Let's Wait Awhile via dos-group/vessim, MIT).
const traceDir = "../../../shared/data/carbon"

type realTrace struct {
	file, zone string
	step       time.Duration
	rows       int // after interpolation
	mean       float64
}

var realTraces = []realTrace{
	{"ES_2022_hourly.csv", "ES", time.Hour, 8760, 166.757},
	{"NO_2022_hourly.csv", "NO", time.Hour, 8760, 12.7711},
	{"DE_2020_15min_letswaitawhile.csv", "DE", 15 * time.Minute, 37147 + 2, 315},
}

func loadTrace(t testing.TB, rt realTrace) *Series {
	t.Helper()
	path := filepath.Join(traceDir, rt.file)
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("real carbon trace %s is missing (expected the shared data checkout at %s relative to engine/carbon): %v", rt.file, traceDir, err)
	}
	defer f.Close()
	s, err := ReadCSV(f, rt.zone)
	require.NoError(t, err, "reading %s", path)
	return s
}

func TestRealTracesRead(t *testing.T) {
	for _, rt := range realTraces {
		t.Run(rt.zone, func(t *testing.T) {
			s := loadTrace(t, rt)
			require.NoError(t, s.Validate())
			assert.Equal(t, rt.step, s.Step)
			assert.Len(t, s.Values, rt.rows)
			var sum float64
			for _, v := range s.Values {
				sum += v
			}
			assert.InDelta(t, rt.mean, sum/float64(len(s.Values)), 1, "mean intensity")
		})
	}
}

func TestRealTraceDEGapInterpolated(t *testing.T) {
	s := loadTrace(t, realTraces[2])
	// 2020-12-19 23:15 is one of the two missing slots.
	at := time.Date(2020, 12, 19, 23, 15, 0, 0, time.UTC)
	prev, err := s.At(at.Add(-15 * time.Minute))
	require.NoError(t, err)
	next, err := s.At(at.Add(15 * time.Minute))
	require.NoError(t, err)
	got, err := s.At(at)
	require.NoError(t, err)
	assert.InDelta(t, (prev+next)/2, got, 1e-9)
}

// TestPlanPerfectEqualsOracle: with the Perfect forecaster, Plan reaches
// the oracle's cost on the real traces for many starts and deadlines, and
// with a multi-step min slot both equal an exhaustive search.
func TestPlanPerfectEqualsOracle(t *testing.T) {
	type kind struct {
		name          string
		interruptible bool
		maxWork       int // steps
		maxSlack      int // steps beyond the work
		minSlot       func(rng *rand.Rand, n int) int
	}
	kinds := []kind{
		{"contiguous", false, 48, 192, func(*rand.Rand, int) int { return 0 }},
		{"interruptible", true, 48, 192, func(*rand.Rand, int) int { return 1 }},
		{"interruptible-minslot", true, 12, 36, func(rng *rand.Rand, n int) int { return 1 + rng.IntN(n) }},
	}
	for _, rt := range realTraces {
		s := loadTrace(t, rt)
		for _, k := range kinds {
			t.Run(rt.zone+"/"+k.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(len(rt.zone)+len(k.name))))
				for trial := range 150 {
					n := 1 + rng.IntN(k.maxWork)
					slack := rng.IntN(k.maxSlack + 1)
					startIdx := rng.IntN(len(s.Values) - n - slack)
					start := s.TimeAt(startIdx).Add(time.Duration(rng.IntN(int(s.Step/time.Minute))) * time.Minute)
					job := Job{
						Work:          time.Duration(n) * s.Step,
						Start:         start,
						Deadline:      s.TimeAt(startIdx + 1 + n + slack),
						Interruptible: k.interruptible,
						MinSlot:       time.Duration(k.minSlot(rng, n)) * s.Step,
					}
					f, err := Perfect{s}.Forecast(job.Start, job.Deadline.Sub(job.Start))
					require.NoError(t, err)
					plan, err := Plan(f, job)
					require.NoError(t, err, "trial %d job %+v", trial, job)
					orc, err := Oracle(s, job)
					require.NoError(t, err, "trial %d job %+v", trial, job)
					require.InDelta(t, orc.ExpectedGPerKWh, plan.ExpectedGPerKWh, 1e-9, "trial %d job %+v", trial, job)
					if job.Interruptible && job.MinSlot > s.Step {
						// The oracle shares Plan's dynamic program: check
						// both against an exhaustive search.
						want, err := searchOracle(s, job)
						require.NoError(t, err, "trial %d job %+v", trial, job)
						require.InDelta(t, want, orc.ExpectedGPerKWh, 1e-9, "trial %d job %+v: exhaustive search", trial, job)
					}
					require.InDelta(t, orc.BaselineGPerKWh, plan.BaselineGPerKWh, 1e-9, "trial %d", trial)
					require.LessOrEqual(t, orc.ExpectedGPerKWh, orc.BaselineGPerKWh+1e-9)
					checkSchedule(t, f, job, plan)
					checkSchedule(t, s, job, orc)
				}
			})
		}
	}
}

// checkRealizedSlots: the slots lie inside [start, deadline), do not
// overlap, and add up to the work rounded up to whole steps.
func checkRealizedSlots(t *testing.T, job Job, step time.Duration, slots []Slot) {
	t.Helper()
	var total time.Duration
	for i, s := range slots {
		require.False(t, s.Start.Before(job.Start.Truncate(step)), "slot %d starts before the job", i)
		require.False(t, s.End.After(job.Deadline), "slot %d ends after the deadline", i)
		if i > 0 {
			require.True(t, s.Start.After(slots[i-1].End), "slots %d and %d touch or overlap", i-1, i)
		}
		total += s.End.Sub(s.Start)
	}
	require.Equal(t, (job.Work+step-1)/step*step, total)
	if !job.Interruptible {
		require.Len(t, slots, 1)
	}
}
