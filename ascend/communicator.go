package ascend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
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
	children []*peer   // broadcast scratch

	stateMu sync.Mutex
	err     error // sticky failure
	aborted bool  // peers have been notified and links closed
	closed  bool
	quit    chan struct{}
	watch   chan watchReq // collective start → watcher
	unwatch chan struct{} // collective end → watcher
	wg      sync.WaitGroup
}

// peer is the link to one rank plus its writer goroutine, which lets the
// Communicator send and receive at the same time without allocating.
type peer struct {
	rank   int
	conn   Conn
	sendMu sync.Mutex   // held around every Send: abort notices go between frames
	jobs   chan sendJob // at most one outstanding job
	done   chan error
	exited chan struct{}
	enc    []byte // encode scratch for the portable wire path
}

type sendJob struct {
	ctx  context.Context
	tag  uint32
	data []float32
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
	c := &Communicator{
		rank:     cfg.Rank,
		size:     cfg.Size,
		session:  cfg.Session,
		peers:    make([]*peer, cfg.Size),
		chunk:    chunk / 4,
		native:   nativeLE,
		children: make([]*peer, 0, 8),
		quit:     make(chan struct{}),
		watch:    make(chan watchReq, 1),
		unwatch:  make(chan struct{}),
	}
	c.wg.Add(1)
	go c.watcher()
	for i, conn := range cfg.Conns {
		if conn == nil {
			continue
		}
		p := &peer{rank: i, conn: conn, jobs: make(chan sendJob, 1), done: make(chan error, 1), exited: make(chan struct{})}
		c.peers[i] = p
		c.wg.Add(1)
		go c.writer(p)
	}
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
// number and arms cancellation. The caller must call c.end(watched) when done.
// It must be called with opMu held.
func (c *Communicator) begin(ctx context.Context, op string) (seq uint32, watched bool, err error) {
	c.stateMu.Lock()
	err = c.stickyLocked()
	c.stateMu.Unlock()
	if err != nil {
		return 0, false, err
	}
	seq = c.seq
	c.seq++
	if cerr := ctx.Err(); cerr != nil {
		// Skipping a collective the peers run desynchronises the session.
		return 0, false, c.abort(fmt.Errorf("ascend: %s: %w", op, cerr))
	}
	watched = ctx.Done() != nil && c.size > 1
	if watched {
		c.watch <- watchReq{ctx: ctx, op: op} // the watcher is idle: never blocks
	}
	return seq, watched, nil
}

// end disarms cancellation. If cancellation fired, the links are closed and
// the Communicator is broken even if the collective itself completed; the
// next call reports it.
func (c *Communicator) end(watched bool) {
	if watched {
		select {
		case c.unwatch <- struct{}{}:
		case <-c.quit:
		}
	}
}

type watchReq struct {
	ctx context.Context
	op  string
}

// watcher aborts the collective in progress when its context is done. A
// long-lived goroutine instead of context.AfterFunc keeps collectives free
// of allocations for cancellable contexts too.
func (c *Communicator) watcher() {
	defer c.wg.Done()
	for {
		select {
		case w := <-c.watch:
			select {
			case <-w.ctx.Done():
				c.abort(fmt.Errorf("ascend: %s: %w", w.op, w.ctx.Err()))
				select {
				case <-c.unwatch:
				case <-c.quit:
					return
				}
			case <-c.unwatch:
			case <-c.quit:
				return
			}
		case <-c.quit:
			return
		}
	}
}

// Tag layout: seq (20 bits) | kind (4 bits) | aux (8 bits: op or root).
const (
	kindAllReduce = 1
	kindBroadcast = 2
	kindBarrier   = 3
)

func makeTag(seq uint32, kind, aux int) uint32 {
	return (seq&0xFFFFF)<<12 | uint32(kind&0xF)<<8 | uint32(aux&0xFF)
}

// writer runs p's sends so that send and receive overlap.
func (c *Communicator) writer(p *peer) {
	defer c.wg.Done()
	defer close(p.exited)
	for {
		select {
		case j := <-p.jobs:
			p.done <- c.sendFloats(j.ctx, p, j.tag, j.data)
		case <-c.quit:
			return
		}
	}
}

// startSend hands data to p's writer. There is at most one outstanding job
// per peer (every startSend is paired with a waitSend), so it never blocks.
func (c *Communicator) startSend(ctx context.Context, p *peer, tag uint32, data []float32) {
	p.jobs <- sendJob{ctx: ctx, tag: tag, data: data}
}

// waitSend waits for the job started on p. When it returns, the writer no
// longer touches the job's buffer.
func (c *Communicator) waitSend(p *peer) error {
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

// sendFloats sends data as ceil(len/chunk) frames (one empty frame if data
// is empty).
func (c *Communicator) sendFloats(ctx context.Context, p *peer, tag uint32, data []float32) error {
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
	if got != tag {
		if got>>8&0xF == kindAbort {
			return decodeNotice(got)
		}
		return fmt.Errorf("%w: got frame tag %#x (seq %d kind %d aux %d), want %#x (seq %d kind %d aux %d)",
			ErrMismatch, got, got>>12, got>>8&0xF, got&0xFF, tag, tag>>12, tag>>8&0xF, tag&0xFF)
	}
	if n != len(b) {
		return fmt.Errorf("%w: got a %d-byte frame, want %d bytes (buffer lengths differ?)", ErrMismatch, n, len(b))
	}
	return nil
}

// scratchFor returns a reusable receive buffer of n elements.
func (c *Communicator) scratchFor(n int) []float32 {
	if cap(c.scratch) < n {
		c.scratch = make([]float32, n)
	}
	return c.scratch[:n]
}

// recvReduce receives len(dst) elements from p, frame by frame, and folds
// them into dst with op. Reduction of one frame overlaps the transport
// receiving the next.
func (c *Communicator) recvReduce(ctx context.Context, p *peer, tag uint32, dst []float32, op Op) error {
	scratch := c.scratchFor(min(len(dst), c.chunk))
	for off := 0; ; {
		k := min(len(dst)-off, c.chunk)
		s := scratch[:k]
		b := asBytes(s)
		if err := recvFrame(ctx, p, tag, b); err != nil {
			return err
		}
		if c.native {
			reduce(dst[off:off+k], s, op)
		} else {
			reduceLE(dst[off:off+k], b, op)
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

// exchange sends data to `to` while receiving into dst from `from`, either
// reducing (reduce=true) or copying, and waits for both. It returns the
// sticky error on failure.
func (c *Communicator) exchange(ctx context.Context, opName string, tag uint32, to *peer, data []float32, from *peer, dst []float32, op Op, reduce bool) error {
	c.startSend(ctx, to, tag, data)
	var rerr error
	if reduce {
		rerr = c.recvReduce(ctx, from, tag, dst, op)
	} else {
		rerr = c.recvCopy(ctx, from, tag, dst)
	}
	if rerr != nil {
		// Abort first so the outstanding send is interrupted, then wait
		// for it so the writer is done with data before we return.
		err := c.fail(ctx, opName, from, rerr)
		_ = c.waitSend(to)
		return err
	}
	if serr := c.waitSend(to); serr != nil {
		return c.fail(ctx, opName, to, c.explainSendError(to, serr))
	}
	return nil
}

func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}
