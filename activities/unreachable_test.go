package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestTemporalLost: an activity whose context the SDK cancelled because a
// heartbeat's RPC kept failing (a transient error as the cause) fails as
// TemporalUnreachable, naming the node and the RPC's error, the step it
// reached in its details; any other
// cancellation — asked for by the workflow, the activity paused, reset
// or gone, the worker shutting down, its own deadline — and an error
// with the context alive stay as they are.
func TestTemporalLost(t *testing.T) {
	chunkErr := errors.New("engine: step 250: allreduce: context canceled")
	for _, tc := range []struct {
		name     string
		cause    error // nil: the context is not cancelled
		deadline bool  // the context's own deadline passed
		lost     bool
	}{
		{"alive", nil, false, false},
		{"heartbeat RPC timed out", serviceerror.NewDeadlineExceeded("context deadline exceeded"), false, true},
		{"server unavailable", serviceerror.NewUnavailable("connection refused"), false, true},
		{"gRPC context deadline", context.DeadlineExceeded, false, true},
		{"cancel asked for", temporal.NewCanceledError(), false, false},
		{"worker shutting down", context.Canceled, false, false},
		{"activity gone on the server", serviceerror.NewNotFound("invalid activityID or activity already timed out"), false, false},
		{"paused", activity.ErrActivityPaused, false, false},
		{"reset", activity.ErrActivityReset, false, false},
		{"its own deadline", context.DeadlineExceeded, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Second))
				defer cancel()
			} else if tc.cause != nil {
				var cancel context.CancelCauseFunc
				ctx, cancel = context.WithCancelCause(ctx)
				cancel(tc.cause)
			}
			got := temporalLost(ctx, "node-2", &spec.ChunkProgress{Step: 250, To: 400}, chunkErr)
			var ae *temporal.ApplicationError
			isLost := errors.As(got, &ae) && ae.Type() == spec.ErrTypeTemporalUnreachable
			if isLost != tc.lost {
				t.Fatalf("temporalLost = %v; want TemporalUnreachable: %v", got, tc.lost)
			}
			if !tc.lost {
				if got != chunkErr {
					t.Errorf("temporalLost = %v, want the error unchanged", got)
				}
				return
			}
			if msg := ae.Message(); msg != "node node-2 could not reach Temporal to heartbeat ("+tc.cause.Error()+"), so its activity was stopped; the node is alive" {
				t.Errorf("message %q", msg)
			}
			if !errors.Is(got, chunkErr) {
				t.Error("the chunk's own error is not its cause")
			}
			var at spec.ChunkProgress
			if !ae.HasDetails() || ae.Details(&at) != nil || at.Step != 250 {
				t.Errorf("details %+v: want the step the node reached, 250", at)
			}
		})
	}
	if got := temporalLost(context.Background(), "node-2", nil, nil); got != nil {
		t.Errorf("temporalLost(nil) = %v", got)
	}
}
