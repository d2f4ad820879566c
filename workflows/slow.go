package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// A slow node: data-parallel ranks meet at every step's allreduce, so a
// node that computes slower than its peers (a throttled CPU or device,
// a host shared with other work) sets the run's pace, and its peers'
// time shows as waiting in collectives. Each node's computation in a
// chunk is its time less the time its ranks waited (ChunkResult.Seconds
// × (1 − CommShare)); a node that took slow_node_factor times the median
// of its peers' in slow_node_chunks chunks in a row (1.5 and 3 unless the
// job says) is named in the status
// (SlowNodes), the log and the cann_train_slow_nodes gauge, so that it
// can be drained (`cann-train nodes drain`: the run moves off it at a
// boundary). With slow_node: drain the run asks the Cluster to drain it
// itself (once; the Cluster tells the run, which moves off it as from
// any drained node); with slow_node: replace it moves off it at the next
// boundary when a free node can take its rank, and gives it back
// undrained (its slowness may be this run's share of a busy host); by
// default it does neither: a replacement may share the cause, and a
// drain outlives the run.
//
// slowNodeMinSeconds: chunks whose median computation is shorter are too
// short to judge (timer and scheduling noise); they leave the streaks as
// they are.
const slowNodeMinSeconds = 0.05

// versionSlowFullChunks: a chunk its ranks ended before its planned end
// (a pause, a rescale, a drain, a green window's end, a stopping worker)
// leaves the streaks as they are. It trained a part of its steps, cut
// where a control happened to come, and its times carry its start (the
// restore, the group's forming) over fewer steps: before, such a chunk
// was judged like a full one, and one in which a slow node did not show
// slow reset its streak. Asked only for such a chunk that would be judged.
const versionSlowFullChunks = "slow-full-chunks"

// noteSlow updates the streaks of slow nodes with a chunk's results (one
// per node, in rank order) and the status's SlowNodes with those that
// reached the job's slow_node_chunks. planned is the step the chunk was to
// reach.
func (r *run) noteSlow(ctx workflow.Context, results []spec.ChunkResult, planned int64) {
	slowNodeFactor, slowNodeChunks := r.spec.SlowFactor(), r.spec.SlowChunks()
	if len(results) < 2 || results[0].To <= results[0].From || r.spec.IsExternal() {
		return // one node has no peers; a save-only chunk computes nothing; an external job's launches time its script
	}
	compute := make([]float64, len(results))
	for i, res := range results {
		compute[i] = res.Seconds * (1 - res.CommShare)
	}
	if median(slices.Clone(compute)) < slowNodeMinSeconds {
		return
	}
	if results[0].To < planned && workflow.GetVersion(ctx, versionSlowFullChunks, workflow.DefaultVersion, 1) >= 1 {
		return
	}
	var streaks []spec.SlowNode
	for i, res := range results {
		peers := median(slices.Concat(compute[:i], compute[i+1:]))
		if peers <= 0 || compute[i] < slowNodeFactor*peers {
			continue
		}
		sn := spec.SlowNode{NodeID: res.NodeID, Factor: compute[i] / peers, Chunks: 1, Since: res.From}
		if j := slices.IndexFunc(r.st.SlowStreaks, func(p spec.SlowNode) bool { return p.NodeID == res.NodeID }); j >= 0 {
			sn.Chunks, sn.Since = r.st.SlowStreaks[j].Chunks+1, r.st.SlowStreaks[j].Since
		}
		if sn.Chunks == slowNodeChunks {
			workflow.GetLogger(ctx).Warn("a node computes much slower than its peers; the run trains at its pace (cann-train nodes drain moves the run off it)",
				"node", res.NodeID, "factor", sn.Factor, "chunks", sn.Chunks, "since_step", sn.Since)
		}
		if sn.Chunks >= slowNodeChunks && r.spec.SlowNode == spec.SlowNodeDrain && !slices.Contains(r.st.SlowDrained, res.NodeID) {
			r.st.SlowDrained = append(r.st.SlowDrained, res.NodeID)
			why := fmt.Sprintf("slow: computed %.1f× its peers' time %d chunks in a row from step %d of run %s (slow_node: drain)",
				sn.Factor, sn.Chunks, sn.Since, r.st.Status.RunID)
			err := workflow.SignalExternalWorkflow(ctx, r.clusterID, "", spec.SignalDrain, spec.Drain{NodeID: res.NodeID, Drained: true, Reason: why}).Get(ctx, nil)
			if err != nil {
				workflow.GetLogger(ctx).Warn("could not drain the slow node", "node", res.NodeID, "error", err)
			}
		}
		if sn.Chunks >= slowNodeChunks && r.spec.SlowNode == spec.SlowNodeReplace {
			why := fmt.Sprintf("slow: computed %.1f× its peers' time %d chunks in a row from step %d (slow_node: replace)",
				sn.Factor, sn.Chunks, sn.Since)
			if r.leaveNode(res.NodeID, why) {
				workflow.GetLogger(ctx).Info("slow node: replaced at the next chunk boundary when a node is free", "node", res.NodeID, "reason", why)
			}
		}
		streaks = append(streaks, sn)
	}
	r.st.SlowStreaks = streaks
	r.st.Status.SlowNodes = slices.DeleteFunc(slices.Clone(streaks), func(sn spec.SlowNode) bool { return sn.Chunks < slowNodeChunks })
	r.metrics(ctx).Gauge(metricSlowNodes).Update(float64(len(r.st.Status.SlowNodes)))
}

// median of xs (reordered); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
