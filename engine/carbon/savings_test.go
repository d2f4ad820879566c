package carbon

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cvPolicies is the grid the Online policy is chosen from: both
// corrections, margins z from −1 to 1.
var cvPolicies = func() []Online {
	var out []Online
	for _, c := range []Correction{CorrectBias, CorrectLinear} {
		for _, z := range []float64{-1, -0.5, -0.25, 0, 0.25, 0.5, 1} {
			out = append(out, Online{Correction: c, Margin: z})
		}
	}
	return out
}()

func policyName(p Online) string { return sprintf("%s z=%g", p.Correction, p.Margin) }

// savingsRange is a part of a trace the job starts are drawn from.
type savingsRange struct {
	name   string
	lo, hi time.Time // job starts in [lo, hi)
}

// savingsRanges splits a trace's time range in halves. Starts leave 9 days
// of history (a week of error model plus two days for persistence) and 49 h
// before the end for a 48 h deadline. The held-out half may read history
// from the first half (observations, not parameters).
func savingsRanges(s *Series) (first, second, full savingsRange) {
	mid := s.Start.Add(s.End().Sub(s.Start) / 2).Truncate(time.Hour)
	lo := s.Start.Add(9 * 24 * time.Hour)
	hi := s.End().Add(-49 * time.Hour)
	return savingsRange{"first half", lo, mid.Add(-49 * time.Hour)},
		savingsRange{"second half", mid, hi},
		savingsRange{"full", lo, hi}
}

func savingsJobs(r savingsRange, n int, seed uint64, interruptible bool) []Job {
	rng := rand.New(rand.NewPCG(2026, seed))
	span := int64(r.hi.Sub(r.lo) / time.Minute)
	jobs := make([]Job, n)
	for i := range jobs {
		start := r.lo.Add(time.Duration(rng.Int64N(span)) * time.Minute)
		jobs[i] = Job{Work: 10 * time.Hour, Start: start, Deadline: start.Add(48 * time.Hour), Interruptible: interruptible}
	}
	return jobs
}

func kindName(interruptible bool) string {
	if interruptible {
		return "interruptible"
	}
	return "contiguous"
}

// savingsRow holds mean savings (% vs run now) of each method on one zone,
// job kind and range.
type savingsRow struct {
	zone, kind, rng                 string
	baseline, oracle                float64 // mean g/kWh
	oracleSav, persistSav, replSav  float64
	seasonalReplSav                 float64
	online, onlineLag, onlineSeason float64
	onlineZ                         []float64 // Online savings per cvPolicies value
}

// evalSavings evaluates every method on jobs. With grid, Online is run for
// every policy of cvPolicies (for the cross-validation), else only with
// policy pol.
func evalSavings(t *testing.T, s *Series, jobs []Job, pol Online, grid bool) savingsRow {
	t.Helper()
	const tol = 1e-9
	var r savingsRow
	r.onlineZ = make([]float64, len(cvPolicies))
	n := float64(len(jobs))
	full := s
	for i, job := range jobs {
		// Every method reads at most 15 days before the start (a week of
		// error model, a week of seasonal history and a day): evaluate on
		// that part of the trace only, which is the same and much faster.
		s := traceWindow(full, job.Start.Add(-16*24*time.Hour), job.Deadline.Add(full.Step))
		per := Persistence{s}
		orc, err := Oracle(s, job)
		require.NoError(t, err)
		var ems [2]ErrorModel
		for c := range ems {
			ems[c], err = EstimateErrors(s, per, job.Start, job.Deadline.Sub(job.Start), DefaultErrorHistory, Correction(c))
			require.NoError(t, err)
			require.Positive(t, ems[c].Samples, "job %d: no error history", i)
		}
		add := func(dst *float64, res Result, err error) {
			t.Helper()
			require.NoError(t, err, "job %d %+v", i, job)
			checkRealizedSlots(t, job, s.Step, res.Slots)
			require.LessOrEqual(t, res.OracleGPerKWh, res.RealizedGPerKWh+tol, "job %d: oracle beaten", i)
			require.False(t, math.IsNaN(res.SavingsPct) || math.IsInf(res.SavingsPct, 0))
			*dst += res.SavingsPct / n
		}
		r.baseline += orc.BaselineGPerKWh / n
		r.oracle += orc.ExpectedGPerKWh / n
		if b := orc.BaselineGPerKWh; b > 0 {
			r.oracleSav += 100 * (b - orc.ExpectedGPerKWh) / b / n
		}
		if grid {
			for k, p := range cvPolicies {
				res, err := evaluateOnline(s, per, job, p, ems[p.Correction], orc, nil, true)
				add(&r.onlineZ[k], res, err)
			}
			continue
		}
		res, err := Evaluate(s, per, job)
		add(&r.persistSav, res, err)
		res, err = EvaluateReplanned(s, per, job)
		add(&r.replSav, res, err)
		res, err = EvaluateReplanned(s, Seasonal{Trace: s}, job)
		add(&r.seasonalReplSav, res, err)
		res, err = evaluateOnline(s, per, job, pol, ems[pol.Correction], orc, nil, true)
		add(&r.online, res, err)
		lagged := pol
		lagged.Lag = s.Step
		res, err = EvaluateOnline(s, per, job, lagged)
		add(&r.onlineLag, res, err)
		res, err = EvaluateOnline(s, Seasonal{Trace: s}, job, pol)
		add(&r.onlineSeason, res, err)
	}
	return r
}

// TestSavingsReport measures, on the real traces, a 10 h job with a 48 h
// deadline: savings against running now of planning once on persistence,
// re-planning every step (persistence; seasonal), the Online policy on
// persistence (observed present, error-model correction, margin), and the
// oracle. The Online margin is chosen by cross-validation: on the first
// half (in time) of every trace, one margin per job kind for all zones,
// maximising the mean over zones of Online's share of the oracle's
// savings; the chosen margins must be the package defaults. The report
// gives the held-out second half and the full range.
//
// Under -short or the race detector only a few starts are evaluated (the
// invariants still checked) and the cross-validation is skipped.
func TestSavingsReport(t *testing.T) {
	samples := 60
	quick := testing.Short() || raceEnabled
	if quick {
		samples = 6
	}
	type zoneData struct {
		rt                   realTrace
		s                    *Series
		first, second, whole savingsRange
	}
	var zones []zoneData
	for _, rt := range realTraces {
		s := loadTrace(t, rt)
		f, sc, w := savingsRanges(s)
		zones = append(zones, zoneData{rt, s, f, sc, w})
	}
	// Cross-validation on the first halves.
	names := make([]string, len(cvPolicies))
	for k, p := range cvPolicies {
		names[k] = policyName(p)
	}
	t.Logf("CV grid: %v", names)
	for _, interruptible := range []bool{false, true} {
		if quick {
			break
		}
		score := make([]float64, len(cvPolicies))
		for _, z := range zones {
			r := evalSavings(t, z.s, savingsJobs(z.first, samples, uint64(len(z.rt.zone))+1, interruptible), Online{}, true)
			for k := range cvPolicies {
				score[k] += r.onlineZ[k] / r.oracleSav / float64(len(zones))
			}
			t.Logf("CV %s %s: oracle saves %.1f %%; Online saves %s", z.rt.zone, kindName(interruptible), r.oracleSav, pcts(r.onlineZ))
		}
		best := 0
		for k := range score {
			if score[k] > score[best]+1e-12 {
				best = k
			}
		}
		t.Logf("CV %s: mean share of the oracle's savings: %s → %s", kindName(interruptible), pcts(scale(score, 100)), names[best])
		assert.Equal(t, DefaultOnline(interruptible), cvPolicies[best], "cross-validated %s policy", kindName(interruptible))
	}

	var rows []savingsRow
	for _, z := range zones {
		for _, interruptible := range []bool{false, true} {
			m := DefaultOnline(interruptible)
			for _, rg := range []savingsRange{z.second, z.whole} {
				r := evalSavings(t, z.s, savingsJobs(rg, samples, uint64(len(z.rt.zone)), interruptible), m, false)
				r.zone, r.kind, r.rng = z.rt.zone, kindName(interruptible), rg.name
				assert.GreaterOrEqual(t, r.oracleSav, r.online-1e-9)
				assert.GreaterOrEqual(t, r.oracleSav, 0.0)
				rows = append(rows, r)
			}
		}
	}
	t.Logf("10 h job, 48 h deadline, %d seeded starts per zone, job kind and range; savings are means vs run now", samples)
	t.Logf("| zone, job | range | run now g/kWh | oracle g/kWh | persistence | persistence re-planned | seasonal re-planned | **online (persistence)** | online, present 1 step old | online (seasonal) | oracle | online / oracle |")
	t.Logf("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Logf("| %s, %s | %s | %.1f | %.1f | %s | %s | %s | **%s** | %s | %s | %s | %.0f %% |", r.zone, r.kind, r.rng, r.baseline, r.oracle,
			pct(r.persistSav), pct(r.replSav), pct(r.seasonalReplSav), pct(r.online), pct(r.onlineLag), pct(r.onlineSeason), pct(r.oracleSav),
			100*r.online/r.oracleSav)
	}
}

func pct(v float64) string { return formatPct(v) }

func formatPct(v float64) string {
	s := "%.1f %%"
	if v < 0 {
		return "−" + sprintf(s, -v)
	}
	return sprintf(s, v)
}

func pcts(vs []float64) string {
	out := ""
	for i, v := range vs {
		if i > 0 {
			out += " "
		}
		out += sprintf("%.1f", v)
	}
	return out
}

func scale(vs []float64, k float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = v * k
	}
	return out
}

var sprintf = fmt.Sprintf

// traceWindow is the part of s covering [from, to), on s's grid.
func traceWindow(s *Series, from, to time.Time) *Series {
	i, j := max(0, s.floorIndex(from)), min(len(s.Values), s.ceilIndex(to))
	return &Series{Start: s.TimeAt(i), Step: s.Step, Zone: s.Zone, Values: s.Values[i:j]}
}
