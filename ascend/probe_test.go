package ascend_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestProbeSchedule checks the round-robin tournament: partners are
// mutual, every rank meets every other exactly once, and only the phantom
// rank of an odd world leaves anyone idle (one rank per round).
func TestProbeSchedule(t *testing.T) {
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rounds := ascend.ProbeRounds(n)
			if want := map[bool]int{true: n - 1, false: n}[n%2 == 0]; n > 1 && rounds != want {
				t.Fatalf("ProbeRounds(%d) = %d, want %d", n, rounds, want)
			}
			met := map[[2]int]int{}
			for r := range rounds {
				idle := 0
				for x := range n {
					p := ascend.ProbePartner(n, r, x)
					switch {
					case p == -1:
						idle++
					case p == x || p < 0 || p >= n:
						t.Fatalf("round %d: rank %d meets %d", r, x, p)
					case ascend.ProbePartner(n, r, p) != x:
						t.Fatalf("round %d: %d meets %d but %d meets %d", r, x, p, p, ascend.ProbePartner(n, r, p))
					case x < p:
						met[[2]int{x, p}]++
					}
				}
				if idle != n%2 {
					t.Errorf("round %d: %d ranks idle, want %d", r, idle, n%2)
				}
			}
			for i := range n {
				for j := i + 1; j < n; j++ {
					if met[[2]int{i, j}] != 1 {
						t.Errorf("ranks %d and %d meet %d times", i, j, met[[2]int{i, j}])
					}
				}
			}
		})
	}
}

// TestProbeLinks runs the probe on in-process worlds of 1 to 5 ranks over
// loopback TCP: every rank gets the same complete matrix of positive,
// finite measurements.
func TestProbeLinks(t *testing.T) {
	opts := ascend.ProbeOptions{Budget: 300 * time.Millisecond, LatencyRounds: 10, Bytes: 64 << 10, BandwidthRounds: 2}
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			got := make([][]ascend.ProbedLink, n)
			ascendtest.Spawn(t, n, func(c *ascend.Communicator) {
				links, err := c.ProbeLinks(context.Background(), opts)
				if err != nil {
					t.Errorf("rank %d: %v", c.Rank(), err)
					return
				}
				got[c.Rank()] = links
			})
			if t.Failed() {
				return
			}
			links := got[0]
			if len(links) != n*(n-1) {
				t.Fatalf("%d links, want %d", len(links), n*(n-1))
			}
			k := 0
			for from := range n {
				for to := range n {
					if from == to {
						continue
					}
					l := links[k]
					k++
					if l.From != from || l.To != to {
						t.Fatalf("link %d is %d->%d, want %d->%d (sorted by from, to)", k-1, l.From, l.To, from, to)
					}
					if l.Latency <= 0 || !(l.BytesPerSec > 0) || math.IsInf(l.BytesPerSec, 0) {
						t.Errorf("%d->%d: latency %v, bandwidth %g B/s", from, to, l.Latency, l.BytesPerSec)
					}
					if l.LatencySamples < ascend.MinLatencySamples || l.LatencySamples > opts.LatencyRounds ||
						l.BandwidthSamples < 1 || l.BandwidthSamples > opts.BandwidthRounds {
						t.Errorf("%d->%d: %d latency and %d bandwidth samples", from, to, l.LatencySamples, l.BandwidthSamples)
					}
				}
			}
			for r := 1; r < n; r++ {
				if !reflect.DeepEqual(got[r], links) {
					t.Errorf("rank %d's matrix differs from rank 0's", r)
				}
			}
		})
	}
}

// TestProbeLinksBudget: with unbounded sample counts the budget ends the
// scan (the minimum samples aside), and the communicator stays usable.
func TestProbeLinksBudget(t *testing.T) {
	const budget = 200 * time.Millisecond
	opts := ascend.ProbeOptions{Budget: budget, LatencyRounds: 1 << 30, Bytes: 4 << 10, BandwidthRounds: 1 << 30}
	var mu sync.Mutex
	var longest time.Duration
	ascendtest.Spawn(t, 3, func(c *ascend.Communicator) {
		start := time.Now()
		links, err := c.ProbeLinks(context.Background(), opts)
		if err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
			return
		}
		mu.Lock()
		longest = max(longest, time.Since(start))
		mu.Unlock()
		for _, l := range links {
			if l.LatencySamples < ascend.MinLatencySamples || l.BandwidthSamples < 1 {
				t.Errorf("%d->%d: %d/%d samples", l.From, l.To, l.LatencySamples, l.BandwidthSamples)
			}
		}
		buf := []float32{float32(c.Rank())}
		if err := c.AllReduce(context.Background(), buf, ascend.Sum); err != nil || buf[0] != 3 {
			t.Errorf("rank %d: allreduce after probe: %v, %v", c.Rank(), buf, err)
		}
	})
	// Without the budget the scan would run ~10⁹ exchanges per direction;
	// the bound is loose for a loaded machine.
	if longest > 20*budget {
		t.Errorf("probe took %v with a budget of %v", longest, budget)
	}
}

func TestProbeOptionsInvalid(t *testing.T) {
	for _, o := range []ascend.ProbeOptions{{Budget: -1}, {Bytes: 2}, {LatencyRounds: -1}, {BandwidthRounds: -2}} {
		ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
			if _, err := c.ProbeLinks(context.Background(), o); !errors.Is(err, ascend.ErrInvalid) {
				t.Errorf("%+v: %v, want ErrInvalid", o, err)
			}
		})
	}
}
