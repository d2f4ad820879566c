package spec

import (
	"math"
	"testing"
)

func TestSingleRankSamplesPerSec(t *testing.T) {
	two := &TopologyPlan{Compute: []RankCompute{{PerExampleNS: 10_000, OverheadNS: 100_000}, {PerExampleNS: 30_000, OverheadNS: 300_000}}}
	for _, tc := range []struct {
		name string
		t    *TopologyPlan
		b    float64
		want float64
		ok   bool
	}{
		{"nil", nil, 32, 0, false},
		{"no compute", &TopologyPlan{}, 32, 0, false},
		{"no batch", two, 0, 0, false},
		// mean step of 10 examples: (100 µs + 10·10 µs + 300 µs + 10·30 µs)/2 = 400 µs
		{"mean of two", two, 10, 10 / 400e-6, true},
	} {
		got, ok := tc.t.SingleRankSamplesPerSec(tc.b)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
