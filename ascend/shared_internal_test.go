package ascend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// heapMemory is a SharedMemory of Go memory for ranks in one process: a
// region is a name in dir, so ranks given different dirs do not see each
// other's regions (as containers with their own /dev/shm).
type heapMemory struct {
	dir string
	reg *heapRegistry
}

type heapRegistry struct {
	mu      sync.Mutex
	regions map[string][]byte
}

type heapRegion struct {
	reg  *heapRegistry
	name string
	mem  []byte
}

func (r *heapRegion) Bytes() []byte { return r.mem }
func (r *heapRegion) Close() error  { return nil }
func (r *heapRegion) Unlink() error {
	r.reg.mu.Lock()
	defer r.reg.mu.Unlock()
	delete(r.reg.regions, r.name)
	return nil
}

func (m heapMemory) Create(name string, size int) (SharedRegion, error) {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	b := make([]byte, size)
	m.reg.regions[m.dir+"/"+name] = b
	return &heapRegion{m.reg, m.dir + "/" + name, b}, nil
}

func (m heapMemory) Open(name string, size int) (SharedRegion, error) {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	b, ok := m.reg.regions[m.dir+"/"+name]
	if !ok || len(b) != size {
		return nil, fmt.Errorf("no region %s/%s of %d bytes", m.dir, name, size)
	}
	return &heapRegion{m.reg, m.dir + "/" + name, b}, nil
}

func (heapMemory) Wait(*uint32, uint32, time.Duration) { runtime.Gosched() } // spurious wake-ups are allowed
func (heapMemory) Wake(*uint32)                        {}
func (heapMemory) Yield()                              { runtime.Gosched() }

// watchedConn is a pipe link that, like a shared-memory one, reports its
// peer's liveness (here: never down), which CanShare looks for.
type watchedConn struct{ *pipeConn }

func (watchedConn) PeerDown() bool { return false }

// heapGroup is n communicators over pipes whose ranks share memory
// through reg, rank r in dirs[r].
func heapGroup(t *testing.T, n int, dirs []string) []*Communicator {
	t.Helper()
	reg := &heapRegistry{regions: map[string][]byte{}}
	conns := make([][]Conn, n)
	for i := range conns {
		conns[i] = make([]Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, b := tcpPair(t)
			conns[i][j], conns[j][i] = watchedConn{&pipeConn{c: a}}, watchedConn{&pipeConn{c: b}}
		}
	}
	comms := make([]*Communicator, n)
	for i := range n {
		c, err := New(Config{Rank: i, Size: n, Session: "heap", Conns: conns[i], Shared: heapMemory{dirs[i], reg}, OpTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		comms[i] = c
		t.Cleanup(func() { c.Close() })
	}
	return comms
}

// TestAllocSharedAgrees: where every rank maps every other's regions the
// buffers are shared and AllReduce reads them directly; where one rank
// cannot (its /dev/shm is another), every rank gets plain memory, the
// same answer everywhere, AllReduce runs over the links with the right
// result, and later allocations do not try again.
func TestAllocSharedAgrees(t *testing.T) {
	const n, elems = 3, 50_000
	for _, tc := range []struct {
		name   string
		dirs   []string
		shared bool
	}{
		{"one host", []string{"shm", "shm", "shm"}, true},
		{"rank 2 apart", []string{"shm", "shm", "other"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := heapGroup(t, n, tc.dirs)
			errs := parallel(comms, func(c *Communicator) error {
				ctx := context.Background()
				if !c.CanShare() {
					return errors.New("CanShare is false on shared-memory-like links")
				}
				for round := range 2 {
					b, err := c.AllocShared(ctx, elems)
					if err != nil {
						return err
					}
					if b.Shared() != tc.shared || c.Direct(b.Floats(), b.Floats()) != tc.shared {
						return fmt.Errorf("round %d: shared %v, direct %v, want %v", round, b.Shared(), c.Direct(b.Floats(), b.Floats()), tc.shared)
					}
					buf := b.Floats()
					for i := range buf {
						buf[i] = float32(c.Rank()*elems + i)
					}
					if err := c.AllReduce(ctx, buf, Sum); err != nil {
						return err
					}
					for i, v := range buf {
						if want := float32(3*i + 3*elems); v != want {
							return fmt.Errorf("round %d: [%d] = %v, want %v", round, i, v, want)
						}
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
