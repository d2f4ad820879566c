package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/cann-train/cann-train/spec"
)

// TestSecondWorkerWithTheSameID: a second node worker started with a
// node's --id (a mistyped ID, a copy left running) registers, and from
// then on the first one's lease renewals are not taken for the node (the
// Cluster asks versionLeaseIncarnation): the registry keeps the second's
// incarnation, which alone keeps the node alive. Its Cluster history is
// the replay test's cluster_lease_incarnation.json.
func TestSecondWorkerWithTheSameID(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1")
	reg := registryRecord(ctx, t, c, "node-1")
	first := reg.Node.Incarnation
	// (Advertising the first one's address passes the start-up check that
	// refuses a second worker while the registered one answers there —
	// the case this stands for is a worker that came back after another
	// took its ID.)
	if _, err := l.Start("node-1-twin", "worker", "node", "--id", "node-1", "--address", addr,
		"--comm-listen", "127.0.0.1:0", "--comm-advertise", reg.Node.CommAddr,
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--lease-every", "1s"); err != nil {
		t.Fatal(err)
	}
	for r := registryRecord(ctx, t, c, "node-1"); r.Node.Incarnation == first; r = registryRecord(ctx, t, c, "node-1") {
		select {
		case <-ctx.Done():
			t.Fatalf("the second worker never registered: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The first worker renews its lease every few seconds: its next
	// renewal is refused, which the Cluster's history records.
	var h *historypb.History
	for h = fetchHistory(ctx, t, c, spec.DefaultClusterID); !hasVersionMarker(h, "lease-incarnation"); h = fetchHistory(ctx, t, c, spec.DefaultClusterID) {
		select {
		case <-ctx.Done():
			dumpLogs(t, l.LogDir)
			t.Fatal("the first worker's renewal never reached the Cluster after the second registered")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if r := registryRecord(ctx, t, c, "node-1"); r.Node.Incarnation == first || r.Failed {
		t.Errorf("node-1 after the first worker's renewal: incarnation %q (the first's %q), failed %v; want the second's, alive",
			r.Node.Incarnation, first, r.Failed)
	}
	recordHistory(t, h, "cluster_lease_incarnation.json")
}

// hasVersionMarker: h records a GetVersion marker for changeID.
func hasVersionMarker(h *historypb.History, changeID string) bool {
	for _, ev := range h.Events {
		if ev.GetEventType() != enumspb.EVENT_TYPE_MARKER_RECORDED {
			continue
		}
		for _, p := range ev.GetMarkerRecordedEventAttributes().GetDetails()["change-id"].GetPayloads() {
			if bytes.Contains(p.GetData(), []byte(`"`+changeID+`"`)) {
				return true
			}
		}
	}
	return false
}
