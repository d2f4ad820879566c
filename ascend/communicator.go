package ascend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// DefaultChunkBytes is the frame size collectives pipeline large buffers in.
// All ranks of a session must use the same value.
const DefaultChunkBytes = 1 << 18

// Config describes one rank's view of a session for New.
type Config struct {
	Rank    int
	Size    int
	Session string
	// Conns[i] is the link to rank i; Conns[Rank] must be nil and every
	// other entry non-nil. New takes ownership on success: Close closes them.
	Conns []Conn
	// ChunkBytes is the largest frame payload (rounded down to a multiple
	// of 4; 0 means DefaultChunkBytes). It must be equal on all ranks.
	ChunkBytes int
	// Algorithm forces one algorithm for every collective that implements
	// it; the others choose automatically. AlgoAuto (the zero value) defers
	// to the ASCEND_ALGO environment variable (see ParseAlgorithmSpec),
	// then to the cost model. It must be equal on all ranks (frames carry
	// the algorithm, so a disagreement is reported as ErrMismatch).
	Algorithm Algorithm
	// Model is the α-β-γ cost model for automatic selection. The zero value
	// means DefaultCostModel until Calibrate measures the links.
	Model CostModel
	// IgnoreEnv makes New ignore ASCEND_ALGO.
	IgnoreEnv bool
	// Hosts[i] is rank i's host index (see HostIndex), equal on all ranks;
	// nil means unknown (one host, as far as the hierarchical algorithm is
	// concerned).
	Hosts []int
	// Shared, if set, maps memory shared with the ranks of this host
	// (AllocShared; package ascend/shm provides it); OpTimeout then bounds
	// each wait for a peer in the direct algorithms as the links' timeout
	// bounds frames (0: only the context's deadline).
	Shared    SharedMemory
	OpTimeout time.Duration
}

// Communicator is one rank's endpoint of a session. See the package
// documentation for the contract.
type Communicator struct {
	rank, size int
	session    string
	peers      []*peer // indexed by rank; nil for self
	chunk      int     // frame payload limit in float32 elements
	native     bool    // wire layout == memory layout (tests may clear it)

	opMu     sync.Mutex // serialises collectives
	seq      uint32
	scratch  []float32 // receive scratch for reductions, grown on demand
	children []*peer   // tree scratch
	force    [numColl]Algorithm
	initial  [numColl]Algorithm // force as configured (Config, ASCEND_ALGO)
	model    CostModel
	chosen   [numColl]choice // the model's last choice per collective (see choose)
	offs     []int           // partition scratch: p+1 offsets
	voffs    []int           // halving-doubling block offsets: p'+1
	acc      [2][]float32    // ping-pong segment accumulators (pipelined reduce)
	pipe     int             // pipeline segment of tree and chain, elements (see oversubPipeBytes)
	work     []float32       // workspace of out-of-place variants, grown on demand
	sink     reduceSink      // in-place reduction of received frames
	p2pSend  []uint32        // per-peer point-to-point sequence numbers
	p2pRecv  []uint32
	// Typed collectives (typed.go) run several operations on one scratch.
	typedMu sync.Mutex
	typed   typedState
	// Host groups (hierarchical.go): the ranks on this host and the host
	// leaders, ascending, and this rank's index among each (-1: not a
	// leader).
	local, leaders      []int
	localIdx, leaderIdx int
	// Shared buffers (shared.go, direct.go); win is set by AllocShared
	// under opMu.
	shared    SharedMemory
	opTimeout time.Duration
	win       *window

	stateMu sync.Mutex
	err     error // sticky failure
	aborted bool  // peers have been notified and links closed
	closed  bool
	quit    chan struct{}
	// Cancellation (see watcher), keyed by Done channel (comparable, unlike
	// some contexts): watchDone is the one the watcher watches (touched only
	// under opMu); activeDone and activeOp, under stateMu, are those of the
	// operation in progress (nil, "" between operations).
	watchDone  <-chan struct{}
	activeDone <-chan struct{}
	activeOp   string
	watch      chan context.Context // a new context to watch → watcher
	wg         sync.WaitGroup
}

// peer is the link to one rank plus its writer goroutine, which lets the
// Communicator send and receive at the same time without allocating.
type peer struct {
	rank   int
	conn   Conn
	sendMu sync.Mutex   // held around every Send: abort notices go between frames
	jobs   chan sendJob // at most one outstanding job
	busy   bool         // a job is outstanding (touched only under opMu)
	done   chan error
	exited chan struct{}
	enc    []byte // encode scratch for the portable wire path

	ts        TrySender       // conn as a TrySender, or nil
	fs        FramesSender    // conn as a FramesSender, or nil
	ip        InPlaceReceiver // conn as an InPlaceReceiver, or nil
	is        InlineSender    // conn as an InlineSender, or nil
	inline    bool            // the outstanding send completed in startSend
	inlineErr error           // and this was its result
}

type sendJob struct {
	ctx    context.Context
	tag    uint32
	data   []float32
	finish bool // first finish a frame TrySend left partly sent (then data, if any)
}

// New creates a Communicator over established links and starts one writer
// goroutine per peer. On error the caller keeps ownership of cfg.Conns.
func New(cfg Config) (*Communicator, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrInvalid, cfg.Rank, cfg.Size)
	}
	if len(cfg.Conns) != cfg.Size {
		return nil, fmt.Errorf("%w: %d conns for size %d", ErrInvalid, len(cfg.Conns), cfg.Size)
	}
	for i, c := range cfg.Conns {
		if (c == nil) != (i == cfg.Rank) {
			return nil, fmt.Errorf("%w: conns[%d] must be %s", ErrInvalid, i, map[bool]string{true: "nil", false: "non-nil"}[i == cfg.Rank])
		}
	}
	chunk := cfg.ChunkBytes
	if chunk == 0 {
		chunk = DefaultChunkBytes
	}
	if chunk < 4 {
		return nil, fmt.Errorf("%w: ChunkBytes %d", ErrInvalid, cfg.ChunkBytes)
	}
	if cfg.Hosts != nil && len(cfg.Hosts) != cfg.Size {
		return nil, fmt.Errorf("%w: %d host indices for size %d", ErrInvalid, len(cfg.Hosts), cfg.Size)
	}
	if !cfg.Algorithm.valid() {
		return nil, fmt.Errorf("%w: algorithm %d", ErrInvalid, uint8(cfg.Algorithm))
	}
	var force [numColl]Algorithm
	if cfg.Algorithm != AlgoAuto {
		force = forceAll(cfg.Algorithm)
	} else if spec := os.Getenv(EnvAlgorithm); spec != "" && !cfg.IgnoreEnv {
		f, err := ParseAlgorithmSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q: %w", ErrInvalid, EnvAlgorithm, spec, err)
		}
		force = f
	}
	model := cfg.Model
	if model == (CostModel{}) {
		model = DefaultCostModel()
	}
	model.Segment = chunk &^ 3
	c := &Communicator{
		rank:     cfg.Rank,
		size:     cfg.Size,
		session:  cfg.Session,
		peers:    make([]*peer, cfg.Size),
		chunk:    chunk / 4,
		native:   nativeLE,
		children: make([]*peer, 0, 8),
		force:    force,
		initial:  force,
		model:    model,
		offs:     make([]int, cfg.Size+1),
		voffs:    make([]int, cfg.Size+1),
		p2pSend:  make([]uint32, cfg.Size),
		p2pRecv:  make([]uint32, cfg.Size),
		quit:     make(chan struct{}),
		watch:    make(chan context.Context, 1),
		shared:   cfg.Shared,
	}
	c.opTimeout = cfg.OpTimeout
	c.hostGroups(cfg.Hosts)
	c.wg.Add(1)
	go c.watcher()
	for i, conn := range cfg.Conns {
		if conn == nil {
			continue
		}
		p := &peer{rank: i, conn: conn, jobs: make(chan sendJob, 1), done: make(chan error, 1), exited: make(chan struct{})}
		p.ts, _ = conn.(TrySender)
		p.fs, _ = conn.(FramesSender)
		p.ip, _ = conn.(InPlaceReceiver)
		p.is, _ = conn.(InlineSender)
		c.peers[i] = p
		c.wg.Add(1)
		go c.writer(p)
	}
	c.pipe = c.chunk
	if len(c.local) > runtime.NumCPU() && !c.memoryLinks() {
		c.pipe = max(1, oversubPipeBytes/4/c.chunk) * c.chunk
	}
	c.model.Segment = 4 * c.pipe
	c.chosen = [numColl]choice{}
	return c, nil
}

// Rank is this endpoint's rank in [0, Size()).
func (c *Communicator) Rank() int { return c.rank }

// Size is the number of ranks in the session.
func (c *Communicator) Size() int { return c.size }

// Session is the session identifier the Communicator was formed for.
func (c *Communicator) Session() string { return c.session }

// Err returns the error that broke the Communicator, ErrClosed after Close,
// or nil while it is usable.
func (c *Communicator) Err() error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.stickyLocked()
}

func (c *Communicator) stickyLocked() error {
	if c.closed {
		return ErrClosed
	}
	return c.err
}

// Close aborts any collective in progress, tells the peers (an abort
// notice, see abort.go), closes all links and waits for the Communicator's
// goroutines to exit. Later calls return ErrClosed; Close itself is
// idempotent.
func (c *Communicator) Close() error {
	c.stateMu.Lock()
	if c.closed {
		c.stateMu.Unlock()
		return nil
	}
	c.closed = true
	first := !c.aborted
	c.aborted = true
	if c.err == nil {
		c.err = ErrClosed
	}
	cause := c.err
	close(c.quit)
	c.stateMu.Unlock()
	if first {
		c.notifyPeers(cause)
	}
	var errs []error
	for _, p := range c.peers {
		if p != nil {
			if err := p.conn.Close(); err != nil {
				errs = append(errs, fmt.Errorf("ascend: close link to rank %d: %w", p.rank, err))
			}
		}
	}
	c.wg.Wait()
	c.opMu.Lock() // no collective reads the shared buffers any more
	c.win.close()
	c.opMu.Unlock()
	return errors.Join(errs...)
}

// abort records cause as the sticky error (unless one is already recorded),
// tells the peers why (first abort only) and closes every link, which
// interrupts blocked I/O here. It returns the recorded error.
func (c *Communicator) abort(cause error) error {
	c.stateMu.Lock()
	if c.err == nil {
		c.err = cause
	}
	err := c.stickyLocked()
	first := !c.aborted
	c.aborted = true
	c.stateMu.Unlock()
	if first {
		c.notifyPeers(err)
	}
	for _, p := range c.peers {
		if p != nil {
			_ = p.conn.Close() // failure is already recorded
		}
	}
	return err
}

// fail turns an error seen on the link to p during op into the sticky
// error. If the Communicator was aborted first (context, Close, another
// link), that earlier cause wins.
func (c *Communicator) fail(ctx context.Context, op string, p *peer, err error) error {
	if cerr := ctxErr(ctx); cerr != nil {
		return c.abort(fmt.Errorf("ascend: %s: %w", op, cerr))
	}
	return c.abort(c.peerError(op, p, err))
}

// ctxErr is ctx.Err(), also reporting an expired deadline whose timer has not
// fired yet (a Conn deadline derived from it may already have).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// begin starts a collective: it checks the sticky state, consumes a sequence
// number and arms cancellation. The caller must call c.end when done. It
// must be called with opMu held.
func (c *Communicator) begin(ctx context.Context, op string) (seq uint32, err error) {
	seq = c.seq
	c.seq++
	return seq, c.arm(ctx, op)
}

// arm checks the sticky state and arms cancellation for an operation that
// does not consume a collective sequence number (point-to-point). It must
// be called with opMu held.
//
// The watcher keeps watching a context after the operation ends, so a
// caller that passes the same context to every call (a training step
// loop) costs no goroutine hand-off per call; only a new context is sent
// to the watcher.
func (c *Communicator) arm(ctx context.Context, op string) error {
	done := ctx.Done()
	watched := done != nil && c.size > 1
	if watched && done != c.watchDone {
		select {
		case c.watch <- ctx:
		case <-c.quit:
		}
		c.watchDone = done
	}
	c.stateMu.Lock()
	err := c.stickyLocked()
	if err == nil && watched {
		// Marked active before ctx.Err is checked: a cancellation the
		// watcher finds with nothing active is seen by the check below.
		c.activeDone, c.activeOp = done, op
	}
	c.stateMu.Unlock()
	if err != nil {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		c.end()
		// Skipping a collective the peers run desynchronises the session.
		return c.abort(fmt.Errorf("ascend: %s: %w", op, cerr))
	}
	return nil
}

// end disarms cancellation. If cancellation fired, the links are closed and
// the Communicator is broken even if the collective itself completed; the
// next call reports it.
func (c *Communicator) end() {
	c.stateMu.Lock()
	c.activeDone, c.activeOp = nil, ""
	c.stateMu.Unlock()
}

// watcher aborts the operation in progress when the context it runs under
// is done. A long-lived goroutine instead of context.AfterFunc keeps
// operations free of allocations for cancellable contexts too; it watches
// the most recent context it was given (see arm).
func (c *Communicator) watcher() {
	defer c.wg.Done()
	var ctx context.Context
	for {
		var done <-chan struct{}
		if ctx != nil {
			done = ctx.Done()
		}
		select {
		case ctx = <-c.watch:
		case <-done:
			c.stateMu.Lock()
			active, op := c.activeDone == done, c.activeOp
			c.stateMu.Unlock()
			if active {
				c.abort(fmt.Errorf("ascend: %s: %w", op, ctx.Err()))
			}
			ctx = nil // done for good: the next arm with it fails by itself
		case <-c.quit:
			return
		}
	}
}

// Tag layout: seq (16 bits) | algorithm (4 bits) | kind (4 bits: the
// Collective) | aux (8 bits: op and/or root). Abort notices use kindAbort
// with their own layout (abort.go).
func makeTag(seq uint32, algo Algorithm, kind Collective, aux int) uint32 {
	return (seq&0xFFFF)<<16 | uint32(algo&0xF)<<12 | uint32(kind&0xF)<<8 | uint32(aux&0xFF)
}

// tagKind is the kind field of a tag.
func tagKind(tag uint32) uint32 { return tag >> 8 & 0xF }

func describeTag(tag uint32) string {
	return fmt.Sprintf("%#x (seq %d algo %v kind %v aux %d)", tag, tag>>16, Algorithm(tag>>12&0xF), Collective(tagKind(tag)), tag&0xFF)
}

// writer runs p's sends so that send and receive overlap.
func (c *Communicator) writer(p *peer) {
	defer c.wg.Done()
	defer close(p.exited)
	for {
		select {
		case j := <-p.jobs:
			if j.finish {
				p.sendMu.Lock()
				err := p.ts.FinishSend(j.ctx)
				p.sendMu.Unlock()
				if err != nil || len(j.data) == 0 {
					p.done <- err
					continue
				}
			}
			p.done <- c.sendFloats(j.ctx, p, j.tag, j.data)
		case <-c.quit:
			return
		}
	}
}

// inlineMaxBytes bounds the messages startSend offers a TrySender (which
// may refuse or take only part) unless it is an InlineSender: one frame,
// so that what the transport takes at once costs less than the hand-off to
// the writer goroutine (measured: a 64 KiB exchange over loopback TCP
// 95–130 µs → 41 µs).
const inlineMaxBytes = DefaultChunkBytes

// startSend starts sending data to p: whole frames go to a TrySender right
// here while they fit the inline budget (see InlineSender) and the
// transport takes them, the rest of the message (and whatever it refuses
// or leaves) to p's writer.
// There is at most one outstanding send per peer (every startSend is
// paired with a waitSend), so it never blocks.
func (c *Communicator) startSend(ctx context.Context, p *peer, tag uint32, data []float32) {
	p.busy = true
	off := 0
	if p.ts != nil && c.native {
		budget := inlineMaxBytes
		if p.is != nil {
			budget = p.is.InlineBytes()
		}
		if p.fs != nil && len(data) > c.chunk && budget >= 8*c.chunk {
			// Several frames at once, in batches (FramesSender).
			lim := min(len(data), budget/4/c.chunk*c.chunk)
			p.sendMu.Lock()
			n, res, err := p.fs.TrySendFrames(ctx, tag, asBytes(data[:lim]), 4*c.chunk)
			p.sendMu.Unlock()
			rest := data[n/4:]
			switch {
			case err != nil || (res == TrySent && len(rest) == 0):
				p.inline, p.inlineErr = true, err
			case res == TryPartial:
				p.jobs <- sendJob{ctx: ctx, tag: tag, data: rest, finish: true}
			default:
				p.jobs <- sendJob{ctx: ctx, tag: tag, data: rest}
			}
			return
		}
		for {
			k := min(len(data)-off, c.chunk)
			if 4*(off+k) > budget {
				break
			}
			p.sendMu.Lock()
			res, err := p.ts.TrySend(ctx, tag, asBytes(data[off:off+k]))
			p.sendMu.Unlock()
			if res == TryRefused && err == nil {
				break
			}
			off += k
			rest := data[off:]
			switch {
			case err != nil || (res == TrySent && len(rest) == 0):
				p.inline, p.inlineErr = true, err
				return
			case res == TryPartial:
				p.jobs <- sendJob{ctx: ctx, tag: tag, data: rest, finish: true}
				return
			}
		}
	}
	p.jobs <- sendJob{ctx: ctx, tag: tag, data: data[off:]}
}

// waitSend waits for the send started on p. When it returns, nothing
// touches the send's buffer any more.
func (c *Communicator) waitSend(p *peer) error {
	p.busy = false
	if p.inline {
		err := p.inlineErr
		p.inline, p.inlineErr = false, nil
		return err
	}
	select {
	case err := <-p.done:
		return err
	case <-c.quit:
		<-p.exited
		select {
		case err := <-p.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// sendBatchBytes bounds what one FramesSender call sends, so that abort
// notices (sent under sendMu) still find a gap between batches.
const sendBatchBytes = 4 << 20

// sendFloats sends data as ceil(len/chunk) frames (one empty frame if data
// is empty).
func (c *Communicator) sendFloats(ctx context.Context, p *peer, tag uint32, data []float32) error {
	if p.fs != nil && c.native && len(data) > c.chunk {
		batch := max(sendBatchBytes/4/c.chunk, 1) * c.chunk
		for off := 0; off < len(data); {
			k := min(len(data)-off, batch)
			p.sendMu.Lock()
			err := p.fs.SendFrames(ctx, tag, asBytes(data[off:off+k]), 4*c.chunk)
			p.sendMu.Unlock()
			if err != nil {
				return err
			}
			off += k
		}
		return nil
	}
	for off := 0; ; {
		k := min(len(data)-off, c.chunk)
		part := data[off : off+k]
		var b []byte
		if c.native {
			b = asBytes(part)
		} else {
			if cap(p.enc) < 4*k {
				p.enc = make([]byte, 4*min(len(data), c.chunk))
			}
			b = p.enc[:4*k]
			encodeLE(b, part)
		}
		p.sendMu.Lock()
		err := p.conn.Send(ctx, tag, b)
		p.sendMu.Unlock()
		if err != nil {
			return err
		}
		off += k
		if off >= len(data) {
			return nil
		}
	}
}

// recvFrame receives one frame of exactly len(b) bytes with the given tag.
func recvFrame(ctx context.Context, p *peer, tag uint32, b []byte) error {
	got, n, err := p.conn.Recv(ctx, b)
	if err != nil {
		if errors.Is(err, io.ErrShortBuffer) {
			return fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		return err
	}
	return checkFrame(got, tag, n, len(b))
}

// checkFrame checks a received frame's tag and length against the
// expected ones; an abort notice becomes the error it carries.
func checkFrame(got, want uint32, n, wantN int) error {
	if got != want {
		if tagKind(got) == kindAbort {
			return decodeNotice(got)
		}
		return fmt.Errorf("%w: got frame tag %s, want %s", ErrMismatch, describeTag(got), describeTag(want))
	}
	if n != wantN {
		return fmt.Errorf("%w: got a %d-byte frame, want %d bytes (buffer lengths differ?)", ErrMismatch, n, wantN)
	}
	return nil
}

// reduceSink folds a frame into dst as the transport hands it over (see
// InPlaceReceiver): dst[i] = base[i] op received[i].
type reduceSink struct {
	tag       uint32
	dst, base []float32
	op        Op
	pos       int     // elements folded so far
	carry     [4]byte // a float split across pieces
	nc        int
}

func (s *reduceSink) Accept(tag uint32, n int) error { return checkFrame(tag, s.tag, n, 4*len(s.dst)) }

func (s *reduceSink) Consume(b []byte) {
	if s.nc > 0 {
		k := copy(s.carry[s.nc:], b)
		s.nc += k
		b = b[k:]
		if s.nc < 4 {
			return
		}
		reduceLE(s.dst[s.pos:s.pos+1], s.base[s.pos:s.pos+1], s.carry[:], s.op)
		s.pos++
		s.nc = 0
	}
	if k := len(b) / 4; k > 0 {
		f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), k)
		reduce3(s.dst[s.pos:s.pos+k], s.base[s.pos:s.pos+k], f, s.op)
		s.pos += k
		b = b[4*k:]
	}
	s.nc = copy(s.carry[:], b)
}

// scratchFor returns a reusable receive buffer of n elements.
func (c *Communicator) scratchFor(n int) []float32 {
	if cap(c.scratch) < n {
		c.scratch = make([]float32, n)
	}
	return c.scratch[:n]
}

// workFor returns the reusable out-of-place workspace of n elements. Its
// contents are unspecified.
func (c *Communicator) workFor(n int) []float32 {
	if cap(c.work) < n {
		c.work = make([]float32, n)
	}
	return c.work[:n]
}

// accFor returns ping-pong accumulator i (0 or 1) of n ≤ c.pipe elements.
func (c *Communicator) accFor(i, n int) []float32 {
	if cap(c.acc[i]) < n {
		c.acc[i] = make([]float32, min(c.pipe, max(n, 1024)))
	}
	return c.acc[i][:n]
}

// recvReduce receives len(dst) elements from p, frame by frame, and
// stores base[i] op received[i] into dst[i] (base may be dst itself: an
// in-place fold). Reduction of one frame overlaps the transport receiving
// the next.
func (c *Communicator) recvReduce(ctx context.Context, p *peer, tag uint32, dst, base []float32, op Op) error {
	if p.ip != nil && c.native {
		s := &c.sink
		for off := 0; ; {
			k := min(len(dst)-off, c.chunk)
			*s = reduceSink{tag: tag, dst: dst[off : off+k], base: base[off : off+k], op: op}
			err := p.ip.RecvInPlace(ctx, s)
			s.dst, s.base = nil, nil
			if err != nil {
				return err
			}
			off += k
			if off >= len(dst) {
				return nil
			}
		}
	}
	scratch := c.scratchFor(min(len(dst), c.chunk))
	for off := 0; ; {
		k := min(len(dst)-off, c.chunk)
		s := scratch[:k]
		b := asBytes(s)
		if err := recvFrame(ctx, p, tag, b); err != nil {
			return err
		}
		if c.native {
			reduce3(dst[off:off+k], base[off:off+k], s, op)
		} else {
			reduceLE(dst[off:off+k], base[off:off+k], b, op)
		}
		off += k
		if off >= len(dst) {
			return nil
		}
	}
}

// recvCopy receives len(dst) elements from p into dst; on little-endian
// hosts straight into dst.
func (c *Communicator) recvCopy(ctx context.Context, p *peer, tag uint32, dst []float32) error {
	for off := 0; ; {
		k := min(len(dst)-off, c.chunk)
		part := dst[off : off+k]
		if c.native {
			if err := recvFrame(ctx, p, tag, asBytes(part)); err != nil {
				return err
			}
		} else {
			b := asBytes(c.scratchFor(k))
			if err := recvFrame(ctx, p, tag, b); err != nil {
				return err
			}
			decodeLE(part, b)
		}
		off += k
		if off >= len(dst) {
			return nil
		}
	}
}

// recv receives len(dst) elements from p: folded with base when reduce is
// set (see recvReduce), copied otherwise.
func (c *Communicator) recv(ctx context.Context, p *peer, tag uint32, dst, base []float32, op Op, reduce bool) error {
	if reduce {
		return c.recvReduce(ctx, p, tag, dst, base, op)
	}
	return c.recvCopy(ctx, p, tag, dst)
}

// drain waits for every outstanding send after a failure, so that no
// writer touches a caller's buffer once the collective returns.
func (c *Communicator) drain() {
	for _, p := range c.peers {
		if p != nil && p.busy {
			_ = c.waitSend(p)
		}
	}
}

// failRecv turns a receive error on the link to p into the sticky error:
// it aborts (interrupting outstanding sends), then drains them.
func (c *Communicator) failRecv(ctx context.Context, opName string, p *peer, err error) error {
	err = c.fail(ctx, opName, p, err)
	c.drain()
	return err
}

// failSend is failRecv for a failed send to p; p's own abort notice, if it
// left one, explains the failure better than the broken pipe.
func (c *Communicator) failSend(ctx context.Context, opName string, p *peer, err error) error {
	err = c.fail(ctx, opName, p, c.explainSendError(p, err))
	c.drain()
	return err
}

// finishSend waits for the send outstanding on p and reports its failure.
func (c *Communicator) finishSend(ctx context.Context, opName string, p *peer) error {
	if err := c.waitSend(p); err != nil {
		return c.failSend(ctx, opName, p, err)
	}
	return nil
}

// sendTo sends data to p and waits for the transport to take it.
func (c *Communicator) sendTo(ctx context.Context, opName string, tag uint32, p *peer, data []float32) error {
	c.startSend(ctx, p, tag, data)
	return c.finishSend(ctx, opName, p)
}

// recvFrom receives from p (see recv) and turns a failure into the sticky
// error.
func (c *Communicator) recvFrom(ctx context.Context, opName string, tag uint32, p *peer, dst, base []float32, op Op, reduce bool) error {
	if err := c.recv(ctx, p, tag, dst, base, op, reduce); err != nil {
		return c.failRecv(ctx, opName, p, err)
	}
	return nil
}

// exchange sends data to `to` while receiving into dst from `from`,
// either folding with base (reduce=true, see recvReduce) or copying, and
// waits for both. It returns the sticky error on failure.
func (c *Communicator) exchange(ctx context.Context, opName string, tag uint32, to *peer, data []float32, from *peer, dst, base []float32, op Op, reduce bool) error {
	return c.exchange2(ctx, opName, tag, to, data, tag, from, dst, base, op, reduce)
}

// exchange2 is exchange with distinct tags for the two directions.
func (c *Communicator) exchange2(ctx context.Context, opName string, stag uint32, to *peer, data []float32, rtag uint32, from *peer, dst, base []float32, op Op, reduce bool) error {
	c.startSend(ctx, to, stag, data)
	if err := c.recv(ctx, from, rtag, dst, base, op, reduce); err != nil {
		return c.failRecv(ctx, opName, from, err)
	}
	return c.finishSend(ctx, opName, to)
}

func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}
