package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// Control holds the control activities' dependencies.
type Control struct {
	Client client.Client

	poll time.Duration // FreeNodes' look interval while it waits (0: freeNodesPoll)
}

// AcquireNodes asks the Cluster workflow, by Update, for the run's nodes.
// Workflows cannot send Updates, so the TrainingRun does it through here.
//
// The wait can be long (node_wait), so it heartbeats: a control worker
// that dies meanwhile is noticed within the heartbeat timeout, and the
// retry on another one sends the same Update ID — the attempt's run and
// activity — so it takes over the Update still waiting in the Cluster (and
// its result, if it ended meanwhile) instead of waiting beside it, while
// the run waited out the activity's whole timeout before.
func (c *Control) AcquireNodes(ctx context.Context, clusterID string, req spec.AcquireRequest) ([]spec.Node, error) {
	info := activity.GetInfo(ctx)
	updateID := fmt.Sprintf("acquire/%s/%s/%s", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID)
	if every := info.HeartbeatTimeout / 3; every > 0 {
		done := make(chan struct{})
		defer close(done)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					activity.RecordHeartbeat(ctx, "waiting for nodes")
				}
			}
		}()
	}
	deadline := time.Now().Add(req.Wait)
	for try := 0; ; try++ {
		id := updateID
		if try > 0 {
			id = fmt.Sprintf("%s/%d", updateID, try) // (a new run of the Cluster: a new Update)
		}
		handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			UpdateID:     id,
			WorkflowID:   clusterID,
			UpdateName:   spec.UpdateAcquire,
			Args:         []any{req},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// No node has registered yet, so no Cluster runs: wait for
			// one, as long as for the nodes.
			if !time.Now().Before(deadline) {
				return nil, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("no cluster registry %q after waiting %s (node_wait): no node worker has registered with it — a mistyped cluster_id, or node workers started with another --cluster-id? (`cann-train nodes --cluster-id %s` lists a registry's nodes)",
						clusterID, req.Wait, clusterID), spec.ErrTypeNotEnoughNodes, err)
			}
			activity.RecordHeartbeat(ctx, "waiting for the cluster registry "+clusterID)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no cluster registry %q (has any node worker started?): %w", clusterID, ctx.Err())
			case <-time.After(500 * time.Millisecond):
				continue
			}
		}
		var nodes []spec.Node
		if err == nil {
			err = handle.Get(ctx, &nodes)
		}
		if ae := (*temporal.ApplicationError)(nil); errors.As(err, &ae) && ae.Type() == spec.ErrTypeClusterRollover {
			// The Cluster continued as new (it ended or refused the
			// Update, taking nothing): ask its next run, for what is
			// left of the wait.
			activity.RecordHeartbeat(ctx, "the cluster registry continues as new; asking again")
			if req.Wait > 0 {
				req.Wait = max(time.Until(deadline), time.Second)
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("acquire nodes of %s: %w", clusterID, ctx.Err())
			case <-time.After(200 * time.Millisecond):
				continue
			}
		}
		if err == nil {
			return nodes, nil
		}
		if handle == nil {
			return nil, fmt.Errorf("acquire update on %s: %w", clusterID, err)
		}
		return nil, err
	}
}

// EndedRuns describes each run (a TrainingRun's workflow ID) and returns
// those that have ended, in the order given. A run the server cannot
// describe now counts as running: freeing the nodes of a live run would
// hand them to two runs at once, while leaving an ended run's nodes held
// costs only a later sweep.
func (c *Control) EndedRuns(ctx context.Context, ids []string) ([]spec.EndedRun, error) {
	var out []spec.EndedRun
	for _, id := range ids {
		how, err := RunEnded(ctx, c.Client, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			activity.GetLogger(ctx).Warn("cannot tell whether a run holding nodes has ended", "run", id, "error", err)
			continue
		}
		if how != "" {
			out = append(out, spec.EndedRun{RunID: id, How: how})
		}
	}
	return out, nil
}

// FreeNodes asks the Cluster clusterID how many live free nodes an
// acquire by req's run could take now (spec.QueryFree). With req.Wait it
// waits up to that long for one, looking every freeNodesPoll and
// heartbeating each time: the answer is the first that finds one, or 0
// once the wait is over. A query that fails ends it with its error. With
// req.Hold the nodes found are held for the run that long
// (spec.UpdateHoldFree), and the answer is how many were: another run may
// have taken them meanwhile (then it looks on). A Cluster that cannot
// hold (an earlier build) is answered as if it had.
func (c *Control) FreeNodes(ctx context.Context, clusterID string, req spec.AcquireRequest) (int, error) {
	wait, poll := req.Wait, cmp.Or(c.poll, freeNodesPoll)
	req.Wait = 0 // (the query's answer is for now)
	deadline := time.Now().Add(wait)
	for n := 0; ; n++ {
		free, err := c.freeNodes(ctx, clusterID, req)
		if err == nil && free > 0 && req.Hold > 0 {
			if ctx.Err() != nil {
				return 0, ctx.Err() // (the run asks no more: hold nothing for it)
			}
			free = c.holdFree(ctx, clusterID, req, n, free)
		}
		switch {
		case err != nil || free > 0 || wait <= 0:
			return free, err
		case !time.Now().Add(poll).Before(deadline):
			return 0, nil
		}
		activity.RecordHeartbeat(ctx, "no free node yet")
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// freeNodesPoll is how often a FreeNodes ask that waits looks again.
const freeNodesPoll = 2 * time.Second

// holdFree has the Cluster hold up to req.Count free nodes for req's run
// (the n-th look of this attempt names the Update), and returns how many
// it held; free, what the look found, where the Update fails.
func (c *Control) holdFree(ctx context.Context, clusterID string, req spec.AcquireRequest, n, free int) int {
	info := activity.GetInfo(ctx)
	handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID: fmt.Sprintf("hold/%s/%s/%s/%d/%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID,
			info.Attempt, n),
		WorkflowID:   clusterID,
		UpdateName:   spec.UpdateHoldFree,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var held int
	if err == nil {
		err = handle.Get(ctx, &held)
	}
	if err != nil {
		activity.GetLogger(ctx).Warn("could not hold the free nodes for the run; answering without", "cluster", clusterID, "error", err)
		return free
	}
	return held
}

func (c *Control) freeNodes(ctx context.Context, clusterID string, req spec.AcquireRequest) (int, error) {
	v, err := c.Client.QueryWorkflow(ctx, clusterID, "", spec.QueryFree, req)
	if err != nil {
		return 0, fmt.Errorf("ask %s for free nodes: %w", clusterID, err)
	}
	var free int
	if err := v.Get(&free); err != nil {
		return 0, fmt.Errorf("ask %s for free nodes: %w", clusterID, err)
	}
	return free, nil
}

// RunEnded says how the run id (a workflow ID; its latest execution)
// ended: its execution status in lower case ("terminated", …), "deleted"
// when the server no longer knows it, "" while it runs.
func RunEnded(ctx context.Context, c client.Client, id string) (string, error) {
	how, _, err := RunState(ctx, c, id)
	return how, err
}

// RunState is RunEnded, with a running run's phase as it last recorded
// it (its spec.SearchAttrStatus; "" when it has none, or has ended).
func RunState(ctx context.Context, c client.Client, id string) (how, phase string, err error) {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return "deleted", "", nil
	case err != nil:
		return "", "", fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if s := info.GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return ExecutionName(s), "", nil
	}
	if p, ok := info.GetSearchAttributes().GetIndexedFields()[spec.SearchAttrStatus]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &phase) // (a malformed one says nothing)
	}
	return "", phase, nil
}

// ExecutionName is a workflow execution status in lower case, as the CLI
// shows it: "running", "completed", "terminated", …
func ExecutionName(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}
