package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/spec"
)

// fakeProbe plays ProbeLinks: ranks 0–1 on host a, 2 on host b; intra-host
// links fast, inter-host ones slow.
type fakeProbe struct {
	mu    sync.Mutex
	calls int
	fail  bool
	// dead, when set, is a rank whose node died: its probe never returns
	// (until hang closes) and the others name it.
	dead *int
	hang chan struct{}
}

func (f *fakeProbe) probe(_ context.Context, in spec.ProbeInput) (*spec.ProbeResult, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.fail {
		return nil, errors.New("probe broke")
	}
	if f.dead != nil {
		if in.Rank == *f.dead {
			<-f.hang
			return nil, errors.New("unreachable")
		}
		return nil, temporal.NewApplicationErrorWithCause(fmt.Sprintf("probe: rank %d refuses connections", *f.dead),
			spec.ErrTypePeerFailed, errors.New("refused"), spec.PeerFailure{Rank: *f.dead})
	}
	host := "a"
	if in.Rank >= 2 {
		host = "b"
	}
	res := &spec.ProbeResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, Host: host}
	if in.Rank == 0 {
		n := len(in.Membership.Nodes)
		for i := range n {
			for j := range n {
				if i == j {
					continue
				}
				l := spec.LinkSample{From: i, To: j, LatencyNS: 5_000, BytesPerSec: 10e9}
				if (i >= 2) != (j >= 2) {
					l.LatencyNS, l.BytesPerSec = 50_000, 1e9
				}
				res.Links = append(res.Links, l)
			}
		}
	}
	return res, nil
}

func TestTopologyScanChoosesAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		collective string
		fail       bool
		want       string // algorithm in the chunks; "" = ring (unset)
	}{
		{"auto", false, "*"}, // whatever the model picks, recorded and used
		{"hd", false, "hd"},  // fixed: the scan only reports
		{"auto", true, ""},   // a failed scan: ring, the run goes on
	} {
		t.Run(tc.collective+map[bool]string{true: "-failing", false: ""}[tc.fail], func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
			ch := &fakeChunks{}
			env := newRunEnv(t, cl, ch)
			pr := &fakeProbe{fail: tc.fail}
			env.RegisterActivityWithOptions(pr.probe, activity.RegisterOptions{Name: spec.ActivityProbeLinks})
			env.RegisterActivityWithOptions(activities.Planner{}.PlanTopology, activity.RegisterOptions{Name: spec.ActivityPlanTopology})
			s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100, Collective: tc.collective, TopologyScan: true}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var st spec.RunStatus
			require.NoError(t, env.GetWorkflowResult(&st))
			if tc.fail {
				// The first failure cancels the probes not yet run.
				require.True(t, pr.calls >= 1 && pr.calls <= 3, "%d probes: at most one per node", pr.calls)
			} else {
				require.Equal(t, 3, pr.calls, "one probe per node, once")
			}
			if tc.fail {
				require.Nil(t, st.Topology)
			} else {
				require.NotNil(t, st.Topology)
				require.Equal(t, 2, st.Topology.HostCount)
				require.Len(t, st.Topology.Levels, 2)
				require.NotEmpty(t, st.Topology.Predictions)
				require.Contains(t, st.Topology.Text, "inter-host")
				require.Equal(t, 4*s.GradientFloats(), st.Topology.GradientBytes)
				rt, err := ranktable.Parse([]byte(st.Topology.RankTable))
				require.NoError(t, err, "rank table %q", st.Topology.RankTable)
				require.Equal(t, 3, rt.RankSize())
				require.Len(t, rt.Servers, 2)
			}
			var algos []string
			for _, ins := range ch.byFrom() {
				for _, in := range ins {
					algos = append(algos, in.Algorithm)
				}
			}
			require.Len(t, algos, 6)
			for _, a := range algos {
				switch tc.want {
				case "*":
					require.Equal(t, st.Topology.Algorithm, a)
					require.NotEmpty(t, a)
				default:
					require.Equal(t, tc.want, a)
				}
			}
		})
	}
}

// TestTopologyScanLosesADeadNode: node-2 died as the scan began; the
// other ranks name it, and the scan, lost, ends at once instead of
// waiting out the dead node's one-minute probe timeout (the run trains on
// with the ring; its first chunk names the dead node).
func TestTopologyScanLosesADeadNode(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "node-3")}
	ch := &fakeChunks{}
	env := newRunEnv(t, cl, ch)
	env.SetTestTimeout(30 * time.Second) // the dead probe keeps the test clock real
	dead := 1
	pr := &fakeProbe{dead: &dead, hang: make(chan struct{})}
	t.Cleanup(func() { close(pr.hang) })
	env.RegisterActivityWithOptions(pr.probe, activity.RegisterOptions{Name: spec.ActivityProbeLinks})
	s := spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100, Collective: "auto", TopologyScan: true}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st spec.RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Nil(t, st.Topology)
	require.EqualValues(t, 200, st.Step)
	require.Len(t, ch.byFrom()[0], 3, "trained on, with the ring")
}
