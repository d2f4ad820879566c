//go:build record

package workflows

// Scripted recordings (see record_test.go) of the chunk, node-ask and
// registry changes: a scale-up short of nodes, a tie of blamed ranks, a
// save-only chunk that failed after its saver stored the held state, asks
// for a drained node's replacement cut by their chunk and found after a
// whole wait, and the Cluster forgetting a node whose worker stopped.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// TestRecordScriptedChunks records the chunk and node-ask scenarios.
func TestRecordScriptedChunks(t *testing.T) {
	recordScenarios(t, []scenario{
		{name: "trainingrun_scale_asks_soon", run: recordScaleAsksSoon},
		{name: "trainingrun_silent_suspects", run: recordSilentSuspects},
		{name: "trainingrun_saver_kept", run: recordSaverKept},
		{name: "trainingrun_asks_cut_found", run: recordAsksCutFound},
		{name: "cluster_forget_stopped", run: recordForgetStopped},
		{name: "cluster_cancel_rolls_over", run: recordCancelRollsOver},
	})
}

// recordScaleAsksSoon: a run on 2 nodes is scaled to 4 mid-chunk with one
// more free: the boundary takes it, training on with 3, and asks for the
// fourth a second later (versionScaleAsksSoon): the next boundary, n4
// free by then, takes it.
func recordScaleAsksSoon(t *testing.T, r *recorder) {
	const id = "run/scale-asks-soon"
	nodes := testNodes("n1", "n2", "n3", "n4")
	cl := &fakeCluster{pool: nodes[:3]}
	ch := &fakeChunks{}
	ch.onStart = func(in spec.ChunkInput) {
		if in.Rank == 0 {
			switch in.From {
			case 100:
				r.signal(id, spec.SignalRescale, spec.Rescale{Nodes: 4})
			case 200: // (after the boundary that took n3: the next asks)
				cl.mu.Lock()
				cl.pool = nodes
				cl.mu.Unlock()
			}
		}
		time.Sleep(time.Second)
	}
	control, node := runActivities(cl, ch)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "scale-asks-soon", Nodes: 2, MinNodes: 1, Steps: 800, ChunkSteps: 100}.WithDefaults()
	st, err := r.run(id, RunInput{Spec: s}, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ch.byFrom()[200]); n != 3 {
		t.Fatalf("the chunk from 200 ran on %d nodes: want 3 (the free one taken at once)", n)
	}
	if len(st.Rescalings) < 2 || st.Rescalings[0].ToNodes != 3 || st.Rescalings[0].Regrow ||
		!slices.Equal(st.Nodes, []string{"n1", "n2", "n3", "n4"}) || st.TargetNodes != 0 {
		t.Fatalf("rescalings %+v, nodes %v, target %d: want to 3 as the rescale, then n4", st.Rescalings, st.Nodes, st.TargetNodes)
	}
	r.save(id, "", "trainingrun_scale_asks_soon", versionScaleAsksSoon)
}

// recordSilentSuspects: node-3 (rank 2) dies in the chunk from 100;
// node-2 names it, node-1 names node-2. One vote each: node-2 reported,
// so only the silent node-3 is replaced (versionSilentSuspects).
func recordSilentSuspects(t *testing.T, r *recorder) {
	const id = "run/silent-suspects"
	nodes := testNodes("node-1", "node-2", "node-3", "spare-1")
	cl := &fakeCluster{pool: nodes}
	ch := &fakeChunks{}
	peerFailed := func(rank int) error {
		return temporal.NewApplicationErrorWithCause(fmt.Sprintf("rank %d lost", rank), spec.ErrTypePeerFailed,
			errors.New("EOF"), spec.PeerFailure{Rank: rank, Step: 120})
	}
	ch.fail = func(in spec.ChunkInput) error {
		if in.From != 100 || in.Membership.Generation != 1 {
			time.Sleep(300 * time.Millisecond)
			return nil
		}
		switch in.Membership.Nodes[in.Rank].ID {
		case "node-2":
			return peerFailed(2)
		case "node-1":
			time.Sleep(100 * time.Millisecond) // (within blameGrace of node-2's word)
			return peerFailed(1)
		}
		time.Sleep(3 * time.Second) // node-3 is dead: cancelled meanwhile
		return errors.New("unreachable")
	}
	control, node := runActivities(cl, ch)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "silent-suspects", Nodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()
	st, err := r.run(id, RunInput{Spec: s}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Recoveries) != 1 || !slices.Equal(st.Recoveries[0].FailedNodes, []string{"node-3"}) ||
		!slices.Equal(st.Nodes, []string{"node-1", "node-2", "spare-1"}) {
		t.Fatalf("recoveries %+v, nodes %v: want node-3 alone replaced by spare-1", st.Recoveries, st.Nodes)
	}
	r.save(id, "", "trainingrun_silent_suspects", versionSilentSuspects)
}

// recordSaverKept: the bucket refuses the last chunk's checkpoint (400);
// the run holds and stores it with a save-only chunk, in which node-2 is
// lost after rank 0 stored it: the recovery keeps that checkpoint and
// trains nothing again (versionSaverKept).
func recordSaverKept(t *testing.T, r *recorder) {
	const id = "run/saver-kept"
	nodes := testNodes("node-1", "node-2", "spare-1")
	cl := &fakeCluster{pool: nodes}
	b := &refusingBucket{refuse: func(in spec.ChunkInput, tries int) bool { return in.To == 400 && tries <= 1 }}
	var mu sync.Mutex
	lost := false
	ch := &fakeChunks{edit: b.edit, fail: func(in spec.ChunkInput) error {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if in.From == in.To && in.Rank == 1 && !lost {
			lost = true
			return temporal.NewApplicationErrorWithCause("peer 0 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: in.From})
		}
		return nil
	}}
	control, node := runActivities(cl, ch)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "saver-kept", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	st, err := r.run(id, RunInput{Spec: s}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var trained []int64
	for _, in := range ch.all() {
		if in.Rank == 0 && in.From < in.To {
			trained = append(trained, in.From)
		}
	}
	if st.Phase != spec.PhaseCompleted || st.Step != 400 || st.LastCkpt == nil || st.LastCkpt.Step != 400 ||
		len(st.Recoveries) != 1 || !slices.Equal(trained, []int64{0, 100, 200, 300}) || !slices.Equal(saveOnlySteps(ch.all()), []int64{400}) {
		t.Fatalf("phase %s, step %d, last checkpoint %+v, recoveries %+v, trained %v: want 400 stored by the save-only chunk and kept",
			st.Phase, st.Step, st.LastCkpt, st.Recoveries, trained)
	}
	r.save(id, "", "trainingrun_saver_kept", versionSaverKept)
}

// askScript plays a drained node's replacement scenario's node activities
// (EndChunk, chunks that train until asked to end or for as long as
// their place in the run says) and the FreeNodes asks.
type askScript struct {
	mu       sync.Mutex
	ended    map[string]bool // sessions asked to end (EndChunk)
	whys     []string        // their reasons
	sessions map[string]int  // each chunk's place in the run
	asks     []time.Time     // FreeNodes calls
	found    time.Time       // when an ask found c
	// onStart, when set, hears of each chunk as it starts (before it
	// waits).
	onStart func(in spec.ChunkInput)
}

func (a *askScript) endChunk(_ context.Context, in spec.EndChunkInput) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended[in.Session], a.whys = true, append(a.whys, in.Why)
	return nil
}

// place is the chunk's place in the run (0: the first), and whether it
// was asked to end.
func (a *askScript) place(session string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.sessions[session]
	if !ok {
		n = len(a.sessions)
		a.sessions[session] = n
	}
	return n, a.ended[session]
}

// train waits as the chunk's place says — the first and third until their
// node is asked to end them, the second 12 s (it ends while its ask for a
// node waits) — heartbeating, then trains it with ch (a chunk asked to
// end ends 37 steps in, rank 0 with a checkpoint there).
func (a *askScript) train(ch *fakeChunks) func(context.Context, spec.ChunkInput) (*spec.ChunkResult, error) {
	return func(ctx context.Context, in spec.ChunkInput) (*spec.ChunkResult, error) {
		if a.onStart != nil {
			a.onStart(in)
		}
		n, _ := a.place(in.Session)
		limit := 300 * time.Millisecond
		switch n {
		case 0:
			limit = 30 * time.Second
		case 1:
			limit = 12 * time.Second
		case 2:
			limit = 5 * time.Minute
		}
		for end := time.Now().Add(limit); time.Now().Before(end); {
			if _, asked := a.place(in.Session); asked {
				break
			}
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		return ch.train(ctx, in)
	}
}

func (a *askScript) edit(in spec.ChunkInput, res *spec.ChunkResult) {
	if _, asked := a.place(in.Session); !asked {
		return
	}
	end := in.From + 37
	res.To, res.WeightsSHA256, res.PendingCheckpoint, res.Checkpoint = end, fmt.Sprintf("w%d", end), nil, nil
	if in.Rank == 0 {
		res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: end, Key: fmt.Sprintf("ckpt/%d", end)}
	}
}

// freeNodes plays FreeNodes on cl: the first ask waits until its chunk
// ends (it is cut), the second waits most of freeNodesWait for nothing,
// c's worker coming back as it returns, and later ones answer at once.
func (a *askScript) freeNodes(cl *fakeCluster) func(context.Context, string, spec.AcquireRequest) (int, error) {
	wait := func(ctx context.Context, d time.Duration) error {
		for end := time.Now().Add(d); time.Now().Before(end); {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		return nil
	}
	return func(ctx context.Context, _ string, req spec.AcquireRequest) (int, error) {
		a.mu.Lock()
		a.asks = append(a.asks, time.Now())
		n := len(a.asks)
		a.mu.Unlock()
		switch n {
		case 1:
			if err := wait(ctx, time.Minute); err != nil {
				return 0, err
			}
		case 2:
			if err := wait(ctx, req.Wait/2+5*time.Second); err != nil {
				return 0, err
			}
			cl.mu.Lock()
			delete(cl.failed, "c") // its worker came back
			cl.mu.Unlock()
			return 0, nil
		}
		cl.mu.Lock()
		defer cl.mu.Unlock()
		free := cl.freeLocked()
		if free > 0 && a.found.IsZero() {
			a.found = time.Now()
		}
		return free, nil
	}
}

// recordAsksCutFound: b is drained while the run (a and b, min_nodes 2,
// node_wait 5 s) trains, with no node free: its chunk ends early, the run
// keeps b and asks for a replacement 5 s into the next chunk, which ends
// by itself while that ask waits. The chunk after asks again at once
// (versionCutAsks); that ask waits its whole time for nothing, and the
// one right after it finds c, back meanwhile: the chunk ends early for
// it and the run moves off b at its boundary, though the boundaries'
// next ask was still 5 s away (versionFoundAsks).
func recordAsksCutFound(t *testing.T, r *recorder) {
	const id = "run/asks-cut-found"
	nodes := speaking(spec.ChunkProtocolEndEarly, "a", "b", "c")
	cl := &fakeCluster{pool: nodes, failed: map[string]bool{"c": true}}
	a := &askScript{ended: map[string]bool{}, sessions: map[string]int{}}
	ch := &fakeChunks{edit: a.edit}
	var once sync.Once
	a.onStart = func(in spec.ChunkInput) {
		if in.Rank != 0 {
			return
		}
		once.Do(func() {
			go func() {
				time.Sleep(time.Second)
				cl.mu.Lock()
				cl.failed["b"] = true // drained: the Cluster hands it out no more
				cl.mu.Unlock()
				r.signal(id, spec.SignalEvict, spec.Evict{NodeID: "b", Reason: "disk"})
			}()
		})
	}
	control, node := runActivities(cl, ch)
	control[spec.ActivityFreeNodes] = a.freeNodes(cl)
	node[spec.ActivityTrainChunk] = a.train(ch)
	node[spec.ActivityEndChunk] = a.endChunk
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "asks-cut-found", Nodes: 2, MinNodes: 2, Steps: 300, ChunkSteps: 100, NodeWait: spec.Duration(5 * time.Second)}.WithDefaults()
	start := time.Now()
	st, err := r.run(id, RunInput{Spec: s}, 6*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	whys, asks, found := slices.Clone(a.whys), slices.Clone(a.asks), a.found
	a.mu.Unlock()
	t.Logf("asks at %v after the start; c found %v after; chunks ended for %q", since(start, asks), found.Sub(start), whys)
	if st.Step != 300 || !slices.Equal(st.Nodes, []string{"a", "c"}) || len(whys) != 2 ||
		whys[0] != "drain of b" || whys[1] != "replacing b: 1 free node(s)" || len(asks) != 3 {
		t.Fatalf("step %d, nodes %v, chunks ended for %q, %d asks: want b replaced by c where the third chunk ended for it, after three asks",
			st.Step, st.Nodes, whys, len(asks))
	}
	if d := asks[2].Sub(asks[1]); d < freeNodesWait/2 {
		t.Fatalf("the third ask came %v after the second: want after its whole wait", d)
	}
	r.save(id, "", "trainingrun_asks_cut_found", versionCutAsks, versionFoundAsks)
}

// serveCluster starts a control worker with the real Cluster (every run
// it asks about running) and the Cluster as id.
func (r *recorder) serveCluster(ctx context.Context, id string) client.WorkflowRun {
	r.t.Helper()
	w := worker.New(r.c, spec.ControlTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
	w.RegisterActivityWithOptions(func(context.Context, []string) ([]spec.EndedRun, error) { return nil, nil },
		activity.RegisterOptions{Name: spec.ActivityEndedRuns})
	r.start(w)
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: spec.ControlTaskQueue}, spec.WorkflowCluster, ClusterInput{})
	if err != nil {
		r.t.Fatal(err)
	}
	return run
}

// clusterNodes queries the Cluster id's registry.
func (r *recorder) clusterNodes(ctx context.Context, id string) []NodeRecord {
	r.t.Helper()
	v, err := r.c.QueryWorkflow(ctx, id, "", spec.QueryNodes)
	if err != nil {
		r.t.Fatal(err)
	}
	var nodes []NodeRecord
	if err := v.Get(&nodes); err != nil {
		r.t.Fatal(err)
	}
	return nodes
}

// recordCancelRollsOver: a cancel request on the Cluster, while r1 holds
// a and r2 waits for two nodes, continues it as new with its state
// (versionCancelRollsOver): r2's acquire ends with the rollover error,
// and the next run still has r1 holding a.
func recordCancelRollsOver(t *testing.T, r *recorder) {
	const id = "cluster/cancel-rolls-over"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := r.serveCluster(ctx, id)
	for _, n := range testNodes("a", "b") {
		r.signal(id, spec.SignalRegister, n)
	}
	acquire := func(req spec.AcquireRequest) (client.WorkflowUpdateHandle, error) {
		return r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: id, RunID: first.GetRunID(), UpdateName: spec.UpdateAcquire, Args: []any{req},
			WaitForStage: client.WorkflowUpdateStageAccepted,
		})
	}
	h1, err := acquire(spec.AcquireRequest{RunID: "r1", Count: 1, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.Get(ctx, nil); err != nil {
		t.Fatalf("r1's acquire: %v", err)
	}
	h2, err := acquire(spec.AcquireRequest{RunID: "r2", Count: 2, Wait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.c.CancelWorkflow(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	var ae *temporal.ApplicationError
	if err := h2.Get(ctx, nil); !errors.As(err, &ae) || ae.Type() != spec.ErrTypeClusterRollover {
		t.Fatalf("r2's acquire after the cancel: %v; want the rollover error", err)
	}
	for {
		d, err := r.c.DescribeWorkflowExecution(ctx, id, first.GetRunID())
		if err != nil {
			t.Fatal(err)
		}
		st := d.GetWorkflowExecutionInfo().GetStatus()
		if st == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			break
		}
		if st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || ctx.Err() != nil {
			t.Fatalf("the cancelled Cluster is %s; want continued as new", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if nodes := r.clusterNodes(ctx, id); len(nodes) != 2 || nodes[0].Run != "r1" || nodes[1].Run != "" {
		t.Fatalf("the next run's registry %+v: want a held by r1, b free", nodes)
	}
	r.save(id, first.GetRunID(), "cluster_cancel_rolls_over", versionCancelRollsOver)
}

// recordForgetStopped: the Cluster (its own control worker: the real
// workflow) registers a, b and d; d's worker renews its lease and says it
// stopped (MarkFailed, "worker stopped"); forgetting d then succeeds at
// once, its lease fresh (versionForgetStopped), while b's is refused.
func recordForgetStopped(t *testing.T, r *recorder) {
	const id = "cluster/forget-stopped"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.serveCluster(ctx, id)
	for _, n := range testNodes("a", "b", "d") {
		r.signal(id, spec.SignalRegister, n)
	}
	time.Sleep(time.Second)
	r.signal(id, spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "b"})
	r.signal(id, spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: "d"})
	r.signal(id, spec.SignalMarkFailed, spec.MarkFailed{NodeID: "d", Reason: spec.ReasonWorkerStopped})
	time.Sleep(time.Second)
	forget := func(node string) error {
		h, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: id, UpdateName: spec.UpdateForgetNode, Args: []any{spec.ForgetNode{NodeID: node}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return h.Get(ctx, nil)
	}
	if err := forget("d"); err != nil {
		t.Fatalf("forget d, whose worker said it stopped: %v", err)
	}
	if err := forget("b"); err == nil {
		t.Fatal("forget b, whose worker renews its lease: want refused")
	}
	var left []string
	for _, n := range r.clusterNodes(ctx, id) {
		left = append(left, n.Node.ID)
	}
	if !slices.Equal(left, []string{"a", "b"}) {
		t.Fatalf("registry %v after forgetting d: want a, b", left)
	}
	// (Saved running, as the end-to-end tests' Cluster histories are: it
	// serves until cancelled or continued as new.)
	r.save(id, "", "cluster_forget_stopped", versionForgetStopped)
}
