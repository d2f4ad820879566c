package trainbench

import (
	"context"
	"testing"
)

// TestCompressionShort: a short side-by-side run reports consistent
// figures: the compressed run sends far less, both runs learn, and the
// loss curves are complete. (The acceptance figures come from the full
// `cann-train bench compression`, not from CI.)
func TestCompressionShort(t *testing.T) {
	res, err := Compression(context.Background(), CompressionOptions{Ranks: 2, Steps: 60, Codec: "topk:0.01"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("traffic %.1f×, loss %.4f vs %.4f (gap %.2f %%)", res.TrafficReduction, res.Compressed.TestLoss, res.Dense.TestLoss, res.FinalLossGapPct)
	if res.TrafficReduction < 16 {
		t.Errorf("traffic reduction %.1f×, want ≥ 16× with top-1 %%", res.TrafficReduction)
	}
	if len(res.Dense.Loss) != 60 || len(res.Compressed.Loss) != 60 {
		t.Errorf("curves of %d and %d points", len(res.Dense.Loss), len(res.Compressed.Loss))
	}
	for _, r := range []Run{res.Dense, res.Compressed} {
		if !(r.TestLoss < float64(r.Loss[0])) || r.TestAccuracy < 0.5 {
			t.Errorf("run did not learn: first loss %.3f, test loss %.3f, accuracy %.3f", r.Loss[0], r.TestLoss, r.TestAccuracy)
		}
	}
}
