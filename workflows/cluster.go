package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// ClusterInput starts (or continues) the Cluster workflow.
type ClusterInput struct {
	State ClusterState `json:"state"`
}

// ClusterState is everything that crosses continue-as-new.
type ClusterState struct {
	// Nodes sorted by ID.
	Nodes []NodeRecord `json:"nodes"`
	// LeaseTTL: a node not heard from for this long is not handed out.
	LeaseTTL time.Duration `json:"lease_ttl"`
	// MaxHistoryEvents triggers continue-as-new (the server's suggestion
	// also does).
	MaxHistoryEvents int `json:"max_history_events"`
}

// DefaultLeaseTTL is the Cluster's LeaseTTL unless its state says
// otherwise: a node not heard from for longer is not handed out.
const DefaultLeaseTTL = 20 * time.Second

// NodeRecord is the Cluster's view of one node.
type NodeRecord struct {
	Node       spec.Node `json:"node"`
	LastSeen   time.Time `json:"last_seen"`
	Failed     bool      `json:"failed"`
	FailReason string    `json:"fail_reason,omitempty"`
	FailedAt   time.Time `json:"failed_at,omitzero"`
	// Misconfigured: failed while alive (spec.MarkFailed.Misconfigured):
	// only registering again reinstates it.
	Misconfigured bool `json:"misconfigured,omitempty"`
	// Run holds the node, at Rank; empty when free.
	Run  string `json:"run,omitempty"`
	Rank int    `json:"rank"`
	// Drained: an operator took the node out of the pool (spec.Drain);
	// it is handed out again only once put back.
	Drained     bool   `json:"drained,omitempty"`
	DrainReason string `json:"drain_reason,omitempty"`
	// HeldFor, while free and before HeldUntil, is the run the node is
	// held for (spec.UpdateHoldFree): no other run is handed it.
	HeldFor   string    `json:"held_for,omitempty"`
	HeldUntil time.Time `json:"held_until,omitzero"`
}

// takeable: r is a free node req's run may take now — live, on the run's
// data set, held for no other run, not a worker process the run shuns.
func (c *cluster) takeable(now time.Time, r *NodeRecord, req spec.AcquireRequest) bool {
	return r.Run == "" && !heldForOther(now, r, req.RunID) && c.suits(now, r, req)
}

// suits: r is live, on req's data set and not a worker process req shuns,
// whoever holds it.
func (c *cluster) suits(now time.Time, r *NodeRecord, req spec.AcquireRequest) bool {
	return c.alive(now, r) && holds(r, req.DataSHA256) &&
		!slices.ContainsFunc(req.Shun, func(p spec.NodeProcess) bool { return p.Is(r.Node) })
}

// heldForOther: r is held for another run than run, and the hold lasts.
func heldForOther(now time.Time, r *NodeRecord, run string) bool {
	return r.HeldFor != "" && r.HeldFor != run && now.Before(r.HeldUntil)
}

// Registry is the answer to spec.QueryRegistry: every node and the lease
// TTL that decides whether a node not marked failed is still handed out.
type Registry struct {
	Nodes    []NodeRecord  `json:"nodes"`
	LeaseTTL time.Duration `json:"lease_ttl"`
	// Waiting are the acquires waiting for nodes now, oldest first
	// (computed for the query: no state of its own).
	Waiting []WaitingAcquire `json:"waiting,omitempty"`
}

// WaitingAcquire is a run's acquire waiting for nodes, as the registry
// query shows it: for how many, since when, and what it waits behind.
type WaitingAcquire struct {
	RunID    string    `json:"run_id"`
	Count    int       `json:"count"`
	MinCount int       `json:"min_count,omitempty"`
	Since    time.Time `json:"since"`
	// Kept are the free nodes kept for it: it has waited starveAfter or
	// longer, the live nodes it could use would serve it once freed, and
	// runs holding no node that ask after it leave these to it
	// (versionReserveStarved).
	Kept []string `json:"kept,omitempty"`
	// Behind is the older waiting run this one leaves the free nodes to
	// now (a starved one, or one that could be served first: versionFIFO).
	Behind string `json:"behind,omitempty"`
}

// Cluster is the node registry: node workers register and renew leases by
// signal; runs acquire nodes by Update and release or mark them failed by
// signal. One Cluster serves many runs.
func Cluster(ctx workflow.Context, in ClusterInput) error {
	c, err := newCluster(ctx, in)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

type cluster struct {
	st ClusterState
	// waiting counts each run's acquires in flight; ended marks the runs
	// among them that released their nodes meanwhile (a run cancelled
	// while it waited for nodes): their acquires end without taking any.
	// Neither crosses continue-as-new, which waits for every acquire.
	waiting map[string]int
	ended   map[string]bool
	// closing: the Cluster is about to continue as new
	// (versionServeWhileClosing): acquires waiting end with
	// ErrTypeClusterRollover, new ones are refused so, and signals are
	// still served until every handler has ended.
	closing bool
	// queue holds the acquires waiting, oldest first; with fifo
	// (versionFIFO) one waits while an older one could be served now;
	// with reserve (versionReserveStarved) a new run's acquire waits too
	// while an older one starves.
	queue   []*waiter
	fifo    bool
	reserve bool
	// cancelAsked: a cancel request was seen, and cancelRolls: it makes
	// the Cluster continue as new (versionCancelRollsOver).
	cancelAsked, cancelRolls bool
}

// versionCancelRollsOver: a cancel request (`temporal workflow cancel`
// on the registry) makes the Cluster continue as new with its whole
// state, as a long history does — acquires waiting end with
// ErrTypeClusterRollover and are asked again of the next run. Before, it
// ran on cancelled: every acquire that had to wait, every sweep and every
// run told of a drain failed at once, until the next rollover. Ending
// instead would lose which runs hold which nodes (the node workers'
// renewals would start a registry that knows the nodes, not their
// holders). Asked only once a cancel is requested.
const versionCancelRollsOver = "cancel-rolls-over"

// cancelRollsOver says whether a cancel request continues the Cluster as
// new (asked once, by the first to see the request).
func (c *cluster) cancelRollsOver(ctx workflow.Context) bool {
	if !c.cancelAsked {
		c.cancelAsked = true
		c.cancelRolls = workflow.GetVersion(ctx, versionCancelRollsOver, workflow.DefaultVersion, 1) >= 1
	}
	return c.cancelRolls
}

// waiter is an acquire waiting for nodes.
type waiter struct {
	req       spec.AcquireRequest
	heldFirst bool
	withdrawn bool      // (SignalWithdraw)
	since     time.Time // when it began to wait
}

func newCluster(ctx workflow.Context, in ClusterInput) (*cluster, error) {
	c := &cluster{st: in.State, waiting: map[string]int{}, ended: map[string]bool{}}
	if c.st.LeaseTTL <= 0 {
		c.st.LeaseTTL = DefaultLeaseTTL
	}
	if c.st.MaxHistoryEvents <= 0 {
		c.st.MaxHistoryEvents = 5000
	}
	if err := workflow.SetQueryHandler(ctx, spec.QueryNodes, func() ([]NodeRecord, error) {
		return c.st.Nodes, nil
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetQueryHandler(ctx, spec.QueryRegistry, func() (Registry, error) {
		return Registry{Nodes: c.st.Nodes, LeaseTTL: c.st.LeaseTTL, Waiting: c.waitingNow(workflow.Now(ctx))}, nil
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetQueryHandler(ctx, spec.QueryFree, func(req spec.AcquireRequest) (int, error) {
		free, _ := c.freeFor(workflow.Now(ctx), req)
		return free, nil
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, spec.UpdateAcquire, c.acquire,
		workflow.UpdateHandlerOptions{Validator: func(req spec.AcquireRequest) error {
			if c.closing {
				return rollover(req)
			}
			return validateAcquire(req)
		}}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, spec.UpdateHoldFree, c.holdFree,
		workflow.UpdateHandlerOptions{Validator: validateHold}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, spec.UpdateForgetNode, c.forget,
		workflow.UpdateHandlerOptions{Validator: func(f spec.ForgetNode) error {
			if f.NodeID == "" {
				return errors.New("forget: node_id is required")
			}
			return nil
		}}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cluster) run(ctx workflow.Context) error {
	register := workflow.GetSignalChannel(ctx, spec.SignalRegister)
	heartbeat := workflow.GetSignalChannel(ctx, spec.SignalHeartbeat)
	failed := workflow.GetSignalChannel(ctx, spec.SignalMarkFailed)
	release := workflow.GetSignalChannel(ctx, spec.SignalRelease)
	drain := workflow.GetSignalChannel(ctx, spec.SignalDrain)
	withdraw := workflow.GetSignalChannel(ctx, spec.SignalWithdraw)

	log := workflow.GetLogger(ctx)
	refused := func(name string) func(error) {
		return func(err error) { log.Warn("signal refused: its payload does not decode", "signal", name, "error", err) }
	}
	sel := workflow.NewSelector(ctx)
	onSignal(sel, register, refused(spec.SignalRegister), func(n spec.Node) { c.register(ctx, n) })
	onSignal(sel, heartbeat, refused(spec.SignalHeartbeat), func(hb spec.NodeHeartbeat) { c.heartbeat(ctx, hb) })
	onSignal(sel, failed, refused(spec.SignalMarkFailed), func(mf spec.MarkFailed) { c.markFailed(ctx, mf) })
	onSignal(sel, release, refused(spec.SignalRelease), func(r spec.Release) { c.release(ctx, r.RunID) })
	onSignal(sel, drain, refused(spec.SignalDrain), func(d spec.Drain) { c.drain(ctx, d) })
	onSignal(sel, withdraw, refused(spec.SignalWithdraw), func(w spec.Withdraw) { c.withdraw(ctx, w.RunID) })
	// A cancel request continues the Cluster as new (versionCancelRollsOver).
	cancelled := false
	wake := workflow.NewChannel(ctx)
	sel.AddReceive(wake, func(ch workflow.ReceiveChannel, _ bool) {
		ch.Receive(ctx, nil)
		cancelled = true
	})
	watch, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(watch, func(watch workflow.Context) {
		ctx.Done().Receive(watch, nil)
		if c.cancelRollsOver(watch) {
			log.Warn("cancel requested: the cluster registry continues as new with its nodes and holders (terminate it to drop them)")
			wake.Send(watch, struct{}{})
		}
	})
	for {
		sel.Select(ctx)
		info := workflow.GetInfo(ctx)
		if cancelled || info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= c.st.MaxHistoryEvents {
			break
		}
	}
	if cancelled {
		// What closes the Cluster must not fail for the request.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	// Drain what arrived meanwhile, let running updates finish, then hand
	// the whole state to the next run.
	if workflow.GetVersion(ctx, versionServeWhileClosing, workflow.DefaultVersion, 1) >= 1 {
		// Acquires waiting end now (asked again of the next run), and the
		// signals — leases, releases, registrations, drains — are served
		// until they have: before, none was while an acquire waited out
		// its node_wait, every node went silent and waiting runs failed.
		c.closing = true
		finished, done := workflow.NewFuture(ctx)
		workflow.Go(ctx, func(ctx workflow.Context) {
			done.Set(nil, workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }))
		})
		over := false
		sel.AddFuture(finished, func(workflow.Future) { over = true })
		for !over {
			sel.Select(ctx)
		}
	} else if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	for sel.HasPending() {
		sel.Select(ctx)
	}
	return workflow.NewContinueAsNewError(ctx, Cluster, ClusterInput{State: c.st})
}

// versionLeaseIncarnation: a lease renewal from another worker process
// than the one registered for the node is not taken. Asked only then.
const versionLeaseIncarnation = "lease-incarnation"

// versionServeWhileClosing: at continue-as-new the Cluster ends the
// acquires waiting (ErrTypeClusterRollover: AcquireNodes asks the next run
// again) and serves signals until they have ended. Before, it waited for
// them — up to a run's node_wait — serving nothing.
const versionServeWhileClosing = "serve-while-closing"

// versionFIFO: among acquires waiting for nodes, one that could be served
// waits while an older one could be served now (nodes go to the run that
// has waited longest; a younger one that fits where the older does not
// still goes first). Before, the Go SDK woke the newest first, and the
// oldest could starve. Asked when an acquire waits beside others.
const versionFIFO = "fifo-acquires"

// versionReserveStarved: an acquire of a run holding no node waits while
// an older acquire has waited starveAfter for nodes it could use
// (olderStarved); before, small runs could pass a large one forever.
// Asked when an acquire waits beside others.
const versionReserveStarved = "reserve-starved"

// rollover is the error of an acquire the Cluster ends, or refuses, as it
// continues as new.
func rollover(req spec.AcquireRequest) error {
	return temporal.NewApplicationError(fmt.Sprintf("acquire %d nodes for %s: the cluster registry is continuing as new; ask again",
		req.Count, req.RunID), spec.ErrTypeClusterRollover)
}

func (c *cluster) find(id string) *NodeRecord {
	i, ok := slices.BinarySearchFunc(c.st.Nodes, id, func(r NodeRecord, id string) int {
		switch {
		case r.Node.ID < id:
			return -1
		case r.Node.ID > id:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return &c.st.Nodes[i]
}

func (c *cluster) register(ctx workflow.Context, n spec.Node) {
	if n.ID == "" {
		workflow.GetLogger(ctx).Warn("register without node ID ignored", "node", n)
		return
	}
	if r := c.find(n.ID); r != nil {
		// A restarted worker: new address, healthy again. A run that still
		// holds it finds out through its own failure handling.
		back := r.Run != "" && r.Failed && r.FailReason == spec.ReasonWorkerStopped
		r.Node = n
		r.LastSeen = workflow.Now(ctx)
		r.Failed, r.FailReason, r.Misconfigured = false, "", false
		if back && workflow.GetVersion(ctx, versionStopKeepsHolder, workflow.DefaultVersion, 1) >= 1 {
			// Its worker stopped while the run held it (kept: see
			// markFailed), and is back: the run need not move off it.
			c.tellRun(ctx, r.Run, spec.Evict{NodeID: n.ID, Reason: "its worker registered again", Undrained: true})
		}
		return
	}
	c.st.Nodes = append(c.st.Nodes, NodeRecord{Node: n, LastSeen: workflow.Now(ctx), Rank: -1})
	slices.SortFunc(c.st.Nodes, func(a, b NodeRecord) int {
		switch {
		case a.Node.ID < b.Node.ID:
			return -1
		case a.Node.ID > b.Node.ID:
			return 1
		}
		return 0
	})
}

// versionRenewalRegisters: a lease renewal from a node the registry does
// not know registers it, from the registration the renewal carries
// (spec.NodeHeartbeat.Node). Before, it was ignored: after the registry
// was reset (terminated, or Temporal lost its state) the first node to
// renew started a new one by registering, and every other node's
// renewals then reached it and were dropped — those nodes stayed out of
// the pool, silently, until their workers were restarted. Asked only for
// such a renewal.
const versionRenewalRegisters = "renewal-registers"

// heartbeat renews a lease. A node marked failed that keeps renewing for a
// whole lease TTL afterwards is alive after all (blamed by mistake, or cut
// off while Temporal itself restarted) and is handed out again — unless
// it was failed for being misconfigured, which its lease does not disprove.
//
// A renewal from a node the registry does not know registers it, when it
// carries the node's registration (versionRenewalRegisters).
func (c *cluster) heartbeat(ctx workflow.Context, hb spec.NodeHeartbeat) {
	r := c.find(hb.NodeID)
	if r == nil {
		if hb.Node != nil && hb.Node.ID == hb.NodeID &&
			workflow.GetVersion(ctx, versionRenewalRegisters, workflow.DefaultVersion, 1) >= 1 {
			workflow.GetLogger(ctx).Info("lease renewal from a node the registry does not know (the registry was reset): registered",
				"node", hb.NodeID, "comm", hb.Node.CommAddr)
			c.register(ctx, *hb.Node)
		}
		return
	}
	if hb.Incarnation != "" && r.Node.Incarnation != "" && hb.Incarnation != r.Node.Incarnation &&
		workflow.GetVersion(ctx, versionLeaseIncarnation, workflow.DefaultVersion, 1) >= 1 {
		// Not the registered process: a second worker with the node's ID
		// (it stops once a chunk shows it). Its renewals would keep a
		// dead registered one alive.
		return
	}
	r.LastSeen = workflow.Now(ctx)
	if r.Failed && !r.Misconfigured && r.LastSeen.Sub(r.FailedAt) > c.st.LeaseTTL {
		workflow.GetLogger(ctx).Info("failed node kept its lease; reinstated", "node", r.Node.ID, "reason", r.FailReason)
		r.Failed, r.FailReason = false, ""
	}
}

func (c *cluster) markFailed(ctx workflow.Context, mf spec.MarkFailed) {
	r := c.find(mf.NodeID)
	if r == nil {
		return
	}
	if mf.Incarnation != "" && r.Node.Incarnation != "" && mf.Incarnation != r.Node.Incarnation {
		// The worker restarted and registered again after the process the
		// failure names: the new one is healthy, and a run that held the
		// node keeps it in its rank (before, the node stayed out of the
		// pool for a lease TTL when a run blamed it late).
		workflow.GetLogger(ctx).Info("failure of an earlier worker process; the node registered again since",
			"node", mf.NodeID, "reason", mf.Reason)
		return
	}
	if mf.OtherData {
		// Fit for runs on the data set it registered: only taken from
		// the run (whose acquires pass it over).
		workflow.GetLogger(ctx).Info("node given back: it holds another data set than the run's", "node", mf.NodeID, "run", mf.RunID)
		if r.Run == mf.RunID {
			r.Run, r.Rank = "", -1
		}
		return
	}
	run, was := r.Run, r.Failed
	if !r.Failed {
		// (Else the first reason stands: a stopped worker, "worker
		// stopped", is blamed by its run's peers after.)
		r.FailReason = mf.Reason
	}
	r.Failed, r.FailedAt, r.Misconfigured = true, workflow.Now(ctx), r.Misconfigured || mf.Misconfigured
	// A worker stopping on purpose (its own word) leaves its node with the
	// run that holds it: restarted, it is that run's again, not another
	// run's (versionStopKeepsHolder). The run was told (below) and moves
	// off it, or finds it back, at its next chunk boundary.
	keep := mf.Reason == spec.ReasonWorkerStopped && mf.RunID == "" && run != "" &&
		workflow.GetVersion(ctx, versionStopKeepsHolder, workflow.DefaultVersion, 1) >= 1
	if (mf.RunID == "" || r.Run == mf.RunID) && !keep {
		r.Run, r.Rank = "", -1
	}
	if mf.Reason == spec.ReasonWorkerStopped && mf.RunID == "" && !was && run != "" &&
		workflow.GetVersion(ctx, versionStopEvicts, workflow.DefaultVersion, 1) >= 1 {
		c.tellRun(ctx, run, spec.Evict{NodeID: mf.NodeID, Reason: "its worker is stopping", Stopping: true})
	}
}

// versionStopKeepsHolder: a node whose worker stops on purpose (SIGTERM:
// its own MarkFailed, "worker stopped") stays held by the run that holds
// it, failed until the worker registers again — then the run's again,
// and the run, told it was stopping, is told it is back (an Undrained
// evict: it stays on it).
// Before, the stop freed it: restarted, the node went to whichever run
// asked first, and a run waiting for its green window (or paused) found
// it gone when it resumed — and trained in the dirty hours, after a
// recovery and a wait for a free node. Asked only then.
const versionStopKeepsHolder = "stop-keeps-holder"

// versionStopEvicts: a node whose worker stops (its own MarkFailed, "worker
// stopped") while a run holds it tells that run, as a drain does
// (spec.Evict, Stopping): an external job's world then stops after its
// next checkpoint upload — within the worker's stop grace, when the job
// checkpoints often enough — and relaunches without the node, instead of
// crashing once the worker's grace is over. (A built-in run's chunk
// ends early at the node's own vote.) Asked only then.
const versionStopEvicts = "stop-evicts"

// tellRun signals run that a node it holds is to be left (or kept: ev).
func (c *cluster) tellRun(ctx workflow.Context, run string, ev spec.Evict) {
	log := workflow.GetLogger(ctx)
	f := workflow.SignalExternalWorkflow(ctx, run, "", spec.SignalEvict, ev)
	workflow.Go(ctx, func(ctx workflow.Context) {
		// A run that has just ended has nothing to move off.
		if err := f.Get(ctx, nil); err != nil {
			log.Warn("could not tell the run that holds a node to leave it", "run", run, "node", ev.NodeID, "error", err)
		}
	})
}

// versionDrainEvicts: draining a node a run holds tells the run
// (spec.SignalEvict). Asked only then, so that histories in which a held
// node was drained without it replay.
const versionDrainEvicts = "drain-evicts"

// drain takes a node out of the pool or puts it back (spec.Drain). A run
// that holds a node being drained is told, so that it can move off it, and
// told again if the node is put back while it still holds it.
func (c *cluster) drain(ctx workflow.Context, d spec.Drain) {
	r := c.find(d.NodeID)
	if r == nil {
		return
	}
	was := r.Drained
	r.Drained, r.DrainReason = d.Drained, ""
	if d.Drained {
		r.DrainReason = d.Reason
	}
	log := workflow.GetLogger(ctx)
	log.Info("node drained or put back", "node", d.NodeID, "drained", d.Drained, "reason", d.Reason)
	if d.Drained == was || r.Run == "" || workflow.GetVersion(ctx, versionDrainEvicts, workflow.DefaultVersion, 1) < 1 {
		return
	}
	c.tellRun(ctx, r.Run, spec.Evict{NodeID: d.NodeID, Reason: r.DrainReason, Undrained: !d.Drained})
}

// forget removes a node from the registry (a decommissioned host, a
// mistyped --id): not one a run holds, nor one whose worker still renews
// its lease (it would only register again). A forgotten node's worker that
// starts again registers anew.
func (c *cluster) forget(ctx workflow.Context, f spec.ForgetNode) error {
	r := c.find(f.NodeID)
	now := workflow.Now(ctx)
	switch {
	case r == nil:
		return fmt.Errorf("node %s is not registered", f.NodeID)
	case r.Run != "":
		return fmt.Errorf("node %s is held by %s at rank %d: cancel the run, or drain the node and wait for the run to move off it", f.NodeID, r.Run, r.Rank)
	case now.Sub(r.LastSeen) <= c.st.LeaseTTL && !(r.Failed && r.FailReason == spec.ReasonWorkerStopped &&
		workflow.GetVersion(ctx, versionForgetStopped, workflow.DefaultVersion, 1) >= 1):
		return fmt.Errorf("node %s's worker renewed its lease %v ago: stop it first (a live worker registers again)", f.NodeID, now.Sub(r.LastSeen).Round(time.Second))
	}
	last := r.LastSeen // (r points into the slice)
	c.st.Nodes = slices.DeleteFunc(c.st.Nodes, func(n NodeRecord) bool { return n.Node.ID == f.NodeID })
	workflow.GetLogger(ctx).Info("node forgotten", "node", f.NodeID, "last_seen", last)
	return nil
}

// versionForgetStopped: a node whose worker said it stopped (its own
// MarkFailed, "worker stopped") is forgotten at once, its lease fresh or
// not; before, forget refused it for a lease TTL, "stop it first". Asked
// only for such a node within its lease.
const versionForgetStopped = "forget-stopped"

// withdraw ends the acquires of runID waiting now, taking nothing (a
// signal from a run paused or rescaled while it waits for its first
// nodes: it asks again once it knows what for). One that comes later is
// not touched: the run re-sends until its acquire has ended.
func (c *cluster) withdraw(ctx workflow.Context, runID string) {
	n := 0
	for _, w := range c.queue {
		if w.req.RunID == runID && !w.withdrawn {
			w.withdrawn = true
			n++
		}
	}
	workflow.GetLogger(ctx).Info("acquire withdrawn", "run", runID, "waiting", n)
}

func (c *cluster) release(ctx workflow.Context, runID string) {
	if c.waiting[runID] > 0 {
		c.ended[runID] = true // a release comes only from a run that ends
	}
	for i := range c.st.Nodes {
		if c.st.Nodes[i].Run == runID {
			c.st.Nodes[i].Run, c.st.Nodes[i].Rank = "", -1
		}
	}
	if c.heldFor(workflow.Now(ctx), runID) {
		c.unhold(ctx, runID)
	}
}

// alive: a node runs may have (or keep when they re-acquire): healthy,
// renewing its lease and not drained.
func (c *cluster) alive(now time.Time, r *NodeRecord) bool {
	return !r.Failed && !r.Drained && now.Sub(r.LastSeen) <= c.st.LeaseTTL
}

func validateAcquire(req spec.AcquireRequest) error {
	if req.RunID == "" {
		return errors.New("acquire: run_id is required")
	}
	if req.Count < 1 {
		return fmt.Errorf("acquire: count must be positive, got %d", req.Count)
	}
	for i, mf := range req.Failed {
		if mf.NodeID == "" || mf.RunID != req.RunID {
			return fmt.Errorf("acquire: failed[%d] names node %q of run %q: want a node of run %q", i, mf.NodeID, mf.RunID, req.RunID)
		}
	}
	return nil
}

// waitSummary names an acquire's wait in the Web UI (the timer bounding
// it): "run/x waits for 3 free node(s), at least 2".
func waitSummary(req spec.AcquireRequest) string {
	w := fmt.Sprintf("%s waits for %d free node(s)", req.RunID, req.Count)
	if req.MinCount > 0 && req.MinCount < req.Count {
		w += fmt.Sprintf(", at least %d", req.MinCount)
	}
	return w
}

// acquire records req.Failed, then makes the run hold req.Count live
// nodes: nodes it already holds keep their ranks (with req.RecheckHeld,
// only those that did not register another data set than
// req.DataSHA256 since), holes are filled from the free pool (by node ID
// order — those that registered req.PreferDataSHA256 first, or with
// req.SameData those that registered the most common data set; before
// these, the nodes held for the run, and after all, those in req.Avoid;
// free nodes that registered another data set than req.DataSHA256 are
// left aside); holds for the run it did not use end with it. It waits up
// to req.Wait for enough live nodes — unless req.MinCount allows fewer:
// then it answers at once with every live node it can give (at least
// MinCount), the healthy held ones first.
func (c *cluster) acquire(ctx workflow.Context, req spec.AcquireRequest) ([]spec.Node, error) {
	for _, mf := range req.Failed {
		c.markFailed(ctx, mf)
	}
	c.waiting[req.RunID]++
	defer func() {
		if c.waiting[req.RunID]--; c.waiting[req.RunID] == 0 {
			delete(c.waiting, req.RunID)
			delete(c.ended, req.RunID)
		}
	}()
	if _, ok := c.allocate(workflow.Now(ctx), req, false, false); !ok {
		c.sweep(ctx, req.RunID)
	}
	// (Holds for the run are made while its chunk trains, before this.)
	heldFirst := c.heldFor(workflow.Now(ctx), req.RunID) &&
		workflow.GetVersion(ctx, versionHeldFirst, workflow.DefaultVersion, 1) >= 1
	var out []spec.Node
	var ok, done bool
	var w *waiter // (one that waits)
	if req.Wait <= 0 {
		// Now or never. (AwaitWithTimeout with no time would not even
		// look: its timer fires before the first check.)
		out, ok = c.tryAcquire(workflow.Now(ctx), req, heldFirst)
		done = ok
	} else {
		w = &waiter{req: req, heldFirst: heldFirst, since: workflow.Now(ctx)}
		if len(c.queue) > 0 && !c.fifo {
			c.fifo = workflow.GetVersion(ctx, versionFIFO, workflow.DefaultVersion, 1) >= 1
		}
		if len(c.queue) > 0 && !c.reserve {
			c.reserve = workflow.GetVersion(ctx, versionReserveStarved, workflow.DefaultVersion, 1) >= 1
		}
		c.queue = append(c.queue, w)
		defer func() { c.queue = slices.DeleteFunc(c.queue, func(x *waiter) bool { return x == w }) }()
		cond := func() bool {
			if c.ended[req.RunID] || w.withdrawn {
				return true
			}
			now := workflow.Now(ctx)
			if c.fifo && c.olderServable(now, w) || c.reserve && c.olderStarved(now, w) {
				return c.closing
			}
			out, done = c.tryAcquire(now, req, heldFirst)
			return done || c.closing
		}
		var err error
		if req.Wait > resweepEvery && workflow.GetVersion(ctx, versionResweep, workflow.DefaultVersion, 1) >= 1 {
			// Waiting long: ask again, now and then, which holders (and
			// whether this run itself) have ended without a word.
			end := workflow.Now(ctx).Add(req.Wait)
			for {
				ok, err = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: min(resweepEvery, end.Sub(workflow.Now(ctx))),
					TimerOptions: workflow.TimerOptions{Summary: waitSummary(req) + "; then see which holders ended"}}, cond)
				if err != nil || ok || !workflow.Now(ctx).Before(end) {
					break
				}
				c.sweepFor(ctx, req.RunID, true)
				if !workflow.Now(ctx).Before(end) { // (the sweep took the rest: look once more)
					ok = cond()
					break
				}
			}
		} else {
			ok, err = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: req.Wait, TimerOptions: workflow.TimerOptions{Summary: waitSummary(req)}}, cond)
		}
		if err != nil {
			if temporal.IsCanceledError(err) && c.cancelRollsOver(ctx) {
				return nil, rollover(req)
			}
			return nil, err
		}
	}
	if ok && !done && c.closing && !c.ended[req.RunID] {
		return nil, rollover(req)
	}
	if w != nil && w.withdrawn && !done && !c.ended[req.RunID] {
		return nil, temporal.NewApplicationError(fmt.Sprintf("acquire %d nodes for %s: withdrawn by the run", req.Count, req.RunID),
			spec.ErrTypeAcquireWithdrawn)
	}
	if c.ended[req.RunID] {
		return nil, temporal.NewApplicationError(
			fmt.Sprintf("acquire %d nodes for %s: the run released its nodes while it waited (it ended)", req.Count, req.RunID),
			spec.ErrTypeNotEnoughNodes)
	}
	if !ok {
		now := workflow.Now(ctx)
		free, kept := c.freeFor(now, req)
		beside := ""
		if len(kept) > 0 {
			beside = fmt.Sprintf(" beside its own %v", kept)
		}
		return nil, temporal.NewApplicationError(
			fmt.Sprintf("acquire %d nodes for %s: only %d live free node(s)%s after waiting %s%s",
				req.Count, req.RunID, free, beside, req.Wait, c.census(now, req.RunID, req.DataSHA256)), spec.ErrTypeNotEnoughNodes)
	}
	return out, nil
}

// olderServable reports whether an acquire waiting longer than w could
// take its nodes now (versionFIFO).
func (c *cluster) olderServable(now time.Time, w *waiter) bool { return c.olderServing(now, w) != nil }

// olderServing is the oldest acquire waiting longer than w that could take
// its nodes now (nil: none).
func (c *cluster) olderServing(now time.Time, w *waiter) *waiter {
	for _, x := range c.queue {
		if x == w {
			return nil
		}
		if c.ended[x.req.RunID] || x.withdrawn || c.reserve && c.olderStarved(now, x) {
			continue // (one that leaves the nodes to a starved one holds none back)
		}
		if _, ok := c.allocate(now, x.req, false, x.heldFirst); ok {
			return x
		}
	}
	return nil
}

// waitingNow describes the acquires waiting now, oldest first, for the
// registry query: for each, the free nodes kept for it (a starved one)
// and the older one it waits behind. Reads only.
func (c *cluster) waitingNow(now time.Time) []WaitingAcquire {
	var out []WaitingAcquire
	for _, w := range c.queue {
		if c.ended[w.req.RunID] || w.withdrawn {
			continue
		}
		wa := WaitingAcquire{RunID: w.req.RunID, Count: w.req.Count, MinCount: w.req.MinCount, Since: w.since}
		if now.Sub(w.since) >= starveAfter {
			var usable int
			var free []string
			for i := range c.st.Nodes {
				r := &c.st.Nodes[i]
				if !c.usableBy(now, r, w.req) {
					continue
				}
				usable++
				if c.takeable(now, r, w.req) {
					free = append(free, r.Node.ID)
				}
			}
			if usable >= w.req.Count {
				wa.Kept = free
			}
		}
		switch {
		case c.reserve && c.olderStarving(now, w) != nil:
			wa.Behind = c.olderStarving(now, w).req.RunID
		case c.fifo && c.olderServing(now, w) != nil:
			wa.Behind = c.olderServing(now, w).req.RunID
		}
		out = append(out, wa)
	}
	return out
}

// starveAfter is how long an acquire waits, short of free nodes, before
// a new run's acquire no longer takes nodes it could use
// (versionReserveStarved).
const starveAfter = time.Minute

// olderStarved reports whether w, an acquire of a run that holds no
// node, must leave the free nodes to an older acquire that has waited
// starveAfter or longer and that the live nodes it could use would serve
// once freed: a run asking for many nodes is otherwise passed, one freed
// node at a time, by runs asking for few, for as long as they keep
// coming. Acquires of runs holding nodes (replacing a lost one, growing
// back) go on as before: their nodes would idle while they waited. So do
// acquires that no node the older one could use would serve, and any
// acquire while the older one could never be served.
func (c *cluster) olderStarved(now time.Time, w *waiter) bool { return c.olderStarving(now, w) != nil }

// olderStarving is the older starved acquire w leaves the free nodes to
// (see olderStarved; nil: none).
func (c *cluster) olderStarving(now time.Time, w *waiter) *waiter {
	if c.holdsAny(w.req.RunID) {
		return nil
	}
	for _, x := range c.queue {
		if x == w {
			return nil
		}
		if c.ended[x.req.RunID] || x.withdrawn || now.Sub(x.since) < starveAfter {
			continue
		}
		usable, shared := 0, false
		for i := range c.st.Nodes {
			r := &c.st.Nodes[i]
			if !c.usableBy(now, r, x.req) {
				continue
			}
			usable++
			shared = shared || c.takeable(now, r, w.req)
		}
		if shared && usable >= x.req.Count {
			return x
		}
	}
	return nil
}

// holdsAny reports whether run holds a node.
func (c *cluster) holdsAny(run string) bool {
	return slices.ContainsFunc(c.st.Nodes, func(r NodeRecord) bool { return r.Run == run })
}

// usableBy: r is a node an acquire of req could have once whoever holds
// it lets it go (it suits req and is not one req leaves).
func (c *cluster) usableBy(now time.Time, r *NodeRecord, req spec.AcquireRequest) bool {
	return c.suits(now, r, req) && !slices.Contains(req.Leave, r.Node.ID)
}

// freeFor counts the live free nodes an acquire of req's run could take
// now (on its data set, not among those it leaves), and names the live
// ones it holds.
func (c *cluster) freeFor(now time.Time, req spec.AcquireRequest) (free int, kept []string) {
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		switch {
		case !c.alive(now, r) || slices.Contains(req.Leave, r.Node.ID):
		case c.takeable(now, r, req):
			free++
		case r.Run == req.RunID:
			kept = append(kept, r.Node.ID)
		}
	}
	return free, kept
}

// validateHold refuses a hold without a run, a count or a time.
func validateHold(req spec.AcquireRequest) error {
	if req.RunID == "" || req.Count < 1 || req.Hold <= 0 {
		return fmt.Errorf("hold-free needs a run, a count and a hold time; got %q, %d, %v", req.RunID, req.Count, req.Hold)
	}
	return nil
}

// holdFree holds up to req.Count live free nodes the run could take for
// it until req.Hold from now, in the order an acquire would take them
// (those already held for it first), and says how many it held.
func (c *cluster) holdFree(ctx workflow.Context, req spec.AcquireRequest) (int, error) {
	now := workflow.Now(ctx)
	var free []*NodeRecord
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		if c.takeable(now, r, req) && !slices.Contains(req.Leave, r.Node.ID) {
			free = append(free, r)
		}
	}
	slices.SortStableFunc(free, func(a, b *NodeRecord) int { return holdOrder(a, req.RunID) - holdOrder(b, req.RunID) })
	free = free[:min(len(free), req.Count)]
	for _, r := range free {
		r.HeldFor, r.HeldUntil = req.RunID, now.Add(req.Hold)
	}
	return len(free), nil
}

func holdOrder(r *NodeRecord, run string) int {
	if r.HeldFor == run {
		return 0
	}
	return 1
}

// census says where the registered nodes are that self could not have:
// " (5 registered: 3 busy with run/a run/b, 1 drained, 1 silent)".
func (c *cluster) census(now time.Time, self, data string) string {
	var busy, drained, failed, silent, other, held int
	var runs, heldFor []string
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		switch {
		case r.Drained:
			drained++
		case r.Failed:
			failed++
		case now.Sub(r.LastSeen) > c.st.LeaseTTL:
			silent++
		case r.Run != "" && r.Run != self:
			busy++
			if !slices.Contains(runs, r.Run) {
				runs = append(runs, r.Run)
			}
		case r.Run == "" && !holds(r, data):
			other++
		case r.Run == "" && heldForOther(now, r, self):
			held++
			if !slices.Contains(heldFor, r.HeldFor) {
				heldFor = append(heldFor, r.HeldFor)
			}
		}
	}
	var parts []string
	if busy > 0 {
		parts = append(parts, fmt.Sprintf("%d busy with %s", busy, strings.Join(runs, " ")))
	}
	if held > 0 {
		parts = append(parts, fmt.Sprintf("%d free but held for %s (ending a chunk early to take them)", held, strings.Join(heldFor, " ")))
	}
	for _, p := range []struct {
		n    int
		what string
	}{{drained, "drained"}, {failed, "failed"}, {silent, "silent"}, {other, "free with another data set"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf(" (%d registered)", len(c.st.Nodes))
	}
	return fmt.Sprintf(" (%d registered: %s)", len(c.st.Nodes), strings.Join(parts, ", "))
}

// versionSweep: an acquire that finds too few free nodes first frees the
// nodes of runs that have ended without giving them back. Asked only
// then, so that histories of acquires that waited without it replay.
const versionSweep = "sweep-ended-runs"

// sweep frees the live nodes held by runs other than self that have ended
// without releasing them — a terminated run runs no more code. It asks
// the server (activity EndedRuns); when that fails the nodes stay held, as
// `cann-train nodes` shows (orphaned) and `cann-train nodes release` undoes.
func (c *cluster) sweep(ctx workflow.Context, self string) { c.sweepFor(ctx, self, false) }

// versionResweep: an acquire that waits longer than resweepEvery sweeps
// again every resweepEvery — the holders, and its own run: nodes a run
// terminated meanwhile held are freed for it (before, only the sweep at
// its start did, and it waited out its node_wait beside them), and an
// acquire of a run terminated while it waited ends, taking none (before,
// it could take freed nodes for a run that no longer ran).
const versionResweep = "resweep-waiting"

// resweepEvery is how often a waiting acquire sweeps again.
const resweepEvery = 30 * time.Second

// sweepFor is sweep; with withSelf it asks about self too, and ends its
// acquires and frees its nodes if it has ended.
func (c *cluster) sweepFor(ctx workflow.Context, self string, withSelf bool) {
	now := workflow.Now(ctx)
	var holders []string
	if withSelf {
		holders = append(holders, self)
	}
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		if r.Run != "" && r.Run != self && c.alive(now, r) && !slices.Contains(holders, r.Run) {
			holders = append(holders, r.Run)
		}
	}
	if len(holders) == 0 || workflow.GetVersion(ctx, versionSweep, workflow.DefaultVersion, 1) < 1 {
		return
	}
	log := workflow.GetLogger(ctx)
	var ended []spec.EndedRun
	if err := workflow.ExecuteActivity(sweepOptions(ctx), spec.ActivityEndedRuns, holders).Get(ctx, &ended); err != nil {
		log.Warn("could not ask which runs holding nodes have ended", "runs", holders, "error", err)
		return
	}
	for _, e := range ended {
		if withSelf && e.RunID == self {
			log.Info("a run waiting for nodes has ended without a word: its acquire ends", "run", self, "how", e.How)
			c.release(ctx, self) // (its waiting acquires end: ended)
			continue
		}
		n := 0
		for i := range c.st.Nodes {
			if c.st.Nodes[i].Run == e.RunID {
				n++
			}
		}
		// Still held: a release may have landed while the activity ran.
		if n > 0 && c.waiting[e.RunID] == 0 {
			log.Info("freeing the nodes of a run that ended without releasing them", "run", e.RunID, "how", e.How, "nodes", n)
			c.release(ctx, e.RunID)
		}
	}
}

// holds says whether node r may hold a run's data set sum: it is not
// known (the run's, or the node's) or it is the node's.
func holds(r *NodeRecord, sum string) bool {
	return sum == "" || r.Node.DataSHA256 == "" || r.Node.DataSHA256 == sum
}

// commonData is the data set most of the nodes registered ("" when none
// did); of several as common, the one the first of them in ID order holds.
func commonData(nodes []*NodeRecord) string {
	count := map[string]int{}
	most := 0
	for _, r := range nodes {
		if sum := r.Node.DataSHA256; sum != "" {
			count[sum]++
			most = max(most, count[sum])
		}
	}
	for _, r := range nodes {
		if sum := r.Node.DataSHA256; sum != "" && count[sum] == most {
			return sum
		}
	}
	return ""
}

// dataOrder ranks node r for a run that prefers data set sum: 0 it
// registered it, 1 it registered none, 2 another.
func dataOrder(r *NodeRecord, sum string) int {
	switch r.Node.DataSHA256 {
	case sum:
		return 0
	case "":
		return 1
	}
	return 2
}

// tryAcquire allocates if it can; it changes nothing when it cannot.
func (c *cluster) tryAcquire(now time.Time, req spec.AcquireRequest, heldFirst bool) ([]spec.Node, bool) {
	return c.allocate(now, req, true, heldFirst)
}

// versionHeldFirst: an acquire by a run that free nodes are held for
// (spec.UpdateHoldFree) fills its holes with those first — after any it
// does not avoid, before the data-set order — and, once it allocates,
// gives back the holds it did not use; a run that releases its nodes
// gives back its holds too. Before, the acquire could take another free
// node and leave the held one barred to other runs until its hold ran
// out. Asked only when a node is held for the run.
const versionHeldFirst = "held-first"

// heldFor says whether a free node is held for run now.
func (c *cluster) heldFor(now time.Time, run string) bool {
	return slices.ContainsFunc(c.st.Nodes, func(r NodeRecord) bool {
		return r.HeldFor == run && now.Before(r.HeldUntil)
	})
}

// unhold gives back every hold for run (versionHeldFirst).
func (c *cluster) unhold(ctx workflow.Context, run string) {
	if workflow.GetVersion(ctx, versionHeldFirst, workflow.DefaultVersion, 1) >= 1 {
		c.dropHolds(run)
	}
}

// dropHolds clears every hold for run.
func (c *cluster) dropHolds(run string) {
	for i := range c.st.Nodes {
		if r := &c.st.Nodes[i]; r.HeldFor == run {
			r.HeldFor, r.HeldUntil = "", time.Time{}
		}
	}
}

// allocate says whether req can be met now and, with commit, allocates;
// heldFirst: versionHeldFirst.
func (c *cluster) allocate(now time.Time, req spec.AcquireRequest, commit, heldFirst bool) ([]spec.Node, bool) {
	held := make([]*NodeRecord, req.Count)
	var free []*NodeRecord
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		switch {
		case slices.Contains(req.Leave, r.Node.ID):
			// Given back (freed below on commit), not taken again.
		case r.Run == req.RunID && c.alive(now, r) && r.Rank >= 0 && r.Rank < req.Count && held[r.Rank] == nil &&
			(!req.RecheckHeld || holds(r, req.DataSHA256)):
			held[r.Rank] = r
		case c.takeable(now, r, req):
			free = append(free, r)
		}
	}
	prefer := req.PreferDataSHA256
	if prefer == "" && req.SameData {
		prefer = commonData(free)
	}
	if prefer != "" {
		slices.SortStableFunc(free, func(a, b *NodeRecord) int {
			return dataOrder(a, prefer) - dataOrder(b, prefer)
		})
	}
	if heldFirst {
		slices.SortStableFunc(free, func(a, b *NodeRecord) int { return holdOrder(a, req.RunID) - holdOrder(b, req.RunID) })
	}
	if len(req.Avoid) > 0 {
		avoided := func(r *NodeRecord) int {
			if slices.Contains(req.Avoid, r.Node.ID) {
				return 1
			}
			return 0
		}
		slices.SortStableFunc(free, func(a, b *NodeRecord) int { return avoided(a) - avoided(b) })
	}
	need := 0
	for _, h := range held {
		if h == nil {
			need++
		}
	}
	if need > len(free) {
		if req.MinCount < 1 || req.MinCount >= req.Count {
			return nil, false
		}
		// Shrink: the healthy held nodes in rank order, then every free one.
		var keep []*NodeRecord
		for _, h := range held {
			if h != nil {
				keep = append(keep, h)
			}
		}
		keep = append(keep, free...)
		if len(keep) < req.MinCount {
			return nil, false
		}
		held = keep
	}
	if !commit {
		return nil, true
	}
	// Commit: drop stale holdings, fill holes.
	for i := range c.st.Nodes {
		r := &c.st.Nodes[i]
		if r.Run == req.RunID && (r.Rank < 0 || r.Rank >= len(held) || held[r.Rank] != r) {
			r.Run, r.Rank = "", -1
		}
	}
	out := make([]spec.Node, len(held))
	for rank := range held {
		if held[rank] == nil {
			held[rank], free = free[0], free[1:]
		}
		held[rank].Run, held[rank].Rank = req.RunID, rank
		held[rank].HeldFor, held[rank].HeldUntil = "", time.Time{}
		out[rank] = held[rank].Node
	}
	if heldFirst {
		c.dropHolds(req.RunID) // (those it did not take)
	}
	return out, true
}
