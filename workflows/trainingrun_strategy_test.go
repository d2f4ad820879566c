package workflows

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/spec"
)

// TestStrategySearchPicksDataParallelDegree: with strategy: auto the scan
// also times computation (once), SearchStrategy (the real planner) sees
// three ranks sharing a 2-core host and picks two, and the run moves to
// two nodes before its first step, keeping the global batch; the plan is
// in the status.
func TestStrategySearchPicksDataParallelDegree(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	probes := registerStrategyActivities(env, nil)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100, Strategy: spec.StrategyAuto}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	p := st.Strategy
	require.NotNil(t, p)
	require.Equal(t, 2, p.DataParallel, "three ranks on two cores compute slower than two: %s", p.Reason)
	require.Equal(t, 3, p.MaxRanks)
	require.Len(t, p.Candidates, 3)
	require.Contains(t, p.Reason, "share cores")
	require.Equal(t, []string{"node-1", "node-2"}, st.Nodes)
	require.Equal(t, 96, st.GlobalBatch)
	for _, in := range ch.all() {
		require.Len(t, in.Membership.Nodes, 2)
		require.Equal(t, 96, in.GlobalBatch, "the global batch stays that of the job's 3 nodes")
	}
	// The move to two nodes re-scans the links (the collective's choice
	// depends on them) and times computation again (the scaling
	// efficiency's baseline).
	withCompute := 0
	for _, in := range *probes {
		if in.Compute != nil {
			withCompute++
		}
	}
	require.Equal(t, 5, withCompute)
	require.Len(t, *probes, 5)
	// 48 examples per rank: one rank alone takes 200 µs + 48 × 20 µs.
	one := 48 / (200e-6 + 48*20e-6)
	require.InDelta(t, st.SamplesPerSec/(2*one), st.ScalingEfficiency, 1e-12)
	require.Greater(t, st.ScalingEfficiency, 0.0)
}

// TestStrategySearchTakesWholeNodes: with two ranks per node on one 2-core
// host the search prices 2, 4 and 6 ranks — whole nodes — and keeps one
// node (its two ranks already fill the cores); the run moves to it, its
// two ranks training the job's global batch.
func TestStrategySearchTakesWholeNodes(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	var searches []spec.SearchStrategyInput
	registerStrategyActivities(env, &searches)
	s := spec.RunSpec{Name: "t", Nodes: 3, RanksPerNode: 2, Steps: 200, ChunkSteps: 100, Strategy: spec.StrategyAuto}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.Len(t, searches, 1)
	require.Equal(t, 2, searches[0].RanksPerNode)
	p := st.Strategy
	require.NotNil(t, p)
	var ranks []int
	for _, c := range p.Candidates {
		ranks = append(ranks, c.Ranks)
	}
	require.Equal(t, []int{2, 4, 6}, ranks)
	require.Equal(t, 6, p.MaxRanks)
	require.Equal(t, 2, p.DataParallel, "%s", p.Reason)
	require.Equal(t, []string{"node-1"}, st.Nodes)
	require.Equal(t, 192, st.GlobalBatch)
	for _, in := range ch.all() {
		require.Len(t, in.Membership.Nodes, 1)
		require.Equal(t, 192, in.GlobalBatch)
	}
}

// registerStrategyActivities registers a fake link scan of one 2-core
// host (10 GB/s links; computation and, when asked, codecs timed) and the
// real PlanTopology and SearchStrategy; searches receives every
// SearchStrategy input when not nil. It returns the scans' inputs.
func registerStrategyActivities(env *testsuite.TestWorkflowEnvironment, searches *[]spec.SearchStrategyInput) *[]spec.ProbeInput {
	var mu sync.Mutex
	var probes []spec.ProbeInput
	env.RegisterActivityWithOptions(func(_ context.Context, in spec.ProbeInput) (*spec.ProbeResult, error) {
		mu.Lock()
		probes = append(probes, in)
		mu.Unlock()
		res := &spec.ProbeResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, Host: "a"}
		if in.Compute != nil {
			res.Compute = &spec.RankCompute{Rank: in.Rank, Host: "a", Cores: 2, PerExampleNS: 20_000, OverheadNS: 200_000}
			for _, c := range in.Compute.Codecs {
				res.Compute.Codecs = append(res.Compute.Codecs, spec.CodecCost{Codec: c, EncodeNS: 3, DecodeNS: 1})
			}
		}
		if in.Rank == 0 {
			n := len(in.Membership.Nodes)
			for i := range n {
				for j := range n {
					if i != j {
						res.Links = append(res.Links, spec.LinkSample{From: i, To: j, LatencyNS: 5_000, BytesPerSec: 10e9})
					}
				}
			}
		}
		return res, nil
	}, activity.RegisterOptions{Name: spec.ActivityProbeLinks})
	env.RegisterActivityWithOptions(activities.Planner{}.PlanTopology, activity.RegisterOptions{Name: spec.ActivityPlanTopology})
	env.RegisterActivityWithOptions(func(ctx context.Context, in spec.SearchStrategyInput) (*spec.StrategyPlan, error) {
		if searches != nil {
			mu.Lock()
			*searches = append(*searches, in)
			mu.Unlock()
		}
		return activities.Planner{}.SearchStrategy(ctx, in)
	}, activity.RegisterOptions{Name: spec.ActivitySearchStrategy})
	return &probes
}

// TestStrategySearchPricesCompression: a compressed job's first scan also
// times its codec on the gradient's size, and the search gets the job's
// compression (codec, exchange, the warm-up's end) and prices the codec:
// the plan's candidates name it. The scans after the plan do not time
// codecs again.
func TestStrategySearchPricesCompression(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	var searches []spec.SearchStrategyInput
	probes := registerStrategyActivities(env, &searches)
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100, Strategy: spec.StrategyAuto,
		Compression: &spec.CompressionPolicy{Codec: "sign", WarmupSteps: 20}}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)

	require.Len(t, searches, 1)
	require.Equal(t, &spec.StrategyCompression{Codec: "sign:1024", Exchange: "twophase", From: 20, Steps: 200}, searches[0].Compression)
	first := (*probes)[0].Compute
	require.NotNil(t, first)
	require.Equal(t, []string{"sign:1024"}, first.Codecs)
	require.Equal(t, s.GradientFloats(), first.GradientValues)
	for _, in := range (*probes)[3:] {
		require.Empty(t, in.Compute.Codecs, "a scan after the plan timed codecs")
	}
	require.NotNil(t, st.Strategy)
	for _, c := range st.Strategy.Candidates {
		if c.Ranks > 1 {
			require.Equal(t, "sign:1024", c.Codec)
			require.Greater(t, c.CodecSeconds, 0.0)
		}
	}
}

// TestStrategySearchKeepsMinNodes: a job that sets min_nodes below nodes
// has the plan search min_nodes..nodes — it never trains below its floor —
// where one that leaves min_nodes at nodes searches 1..nodes, and then
// the plan's size is its floor: the status says so, and a rescale down to
// it is taken (it was refused as below min_nodes).
func TestStrategySearchKeepsMinNodes(t *testing.T) {
	t.Run("min_nodes set", func(t *testing.T) {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3", "node-4")}
		env := newRunEnv(t, cl, &fakeChunks{})
		var searches []spec.SearchStrategyInput
		registerStrategyActivities(env, &searches)
		s := spec.RunSpec{Name: "t", Nodes: 4, MinNodes: 3, Steps: 200, ChunkSteps: 100, Strategy: spec.StrategyAuto}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		st := result(t, env)
		require.Len(t, searches, 1)
		require.Equal(t, 3, searches[0].MinRanks)
		var ranks []int
		for _, c := range st.Strategy.Candidates {
			ranks = append(ranks, c.Ranks)
		}
		require.Equal(t, []int{3, 4}, ranks)
		require.GreaterOrEqual(t, len(st.Nodes), 3)
		require.Equal(t, 3, st.MinNodes)
	})
	t.Run("min_nodes left at nodes", func(t *testing.T) {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
		ch := &fakeChunks{}
		env := newRunEnv(t, cl, ch)
		registerStrategyActivities(env, nil)
		ch.onStart = func(in spec.ChunkInput) {
			switch {
			case in.From == 100 && in.Rank == 0:
				env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 3})
			case in.From == 200 && in.Rank == 0:
				env.SignalWorkflow(spec.SignalRescale, spec.Rescale{Nodes: 2})
			}
		}
		s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 400, ChunkSteps: 100, Strategy: spec.StrategyAuto}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		st := result(t, env)
		require.Equal(t, 2, st.Strategy.DataParallel)
		require.Equal(t, 2, st.MinNodes, "the plan's size is the floor")
		require.Empty(t, st.RefusedRescale)
		require.Len(t, st.Rescalings, 2)
		require.Equal(t, 3, st.Rescalings[0].ToNodes)
		require.Equal(t, 2, st.Rescalings[1].ToNodes)
		require.Len(t, st.Nodes, 2)
	})
}
