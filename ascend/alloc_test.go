//go:build !race

package ascend_test

import (
	"context"
	"sync"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestHotPathDoesNotAllocate: once warm, collectives allocate nothing, on
// any rank, with a cancellable context too. (Not under -race, whose runtime
// allocates on its own.)
func TestHotPathDoesNotAllocate(t *testing.T) {
	const world, runs = 3, 20
	cl := ascendtest.NewCluster(t, world)
	comms, err := cl.Connect(context.Background(), cl.NewSession("alloc"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bufs := make([][]float32, world)
	for i := range bufs {
		bufs[i] = make([]float32, 300_001)
	}
	step := func(r int) {
		c := comms[r]
		if err := c.AllReduce(ctx, bufs[r], ascend.Avg); err != nil {
			t.Error(err)
		}
		if err := c.Broadcast(ctx, bufs[r], 1); err != nil {
			t.Error(err)
		}
		if err := c.Barrier(ctx); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	for r := 1; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs + 1 { // AllocsPerRun makes one warm-up call
				step(r)
			}
		}()
	}
	allocs := testing.AllocsPerRun(runs, func() { step(0) })
	wg.Wait()
	if allocs != 0 {
		t.Errorf("%v allocations per AllReduce+Broadcast+Barrier across %d ranks, want 0", allocs, world)
	}
}
