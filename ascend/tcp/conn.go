package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cann-train/cann-train/ascend"
)

// MaxFrame is the largest frame payload accepted on the wire.
const MaxFrame = 64 << 20

const (
	// frameHdr is a frame's header: length, tag and 8 reserved bytes,
	// which must be zero.
	frameHdr = 16
	// frameAlign: every frame on the wire is padded with zeros to a
	// multiple of frameAlign bytes, so that every payload starts
	// frameAlign-aligned in the stream, as it does in the caller's buffer.
	// The kernel copies a payload between the caller's buffer and socket
	// buffer pages laid out as the stream is; when the two are misaligned
	// by 4, 8 or 12 bytes (as an 8-byte header left them) the copies are
	// far slower on this machine's CPU (AMD EPYC): two processes exchanging
	// 1 MiB over loopback with writev(header, payload) took 420–464 µs
	// with an 8-byte header against 280–290 µs with a 16- or 32-byte one,
	// 256 KiB 136–165 against 56–58 µs, and a 2-rank 256 KiB allreduce
	// went from 191–223 to 85–151 µs (six alternating pairs).
	// BenchmarkLoopbackPrefix shows it in Go, prefixes alternating message
	// by message: 1 MiB each way, 354–418 µs with no prefix, 357–421 with
	// 16 bytes, 498–592 with 8.
	frameAlign = 16
	// minFrameBuf is the smallest read buffer a frameReader works with: a
	// header and the padding of the frame before it.
	minFrameBuf = frameHdr + frameAlign - 1
	smallFrame  = 32 << 10 // frames up to this size go out in one write
	// maxBatch is the most frames SendFrames hands to one writev: a
	// writer that hands the kernel 4 MiB at a time rather than 256 KiB
	// keeps a loopback stream moving faster. 4 MiB messages as 256 KiB
	// frames, received frame by frame and acknowledged, alternating
	// message by message: a C program took 755–862 µs (median) with 16
	// frames per writev against 1130–1349 µs with one writev per frame;
	// BenchmarkSendFrames, in Go, 922–937 against 1048–1059 µs.
	maxBatch = 16
)

// padLen is the padding after a payload of n bytes.
func padLen(n int) int { return -n & (frameAlign - 1) }

// putHeader writes a frame header for a payload of n bytes into h.
func putHeader(h []byte, n int, tag uint32) {
	binary.LittleEndian.PutUint32(h[0:], uint32(n))
	binary.LittleEndian.PutUint32(h[4:], tag)
	clear(h[8:frameHdr])
}

// conn is an ascend.Conn over one TCP connection.
type conn struct {
	nc        *net.TCPConn
	opTimeout time.Duration
	fr        frameReader // frames read through a small buffer
	wbuf      []byte      // header + small payloads + padding, allocated once
	iov       [3][]byte   // header, payload and padding of a large frame
	bufs      net.Buffers // writev view of iov, consumed by each write
	closeOnce sync.Once

	// Receive polling (see spinReader): spin is how long a read polls the
	// socket before it sleeps in the kernel; 0 never polls.
	rd spinReader
	wr spinWriter

	// pending is the unsent tail of a frame TrySend started: the rest of
	// thdr, of the caller's payload and of the padding.
	pending [3][]byte
	thdr    [frameHdr]byte
	pad     [frameAlign]byte // zeros

	// SendFrames' headers and write vector: header, payload and padding
	// of up to maxBatch frames.
	bhdr [maxBatch][frameHdr]byte
	biov [3 * maxBatch][]byte
	bbuf net.Buffers // writev view of biov

	inlineAll bool // see InlineBytes

	// The read and write deadlines last set on nc (see setDeadline): the
	// receiver owns rdl, the sender (one at a time) wdl.
	rdl, wdl time.Time
}

var _ ascend.Conn = (*conn)(nil)

func newConn(nc *net.TCPConn, opTimeout time.Duration) *conn {
	c := &conn{nc: nc, opTimeout: opTimeout, wbuf: make([]byte, frameHdr+smallFrame+frameAlign)}
	c.rd.nc = nc
	c.fr = frameReader{r: nc, buf: make([]byte, frameHdr+smallFrame)}
	if rc, err := nc.SyscallConn(); err == nil {
		// Method values made once: polled I/O stays allocation-free.
		c.rd.rc, c.rd.fn = rc, c.rd.poll
		c.fr.spin = &c.rd
		c.wr.rc, c.wr.fn = rc, c.wr.poll
	}
	c.wr.spin = -1 // until setSpin: TrySend's single attempts still work
	return c
}

// setSpin sets how long each read and write polls before sleeping in the
// netpoller (0: never), and whether polls yield the CPU to other processes
// (yieldOS) or only to other goroutines.
func (c *conn) setSpin(d time.Duration, yieldOS bool) {
	if c.rd.rc == nil {
		return
	}
	c.rd.yieldOS, c.wr.yieldOS = yieldOS, yieldOS
	c.rd.spin = max(d, 0)
	c.wr.spin = max(d, 0)
	if d <= 0 {
		c.wr.spin = -1
	}
}

func (c *conn) deadline(ctx context.Context) time.Time { return ascend.OpDeadline(ctx, c.opTimeout) }

// deadlineSlack is how much earlier than asked an operation's deadline may
// fall, as a fraction of the operation timeout: a deadline set by an
// earlier operation is kept while it lies within opTimeout/deadlineSlack
// before the one this operation asks for.
const deadlineSlack = 64

func (c *conn) setWriteDeadline(ctx context.Context) error { return c.setDeadline(ctx, true) }

func (c *conn) setReadDeadline(ctx context.Context) error { return c.setDeadline(ctx, false) }

// setDeadline brings the write (or read) deadline to what ctx and the
// operation timeout ask for, unless the one in force is at most
// opTimeout/deadlineSlack earlier (never later): a stuck peer is still
// detected within the timeout, and back-to-back operations skip the
// runtime timer update each deadline change costs (~130 ns a call here,
// two per exchange).
func (c *conn) setDeadline(ctx context.Context, write bool) error {
	last := &c.rdl
	if write {
		last = &c.wdl
	}
	want := c.deadline(ctx)
	if c.keepDeadline(*last, want) {
		return nil
	}
	var err error
	if write {
		err = c.nc.SetWriteDeadline(want)
	} else {
		err = c.nc.SetReadDeadline(want)
	}
	if err != nil {
		return err
	}
	*last = want
	return nil
}

// keepDeadline: the deadline in force (cur) may stand for want (see
// setDeadline).
func (c *conn) keepDeadline(cur, want time.Time) bool {
	if cur.IsZero() || want.IsZero() {
		return cur.Equal(want)
	}
	return !cur.After(want) && want.Sub(cur) <= c.opTimeout/deadlineSlack
}

// Send implements ascend.Conn.
func (c *conn) Send(ctx context.Context, tag uint32, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(p) > MaxFrame {
		return fmt.Errorf("%w: frame of %d bytes exceeds %d", ascend.ErrProtocol, len(p), MaxFrame)
	}
	if err := c.setWriteDeadline(ctx); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	h := c.wbuf[:frameHdr]
	putHeader(h, len(p), tag)
	pad := padLen(len(p))
	if len(p) <= smallFrame {
		n := copy(c.wbuf[frameHdr:], p)
		b := c.wbuf[:frameHdr+n+pad]
		clear(b[frameHdr+n:])
		if c.wr.spin > 0 {
			return c.wr.write(b, nil, nil, false)
		}
		_, err := c.nc.Write(b)
		return err
	}
	if c.wr.spin > 0 {
		return c.wr.write(h, p, c.pad[:pad], false)
	}
	// One writev: with TCP_NODELAY a separate header write would leave as
	// its own segment and wake the reader twice.
	c.iov = [3][]byte{h, p, c.pad[:pad]}
	c.bufs = c.iov[:]
	_, err := c.bufs.WriteTo(c.nc)
	c.iov = [3][]byte{}
	return err
}

// TrySend implements ascend.TrySender: the frame is written with
// non-blocking writev calls (no copy) until the socket buffer is full. A
// tail left over keeps pointing into p, which the caller keeps intact until
// FinishSend has returned.
func (c *conn) TrySend(ctx context.Context, tag uint32, p []byte) (ascend.TrySendResult, error) {
	_, res, err := c.TrySendFrames(ctx, tag, p, max(len(p), 1)) // one frame
	return res, err
}

// SendFrames implements ascend.FramesSender: up to maxBatch frames go to
// the socket with one writev.
func (c *conn) SendFrames(ctx context.Context, tag uint32, p []byte, frame int) error {
	if frame <= 0 || frame > MaxFrame {
		return fmt.Errorf("%w: frames of %d bytes (at most %d)", ascend.ErrProtocol, frame, MaxFrame)
	}
	if len(p) <= frame {
		return c.Send(ctx, tag, p)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.setWriteDeadline(ctx); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	for len(p) > 0 {
		k, nf := c.batch(tag, p, frame)
		p = p[min(len(p), nf*frame):]
		var err error
		if c.wr.spin > 0 {
			err = c.wr.writeAll(c.biov[:k], false)
		} else {
			c.bbuf = c.biov[:k]
			_, err = c.bbuf.WriteTo(c.nc)
		}
		clear(c.biov[:k])
		if err != nil {
			return err
		}
	}
	return nil
}

// batch lays out up to maxBatch frames of p in c.biov (header, payload,
// padding only where there is any) and returns the number of entries and
// of frames.
func (c *conn) batch(tag uint32, p []byte, frame int) (entries, frames int) {
	k, f := 0, 0
	for ; f < maxBatch && (len(p) > 0 || f == 0); f++ {
		n := min(len(p), frame)
		putHeader(c.bhdr[f][:], n, tag)
		c.biov[k], c.biov[k+1] = c.bhdr[f][:], p[:n]
		k += 2
		if pad := padLen(n); pad > 0 {
			c.biov[k] = c.pad[:pad]
			k++
		}
		p = p[n:]
	}
	return k, f
}

// TrySendFrames implements ascend.FramesSender: batches of frames go to
// the socket with non-blocking writevs (no copy) until it is full.
func (c *conn) TrySendFrames(ctx context.Context, tag uint32, p []byte, frame int) (int, ascend.TrySendResult, error) {
	if frame <= 0 || frame > MaxFrame || c.wr.rc == nil || c.pendingLen() > 0 {
		return 0, ascend.TryRefused, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, ascend.TrySent, err
	}
	if err := c.setWriteDeadline(ctx); err != nil {
		return 0, ascend.TrySent, err
	}
	sent := 0
	for first := true; first || sent < len(p); first = false {
		k, nf := c.batch(tag, p[sent:], frame)
		if err := c.wr.writeAll(c.biov[:k], true); err != nil {
			clear(c.biov[:k])
			return sent, ascend.TrySent, err
		}
		// Walk the frames: sent whole, begun (the Conn keeps its tail),
		// or not begun (the caller sends it later).
		e := 0
		for f := range nf {
			n := min(len(p)-sent, frame)
			hl, pl := len(c.biov[e]), len(c.biov[e+1])
			tl := 0
			if padLen(n) > 0 {
				tl = len(c.biov[e+2])
			}
			switch {
			case hl == 0 && pl == 0 && tl == 0:
				sent += n
				e += 2 + min(padLen(n), 1)
				continue
			case hl < frameHdr:
				c.thdr = c.bhdr[f]
				c.pending = [3][]byte{c.thdr[frameHdr-hl:], c.biov[e+1], c.pad[:tl]}
				clear(c.biov[:k])
				return sent + n, ascend.TryPartial, nil
			}
			clear(c.biov[:k])
			if sent == 0 {
				return 0, ascend.TryRefused, nil
			}
			return sent, ascend.TrySent, nil
		}
		clear(c.biov[:k])
	}
	return sent, ascend.TrySent, nil
}

// pendingLen is the number of bytes TrySend left to send.
func (c *conn) pendingLen() int { return len(c.pending[0]) + len(c.pending[1]) + len(c.pending[2]) }

// FinishSend implements ascend.TrySender.
func (c *conn) FinishSend(ctx context.Context) error {
	if c.pendingLen() == 0 {
		return nil
	}
	if err := c.setWriteDeadline(ctx); err != nil {
		return err
	}
	return c.flush()
}

// flush writes the tail of a frame TrySend started, under the write
// deadline already set.
func (c *conn) flush() error {
	if c.pendingLen() == 0 {
		return nil
	}
	var err error
	if c.wr.spin > 0 {
		err = c.wr.write(c.pending[0], c.pending[1], c.pending[2], false)
	} else {
		b := net.Buffers{c.pending[0], c.pending[1], c.pending[2]}
		_, err = b.WriteTo(c.nc)
	}
	c.pending = [3][]byte{}
	return err
}

// Recv implements ascend.Conn.
func (c *conn) Recv(ctx context.Context, p []byte) (uint32, int, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if err := c.setReadDeadline(ctx); err != nil {
		return 0, 0, err
	}
	c.fr.polled = c.rd.spin > 0
	return c.fr.next(p)
}

// spinReader reads a TCP socket the way MPI progress engines do: it polls
// the non-blocking socket for up to spin (see pollYield for what runs
// between polls), and only then parks in the Go netpoller. A
// netpoller wake-up costs 20–40 µs on a small VM, more than a whole
// small-message exchange, so polling briefly cuts small-message latency
// 3–4×; it is only worth it while the ranks on a host do not outnumber its
// cores (tcp.Options.Spin chooses).
type spinReader struct {
	nc      *net.TCPConn
	rc      syscall.RawConn
	fn      func(fd uintptr) bool // r.poll
	spin    time.Duration
	yieldOS bool

	// State of the Read in progress, shared with poll: p, then p2 (a
	// vectored read; p2 is empty for a plain one).
	p     []byte
	p2    []byte
	iov   [2]syscall.Iovec
	n     int
	err   error
	until time.Time
}

// Read implements io.Reader. Deadlines set on nc apply (the netpoller
// enforces them once polling gives up).
func (r *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	r.until = time.Now().Add(r.spin)
	if err := r.rc.Read(r.fn); err != nil { // closed, or past the deadline
		r.p = nil
		return 0, err
	}
	n, err := r.n, r.err
	r.p, r.err = nil, nil
	return n, err
}

// readv reads into h, then p, in one system call (see Read); h must not
// be empty.
func (r *spinReader) readv(h, p []byte) (int, error) {
	r.p2 = p
	n, err := r.Read(h)
	r.p2 = nil
	return n, err
}

// spinWriter is spinReader's counterpart: it writes a frame with writev on
// the non-blocking socket and, while the socket buffer is full, polls for
// up to spin (restarted whenever the peer drains some) before it parks in
// the netpoller.
type spinWriter struct {
	rc      syscall.RawConn
	fn      func(fd uintptr) bool // w.poll
	spin    time.Duration
	yieldOS bool

	b     [][]byte  // what is left to write: bs, or a batch of frames
	bs    [3][]byte // write's header, payload and padding
	iov   [3 * maxBatch]syscall.Iovec
	err   error
	until time.Time
	once  bool // do not wait: stop at the first EAGAIN
}

// write sends h, p and t as one stream write (p and t may be empty).
func (w *spinWriter) write(h, p, t []byte, once bool) error {
	w.bs = [3][]byte{h, p, t}
	err := w.writeAll(w.bs[:], once)
	w.bs = [3][]byte{}
	return err
}

// writeAll sends the buffers of b (at most len(w.iov)) as one stream
// write; it consumes b's elements.
func (w *spinWriter) writeAll(b [][]byte, once bool) error {
	w.b = b
	w.err = nil
	w.once = once
	w.until = time.Now().Add(max(w.spin, 0))
	err := w.rc.Write(w.fn) // closed, or past the deadline
	w.b = nil
	if err != nil {
		return err
	}
	return w.err
}

func (w *spinWriter) poll(fd uintptr) bool {
	for i := 1; ; i++ {
		k := 0
		for _, b := range w.b {
			if len(b) > 0 && k < len(w.iov) {
				w.iov[k].Base = &b[0]
				w.iov[k].SetLen(len(b))
				k++
			}
		}
		if k == 0 {
			return true
		}
		// Raw: the socket is non-blocking (see pollYield).
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(k))
		switch {
		case errno == 0:
			for i := range w.b {
				d := min(int(n), len(w.b[i]))
				w.b[i] = w.b[i][d:]
				n -= uintptr(d)
			}
			w.until = time.Now().Add(w.spin)
			continue
		case errno == syscall.EINTR:
			continue
		case errno != syscall.EAGAIN:
			w.err = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("writev", errno)}
			return true
		case w.once:
			return true
		}
		if !time.Now().Before(w.until) {
			return false
		}
		pollYield(w.yieldOS, i)
	}
}

// poll is the RawConn callback: true when the read finished (data, EOF or
// an error), false to wait in the netpoller.
func (r *spinReader) poll(fd uintptr) bool {
	for i := 1; ; i++ {
		// Raw: the socket is non-blocking (see pollYield).
		var n uintptr
		var errno syscall.Errno
		if len(r.p2) > 0 {
			r.iov[0].Base, r.iov[1].Base = &r.p[0], &r.p2[0]
			r.iov[0].SetLen(len(r.p))
			r.iov[1].SetLen(len(r.p2))
			n, _, errno = syscall.RawSyscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), 2)
		} else {
			n, _, errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		}
		switch {
		case errno == 0 && n > 0:
			r.n = int(n)
			return true
		case errno == 0:
			r.err = io.EOF
			return true
		case errno == syscall.EINTR:
			continue
		case errno != syscall.EAGAIN:
			r.err = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
			return true
		}
		now := time.Now()
		if !now.Before(r.until) {
			return false
		}
		if !r.yieldOS {
			pollPause(now)
		}
		pollYield(r.yieldOS, i)
	}
}

// pollGap is how long a polling read waits, spinning in user space, after
// a read that found the socket empty. Every read of a socket takes its
// lock, and so does the delivery of the data being waited for (over
// loopback the sending process's CPU queues it): back-to-back reads fight
// the delivery for that lock. perf of a 2-rank 4 KiB reducescatter showed
// 6 % of all CPU time in the lock's slow path (lock_sock_nested from
// tcp_recvmsg) and 3 % in clock reads. With a 1 µs gap, alternating
// builds with 2 ranks on 2 cores over TCP, 20,000 iterations each, five
// rounds (medians): reducescatter 4 KiB 11.0 µs against 12.4 (Open MPI
// 10.7), allgather 9.6 against 10.8 (10.0), alltoall 10.8 against 11.3
// (10.3), allreduce 10.1 against 10.2 (18.7); 64 KiB and 256 KiB
// allreduce busbw 2.1 and 4.3 GB/s against 1.8 and 3.7, 1–16 MiB within
// noise. Ranks that outnumber the cores yield the CPU between reads
// instead (pollYield).
const pollGap = time.Microsecond

// pollPause spins until pollGap after now, touching no socket and making
// no system call.
func pollPause(now time.Time) {
	for end := now.Add(pollGap); time.Now().Before(end); {
	}
}

// Close implements ascend.Conn.
func (c *conn) Close() error {
	err := error(nil)
	c.closeOnce.Do(func() { err = c.nc.Close() })
	return err
}

// frameReader reads frames so that a frame already in the socket costs one
// system call, not two (header, then payload). With a polling reader the
// read that fetches the header is vectored: its second part is the head
// of the caller's buffer (at most len(buf) less the header and the last
// frame's padding), so the payload lands where it belongs, and only what
// turns out to lie past the frame (its padding and the next frames, when
// this one is shorter than the caller's buffer) is moved into buf for the
// next call. Otherwise headers are read through buf, with whatever follows
// them. The bulk of a large frame is read straight into the caller's
// buffer either way. A frame's padding is consumed with the next header.
type frameReader struct {
	r      io.Reader   // the connection
	spin   *spinReader // its polling reader, if any
	polled bool        // read through spin
	buf    []byte
	lo, hi int // buf[lo:hi] is read but not yet consumed
	skip   int // padding of the last frame, not yet consumed
}

func (f *frameReader) reader() io.Reader {
	if f.polled {
		return f.spin
	}
	return f.r
}

// next reads one frame into p. io.EOF means the stream ended cleanly
// between frames. Bytes of p past the frame's length may be overwritten.
func (f *frameReader) next(p []byte) (tag uint32, n int, err error) {
	r := f.reader()
	need := f.skip + frameHdr // the last frame's padding, then a header
	got := 0                  // bytes of the payload already in p
	if f.hi == f.lo && f.polled {
		spec := p[:min(len(p), len(f.buf)-need)]
		k, err := f.spin.readv(f.buf[:need], spec)
		f.lo, f.hi = 0, min(k, need)
		got = k - f.hi
		if err != nil && f.hi < need {
			return 0, 0, f.endErr(err)
		}
	}
	for f.hi-f.lo < need {
		if f.lo > 0 {
			f.hi = copy(f.buf, f.buf[f.lo:f.hi])
			f.lo = 0
		}
		k, err := r.Read(f.buf[f.hi:])
		f.hi += k
		if err != nil && f.hi < need {
			return 0, 0, f.endErr(err)
		}
	}
	if !zero(f.buf[f.lo : f.lo+f.skip]) {
		return 0, 0, fmt.Errorf("%w: frame padding is not zero", ascend.ErrProtocol)
	}
	f.lo += f.skip
	f.skip = 0
	h := f.buf[f.lo : f.lo+frameHdr]
	size := int(binary.LittleEndian.Uint32(h[0:]))
	tag = binary.LittleEndian.Uint32(h[4:])
	if !zero(h[8:]) {
		return tag, 0, fmt.Errorf("%w: reserved frame header bytes are not zero", ascend.ErrProtocol)
	}
	if size > MaxFrame {
		return tag, 0, fmt.Errorf("%w: frame of %d bytes exceeds %d", ascend.ErrProtocol, size, MaxFrame)
	}
	if size > len(p) {
		return tag, 0, fmt.Errorf("tcp: frame of %d bytes for a %d-byte buffer: %w", size, len(p), io.ErrShortBuffer)
	}
	f.lo += frameHdr
	if got > size { // read past the frame: keep the rest for the next call
		f.lo, f.hi = 0, copy(f.buf, p[size:got])
		got = size
	}
	c := copy(p[got:size], f.buf[f.lo:f.hi])
	f.lo += c
	got += c
	if f.lo == f.hi {
		f.lo, f.hi = 0, 0
	}
	if got < size {
		if _, err := io.ReadFull(r, p[got:size]); err != nil {
			return tag, 0, eofIsUnexpected(err)
		}
	}
	f.skip = padLen(size)
	return tag, size, nil
}

// endErr is what a read error err before a complete header means: io.EOF
// when the stream ended cleanly, after the last frame's padding and
// nothing else, otherwise an unexpected EOF (or err itself).
func (f *frameReader) endErr(err error) error {
	if b := f.buf[f.lo:f.hi]; err == io.EOF && len(b) == f.skip && zero(b) {
		return io.EOF
	}
	return eofIsUnexpected(err)
}

// zero reports whether b is all zeros.
func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// pollYield runs between two polls of the socket (the i-th and the
// next). When ranks outnumber cores (onlyOS) it gives the core to other
// processes every time, since the peer that will answer may be waiting for
// this very core. Otherwise the poll spins on, as MPI's progress engine
// does when it has a core of its own: every 64th time it offers the core
// to other processes (sched_yield), every 1024th to other goroutines of
// this one (runtime.Gosched).
//
// Not runtime.Gosched every time: Gosched wakes a thread for every idle P
// (wakep) to run the goroutine it requeues, so a polling rank with a
// second P idle hops between threads. Measured with 2 ranks on 2 cores
// over TCP (recursive doubling, fixed iteration counts, runs alternated
// with the previous build that called Gosched every time): context
// switches per 1500 1 MiB allreduces 1 900–8 500 against 30 000–39 000;
// 4 KiB 10.7–15.0 µs against 11.9–14.7, 64 KiB 52.8–60.8 against
// 59.0–74.4; 1 MiB within the machine's noise (430–940 against 500–980).
// sched_yield every time was slower for small messages (4 KiB 14–18 µs):
// a yield is a system call, 0.6 µs here.
//
// The polling loops make their system calls raw (no entersyscall), since
// none of them blocks: sched_yield, and reads and writes of a
// non-blocking socket. Through syscall.Syscall, a yield that gives the
// core to another process for more than 20 µs (routine when ranks
// outnumber cores) lets the runtime's sysmon hand this goroutine's P to
// another thread, which it must wake up; measured with 4 ranks on 2 cores
// that was 5× the context switches and 1.7× the CPU time of a 256 KiB
// allreduce, and 16–64 KiB allreduces took 1.5–1.8× as long.
func pollYield(onlyOS bool, i int) {
	if onlyOS || i%64 == 0 {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
	if !onlyOS && i%1024 == 0 {
		runtime.Gosched()
	}
}

// InlineBytes implements ascend.InlineSender: one frame of at most
// DefaultChunkBytes, or with setInline(true) whatever the socket buffer
// takes without waiting (writing into it never waits for the peer).
func (c *conn) InlineBytes() int {
	if c.inlineAll {
		return MaxFrame
	}
	return ascend.DefaultChunkBytes
}

// setInline sets whether a message's frames go to the socket from the
// calling goroutine as far as the socket buffer takes them, rather than
// only the first (see InlineBytes and inlineAll).
func (c *conn) setInline(all bool) { c.inlineAll = all }
