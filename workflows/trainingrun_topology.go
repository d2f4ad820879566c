package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// Topology scan: when a run gets its nodes (spec topology_scan, or
// collective: auto), every node measures every rank pair (ProbeLinks on
// the node queues, like a chunk), and PlanTopology analyses the matrix:
// host groups, α/β per level, slow links, and — with collective: auto —
// the gradient allreduce's algorithm, chosen by the collective engine's
// cost model fed the measured numbers. The plan is recorded in history and
// kept for the whole run (recoveries reuse it, so they stay bit-identical);
// a scan that fails is logged and the run goes on with the ring.

const (
	versionTopologyScan = "topology-scan"
	// versionComputeProbe: every scan times computation (for the
	// scaling efficiency), not only those of strategy: auto.
	versionComputeProbe = "compute-probe"
	// versionPlanMinNodes: strategy: auto plans min_nodes..nodes when the
	// job sets min_nodes below nodes (before: 1..nodes, so that the plan
	// could train below the job's floor), and a plan below min_nodes (a
	// job that left it at nodes) is the run's floor from then on: a
	// rescale to it is taken, and the status says so (before: the run
	// refused a rescale to the size it trained at). Asked only where
	// either differs.
	versionPlanMinNodes = "plan-min-nodes"
	// versionScanCancel: a scan one of whose ranks failed cancels the
	// others (before, it waited for every rank: a dead node's probe held
	// the run until its one-minute timeout). Asked when a rank fails.
	versionScanCancel = "scan-cancel"
	probeBudget       = time.Second
)

// algorithm is the gradient allreduce's algorithm chunks use ("" = ring).
func (r *run) algorithm(ctx workflow.Context) string {
	if workflow.GetVersion(ctx, versionTopologyScan, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ""
	}
	if r.st.Algorithm != "" {
		return r.st.Algorithm
	}
	if c := r.spec.Collective; c != "" && c != "auto" {
		return c
	}
	return ""
}

// scanTopology runs the scan once per run (and again after a rescale,
// where the world size changes).
func (r *run) scanTopology(ctx workflow.Context) {
	if workflow.GetVersion(ctx, versionTopologyScan, workflow.DefaultVersion, 1) == workflow.DefaultVersion || !r.spec.ScansTopology() {
		return
	}
	m := r.st.Membership
	if t := r.st.Status.Topology; t != nil && len(t.Hosts) == len(m.Nodes) {
		return
	}
	r.st.Epoch++
	session := fmt.Sprintf("%s/g%d/e%d/probe", r.st.Status.RunID, m.Generation, r.st.Epoch)
	sctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	futures := make([]workflow.Future, len(m.Nodes))
	for rank, node := range m.Nodes {
		in := spec.ProbeInput{RunID: r.st.Status.RunID, Membership: m, Rank: rank, Session: session, Token: r.st.Token,
			Budget: spec.Duration(probeBudget), Timeout: r.spec.HeartbeatTimeout, Compute: r.computeProbe(ctx)}
		summary := fmt.Sprintf("link scan · rank %d/%d on %s · gen %d", rank, len(m.Nodes), node.ID, m.Generation)
		futures[rank] = workflow.ExecuteActivity(probeOptions(sctx, node, summary), spec.ActivityProbeLinks, in)
	}
	results := make([]spec.ProbeResult, len(m.Nodes))
	var firstErr error
	sel := workflow.NewSelector(ctx)
	for rank, f := range futures {
		sel.AddFuture(f, func(f workflow.Future) {
			err := f.Get(ctx, &results[rank])
			if err == nil || firstErr != nil {
				return
			}
			firstErr = err
			if workflow.GetVersion(ctx, versionScanCancel, workflow.DefaultVersion, 1) >= 1 {
				// The scan is lost: the other ranks need not finish it, and
				// a dead node's part would hold it until its timeout (the
				// first chunk names the dead node in well under a second).
				cancel()
			}
		})
	}
	for range futures {
		sel.Select(ctx)
	}
	log := workflow.GetLogger(ctx)
	if firstErr != nil {
		log.Warn("topology scan failed; training with the ring", "error", firstErr)
		return
	}
	var plan spec.TopologyPlan
	in := spec.PlanTopologyInput{Results: results, GradientBytes: 4 * r.spec.GradientFloats(), Collective: r.spec.Collective, Nodes: m.Nodes}
	if k := r.spec.LocalRanks(); k > 1 {
		in.RanksPerNode = k
	}
	if err := workflow.ExecuteActivity(planTopologyOptions(ctx), spec.ActivityPlanTopology, in).Get(ctx, &plan); err != nil {
		log.Warn("topology plan failed; training with the ring", "error", err)
		return
	}
	plan.ScannedAt = workflow.Now(ctx)
	plan.Generation = m.Generation
	r.st.Status.Topology = &plan
	if r.st.Algorithm == "" || r.spec.Collective == "auto" && len(m.Nodes) != r.st.AlgorithmRanks {
		r.st.Algorithm, r.st.AlgorithmRanks = plan.Algorithm, len(m.Nodes)
	}
	log.Info("topology scanned", "hosts", plan.HostCount, "slow_links", plan.SlowLinks, "algorithm", r.st.Algorithm)
}

// probeOptions runs one node's ProbeLinks on its own queue, once.
func probeOptions(ctx workflow.Context, node spec.Node, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              node.TaskQueue,
		ScheduleToStartTimeout: 30 * time.Second,
		StartToCloseTimeout:    time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	})
}

// planTopologyOptions runs PlanTopology (pure computation) on the control
// queue.
func planTopologyOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "plan topology",
	})
}

// computeProbeBudget is what each node spends timing its computation.
const computeProbeBudget = 300 * time.Millisecond

// computeProbe asks the scan to time the nodes' computation too: the
// parallel-strategy search needs it, and the status's scaling efficiency
// (runs started before versionComputeProbe timed it for the search only).
func (r *run) computeProbe(ctx workflow.Context) *spec.ComputeProbe {
	if r.spec.IsExternal() {
		return nil // the built-in engine's computation says nothing of a script's
	}
	always := workflow.GetVersion(ctx, versionComputeProbe, workflow.DefaultVersion, 1) >= 1
	if !always && (r.spec.Strategy != spec.StrategyAuto || r.st.Status.Strategy != nil) {
		return nil
	}
	p := &spec.ComputeProbe{Hidden: r.spec.Model.Hidden, LearningRate: r.spec.LearningRate, Budget: spec.Duration(computeProbeBudget)}
	if c := r.spec.StrategyCompression(); c != nil && r.spec.Strategy == spec.StrategyAuto && r.st.Status.Strategy == nil {
		// The search prices the compressed exchange with the codecs' cost.
		p.Codecs, p.GradientValues = []string{c.Codec}, r.spec.GradientFloats()
		if c.WarmupCodec != "" {
			p.Codecs = append(p.Codecs, c.WarmupCodec)
		}
	}
	return p
}

// planStrategy runs SearchStrategy once, before the first step: the cost
// model, fed the scan's links and the nodes' measured computation, picks
// how many of the nodes to train on (1..nodes, keeping the global batch),
// and the run moves to that many. The plan is in history (the activity's
// result) and in the status; without a scan the run trains on all nodes.
func (r *run) planStrategy(ctx workflow.Context) error {
	if r.spec.Strategy != spec.StrategyAuto || r.st.Status.Strategy != nil || r.st.Status.Step > 0 {
		return nil
	}
	log := workflow.GetLogger(ctx)
	nodes := len(r.st.Membership.Nodes)
	t := r.st.Status.Topology
	if t == nil || len(t.Compute) != nodes {
		log.Warn("no topology and computation scan; training on every node")
		return nil
	}
	in := spec.SearchStrategyInput{Topology: *t, GradientBytes: 4 * r.spec.GradientFloats(), GlobalBatch: r.spec.GlobalBatch(),
		MinRanks: 1, MaxRanks: nodes, Algorithm: r.st.Algorithm, Compression: r.spec.StrategyCompression()}
	if r.spec.MinNodes > 1 && r.spec.MinNodes < nodes && workflow.GetVersion(ctx, versionPlanMinNodes, workflow.DefaultVersion, 1) >= 1 {
		in.MinRanks = r.spec.MinNodes // the job's floor bounds the plan too
	}
	k := r.spec.LocalRanks()
	if k > 1 {
		in.RanksPerNode = k
	}
	var plan spec.StrategyPlan
	opts := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "search strategy",
	})
	if err := workflow.ExecuteActivity(opts, spec.ActivitySearchStrategy, in).Get(ctx, &plan); err != nil {
		log.Warn("strategy search failed; training on every node", "error", err)
		return nil
	}
	plan.PlannedAt = workflow.Now(ctx)
	r.st.Status.Strategy = &plan
	want := plan.DataParallel / k // whole nodes of k ranks
	log.Info("strategy planned", "data_parallel", plan.DataParallel, "nodes", want, "of", nodes, "reason", plan.Reason)
	r.st.Status.MinNodes = r.minNodes(ctx)
	if want < 1 || want == nodes {
		return nil
	}
	return r.acquireNodes(ctx, spec.PhaseAcquiring, want, 0)
}

// minNodes is the fewest nodes the run goes on with (a failure without a
// spare, a drain, a rescale): the job's min_nodes, or the plan's node
// count where strategy: auto trains on fewer (a job that left min_nodes
// at nodes: it asked for no shrink below what it trains on).
func (r *run) minNodes(ctx workflow.Context) int {
	p := r.st.Status.Strategy
	if p == nil || p.DataParallel < 1 {
		return r.spec.MinNodes
	}
	planned := max(1, p.DataParallel/r.spec.LocalRanks())
	if planned >= r.spec.MinNodes || workflow.GetVersion(ctx, versionPlanMinNodes, workflow.DefaultVersion, 1) < 1 {
		return r.spec.MinNodes
	}
	return planned
}
