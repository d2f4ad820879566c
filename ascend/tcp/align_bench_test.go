package tcp

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// BenchmarkLoopbackPrefix is why frames are padded to frameAlign
// (conn.go). Two ends of a loopback connection exchange 1 MiB messages,
// each one writev of a prefix (a frame header) and the payload, read back
// into page-aligned buffers: the traffic of a 2-rank allreduce. The
// prefixes alternate message by message, so each is timed under the same
// conditions (this VM's speed moves 2-4x between seconds); the metrics
// are µs per exchange for each prefix (ns/op covers one exchange of
// each). With an 8-byte prefix every
// payload lies 8 bytes out of step with the socket buffer's pages and the
// kernel's copies slow down on some CPUs (AMD EPYC here).
//
//	go test -run '^$' -bench LoopbackPrefix ./ascend/tcp
func BenchmarkLoopbackPrefix(b *testing.B) {
	const size = 1 << 20
	prefixes := []int{0, 8, frameHdr}
	x, y := tcpPair(b)
	defer x.Close()
	defer y.Close()
	for _, c := range []*net.TCPConn{x, y} {
		// Room for a whole message each way: every end writes, then reads.
		if err := c.SetReadBuffer(4 << 20); err != nil {
			b.Fatal(err)
		}
		if err := c.SetWriteBuffer(4 << 20); err != nil {
			b.Fatal(err)
		}
	}
	spent := make([]time.Duration, len(prefixes))
	b.ResetTimer()
	var wg sync.WaitGroup
	end := func(c *net.TCPConn, timed bool) {
		defer wg.Done()
		hdr, rhdr := make([]byte, frameHdr), make([]byte, frameHdr)
		src, dst := make([]byte, size), make([]byte, size)
		for range b.N {
			for i, p := range prefixes {
				start := time.Now()
				bufs := net.Buffers{hdr[:p], src}
				if _, err := bufs.WriteTo(c); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, rhdr[:p]); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, dst); err != nil {
					b.Error(err)
					return
				}
				if timed {
					spent[i] += time.Since(start)
				}
			}
		}
	}
	wg.Add(2)
	go end(x, true)
	go end(y, false)
	wg.Wait()
	for i, p := range prefixes {
		b.ReportMetric(float64(spent[i].Microseconds())/float64(b.N), fmt.Sprintf("µs/exchange-prefix%d", p))
	}
}
