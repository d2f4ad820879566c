package workflows

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestExternalRunReplacesANodeCutOffFromTheBucket: an external job's
// world restarts from its checkpoint at step 40 after a rank exited, and
// node-3 cannot read that checkpoint; the world's other nodes, which
// restored it and were cancelled with the world, are asked to read it
// again (ActivityProbeRead). Read by them: the run holds once, saying
// who read it and whom it replaces if the next try fails so, and at the
// second such try replaces node-3 with the spare and takes it no more
// (AcquireRequest.Shun). Read by nobody, or with nobody to ask (nodes of
// an older build), it holds as for a storage down, blaming no node. The
// world is stopped as soon as node-3 fails (versionStopUnformed), not
// after the grace its peers' processes get when a node is lost.
func TestExternalRunReplacesANodeCutOffFromTheBucket(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol int
		// probe answers ProbeRead on node's queue.
		probe  func(node string) error
		asked  []string // the nodes asked, in order, each try
		detail string   // in the first hold's status
		// replaced: node-3 replaced by the spare at the second try; else
		// held again, and the storage serves node-3 at the third.
		replaced bool
	}{
		{name: "read by its peers", protocol: spec.ChunkProtocolReadProbe, probe: func(string) error { return nil },
			asked:    []string{"node-1", "node-2"},
			detail:   "node node-3 cannot read the checkpoint at step 40 from s3://ckpt: the bucket did not answer in time (nodes node-1, node-2 read it); the run replaces node node-3 if the next try fails so again",
			replaced: true},
		{name: "read by one peer", protocol: spec.ChunkProtocolReadProbe, probe: func(node string) error {
			if node == "node-2" {
				return unreadable(node, 40)
			}
			return nil
		},
			asked:    []string{"node-1", "node-2"},
			detail:   "(node node-1 read it); the run replaces node node-3 if the next try fails so again",
			replaced: true},
		{name: "read by nobody", protocol: spec.ChunkProtocolReadProbe, probe: func(node string) error { return unreadable(node, 40) },
			asked:  []string{"node-1", "node-2"},
			detail: "node node-3 cannot read the checkpoint at step 40 from s3://ckpt: the bucket did not answer in time (no node read it)"},
		{name: "older nodes", protocol: spec.ChunkProtocolSaver,
			detail: "node node-3 cannot read the checkpoint at step 40 from s3://ckpt: the bucket did not answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testNodes("node-1", "node-2", "node-3", "spare")
			for i := range pool {
				pool[i].Protocol = tc.protocol
			}
			cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
			var shun []spec.NodeProcess
			cl.onAcquire = func(req spec.AcquireRequest) { shun = req.Shun }
			w := &fakeWorlds{end: 100, ckpts: []int64{20, 40}}
			var (
				mu       sync.Mutex
				launches []string // sessions of the launches that restore
				asked    [][]string
			)
			w.behave = func(in spec.ExternalInput) error {
				node := in.Membership.Nodes[in.Rank].ID
				if in.Restore == nil {
					// Every rank exits (a NaN): the world restarts from 40.
					return temporal.NewApplicationError(fmt.Sprintf("rank-%d on node %s exited with status 1 at step 56", 2*in.Rank, node),
						spec.ErrTypeRankExited, spec.RankExit{Rank: 2 * in.Rank, Process: fmt.Sprintf("rank-%d", 2*in.Rank), Node: node, ExitCode: 1, Step: 56})
				}
				mu.Lock()
				if !slices.Contains(launches, in.Session) {
					launches = append(launches, in.Session)
				}
				try := slices.Index(launches, in.Session) + 1
				mu.Unlock()
				switch {
				case node == "node-3" && try <= 2:
					return unreadable(node, 40)
				case try <= 2:
					// Restored, its processes wait for node-3's until the
					// run stops the world — at once: a hanging activity
					// keeps the test's clock real, and the grace for a
					// loss (15 s) would outlast the test's 3 s.
					return errHang
				}
				return nil
			}
			env := newExternalEnv(t, cl, w)
			env.RegisterActivityWithOptions(func(ctx context.Context, in spec.ProbeReadInput) error {
				node := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, spec.NodeTaskQueue(""))
				mu.Lock()
				if n := len(launches); len(asked) < n {
					asked = append(asked, make([][]string, n-len(asked))...)
				}
				asked[len(launches)-1] = append(asked[len(launches)-1], node)
				world := launches[len(launches)-1]
				mu.Unlock()
				require.EqualValues(t, 40, in.Checkpoint.Step)
				require.Equal(t, world, in.Session, "the world that could not restore it")
				if in.Checkpoint.Key != "ckpt/40" || in.RunID == "" {
					return fmt.Errorf("asked to read %+v of run %q", in.Checkpoint, in.RunID)
				}
				return tc.probe(node)
			}, activity.RegisterOptions{Name: spec.ActivityProbeRead})
			var during []spec.RunStatus
			env.RegisterDelayedCallback(func() { during = append(during, queryStatus(t, env)) }, 10*time.Second)
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: externalSpec(3)})
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)

			require.Len(t, during, 1)
			require.Equal(t, spec.PhaseStorageWait, during[0].Phase)
			require.Contains(t, during[0].Detail, tc.detail)
			if tc.asked == nil {
				require.Empty(t, asked, "nodes of an older build are not asked")
			} else {
				for i, nodes := range asked {
					slices.Sort(nodes)
					require.Equal(t, tc.asked, nodes, "try %d", i+1)
				}
			}
			ls := w.launches()
			if tc.replaced {
				require.Len(t, asked, 2, "asked at each try")
				require.Equal(t, []string{"node-1", "node-2", "spare"}, st.Nodes)
				require.Len(t, st.Recoveries, 2, "the rank's exit, then node-3")
				rec := st.Recoveries[1]
				require.Equal(t, []string{"node-3"}, rec.FailedNodes)
				require.Equal(t, []string{"spare"}, rec.Replacement)
				require.Contains(t, rec.Reason, "node node-3 could not read the checkpoint at step 40 in two tries in a row while node")
				require.Contains(t, rec.Reason, "(no restart counted: the tries trained nothing, and the run takes it no more)")
				require.Equal(t, []spec.NodeProcess{{ID: "node-3"}}, shun)
				require.Equal(t, []string{"node-3"}, st.CutOff)
				require.Equal(t, []string{"node-3"}, failedIn(cl))
				require.Len(t, ls, 4)
				return
			}
			// Held twice, then read: no node blamed, no restart for it.
			require.Equal(t, []string{"node-1", "node-2", "node-3"}, st.Nodes)
			require.Len(t, st.Recoveries, 1, "the rank's exit alone")
			require.Empty(t, st.CutOff)
			require.Empty(t, shun)
			require.Empty(t, failedIn(cl))
			require.Len(t, ls, 4)
			for _, l := range ls[1:] {
				require.EqualValues(t, 40, l[0].Restore.Step)
				require.Equal(t, 1, l[0].Restarts, "a hold for the storage is no restart")
			}
		})
	}
}
