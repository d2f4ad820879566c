package workflows

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// batchCarbon plays PlanCarbon with a batch controller: every plan call
// returns the next scripted global batch (the learning rate scaled with
// it, as the real controller does) and records what it was asked.
type batchCarbon struct {
	mu     sync.Mutex
	script []int // global batch answered at the k-th plan call
	asked  []spec.BatchInput
}

func (f *batchCarbon) plan(_ context.Context, in spec.CarbonInput) (spec.CarbonOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out spec.CarbonOutput
	if !in.Plan {
		return out, nil
	}
	out.Plan = &spec.CarbonPlan{MadeAt: in.Now, Work: spec.Duration(in.Work)} // no slots: train now
	out.NowGPerKWh = 300
	if in.Batch != nil {
		k := len(f.asked)
		f.asked = append(f.asked, *in.Batch)
		gb := f.script[min(k, len(f.script)-1)]
		act := "hold"
		switch {
		case gb < in.Batch.GlobalBatch:
			act = "shrink"
		case gb > in.Batch.GlobalBatch:
			act = "grow"
		}
		out.Batch = &spec.BatchDecision{GlobalBatch: gb, LearningRate: in.Batch.LearningRate * float64(gb) / float64(in.Batch.GlobalBatch),
			Action: act, GPerKWh: 300}
	}
	return out, nil
}

func batchSpec(steps, every int64) spec.RunSpec {
	return spec.RunSpec{Name: "t", Nodes: 2, Steps: steps, ChunkSteps: 100, CheckpointEvery: every, BatchPerRank: 32, LearningRate: 2e-3,
		Green: &spec.GreenPolicy{Trace: "es.csv", Interruptible: true, Batch: &spec.BatchControl{ThresholdG: 200}}}.WithDefaults()
}

// The controller's decision at each boundary becomes a schedule entry from
// that step on; every chunk carries the whole schedule; a hold adds none.
func TestTrainingRunCarbonBatchController(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{}
	cb := &batchCarbon{script: []int{48, 48, 60, 75}}
	env := newRunEnv(t, cl, ch)
	env.RegisterActivityWithOptions(cb.plan, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	s := batchSpec(400, 100)
	require.Equal(t, &spec.BatchControl{ThresholdG: 200, Min: 32, Max: 128}, s.Green.Batch, "defaults: half and twice the global batch")
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	lr := func(gb int) float64 { return 2e-3 * float64(gb) / 64 }
	e0 := spec.BatchChange{FromStep: 0, GlobalBatch: 48, LearningRate: lr(48)}
	e2 := spec.BatchChange{FromStep: 200, GlobalBatch: 60, LearningRate: lr(60)}
	e3 := spec.BatchChange{FromStep: 300, GlobalBatch: 75, LearningRate: lr(75)}
	want := map[int64][]spec.BatchChange{0: {e0}, 100: {e0}, 200: {e0, e2}, 300: {e0, e2, e3}}
	for from, ins := range ch.byFrom() {
		for _, in := range ins {
			require.Equal(t, want[from], in.Schedule, "chunk from %d, rank %d", from, in.Rank)
			require.Equal(t, 64, in.GlobalBatch, "the base batch stays the run's")
		}
	}
	in := func(gb int, lr float64) spec.BatchInput {
		return spec.BatchInput{GlobalBatch: gb, LearningRate: lr, Nodes: 2, BaseBatch: 64, BaseLearningRate: 2e-3}
	}
	require.Equal(t, []spec.BatchInput{in(64, 2e-3), in(48, lr(48)), in(48, lr(48)), in(60, lr(60))}, cb.asked,
		"asked with the batch in force, the node count and the spec's pair")
	require.Equal(t, 75, st.Green.Batch)
	require.InDelta(t, e3.LearningRate, st.Green.LearningRate, 1e-15)
	require.Equal(t, 3, len(st.Green.Schedule))
	require.Equal(t, "grow", st.Green.BatchAction)
}

// After a failure rewinds the run past schedule changes, the redone steps
// train as recorded and the controller decides again only past the last
// change; a rescale may not outnumber the smallest batch set.
func TestTrainingRunBatchScheduleSurvivesRewind(t *testing.T) {
	var failed atomic.Bool // the ranks' activities run concurrently
	fail := func(in spec.ChunkInput) error {
		if in.From != 200 || in.Rank != 0 || failed.Swap(true) {
			return nil
		}
		return temporal.NewApplicationErrorWithCause("lost", spec.ErrTypePeerFailed, errors.New("x"), spec.PeerFailure{Rank: 1, Step: 230})
	}
	cl := &fakeCluster{pool: testNodes("a", "b", "c")}
	ch := &fakeChunks{fail: fail}
	// Boundaries 0, 100, 200; the failure; again 0, 100, 200 (recorded
	// changes hold: the 90s are not taken), then 300.
	cb := &batchCarbon{script: []int{64, 48, 40, 90, 90, 90, 100}}
	env := newRunEnv(t, cl, ch)
	env.RegisterActivityWithOptions(cb.plan, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: batchSpec(400, 400)}) // no checkpoint before the end
	st := result(t, env)
	require.Len(t, st.Recoveries, 1)
	require.EqualValues(t, 0, st.Recoveries[0].ResumeStep)

	e1 := spec.BatchChange{FromStep: 100, GlobalBatch: 48, LearningRate: 2e-3 * 48 / 64}
	e2 := spec.BatchChange{FromStep: 200, GlobalBatch: 40, LearningRate: 2e-3 * 40 / 64}
	byFrom := ch.byFrom()
	for _, from := range []int64{0, 100, 200} {
		last := byFrom[from][len(byFrom[from])-1]
		require.Equal(t, []spec.BatchChange{e1, e2}[:min(from/100, 2)], last.Schedule[:min(from/100, 2)], "from %d", from)
	}
	for _, in := range byFrom[0][2:] { // the redone chunk from 0 (after the two of the first attempt)
		require.Equal(t, []spec.BatchChange{e1, e2}, in.Schedule, "the redone steps keep the recorded changes")
	}
	final := byFrom[300][0].Schedule
	require.Len(t, final, 3, "one new decision once past the last recorded change")
	require.Equal(t, spec.BatchChange{FromStep: 300, GlobalBatch: 100, LearningRate: 2e-3 * 100 / 64}, final[2])
	require.Equal(t, final, st.Green.Schedule, "the status carries the schedule")
	r := &run{spec: batchSpec(400, 400)}
	r.st.Status.Green = &spec.GreenStatus{Schedule: final}
	require.Equal(t, 40, r.minBatch())
}
