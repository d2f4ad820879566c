package tcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// TestSendFramesLayout: SendFrames puts on the wire exactly the frames
// successive Sends of the pieces would (headers, payloads, padding), for
// frame sizes that are and are not multiples of frameAlign, messages of
// fewer and more than maxBatch frames, with and without polling writes.
func TestSendFramesLayout(t *testing.T) {
	for _, tc := range []struct{ n, frame int }{
		{100, 16}, {100, 7}, {17, 16}, {5000, 64}, {maxBatch*48 + 5, 48}, {3*maxBatch*32 + 1, 32}, {1 << 20, 1 << 16},
	} {
		for _, spin := range []time.Duration{0, DefaultSpin} {
			t.Run(fmt.Sprintf("n%d/frame%d/spin%v", tc.n, tc.frame, spin), func(t *testing.T) {
				a, b := tcpPair(t)
				c := newConn(a, 5*time.Second)
				c.setSpin(spin, false)
				defer c.Close()
				defer b.Close()
				p := make([]byte, tc.n)
				for i := range p {
					p[i] = byte(i*7 + i>>8)
				}
				var want []byte
				for off := 0; off < len(p); off += tc.frame {
					want = append(want, frame(9, p[off:min(off+tc.frame, len(p))])...)
				}
				errc := make(chan error, 1)
				go func() { errc <- c.SendFrames(context.Background(), 9, p, tc.frame) }()
				got := make([]byte, len(want))
				if _, err := io.ReadFull(b, got); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes on the wire differ from %d Sends of %d bytes", len(got), (tc.n+tc.frame-1)/tc.frame, tc.frame)
				}
			})
		}
	}
}

// polledPair is both ends of a loopback connection as conns that poll
// (DefaultSpin), closed when tb ends.
func polledPair(tb testing.TB, timeout time.Duration) (w, r *conn) {
	a, b := tcpPair(tb)
	w, r = newConn(a, timeout), newConn(b, timeout)
	tb.Cleanup(func() { w.Close(); r.Close() })
	w.setSpin(DefaultSpin, false)
	r.setSpin(DefaultSpin, false)
	return w, r
}

// TestSendFramesRoundTrip: frames sent by SendFrames come out of Recv one
// by one, in order, after a frame TrySend left half-sent.
func TestSendFramesRoundTrip(t *testing.T) {
	w, r := polledPair(t, 5*time.Second)
	const frameSize, n = 1 << 16, 5<<16 + 12
	p := bytes.Repeat([]byte{1, 2, 3, 4, 5}, n/5)
	// A first frame far larger than the socket buffer: TrySend leaves a
	// tail that SendFrames must send first.
	first := bytes.Repeat([]byte{0xee}, 16<<20)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		if _, err := w.TrySend(ctx, 1, first); err != nil {
			errc <- err
			return
		}
		errc <- w.SendFrames(ctx, 2, p, frameSize)
	}()
	buf := make([]byte, len(first))
	if tag, k, err := r.Recv(ctx, buf); err != nil || tag != 1 || k != len(first) || !bytes.Equal(buf[:k], first) {
		t.Fatalf("first frame: tag %d, %d bytes, %v", tag, k, err)
	}
	for off := 0; off < len(p); off += frameSize {
		want := p[off:min(off+frameSize, len(p))]
		tag, k, err := r.Recv(ctx, buf)
		if err != nil || tag != 2 || !bytes.Equal(buf[:k], want) {
			t.Fatalf("frame at %d: tag %d, %d bytes (want %d), %v", off, tag, k, len(want), err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSendFrames is why a message's frames go to the socket in
// batches (maxBatch, SendFrames): one end sends 4 MiB as 256 KiB frames,
// the other receives them frame by frame and answers with an empty frame,
// as a 2-rank broadcast does, with polling reads and writes (2 ranks on 2
// cores). The two ways of sending alternate message by message, so each
// is timed under the same conditions (this VM's speed moves 2-4× between
// seconds); the metrics are µs per message for each.
//
//	go test -run '^$' -bench SendFrames ./ascend/tcp
func BenchmarkSendFrames(b *testing.B) {
	const size, frameSize = 4 << 20, 256 << 10
	w, r := polledPair(b, 10*time.Second)
	ctx := context.Background()
	modes := []string{"per-frame", "batched"}
	var spent [2]time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // receiver
		defer wg.Done()
		dst := make([]byte, size)
		for range b.N * len(modes) {
			for off := 0; off < size; off += frameSize {
				if _, _, err := r.Recv(ctx, dst[off:off+frameSize]); err != nil {
					b.Error(err)
					return
				}
			}
			if err := r.Send(ctx, 0, nil); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	src := make([]byte, size)
	ack := make([]byte, 16)
	b.ResetTimer()
	for range b.N {
		for m := range modes {
			start := time.Now()
			var err error
			if m == 0 {
				for off := 0; off < size && err == nil; off += frameSize {
					err = w.Send(ctx, 1, src[off:off+frameSize])
				}
			} else {
				err = w.SendFrames(ctx, 1, src, frameSize)
			}
			if err == nil {
				_, _, err = w.Recv(ctx, ack)
			}
			if err != nil {
				b.Fatal(err)
			}
			spent[m] += time.Since(start)
		}
	}
	b.StopTimer()
	wg.Wait()
	for m, name := range modes {
		b.ReportMetric(float64(spent[m].Microseconds())/float64(b.N), "µs/msg-"+name)
	}
}

// TestTrySendFrames: TrySendFrames sends what the socket takes without
// waiting, in whole frames or with the tail of one frame held for
// FinishSend, and the frames that follow go out with SendFrames; the
// receiver sees every frame intact, in order. Small socket buffers and a
// receiver that starts late make the send stop short.
func TestTrySendFrames(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, frame int }{{3 << 20, 1 << 16}, {(1 << 20) + 5, 1000}, {0, 64}, {40, 64}} {
		t.Run(fmt.Sprintf("n%d/frame%d", tc.n, tc.frame), func(t *testing.T) {
			a, b := tcpPair(t)
			if err := a.SetWriteBuffer(64 << 10); err != nil {
				t.Fatal(err)
			}
			if err := b.SetReadBuffer(64 << 10); err != nil {
				t.Fatal(err)
			}
			w, r := newConn(a, 5*time.Second), newConn(b, 5*time.Second)
			defer w.Close()
			defer r.Close()
			w.setSpin(DefaultSpin, false)
			p := make([]byte, tc.n)
			for i := range p {
				p[i] = byte(i*13 + i>>10)
			}
			n, res, err := w.TrySendFrames(ctx, 3, p, tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			if n < 0 || n > len(p) || (n%tc.frame != 0 && n != len(p)) {
				t.Fatalf("n = %d of %d: not at a frame boundary", n, len(p))
			}
			if tc.n > 1<<20 && n == len(p) && res == ascend.TrySent {
				t.Fatalf("%d bytes sent at once through 64 KiB socket buffers", n)
			}
			errc := make(chan error, 1)
			go func() {
				if res == ascend.TryPartial {
					if err := w.FinishSend(ctx); err != nil {
						errc <- err
						return
					}
				}
				if n < len(p) {
					errc <- w.SendFrames(ctx, 3, p[n:], tc.frame)
					return
				}
				errc <- nil
			}()
			buf := make([]byte, tc.frame)
			for off := 0; off < len(p) || off == 0; off += tc.frame {
				want := p[off:min(off+tc.frame, len(p))]
				tag, k, err := r.Recv(ctx, buf)
				if err != nil || tag != 3 || !bytes.Equal(buf[:k], want) {
					w.Close()
					t.Fatalf("frame at %d (result %v, n %d): tag %d, %d bytes (want %d), %v; sender: %v", off, res, n, tag, k, len(want), err, <-errc)
				}
				if len(p) == 0 {
					break
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A deadline set by an earlier operation stands for the one asked only
// while it is at most opTimeout/deadlineSlack earlier, never later.
func TestKeepDeadline(t *testing.T) {
	c := &conn{opTimeout: 64 * time.Second} // slack: 1 s
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var none time.Time
	tests := []struct {
		name      string
		cur, want time.Time
		keep      bool
	}{
		{"none asked, none set", none, none, true},
		{"first deadline", none, now, false},
		{"deadline dropped", now, none, false},
		{"same", now, now, true},
		{"earlier within the slack", now, now.Add(time.Second), true},
		{"earlier beyond the slack", now, now.Add(time.Second + time.Nanosecond), false},
		{"later than asked", now.Add(time.Millisecond), now, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.keepDeadline(tc.cur, tc.want); got != tc.keep {
				t.Errorf("keepDeadline(%v, %v) = %v, want %v", tc.cur, tc.want, got, tc.keep)
			}
		})
	}
	// Without an operation timeout only the context's deadline counts,
	// exactly.
	c.opTimeout = 0
	if c.keepDeadline(now, now.Add(time.Nanosecond)) {
		t.Error("kept a deadline 1 ns early without a timeout")
	}
}
