package engine

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

// mnistCache loads MNIST once per test binary.
var mnistCache struct {
	once        sync.Once
	train, test *Dataset
	err         error
}

// loadMNISTForTest returns the real MNIST data, skipping the test if the
// files cannot be found.
func loadMNISTForTest(tb testing.TB) (train, test *Dataset) {
	tb.Helper()
	mnistCache.once.Do(func() {
		dir, err := MNISTDir()
		if err != nil {
			mnistCache.err = err
			return
		}
		mnistCache.train, mnistCache.test, mnistCache.err = LoadMNIST(dir)
	})
	if mnistCache.err != nil {
		tb.Skipf("MNIST not available: %v", mnistCache.err)
	}
	return mnistCache.train, mnistCache.test
}

// synthDataset returns a small random classification problem whose label
// is a fixed linear function of the features, so it is learnable.
func synthDataset(seed uint64, n, dim, classes int) *Dataset {
	r := rand.New(rand.NewPCG(seed, 99))
	ds := &Dataset{X: make([]float32, n*dim), Y: make([]uint8, n), N: n, Dim: dim, Classes: classes}
	proj := make([]float32, dim*classes)
	for i := range proj {
		proj[i] = float32(r.NormFloat64())
	}
	for i := 0; i < n; i++ {
		x := ds.X[i*dim : (i+1)*dim]
		for j := range x {
			x[j] = float32(r.Float64()*2 - 1)
		}
		best, bestV := 0, float32(0)
		for c := 0; c < classes; c++ {
			var s float32
			for j := range x {
				s += float32(x[j] * proj[j*classes+c]) // Unfused: same labels on every platform.
			}
			if c == 0 || s > bestV {
				best, bestV = c, s
			}
		}
		ds.Y[i] = uint8(best)
	}
	return ds
}

func noReduce(context.Context, []float32) error { return nil }

// averager is an in-process stand-in for an allreduce: every rank deposits
// its buffer, rank 0 sums them in rank order and divides by World, and every
// rank copies the identical result back.
type averager struct {
	world   int
	mu      sync.Mutex
	cond    *sync.Cond
	arrived int
	gen     uint64
	bufs    [][]float32
	out     []float32
}

func newAverager(world int) *averager {
	a := &averager{world: world, bufs: make([][]float32, world)}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *averager) barrier() {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gen
	a.arrived++
	if a.arrived == a.world {
		a.arrived = 0
		a.gen++
		a.cond.Broadcast()
		return
	}
	for g == a.gen {
		a.cond.Wait()
	}
}

func (a *averager) reduceFor(rank int) ReduceFunc {
	return func(_ context.Context, buf []float32) error {
		a.bufs[rank] = buf
		a.barrier()
		if rank == 0 {
			if len(a.out) != len(buf) {
				a.out = make([]float32, len(buf))
			}
			w := float32(a.world)
			for i := range a.out {
				s := a.bufs[0][i]
				for r := 1; r < a.world; r++ {
					s += a.bufs[r][i]
				}
				a.out[i] = s / w
			}
		}
		a.barrier()
		copy(buf, a.out)
		a.barrier()
		return nil
	}
}

// newRanks builds World trainers for cfg (Rank overwritten).
func newRanks(tb testing.TB, cfg Config, ds *Dataset) []*Trainer {
	tb.Helper()
	ts := make([]*Trainer, cfg.World)
	for r := range ts {
		c := cfg
		c.Rank = r
		tr, err := NewTrainer(c, ds)
		if err != nil {
			tb.Fatalf("NewTrainer(rank %d): %v", r, err)
		}
		ts[r] = tr
	}
	return ts
}

// runLockstep advances every trainer by steps global steps, one goroutine
// per rank, averaging through an averager. It returns rank 0's last loss.
func runLockstep(tb testing.TB, ts []*Trainer, steps int) float32 {
	tb.Helper()
	avg := newAverager(len(ts))
	losses := make([]float32, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			red := avg.reduceFor(r)
			for s := 0; s < steps; s++ {
				l, err := tr.Step(context.Background(), red)
				if err != nil {
					errs[r] = err
					return // Lockstep is broken; the test fails below.
				}
				losses[r] = l
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	return losses[0]
}
