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
	if err := printNodes(&b, reg, rows, now); err != nil {
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

// TestNodeRowsSay: what a row says of a node whose worker stopped while a
// run held it (it goes back to that run), of a failed node whose worker is
// gone too (restart it), of a drained node a run still holds (it moves off
// once it can), and of a free node kept for a run that has waited long.
func TestNodeRowsSay(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 40, 0, 0, time.UTC)
	since := now.Add(-5 * time.Minute)
	tests := []struct {
		name    string
		rec     workflows.NodeRecord
		waiting []workflows.WaitingAcquire
		state   string
		reason  string
		kept    string
	}{
		{name: "stopped, held by a run",
			rec:   workflows.NodeRecord{Node: spec.Node{ID: "node-2"}, LastSeen: now.Add(-time.Minute), Failed: true, FailReason: spec.ReasonWorkerStopped, Run: "run/f", Rank: 1},
			state: "stopped", reason: "its worker stopped; run/f's again when it registers"},
		{name: "stopped, free",
			rec:   workflows.NodeRecord{Node: spec.Node{ID: "node-2"}, LastSeen: now.Add(-time.Minute), Failed: true, FailReason: spec.ReasonWorkerStopped, Rank: -1},
			state: "stopped", reason: "free again when its worker registers"},
		{name: "failed, its worker silent too",
			rec:   workflows.NodeRecord{Node: spec.Node{ID: "node-2"}, LastSeen: now.Add(-36 * time.Second), Failed: true, FailReason: "peers lost node(s) [node-2]", Rank: -1},
			state: "failed", reason: "worker silent for 36s, restart it: peers lost node(s) [node-2]"},
		{name: "failed, its worker renewing",
			rec:   workflows.NodeRecord{Node: spec.Node{ID: "node-2"}, LastSeen: now.Add(-2 * time.Second), Failed: true, FailReason: "peers lost node(s) [node-2]", Rank: -1},
			state: "failed", reason: "peers lost node(s) [node-2]"},
		{name: "draining",
			rec:   workflows.NodeRecord{Node: spec.Node{ID: "node-1"}, LastSeen: now, Drained: true, DrainReason: "NIC", Run: "run/s", Rank: 0},
			state: "draining", reason: "NIC; its run moves off it at a chunk boundary once a free node can take its rank (or it can train on without it)"},
		{name: "free, kept for a starved run",
			rec:     workflows.NodeRecord{Node: spec.Node{ID: "node-3"}, LastSeen: now, Rank: -1},
			waiting: []workflows.WaitingAcquire{{RunID: "run/d", Count: 3, Since: since, Kept: []string{"node-3"}}},
			state:   "free", reason: "kept for run/d, which has waited since 05:35:00Z for 3 node(s) (runs holding none wait behind it)", kept: "run/d"},
		{name: "free, another node kept",
			rec:     workflows.NodeRecord{Node: spec.Node{ID: "node-4"}, LastSeen: now, Rank: -1},
			waiting: []workflows.WaitingAcquire{{RunID: "run/d", Count: 3, Since: since, Kept: []string{"node-3"}}},
			state:   "free"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows := nodeRows(workflows.Registry{LeaseTTL: 20 * time.Second, Nodes: []workflows.NodeRecord{tc.rec}, Waiting: tc.waiting}, now)
			if r := rows[0]; r.State != tc.state || r.Reason != tc.reason || r.KeptFor != tc.kept {
				t.Errorf("got %s %q kept for %q\nwant %s %q kept for %q", r.State, r.Reason, r.KeptFor, tc.state, tc.reason, tc.kept)
			}
		})
	}
}

// TestWaitNote: why a run waits, from the registry — the older run it
// waits behind and the node kept for that one, the runs holding the
// nodes (a paused one with what frees them), the nodes out of the pool —
// as `nodes` prints it under its table.
func TestWaitNote(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 40, 0, 0, time.UTC)
	rec := func(id, run string) workflows.NodeRecord {
		return workflows.NodeRecord{Node: spec.Node{ID: id}, LastSeen: now, Run: run, Rank: map[bool]int{true: 0, false: -1}[run != ""]}
	}
	reg := workflows.Registry{LeaseTTL: 20 * time.Second,
		Nodes: []workflows.NodeRecord{rec("node-1", "run/f"), rec("node-2", "run/f"), rec("node-3", ""),
			{Node: spec.Node{ID: "node-4"}, LastSeen: now, Drained: true, Rank: -1}},
		Waiting: []workflows.WaitingAcquire{
			{RunID: "run/d", Count: 3, Since: now.Add(-5 * time.Minute), Kept: []string{"node-3"}},
			{RunID: "run/e2", Count: 1, Since: now.Add(-4 * time.Second), Behind: "run/d"},
		}}
	rows := nodeRows(reg, now)
	rows[0].holderPaused, rows[1].holderPaused = true, true // (markOrphans found run/f paused)
	tests := []struct{ run, want string }{
		{"run/d", "run/d waits for 3 node(s) since 05:35:00Z: node-3 free, kept for it (runs holding none wait behind it); " +
			"2 held by run/f (paused: `cann-train resume f` or `cancel f` frees them); 1 drained"},
		{"run/e2", "run/e2 waits for 1 node(s) since 05:39:56Z: behind run/d, which has waited since 05:35:00Z for 3 (node-3 free, kept for it); " +
			"2 held by run/f (paused: `cann-train resume f` or `cancel f` frees them); 1 drained"},
		{"run/x", ""},
	}
	for _, tc := range tests {
		if got := waitNote(reg, rows, tc.run); got != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.run, got, tc.want)
		}
	}
	var b bytes.Buffer
	if err := printNodes(&b, reg, rows, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 node(s), 1 free (1 of them kept for a run that has waited long)\n", "\nwaiting: " + tests[0].want + "\n", "\nwaiting: " + tests[1].want + "\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("nodes:\n%s\nwant %q", b.String(), want)
		}
	}
}

// TestDrainSaid: a drain of a node a run holds promises a move at the
// next boundary only when another node is free; with none it says the run
// keeps the node unless it can do without it.
func TestDrainSaid(t *testing.T) {
	now := time.Now()
	held := workflows.NodeRecord{Node: spec.Node{ID: "node-1"}, LastSeen: now, Run: "run/stop1", Rank: 0}
	free := workflows.NodeRecord{Node: spec.Node{ID: "node-3"}, LastSeen: now, Rank: -1}
	busy := workflows.NodeRecord{Node: spec.Node{ID: "node-2"}, LastSeen: now, Run: "run/stop1", Rank: 1}
	tests := []struct {
		name    string
		nodes   []workflows.NodeRecord
		rec     workflows.NodeRecord
		drained bool
		want    string
	}{
		{"held, a node free", []workflows.NodeRecord{held, busy, free}, held, true,
			"node-1 drained: no run gets it now; run/stop1 moves off it at its next chunk boundary (`cann-train status stop1` shows it)"},
		{"held, none free", []workflows.NodeRecord{held, busy}, held, true,
			"node-1 drained: no run gets it now; no other node is free, so run/stop1 moves off it at its next chunk boundary only if it can " +
				"train on without it (above its min_nodes), else keeps it until a free node can take its rank, asking again every minute (`cann-train status stop1` shows it)"},
		{"free", []workflows.NodeRecord{held, busy, free}, free, true, "node-3 drained: no run gets it now"},
		{"put back", []workflows.NodeRecord{held, busy, free}, free, false, "node-3 is back in the pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainSaid(workflows.Registry{LeaseTTL: 20 * time.Second, Nodes: tc.nodes}, tc.rec, tc.drained); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
