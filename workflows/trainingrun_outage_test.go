package workflows

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunOutlivesAServiceOutage: the chunk's every node (here
// one; TestRunOutlivesAServiceOutage runs two on a real server that goes
// away) times out for want of heartbeats, twice: the Temporal service was
// out for longer than the heartbeat timeout, and the heartbeats of that
// while were lost. Asked after, the node's worker answers: the run resumes
// on the same node from its last checkpoint, marks nobody failed and
// counts no restart — with max_restarts 1 it completes after both. A node
// whose worker does not answer is failed and replaced, as before.
func TestTrainingRunOutlivesAServiceOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deaf     []string // nodes whose workers do not answer after the silence
		outages  int      // chunks whose every node goes silent
		nodes    []string // at the end
		failed   []string // marked failed in the Cluster
		outage   bool     // the recoveries say so
		restarts int      // max_restarts
	}{
		{"its worker answers", nil, 2, []string{"a"}, nil, true, 1},
		{"its worker does not", []string{"a"}, 1, []string{"s1"}, []string{"a"}, false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("a", "s1")}
			silent := map[int64]bool{} // chunk starts (by From) that went silent
			ch := &fakeChunks{
				fail: func(in spec.ChunkInput) error {
					if in.From == 0 || in.From > 20*int64(tc.outages) {
						return nil
					}
					return temporal.NewHeartbeatTimeoutError(spec.ChunkProgress{Step: in.From + 3})
				},
				deaf: func(queue string) bool {
					return slices.ContainsFunc(tc.deaf, func(n string) bool { return spec.NodeTaskQueue(n) == queue })
				},
			}
			// Each silent chunk fails once: it succeeds when tried again.
			fail := ch.fail
			ch.fail = func(in spec.ChunkInput) error {
				err := fail(in)
				if err == nil {
					return nil
				}
				ch.mu.Lock()
				defer ch.mu.Unlock()
				if silent[in.From] && in.Membership.Generation > silentGen(ch, in.From) {
					return nil
				}
				silent[in.From] = true
				return err
			}
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "outage", Nodes: 1, Steps: 60, ChunkSteps: 20, MaxRestarts: tc.restarts}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, tc.nodes, st.Nodes)
			require.Len(t, st.Recoveries, tc.outages)
			for i, rec := range st.Recoveries {
				require.Equal(t, tc.outage, rec.Outage, "recovery %d: %+v", i, rec)
				require.EqualValues(t, 20*(i+1), rec.ResumeStep)
				if tc.outage {
					require.Empty(t, rec.FailedNodes)
					require.True(t, strings.Contains(rec.Reason, "the Temporal service, or the nodes' way to it, was out"), rec.Reason)
				} else {
					require.Equal(t, tc.failed, rec.FailedNodes)
				}
			}
			cl.mu.Lock()
			defer cl.mu.Unlock()
			var marked []string
			for id, f := range cl.failed {
				if f {
					marked = append(marked, id)
				}
			}
			slices.Sort(marked)
			require.Equal(t, tc.failed, marked)
			// The silent node was asked, on its own queue, once a silence.
			ch.mu.Lock()
			defer ch.mu.Unlock()
			var asked []string
			for _, c := range ch.checks {
				asked = append(asked, c.queue)
			}
			require.Equal(t, slices.Repeat([]string{spec.NodeTaskQueue("a")}, tc.outages), asked)
		})
	}
}

// silentGen is the generation of the first input of the chunk from step
// from (the one that went silent); f.mu is held.
func silentGen(f *fakeChunks, from int64) int64 {
	for _, in := range f.inputs {
		if in.From == from {
			return in.Membership.Generation
		}
	}
	return 0
}
