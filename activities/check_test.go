package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/spec"
)

// TestCheckNodes: of the nodes asked about, only the one whose listener
// is closed is reported gone; a live one and one without an address are
// not; a rank outside the membership is a clear, non-retryable error.
func TestCheckNodes(t *testing.T) {
	listen := func() *tcp.Listener {
		l, err := tcp.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	alive, dead := listen(), listen()
	m := spec.Membership{Nodes: []spec.Node{
		{ID: "n0", CommAddr: "127.0.0.1:1"},
		{ID: "n1", CommAddr: dead.Addr()},
		{ID: "n2", CommAddr: alive.Addr()},
		{ID: "n3"},
	}}
	dead.Close()
	n := &Node{ID: "n0", Logger: zap.NewNop()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now()
	got, err := n.CheckNodes(ctx, spec.CheckNodesInput{Membership: m, Ranks: []int{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rank != 1 || got[0].NoticedAt.Before(before) {
		t.Fatalf("CheckNodes = %+v, want only rank 1 gone, noticed after %s", got, before)
	}
	if got, err := n.CheckNodes(ctx, spec.CheckNodesInput{Membership: m, Ranks: []int{2}}); err != nil || len(got) != 0 {
		t.Fatalf("CheckNodes(alive) = %+v, %v, want none gone", got, err)
	}
	_, err = n.CheckNodes(ctx, spec.CheckNodesInput{Membership: m, Ranks: []int{4}})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() || ae.Message() != "check nodes: rank 4 outside the membership of 4 node(s)" {
		t.Fatalf("CheckNodes(rank 4) err = %v, want a non-retryable error naming the rank", err)
	}
}
