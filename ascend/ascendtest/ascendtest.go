// Package ascendtest runs groups of ascend ranks in one process over real
// loopback TCP, for tests of ascend and of the packages built on it.
package ascendtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/tcp"
)

// Cluster is n node-level listeners on 127.0.0.1 sharing a random token;
// rank i of every session it forms listens on Listeners[i].
type Cluster struct {
	Listeners []*tcp.Listener
	Token     []byte
	Options   tcp.Options
	// Timeout bounds Run: ranks still running after it are aborted by
	// closing their communicators and the test fails. Default 2 minutes.
	Timeout time.Duration

	sessions atomic.Int64
}

// NewCluster opens n listeners, closed when the test ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cl := &Cluster{Token: make([]byte, 32), Timeout: 2 * time.Minute,
		Options: tcp.Options{ConnectTimeout: 20 * time.Second, OpTimeout: 30 * time.Second}}
	if _, err := rand.Read(cl.Token); err != nil {
		t.Fatal(err)
	}
	for range n {
		l, err := tcp.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatalf("ascendtest: listen: %v", err)
		}
		t.Cleanup(func() { l.Close() })
		cl.Listeners = append(cl.Listeners, l)
	}
	return cl
}

// Addrs are the listeners' addresses, i.e. Group.Addrs.
func (cl *Cluster) Addrs() []string {
	a := make([]string, len(cl.Listeners))
	for i, l := range cl.Listeners {
		a[i] = l.Addr()
	}
	return a
}

// Group is rank's Group for session.
func (cl *Cluster) Group(session string, rank int) tcp.Group {
	return tcp.Group{Session: session, Rank: rank, Addrs: cl.Addrs(), Token: cl.Token}
}

// NewSession returns a session name unique within the cluster.
func (cl *Cluster) NewSession(prefix string) string {
	return fmt.Sprintf("%s/%d", prefix, cl.sessions.Add(1))
}

// Connect forms all ranks of session concurrently. On error it closes what
// it formed and returns the first error.
func (cl *Cluster) Connect(ctx context.Context, session string) ([]*ascend.Communicator, error) {
	n := len(cl.Listeners)
	comms := make([]*ascend.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = tcp.Connect(ctx, cl.Listeners[r], cl.Group(session, r), cl.Options)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, c := range comms {
				if c != nil {
					c.Close()
				}
			}
			return nil, fmt.Errorf("ascendtest: rank %d: %w", r, err)
		}
	}
	return comms, nil
}

// Run forms a new session over the cluster and runs fn for every rank in its
// own goroutine, then closes the communicators. fn runs off the test
// goroutine: report failures with t.Error, not t.Fatal.
func (cl *Cluster) Run(t testing.TB, fn func(c *ascend.Communicator)) {
	t.Helper()
	comms, err := cl.Connect(context.Background(), cl.NewSession("ascendtest/"+t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(c)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	timeout := cl.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	select {
	case <-done:
	case <-time.After(timeout):
		t.Errorf("ascendtest: ranks still running after %v; aborting them", timeout)
		for _, c := range comms {
			c.Close()
		}
		<-done
	}
}

// Spawn runs fn on n ranks of a fresh cluster over loopback TCP and waits
// for all of them. See Cluster.Run.
func Spawn(t testing.TB, n int, fn func(c *ascend.Communicator)) {
	t.Helper()
	NewCluster(t, n).Run(t, fn)
}
