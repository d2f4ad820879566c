package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// temporalLost is err as the workflow should hear it when ctx was
// cancelled by the SDK because this node's heartbeats did not reach
// Temporal: the SDK retries a heartbeat for about a second (the worker's
// heartbeat throttle), then cancels the activity with the RPC's error as
// the context's cause. A short stall of the server (a pause, a loaded
// host) thus stops a chunk on a live node; said as "context canceled" it
// read as a node's failure and spent a restart. The error is
// TemporalUnreachable, naming the node and the RPC's error, with err as
// its cause, and at (when known) as its details: how far the node got.
// Any other err — nil, or a context cancelled otherwise (a
// cancel the workflow asked for, the activity paused, reset or gone on
// the server, the worker shutting down, the activity's own deadline) — is
// returned as it is.
func temporalLost(ctx context.Context, node string, at *spec.ChunkProgress, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	var canceled *temporal.CanceledError
	var notFound *serviceerror.NotFound
	var nsInactive *serviceerror.NamespaceNotActive
	var nsNotFound *serviceerror.NamespaceNotFound
	switch {
	case cause == nil, errors.Is(cause, context.Canceled), errors.As(cause, &canceled),
		errors.As(cause, &notFound), errors.As(cause, &nsInactive), errors.As(cause, &nsNotFound),
		errors.Is(cause, activity.ErrActivityPaused), errors.Is(cause, activity.ErrActivityReset):
		return err
	case errors.Is(cause, context.DeadlineExceeded):
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return err // its own start-to-close timeout
		}
	}
	msg := fmt.Sprintf("node %s could not reach Temporal to heartbeat (%v), so its activity was stopped; the node is alive", node, cause)
	o := temporal.ApplicationErrorOptions{Cause: err}
	if at != nil {
		o.Details = []any{*at}
	}
	return temporal.NewApplicationErrorWithOptions(msg, spec.ErrTypeTemporalUnreachable, o)
}
