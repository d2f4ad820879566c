package ascend

// Shared buffers: memory the ranks of one host map into each other's
// address space, so that a collective reads a peer's data where the peer
// keeps it instead of having it copied through a link (NCCL's user-buffer
// registration, MPI's single-copy XPMEM path, OpenSHMEM's symmetric heap).
//
// AllocShared is collective: every rank creates a named region, the ranks
// wait for each other, map the regions of the other ranks of their host
// and drop the names. A collective whose buffers lie in shared buffers on
// every rank then runs the direct algorithm (direct.go): each rank reduces
// its share of the vector straight out of the peers' buffers and copies
// the other shares from the peers' results — about one pass over the data
// in place of the two a link costs (copy in, copy out). Ranks synchronise
// through a control page of their own, one per communicator: sequence
// words the peers poll and then sleep on (SharedMemory.Wait), like the
// shared-memory links do.
//
// The mapping itself is the transport's business (package ascend/shm on
// Linux): Config.Shared. Without it AllocShared fails with ErrInvalid and
// collectives use the links as before. (Staging ordinary memory through a
// shared buffer — copy in, direct, copy out — was measured slower than the
// shared-memory links: the two extra copies cost as much as the links'
// whole exchange. Training instead keeps its step buffer in shared memory.)

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// SharedMemory maps memory that other processes of the host can map too,
// and lets them wait for each other on words of it. Package ascend/shm
// implements it.
type SharedMemory interface {
	// Create makes a region of size bytes under name, zeroed and
	// pre-faulted, and maps it. A stale region of that name is replaced.
	Create(name string, size int) (SharedRegion, error)
	// Open maps the region another process created under name; size must
	// be its size.
	Open(name string, size int) (SharedRegion, error)
	// Wait sleeps while *addr == val, at most timeout (an address inside a
	// mapped region). Spurious wake-ups are allowed.
	Wait(addr *uint32, val uint32, timeout time.Duration)
	// Wake wakes every waiter on addr.
	Wake(addr *uint32)
	// Yield gives the processor to another runnable thread of any
	// process (used while ranks outnumber cores).
	Yield()
}

// A SharedRegion is one mapping of a region.
type SharedRegion interface {
	Bytes() []byte
	// Unlink removes the region's name; mappings stay valid.
	Unlink() error
	// Close unmaps the region.
	Close() error
}

// A peerWatcher is a Conn that knows, without reading, that its peer went
// away (the shared-memory link watches the peer's TCP connection).
type peerWatcher interface {
	PeerDown() bool
}

// SharedBuffer is a buffer of float32 allocated on every rank by
// AllocShared, in shared memory when the ranks could agree on it
// (Shared). Collectives given slices of shared buffers on every rank (any
// part of them, not necessarily the same offsets) read the peers' data
// directly. Its memory is unmapped by Free and by the Communicator's
// Close.
type SharedBuffer struct {
	c     *Communicator
	id    uint32
	data  []float32
	own   SharedRegion
	peers []SharedRegion // by rank; nil for self and other hosts
	views [][]float32    // peers' data, by rank
	freed bool
	// shared: the ranks agreed to read each other's buffers (else views
	// are nil and own may be nil: heap memory).
	shared bool
}

// Floats is the buffer.
func (b *SharedBuffer) Floats() []float32 { return b.data }

// Free unmaps the buffer here. Peers may keep using their own buffers
// among themselves, but a collective that passes this rank a slice of a
// freed buffer fails with ErrMismatch. It must not be called while a
// collective uses the buffer.
func (b *SharedBuffer) Free() error {
	c := b.c
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if b.freed {
		return nil
	}
	b.freed = true
	w := c.win
	for i, x := range w.bufs {
		if x == b {
			w.bufs = append(w.bufs[:i], w.bufs[i+1:]...)
			break
		}
	}
	return b.unmap()
}

// unmap closes this rank's mapping of its own region and of the peers'.
func (b *SharedBuffer) unmap() error {
	err := closeRegions(b.peers)
	if b.own != nil {
		err = errors.Join(b.own.Close(), err)
	}
	b.data, b.views = nil, nil
	return err
}

// closeRegions closes the non-nil regions and clears them.
func closeRegions(rs []SharedRegion) error {
	var errs []error
	for i, r := range rs {
		if r != nil {
			errs = append(errs, r.Close())
			rs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Control page of a rank (all words little-endian, each group on its own
// cache line): the sequence words are written by the owner only.
const (
	ctlPosted  = 0   // u32: this rank posted direct collective v (a counter)
	ctlMode    = 4   // u32: 1 direct, 0 through the links
	ctlCount   = 8   // u64: elements
	ctlOp      = 16  // u32
	ctlSrcID   = 20  // u32: shared buffer id of src
	ctlDstID   = 24  // u32: and of dst
	ctlSrcOff  = 32  // u64: element offset of src in its buffer
	ctlDstOff  = 40  // u64: and of dst
	ctlReduced = 64  // u32: blocks of this rank's segment of v that are final
	ctlDone    = 128 // u32: this rank read all it needs of v
	ctlEvent   = 192 // u32 futex word, bumped after each sequence word
	ctlWaiters = 196 // u32: peers blocked (or about to block) on ctlEvent
	ctlBytes   = 4096
)

// window is a communicator's shared state: its control page, the peers'
// and its shared buffers.
type window struct {
	mem     SharedMemory
	prefix  string // region names: prefix + "r<rank>-<id>"
	ctl     []byte
	ctlReg  SharedRegion
	peerCtl [][]byte // by rank; nil for self and other hosts
	peerReg []SharedRegion
	bufs    []*SharedBuffer
	nextID  uint32
	next    uint32 // the last direct collective posted (ctlPosted)
	refused bool   // the ranks agreed not to share (AllocShared)
	// srcs and dsts hold the ranks' slices during a direct collective.
	srcs, dsts [][]float32
}

func (w *window) u32(ctl []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&ctl[off])) }
func (w *window) u64(ctl []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&ctl[off])) }

// regionName names rank's region id (0: the control page) of the session.
func (w *window) regionName(rank int, id uint32) string {
	return fmt.Sprintf("%sr%d-%d", w.prefix, rank, id)
}

// sharedAll reports whether the ranks read each other's shared buffers:
// AllocShared agreed on it (every rank on this host mapped every other's
// regions), the same on every rank.
func (c *Communicator) sharedAll() bool {
	return c.win != nil && c.win.ctl != nil && len(c.local) == c.size
}

// CanShare reports whether this rank may read its peers' shared buffers:
// the communicator has shared memory, every rank is on this host and
// every link is a shared-memory one (ranks in separate containers share a
// kernel but not /dev/shm, and their links stay on TCP). AllocShared
// still agrees with the other ranks before it relies on it.
func (c *Communicator) CanShare() bool {
	if c.shared == nil || c.size < 2 || len(c.local) != c.size {
		return false
	}
	for _, p := range c.peers {
		if p != nil {
			if _, ok := p.conn.(peerWatcher); !ok {
				return false
			}
		}
	}
	return true
}

// AllocShared allocates a buffer of n float32 on every rank; it is a
// collective (every rank calls it, with the same n, at the same point of
// the call sequence) and needs Config.Shared. The buffer is shared — the
// peers read it directly — when every rank could map every other rank's
// (the ranks agree on that, so the answer is the same everywhere);
// otherwise, say with ranks on several hosts or in containers that do not
// share /dev/shm, it is plain memory and collectives use the links for
// it as for any memory. Shared reports which.
func (c *Communicator) AllocShared(ctx context.Context, n int) (*SharedBuffer, error) {
	if n <= 0 {
		return nil, errorf(ErrInvalid, "AllocShared of %d elements", n)
	}
	if c.shared == nil {
		return nil, errorf(ErrInvalid, "AllocShared: the communicator has no shared memory (Config.Shared)")
	}
	c.opMu.Lock()
	w := c.win
	if w == nil {
		sum := sha256.Sum256([]byte(c.session))
		w = &window{mem: c.shared, prefix: "ascend-w" + hex.EncodeToString(sum[:8]) + "-", nextID: 1}
		c.win = w
	}
	firstCtl := w.ctl == nil
	try := c.CanShare() && !w.refused
	id := w.nextID
	w.nextID++
	c.opMu.Unlock()

	size := 4 * n
	b := &SharedBuffer{c: c, id: id, peers: make([]SharedRegion, c.size), views: make([][]float32, c.size)}
	var ctlReg SharedRegion
	peerCtl := make([]SharedRegion, c.size)
	var problem error // why this rank cannot share (nil: it can)
	if !try {
		problem = errors.New("not every rank is on this host over shared-memory links")
	}
	own, err := w.mem.Create(w.regionName(c.rank, id), size)
	if err != nil {
		problem = err
	} else {
		b.own = own
		b.data = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(own.Bytes()))), n)
	}
	if problem == nil && firstCtl {
		ctlReg, problem = w.mem.Create(w.regionName(c.rank, 0), ctlBytes)
	}
	// Everyone has created its regions before anyone opens them.
	if err := c.Barrier(ctx); err != nil {
		b.drop(ctlReg, peerCtl)
		return nil, err
	}
	for _, j := range c.local {
		if j == c.rank || problem != nil {
			continue
		}
		r, err := w.mem.Open(w.regionName(j, id), size)
		if err != nil {
			problem = fmt.Errorf("rank %d's buffer: %w", j, err)
			break
		}
		b.peers[j] = r
		b.views[j] = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(r.Bytes()))), n)
		if firstCtl {
			if peerCtl[j], err = w.mem.Open(w.regionName(j, 0), ctlBytes); err != nil {
				problem = fmt.Errorf("rank %d's control page: %w", j, err)
				break
			}
		}
	}
	// Agree: shared only if every rank mapped everything (and so has
	// opened all it needs: the names can go).
	agree := []float32{1}
	if problem != nil {
		agree[0] = 0
	}
	if err := c.AllReduce(ctx, agree, Min); err != nil {
		b.drop(ctlReg, peerCtl)
		return nil, err
	}
	if b.own != nil {
		b.own.Unlink()
	}
	if ctlReg != nil {
		ctlReg.Unlink()
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if agree[0] != 1 {
		// Plain memory: this rank's own region (or the heap) only.
		b.release(ctlReg, peerCtl)
		if b.own == nil {
			b.data = make([]float32, n)
		}
		if firstCtl {
			w.refused = true // the same on every rank: do not try again
		}
		w.bufs = append(w.bufs, b) // unmapped by Free or Close
		return b, nil
	}
	b.shared = true
	if firstCtl {
		w.ctlReg, w.ctl = ctlReg, ctlReg.Bytes()
		w.peerReg, w.peerCtl = peerCtl, make([][]byte, c.size)
		for j, r := range peerCtl {
			if r != nil {
				w.peerCtl[j] = r.Bytes()
			}
		}
		w.srcs, w.dsts = make([][]float32, c.size), make([][]float32, c.size)
	}
	w.bufs = append(w.bufs, b)
	return b, nil
}

// release unmaps the peers' regions of b and the control pages of a
// failed or refused AllocShared (b's own region stays: it is b's memory).
func (b *SharedBuffer) release(ctlReg SharedRegion, peerCtl []SharedRegion) {
	closeRegions(b.peers)
	closeRegions(peerCtl)
	b.views = make([][]float32, len(b.views))
	if ctlReg != nil {
		ctlReg.Unlink()
		ctlReg.Close()
	}
}

// drop undoes a failed AllocShared: release, and this rank's own region.
func (b *SharedBuffer) drop(ctlReg SharedRegion, peerCtl []SharedRegion) {
	b.release(ctlReg, peerCtl)
	if b.own != nil {
		b.own.Unlink()
		b.own.Close()
	}
}

// Shared reports whether the peers read this buffer directly (see
// AllocShared).
func (b *SharedBuffer) Shared() bool { return b.shared }

// find returns the shared buffer holding all of s and s's element offset
// in it (nil if s is not inside one).
func (w *window) find(s []float32) (*SharedBuffer, int) {
	if w == nil || len(s) == 0 {
		return nil, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	for _, b := range w.bufs {
		if !b.shared {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(b.data)))
		if p >= base && p+4*uintptr(len(s)) <= base+4*uintptr(len(b.data)) {
			return b, int((p - base) / 4)
		}
	}
	return nil, 0
}

// byID returns the shared buffer id (nil if unknown here).
func (w *window) byID(id uint32) *SharedBuffer {
	for _, b := range w.bufs {
		if b.id == id {
			return b
		}
	}
	return nil
}

// closeWindow unmaps everything; the Communicator is closing.
func (w *window) close() {
	if w == nil {
		return
	}
	for _, b := range w.bufs {
		b.freed = true
		b.unmap()
	}
	w.bufs = nil
	if w.ctlReg != nil {
		w.ctlReg.Close()
	}
	closeRegions(w.peerReg)
	w.ctl, w.peerCtl = nil, nil
}

// publish stores v into this rank's sequence word at off and wakes peers
// sleeping on the control page.
func (w *window) publish(off int, v uint32) {
	atomic.StoreUint32(w.u32(w.ctl, off), v)
	atomic.AddUint32(w.u32(w.ctl, ctlEvent), 1)
	if atomic.LoadUint32(w.u32(w.ctl, ctlWaiters)) != 0 {
		w.mem.Wake(w.u32(w.ctl, ctlEvent))
	}
}
