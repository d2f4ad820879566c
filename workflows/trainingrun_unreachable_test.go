package workflows

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunTemporalStallCountsNoRestart: a chunk the SDK stopped on
// its nodes because their heartbeats did not reach Temporal (a stall of
// the server shorter than the heartbeat timeout: TemporalUnreachable from
// the stalled nodes, PeerFailed naming them from their peers) goes on on
// the same nodes, blaming none and counting no restart — up to
// maxFreeUnreached times in a row without a checkpoint; the next one
// counts. Before, each such stall spent a restart as "context canceled".
func TestTrainingRunTemporalStallCountsNoRestart(t *testing.T) {
	unreachable := func(node string, gen int64, at int64) error {
		o := temporal.ApplicationErrorOptions{Cause: errors.New("context canceled")}
		if at > 0 { // (newer node workers say how far they got)
			o.Details = []any{spec.ChunkProgress{Step: at}}
		}
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("node %s could not reach Temporal to heartbeat (context deadline exceeded; gen %d), so its activity was stopped; the node is alive", node, gen),
			spec.ErrTypeTemporalUnreachable, o)
	}
	for _, tc := range []struct {
		name  string
		stall func(in spec.ChunkInput) bool // the chunk stalls at its node of rank 0
		both  bool                          // both nodes stall (else rank 1 loses rank 0)
		free  int                           // recoveries that count no restart
		total int                           // recoveries
		// said: the stalled nodes say they reached this many steps into
		// the chunk (0: they do not say); the first recovery's lost steps.
		said int64
	}{
		{"two stalls, a checkpoint between", func(in spec.ChunkInput) bool {
			return in.Membership.Generation == 1 && in.From == 200 || in.Membership.Generation == 2 && in.From == 400
		}, false, 2, 2, 0},
		{"both nodes stall", func(in spec.ChunkInput) bool { return in.Membership.Generation == 1 && in.From == 300 }, true, 1, 1, 0},
		{"both nodes stall, saying how far they got", func(in spec.ChunkInput) bool { return in.Membership.Generation == 1 && in.From == 300 }, true, 1, 1, 37},
		{"four in a row, no checkpoint between", func(in spec.ChunkInput) bool {
			return in.From == 200 && in.Membership.Generation <= 4
		}, false, maxFreeUnreached, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1")}
			ch := &fakeChunks{}
			// The peer's word reaches the workflow after the stalled
			// node's own, as after a stall of the server both arrive in
			// one workflow task (a peer's alone would have the stalled
			// rank cancelled and blamed: that is the order below).
			var mu sync.Mutex
			said := map[int64]chan struct{}{} // by generation: closed once its stalled node's word is in
			saidIn := func(gen int64) chan struct{} {
				mu.Lock()
				defer mu.Unlock()
				if said[gen] == nil {
					said[gen] = make(chan struct{})
				}
				return said[gen]
			}
			ch.fail = func(in spec.ChunkInput) error {
				switch {
				case !tc.stall(in):
					return nil
				case in.Rank == 0 || tc.both:
					at := int64(0)
					if tc.said > 0 {
						at = in.From + tc.said // (each rank: whichever word is in first counts)
					}
					return unreachable(in.Membership.Nodes[in.Rank].ID, in.Membership.Generation, at)
				}
				<-saidIn(in.Membership.Generation)
				return temporal.NewApplicationErrorWithCause("peer node "+in.Membership.Nodes[0].ID+" failed: EOF", spec.ErrTypePeerFailed,
					errors.New("EOF"), spec.PeerFailure{Rank: 0, Step: in.From + 10})
			}
			env := newRunEnv(t, cl, ch)
			env.SetOnActivityCompletedListener(func(_ *activity.Info, _ converter.EncodedValue, err error) {
				var ae *temporal.ApplicationError
				var gen int64
				if errors.As(err, &ae) && ae.Type() == spec.ErrTypeTemporalUnreachable {
					if _, err := fmt.Sscanf(ae.Message()[strings.Index(ae.Message(), "; gen ")+1:], "gen %d", &gen); err == nil && !tc.both {
						close(saidIn(gen))
					}
				}
			})
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 600, ChunkSteps: 100, CheckpointEvery: 100, MaxRestarts: 1}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.EqualValues(t, 600, st.Step)
			require.Len(t, st.Recoveries, tc.total)
			free := 0
			for i, rec := range st.Recoveries {
				t.Logf("recovery %d: gen %d outage %v failed %v → %v at %d/%d resume %d unknown %v: %s", i, rec.Generation, rec.Outage, rec.FailedNodes, rec.Replacement, rec.AtStep, rec.FailedAtStep, rec.ResumeStep, rec.StepUnknown, rec.Reason)
				require.Empty(t, rec.FailedNodes, "recovery %d: a stalled node is alive, not to blame", i)
				require.Empty(t, rec.Replacement, "recovery %d", i)
				if rec.Outage {
					free++
					require.Contains(t, rec.Reason, "could not reach Temporal to heartbeat")
					require.Contains(t, rec.Reason, "no restart counted")
				}
			}
			require.Equal(t, tc.free, free, "recoveries that count no restart")
			// How far the chunk got: the furthest a node said, else
			// unknown.
			first := st.Recoveries[0]
			if tc.said == 0 {
				// (The stalled node an older worker; its peer cancelled
				// once the stalled node's word was in.)
				require.True(t, first.StepUnknown, "no node said how far the chunk got")
				require.Zero(t, first.LostSteps)
			} else {
				require.False(t, first.StepUnknown)
				require.Equal(t, first.AtStep+tc.said, first.FailedAtStep, "the furthest step a stalled node said")
				require.Equal(t, tc.said, first.LostSteps)
			}
			require.Equal(t, []string{"node-1", "node-2"}, st.Nodes, "the same nodes throughout")
		})
	}
}
