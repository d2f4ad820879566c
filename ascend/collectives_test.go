package ascend_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

var testLengths = []int{0, 1, 7, 1000, 1<<18 + 3}

// input is rank's distinct, seeded input for a given length and op.
func input(rank, n int, op ascend.Op) []float32 {
	rng := rand.New(rand.NewPCG(uint64(rank)+1, uint64(n)*8+uint64(op)))
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(rng.Float64()*2 - 1)
	}
	return b
}

// expected computes the reduction in float64 and the per-element tolerance.
func expected(world, n int, op ascend.Op) (want []float64, tol []float64) {
	want, tol = make([]float64, n), make([]float64, n)
	for r := range world {
		in := input(r, n, op)
		for i, v := range in {
			x := float64(v)
			switch {
			case r == 0:
				want[i] = x
			case op == ascend.Max:
				want[i] = math.Max(want[i], x)
			case op == ascend.Min:
				want[i] = math.Min(want[i], x)
			default:
				want[i] += x
			}
			tol[i] += math.Abs(x)
		}
	}
	for i := range want {
		switch op {
		case ascend.Max, ascend.Min:
			tol[i] = 0 // exact
		case ascend.Avg:
			want[i] /= float64(world)
			tol[i] = float64(world) * 2e-7 * tol[i] / float64(world)
		default:
			tol[i] = float64(world) * 2e-7 * tol[i]
		}
	}
	return want, tol
}

func TestAllReduce(t *testing.T) {
	ops := []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max, ascend.Min}
	for world := 1; world <= 9; world++ {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			type key struct {
				op ascend.Op
				n  int
			}
			var mu sync.Mutex
			results := map[key][][]float32{}
			ascendtest.Spawn(t, world, func(c *ascend.Communicator) {
				ctx := context.Background()
				for _, op := range ops {
					for _, n := range testLengths {
						buf := input(c.Rank(), n, op)
						if err := c.AllReduce(ctx, buf, op); err != nil {
							t.Errorf("rank %d: AllReduce(%v, n=%d): %v", c.Rank(), op, n, err)
							return
						}
						mu.Lock()
						k := key{op, n}
						if results[k] == nil {
							results[k] = make([][]float32, world)
						}
						results[k][c.Rank()] = buf
						mu.Unlock()
					}
				}
			})
			if t.Failed() {
				return
			}
			for _, op := range ops {
				for _, n := range testLengths {
					got := results[key{op, n}]
					want, tol := expected(world, n, op)
					for r := range world {
						if !slices.Equal(got[r], got[0]) {
							t.Errorf("%v n=%d: rank %d result differs bitwise from rank 0", op, n, r)
						}
					}
					bad := 0
					for i := range want {
						if d := math.Abs(float64(got[0][i]) - want[i]); d > tol[i] || math.IsNaN(d) {
							if bad++; bad <= 3 {
								t.Errorf("%v n=%d: [%d] = %v, want %v ± %g", op, n, i, got[0][i], want[i], tol[i])
							}
						}
					}
				}
			}
		})
	}
}

func TestBroadcast(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			ascendtest.Spawn(t, world, func(c *ascend.Communicator) {
				for root := range world {
					for _, n := range []int{0, 1, 7, 1<<18 + 3} {
						buf := input(c.Rank(), n, ascend.Op(root))
						want := input(root, n, ascend.Op(root))
						if err := c.Broadcast(context.Background(), buf, root); err != nil {
							t.Errorf("rank %d: Broadcast(root=%d, n=%d): %v", c.Rank(), root, n, err)
							return
						}
						if !slices.Equal(buf, want) {
							t.Errorf("rank %d: Broadcast(root=%d, n=%d): wrong data", c.Rank(), root, n)
						}
					}
				}
			})
		})
	}
}

func TestBarrier(t *testing.T) {
	for _, world := range []int{1, 2, 3, 6} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			var mu sync.Mutex
			arrived := 0
			ascendtest.Spawn(t, world, func(c *ascend.Communicator) {
				for round := 1; round <= 3; round++ {
					// Stagger arrival: the last rank is late.
					time.Sleep(time.Duration(c.Rank()*10) * time.Millisecond)
					mu.Lock()
					arrived++
					mu.Unlock()
					if err := c.Barrier(context.Background()); err != nil {
						t.Errorf("rank %d: Barrier: %v", c.Rank(), err)
						return
					}
					mu.Lock()
					if arrived < round*world {
						t.Errorf("rank %d left barrier %d with only %d/%d arrivals", c.Rank(), round, arrived, round*world)
					}
					mu.Unlock()
					if err := c.Barrier(context.Background()); err != nil { // separate rounds
						t.Errorf("rank %d: Barrier: %v", c.Rank(), err)
						return
					}
				}
			})
		})
	}
}

func TestInvalidArgumentsDoNotBreak(t *testing.T) {
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		ctx := context.Background()
		if err := c.AllReduce(ctx, []float32{1}, ascend.Op(42)); !errors.Is(err, ascend.ErrInvalid) {
			t.Errorf("bad op: %v", err)
		}
		if err := c.Broadcast(ctx, []float32{1}, 2); !errors.Is(err, ascend.ErrInvalid) {
			t.Errorf("bad root: %v", err)
		}
		buf := []float32{float32(c.Rank() + 1)}
		if err := c.AllReduce(ctx, buf, ascend.Sum); err != nil || buf[0] != 3 {
			t.Errorf("after invalid args: %v, %v", buf, err)
		}
	})
}

func TestMismatchDetected(t *testing.T) {
	// The rank that reads the offending frame reports ErrMismatch and tells
	// the other with its abort notice.
	cl := ascendtest.NewCluster(t, 2)
	cl.Options.OpTimeout = 5 * time.Second
	check := func(name string, errs []error) {
		t.Helper()
		mismatches := 0
		for r, err := range errs {
			if err == nil {
				t.Errorf("%s: rank %d: no error", name, r)
			}
			if errors.Is(err, ascend.ErrMismatch) {
				mismatches++
			}
		}
		if mismatches != len(errs) {
			t.Errorf("%s: not every rank reported ErrMismatch: %v", name, errs)
		}
	}
	errs := make([]error, 2)
	cl.Run(t, func(c *ascend.Communicator) {
		op := []ascend.Op{ascend.Sum, ascend.Max}[c.Rank()]
		errs[c.Rank()] = c.AllReduce(context.Background(), make([]float32, 100), op)
	})
	check("op", errs)
	cl.Run(t, func(c *ascend.Communicator) {
		errs[c.Rank()] = c.AllReduce(context.Background(), make([]float32, 100+c.Rank()*10), ascend.Sum)
	})
	check("length", errs)
	cl.Run(t, func(c *ascend.Communicator) {
		if c.Rank() == 0 {
			errs[0] = c.Barrier(context.Background())
		} else {
			errs[1] = c.Broadcast(context.Background(), make([]float32, 3), 0)
		}
	})
	check("kind", errs)
}

// outcome is a rank's error and when it came back.
type outcome struct {
	err  error
	when time.Time
}

func TestPeerClosedMidCollective(t *testing.T) {
	const world, victim = 4, 2
	cl := ascendtest.NewCluster(t, world)
	opTimeout := 5 * time.Second
	cl.Options.OpTimeout = opTimeout
	comms, err := cl.Connect(context.Background(), cl.NewSession("kill"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	outs := make([]outcome, world)
	var wg sync.WaitGroup
	for r, c := range comms {
		if r == victim {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.AllReduce(context.Background(), make([]float32, 1<<20), ascend.Sum)
			outs[r] = outcome{err, time.Now()}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the others are blocked on the victim
	killed := time.Now()
	cl.Listeners[victim].Close()
	comms[victim].Close()
	wg.Wait()
	for r, o := range outs {
		if r == victim {
			continue
		}
		var pe *ascend.PeerError
		if !errors.As(o.err, &pe) {
			t.Errorf("rank %d: got %v, want *PeerError", r, o.err)
			continue
		}
		// Neighbours see the victim's notice or its links drop; the others
		// learn who failed from the notices passed around.
		if pe.Rank != victim || pe.Op != "allreduce" {
			t.Errorf("rank %d: PeerError names rank %d op %q, want rank %d: %v", r, pe.Rank, pe.Op, victim, o.err)
		}
		t.Logf("rank %d: %v", r, o.err)
		if d := o.when.Sub(killed); d > opTimeout {
			t.Errorf("rank %d: error after %v, want < OpTimeout %v", r, d, opTimeout)
		}
		// Broken: the same error again, without I/O.
		if err := comms[r].Barrier(context.Background()); err != o.err {
			t.Errorf("rank %d: after failure got %v, want the same error %v", r, err, o.err)
		}
	}
}

func TestStuckPeerTimesOut(t *testing.T) {
	const world, stuck = 3, 1
	cl := ascendtest.NewCluster(t, world)
	opTimeout := 300 * time.Millisecond
	cl.Options.OpTimeout = opTimeout
	comms, err := cl.Connect(context.Background(), cl.NewSession("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	timeouts := 0
	var mu sync.Mutex
	for r, c := range comms {
		if r == stuck { // alive, connected, never calls
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.AllReduce(context.Background(), make([]float32, 1<<16), ascend.Sum)
			d := time.Since(start)
			var pe *ascend.PeerError
			if !errors.As(err, &pe) {
				t.Errorf("rank %d: got %v, want *PeerError", r, err)
				return
			}
			mu.Lock()
			if pe.Timeout() && errors.Is(err, os.ErrDeadlineExceeded) {
				timeouts++
			}
			mu.Unlock()
			if d > opTimeout+2*time.Second {
				t.Errorf("rank %d: error after %v, OpTimeout %v", r, d, opTimeout)
			}
		}()
	}
	wg.Wait()
	if timeouts == 0 {
		t.Errorf("no rank reported a timeout")
	}
}

func TestContextCancelAborts(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	cl.Options.OpTimeout = time.Minute
	comms, err := cl.Connect(context.Background(), cl.NewSession("cancel"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err = comms[0].AllReduce(ctx, make([]float32, 1<<20), ascend.Sum) // rank 1 never joins
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v", d)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if err2 := comms[0].AllReduce(context.Background(), make([]float32, 4), ascend.Sum); err2 != err {
		t.Errorf("after cancel: got %v, want the same error", err2)
	}
	// The peer learns promptly that the session is gone.
	err = comms[1].Barrier(context.Background())
	var pe *ascend.PeerError
	if !errors.As(err, &pe) || pe.Rank != 0 {
		t.Errorf("peer: got %v, want *PeerError for rank 0", err)
	}

	// An expired deadline reads as DeadlineExceeded.
	comms2, err := cl.Connect(context.Background(), cl.NewSession("deadline"))
	if err != nil {
		t.Fatal(err)
	}
	defer comms2[1].Close()
	defer comms2[0].Close()
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	if err := comms2[0].Broadcast(dctx, make([]float32, 10), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: got %v", err)
	}
}

func TestCloseAbortsAndIsSticky(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	comms, err := cl.Connect(context.Background(), cl.NewSession("close"))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	errc := make(chan error, 1)
	go func() { errc <- comms[0].AllReduce(context.Background(), make([]float32, 1<<20), ascend.Sum) }()
	time.Sleep(50 * time.Millisecond)
	if err := comms[0].Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ascend.ErrClosed) {
			t.Errorf("in-flight op after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not abort the collective")
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := comms[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestTwoSessionsShareListeners(t *testing.T) {
	const world = 3
	cl := ascendtest.NewCluster(t, world)
	var wg sync.WaitGroup
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms, err := cl.Connect(context.Background(), cl.NewSession(fmt.Sprintf("two/%d", s)))
			if err != nil {
				t.Error(err)
				return
			}
			var rw sync.WaitGroup
			for _, c := range comms {
				rw.Add(1)
				go func() {
					defer rw.Done()
					defer c.Close()
					for it := range 20 {
						// Session s, rank r contributes (s+1)*1000 + r.
						buf := make([]float32, 1000+it)
						for i := range buf {
							buf[i] = float32((s+1)*1000 + c.Rank())
						}
						if err := c.AllReduce(context.Background(), buf, ascend.Sum); err != nil {
							t.Errorf("session %d rank %d: %v", s, c.Rank(), err)
							return
						}
						want := float32(world*(s+1)*1000 + 0 + 1 + 2)
						for i, v := range buf {
							if v != want {
								t.Errorf("session %d rank %d: buf[%d] = %v, want %v (sessions mixed?)", s, c.Rank(), i, v, want)
								return
							}
						}
					}
				}()
			}
			rw.Wait()
		}()
	}
	wg.Wait()
}

// TestCancelAfterCallKeepsSession: a context cancelled once its call has
// returned (one context per step, cancelled by a defer) leaves the
// session usable, also when the next call's context replaces it while the
// watcher still holds the old one; a context reused across calls and
// cancelled mid-call still aborts that call.
func TestCancelAfterCallKeepsSession(t *testing.T) {
	cl := ascendtest.NewCluster(t, 2)
	cl.Options.OpTimeout = time.Minute
	comms, err := cl.Connect(context.Background(), cl.NewSession("recancel"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, 64)
			for i := range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				for j := range buf {
					buf[j] = 1
				}
				err := c.AllReduce(ctx, buf, ascend.Sum)
				cancel()
				if err != nil {
					t.Errorf("rank %d call %d: %v", c.Rank(), i, err)
					return
				}
				if buf[0] != 2 {
					t.Errorf("rank %d call %d: got %v, want 2", c.Rank(), i, buf[0])
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// One context for several calls, then cancelled while rank 0 waits
	// for a rank 1 that does not come.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		wg.Add(2)
		for _, c := range comms {
			go func() {
				defer wg.Done()
				if err := c.AllReduce(ctx, make([]float32, 8), ascend.Sum); err != nil {
					t.Errorf("rank %d: %v", c.Rank(), err)
				}
			}()
		}
		wg.Wait()
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := comms[0].AllReduce(ctx, make([]float32, 8), ascend.Sum); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
