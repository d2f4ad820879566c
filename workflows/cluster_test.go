package workflows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

type acquireResult struct {
	nodes []spec.Node
	err   error
}

// clusterEnv is a test environment running Cluster, with acquire (an
// Update whose outcome lands in results[key]) and at (a callback after d).
func clusterEnv() (env *testsuite.TestWorkflowEnvironment, acquire func(key string, req spec.AcquireRequest),
	at func(d time.Duration, f func()), results map[string]*acquireResult) {
	var s testsuite.WorkflowTestSuite
	env = s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
	// Every run is running unless a test says otherwise (env.OnActivity).
	env.RegisterActivityWithOptions(func(context.Context, []string) ([]spec.EndedRun, error) { return nil, nil },
		activity.RegisterOptions{Name: spec.ActivityEndedRuns})
	results = map[string]*acquireResult{}
	acquire = func(key string, req spec.AcquireRequest) {
		res := &acquireResult{}
		results[key] = res
		env.UpdateWorkflow(spec.UpdateAcquire, key, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { res.err = err },
			OnComplete: func(v any, err error) {
				res.err = err
				if v != nil {
					res.nodes = v.([]spec.Node)
				}
			},
		}, req)
	}
	at = func(d time.Duration, f func()) { env.RegisterDelayedCallback(f, d) }
	return env, acquire, at, results
}

// dataNodes are test nodes (by ID order) that registered the data sets
// sums gives them ("": none).
func dataNodes(sums map[string]string) []spec.Node {
	nodes := testNodes(slices.Sorted(maps.Keys(sums))...)
	for i := range nodes {
		nodes[i].DataSHA256 = sums[nodes[i].ID]
	}
	return nodes
}

// registerAt registers nodes with the Cluster at d.
func registerAt(env *testsuite.TestWorkflowEnvironment, at func(time.Duration, func()), d time.Duration, nodes []spec.Node) {
	at(d, func() {
		for _, n := range nodes {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
}

func ids(nodes []spec.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

func TestClusterAllocates(t *testing.T) {
	env, acquire, at, results := clusterEnv()

	at(time.Second, func() {
		for _, n := range testNodes("c", "a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("first", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("again", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(4*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "a", RunID: "r1", Reason: "test"})
		acquire("replace", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second})
	})
	at(5*time.Second, func() { acquire("starved", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: 5 * time.Second}) })
	at(6*time.Second, func() { acquire("invalid", spec.AcquireRequest{RunID: "", Count: 1}) })
	// r2 waits; a restarted "a" re-registers and fills it.
	at(7*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, testNodes("a")[0]) })
	at(8*time.Second, func() { env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "r1"}) })
	// Only "a" heartbeats; after the lease TTL (20s) b and c are not handed out.
	for i := 10; i <= 40; i += 5 {
		at(time.Duration(i)*time.Second, func() { env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"}) })
	}
	at(41*time.Second, func() { acquire("expired", spec.AcquireRequest{RunID: "r3", Count: 2, Wait: time.Second}) })
	// b is marked failed but keeps renewing its lease for longer than the
	// TTL: it is alive after all and is handed out again.
	at(42*time.Second, func() { env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "b", Reason: "blamed"}) })
	for i := 43; i <= 70; i += 3 {
		at(time.Duration(i)*time.Second, func() { env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b"}) })
	}
	at(50*time.Second, func() { acquire("still-failed", spec.AcquireRequest{RunID: "r4", Count: 1, Wait: time.Second}) })
	at(71*time.Second, func() { acquire("reinstated", spec.AcquireRequest{RunID: "r5", Count: 1, Wait: time.Second}) })
	at(80*time.Second, func() { env.CancelWorkflow() })

	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())

	require.NoError(t, results["first"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["first"].nodes), "free nodes in ID order")
	require.Equal(t, []string{"a", "b"}, ids(results["again"].nodes), "acquire is idempotent")
	require.Equal(t, []string{"c", "b"}, ids(results["replace"].nodes), "b keeps rank 1, c fills rank 0")
	require.NoError(t, results["starved"].err)
	require.Equal(t, []string{"a"}, ids(results["starved"].nodes), "the re-registered node fills the waiting request")
	require.Error(t, results["invalid"].err)

	var ae *temporal.ApplicationError
	require.True(t, errors.As(results["expired"].err, &ae), "got %v", results["expired"].err)
	require.Equal(t, spec.ErrTypeNotEnoughNodes, ae.Type())
	require.Error(t, results["still-failed"].err, "a freshly failed node is not handed out")
	require.NoError(t, results["reinstated"].err)
	require.Equal(t, []string{"b"}, ids(results["reinstated"].nodes))
}

// TestClusterKeepsAMisconfiguredNodeFailed: a node failed as misconfigured
// (it does not reach the run's bucket) renews its lease, but is not
// reinstated as a node blamed by mistake is; its worker registering again
// (restarted, fixed) is.
func TestClusterKeepsAMisconfiguredNodeFailed(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	at(time.Second, func() {
		for _, n := range testNodes("a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "a", Reason: "does not reach the bucket", Misconfigured: true})
	})
	for i := 3; i <= 70; i += 3 {
		at(time.Duration(i)*time.Second, func() {
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b"})
		})
	}
	at(71*time.Second, func() { acquire("still-failed", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(73*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, testNodes("a")[0]) })
	at(74*time.Second, func() { acquire("registered", spec.AcquireRequest{RunID: "r2", Count: 2, Wait: time.Second}) })
	at(80*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	var ae *temporal.ApplicationError
	require.True(t, errors.As(results["still-failed"].err, &ae), "a misconfigured node renewing its lease past the TTL was handed out: %v", results["still-failed"])
	require.Equal(t, spec.ErrTypeNotEnoughNodes, ae.Type())
	require.NoError(t, results["registered"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["registered"].nodes))
}

// TestClusterHandsOutNodesWithTheRunsData: a run that knows its data set
// gets no free node that registered another (it would refuse the run's
// chunks as unfit); nodes that registered none are handed out, nodes it
// holds keep their ranks, and a run that cannot be served says why.
func TestClusterHandsOutNodesWithTheRunsData(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, dataNodes(map[string]string{"a": "run", "b": "other", "c": "run", "d": "", "e": "other"})) // d said none
	at(2*time.Second, func() { acquire("unknown", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "a", RunID: "r1", Reason: "test"})
		acquire("known", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second, DataSHA256: "run"})
	})
	at(4*time.Second, func() {
		acquire("none said", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: time.Second, DataSHA256: "run"})
	})
	at(5*time.Second, func() {
		acquire("none left", spec.AcquireRequest{RunID: "r3", Count: 1, Wait: time.Second, DataSHA256: "run"})
	})
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, results["unknown"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["unknown"].nodes), "a run not knowing its data set takes any")
	require.NoError(t, results["known"].err)
	require.Equal(t, []string{"c", "b"}, ids(results["known"].nodes), "b keeps its rank; c fills a's")
	require.Equal(t, "run", results["known"].nodes[0].DataSHA256)
	require.NoError(t, results["none said"].err)
	require.Equal(t, []string{"d"}, ids(results["none said"].nodes), "a node that said no data set may serve")
	require.ErrorContains(t, results["none left"].err, "only 0 live free node(s)")
	require.ErrorContains(t, results["none left"].err, "1 free with another data set")
}

// A pinned run's first acquire takes the nodes that registered its data
// set first; a node given back for holding another data set (OtherData)
// is not failed: the run's next acquires pass it over, runs on its data
// set take it.
func TestClusterPrefersThePinAndGivesBackOtherData(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, dataNodes(map[string]string{"a": "other", "b": "", "c": "run", "d": "other", "e": "run", "f": "other"})) // b said none
	at(2*time.Second, func() {
		acquire("pinned", spec.AcquireRequest{RunID: "r1", Count: 3, Wait: time.Second, PreferDataSHA256: "run"})
	})
	at(3*time.Second, func() { acquire("unpinned", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: time.Second}) })
	at(4*time.Second, func() {
		acquire("passed over", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: time.Second, DataSHA256: "run",
			Failed: []spec.MarkFailed{{NodeID: "a", RunID: "r2", Reason: "holds other", OtherData: true}}})
	})
	at(6*time.Second, func() {
		acquire("on its data", spec.AcquireRequest{RunID: "r3", Count: 3, Wait: time.Second, DataSHA256: "other"})
	})
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, results["pinned"].err)
	require.Equal(t, []string{"c", "e", "b"}, ids(results["pinned"].nodes), "holders of the pin, then one that said none")
	require.NoError(t, results["unpinned"].err)
	require.Equal(t, []string{"a"}, ids(results["unpinned"].nodes), "by node ID")
	require.ErrorContains(t, results["passed over"].err, "only 0 live free node(s)")
	require.ErrorContains(t, results["passed over"].err, "3 free with another data set", "a is free again, not failed")
	require.NoError(t, results["on its data"].err)
	require.Equal(t, []string{"a", "d", "f"}, ids(results["on its data"].nodes), "a serves runs on its data set")
}

// A run that knows no data set yet (SameData) is handed the nodes of the
// data set most free nodes registered first: a pick across data sets
// would cost it a restart, or fail it without a majority.
func TestClusterHandsOutNodesOfOneDataSet(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, dataNodes(map[string]string{"a": "", "b": "y", "c": "x", "d": "y", "e": "x", "f": "x"}))
	at(2*time.Second, func() { acquire("most", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second, SameData: true}) })
	at(3*time.Second, func() {
		acquire("now y", spec.AcquireRequest{RunID: "r2", Count: 3, Wait: time.Second, SameData: true})
	})
	at(4*time.Second, func() { acquire("by ID", spec.AcquireRequest{RunID: "r3", Count: 1, Wait: time.Second}) })
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, results["most"].err)
	require.Equal(t, []string{"c", "e"}, ids(results["most"].nodes), "x: 3 of the 6")
	require.NoError(t, results["now y"].err)
	require.Equal(t, []string{"b", "d", "a"}, ids(results["now y"].nodes), "y: 2 of the 4 left, then one that said none")
	require.NoError(t, results["by ID"].err)
	require.Equal(t, []string{"f"}, ids(results["by ID"].nodes))
}

// A held node whose worker registered again with another data set is
// dropped from its rank when the run asks with RecheckHeld (it would
// refuse the run's next chunk), and stays free; without it, kept.
func TestClusterRechecksHeldNodesData(t *testing.T) {
	for _, recheck := range []bool{false, true} {
		env, acquire, at, results := clusterEnv()
		registerAt(env, at, time.Second, dataNodes(map[string]string{"a": "x", "b": "x"}))
		at(2*time.Second, func() { acquire("first", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
		restarted := dataNodes(map[string]string{"b": "y", "c": "x"}) // b's worker restarted on y
		restarted[0].Incarnation = "restarted"
		registerAt(env, at, 3*time.Second, restarted)
		at(4*time.Second, func() {
			acquire("again", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second, DataSHA256: "x", RecheckHeld: recheck})
		})
		at(5*time.Second, func() {
			acquire("on y", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: time.Second, DataSHA256: "y"})
		})
		at(10*time.Second, func() { env.CancelWorkflow() })
		env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, results["first"].err)
		require.Equal(t, []string{"a", "b"}, ids(results["first"].nodes))
		require.NoError(t, results["again"].err)
		if !recheck {
			require.Equal(t, []string{"a", "b"}, ids(results["again"].nodes), "as before: held nodes keep their ranks")
			require.ErrorContains(t, results["on y"].err, "only 0 live free node(s)")
			continue
		}
		require.Equal(t, []string{"a", "c"}, ids(results["again"].nodes), "b holds y now")
		require.NoError(t, results["on y"].err)
		require.Equal(t, []string{"b"}, ids(results["on y"].nodes), "b is free for runs on y")
	}
}

// TestClusterLetsARunLeaveANode: a run that gives a node back in its
// request (AcquireRequest.Leave: its slow node) gets a free one in that
// rank, and the node it left is free for another run; with none free the
// request fails and the run keeps what it held.
func TestClusterLetsARunLeaveANode(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b", "c"))
	at(2*time.Second, func() { acquire("first", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("leave b", spec.AcquireRequest{RunID: "r1", Count: 2, Leave: []string{"b"}}) })
	at(4*time.Second, func() { acquire("r2", spec.AcquireRequest{RunID: "r2", Count: 1}) })
	at(5*time.Second, func() { acquire("leave a", spec.AcquireRequest{RunID: "r1", Count: 2, Leave: []string{"a"}}) })
	at(6*time.Second, func() { acquire("kept", spec.AcquireRequest{RunID: "r1", Count: 2}) })
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	for _, key := range []string{"first", "leave b", "r2", "kept"} {
		require.NoError(t, results[key].err, key)
	}
	require.Equal(t, []string{"a", "b"}, ids(results["first"].nodes))
	require.Equal(t, []string{"a", "c"}, ids(results["leave b"].nodes), "c takes b's rank")
	require.Equal(t, []string{"b"}, ids(results["r2"].nodes), "b is free again, for other runs")
	require.Error(t, results["leave a"].err, "no free node to take a's rank")
	require.Equal(t, []string{"a", "c"}, ids(results["kept"].nodes), "a failed request changes nothing")
}

// TestClusterAvoidsTheNodesARunLeft: a run's avoided nodes (the slow
// ones it left) fill its ranks only when no other free node can.
func TestClusterAvoidsTheNodesARunLeft(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b", "c", "d"))
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2, Avoid: []string{"a"}}) })
	at(3*time.Second, func() { acquire("r2", spec.AcquireRequest{RunID: "r2", Count: 2, Avoid: []string{"d"}}) })
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, results["r1"].err)
	require.Equal(t, []string{"b", "c"}, ids(results["r1"].nodes), "a passed over")
	require.NoError(t, results["r2"].err)
	require.Equal(t, []string{"a", "d"}, ids(results["r2"].nodes), "d taken last, when nothing else is free")
}

// TestClusterShunsAProcessTheRunFoundCutOff: a run that found node b's
// worker process cut off from its bucket is neither handed b (it waits,
// or trains on fewer) nor told of it as free, while other runs may take
// b; once b's worker registers again (a new incarnation) the run takes it.
func TestClusterShunsAProcessTheRunFoundCutOff(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	nodes := testNodes("a", "b", "c")
	nodes[0].Incarnation, nodes[1].Incarnation, nodes[2].Incarnation = "a-1", "b-1", "c-1"
	registerAt(env, at, time.Second, nodes)
	shun := []spec.NodeProcess{{ID: "b", Incarnation: "b-1"}}
	free := map[string]int{}
	query := func(name string, req spec.AcquireRequest) {
		v, err := env.QueryWorkflow(spec.QueryFree, req)
		require.NoError(t, err)
		var n int
		require.NoError(t, v.Get(&n))
		free[name] = n
	}
	at(2*time.Second, func() {
		query("shunned", spec.AcquireRequest{RunID: "r1", Shun: shun})
		query("another run", spec.AcquireRequest{RunID: "r2"})
		acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2, Shun: shun})
	})
	at(3*time.Second, func() { acquire("r1 grows", spec.AcquireRequest{RunID: "r1", Count: 3, MinCount: 2, Shun: shun}) })
	at(4*time.Second, func() {
		acquire("r1 waits", spec.AcquireRequest{RunID: "r1", Count: 3, Wait: 3 * time.Second, Shun: shun})
	})
	restarted := nodes[1]
	restarted.Incarnation = "b-2"
	at(5*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, restarted) })
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.Equal(t, map[string]int{"shunned": 2, "another run": 3}, free)
	require.NoError(t, results["r1"].err)
	require.Equal(t, []string{"a", "c"}, ids(results["r1"].nodes), "b passed over")
	require.NoError(t, results["r1 grows"].err)
	require.Equal(t, []string{"a", "c"}, ids(results["r1 grows"].nodes), "b, the only free node, not taken")
	require.NoError(t, results["r1 waits"].err)
	require.Equal(t, []string{"a", "c", "b"}, ids(results["r1 waits"].nodes), "b taken once its worker registered again")
	require.Equal(t, "b-2", results["r1 waits"].nodes[2].Incarnation)
}

func TestCommonData(t *testing.T) {
	for _, tc := range []struct {
		sums []string
		want string
	}{
		{nil, ""},
		{[]string{"", ""}, ""},
		{[]string{"", "x"}, "x"},
		{[]string{"x", "y", "y"}, "y"},
		{[]string{"x", "y", "y", "x"}, "x"}, // a tie: the first node's
		{[]string{"", "y", "x", "x", "y", "y"}, "y"},
	} {
		var nodes []*NodeRecord
		for _, sum := range tc.sums {
			nodes = append(nodes, &NodeRecord{Node: spec.Node{DataSHA256: sum}})
		}
		require.Equal(t, tc.want, commonData(nodes), "%q", tc.sums)
	}
}

func TestClusterContinuesAsNewWithItsState(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
	env.RegisterDelayedCallback(func() {
		for _, n := range testNodes("a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
	}, 2*time.Second)
	// The history grows past the cap; the next signal ends this run.
	env.RegisterDelayedCallback(func() {
		env.SetCurrentHistoryLength(31)
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
	}, 3*time.Second)
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{State: ClusterState{MaxHistoryEvents: 30}})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "want continue-as-new, got %v", env.GetWorkflowError())
	var next ClusterInput
	require.NoError(t, decodeArgs(can, &next))
	require.Equal(t, []string{"a", "b"}, []string{next.State.Nodes[0].Node.ID, next.State.Nodes[1].Node.ID})
	require.Equal(t, 30, next.State.MaxHistoryEvents)
	require.True(t, next.State.Nodes[0].LastSeen.After(next.State.Nodes[1].LastSeen), "heartbeats carried over")
}

// MinCount: without enough free nodes the Cluster answers at once with the
// healthy ones (compacted in rank order) instead of waiting; a smaller
// Count releases the ranks above it.
func TestClusterShrinksAndRescales(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	at(time.Second, func() {
		for _, n := range testNodes("a", "b", "c") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("three", spec.AcquireRequest{RunID: "r", Count: 3, Wait: time.Second}) })
	at(3*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "b", RunID: "r", Reason: "test"})
		acquire("shrunk", spec.AcquireRequest{RunID: "r", Count: 3, MinCount: 2, Wait: time.Hour})
	})
	at(4*time.Second, func() { acquire("too-few", spec.AcquireRequest{RunID: "r", Count: 3, MinCount: 3, Wait: time.Second}) })
	at(10*time.Second, func() { acquire("down", spec.AcquireRequest{RunID: "r", Count: 1, Wait: time.Second}) })
	at(11*time.Second, func() { acquire("other", spec.AcquireRequest{RunID: "r2", Count: 1, Wait: time.Second}) })
	at(20*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.Equal(t, []string{"a", "b", "c"}, ids(results["three"].nodes))
	require.NoError(t, results["shrunk"].err)
	require.Equal(t, []string{"a", "c"}, ids(results["shrunk"].nodes), "c moves up to rank 1, no wait")
	require.Error(t, results["too-few"].err)
	require.Equal(t, []string{"a"}, ids(results["down"].nodes))
	require.NoError(t, results["other"].err)
	require.Equal(t, []string{"c"}, ids(results["other"].nodes), "the rank released by the rescale is free again")
}

// TestClusterDrain: a drained node is not handed out, stays drained when
// its worker restarts, leaves the run holding it at that run's next
// acquisition, and is handed out again once put back.
func TestClusterDrain(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	drain := func(id string, on bool) {
		env.SignalWorkflow(spec.SignalDrain, spec.Drain{NodeID: id, Drained: on, Reason: "maintenance"})
	}
	var registry Registry
	var told []string // the evict signals the Cluster sent: run/node
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", spec.SignalEvict, mock.Anything).
		Return(func(_, run, _, _ string, arg any) error {
			told = append(told, run+"/"+arg.(spec.Evict).NodeID+": "+arg.(spec.Evict).Reason)
			return nil
		})
	at(time.Second, func() {
		for _, n := range testNodes("a", "b", "c") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { drain("b", true) })
	at(3*time.Second, func() { acquire("without-b", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(4*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, testNodes("b")[0]) }) // b's worker restarts
	at(5*time.Second, func() { drain("c", true) })                                           // held by r1
	at(5200*time.Millisecond, func() { drain("c", true) })                                   // again: r1 was told
	at(5500*time.Millisecond, func() {
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		require.NoError(t, v.Get(&registry))
	})
	at(6*time.Second, func() { acquire("c-leaves", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(8*time.Second, func() { drain("b", false) })
	at(9*time.Second, func() { acquire("b-back", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(15*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())

	require.NoError(t, results["without-b"].err)
	require.Equal(t, []string{"a", "c"}, ids(results["without-b"].nodes))
	var ae *temporal.ApplicationError
	require.True(t, errors.As(results["c-leaves"].err, &ae), "a drained node held by the run is not kept: %v", results["c-leaves"].err)
	require.Equal(t, spec.ErrTypeNotEnoughNodes, ae.Type())
	require.Contains(t, ae.Message(), "after waiting 1s (3 registered: 2 drained)")
	require.NoError(t, results["b-back"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["b-back"].nodes))
	require.Len(t, registry.Nodes, 3)
	require.True(t, registry.Nodes[1].Drained, "b stays drained across its restart")
	require.Equal(t, "maintenance", registry.Nodes[1].DrainReason)
	require.True(t, registry.Nodes[2].Drained && registry.Nodes[2].Run == "r1", "c is drained while r1 still holds it")
	require.Equal(t, 20*time.Second, registry.LeaseTTL)
	require.Equal(t, []string{"r1/c: maintenance"}, told, "the run holding c is told once; free b's drains tell nobody")
}

// An acquire with no wait (a run replacing a drained node) takes what is
// free at once — or shrinks to MinCount — and otherwise fails at once.
func TestClusterAcquireWithoutWaiting(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	at(time.Second, func() {
		for _, n := range testNodes("a", "b", "c") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2}) })
	at(3*time.Second, func() { acquire("r2-short", spec.AcquireRequest{RunID: "r2", Count: 2}) })
	at(4*time.Second, func() { acquire("r2-shrunk", spec.AcquireRequest{RunID: "r2", Count: 2, MinCount: 1}) })
	at(4500*time.Millisecond, func() { acquire("r1-grown", spec.AcquireRequest{RunID: "r1", Count: 4}) })
	at(5*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.NoError(t, results["r1"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["r1"].nodes))
	var ae *temporal.ApplicationError
	require.True(t, errors.As(results["r2-short"].err, &ae), "%v", results["r2-short"].err)
	require.Equal(t, spec.ErrTypeNotEnoughNodes, ae.Type())
	require.Equal(t, "acquire 2 nodes for r2: only 1 live free node(s) after waiting 0s (3 registered: 2 busy with r1)", ae.Message(),
		"says where the other nodes are")
	require.NoError(t, results["r2-shrunk"].err)
	require.Equal(t, []string{"c"}, ids(results["r2-shrunk"].nodes))
	require.True(t, errors.As(results["r1-grown"].err, &ae), "%v", results["r1-grown"].err)
	require.Equal(t, "acquire 4 nodes for r1: only 0 live free node(s) beside its own [a b] after waiting 0s (3 registered: 1 busy with r2)",
		ae.Message(), "the nodes a run holds are not counted as free")
}

// A signal whose payload does not decode (sent by hand: `temporal
// workflow signal --input '{"node_id": 5}'`) is refused and the Cluster
// goes on: the next signals and acquisitions are served. (With Receive in
// the selector's callbacks the Cluster's loop waited inside the callback
// for the next good signal of that kind: no lease renewed meanwhile.)
func TestClusterRefusesMalformedSignals(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b"))
	at(2*time.Second, func() {
		env.SignalWorkflow(spec.SignalDrain, map[string]any{"node_id": 5})
		env.SignalWorkflow(spec.SignalRegister, map[string]any{"id": []int{1}})
		env.SignalWorkflow(spec.SignalHeartbeat, "b")
		env.SignalWorkflow(spec.SignalMarkFailed, 7)
		env.SignalWorkflow(spec.SignalRelease, []byte("not json")) // (a binary payload)
	})
	registerAt(env, at, 3*time.Second, testNodes("c"))
	var registry Registry
	at(3500*time.Millisecond, func() {
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		require.NoError(t, v.Get(&registry))
	})
	at(4*time.Second, func() { acquire("all", spec.AcquireRequest{RunID: "r1", Count: 3, Wait: time.Second}) })
	at(6*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())
	require.Len(t, registry.Nodes, 3, "the registration after the malformed signals was served")
	require.NoError(t, results["all"].err)
	require.Equal(t, []string{"a", "b", "c"}, ids(results["all"].nodes))
}

// Draining a node a run holds tells the run; putting it back while the run
// still holds it tells the run too; repeats tell nobody.
func TestClusterDrainTellsTheRun(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	told := evictsTo(env, "r1")
	drain := func(on bool) {
		env.SignalWorkflow(spec.SignalDrain, spec.Drain{NodeID: "b", Drained: on, Reason: "disk"})
	}
	at(time.Second, func() {
		for _, n := range testNodes("a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2}) })
	at(3*time.Second, func() { drain(true) })
	at(4*time.Second, func() { drain(false) })
	at(5*time.Second, func() { drain(false) })
	at(6*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.NoError(t, results["r1"].err)
	require.Equal(t, []spec.Evict{{NodeID: "b", Reason: "disk"}, {NodeID: "b", Undrained: true}}, *told)
}

// evictsTo records the evict signals the Cluster sends run.
func evictsTo(env *testsuite.TestWorkflowEnvironment, run string) *[]spec.Evict {
	var told []spec.Evict
	env.OnSignalExternalWorkflow(mock.Anything, run, "", spec.SignalEvict, mock.Anything).
		Return(func(_, _, _, _ string, arg any) error {
			told = append(told, arg.(spec.Evict))
			return nil
		})
	return &told
}

// A run that ends while it waits for nodes (cancelled) releases them; its
// acquire still waiting in the Cluster then ends without taking the nodes
// that free up later, which would stay held by a run that is gone.
func TestClusterAcquireOfAnEndedRun(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	var registry Registry
	at(time.Second, func() { env.SignalWorkflow(spec.SignalRegister, testNodes("a")[0]) })
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Minute}) })
	at(3*time.Second, func() { env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "r1"}) })
	at(4*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, testNodes("b")[0]) })
	at(5*time.Second, func() { acquire("r1-again", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Minute}) })
	at(6*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		require.NoError(t, v.Get(&registry))
	})
	at(7*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.ErrorContains(t, results["r1"].err, "released its nodes while it waited")
	require.Nil(t, results["r1"].nodes)
	require.NoError(t, results["r1-again"].err, "a later run of the same name acquires as usual")
	require.Equal(t, []string{"a", "b"}, ids(results["r1-again"].nodes))
	require.Len(t, registry.Nodes, 2)
}

// TestClusterFreesTheNodesOfEndedRuns: a terminated run runs no more code
// and never releases its nodes. An acquire that finds too few free nodes
// asks which holders have ended (EndedRuns, once per acquire) and frees
// theirs; a holder still running, or one the answer does not name, keeps
// its nodes, and an acquire that can be met asks nothing.
func TestClusterFreesTheNodesOfEndedRuns(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	var asked [][]string
	env.OnActivity(spec.ActivityEndedRuns, mock.Anything, mock.Anything).Return(
		func(_ context.Context, runs []string) ([]spec.EndedRun, error) {
			asked = append(asked, runs)
			var out []spec.EndedRun
			for _, r := range runs {
				if r == "gone" {
					out = append(out, spec.EndedRun{RunID: r, How: "terminated"})
				}
			}
			return out, nil
		})
	var registry Registry
	at(time.Second, func() {
		for _, n := range testNodes("a", "b", "c", "d") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("gone", spec.AcquireRequest{RunID: "gone", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("alive", spec.AcquireRequest{RunID: "alive", Count: 1, Wait: time.Second}) })
	// One node left; "new" wants two: "gone" has ended, "alive" has not.
	at(4*time.Second, func() { acquire("new", spec.AcquireRequest{RunID: "new", Count: 2, Wait: time.Second}) })
	// Now "later" fits in what is free: nobody is asked.
	at(5*time.Second, func() { acquire("later", spec.AcquireRequest{RunID: "later", Count: 1, Wait: time.Second}) })
	// Nothing free and nobody ended: asked, then it waits and times out.
	at(6*time.Second, func() { acquire("starved", spec.AcquireRequest{RunID: "starved", Count: 1, Wait: time.Second}) })
	at(9*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		require.NoError(t, v.Get(&registry))
	})
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.NoError(t, results["gone"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["gone"].nodes))
	require.NoError(t, results["alive"].err)
	require.Equal(t, []string{"c"}, ids(results["alive"].nodes))
	require.NoError(t, results["new"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["new"].nodes), "the ended run's nodes, freed")
	require.NoError(t, results["later"].err)
	require.Equal(t, []string{"d"}, ids(results["later"].nodes))
	require.Error(t, results["starved"].err)
	require.Equal(t, [][]string{{"gone", "alive"}, {"new", "alive", "later"}}, asked)
	holders := map[string]string{}
	for _, r := range registry.Nodes {
		holders[r.Node.ID] = r.Run
	}
	require.Equal(t, map[string]string{"a": "new", "b": "new", "c": "alive", "d": "later"}, holders)
}

// TestClusterFailureOfAnEarlierProcess: a run blames node "n2" after
// n2's worker restarted and registered again (a kill noticed only when the
// heartbeat timed out). When the failure names the earlier process, n2
// stays in the pool and keeps its rank in the run (although the spare n1
// comes first in ID order); when it names the current process, or no
// process (older runs and workers), n2 is failed and n1 takes its rank.
// The failure comes by mark-failed signal, or with the run's acquire
// request (AcquireRequest.Failed), alike.
func TestClusterFailureOfAnEarlierProcess(t *testing.T) {
	for _, tc := range []struct {
		name        string
		incarnation string // in MarkFailed
		want        string
		failed      bool
		inAcquire   bool
	}{
		{"earlier process", "n2-1", "n2", false, false},
		{"current process", "n2-2", "n1", true, false},
		{"process not named", "", "n1", true, false},
		{"earlier process, in acquire", "n2-1", "n2", false, true},
		{"current process, in acquire", "n2-2", "n1", true, true},
		{"process not named, in acquire", "", "n1", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, acquire, at, results := clusterEnv()
			nodes := testNodes("n1", "n2")
			spare, old := nodes[0], nodes[1]
			spare.Incarnation, old.Incarnation = "n1-1", "n2-1"
			restarted := old
			restarted.Incarnation, restarted.CommAddr = "n2-2", "127.0.0.1:9100"
			at(time.Second, func() {
				env.SignalWorkflow(spec.SignalRegister, old)
				acquire("first", spec.AcquireRequest{RunID: "r1", Count: 1, Wait: time.Second})
				env.SignalWorkflow(spec.SignalRegister, spare)
			})
			at(2*time.Second, func() { env.SignalWorkflow(spec.SignalRegister, restarted) })
			at(3*time.Second, func() {
				mf := spec.MarkFailed{NodeID: "n2", RunID: "r1", Reason: "stopped heartbeating", Incarnation: tc.incarnation}
				req := spec.AcquireRequest{RunID: "r1", Count: 1, Wait: time.Second}
				if tc.inAcquire {
					req.Failed = []spec.MarkFailed{mf}
				} else {
					env.SignalWorkflow(spec.SignalMarkFailed, mf)
				}
				acquire("recover", req)
			})
			var reg Registry
			at(4*time.Second, func() {
				v, err := env.QueryWorkflow(spec.QueryRegistry)
				require.NoError(t, err)
				require.NoError(t, v.Get(&reg))
				env.CancelWorkflow()
			})
			env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, results["first"].err)
			require.Equal(t, []string{"n2"}, ids(results["first"].nodes))
			require.NoError(t, results["recover"].err)
			require.Equal(t, []string{tc.want}, ids(results["recover"].nodes))
			if tc.want == "n2" {
				got := results["recover"].nodes[0]
				require.Equal(t, "n2-2", got.Incarnation, "the run gets the restarted process")
				require.Equal(t, restarted.CommAddr, got.CommAddr)
			}
			var seen bool
			for _, r := range reg.Nodes {
				if r.Node.ID == "n2" {
					seen = true
					require.Equal(t, tc.failed, r.Failed)
				}
			}
			require.True(t, seen)
		})
	}
}

// TestClusterKeepsTheFirstFailure: a node that left ("worker stopped")
// and is then blamed by its run's peers stays failed for the first
// reason, the one an operator needs; a node that registers again is
// healthy until blamed anew.
func TestClusterKeepsTheFirstFailure(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	env.OnSignalExternalWorkflow(mock.Anything, "r1", "", spec.SignalEvict, mock.Anything).Return(nil) // (told of the stop)
	at(time.Second, func() {
		for _, n := range testNodes("a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
		acquire("first", spec.AcquireRequest{RunID: "r1", Count: 2})
	})
	at(2*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "b", Reason: spec.ReasonWorkerStopped})
	})
	at(3*time.Second, func() {
		acquire("recover", spec.AcquireRequest{RunID: "r1", Count: 2, MinCount: 1,
			Failed: []spec.MarkFailed{{NodeID: "b", RunID: "r1", Reason: "peers lost node(s) [b]: connection refused"}}})
	})
	reasons := map[string]string{}
	query := func(key string) func() {
		return func() {
			v, err := env.QueryWorkflow(spec.QueryRegistry)
			require.NoError(t, err)
			var reg Registry
			require.NoError(t, v.Get(&reg))
			for _, r := range reg.Nodes {
				if r.Node.ID == "b" {
					reasons[key] = fmt.Sprint(r.Failed, " ", r.FailReason)
				}
			}
		}
	}
	at(4*time.Second, query("blamed"))
	at(5*time.Second, func() {
		env.SignalWorkflow(spec.SignalRegister, testNodes("b")[0])
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "b", Reason: "unreachable"})
	})
	at(6*time.Second, query("again"))
	at(7*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.NoError(t, results["recover"].err)
	require.Equal(t, []string{"a"}, ids(results["recover"].nodes))
	require.Equal(t, "true worker stopped", reasons["blamed"], "the peers' blame after the worker left")
	require.Equal(t, "true unreachable", reasons["again"], "registered again, then failed anew")
}

// TestValidateAcquire: an acquire request is refused before it reaches the
// Cluster's state when it names no run, asks for no node, or carries a
// failure of another run or of no node.
func TestValidateAcquire(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  spec.AcquireRequest
		want string // "" valid
	}{
		{"valid", spec.AcquireRequest{RunID: "r", Count: 2}, ""},
		{"valid with failures", spec.AcquireRequest{RunID: "r", Count: 2, Failed: []spec.MarkFailed{{NodeID: "a", RunID: "r"}}}, ""},
		{"no run", spec.AcquireRequest{Count: 2}, "run_id"},
		{"no node", spec.AcquireRequest{RunID: "r"}, "count"},
		{"failure of another run", spec.AcquireRequest{RunID: "r", Count: 1, Failed: []spec.MarkFailed{{NodeID: "a", RunID: "s"}}}, "failed[0]"},
		{"failure of no node", spec.AcquireRequest{RunID: "r", Count: 1, Failed: []spec.MarkFailed{{RunID: "r"}}}, "failed[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateAcquire(tc.req)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validateAcquire(%+v) = %v, want %q", tc.req, err, tc.want)
			}
		})
	}
}

// TestClusterStopTellsTheRun: a held node whose worker stops (its own
// MarkFailed, "worker stopped") is failed and its run told to leave it
// (Evict, Stopping), once; a node no run holds, or a failure a run reports,
// tells nobody.
func TestClusterStopTellsTheRun(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	told := evictsTo(env, "r1")
	stop := func(id string) {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: id, Reason: spec.ReasonWorkerStopped})
	}
	at(time.Second, func() {
		for _, n := range testNodes("a", "b", "c", "d") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 3}) })
	at(3*time.Second, func() { stop("b") })
	at(4*time.Second, func() { stop("b") }) // (a second signal: already failed)
	at(5*time.Second, func() { stop("d") }) // free
	at(6*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "c", Reason: "peers lost it", RunID: "r1"})
	})
	at(7*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.NoError(t, results["r1"].err)
	require.Equal(t, []string{"a", "b", "c"}, ids(results["r1"].nodes))
	require.Equal(t, []spec.Evict{{NodeID: "b", Reason: "its worker is stopping", Stopping: true}}, *told)
}

// TestClusterStoppedNodeStaysWithItsRun: a held node whose worker stops
// on purpose stays its run's — failed while the worker is down, and the
// run's again once it registers — so another run's acquire does not take
// it (a run waiting for its green window lost it to the next run that
// asked, before), and the run, told it stops, is told it is back; the
// run's own acquire keeps it in its rank, or leaves it.
func TestClusterStoppedNodeStaysWithItsRun(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	told := evictsTo(env, "r1")
	at(time.Second, func() {
		for _, n := range testNodes("a", "b") {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: 2}) })
	at(3*time.Second, func() {
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "b", Reason: spec.ReasonWorkerStopped})
	})
	at(4*time.Second, func() {
		b := testNodes("a", "b")[1]
		b.Incarnation = "restarted"
		env.SignalWorkflow(spec.SignalRegister, b)
	})
	at(5*time.Second, func() { acquire("other", spec.AcquireRequest{RunID: "r2", Count: 1}) })
	at(6*time.Second, func() { acquire("r1-again", spec.AcquireRequest{RunID: "r1", Count: 2}) })
	at(7*time.Second, func() { acquire("r1-leaves", spec.AcquireRequest{RunID: "r1", Count: 1, Leave: []string{"b"}}) })
	at(8*time.Second, func() { acquire("other-now", spec.AcquireRequest{RunID: "r2", Count: 1}) })
	at(9*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.Equal(t, []spec.Evict{{NodeID: "b", Reason: "its worker is stopping", Stopping: true},
		{NodeID: "b", Reason: "its worker registered again", Undrained: true}}, *told, "the run is told, then told it is back")
	require.ErrorContains(t, results["other"].err, "only 0 live free node(s)", "restarted, b is still r1's")
	require.Equal(t, []string{"a", "b"}, ids(results["r1-again"].nodes), "r1 finds it back in its rank")
	require.Equal(t, []string{"a"}, ids(results["r1-leaves"].nodes))
	require.Equal(t, []string{"b"}, ids(results["other-now"].nodes), "left by r1, it is free")
}

// TestClusterAnswersFreeNodes: QueryFree counts the live free nodes an
// acquire of the asking run could take: not its own, not a drained one,
// not one it leaves, and one of its data set.
func TestClusterAnswersFreeNodes(t *testing.T) {
	env, acquire, at, _ := clusterEnv()
	nodes := testNodes("a", "b", "c", "d", "e")
	nodes[4].DataSHA256 = "other"
	at(time.Second, func() {
		for _, n := range nodes {
			env.SignalWorkflow(spec.SignalRegister, n)
		}
	})
	at(2*time.Second, func() { acquire("r", spec.AcquireRequest{RunID: "r", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { env.SignalWorkflow(spec.SignalDrain, spec.Drain{NodeID: "c", Drained: true, Reason: "disk"}) })
	free := map[string]int{}
	at(4*time.Second, func() {
		for name, req := range map[string]spec.AcquireRequest{
			"any data":   {RunID: "r"},
			"its data":   {RunID: "r", DataSHA256: "mine"},
			"leaving d":  {RunID: "r", DataSHA256: "mine", Leave: []string{"d"}},
			"other data": {RunID: "s", DataSHA256: "other"},
		} {
			v, err := env.QueryWorkflow(spec.QueryFree, req)
			require.NoError(t, err)
			var n int
			require.NoError(t, v.Get(&n))
			free[name] = n
		}
	})
	at(5*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.Equal(t, map[string]int{"any data": 2, "its data": 1, "leaving d": 0, "other data": 2}, free,
		"a and b held, c drained; d holds no data set (any run's), e another")
}

// TestClusterHoldsFreeNodesForARun: a run that found a free node while a
// chunk trains has it held (UpdateHoldFree) until its boundary's acquire:
// other runs are not handed it, nor told of it, while the hold lasts; the
// run's acquire takes it and ends the hold; an expired hold holds nothing.
func TestClusterHoldsFreeNodesForARun(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b", "c"))
	held := map[string]int{}
	hold := func(key string, req spec.AcquireRequest) {
		env.UpdateWorkflow(spec.UpdateHoldFree, "hold "+key, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { held[key] = -1 },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				held[key] = v.(int)
			},
		}, req)
	}
	at(2*time.Second, func() { hold("y", spec.AcquireRequest{RunID: "run/y", Count: 1, Hold: 10 * time.Second}) })
	at(3*time.Second, func() { hold("w", spec.AcquireRequest{RunID: "run/w", Count: 5, Hold: 2 * time.Second}) })
	free := map[string]int{}
	at(4*time.Second, func() {
		for _, run := range []string{"run/y", "run/w", "run/z"} {
			v, err := env.QueryWorkflow(spec.QueryFree, spec.AcquireRequest{RunID: run})
			require.NoError(t, err)
			var n int
			require.NoError(t, v.Get(&n))
			free[run] = n
		}
	})
	at(4500*time.Millisecond, func() { acquire("z early", spec.AcquireRequest{RunID: "run/z", Count: 1}) })
	at(6*time.Second, func() { acquire("z", spec.AcquireRequest{RunID: "run/z", Count: 2}) }) // w's hold is over
	at(7*time.Second, func() { acquire("y", spec.AcquireRequest{RunID: "run/y", Count: 1}) })
	at(8*time.Second, func() { hold("no time", spec.AcquireRequest{RunID: "run/y", Count: 1}) })
	var records []NodeRecord
	at(9*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryNodes)
		require.NoError(t, err)
		require.NoError(t, v.Get(&records))
		env.CancelWorkflow()
	})
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

	require.Equal(t, map[string]int{"y": 1, "w": 2, "no time": -1}, held, "y holds a, w the other two; a hold without a time is refused")
	require.Equal(t, map[string]int{"run/y": 1, "run/w": 2, "run/z": 0}, free, "each run is told of the nodes held for it, z of none")
	require.Error(t, results["z early"].err, "nothing free for z while the holds last")
	require.ErrorContains(t, results["z early"].err, "(3 registered: 3 free but held for run/y run/w (ending a chunk early to take them))",
		"the census names the held nodes")
	require.NoError(t, results["z"].err)
	require.Equal(t, []string{"b", "c"}, ids(results["z"].nodes), "w's expired hold holds nothing")
	require.NoError(t, results["y"].err)
	require.Equal(t, []string{"a"}, ids(results["y"].nodes), "y's acquire takes the node held for it")
	for _, r := range records {
		require.Empty(t, r.HeldFor, "%s: a node taken is held no more", r.Node.ID)
	}
}

// TestClusterAcquireTakesTheNodesHeldForTheRun: an acquire fills its holes
// with the nodes held for its run before others (versionHeldFirst) — a
// node it avoids still last — and gives back the holds it did not use; a
// run that releases its nodes gives back its holds. The nodes held for
// the run are never barred to the others after.
func TestClusterAcquireTakesTheNodesHeldForTheRun(t *testing.T) {
	y := func(count int, leave ...string) spec.AcquireRequest {
		return spec.AcquireRequest{RunID: "run/y", Count: count, Leave: leave, Hold: time.Minute}
	}
	for _, tc := range []struct {
		name    string
		hold    spec.AcquireRequest // (for run/y)
		acquire spec.AcquireRequest // by run/y, unless it releases
		release bool
		want    []string // the nodes run/y's acquire takes
		// free: the nodes run/z may take after (none held for y).
		free int
	}{
		{name: "held node first", hold: y(1, "a"), acquire: spec.AcquireRequest{RunID: "run/y", Count: 1},
			want: []string{"b"}, free: 2},
		{name: "unused hold given back", hold: y(2, "a"), acquire: spec.AcquireRequest{RunID: "run/y", Count: 1},
			want: []string{"b"}, free: 2},
		{name: "holds then others", hold: y(1, "a", "b"), acquire: spec.AcquireRequest{RunID: "run/y", Count: 2},
			want: []string{"c", "a"}, free: 1},
		{name: "avoided held node last", hold: y(1, "a"), acquire: spec.AcquireRequest{RunID: "run/y", Count: 1, Avoid: []string{"b"}},
			want: []string{"a"}, free: 2},
		{name: "release gives holds back", hold: y(2), release: true, free: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, acquire, at, results := clusterEnv()
			registerAt(env, at, time.Second, testNodes("a", "b", "c"))
			held := -1
			at(2*time.Second, func() {
				env.UpdateWorkflow(spec.UpdateHoldFree, "hold", &testsuite.TestUpdateCallback{
					OnAccept: func() {},
					OnReject: func(err error) { require.NoError(t, err) },
					OnComplete: func(v any, err error) {
						require.NoError(t, err)
						held = v.(int)
					},
				}, tc.hold)
			})
			at(3*time.Second, func() {
				if tc.release {
					env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "run/y"})
					return
				}
				acquire("y", tc.acquire)
			})
			free := -1
			var records []NodeRecord
			at(4*time.Second, func() { // within y's holds
				v, err := env.QueryWorkflow(spec.QueryFree, spec.AcquireRequest{RunID: "run/z"})
				require.NoError(t, err)
				require.NoError(t, v.Get(&free))
				v, err = env.QueryWorkflow(spec.QueryNodes)
				require.NoError(t, err)
				require.NoError(t, v.Get(&records))
				env.CancelWorkflow()
			})
			env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})

			require.Equal(t, tc.hold.Count, held, "the hold found its nodes")
			if !tc.release {
				require.NoError(t, results["y"].err)
				require.Equal(t, tc.want, ids(results["y"].nodes))
			}
			require.Equal(t, tc.free, free, "the nodes run/z may take")
			for _, r := range records {
				require.Empty(t, r.HeldFor, "%s is held for no run after", r.Node.ID)
			}
		})
	}
}

// TestClusterForgetsANode: a node gone for good is removed from the
// registry, and so is one whose worker said it stopped (within its lease);
// one a run holds, one whose worker renews its lease, and an unknown one
// are refused, each saying why; a forgotten node's worker that starts
// again registers anew.
func TestClusterForgetsANode(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b", "c", "d"))
	at(2*time.Second, func() { acquire("run", spec.AcquireRequest{RunID: "r1", Count: 1, Wait: time.Second}) })
	errs := map[string]error{}
	forget := func(key, node string) {
		env.UpdateWorkflow(spec.UpdateForgetNode, key, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { errs[key] = err },
			OnComplete: func(_ any, err error) { errs[key] = err },
		}, spec.ForgetNode{NodeID: node})
	}
	// b renews its lease; c falls silent.
	for i := 5; i <= 60; i += 5 {
		at(time.Duration(i)*time.Second, func() {
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b"})
		})
	}
	at(56*time.Second, func() { // d's worker stops (SIGTERM) after its last renewal
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "d"})
		env.SignalWorkflow(spec.SignalMarkFailed, spec.MarkFailed{NodeID: "d", Reason: spec.ReasonWorkerStopped})
	})
	at(61*time.Second, func() {
		forget("stopped", "d")
		forget("held", "a")
		forget("alive", "b")
		forget("gone", "c")
		forget("unknown", "zz")
		forget("empty", "")
	})
	var after []NodeRecord
	at(62*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryNodes)
		require.NoError(t, err)
		require.NoError(t, v.Get(&after))
		env.SignalWorkflow(spec.SignalRegister, testNodes("c")[0]) // its worker back
	})
	var back []NodeRecord
	at(63*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryNodes)
		require.NoError(t, err)
		require.NoError(t, v.Get(&back))
		env.CancelWorkflow()
	})
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.NoError(t, results["run"].err)
	require.ErrorContains(t, errs["held"], "node a is held by r1 at rank 0")
	require.ErrorContains(t, errs["alive"], "node b's worker renewed its lease")
	require.NoError(t, errs["gone"])
	require.NoError(t, errs["stopped"], "its worker said it stopped: no lease to wait out")
	require.ErrorContains(t, errs["unknown"], "node zz is not registered")
	require.ErrorContains(t, errs["empty"], "node_id is required")
	nodeIDs := func(rs []NodeRecord) (out []string) {
		for _, r := range rs {
			out = append(out, r.Node.ID)
		}
		return out
	}
	require.Equal(t, []string{"a", "b"}, nodeIDs(after))
	require.Equal(t, []string{"a", "b", "c"}, nodeIDs(back))
}

// TestClusterRollsOverWithoutWaitingForWaiters: at continue-as-new an
// acquire waiting for nodes (r2, for 10 minutes) ends at once with
// ClusterRollover — its run asks the next run again — and the signals
// that come meanwhile are still served (before, the Cluster waited out the
// acquire serving none: every node went silent). A cancel request (`temporal
// workflow cancel` on the registry) rolls it over so too, r1 keeping its
// node (versionCancelRollsOver); before, the Cluster ran on cancelled and
// every acquire that had to wait failed at once.
func TestClusterRollsOverWithoutWaitingForWaiters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r1    int // nodes r1 takes of a and b
		state ClusterState
		at4s  func(env *testsuite.TestWorkflowEnvironment)
	}{
		{"history long", 2, ClusterState{MaxHistoryEvents: 30}, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetCurrentHistoryLength(31)
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
		}},
		{"cancel requested", 1, ClusterState{}, func(env *testsuite.TestWorkflowEnvironment) { env.CancelWorkflow() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, acquire, at, results := clusterEnv()
			registerAt(env, at, time.Second, testNodes("a", "b"))
			at(2*time.Second, func() { acquire("r1", spec.AcquireRequest{RunID: "r1", Count: tc.r1, Wait: time.Second}) })
			at(3*time.Second, func() { acquire("r2", spec.AcquireRequest{RunID: "r2", Count: 2, Wait: 10 * time.Minute}) })
			at(4*time.Second, func() { tc.at4s(env) })
			start := env.Now()
			env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{State: tc.state})
			var can *workflow.ContinueAsNewError
			require.True(t, errors.As(env.GetWorkflowError(), &can), "want continue-as-new, got %v", env.GetWorkflowError())
			require.NoError(t, results["r1"].err)
			var ae *temporal.ApplicationError
			require.True(t, errors.As(results["r2"].err, &ae), "r2: %v", results["r2"].err)
			require.Equal(t, spec.ErrTypeClusterRollover, ae.Type())
			require.Less(t, env.Now().Sub(start), time.Minute, "the waiter's 10 minutes were not waited out (test clock)")
			var next ClusterInput
			require.NoError(t, decodeArgs(can, &next))
			require.Len(t, next.State.Nodes, 2)
			for i, n := range next.State.Nodes {
				if i < tc.r1 {
					require.Equal(t, "r1", n.Run, "r1 keeps its nodes across")
				} else {
					require.Empty(t, n.Run, "%s free", n.Node.ID)
				}
			}
		})
	}
}

// TestClusterServesWaitersFirstComeFirstServed: three runs wait for the
// same two nodes; when they come free the one that has waited longest
// takes them (the SDK wakes the newest first), and the next two when the
// next pair does.
func TestClusterServesWaitersFirstComeFirstServed(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b"))
	at(2*time.Second, func() { acquire("holder", spec.AcquireRequest{RunID: "holder", Count: 2, Wait: time.Second}) })
	for i, run := range []string{"first", "second", "third"} {
		at(time.Duration(3+i)*time.Second, func() { acquire(run, spec.AcquireRequest{RunID: run, Count: 2, Wait: time.Hour}) })
	}
	at(10*time.Second, func() { env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "holder"}) })
	at(11*time.Second, func() {
		require.NotNil(t, results["first"].nodes, "the oldest waiter took the nodes")
		require.Nil(t, results["second"].nodes)
		require.Nil(t, results["third"].nodes)
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "first"})
	})
	at(12*time.Second, func() {
		require.NotNil(t, results["second"].nodes, "then the next oldest")
		require.Nil(t, results["third"].nodes)
		env.CancelWorkflow()
	})
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
}

// TestClusterReservesForAStarvedWaiter: "big" waits for 3 of 3 nodes
// while "holder" has 2. A new run asking for one within big's first
// minute takes the free node, as before; once big has waited a minute, a
// new run's acquire leaves the free node to it and waits its turn, while
// the holder growing back takes it (its nodes would idle meanwhile). When
// the holder lets its nodes go, big has all three; the waiting small run
// is served after it.
func TestClusterReservesForAStarvedWaiter(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	env.SetStartTime(day0)
	registerAt(env, at, time.Second, testNodes("a", "b", "c"))
	for i := 5; i < 300; i += 5 { // (the nodes stay alive)
		at(time.Duration(i)*time.Second, func() {
			for _, n := range []string{"a", "b", "c"} {
				env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: n})
			}
		})
	}
	at(2*time.Second, func() { acquire("holder", spec.AcquireRequest{RunID: "holder", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("big", spec.AcquireRequest{RunID: "big", Count: 3, Wait: time.Hour}) })
	at(10*time.Second, func() { acquire("small1", spec.AcquireRequest{RunID: "small1", Count: 1, Wait: time.Hour}) })
	at(11*time.Second, func() {
		require.Equal(t, []string{"c"}, ids(results["small1"].nodes), "big has waited 8 s: the free node goes to a new run")
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		var reg Registry
		require.NoError(t, v.Get(&reg))
		require.Equal(t, []WaitingAcquire{{RunID: "big", Count: 3, Since: day0.Add(3 * time.Second)}}, reg.Waiting,
			"not starved yet: nothing kept for it")
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "small1"})
	})
	at(2*time.Minute, func() { acquire("small2", spec.AcquireRequest{RunID: "small2", Count: 1, Wait: time.Hour}) })
	at(2*time.Minute+time.Second, func() {
		require.Nil(t, results["small2"].nodes, "big has waited 2 minutes: the free node is kept for it")
		// The registry says so (`cann-train nodes`): c kept for big,
		// small2 waiting behind it.
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		var reg Registry
		require.NoError(t, v.Get(&reg))
		require.Equal(t, []WaitingAcquire{
			{RunID: "big", Count: 3, Since: day0.Add(3 * time.Second), Kept: []string{"c"}},
			{RunID: "small2", Count: 1, Since: day0.Add(2 * time.Minute), Behind: "big"},
		}, reg.Waiting)
		acquire("regrow", spec.AcquireRequest{RunID: "holder", Count: 3, Wait: time.Hour})
	})
	at(2*time.Minute+2*time.Second, func() {
		require.Equal(t, []string{"a", "b", "c"}, ids(results["regrow"].nodes), "a run holding nodes grows back")
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "holder"})
	})
	at(2*time.Minute+3*time.Second, func() {
		require.Equal(t, []string{"a", "b", "c"}, ids(results["big"].nodes), "the starved waiter took every node")
		require.Nil(t, results["small2"].nodes)
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "big"})
	})
	at(2*time.Minute+4*time.Second, func() {
		require.Len(t, results["small2"].nodes, 1, "then the small run")
		env.CancelWorkflow()
	})
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	for _, k := range []string{"holder", "big", "small1", "small2", "regrow"} {
		require.NoError(t, results[k].err, k)
	}
}

// TestClusterSweepsAgainWhileWaiting: "waiter" waits for the nodes
// "holder" has; the holder is terminated after the waiter's first sweep
// (it runs no code to release them), and the waiter's next sweep, 30 s
// on, finds it ended and takes its nodes — not at its node_wait's end.
// An acquire of a run terminated while it waits ("ghost") ends, taking
// nothing, at its next sweep.
func TestClusterSweepsAgainWhileWaiting(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	var terminated bool
	env.OnActivity(spec.ActivityEndedRuns, mock.Anything, mock.Anything).Return(
		func(_ context.Context, runs []string) ([]spec.EndedRun, error) {
			var out []spec.EndedRun
			for _, r := range runs {
				if terminated && (r == "holder" || r == "ghost") {
					out = append(out, spec.EndedRun{RunID: r, How: "terminated"})
				}
			}
			return out, nil
		})
	registerAt(env, at, time.Second, testNodes("a", "b"))
	at(2*time.Second, func() { acquire("holder", spec.AcquireRequest{RunID: "holder", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("ghost", spec.AcquireRequest{RunID: "ghost", Count: 2, Wait: 10 * time.Minute}) })
	at(4*time.Second, func() { acquire("waiter", spec.AcquireRequest{RunID: "waiter", Count: 2, Wait: 10 * time.Minute}) })
	at(10*time.Second, func() { terminated = true })
	for i := 5; i < 120; i += 5 { // (the nodes stay alive)
		at(time.Duration(i)*time.Second, func() {
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a"})
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b"})
		})
	}
	at(2*time.Minute, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.NoError(t, results["holder"].err)
	require.Error(t, results["ghost"].err, "a terminated run's acquire ends")
	require.Empty(t, results["ghost"].nodes)
	require.NoError(t, results["waiter"].err, "the terminated holder's nodes were freed for the waiter")
	require.Equal(t, []string{"a", "b"}, ids(results["waiter"].nodes), "within 2 minutes of its 10")
}

// TestClusterTakesLeasesOnlyFromTheRegisteredProcess: a second worker
// process with the node's ID renews no lease for it: the registered one,
// silent, goes silent; its own renewals (and an older build's, naming no
// process) keep it.
func TestClusterTakesLeasesOnlyFromTheRegisteredProcess(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	nodes := testNodes("a", "b")
	nodes[0].Incarnation, nodes[1].Incarnation = "100.1", "100.2"
	registerAt(env, at, time.Second, nodes)
	for i := 5; i <= 40; i += 5 {
		at(time.Duration(i)*time.Second, func() {
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "a", Incarnation: "200.9"}) // another process
			env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b", Incarnation: "100.2"})
		})
	}
	at(41*time.Second, func() { acquire("two", spec.AcquireRequest{RunID: "r", Count: 2}) })
	at(42*time.Second, func() { acquire("one", spec.AcquireRequest{RunID: "r2", Count: 1}) })
	at(43*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.ErrorContains(t, results["two"].err, "1 silent", "a's registered process renewed nothing")
	require.NoError(t, results["one"].err)
	require.Equal(t, []string{"b"}, ids(results["one"].nodes))
}

// TestClusterWithdrawsAWaitingAcquire: a withdraw ends the run's acquire
// waiting now, taking nothing; the nodes it would have had first go to
// the acquire behind it, and the run's later acquires are served as
// usual.
func TestClusterWithdrawsAWaitingAcquire(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	registerAt(env, at, time.Second, testNodes("a", "b"))
	at(2*time.Second, func() { acquire("holder", spec.AcquireRequest{RunID: "holder", Count: 2, Wait: time.Second}) })
	at(3*time.Second, func() { acquire("first", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Hour}) })
	at(4*time.Second, func() { acquire("second", spec.AcquireRequest{RunID: "r2", Count: 2, Wait: time.Hour}) })
	at(5*time.Second, func() { env.SignalWorkflow(spec.SignalWithdraw, spec.Withdraw{RunID: "r1"}) })
	at(6*time.Second, func() {
		var ae *temporal.ApplicationError
		require.True(t, errors.As(results["first"].err, &ae), "first: %v", results["first"].err)
		require.Equal(t, spec.ErrTypeAcquireWithdrawn, ae.Type())
		require.Nil(t, results["first"].nodes)
		require.Nil(t, results["second"].nodes, "r2 still waits")
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "holder"})
	})
	at(7*time.Second, func() {
		require.Equal(t, []string{"a", "b"}, ids(results["second"].nodes), "the nodes r1 would have had first go to r2")
		env.SignalWorkflow(spec.SignalRelease, spec.Release{RunID: "r2"})
		acquire("again", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Hour})
	})
	at(8*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.NoError(t, results["again"].err, "an acquire after the withdraw is served as usual")
	require.Equal(t, []string{"a", "b"}, ids(results["again"].nodes))
}

// TestClusterRenewalRegistersAnUnknownNode: a registry started anew (the
// old one terminated, or Temporal lost its state) knows only the node
// whose registration started it; the others' lease renewals reach it and
// register them when they carry their registration
// (versionRenewalRegisters) — an older worker's, without it, is ignored
// as before — and an acquire then gets them.
func TestClusterRenewalRegistersAnUnknownNode(t *testing.T) {
	env, acquire, at, results := clusterEnv()
	nodes := testNodes("a", "b", "c")
	at(time.Second, func() { env.SignalWorkflow(spec.SignalRegister, nodes[0]) })
	at(2*time.Second, func() {
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b", Node: &nodes[1]})
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "c"}) // (an older worker's)
		// A renewal whose registration names another node registers none.
		env.SignalWorkflow(spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "d", Node: &nodes[2]})
	})
	var reg Registry
	at(3*time.Second, func() {
		v, err := env.QueryWorkflow(spec.QueryRegistry)
		require.NoError(t, err)
		require.NoError(t, v.Get(&reg))
	})
	at(4*time.Second, func() { acquire("two", spec.AcquireRequest{RunID: "r1", Count: 2, Wait: time.Second}) })
	at(10*time.Second, func() { env.CancelWorkflow() })
	env.ExecuteWorkflow(spec.WorkflowCluster, ClusterInput{})
	require.True(t, env.IsWorkflowCompleted())

	var got []string
	for _, r := range reg.Nodes {
		got = append(got, r.Node.ID)
	}
	require.Equal(t, []string{"a", "b"}, got)
	require.Equal(t, nodes[1].CommAddr, reg.Nodes[1].Node.CommAddr)
	require.NoError(t, results["two"].err)
	require.Equal(t, []string{"a", "b"}, ids(results["two"].nodes))
}
