package workers

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// Register puts the workflows and control activities on a registry; the
// control worker and the replay tests share it.
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
	r.RegisterWorkflowWithOptions(workflows.Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
}

// RunControl serves the control task queue until ctx ends.
func RunControl(ctx context.Context, c client.Client, namespace string, log *zap.Logger) error {
	if err := EnsureSearchAttributes(ctx, c, namespace); err != nil {
		return err
	}
	w := worker.New(c, spec.ControlTaskQueue, worker.Options{
		// A run cancels a FreeNodes ask when its chunk ends; the ask learns
		// it from a heartbeat's reply, which the SDK otherwise sends at
		// most every 0.8 × its 20 s heartbeat timeout: meanwhile it held
		// nodes that came free for a run no longer asking (2 minutes in
		// which no other run could take them).
		MaxHeartbeatThrottleInterval: heartbeatEvery,
	})
	RegisterWorkflows(w)
	ctl := &activities.Control{Client: c}
	w.RegisterActivityWithOptions(ctl.AcquireNodes, activity.RegisterOptions{Name: spec.ActivityAcquireNodes})
	w.RegisterActivityWithOptions(ctl.EndedRuns, activity.RegisterOptions{Name: spec.ActivityEndedRuns})
	w.RegisterActivityWithOptions(ctl.FreeNodes, activity.RegisterOptions{Name: spec.ActivityFreeNodes})
	w.RegisterActivityWithOptions((&activities.Carbon{}).PlanCarbon, activity.RegisterOptions{Name: spec.ActivityPlanCarbon})
	w.RegisterActivityWithOptions(activities.Planner{}.PlanTopology, activity.RegisterOptions{Name: spec.ActivityPlanTopology})
	w.RegisterActivityWithOptions(activities.Planner{}.ResolveCheckpoint, activity.RegisterOptions{Name: spec.ActivityResolveCheckpoint})
	w.RegisterActivityWithOptions(activities.Planner{}.SearchStrategy, activity.RegisterOptions{Name: spec.ActivitySearchStrategy})
	w.RegisterActivityWithOptions(activities.Planner{}.WriteReport, activity.RegisterOptions{Name: spec.ActivityWriteReport})
	log.Info("control worker serving", zap.String("task_queue", spec.ControlTaskQueue))
	if err := w.Run(interruptOn(ctx)); err != nil {
		return fmt.Errorf("control worker: %w", err)
	}
	return nil
}

// interruptOn turns a context into the channel worker.Run stops on.
func interruptOn(ctx context.Context) <-chan any {
	ch := make(chan any, 1)
	go func() {
		<-ctx.Done()
		ch <- struct{}{}
	}()
	return ch
}
