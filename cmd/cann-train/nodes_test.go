package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

func TestNodeRows(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rec := func(id string, seen time.Duration, failed bool, run string, rank int) workflows.NodeRecord {
		return workflows.NodeRecord{Node: spec.Node{ID: id, Host: "h", CommAddr: "127.0.0.1:1"}, LastSeen: now.Add(-seen),
			Failed: failed, FailReason: map[bool]string{true: "peers lost node(s) [" + id + "]: " + strings.Repeat("x", 80)}[failed], Run: run, Rank: rank}
	}
	reg := workflows.Registry{LeaseTTL: 20 * time.Second, Nodes: []workflows.NodeRecord{
		rec("a", time.Second, false, "", -1),
		rec("b", 2*time.Second, false, "run/x", 1),
		rec("c", time.Second, true, "", -1),
		rec("d", time.Minute, false, "", -1),
		rec("e", time.Minute, true, "", -1), // failed wins over silent
		{Node: spec.Node{ID: "f"}, LastSeen: now, Failed: true, Misconfigured: true, FailReason: "node f has no data set for mlp-mnist"},
		{Node: spec.Node{ID: "g"}, LastSeen: now.Add(-time.Minute), Failed: true, FailReason: spec.ReasonWorkerStopped},
		{Node: spec.Node{ID: "h"}, LastSeen: now, HeldFor: "run/y", HeldUntil: now.Add(time.Minute)},
		{Node: spec.Node{ID: "i"}, LastSeen: now, HeldFor: "run/y", HeldUntil: now.Add(-time.Second)}, // a hold that is over
	}}
	reg.Nodes[0].Node.DataSHA256 = "ac2983e23822bfed59982262317aea03de838c4127d171dcaaecac6db024bc14"
	rows := nodeRows(reg, now)
	want := []struct {
		state string
		rank  int
	}{{"free", -1}, {"busy", 1}, {"failed", -1}, {"silent", -1}, {"failed", -1}, {"unfit", -1}, {"stopped", -1}, {"free", -1}, {"free", -1}}
	for i, w := range want {
		if rows[i].State != w.state || rows[i].Rank != w.rank {
			t.Errorf("node %s: %s rank %d, want %s rank %d", rows[i].ID, rows[i].State, rows[i].Rank, w.state, w.rank)
		}
	}
	if rows[0].ChunkProtocol != 1 || rows[1].ChunkProtocol != 0 {
		t.Errorf("chunk protocols %d (a data set registered) and %d (nothing said), want 1 and 0", rows[0].ChunkProtocol, rows[1].ChunkProtocol)
	}
	if !strings.Contains(rows[5].Reason, "node f has no data set for mlp-mnist; out of the pool until its worker restarts") {
		t.Errorf("unfit node's reason %q", rows[5].Reason)
	}
	if rows[7].Reason != "held for run/y until 08:01:00Z (it ends a chunk early to take it)" || rows[8].Reason != "" {
		t.Errorf("held free nodes' reasons %q and %q", rows[7].Reason, rows[8].Reason)
	}
	if !strings.Contains(rows[3].Reason, "20s") {
		t.Errorf("silent node's reason %q does not name the lease TTL", rows[3].Reason)
	}
	var b bytes.Buffer
	if err := printNodes(&b, rows, now); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	if !regexp.MustCompile(`(?m)^a +free +- +- +ac2983e23822 +h `).MatchString(text) || !regexp.MustCompile(`(?m)^b +busy +run/x +1 +- +h `).MatchString(text) {
		t.Errorf("table:\n%s\nwant each node's data set (a's, none known for b)", text)
	}
	if !strings.Contains(text, "9 node(s), 3 free") || !strings.Contains(text, "stopped: free again when its worker registers") || !strings.Contains(text, "run/x") || !strings.Contains(text, "…") ||
		strings.Contains(text, strings.Repeat("x", 80)) {
		t.Errorf("table:\n%s", text)
	}
}
