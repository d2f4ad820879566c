package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunNamesASlowNode: every node's chunk takes the same time
// (they meet at every allreduce), but node-3 computes for twice as long as
// its peers, who wait for it: after three such chunks in a row the status
// names it, with the factor, the streak and where it began, until a chunk
// in which it keeps up. Noise (10 %) and chunks too short to time name
// nobody. With slow_node: drain the run asks the Cluster, once, to drain
// it.
func TestTrainingRunNamesASlowNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// compute is node-3's computation in the chunk from step from
		// (its peers': 0.3 s); secs every node's chunk time.
		compute func(from int64) float64
		secs    float64
		want    []spec.SlowNode
		drain   bool // slow_node: drain
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
		{name: "noise", compute: func(int64) float64 { return 0.33 }, secs: 1},
		{name: "too short to time", compute: func(int64) float64 { return 0.6 }, secs: 0.04},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &fakeChunks{edit: func(in spec.ChunkInput, res *spec.ChunkResult) {
				c := 0.3 * tc.secs
				if res.NodeID == "node-3" {
					c = tc.compute(in.From) * tc.secs
				}
				res.Seconds, res.CommShare = tc.secs, 1-c/tc.secs
			}}
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 1000, ChunkSteps: 100}.WithDefaults()
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
