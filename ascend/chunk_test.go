package ascend_test

import (
	"context"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestLargeChunks: frames larger than DefaultChunkBytes keep their
// boundaries when the first goes out from the calling goroutine (it used to
// be cut at DefaultChunkBytes, which the receiver took for a mismatch).
func TestLargeChunks(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	cl.Options.ChunkBytes = 4 * ascend.DefaultChunkBytes
	cl.Run(t, func(c *ascend.Communicator) {
		buf := make([]float32, 3*ascend.DefaultChunkBytes/4+5)
		for i := range buf {
			buf[i] = float32(c.Rank() + i%7)
		}
		for _, algo := range []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoRD, ascend.AlgoTree} {
			if err := c.SetAlgorithm(algo); err != nil {
				t.Error(err)
				return
			}
			in := append([]float32(nil), buf...)
			if err := c.AllReduce(context.Background(), in, ascend.Sum); err != nil {
				t.Errorf("rank %d %v: %v", c.Rank(), algo, err)
				return
			}
			for i, v := range in {
				if want := float32(1 + 2*(i%7)); v != want {
					t.Errorf("rank %d %v: [%d] = %v, want %v", c.Rank(), algo, i, v, want)
					return
				}
			}
		}
	})
}
