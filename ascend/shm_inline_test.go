//go:build linux

package ascend_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
)

// shmMesh links world communicators pairwise over shared-memory segments
// with rings of ringBytes, set up as when ranks outnumber the cores
// (polls yield to other processes, SetInline), whatever this host's core
// count: sends go into the ring from the calling goroutine as far as it
// has room (shm.Conn.InlineBytes), the rest through the writer goroutine.
func shmMesh(t *testing.T, world, ringBytes, chunkBytes int) []*ascend.Communicator {
	t.Helper()
	conns := make([][]ascend.Conn, world)
	for i := range conns {
		conns[i] = make([]ascend.Conn, world)
	}
	opts := shm.ConnOptions{OpTimeout: 30 * time.Second}
	for i := range world {
		for j := i + 1; j < world; j++ {
			seg0, err := shm.Create(t.TempDir(), ringBytes)
			if err != nil {
				t.Fatal(err)
			}
			seg1, err := shm.Open(seg0.Path())
			if err != nil {
				t.Fatal(err)
			}
			if err := seg0.Unlink(); err != nil {
				t.Fatal(err)
			}
			c0, c1 := shm.NewConn(seg0, 0, opts), shm.NewConn(seg1, 1, opts)
			for _, c := range []*shm.Conn{c0, c1} {
				c.SetSpinFor(20*time.Microsecond, true)
				c.SetInline(true)
			}
			conns[i][j], conns[j][i] = c0, c1
		}
	}
	comms := make([]*ascend.Communicator, world)
	for r := range world {
		c, err := ascend.New(ascend.Config{Rank: r, Size: world, Session: "shm-inline", Conns: conns[r], ChunkBytes: chunkBytes, IgnoreEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// TestMatrixSharedMemoryInline runs the matrix over shared-memory links
// that take whole messages inline, with messages both within and beyond
// the ring's room (5000 floats are 20 KB against 16 KiB rings).
func TestMatrixSharedMemoryInline(t *testing.T) {
	for _, world := range []int{3, 4} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			t.Parallel()
			comms := shmMesh(t, world, 16<<10, 4<<10)
			var wg sync.WaitGroup
			done := make(chan struct{})
			for _, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runMatrix(t, c, allAlgos, []int{0, 7, 5000})
				}()
			}
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(90 * time.Second):
				t.Error("deadlock: ranks still running after 90s")
				for _, c := range comms {
					c.Close()
				}
				<-done
			}
		})
	}
}
