package workers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestUnreachable: DialWaiting waits out a frontend that does not answer,
// not one that answers no.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unavailable", fmt.Errorf("dial: failed reaching server: %w", serviceerror.NewUnavailable("connection refused")), true},
		{"deadline", fmt.Errorf("dial: %w", serviceerror.NewDeadlineExceeded("no answer")), true},
		{"context deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), true},
		{"grpc unavailable", fmt.Errorf("dial: %w", fmt.Errorf("failed reaching server: %w", status.Error(codes.Unavailable, "down"))), true},
		{"permission denied", fmt.Errorf("dial: %w", serviceerror.NewPermissionDenied("bad key", "")), false},
		{"grpc unauthenticated", fmt.Errorf("dial: %w", status.Error(codes.Unauthenticated, "no token")), false},
		{"namespace not found", fmt.Errorf("dial: %w", serviceerror.NewNamespaceNotFound("ml")), false},
		{"other", errors.New("tls: bad certificate"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unreachable(tc.err); got != tc.want {
				t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
