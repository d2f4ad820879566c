//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// pair makes both sides of a fresh segment with rings of ringBytes.
func pair(t *testing.T, ringBytes int, opts0, opts1 ConnOptions) (*Conn, *Conn) {
	t.Helper()
	seg0, err := Create(t.TempDir(), ringBytes)
	if err != nil {
		t.Fatal(err)
	}
	seg1, err := Open(seg0.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := seg0.Unlink(); err != nil {
		t.Fatal(err)
	}
	c0, c1 := NewConn(seg0, 0, opts0), NewConn(seg1, 1, opts1)
	t.Cleanup(func() { c0.Close(); c1.Close() })
	return c0, c1
}

func payload(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
	return b
}

func TestFramesBothWays(t *testing.T) {
	c0, c1 := pair(t, 4096, ConnOptions{}, ConnOptions{})
	sizes := []int{0, 1, 100, 4088, 4096, 4097, 100_000, 3}
	ctx := context.Background()
	var wg sync.WaitGroup
	for dir, ends := range [][2]*Conn{{c0, c1}, {c1, c0}} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, n := range sizes {
				if err := ends[0].Send(ctx, uint32(dir*100+i), payload(n, dir+i)); err != nil {
					t.Errorf("send %d: %v", n, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 200_000)
			for i, n := range sizes {
				tag, got, err := ends[1].Recv(ctx, buf)
				if err != nil || tag != uint32(dir*100+i) || got != n || !bytes.Equal(buf[:got], payload(n, dir+i)) {
					t.Errorf("dir %d frame %d: tag %d, %d bytes, %v", dir, i, tag, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestShortBuffer(t *testing.T) {
	c0, c1 := pair(t, 0, ConnOptions{}, ConnOptions{})
	if err := c0.Send(context.Background(), 1, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c1.Recv(context.Background(), make([]byte, 9)); !errors.Is(err, io.ErrShortBuffer) {
		t.Fatalf("got %v", err)
	}
}

func TestDeadlines(t *testing.T) {
	c0, c1 := pair(t, 4096, ConnOptions{OpTimeout: 50 * time.Millisecond}, ConnOptions{})
	start := time.Now()
	if _, _, err := c0.Recv(context.Background(), nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("recv: %v", err)
	}
	// The ring holds 4 KiB; nobody reads.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c1.Send(ctx, 0, make([]byte, 10_000)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("send: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("deadlines took %v", d)
	}
}

func TestCloseWakesLocalCalls(t *testing.T) {
	c0, _ := pair(t, 0, ConnOptions{}, ConnOptions{})
	errc := make(chan error, 1)
	go func() {
		_, _, err := c0.Recv(context.Background(), nil)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c0.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("got %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not wake Recv")
	}
	if err := c0.Send(context.Background(), 0, nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
}

func TestPeerCloseDrainsThenEOF(t *testing.T) {
	c0, c1 := pair(t, 0, ConnOptions{}, ConnOptions{})
	ctx := context.Background()
	for i := range 2 {
		if err := c0.Send(ctx, uint32(i), payload(10, i)); err != nil {
			t.Fatal(err)
		}
	}
	c0.Close()
	buf := make([]byte, 10)
	for i := range 2 {
		if tag, n, err := c1.Recv(ctx, buf); err != nil || tag != uint32(i) || n != 10 {
			t.Fatalf("frame %d after close: %d %d %v", i, tag, n, err)
		}
	}
	if _, _, err := c1.Recv(ctx, buf); err != io.EOF {
		t.Errorf("after the frames: %v, want io.EOF", err)
	}
	if err := c1.Send(ctx, 0, buf); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("send to closed peer: %v", err)
	}
}

// TestLivenessNoticesDeath: a peer that dies without closing (its
// liveness connection drops) wakes a blocked Recv.
func TestLivenessNoticesDeath(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c0, _ := pair(t, 0, ConnOptions{Liveness: a}, ConnOptions{})
	errc := make(chan error, 1)
	go func() {
		_, _, err := c0.Recv(context.Background(), nil)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close() // the peer process is gone
	select {
	case err := <-errc:
		if err != io.EOF {
			t.Errorf("got %v, want io.EOF", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("peer death not noticed")
	}
}

func TestOpenRejectsOtherFiles(t *testing.T) {
	f := t.TempDir() + "/x"
	if err := os.WriteFile(f, make([]byte, segmentSize(pageSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f); err == nil {
		t.Error("opened a file without the magic")
	}
}

func TestStream(t *testing.T) {
	c0, c1 := pair(t, 64<<10, ConnOptions{}, ConnOptions{})
	const frames, size = 200, 100_000
	ctx := context.Background()
	go func() {
		for i := range frames {
			if err := c0.Send(ctx, uint32(i), payload(size, i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	buf := make([]byte, size)
	for i := range frames {
		tag, n, err := c1.Recv(ctx, buf)
		if err != nil || tag != uint32(i) || n != size || buf[size-1] != payload(size, i)[size-1] {
			t.Fatalf("frame %d: %d %d %v", i, tag, n, err)
		}
	}
}

func BenchmarkStream(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			seg0, _ := Create(b.TempDir(), 0)
			seg1, _ := Open(seg0.Path())
			c0, c1 := NewConn(seg0, 0, ConnOptions{}), NewConn(seg1, 1, ConnOptions{})
			defer c0.Close()
			defer c1.Close()
			src, dst := payload(size, 0), make([]byte, size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			go func() {
				for range b.N {
					c0.Send(ctx, 0, src)
				}
			}()
			for range b.N {
				if _, _, err := c1.Recv(ctx, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInline: TrySend takes frames beyond inlineMax only after
// SetInline(true), and then only while the ring has room for the whole
// frame.
func TestInline(t *testing.T) {
	ctx := context.Background()
	a, b := pair(t, 256<<10, ConnOptions{}, ConnOptions{})
	big := payload(100<<10, 3)
	if got := a.InlineBytes(); got != inlineMax {
		t.Fatalf("InlineBytes = %d, want %d", got, inlineMax)
	}
	if res, err := a.TrySend(ctx, 1, big); err != nil || res != ascend.TryRefused {
		t.Fatalf("TrySend(100 KiB) = %v, %v; want refused", res, err)
	}
	a.SetInline(true)
	if got := a.InlineBytes(); got != 256<<10 {
		t.Fatalf("SetInline(true): InlineBytes = %d, want the ring's 256 KiB", got)
	}
	for i := range 2 {
		if res, err := a.TrySend(ctx, uint32(2+i), big); err != nil || res != ascend.TrySent {
			t.Fatalf("SetInline(true): TrySend #%d = %v, %v; want sent", i, res, err)
		}
	}
	if res, err := a.TrySend(ctx, 9, big); err != nil || res != ascend.TryRefused {
		t.Fatalf("TrySend into a full ring = %v, %v; want refused", res, err)
	}
	buf := make([]byte, len(big))
	for i := range 2 {
		tag, n, err := b.Recv(ctx, buf)
		if err != nil || tag != uint32(2+i) || n != len(big) || !bytes.Equal(buf, big) {
			t.Fatalf("Recv #%d = tag %d, %d bytes, %v; want tag %d and the payload", i, tag, n, err, 2+i)
		}
	}
}

func TestRemoveStale(t *testing.T) {
	if !Supported {
		t.Skip("no shared memory here")
	}
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	for name, mtime := range map[string]time.Time{
		"ascend-w1234-r0-1": old, "ascend-deadbeef": old, // ours, old: go
		"ascend-w1234-r1-1": time.Now(), // ours, fresh: may be in use
		"other-program":     old,        // not ours
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveStale(dir, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v; want 2", n, err)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "ascend-w1234-r1-1" || names[1] != "other-program" {
		t.Errorf("left %v", names)
	}
}
