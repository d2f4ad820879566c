package ascend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestVictimNamedEveryAlgorithm: whatever the operation and algorithm, a
// rank that closes instead of joining fails the others promptly with a
// *PeerError naming it. (In a broadcast or reduce, ranks whose part does
// not depend on the victim may complete.)
func TestVictimNamedEveryAlgorithm(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "shm"}[shared], func(t *testing.T) { testVictimNamed(t, shared) })
	}
}

func testVictimNamed(t *testing.T, shared bool) {
	const world, victim, n = 5, 2, 1 << 16
	cl := ascendtest.NewCluster(t, world)
	opTimeout := 5 * time.Second
	cl.Options.OpTimeout = opTimeout
	cl.Options.SharedMemory = shared
	ops := map[string]func(ctx context.Context, c *ascend.Communicator) error{
		"allreduce": func(ctx context.Context, c *ascend.Communicator) error {
			return c.AllReduce(ctx, make([]float32, n), ascend.Sum)
		},
		"reducescatter": func(ctx context.Context, c *ascend.Communicator) error {
			return c.ReduceScatter(ctx, make([]float32, world*n), ascend.Sum)
		},
		"allgather": func(ctx context.Context, c *ascend.Communicator) error {
			return c.AllGather(ctx, make([]float32, world*n))
		},
		"broadcast": func(ctx context.Context, c *ascend.Communicator) error {
			return c.Broadcast(ctx, make([]float32, n), 0)
		},
		"reduce": func(ctx context.Context, c *ascend.Communicator) error {
			return c.Reduce(ctx, make([]float32, n), ascend.Max, 4)
		},
		"alltoall": func(ctx context.Context, c *ascend.Communicator) error {
			return c.AllToAll(ctx, make([]float32, world*n), make([]float32, world*n))
		},
	}
	for _, algo := range []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoTree, ascend.AlgoRD, ascend.AlgoHier} {
		for name, run := range ops {
			coll, _ := ascend.ParseCollective(name)
			if !algo.Implements(coll) && !(name == "alltoall" && algo == ascend.AlgoRing) {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", algo, name), func(t *testing.T) {
				cl.Options.Algorithm = algo
				comms, err := cl.Connect(context.Background(), cl.NewSession("victim"))
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					for _, c := range comms {
						c.Close()
					}
				}()
				errs := make([]error, world)
				var wg sync.WaitGroup
				start := time.Now()
				for r, c := range comms {
					if r == victim {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[r] = run(context.Background(), c)
					}()
				}
				time.Sleep(30 * time.Millisecond)
				comms[victim].Close()
				wg.Wait()
				if d := time.Since(start); d > opTimeout {
					t.Errorf("took %v, want < OpTimeout %v", d, opTimeout)
				}
				rooted := name == "broadcast" || name == "reduce"
				failed := 0
				for r, err := range errs {
					if r == victim || (err == nil && rooted) {
						continue
					}
					failed++
					var pe *ascend.PeerError
					if !errors.As(err, &pe) || pe.Rank != victim {
						t.Errorf("rank %d: %v, want a PeerError naming rank %d", r, err, victim)
					}
				}
				if failed == 0 {
					t.Error("nobody noticed the victim")
				}
			})
		}
	}
}
