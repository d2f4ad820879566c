package ascend_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestHierarchicalAllReduce: ranks told they sit on several hosts (uneven,
// interleaved, single-rank hosts) reduce correctly with the two-level
// algorithm, and every rank ends with the same bits.
func TestHierarchicalAllReduce(t *testing.T) {
	for _, hosts := range [][]string{
		{"a", "a", "b", "b", "b", "c", "d"},
		{"x", "y", "x", "y", "x"},
		{"a", "b"},
		{"a", "a", "a"},
	} {
		t.Run(fmt.Sprint(hosts), func(t *testing.T) {
			world := len(hosts)
			cl := ascendtest.NewCluster(t, world)
			cl.Options.Hosts = hosts
			cl.Options.ChunkBytes = 4 << 10
			cl.Options.Algorithm = ascend.AlgoHier
			var mu sync.Mutex
			results := map[string][][]float32{}
			cl.Run(t, func(c *ascend.Communicator) {
				if got := c.Algorithm(ascend.CollAllReduce, 1<<20); got != ascend.AlgoHier {
					t.Errorf("forced hier, got %v", got)
				}
				for _, n := range []int{0, 1, 7, 5000} {
					for _, op := range []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max} {
						buf := make([]float32, n)
						for i := range buf {
							buf[i] = float32(c.Rank()*1000+i) * 0.37
						}
						if err := c.AllReduce(context.Background(), buf, op); err != nil {
							t.Errorf("rank %d n=%d %v: %v", c.Rank(), n, op, err)
							return
						}
						for i, v := range buf {
							var want float32
							switch op {
							case ascend.Max:
								want = float32((world-1)*1000+i) * 0.37
							default:
								var s float64
								for r := range world {
									s += float64(float32(r*1000+i) * 0.37)
								}
								if op == ascend.Avg {
									s /= float64(world)
								}
								want = float32(s)
							}
							if d := v - want; d > 1e-2*max(1, want) || d < -1e-2*max(1, want) {
								t.Errorf("rank %d n=%d %v: [%d] = %v, want %v", c.Rank(), n, op, i, v, want)
								return
							}
						}
						mu.Lock()
						k := fmt.Sprint(n, op)
						results[k] = append(results[k], buf)
						mu.Unlock()
					}
				}
			})
			for k, rs := range results {
				for _, r := range rs[1:] {
					if !slices.Equal(r, rs[0]) {
						t.Errorf("%s: ranks disagree", k)
					}
				}
			}
		})
	}
}

// TestHierarchicalChosenWithTwoLevels: automatic selection picks the
// hierarchical algorithm only when the model knows a fast intra-host
// level and the message is large; never on one host or unknown levels.
func TestHierarchicalChosenWithTwoLevels(t *testing.T) {
	m := ascend.CostModel{Alpha: 50 * time.Microsecond, Beta: 1 / 1e9, Gamma: 1 / 5e9, Hosts: 4, PerHost: 8}
	if got := m.Choose(ascend.CollAllReduce, 32, 64<<20); got == ascend.AlgoHier {
		t.Error("hier chosen without intra-host parameters")
	}
	m.IntraAlpha, m.IntraBeta = 2*time.Microsecond, 1/20e9
	if got := m.Choose(ascend.CollAllReduce, 32, 64<<20); got != ascend.AlgoHier {
		t.Errorf("32 ranks on 4 hosts, 64 MiB, fast intra-host links: got %v, want hier", got)
	}
	one := m
	one.Hosts, one.PerHost = 1, 32
	if got := one.Choose(ascend.CollAllReduce, 32, 64<<20); got == ascend.AlgoHier {
		t.Error("hier chosen on one host")
	}
}
