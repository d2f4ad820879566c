package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunTellsNodesItsDataSet: the run's first chunk carries no
// data fingerprint (its nodes compare theirs); the chunks after carry the
// one its nodes reported, so a replacement whose data differs refuses as
// unfit and is replaced in turn, marked misconfigured (it registered no
// data set, and says so without its fingerprint). Nodes that cannot
// agree on a data set fail the run at once, saying so.
func TestTrainingRunTellsNodesItsDataSet(t *testing.T) {
	const sum = "5fd4a112"
	t.Run("a replacement with other data", func(t *testing.T) {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1", "spare-2"), failed: map[string]bool{}}
		dead := make(chan struct{})
		t.Cleanup(func() { close(dead) })
		ch := &fakeChunks{
			edit: func(_ spec.ChunkInput, res *spec.ChunkResult) { res.DataSHA256 = sum },
			fail: func(in spec.ChunkInput) error {
				switch node := in.Membership.Nodes[in.Rank].ID; {
				case in.From == 100 && in.Membership.Generation == 1 && node == "node-1":
					return temporal.NewApplicationErrorWithCause("peer 1 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 130})
				case in.From == 100 && in.Membership.Generation == 1:
					<-dead // killed: it never answers
					return errors.New("unreachable")
				case node == "spare-1" && in.DataSHA256 != "":
					msg := fmt.Sprintf("node spare-1's data set (/data) differs from the one run %s trains on: sha256 0011…, not %s…", in.RunID, in.DataSHA256)
					return temporal.NewApplicationError(msg, spec.ErrTypeNodeUnfit)
				case node == "node-1" && in.Membership.Generation == 2:
					return temporal.NewApplicationErrorWithCause("peer 1 left", spec.ErrTypePeerFailed, errors.New("EOF"), spec.PeerFailure{Rank: -1, Step: 100})
				}
				return nil
			},
		}
		requests := acquireLog(cl)
		env := newRunEnv(t, cl, ch)
		s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 300, ChunkSteps: 100, MaxRestarts: 3}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		st := result(t, env)
		require.Equal(t, []string{"node-1", "spare-2"}, st.Nodes)
		require.Equal(t, sum, st.DataSHA256, "the status names the data set")
		var asked []string // each acquire's data set
		for _, req := range requests() {
			asked = append(asked, req.DataSHA256)
		}
		require.Equal(t, []string{"", sum, sum}, asked, "replacements are asked for nodes holding the run's data set")
		require.Len(t, st.Recoveries, 2)
		require.Equal(t, []string{"spare-1"}, st.Recoveries[1].FailedNodes)
		require.Contains(t, st.Recoveries[1].Reason, "node spare-1's data set (/data) differs from the one run")
		cl.mu.Lock()
		require.True(t, cl.misconfigured["spare-1"], "kept failed as misconfigured")
		cl.mu.Unlock()
		for _, in := range ch.all() {
			want := sum
			if in.From == 0 {
				want = ""
			}
			require.Equal(t, want, in.DataSHA256, "chunk from %d, gen %d, rank %d", in.From, in.Membership.Generation, in.Rank)
		}
	})
	t.Run("no majority", func(t *testing.T) {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
		ch := &fakeChunks{fail: func(spec.ChunkInput) error {
			return temporal.NewNonRetryableApplicationError("the nodes' data sets differ and no majority agrees on one: node-1 aa…, node-2 bb…",
				spec.ErrTypeDataMismatch, nil)
		}}
		env := newRunEnv(t, cl, ch)
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 100, ChunkSteps: 50}.WithDefaults()})
		err := env.GetWorkflowError()
		require.ErrorContains(t, err, "no majority agrees on one: node-1 aa…, node-2 bb…")
		for _, in := range ch.all() {
			require.EqualValues(t, 1, in.Membership.Generation, "no restart")
		}
	})
}

// TestTrainingRunPinnedDataSet: a job that names its data set
// (data_sha256) hands it to every chunk in its spec; the first chunk's
// nodes compare theirs with it, so that a node holding other data is
// unfit and replaced even where no majority could say which data is right
// (two nodes that differ), and the chunks after carry it as the run's.
// The status names the data set once the nodes confirmed it.
func TestTrainingRunPinnedDataSet(t *testing.T) {
	pinned := strings.Repeat("ac2983e2", 8)
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1"), failed: map[string]bool{}}
	ch := &fakeChunks{
		edit: func(_ spec.ChunkInput, res *spec.ChunkResult) { res.DataSHA256 = pinned },
		fail: func(in spec.ChunkInput) error {
			switch {
			case in.Spec.DataSHA256 != pinned:
				return temporal.NewNonRetryableApplicationError("the nodes' data sets differ and no majority agrees on one", spec.ErrTypeDataMismatch, nil)
			case in.Membership.Nodes[in.Rank].ID == "node-2":
				return temporal.NewApplicationError("node node-2's data set (/data) differs from the one the job pins", spec.ErrTypeNodeUnfit)
			case slices.ContainsFunc(in.Membership.Nodes, func(n spec.Node) bool { return n.ID == "node-2" }):
				return temporal.NewApplicationErrorWithCause("peer's data differs", spec.ErrTypePeerFailed, errors.New("data"), spec.PeerFailure{Rank: 1, Step: in.From})
			}
			return nil
		},
	}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 100, DataSHA256: pinned}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	st := result(t, env)
	require.Equal(t, []string{"node-1", "spare-1"}, st.Nodes)
	require.Len(t, st.Recoveries, 1)
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes)
	require.Equal(t, pinned, st.DataSHA256)
	for _, in := range ch.all() {
		want := pinned
		if in.From == 0 {
			want = "" // compared, against the pin
		}
		require.Equal(t, want, in.DataSHA256, "chunk from %d, gen %d, rank %d", in.From, in.Membership.Generation, in.Rank)
	}
}

// TestTrainingRunResumedOnOtherData: a run resumed from an earlier run's
// checkpoint compares its nodes' data afresh (the earlier run's
// fingerprint is not carried over as this run's) and keeps the earlier
// one in the resumption's record, so the status can say the data changed.
func TestTrainingRunResumedOnOtherData(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	ch := &fakeChunks{edit: func(_ spec.ChunkInput, res *spec.ChunkResult) { res.DataSHA256 = "new" }}
	env := newRunEnv(t, cl, ch)
	ck := spec.CheckpointRef{URL: "mem://", Run: "run/t", Step: 200, Key: "ckpt/200"}
	prev := spec.RunStatus{RunID: "run/t", Phase: spec.PhaseFailed, Step: 230, Generation: 3, LastCkpt: &ck, DataSHA256: "old"}
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	var before []string
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) {
		before = append(before, queryStatus(t, env).DataSHA256)
	})
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s, Resume: &prev})
	st := result(t, env)
	require.NotEmpty(t, before)
	require.Empty(t, before[0], "the earlier run's data set is not named as this run's")
	for _, in := range ch.byFrom()[200] {
		require.Empty(t, in.DataSHA256, "the nodes compare theirs")
	}
	for _, in := range ch.byFrom()[300] {
		require.Equal(t, "new", in.DataSHA256)
	}
	require.Equal(t, "new", st.DataSHA256)
	require.Len(t, st.Resumed, 1)
	require.Equal(t, "old", st.Resumed[0].DataSHA256)
}

// TestTrainingRunGivesBackNodesOnOtherData: a first chunk's node whose
// data set is not the run's says both (DataDisagreement). The run takes
// its data set from it at once — the replacement acquire passes over
// nodes holding another, the next chunk's nodes check theirs against it
// — and gives the node back fit for runs on its own data set when it
// registered that set (the Cluster then never hands it to this run), or
// keeps it failed as misconfigured when it registered none (an older
// worker: nothing would keep it from the run). A pinned job asks for the
// nodes holding its pin first.
func TestTrainingRunGivesBackNodesOnOtherData(t *testing.T) {
	sum, other := strings.Repeat("5fd4a112", 8), strings.Repeat("0011aabb", 8)
	for _, tc := range []struct {
		name       string
		registered string // node-2's data set as it registered it
		pin        string
		otherData  bool
	}{
		{name: "registered its data set", registered: other, otherData: true},
		{name: "registered none", registered: ""},
		{name: "pinned", registered: other, pin: sum, otherData: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testNodes("node-1", "node-2", "spare-1")
			pool[0].DataSHA256, pool[1].DataSHA256, pool[2].DataSHA256 = sum, tc.registered, sum
			cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
			ch := &fakeChunks{
				edit: func(_ spec.ChunkInput, res *spec.ChunkResult) { res.DataSHA256 = sum },
				fail: func(in spec.ChunkInput) error {
					switch {
					case in.Membership.Nodes[in.Rank].ID == "node-2":
						return temporal.NewApplicationErrorWithCause("node node-2's data set (/other) differs from its peers'",
							spec.ErrTypeNodeUnfit, errors.New("data"), spec.DataDisagreement{Run: sum, Node: other})
					case slices.ContainsFunc(in.Membership.Nodes, func(n spec.Node) bool { return n.ID == "node-2" }):
						return temporal.NewApplicationErrorWithCause("node node-2's data set differs from the run's", spec.ErrTypePeerFailed, errors.New("data"),
							spec.PeerFailure{Rank: 1, Step: in.From, Data: &spec.DataDisagreement{Run: sum, Node: other}})
					}
					return nil
				},
			}
			requests := acquireLog(cl)
			env := newRunEnv(t, cl, ch)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 100, DataSHA256: tc.pin}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, []string{"node-1", "spare-1"}, st.Nodes)
			require.Equal(t, sum, st.DataSHA256)
			asked := requests()
			require.Len(t, asked, 2)
			require.Equal(t, "", asked[0].DataSHA256)
			require.Equal(t, tc.pin, asked[0].PreferDataSHA256, "a pinned job asks for its pin's holders first")
			require.Equal(t, tc.pin == "", asked[0].SameData, "an unpinned one for nodes of one data set")
			require.False(t, asked[1].SameData)
			require.False(t, asked[0].RecheckHeld)
			require.True(t, asked[1].RecheckHeld, "held nodes are held to the run's data set too")
			require.Equal(t, sum, asked[1].DataSHA256, "the replacement holds the run's data set")
			require.Empty(t, asked[1].PreferDataSHA256)
			require.Len(t, asked[1].Failed, 1)
			mark := asked[1].Failed[0]
			require.Equal(t, "node-2", mark.NodeID)
			require.Equal(t, tc.otherData, mark.OtherData)
			require.Equal(t, !tc.otherData, mark.Misconfigured)
			require.Contains(t, mark.Reason, "node node-2's data set (/other) differs", "in its own words: the run waits for them")
			for _, in := range ch.all() {
				if in.Membership.Generation == 2 {
					require.Equal(t, sum, in.DataSHA256, "chunk from %d, rank %d: checked against the run's", in.From, in.Rank)
				}
			}
		})
	}
}

// TestTrainingRunDropsEveryNodeOnOtherData: once the run knows its data
// set, every node of its membership that registered another is replaced
// in the same restart, not only the one that said so first (its NodeUnfit
// cancelled the other before it could report, which would cost a restart
// more at the next chunk).
func TestTrainingRunDropsEveryNodeOnOtherData(t *testing.T) {
	sum, other := strings.Repeat("5fd4a112", 8), strings.Repeat("0011aabb", 8)
	pool := testNodes("node-1", "node-2", "node-3", "spare-1", "spare-2")
	for i, d := range []string{sum, other, other, sum, sum} {
		pool[i].DataSHA256 = d
	}
	cl := &fakeCluster{pool: pool, failed: map[string]bool{}}
	dead := make(chan struct{})
	t.Cleanup(func() { close(dead) })
	unfit := func(node string) error {
		return temporal.NewApplicationErrorWithCause("node "+node+"'s data set (/other) differs from its peers'",
			spec.ErrTypeNodeUnfit, errors.New("data"), spec.DataDisagreement{Run: sum, Node: other})
	}
	ch := &fakeChunks{
		edit: func(_ spec.ChunkInput, res *spec.ChunkResult) { res.DataSHA256 = sum },
		fail: func(in spec.ChunkInput) error {
			switch node := in.Membership.Nodes[in.Rank].ID; {
			case node == "node-2":
				return unfit(node)
			case node == "node-3" && in.Membership.Generation == 1:
				<-dead // still comparing when node-2's failure cancels it
				return errors.New("unreachable")
			case node == "node-3":
				return unfit(node)
			case in.Membership.Generation == 1:
				return temporal.NewApplicationErrorWithCause("node node-2's data set differs from the run's", spec.ErrTypePeerFailed, errors.New("data"),
					spec.PeerFailure{Rank: 1, Step: in.From, Data: &spec.DataDisagreement{Run: sum, Node: other}})
			}
			return nil
		},
	}
	requests := acquireLog(cl)
	env := newRunEnv(t, cl, ch)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()})
	st := result(t, env)
	require.Equal(t, []string{"node-1", "spare-1", "spare-2"}, st.Nodes)
	require.Len(t, st.Recoveries, 1, "one restart for both")
	require.Equal(t, []string{"node-2", "node-3"}, st.Recoveries[0].FailedNodes)
	asked := requests()
	require.Len(t, asked, 2)
	require.Len(t, asked[1].Failed, 2)
	for _, mf := range asked[1].Failed {
		require.True(t, mf.OtherData, "%s given back", mf.NodeID)
	}
	require.Equal(t, "node node-3 registered data set sha256 0011aabb0011…, not the run's (5fd4a1125fd4…)", asked[1].Failed[1].Reason)
}

// acquireLog records cl's acquire requests (onAcquire runs in the
// activity, which may still run when the workflow has ended) and returns
// a copy of those so far.
func acquireLog(cl *fakeCluster) func() []spec.AcquireRequest {
	var mu sync.Mutex
	var asked []spec.AcquireRequest
	cl.onAcquire = func(req spec.AcquireRequest) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, req)
	}
	return func() []spec.AcquireRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

// TestTrainingRunFailsOlderBuildsAsMisconfigured: a node its peers name
// unfit (PeerFailure.Unfit: its worker runs an older build) is replaced
// at once — not waited for, as it waits in a collective it does not know
// — and failed as misconfigured in their words: out of the pool until
// its worker registers again, upgraded.
func TestTrainingRunFailsOlderBuildsAsMisconfigured(t *testing.T) {
	const why = "node node-2 runs an older cann-train build (chunk protocol 0, not 1: …); upgrade its worker"
	cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1"), failed: map[string]bool{}}
	dead := make(chan struct{})
	t.Cleanup(func() { close(dead) })
	ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
		switch node := in.Membership.Nodes[in.Rank].ID; {
		case node == "node-2":
			<-dead // the older build waits for an allgather nobody joins
			return errors.New("unreachable")
		case in.Membership.Generation == 1:
			return temporal.NewApplicationErrorWithCause(why, spec.ErrTypePeerFailed, errors.New(why),
				spec.PeerFailure{Rank: 1, Step: in.From, Unfit: why})
		}
		return nil
	}}
	requests := acquireLog(cl)
	env := newRunEnv(t, cl, ch)
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 100}.WithDefaults()})
	st := result(t, env)
	require.Equal(t, []string{"node-1", "spare-1"}, st.Nodes)
	require.Len(t, st.Recoveries, 1)
	require.Equal(t, []string{"node-2"}, st.Recoveries[0].FailedNodes)
	require.Equal(t, why, st.Recoveries[0].Reason)
	asked := requests()
	require.Len(t, asked, 2)
	require.Equal(t, []spec.MarkFailed{{NodeID: "node-2", RunID: asked[1].RunID, Reason: why, Misconfigured: true}}, asked[1].Failed)
}
