package ascend

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// pipeConn is a Conn over net.Pipe: fully synchronous, with no buffering at
// all, so a collective that does not overlap sends and receives deadlocks.
type pipeConn struct {
	c    net.Conn
	rhdr [8]byte
	whdr [8]byte
}

func (p *pipeConn) Send(ctx context.Context, tag uint32, b []byte) error {
	d, _ := ctx.Deadline()
	p.c.SetWriteDeadline(d)
	binary.LittleEndian.PutUint32(p.whdr[:], uint32(len(b)))
	binary.LittleEndian.PutUint32(p.whdr[4:], tag)
	if _, err := p.c.Write(p.whdr[:]); err != nil || len(b) == 0 {
		return err // (an empty pipe Write would wait for a Read that never comes)
	}
	_, err := p.c.Write(b)
	return err
}

func (p *pipeConn) Recv(ctx context.Context, b []byte) (uint32, int, error) {
	d, _ := ctx.Deadline()
	p.c.SetReadDeadline(d)
	if _, err := io.ReadFull(p.c, p.rhdr[:]); err != nil {
		return 0, 0, err
	}
	n := int(binary.LittleEndian.Uint32(p.rhdr[:]))
	if n > len(b) {
		return 0, 0, io.ErrShortBuffer
	}
	_, err := io.ReadFull(p.c, b[:n])
	return binary.LittleEndian.Uint32(p.rhdr[4:]), n, err
}

func (p *pipeConn) Close() error { return p.c.Close() }

// pipeGroup builds n communicators over a full mesh of pipes.
func pipeGroup(t *testing.T, n, chunkBytes int, native bool) []*Communicator {
	t.Helper()
	return meshGroup(t, n, chunkBytes, native, func() (net.Conn, net.Conn) { return net.Pipe() })
}

// tcpPair is a connected pair of loopback TCP connections (buffered, unlike
// pipes).
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func meshGroup(t *testing.T, n, chunkBytes int, native bool, pair func() (net.Conn, net.Conn)) []*Communicator {
	t.Helper()
	conns := make([][]Conn, n)
	for i := range conns {
		conns[i] = make([]Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, b := pair()
			conns[i][j], conns[j][i] = &pipeConn{c: a}, &pipeConn{c: b}
		}
	}
	comms := make([]*Communicator, n)
	for i := range n {
		c, err := New(Config{Rank: i, Size: n, Session: "pipe", Conns: conns[i], ChunkBytes: chunkBytes})
		if err != nil {
			t.Fatal(err)
		}
		c.native = native
		comms[i] = c
		t.Cleanup(func() { c.Close() })
	}
	return comms
}

func parallel(comms []*Communicator, fn func(c *Communicator) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

// TestCollectivesOverPipes runs every collective on synchronous pipes with a
// tiny chunk size (many frames per segment), on both the zero-copy and the
// portable (big-endian) wire paths.
func TestCollectivesOverPipes(t *testing.T) {
	// A collective that does not overlap send and receive deadlocks on
	// pipes; the deadline turns that into a failure instead of a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, native := range []bool{true, false} {
		for _, n := range []int{2, 3, 4, 7} {
			comms := pipeGroup(t, n, 12, native) // 3 floats per frame
			for _, length := range []int{0, 1, 2, 5, 31, 100} {
				for _, op := range []Op{Sum, Avg, Max, Min} {
					bufs := make([][]float32, n)
					want := make([]float64, length)
					for r := range bufs {
						bufs[r] = make([]float32, length)
						for i := range bufs[r] {
							v := float32(r*1000 + i) // exact in float32 sums
							bufs[r][i] = v
							switch {
							case r == 0:
								want[i] = float64(v)
							case op == Max:
								want[i] = math.Max(want[i], float64(v))
							case op == Min:
								want[i] = math.Min(want[i], float64(v))
							default:
								want[i] += float64(v)
							}
						}
					}
					errs := parallel(comms, func(c *Communicator) error {
						return c.AllReduce(ctx, bufs[c.Rank()], op)
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("native=%v n=%d len=%d %v: rank %d: %v", native, n, length, op, r, err)
						}
					}
					for r := range bufs {
						for i, v := range bufs[r] {
							w := want[i]
							if op == Avg {
								w = float64(float32(w) / float32(n))
							}
							if float64(v) != w {
								t.Fatalf("native=%v n=%d len=%d %v: rank %d [%d] = %v, want %v", native, n, length, op, r, i, v, w)
							}
						}
					}
				}
				for root := range n {
					bufs := make([][]float32, n)
					for r := range bufs {
						bufs[r] = make([]float32, length)
						for i := range bufs[r] {
							bufs[r][i] = float32(r*1000 + i)
						}
					}
					for r, err := range parallel(comms, func(c *Communicator) error {
						return c.Broadcast(ctx, bufs[c.Rank()], root)
					}) {
						if err != nil {
							t.Fatalf("native=%v n=%d len=%d: broadcast from %d: rank %d: %v", native, n, length, root, r, err)
						}
					}
					for r := range bufs {
						if !slices.Equal(bufs[r], bufs[root]) {
							t.Fatalf("native=%v n=%d len=%d: broadcast from %d: rank %d differs", native, n, length, root, r)
						}
					}
				}
			}
			for r, err := range parallel(comms, func(c *Communicator) error { return c.Barrier(ctx) }) {
				if err != nil {
					t.Fatalf("barrier rank %d: %v", r, err)
				}
			}
		}
	}
}

func TestSegmentPartition(t *testing.T) {
	buf := make([]float32, 101)
	for _, n := range []int{0, 1, 2, 3, 7, 99, 100, 101} {
		for p := 1; p <= 9; p++ {
			b := buf[:n]
			total := 0
			for i := range p {
				s := segment(b, p, i)
				if len(s) < n/p || len(s) > n/p+1 {
					t.Fatalf("n=%d p=%d: segment %d has %d elements", n, p, i, len(s))
				}
				if len(s) > 0 && &s[0] != &b[total] {
					t.Fatalf("n=%d p=%d: segment %d not contiguous", n, p, i)
				}
				total += len(s)
			}
			if total != n {
				t.Fatalf("n=%d p=%d: segments cover %d", n, p, total)
			}
		}
	}
}

func TestWireEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := make([]float32, 1000)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
	}
	f[0], f[1] = float32(math.Inf(-1)), float32(math.NaN())
	b := make([]byte, 4*len(f))
	encodeLE(b, f)
	if nativeLE && !slices.Equal(b, asBytes(f)) {
		t.Fatal("zero-copy view differs from little-endian encoding")
	}
	if binary.LittleEndian.Uint32(b[8:]) != math.Float32bits(f[2]) {
		t.Fatal("not little-endian")
	}
	g := make([]float32, len(f))
	decodeLE(g, b)
	for i := range f {
		if math.Float32bits(f[i]) != math.Float32bits(g[i]) {
			t.Fatalf("[%d] round trip %v → %v", i, f[i], g[i])
		}
	}
	for _, op := range []Op{Sum, Max, Min} {
		x, y := slices.Clone(f), slices.Clone(f)
		reduce(x, g, op)
		reduceLE(y, y, b, op)
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%v: reduceLE differs at %d", op, i)
			}
		}
	}
	if asBytes(nil) != nil {
		t.Fatal("asBytes(nil)")
	}
}

func TestNaNPropagates(t *testing.T) {
	nan := float32(math.NaN())
	for _, op := range []Op{Sum, Max, Min} {
		a := []float32{1, nan}
		reduce(a, []float32{nan, 2}, op)
		if !math.IsNaN(float64(a[0])) || !math.IsNaN(float64(a[1])) {
			t.Errorf("%v: NaN did not propagate: %v", op, a)
		}
	}
}

func TestNewValidates(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	pc := &pipeConn{c: a}
	for i, cfg := range []Config{
		{Rank: 0, Size: 0},
		{Rank: 2, Size: 2, Conns: []Conn{nil, pc}},
		{Rank: 0, Size: 2, Conns: []Conn{nil}},
		{Rank: 0, Size: 2, Conns: []Conn{pc, nil}},
		{Rank: 0, Size: 2, Conns: []Conn{nil, pc}, ChunkBytes: 3},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

func TestTag(t *testing.T) {
	tag := makeTag(0x123456, AlgoTree, CollBroadcast, 300)
	if tag>>16 != 0x3456 || Algorithm(tag>>12&0xF) != AlgoTree || Collective(tagKind(tag)) != CollBroadcast || tag&0xFF != 300&0xFF {
		t.Fatalf("%#x", tag)
	}
}

// TestCrashedRankNamedByAll: a rank whose links just drop (a crash: no
// notice of its own) is named by every survivor, the far ones through the
// notices of the near ones.
func TestCrashedRankNamedByAll(t *testing.T) {
	const world, victim = 5, 2
	comms := meshGroup(t, world, DefaultChunkBytes, true, func() (net.Conn, net.Conn) { return tcpPair(t) })
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r, c := range comms {
		if r == victim {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), make([]float32, 1<<16), Sum)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for _, p := range comms[victim].peers {
		if p != nil {
			p.conn.Close()
		}
	}
	wg.Wait()
	for r, err := range errs {
		if r == victim {
			continue
		}
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Rank != victim {
			t.Errorf("rank %d: %v, want a PeerError naming rank %d", r, err, victim)
		}
	}
}

func TestAbortNoticeErrors(t *testing.T) {
	c := &Communicator{rank: 0, size: 4}
	p := &peer{rank: 3}
	// A timeout seen directly, then passed on as a notice.
	direct := c.peerError("allreduce", p, os.ErrDeadlineExceeded)
	culprit, reason := c.noticeFor(direct)
	if culprit != 3 || reason != reasonTimeout {
		t.Fatalf("notice for timeout: %d %d", culprit, reason)
	}
	tag := uint32(culprit)<<12 | kindAbort<<8 | reason
	other := &Communicator{rank: 1, size: 4}
	pe := other.peerError("allreduce", &peer{rank: 0}, decodeNotice(tag))
	if pe.Rank != 3 || !pe.Timeout() || !errors.Is(pe, ErrPeerAborted) {
		t.Fatalf("learned from notice: %+v", pe)
	}
	if c2, r2 := other.noticeFor(pe); c2 != 3 || r2 != reasonTimeout {
		t.Fatalf("passed on: %d %d", c2, r2)
	}
	// A mismatch blamed on the receiver names the messenger.
	self := &Communicator{rank: 3, size: 4}
	pe = self.peerError("broadcast", &peer{rank: 0}, decodeNotice(uint32(3)<<12|kindAbort<<8|reasonMismatch))
	if pe.Rank != 0 || !errors.Is(pe, ErrMismatch) {
		t.Fatalf("mismatch notice: %+v", pe)
	}
	if _, r := c.noticeFor(ErrClosed); r != reasonAborted {
		t.Fatalf("close: reason %d", r)
	}
}

// TestReduceSinkSplitPieces: the in-place reduction folds a frame handed
// over in pieces of any size, floats split across pieces included.
func TestReduceSinkSplitPieces(t *testing.T) {
	const n = 37
	recv, base := make([]float32, n), make([]float32, n)
	for i := range recv {
		recv[i], base[i] = float32(i)*1.5, float32(100-i)
	}
	wire := make([]byte, 4*n)
	encodeLE(wire, recv)
	for _, piece := range []int{1, 3, 4, 5, 7, 148} {
		dst := make([]float32, n)
		s := &reduceSink{tag: 9, dst: dst, base: base, op: Sum}
		if err := s.Accept(9, 4*n); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(wire); off += piece {
			s.Consume(wire[off:min(len(wire), off+piece)])
		}
		for i := range dst {
			if dst[i] != base[i]+recv[i] {
				t.Fatalf("pieces of %d: [%d] = %v, want %v", piece, i, dst[i], base[i]+recv[i])
			}
		}
		if s.pos != n || s.nc != 0 {
			t.Fatalf("pieces of %d: folded %d, carry %d", piece, s.pos, s.nc)
		}
	}
	s := &reduceSink{tag: 9, dst: make([]float32, 2), base: make([]float32, 2)}
	if err := s.Accept(8, 8); !errors.Is(err, ErrMismatch) {
		t.Errorf("wrong tag: %v", err)
	}
	if err := s.Accept(9, 12); !errors.Is(err, ErrMismatch) {
		t.Errorf("wrong length: %v", err)
	}
}

// TestPipelineSegments: the tree and chain algorithms pipeline in segments
// of several frames (c.pipe; oversubPipeBytes when ranks outnumber cores)
// and the ranks need not agree on the segment, since a segment is whole
// frames. Broadcast, Reduce and the tree AllReduce over pipes, every rank
// with its own segment of 1 to 6 frames, lengths that end mid-frame.
func TestPipelineSegments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{3, 4, 5} {
		comms := pipeGroup(t, n, 12, true) // 3 floats per frame
		for r, c := range comms {
			c.pipe = c.chunk * (1 + (r*5)%6)
			c.model.Segment = 4 * c.pipe
		}
		for _, algo := range []Algorithm{AlgoTree, AlgoRing} {
			for r, err := range parallel(comms, func(c *Communicator) error { return c.SetAlgorithm(algo) }) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for _, length := range []int{1, 7, 31, 100} {
				input := func(r, i int) float32 { return float32(r*1000 + i) }
				for root := range n {
					bufs := make([][]float32, n)
					for r := range bufs {
						bufs[r] = make([]float32, length)
						for i := range bufs[r] {
							bufs[r][i] = input(r, i)
						}
					}
					for r, err := range parallel(comms, func(c *Communicator) error { return c.Reduce(ctx, bufs[c.Rank()], Sum, root) }) {
						if err != nil {
							t.Fatalf("n=%d %v len=%d: reduce to %d: rank %d: %v", n, algo, length, root, r, err)
						}
					}
					for i, v := range bufs[root] {
						want := float32(0)
						for r := range n {
							want += input(r, i)
						}
						if v != want {
							t.Fatalf("n=%d %v len=%d: reduce to %d: [%d] = %v, want %v", n, algo, length, root, i, v, want)
						}
					}
					for r, err := range parallel(comms, func(c *Communicator) error { return c.Broadcast(ctx, bufs[c.Rank()], root) }) {
						if err != nil {
							t.Fatalf("n=%d %v len=%d: broadcast from %d: rank %d: %v", n, algo, length, root, r, err)
						}
					}
					for r := range bufs {
						if !slices.Equal(bufs[r], bufs[root]) {
							t.Fatalf("n=%d %v len=%d: broadcast from %d: rank %d differs", n, algo, length, root, r)
						}
					}
				}
				if algo != AlgoTree {
					continue
				}
				bufs := make([][]float32, n)
				for r := range bufs {
					bufs[r] = make([]float32, length)
					for i := range bufs[r] {
						bufs[r][i] = input(r, i)
					}
				}
				for r, err := range parallel(comms, func(c *Communicator) error { return c.AllReduce(ctx, bufs[c.Rank()], Sum) }) {
					if err != nil {
						t.Fatalf("n=%d tree allreduce len=%d: rank %d: %v", n, length, r, err)
					}
				}
				for r := range bufs {
					for i, v := range bufs[r] {
						want := float32(0)
						for q := range n {
							want += input(q, i)
						}
						if v != want {
							t.Fatalf("n=%d tree allreduce len=%d: rank %d [%d] = %v, want %v", n, length, r, i, v, want)
						}
					}
				}
			}
		}
	}
}

// The cost model's choice is cached per collective and size, and a new
// model (SetCostModel) is asked again.
func TestChooseCacheFollowsTheModel(t *testing.T) {
	c := pipeGroup(t, 2, 0, true)[0]
	const bytes = 32 << 10 // one TCP segment: no wakeups in the way
	// Latency-bound links: recursive halving-doubling; bandwidth-bound
	// ones with free latency: the ring (fewer bytes per rank than RD).
	lat := CostModel{Alpha: time.Millisecond, Beta: 1e-12, Gamma: 1e-12}
	bw := CostModel{Alpha: time.Nanosecond, Beta: 1e-6, Gamma: 1e-12}
	c.SetCostModel(lat)
	want := lat.Choose(CollAllReduce, 2, bytes)
	if got := c.Algorithm(CollAllReduce, bytes); got != want || c.Algorithm(CollAllReduce, bytes) != want {
		t.Fatalf("latency-bound model: %v, want %v", got, want)
	}
	c.SetCostModel(bw)
	m := c.CostModel()
	want2 := m.Choose(CollAllReduce, 2, bytes)
	if want2 == want {
		t.Fatalf("both models choose %v: the test needs them to differ", want)
	}
	if got := c.Algorithm(CollAllReduce, bytes); got != want2 {
		t.Errorf("after SetCostModel: %v, want the new model's %v", got, want2)
	}
	if got, want := c.Algorithm(CollAllReduce, 8), m.Choose(CollAllReduce, 2, 8); got != want {
		t.Errorf("another size: %v, want %v", got, want)
	}
}
