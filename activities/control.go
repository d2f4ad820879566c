package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
)

// Control holds the control activities' dependencies.
type Control struct {
	Client client.Client
}

// AcquireNodes asks the Cluster workflow, by Update, for the run's nodes.
// Workflows cannot send Updates, so the TrainingRun does it through here.
func (c *Control) AcquireNodes(ctx context.Context, clusterID string, req spec.AcquireRequest) ([]spec.Node, error) {
	for {
		handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   clusterID,
			UpdateName:   spec.UpdateAcquire,
			Args:         []any{req},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// No node has registered yet, so no Cluster runs: wait for one.
			activity.RecordHeartbeat(ctx, "waiting for the cluster registry "+clusterID)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no cluster registry %q (has any node worker started?): %w", clusterID, ctx.Err())
			case <-time.After(500 * time.Millisecond):
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("acquire update on %s: %w", clusterID, err)
		}
		var nodes []spec.Node
		if err := handle.Get(ctx, &nodes); err != nil {
			return nil, err
		}
		return nodes, nil
	}
}
