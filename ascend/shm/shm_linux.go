//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cann-train/cann-train/ascend"
)

// Supported reports whether this platform has the shared-memory transport.
const Supported = true

// Segment is a mapped segment file.
type Segment struct {
	path     string
	mem      []byte
	capacity int
	unmapped bool
}

// Create makes a new segment file in dir (DefaultDir if empty) with rings
// of ringBytes (rounded up to a power of two; 0 means DefaultRingBytes)
// and maps it. The creator is side 0. The file should be unlinked once the
// peer has opened it.
func Create(dir string, ringBytes int) (*Segment, error) {
	capacity, err := ringCapacity(ringBytes)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		dir = DefaultDir
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "ascend-"+hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	size := segmentSize(capacity)
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("shm: %w", err)
	}
	// MAP_POPULATE (here and in Open): the rings' pages are faulted in
	// now, not by the first frames that pass through them. Without it the
	// first passes over a ring paid a page fault per 4 KiB: calibration's
	// 256 KiB exchanges over fresh ring pages measured shared-memory
	// links at 0.8–1.2 GB/s (2 ranks: 16 GB/s once the ring is warm) and
	// so chose halving-doubling where recursive doubling is faster, and
	// the first sizes of a run swung (4 ranks, 4 KiB: 9–149 µs).
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	copy(mem[offMagic:], magic)
	binary.LittleEndian.PutUint64(mem[offCap:], uint64(capacity))
	return &Segment{path: path, mem: mem, capacity: capacity}, nil
}

// Open maps the segment file at path, created by Create in another
// process (or goroutine). The opener is side 1.
func Open(path string) (*Segment, error) {
	mem, err := mapFile(path, syscall.MAP_POPULATE, func(size int64) error {
		if size < int64(segmentSize(pageSize)) || size > int64(segmentSize(MaxRingBytes)) {
			return fmt.Errorf("shm: %s: size %d is not a segment's", path, size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	size := len(mem)
	capacity := int(binary.LittleEndian.Uint64(mem[offCap:]))
	if string(mem[offMagic:offMagic+len(magic)]) != magic || segmentSize(capacity) != size {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shm: %s is not an ascend segment", path)
	}
	return &Segment{path: path, mem: mem, capacity: capacity}, nil
}

// mapFile maps the whole file at path, shared, read-write, once check
// accepts its size; flags are added to MAP_SHARED.
func mapFile(path string, flags int, check func(size int64) error) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	if err := check(st.Size()); err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|flags)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %s: %w", path, err)
	}
	return mem, nil
}

// Path is the segment file's path.
func (s *Segment) Path() string { return s.path }

// Unlink removes the segment file; the mappings stay valid.
func (s *Segment) Unlink() error { return os.Remove(s.path) }

// Close unmaps a segment that no Conn was made of (NewConn's Conn owns
// its segment).
func (s *Segment) Close() error {
	if s.unmapped {
		return nil
	}
	s.unmapped = true
	return syscall.Munmap(s.mem)
}

// ring is one direction of a segment.
type ring struct {
	head, tail            *uint64
	dataSeq, consWaiting  *uint32
	spaceSeq, prodWaiting *uint32
	data                  []byte
	mask                  uint64
}

func (s *Segment) ring(i int) ring {
	base := pageSize + i*(pageSize+s.capacity)
	ctl := s.mem[base : base+pageSize]
	u64 := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&ctl[off])) }
	u32 := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&ctl[off])) }
	return ring{
		head: u64(offHead), tail: u64(offTail),
		dataSeq: u32(offDataSeq), consWaiting: u32(offConsWaiting),
		spaceSeq: u32(offSpaceSeq), prodWaiting: u32(offProdWaiting),
		data: s.mem[base+pageSize : base+pageSize+s.capacity],
		mask: uint64(s.capacity - 1),
	}
}

func (s *Segment) closedFlag(side int) *uint32 {
	return (*uint32)(unsafe.Pointer(&s.mem[offClosed+64*side]))
}

// Conn is one side's end of a segment: an ascend.Conn.
type Conn struct {
	seg        *Segment
	side       int
	out, in    ring
	mine, peer *uint32 // closed flags
	opts       ConnOptions

	spinFor   atomic.Int64 // ConnOptions.SpinFor, settable later
	yieldOS   atomic.Bool  // polls yield the CPU to other processes
	inlineAll atomic.Bool  // see InlineBytes
	closed    atomic.Bool  // Close was called
	gone      atomic.Bool  // the liveness channel failed: the peer is gone
	mu        sync.RWMutex
	once      sync.Once
	rhdr      [frameHdr]byte
	whdr      [frameHdr]byte
	rts       syscall.Timespec // futex timeouts of the reader and the writer
	wts       syscall.Timespec
}

var _ ascend.Conn = (*Conn)(nil)

// NewConn makes side (0: the creator, 1: the opener) of seg a Conn, which
// owns seg from now on (Close unmaps it).
func NewConn(seg *Segment, side int, opts ConnOptions) *Conn {
	if opts.Spin <= 0 {
		opts.Spin = 64
	}
	c := &Conn{seg: seg, side: side & 1, opts: opts}
	c.spinFor.Store(int64(opts.SpinFor))
	c.out, c.in = seg.ring(c.side), seg.ring(1-c.side)
	c.mine, c.peer = seg.closedFlag(c.side), seg.closedFlag(1-c.side)
	if opts.Liveness != nil {
		go c.watchLiveness()
	}
	return c
}

func (c *Conn) watchLiveness() {
	var b [64]byte
	for {
		if _, err := c.opts.Liveness.Read(b[:]); err != nil {
			break
		}
	}
	c.gone.Store(true)
	c.mu.RLock()
	if !c.closed.Load() {
		c.wakeAll()
	}
	c.mu.RUnlock()
}

// wakeAll bumps and wakes every futex word of both rings.
func (c *Conn) wakeAll() {
	for _, r := range [2]*ring{&c.out, &c.in} {
		atomic.AddUint32(r.dataSeq, 1)
		futexWake(r.dataSeq)
		atomic.AddUint32(r.spaceSeq, 1)
		futexWake(r.spaceSeq)
	}
}

func (c *Conn) deadline(ctx context.Context) time.Time {
	return ascend.OpDeadline(ctx, c.opts.OpTimeout)
}

// peerDown reports that the peer closed or went away.
func (c *Conn) peerDown() bool { return atomic.LoadUint32(c.peer) != 0 || c.gone.Load() }

// errPeerClosed is a Send to a peer that closed.
var errPeerClosed = fmt.Errorf("shm: peer closed: %w", io.ErrClosedPipe)

// Send implements ascend.Conn.
func (c *Conn) Send(ctx context.Context, tag uint32, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return net.ErrClosed
	}
	d := c.deadline(ctx)
	binary.LittleEndian.PutUint32(c.whdr[0:], uint32(len(p)))
	binary.LittleEndian.PutUint32(c.whdr[4:], tag)
	if err := c.write(c.whdr[:], d); err != nil {
		return err
	}
	return c.write(p, d)
}

// inlineMax bounds the frames TrySend takes unless SetInline(true): larger
// ones are better sent by the writer goroutine, on another core, while the
// caller receives.
const inlineMax = 32 << 10

// InlineBytes implements ascend.InlineSender: inlineMax, or with
// SetInline(true) the ring's capacity (TrySend still takes a frame only if
// the ring has room for it now).
func (c *Conn) InlineBytes() int {
	if c.inlineAll.Load() {
		return len(c.out.data)
	}
	return inlineMax
}

// SetInline sets whether TrySend takes any frame the ring has room for,
// so that whole messages go into the ring from the calling goroutine.
// Worth it when the ranks on the host leave no core for each rank's
// writer goroutine: waking its thread then costs more than the copy.
func (c *Conn) SetInline(all bool) { c.inlineAll.Store(all) }

// TrySend implements ascend.TrySender: the frame goes into the ring if the
// ring has room for all of it now (and it is within InlineBytes).
func (c *Conn) TrySend(ctx context.Context, tag uint32, p []byte) (ascend.TrySendResult, error) {
	if len(p) > c.InlineBytes() {
		return ascend.TryRefused, nil
	}
	if err := ctx.Err(); err != nil {
		return ascend.TrySent, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return ascend.TrySent, net.ErrClosed
	}
	r := &c.out
	if uint64(len(r.data))-(atomic.LoadUint64(r.head)-atomic.LoadUint64(r.tail)) < uint64(frameHdr+len(p)) {
		return ascend.TryRefused, nil
	}
	binary.LittleEndian.PutUint32(c.whdr[0:], uint32(len(p)))
	binary.LittleEndian.PutUint32(c.whdr[4:], tag)
	var none time.Time // the room is there: write never waits
	if err := c.write(c.whdr[:], none); err != nil {
		return ascend.TrySent, err
	}
	return ascend.TrySent, c.write(p, none)
}

// FinishSend implements ascend.TrySender; TrySend never leaves a frame
// partly sent.
func (c *Conn) FinishSend(context.Context) error { return nil }

// write streams p into the outgoing ring.
func (c *Conn) write(p []byte, d time.Time) error {
	r := &c.out
	size := uint64(len(r.data))
	head := atomic.LoadUint64(r.head)
	for len(p) > 0 {
		free := size - (head - atomic.LoadUint64(r.tail))
		if free == 0 {
			if err := c.wait(r.spaceSeq, r.prodWaiting, func() bool { return head-atomic.LoadUint64(r.tail) < size }, d, &c.wts, false); err != nil {
				return err
			}
			continue
		}
		if c.peerDown() {
			return errPeerClosed
		}
		n := min(free, uint64(len(p)))
		off := head & r.mask
		k := copy(r.data[off:], p[:n])
		copy(r.data, p[k:n])
		head += n
		atomic.StoreUint64(r.head, head)
		if atomic.LoadUint32(r.consWaiting) != 0 {
			atomic.AddUint32(r.dataSeq, 1)
			futexWake(r.dataSeq)
		}
		p = p[n:]
	}
	return nil
}

// Recv implements ascend.Conn.
func (c *Conn) Recv(ctx context.Context, p []byte) (uint32, int, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, 0, net.ErrClosed
	}
	d := c.deadline(ctx)
	if err := c.read(c.rhdr[:], d, true); err != nil {
		return 0, 0, err
	}
	size := binary.LittleEndian.Uint32(c.rhdr[0:])
	tag := binary.LittleEndian.Uint32(c.rhdr[4:])
	if int(size) > len(p) {
		return tag, 0, fmt.Errorf("shm: frame of %d bytes for a %d-byte buffer: %w", size, len(p), io.ErrShortBuffer)
	}
	if err := c.read(p[:size], d, false); err != nil {
		return tag, 0, err
	}
	return tag, int(size), nil
}

// RecvInPlace implements ascend.InPlaceReceiver.
func (c *Conn) RecvInPlace(ctx context.Context, sink ascend.FrameSink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return net.ErrClosed
	}
	d := c.deadline(ctx)
	if err := c.read(c.rhdr[:], d, true); err != nil {
		return err
	}
	size := int(binary.LittleEndian.Uint32(c.rhdr[0:]))
	if err := sink.Accept(binary.LittleEndian.Uint32(c.rhdr[4:]), size); err != nil {
		return err
	}
	r := &c.in
	tail := atomic.LoadUint64(r.tail)
	for size > 0 {
		avail := atomic.LoadUint64(r.head) - tail
		if avail == 0 {
			err := c.wait(r.dataSeq, r.consWaiting, func() bool { return atomic.LoadUint64(r.head) != tail }, d, &c.rts, true)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			continue
		}
		off := tail & r.mask
		n := min(avail, uint64(size), uint64(len(r.data))-off) // contiguous
		sink.Consume(r.data[off : off+n])
		tail += n
		atomic.StoreUint64(r.tail, tail)
		if atomic.LoadUint32(r.prodWaiting) != 0 {
			atomic.AddUint32(r.spaceSeq, 1)
			futexWake(r.spaceSeq)
		}
		size -= int(n)
	}
	return nil
}

// read fills p from the incoming ring. At a frame boundary (first) a peer
// that closed with nothing left to read is io.EOF.
func (c *Conn) read(p []byte, d time.Time, first bool) error {
	r := &c.in
	tail := atomic.LoadUint64(r.tail)
	for len(p) > 0 {
		avail := atomic.LoadUint64(r.head) - tail
		if avail == 0 {
			err := c.wait(r.dataSeq, r.consWaiting, func() bool { return atomic.LoadUint64(r.head) != tail }, d, &c.rts, true)
			if err == io.EOF && !first {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			continue
		}
		first = false
		n := min(avail, uint64(len(p)))
		off := tail & r.mask
		k := copy(p[:n], r.data[off:])
		copy(p[k:n], r.data)
		tail += n
		atomic.StoreUint64(r.tail, tail)
		if atomic.LoadUint32(r.prodWaiting) != 0 {
			atomic.AddUint32(r.spaceSeq, 1)
			futexWake(r.spaceSeq)
		}
		p = p[n:]
	}
	return nil
}

// wait blocks until ready() holds, polling Spin times before it blocks on
// the futex word seq with the waiting flag raised (the eventcount: the
// other side bumps seq and wakes only when it sees the flag, and checks
// the flag after publishing, so a wake-up is never lost). A reader whose
// peer is down gets io.EOF once the ring is drained; a writer gets
// errPeerClosed.
func (c *Conn) wait(seq, waiting *uint32, ready func() bool, d time.Time, ts *syscall.Timespec, reader bool) error {
	down := func() error {
		if c.closed.Load() {
			return net.ErrClosed
		}
		if c.peerDown() && !ready() {
			if reader {
				return io.EOF
			}
			return errPeerClosed
		}
		return nil
	}
	var until time.Time
	if sf := time.Duration(c.spinFor.Load()); sf > 0 {
		until = time.Now().Add(sf)
	}
	for i := 0; ; i++ {
		if ready() {
			return nil
		}
		if err := down(); err != nil {
			return err
		}
		if i < c.opts.Spin || (!until.IsZero() && (i&15 != 0 || time.Now().Before(until))) { // the clock every 16th poll
			if c.yieldOS.Load() || i >= goschedSpins {
				// sched_yield keeps this goroutine's P: now and
				// then let a goroutine queued on it run (the
				// writer of a send this one waits on, say); a
				// stolen one would need a second thread, which an
				// oversubscribed host schedules late.
				if i&15 == 15 {
					runtime.Gosched()
				}
				osYield()
			} else {
				runtime.Gosched()
			}
			continue
		}
		timeout := time.Second // re-check at least this often
		if !d.IsZero() {
			if timeout = min(time.Until(d), timeout); timeout <= 0 {
				return os.ErrDeadlineExceeded
			}
		}
		*ts = syscall.NsecToTimespec(int64(timeout))
		v := atomic.LoadUint32(seq)
		atomic.StoreUint32(waiting, 1)
		if ready() || down() != nil {
			atomic.StoreUint32(waiting, 0)
			continue
		}
		if c.yieldOS.Load() {
			runtime.Gosched() // see above
		}
		futexWait(seq, v, ts)
		atomic.StoreUint32(waiting, 0)
	}
}

// SetSpinFor sets ConnOptions.SpinFor. With yieldOS each poll gives the
// CPU to other processes (sched_yield) instead of other goroutines: the
// way to poll when ranks outnumber cores, where the peer that will answer
// may be waiting for this very core.
func (c *Conn) SetSpinFor(d time.Duration, yieldOS bool) {
	c.spinFor.Store(int64(max(d, 0)))
	c.yieldOS.Store(yieldOS)
}

// osYield gives the CPU to another runnable thread of any process. Raw
// (no entersyscall): a yield that gives the core away for more than 20 µs
// would otherwise let the runtime hand this thread's P to another thread
// it must wake (see ascend/tcp's pollYield, where that cost 5× the
// context switches with 4 ranks on 2 cores).
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// goschedSpins is how many polls of a wait yield only to this process's
// goroutines while the host has a core per rank; the rest of the spin
// gives the core to other processes too, since the scheduler may run both
// ends on one core (see ascend's directGoschedSpins). Measured with 2
// ranks allreducing over these links, both pinned to one core while each
// believes it has its own: 4 KiB 68 → 12 µs, 64 KiB 147 → 29 µs, 1 MiB
// 249 → 137 µs; unpinned, six alternating pairs gave the same medians at
// every size from 4 KiB to 4 MiB.
const goschedSpins = 64

// Close implements ascend.Conn: it tells the peer, wakes every blocked
// call (theirs and ours), waits for ours to return and unmaps the
// segment.
func (c *Conn) Close() error {
	var err error
	c.once.Do(func() {
		c.closed.Store(true)
		atomic.StoreUint32(c.mine, 1)
		c.wakeAll()
		if c.opts.Liveness != nil {
			err = c.opts.Liveness.Close()
		}
		c.mu.Lock() // calls in flight have returned
		if uerr := c.seg.Close(); err == nil {
			err = uerr
		}
		c.mu.Unlock()
	})
	return err
}

const (
	futexWaitOp = 0 // FUTEX_WAIT (shared: the segment is mapped by two processes)
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, at most *ts. Spurious and early
// returns are fine: callers re-check.
func futexWait(addr *uint32, val uint32, ts *syscall.Timespec) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

func futexWake(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// HostID identifies the running kernel (its boot id), so two processes can
// tell whether they share a host; empty if unknown.
func HostID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(b)
}
