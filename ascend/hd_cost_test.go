package ascend

import (
	"testing"
	"time"
)

// TestHDCostOversubscribed: with the model calibrated on 4 ranks sharing 2
// cores (β_all far above 2β), AllReduce picks halving-doubling from 64 KiB
// on (measured 1.2–1.5× faster than the tree at 64–256 KiB) and still the
// tree for small messages.
func TestHDCostOversubscribed(t *testing.T) {
	m := CostModel{Alpha: 18620 * time.Nanosecond, Beta: 8.44e-10, Gamma: 2.15e-11,
		AlphaAll: 55905 * time.Nanosecond, BetaAll: 3.17e-9, Segment: DefaultChunkBytes}
	for _, tc := range []struct {
		n    int
		want Algorithm
	}{{4 << 10, AlgoTree}, {64 << 10, AlgoHD}, {256 << 10, AlgoHD}, {1 << 20, AlgoHD}} {
		if got := m.Choose(CollAllReduce, 4, tc.n); got != tc.want {
			t.Errorf("%d bytes: chose %v, want %v", tc.n, got, tc.want)
		}
	}
	// On dedicated cores (β_all below 2β) the clamp changes nothing.
	d := m
	d.AlphaAll, d.BetaAll = m.Alpha+m.Alpha/4, m.Beta*1.5
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		got, _ := d.Predict(CollAllReduce, AlgoHD, 4, n)
		pm := d.params()
		L, f := 2.0, 0.75
		want := pm.busy(2*L, 2*f*float64(n), f*float64(n))
		if diff := got.Seconds() - want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%d bytes: predicted %v, want %.9fs", n, got, want)
		}
	}
}
