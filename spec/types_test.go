package spec

import "testing"

func TestHostShares(t *testing.T) {
	m := Membership{Nodes: []Node{{Host: "a"}, {Host: "b"}, {Host: "a"}, {Host: "a"}}}
	for _, tc := range []struct{ rank, want int }{{0, 3}, {1, 1}, {2, 3}, {3, 3}, {7, 1}, {-1, 1}} {
		if got := m.HostShares(tc.rank); got != tc.want {
			t.Errorf("rank %d: %d shares, want %d", tc.rank, got, tc.want)
		}
	}
}
