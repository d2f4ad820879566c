package spec

import (
	"encoding/json"
	"testing"
)

func TestHostShares(t *testing.T) {
	m := Membership{Nodes: []Node{{Host: "a"}, {Host: "b"}, {Host: "a"}, {Host: "a"}}}
	for _, tc := range []struct{ rank, want int }{{0, 3}, {1, 1}, {2, 3}, {3, 3}, {7, 1}, {-1, 1}} {
		if got := m.HostShares(tc.rank); got != tc.want {
			t.Errorf("rank %d: %d shares, want %d", tc.rank, got, tc.want)
		}
	}
}

func TestNodeChunkProtocol(t *testing.T) {
	for _, tc := range []struct {
		n    Node
		want int
	}{
		{Node{}, 0},                 // a build before data sets were compared
		{Node{DataSHA256: "ab"}, 1}, // a build that registered its data set compared them
		{Node{Protocol: 1}, 1},      // a build that says so (with or without data)
		{Node{Protocol: 2, DataSHA256: "ab"}, 2},
	} {
		if got := tc.n.ChunkProtocol(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestMembershipSpeaks: a run votes on ending chunks early, and asks an
// external world for checkpoints, only when every node speaks the
// protocol (an empty membership speaks none).
func TestMembershipSpeaks(t *testing.T) {
	m := func(ps ...int) Membership {
		var out Membership
		for _, p := range ps {
			out.Nodes = append(out.Nodes, Node{Protocol: p})
		}
		return out
	}
	for _, tc := range []struct {
		m                  Membership
		endsEarly, request bool
	}{
		{m(), false, false},
		{m(2, 2), true, false},
		{m(3, 2), true, false},
		{m(3, 3), true, true},
		{m(3, 1), false, false},
	} {
		if got := tc.m.EndsEarly(); got != tc.endsEarly {
			t.Errorf("%+v: EndsEarly %v, want %v", tc.m.Nodes, got, tc.endsEarly)
		}
		if got := tc.m.TakesCheckpointRequests(); got != tc.request {
			t.Errorf("%+v: TakesCheckpointRequests %v, want %v", tc.m.Nodes, got, tc.request)
		}
	}
}

// TestChunkProgressLeavesOutWhatIsNotMeasured: a heartbeat's details (the
// Web UI's pending activity) carry no loss, throughput or comm share
// before one is measured, and carry them once they are.
func TestChunkProgressLeavesOutWhatIsNotMeasured(t *testing.T) {
	for _, tc := range []struct {
		p    ChunkProgress
		want string
	}{
		{ChunkProgress{Step: 2700, To: 2800, LastCheckpoint: 2600}, `{"step":2700,"to":2800,"last_checkpoint":2600}`},
		{ChunkProgress{Step: 2750, To: 2800, Loss: 0.25, SamplesPerSec: 1200, CommShare: 0.5, LastCheckpoint: 2600},
			`{"step":2750,"to":2800,"loss":0.25,"samples_per_sec":1200,"comm_share":0.5,"last_checkpoint":2600}`},
	} {
		b, err := json.Marshal(tc.p)
		if err != nil || string(b) != tc.want {
			t.Errorf("json %s (%v), want %s", b, err, tc.want)
		}
		var back ChunkProgress
		if err := json.Unmarshal(b, &back); err != nil || back != tc.p {
			t.Errorf("round trip %+v (%v), want %+v", back, err, tc.p)
		}
	}
}
