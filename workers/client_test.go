package workers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

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
		{"tls handshake", fmt.Errorf("dial: failed reaching server: %w", serviceerror.NewUnavailable(
			`connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unreachable(tc.err); got != tc.want {
				t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestDialWaitingRefusesTLSAtOnce: a worker dialling with TLS a frontend
// that speaks none fails at once, saying so, instead of waiting for it
// forever (gRPC calls the failed handshake Unavailable).
func TestDialWaitingRefusesTLSAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a plaintext server: an HTTP/2-less answer to anything
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			_ = conn.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = DialWaiting(ctx, ClientOptions{Address: ln.Addr().String(),
		Connection: client.Options{ConnectionOptions: client.ConnectionOptions{TLS: &tls.Config{}}}}, zap.NewNop())
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "the TLS handshake failed") {
		t.Fatalf("DialWaiting = %v (waited: %v); want the TLS handshake named at once", err, ctx.Err())
	}
}
