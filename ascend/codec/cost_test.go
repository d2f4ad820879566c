package codec

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

// countingComm records the collectives a compressed allreduce calls:
// bytes of all-to-all payload this rank sends (every block, its own
// included, as the whole array of Work), bytes of gathered output, and the
// one-float-per-rank length exchanges.
type countingComm struct {
	*ascend.Communicator
	allToAll, allGather             int
	lengthAllToAll, lengthAllGather int
}

func (c *countingComm) AllToAllV(ctx context.Context, dst, src []float32, send, recv []int) error {
	if len(src) == c.Size() && len(dst) == c.Size() && isOnes(send) {
		c.lengthAllToAll++
	} else {
		c.allToAll += 4 * len(src)
	}
	return c.Communicator.AllToAllV(ctx, dst, src, send, recv)
}

func (c *countingComm) AllGatherV(ctx context.Context, dst, src []float32, counts []int) error {
	c.allGather += 4 * len(dst)
	return c.Communicator.AllGatherV(ctx, dst, src, counts)
}

func (c *countingComm) AllGather(ctx context.Context, buf []float32) error {
	c.lengthAllGather++
	return c.Communicator.AllGather(ctx, buf)
}

func isOnes(v []int) bool {
	for _, x := range v {
		if x != 1 {
			return false
		}
	}
	return true
}

// TestWorkMatchesTheExchanges: the collectives TwoPhaseWork and
// ExchangeWork price are the ones the real exchanges call over TCP, of the
// sizes they send (exactly for codecs whose length depends on n alone,
// within 2 % for top-k, whose index gaps depend on the data).
func TestWorkMatchesTheExchanges(t *testing.T) {
	const n = 20_011
	for _, world := range []int{2, 3, 5} {
		cl := ascendtest.NewCluster(t, world)
		for _, name := range []string{"sign", "int8", "topk:0.01", "none"} {
			for _, twoPhase := range []bool{true, false} {
				var mu sync.Mutex
				counted := make([]countingComm, world)
				cl.Run(t, func(c *ascend.Communicator) {
					cc := &countingComm{Communicator: c}
					g := randVec(uint64(c.Rank()), n)
					var err error
					if twoPhase {
						var x *TwoPhase
						if x, err = NewTwoPhase(mustCodec(t, name), n, c.Rank(), c.Size()); err == nil {
							_, err = x.AllReduce(context.Background(), cc, g, 0, true)
						}
					} else {
						var x Exchange
						_, err = x.AllReduce(context.Background(), cc, NewFeedback(mustCodec(t, name), n), g, 0, true)
					}
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					counted[c.Rank()] = *cc
					mu.Unlock()
				})
				w := ExchangeWork(mustCodec(t, name), n, world)
				if twoPhase {
					w = TwoPhaseWork(mustCodec(t, name), n, world)
				}
				_, fixed := mustCodec(t, name).(sizer)
				for r, got := range counted {
					what := func(s string) string {
						return fmt.Sprintf("%s (two-phase %v, %d ranks) rank %d: %s", name, twoPhase, world, r, s)
					}
					if got.lengthAllToAll != w.LengthAllToAlls || got.lengthAllGather != w.LengthAllGathers {
						t.Errorf("%s length exchanges %d all-to-all + %d allgather, Work says %d + %d",
							what(""), got.lengthAllToAll, got.lengthAllGather, w.LengthAllToAlls, w.LengthAllGathers)
					}
					// Chunks differ by at most one value; Work prices the largest.
					slack := 0.0
					if twoPhase {
						slack = float64(world * 4 * 2)
					}
					if !fixed {
						slack += 0.02 * float64(max(w.AllToAll, w.AllGather))
					}
					for _, c := range []struct {
						what      string
						got, want int
					}{{"all-to-all bytes", got.allToAll, w.AllToAll}, {"allgather bytes", got.allGather, w.AllGather}} {
						low := 0.0 // Work never prices less than an exact codec sends
						if !fixed {
							low = -slack
						}
						if d := float64(c.want - c.got); d < low || d > slack {
							t.Errorf("%s %d, Work says %d", what(c.what), c.got, c.want)
						}
					}
				}
			}
		}
	}
}

// TestMeasureCost: positive per-value costs for every codec; bad sizes and
// a cancelled context are errors.
func TestMeasureCost(t *testing.T) {
	for _, name := range append(append([]string(nil), Ladder...), "none") {
		c, err := MeasureCost(context.Background(), mustCodec(t, name), 4096, time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !(c.EncodeNS > 0) || !(c.DecodeNS > 0) || c.EncodeNS > 1e4 || c.DecodeNS > 1e4 {
			t.Errorf("%s: %+v ns per value", name, c)
		}
	}
	if _, err := MeasureCost(context.Background(), mustCodec(t, "sign"), 0, time.Millisecond); !errors.Is(err, ErrInvalid) {
		t.Errorf("0 values: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureCost(ctx, mustCodec(t, "sign"), 64, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
