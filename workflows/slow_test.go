package workflows

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunNamesASlowNode: every node's chunk takes the same time
// (they meet at every allreduce), but node-3 computes for twice as long as
// its peers, who wait for it: after three such chunks in a row the status
// names it, with the factor, the streak and where it began, until a chunk
// in which it keeps up. Noise (10 %) and chunks too short to time name
// nobody. With slow_node: drain the run asks the Cluster, once, to drain
// it. A chunk its ranks ended early (a pause, a drain) leaves the streak
// as it was, whatever node-3's time in it.
func TestTrainingRunNamesASlowNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// compute is node-3's computation in the chunk from step from
		// (its peers': 0.3 s); secs every node's chunk time.
		compute func(from int64) float64
		secs    float64
		want    []spec.SlowNode
		drain   bool    // slow_node: drain
		factor  float64 // slow_node_factor (0: the default)
		chunks  int     // slow_node_chunks (0: the default)
		// early, when set, is the step from which a chunk comes back 40
		// steps in (its ranks ended it early), node-3 keeping up in it.
		early int64
	}{
		{name: "slow from 200", compute: func(from int64) float64 {
			if from >= 200 {
				return 0.6
			}
			return 0.3
		}, secs: 1, want: []spec.SlowNode{{NodeID: "node-3", Factor: 2, Chunks: 8, Since: 200}}},
		{name: "slow from 200, drained", compute: func(from int64) float64 {
			if from >= 200 {
				return 0.6
			}
			return 0.3
		}, secs: 1, want: []spec.SlowNode{{NodeID: "node-3", Factor: 2, Chunks: 8, Since: 200}}, drain: true},
		{name: "keeps up again", compute: func(from int64) float64 {
			if from >= 200 && from < 700 {
				return 0.6
			}
			return 0.3
		}, secs: 1},
		{name: "two chunks only", compute: func(from int64) float64 {
			if from == 300 || from == 400 || from == 600 || from == 700 {
				return 0.6
			}
			return 0.3
		}, secs: 1},
		{name: "slow from 200, not to the job's 2.5×", compute: func(from int64) float64 {
			if from >= 200 {
				return 0.6
			}
			return 0.3
		}, secs: 1, factor: 2.5},
		{name: "slow from 200, for fewer chunks than the job's 10", compute: func(from int64) float64 {
			if from >= 200 {
				return 0.6
			}
			return 0.3
		}, secs: 1, chunks: 10},
		{name: "slow from 800, two chunks as the job says", compute: func(from int64) float64 {
			if from >= 800 {
				return 0.6
			}
			return 0.3
		}, secs: 1, chunks: 2, want: []spec.SlowNode{{NodeID: "node-3", Factor: 2, Chunks: 2, Since: 800}}},
		{name: "1.2× at a job's 1.15×", compute: func(int64) float64 { return 0.36 }, secs: 1, factor: 1.15,
			want: []spec.SlowNode{{NodeID: "node-3", Factor: 1.2, Chunks: 10, Since: 0}}},
		{name: "slow from 200, a chunk ended early in between", compute: func(from int64) float64 {
			if from >= 200 {
				return 0.6
			}
			return 0.3
		}, secs: 1, early: 500, want: []spec.SlowNode{{NodeID: "node-3", Factor: 2, Chunks: 8, Since: 200}}},
		{name: "noise", compute: func(int64) float64 { return 0.33 }, secs: 1},
		{name: "too short to time", compute: func(int64) float64 { return 0.6 }, secs: 0.04},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &fakeChunks{edit: func(in spec.ChunkInput, res *spec.ChunkResult) {
				c := 0.3 * tc.secs
				if res.NodeID == "node-3" {
					c = tc.compute(in.From) * tc.secs
				}
				if tc.early > 0 && in.From == tc.early {
					c = 0.3 * tc.secs
					res.To, res.Checkpoint = in.From+40, nil
					if in.Rank == 0 {
						res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: res.To, Key: fmt.Sprintf("ckpt/%d", res.To)}
					}
				}
				res.Seconds, res.CommShare = tc.secs, 1-c/tc.secs
			}}
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 1000, ChunkSteps: 100, SlowNodeFactor: tc.factor, SlowNodeChunks: tc.chunks}.WithDefaults()
			if tc.drain {
				s.SlowNode = spec.SlowNodeDrain
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			// (The Cluster would tell the run to move off the drained
			// node; this one does not.)
			if tc.drain {
				require.Len(t, cl.drains, 1, "drained once")
				d := cl.drains[0]
				require.Equal(t, "node-3", d.NodeID)
				require.True(t, d.Drained)
				require.Equal(t, "slow: computed 2.0× its peers' time 3 chunks in a row from step 200 of run default-test-workflow-id (slow_node: drain)", d.Reason)
			} else {
				require.Empty(t, cl.drains, "reported, not drained")
			}
			require.Len(t, st.SlowNodes, len(tc.want))
			for i, want := range tc.want {
				got := st.SlowNodes[i]
				require.InDelta(t, want.Factor, got.Factor, 1e-9)
				got.Factor = want.Factor
				require.Equal(t, want, got)
			}
		})
	}
}

// TestTrainingRunReplacesASlowNode: with slow_node: replace, node-3
// computing twice its peers' time three chunks in a row is left at the
// next boundary for the free node-4 — named in the acquire request, not
// drained — and the run trains on at its peers' pace. With no free node
// it keeps node-3, says so once, trains on with the status naming the
// node it is to leave, and leaves it at the first boundary a minute on
// where a node is free (here: after a pause, node-4 joined the pool).
// When node-4 is slow in turn, the free node-5 takes its rank, not node-3,
// which the run left (AcquireRequest.Avoid).
func TestTrainingRunReplacesASlowNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool []string
	}{
		{name: "a free node takes its rank", pool: []string{"node-1", "node-2", "node-3", "node-4", "node-5"}},
		{name: "none free", pool: []string{"node-1", "node-2", "node-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &fakeChunks{edit: func(in spec.ChunkInput, res *spec.ChunkResult) {
				c := 0.3
				if res.NodeID == "node-3" && in.From >= 200 || res.NodeID == "node-4" && in.From >= 800 {
					c = 0.6
				}
				res.Seconds, res.CommShare = 1, 1-c
			}}
			cl := &fakeCluster{pool: testNodes(tc.pool...)}
			var leaves, avoids [][]string
			cl.onAcquire = func(req spec.AcquireRequest) {
				if len(req.Leave) > 0 {
					leaves, avoids = append(leaves, req.Leave), append(avoids, req.Avoid)
				}
			}
			env := newRunEnv(t, cl, ch)
			var during spec.RunStatus
			if len(tc.pool) == 3 {
				ch.onStart = func(in spec.ChunkInput) {
					if in.From == 700 && in.Rank == 0 {
						env.SignalWorkflow(spec.SignalPause, nil)
					}
				}
				// Held at step 800 meanwhile; a minute is long past at the resume.
				env.RegisterDelayedCallback(func() { during = queryStatus(t, env) }, time.Hour)
				env.RegisterDelayedCallback(func() {
					cl.mu.Lock()
					cl.pool = append(cl.pool, testNodes("node-4")...)
					cl.mu.Unlock()
					env.SignalWorkflow(spec.SignalResume, nil)
				}, 2*time.Hour)
			}
			s := spec.RunSpec{Name: "t", Nodes: 3, MinNodes: 2, Steps: 1000, ChunkSteps: 100, SlowNode: spec.SlowNodeReplace}.WithDefaults()
			if len(tc.pool) == 5 {
				s.Steps = 1400
			}
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Empty(t, cl.drains, "replaced, not drained")
			require.NotEmpty(t, st.Rescalings)
			rec := st.Rescalings[0]
			require.Equal(t, int64(500), rec.AtStep, "after the chunks from 200, 300 and 400")
			require.Contains(t, rec.Reason, "node-3 replaced: slow: computed 2.0× its peers' time 3 chunks in a row from step 200 (slow_node: replace)")
			require.Equal(t, []string{"node-3"}, leaves[0])
			byFrom := ch.byFrom()
			if len(tc.pool) == 5 {
				require.Len(t, st.Rescalings, 2)
				require.Empty(t, rec.Error)
				require.Equal(t, []string{"node-4"}, rec.Added)
				require.Equal(t, []string{"node-3"}, rec.Removed)
				for from := int64(500); from < 1100; from += 100 {
					require.Equal(t, []string{"node-1", "node-2", "node-4"}, byFrom[from][0].Membership.NodeIDs(), "chunk from %d", from)
				}
				again := st.Rescalings[1]
				require.Equal(t, int64(1100), again.AtStep)
				require.Equal(t, []string{"node-5"}, again.Added, "node-5, not node-3, which the run left")
				require.Equal(t, []string{"node-4"}, again.Removed)
				require.Equal(t, [][]string{{"node-3"}, {"node-4"}}, leaves)
				require.Equal(t, [][]string{nil, {"node-3"}}, avoids)
				require.Equal(t, []string{"node-1", "node-2", "node-5"}, st.Nodes)
				require.Empty(t, st.SlowNodes, "the run trains at its peers' pace")
				return
			}
			// None free: kept, said once, trained on; left once node-4 is.
			require.Contains(t, rec.Error, "no free node to take its place; training on with it")
			require.Equal(t, 3, rec.ToNodes)
			require.Equal(t, []string{"node-3"}, during.Leaving, "the status names the slow node it is to leave")
			require.Empty(t, during.Evicting, "not drained")
			require.Equal(t, []string{"node-1", "node-2", "node-3"}, byFrom[700][0].Membership.NodeIDs())
			require.Len(t, st.Rescalings, 2)
			again := st.Rescalings[1]
			require.Empty(t, again.Error)
			require.Equal(t, int64(800), again.AtStep)
			require.Equal(t, []string{"node-4"}, again.Added)
			require.Equal(t, []string{"node-3"}, again.Removed)
			require.Equal(t, []string{"node-1", "node-2", "node-4"}, st.Nodes)
			require.Len(t, leaves, 2, "asked once, then once more a minute on")
			require.Empty(t, st.Leaving)
		})
	}
}

// TestCrowded: the node with the fewest cores is named when it has fewer
// than the ranks per node; results that do not say their cores (external
// jobs, older workers) name nobody.
func TestCrowded(t *testing.T) {
	res := func(cores ...int) []spec.ChunkResult {
		var rs []spec.ChunkResult
		for i, c := range cores {
			rs = append(rs, spec.ChunkResult{NodeID: fmt.Sprintf("n%d", i+1), Cores: c})
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		results []spec.ChunkResult
		ranks   int
		want    *spec.CrowdedNode
	}{
		{"enough cores", res(8, 4), 4, nil},
		{"one short", res(8, 3), 4, &spec.CrowdedNode{NodeID: "n2", Ranks: 4, Cores: 3}},
		{"the fewest", res(2, 1, 3), 8, &spec.CrowdedNode{NodeID: "n2", Ranks: 8, Cores: 1}},
		{"unknown", res(0, 0), 64, nil},
		{"one rank", res(1), 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := crowded(tc.results, tc.ranks); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("crowded = %+v, want %+v", got, tc.want)
			}
		})
	}
}
