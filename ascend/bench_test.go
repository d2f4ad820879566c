package ascend_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// BenchmarkAllReduceRing measures in-place Sum AllReduce over loopback TCP,
// all ranks in this process. MB/s is algorithm bandwidth (S/t); busbw is
// the nccl-tests bus bandwidth, algbw·2(P-1)/P, comparable with a link's
// bandwidth (see BenchmarkLoopbackTCP).
func BenchmarkAllReduceRing(b *testing.B) {
	for _, tc := range []struct{ world, bytes int }{{2, 4 << 20}, {4, 4 << 20}, {2, 64 << 20}} {
		b.Run(fmt.Sprintf("world=%d/%dMiB", tc.world, tc.bytes>>20), func(b *testing.B) {
			benchAllReduce(b, tc.world, tc.bytes, ascend.AlgoRing)
		})
	}
}

// BenchmarkAllReduceAlgo compares the algorithms (in-place Sum AllReduce,
// loopback TCP, ranks in this process) on small and large messages.
func BenchmarkAllReduceAlgo(b *testing.B) {
	for _, world := range []int{2, 4, 8} {
		for _, bytes := range []int{8, 64 << 10, 4 << 20} {
			for _, algo := range []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoTree, ascend.AlgoRD} {
				b.Run(fmt.Sprintf("world=%d/%dB/%v", world, bytes, algo), func(b *testing.B) {
					benchAllReduce(b, world, bytes, algo)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, world, bytes int, algo ascend.Algorithm) {
	cl := ascendtest.NewCluster(b, world)
	cl.Options.Algorithm = algo
	comms, err := cl.Connect(context.Background(), cl.NewSession("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	bufs := make([][]float32, world)
	for i := range bufs {
		bufs[i] = make([]float32, bytes/4)
	}
	timeAllReduce(b, comms, bufs, bytes)
}

// timeAllReduce times in-place Sum AllReduce of bufs[r] on every rank r
// (after two warm-up calls) and reports the nccl-tests busbw and the
// allocations (none on the hot path).
func timeAllReduce(b *testing.B, comms []*ascend.Communicator, bufs [][]float32, bytes int) {
	world := len(comms)
	run := func(iters int) {
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iters {
					if err := c.AllReduce(context.Background(), bufs[r], ascend.Sum); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(2) // allocate scratch
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(bytes)/sec*2*float64(world-1)/float64(world)/1e9, "busbw_GB/s")
}

// BenchmarkLoopbackTCP is the baseline: one TCP connection over loopback
// moving the same sizes. "oneway" streams S bytes in one direction (MB/s is
// the single-stream link bandwidth); "duplex" has both ends send S bytes and
// receive S bytes at once, which is the traffic of a 2-rank ring AllReduce
// of S bytes without its reductions (MB/s = S/t, comparable to its busbw).
func BenchmarkLoopbackTCP(b *testing.B) {
	for _, duplex := range []bool{false, true} {
		for _, size := range []int{4 << 20, 64 << 20} {
			name := fmt.Sprintf("oneway/%dMiB", size>>20)
			if duplex {
				name = fmt.Sprintf("duplex/%dMiB", size>>20)
			}
			b.Run(name, func(b *testing.B) { benchLoopback(b, size, duplex) })
		}
	}
}

func benchLoopback(b *testing.B, size int, duplex bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	x, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	y := <-accepted
	defer y.Close()
	bufs := [4][]byte{make([]byte, size), make([]byte, size), make([]byte, size), make([]byte, size)}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	pump := func(w, r net.Conn, src, dst []byte, write, read bool) {
		defer wg.Done()
		var inner sync.WaitGroup
		if write {
			inner.Add(1)
			go func() {
				defer inner.Done()
				for range b.N {
					if _, err := w.Write(src); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		if read {
			for range b.N {
				if _, err := io.ReadFull(r, dst); err != nil {
					b.Error(err)
					return
				}
			}
		}
		inner.Wait()
	}
	wg.Add(2)
	go pump(x, x, bufs[0], bufs[1], true, duplex)
	go pump(y, y, bufs[2], bufs[3], duplex, true)
	wg.Wait()
}

// BenchmarkAllReduceShared compares, on shared-memory links, AllReduce of
// ordinary memory over the links and of shared buffers (direct), ranks in
// this process (cann-train bench collective --shm [-R 1] runs them as
// processes, which is what the README reports).
func BenchmarkAllReduceShared(b *testing.B) {
	for _, world := range []int{2} {
		for _, bytes := range []int{64 << 10, 1 << 20, 16 << 20} {
			for _, mode := range []string{"links", "direct"} {
				b.Run(fmt.Sprintf("world=%d/%dKiB/%s", world, bytes>>10, mode), func(b *testing.B) {
					cl := ascendtest.NewCluster(b, world)
					cl.Options.SharedMemory = true
					comms, err := cl.Connect(context.Background(), cl.NewSession("bench"))
					if err != nil {
						b.Fatal(err)
					}
					defer func() {
						for _, c := range comms {
							c.Close()
						}
					}()
					bufs := make([][]float32, world)
					var wg sync.WaitGroup
					for r, c := range comms {
						wg.Add(1)
						go func() {
							defer wg.Done()
							bufs[r] = make([]float32, bytes/4)
							if mode == "direct" {
								sb, err := c.AllocShared(context.Background(), bytes/4)
								if err != nil {
									b.Error(err)
									return
								}
								bufs[r] = sb.Floats()
							}
						}()
					}
					wg.Wait()
					timeAllReduce(b, comms, bufs, bytes)
				})
			}
		}
	}
}
