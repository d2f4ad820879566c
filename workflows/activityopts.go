package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// Every activity's timeouts, heartbeat and retry policy, in one place.

// chunkOptions runs one node's TrainChunk on that node's own queue. It is
// never retried by the server: a failed chunk is rerun by the workflow as a
// whole group with a new generation, from the last checkpoint.
func chunkOptions(ctx workflow.Context, s spec.RunSpec, node spec.Node, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: node.TaskQueue,
		// No poller on the queue for this long means the node is gone
		// (or hangs): a node silent for its heartbeat timeout is presumed
		// dead, taking its chunk or training it.
		ScheduleToStartTimeout: toStart(s),
		StartToCloseTimeout:    6 * time.Hour,
		HeartbeatTimeout:       s.HeartbeatTimeout.D(),
		// A cancelled chunk is one whose node is presumed dead: do not wait
		// for an acknowledgement that cannot come.
		WaitForCancellation: false,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	})
}

// acquireOptions runs AcquireNodes on the control queue; it waits inside
// the Cluster's update for up to NodeWait.
func acquireOptions(ctx workflow.Context, s spec.RunSpec, count int) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: s.NodeWait.D() + time.Minute,
		// A control worker that dies while the run waits for nodes is
		// noticed this soon, not at the start-to-close timeout
		// (AcquireNodes heartbeats; no command changes with it).
		HeartbeatTimeout: acquireHeartbeat(s),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumAttempts:        3,
			NonRetryableErrorTypes: []string{spec.ErrTypeNotEnoughNodes, spec.ErrTypeAcquireWithdrawn},
		},
		Summary: "acquire " + itoa(count) + " node(s)",
	})
}

// acquireHeartbeat is AcquireNodes' heartbeat timeout: the run's
// heartbeat_timeout, at least 10 s (the control worker's heartbeats go
// through the server like any other activity's).
func acquireHeartbeat(s spec.RunSpec) time.Duration {
	return max(s.HeartbeatTimeout.D(), 10*time.Second)
}

// sweepOptions runs EndedRuns on the control queue, inside an acquire: a
// few seconds at most (a sweep that cannot run leaves the nodes held, as
// before it existed).
func sweepOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              spec.ControlTaskQueue,
		ScheduleToStartTimeout: 10 * time.Second,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 2},
		Summary:                "which runs holding nodes have ended",
	})
}

// freeNodesOptions asks the Cluster for free nodes (FreeNodes) on the
// control queue: quick, or not at all (the run asks again later). An ask
// that waits up to wait for one heartbeats, so that it hears at once that
// the chunk it watches for has ended, and a control worker that dies
// under it is noticed within freeNodesHeartbeat.
func freeNodesOptions(ctx workflow.Context, why string, wait time.Duration) workflow.Context {
	o := workflow.ActivityOptions{
		TaskQueue:              spec.ControlTaskQueue,
		ScheduleToStartTimeout: 10 * time.Second,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 2},
		Summary:                "free nodes? " + why,
	}
	if wait > 0 {
		o.StartToCloseTimeout += wait
		o.HeartbeatTimeout = freeNodesHeartbeat
		o.Summary = fmt.Sprintf("free nodes? (waiting up to %v) %s", wait, why)
	}
	return workflow.WithActivityOptions(ctx, o)
}

// freeNodesHeartbeat is the heartbeat timeout of a FreeNodes ask that
// waits; it looks (and heartbeats) every few seconds.
const freeNodesHeartbeat = 20 * time.Second

// carbonOptions runs PlanCarbon on the control queue. It reads a file or a
// carbon-signal API: a few quick retries, then the run trains on without
// waiting rather than stall on an outage.
func carbonOptions(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second,
			MaximumAttempts: 3,
		},
		Summary: summary,
	})
}

// externalOptions runs one node's processes of an external job on that
// node's queue, for as long as the script runs. Like a chunk it is never
// retried by the server: the run relaunches the whole world.
func externalOptions(ctx workflow.Context, s spec.RunSpec, node spec.Node, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              node.TaskQueue,
		ScheduleToStartTimeout: toStart(s),
		StartToCloseTimeout:    30 * 24 * time.Hour,
		HeartbeatTimeout:       s.HeartbeatTimeout.D(),
		WaitForCancellation:    false,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	})
}

// portOptions asks the first node of a world for a free rendezvous port.
// A node that does not take the call within the heartbeat timeout (30 s
// at most) is presumed dead, as one silent that long in a chunk is (the
// failure is blamed like a chunk's); a live worker takes it in
// milliseconds.
func portOptions(ctx workflow.Context, s spec.RunSpec, node spec.Node) workflow.Context {
	return nodeCallOptions(ctx, node, toStart(s), 30*time.Second, "reserve a rendezvous port on "+node.ID)
}

// meterOptions reads a node's host energy meter. No retry: a stretch
// without every node's reading is modelled, and a node that does not
// answer soon is failing the world anyway.
func meterOptions(ctx workflow.Context, node spec.Node) workflow.Context {
	return nodeCallOptions(ctx, node, 5*time.Second, 10*time.Second, "read the energy meter on "+node.ID)
}

// checkOptions asks a node that finished its chunk whether the pending
// ranks' nodes are alive: its worker polls, and the probes take under a
// second. No retry: the next check is the retry.
func checkOptions(ctx workflow.Context, node spec.Node, ranks []int) workflow.Context {
	return nodeCallOptions(ctx, node, 2*time.Second, 5*time.Second, fmt.Sprintf("ask %s whether rank(s) %v are alive", node.ID, ranks))
}

// toStart is how long a node's queue may hold its task unpolled before
// the node is presumed gone: its heartbeat timeout, at most 30 s (a worker
// cut off from the server is found as fast as one silent in a chunk).
func toStart(s spec.RunSpec) time.Duration { return min(s.HeartbeatTimeout.D(), 30*time.Second) }

// nodeCallOptions runs a short call on a node's own queue, never retried.
func nodeCallOptions(ctx workflow.Context, node spec.Node, startWithin, toClose time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              node.TaskQueue,
		ScheduleToStartTimeout: startWithin,
		StartToCloseTimeout:    toClose,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	})
}
