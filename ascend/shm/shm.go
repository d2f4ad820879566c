// Package shm is the shared-memory transport of ascend: an [ascend.Conn]
// between two processes (or goroutines) of one host over a mapped file.
//
// A [Segment] holds two single-producer, single-consumer byte rings, one
// per direction, each with its head and tail counters on their own cache
// lines. Frames have the TCP transport's layout ([length u32][tag u32]
// [payload], little-endian) and stream through the ring in pieces, so a
// frame may be larger than the ring. The producer copies bytes in and then
// publishes the head; the consumer copies them out straight into the
// caller's buffer and publishes the tail: one copy per side, no system
// call while both keep up.
//
// A side that must wait (ring empty or full) polls briefly, yielding the
// processor, and then blocks in the kernel on a futex word of the segment
// (an eventcount: the other side bumps the word and wakes it only when a
// waiter is flagged), so ranks that outnumber the cores do not burn them
// spinning. Every wait honours the Conn's deadline.
//
// The peer's liveness comes from outside: NewConn takes an io.ReadCloser
// (the authenticated TCP connection the segment was set up over) that is
// only read to notice the peer going away; a process that dies closes it
// and every blocked call returns. Close marks the segment closed for the
// peer, wakes everyone, waits for calls in flight and unmaps it.
//
// Package ascend/tcp uses it for peers on the same host when
// Options.SharedMemory is set.
package shm

import (
	"cmp"
	"errors"
	"os"
	"strings"
	"time"
)

const (
	// DefaultRingBytes is the capacity of each direction's ring.
	DefaultRingBytes = 2 << 20
	// MaxRingBytes bounds the ring capacity.
	MaxRingBytes = 1 << 30
	// DefaultDir is where Create puts segment files: a tmpfs on Linux.
	DefaultDir = "/dev/shm"

	pageSize = 4096
	magic    = "ASCNSHM1"
	frameHdr = 8
)

// ErrUnsupported is returned where shared memory is not implemented.
var ErrUnsupported = errors.New("shm: shared memory transport not supported on this platform")

// Layout of a segment file:
//
//	page 0                header: magic, ring capacity, closed flag per side
//	page 1                control of ring 0 (side 0 → side 1)
//	pages 2 …             data of ring 0 (capacity bytes)
//	next page             control of ring 1 (side 1 → side 0)
//	next pages            data of ring 1
//
// Control page offsets (each group on its own cache line):
const (
	offHead        = 0   // u64, written by the producer
	offTail        = 64  // u64, written by the consumer
	offDataSeq     = 128 // u32 futex word: bumped when data arrives
	offConsWaiting = 132 // u32: the consumer is (about to be) blocked
	offSpaceSeq    = 192 // u32 futex word: bumped when space frees up
	offProdWaiting = 196 // u32: the producer is (about to be) blocked

	offMagic  = 0
	offCap    = 8  // u64
	offClosed = 64 // u32 per side, 64 bytes apart
)

func segmentSize(capacity int) int { return pageSize + 2*(pageSize+capacity) }

// ringCapacity rounds n up to a power of two of at least a page.
func ringCapacity(n int) (int, error) {
	if n <= 0 {
		n = DefaultRingBytes
	}
	if n > MaxRingBytes {
		return 0, errors.New("shm: ring too large")
	}
	c := pageSize
	for c < n {
		c <<= 1
	}
	return c, nil
}

// ConnOptions tunes NewConn.
type ConnOptions struct {
	// OpTimeout bounds every Send and Recv (or the context's deadline if
	// earlier); 0 means no limit beyond the context's.
	OpTimeout time.Duration
	// Liveness, if set, is read (and nothing else) until it fails, which
	// means the peer went away; Close closes it. Typically the TCP
	// connection the segment was negotiated over.
	Liveness interface {
		Read([]byte) (int, error)
		Close() error
	}
	// Spin is how many times a waiting side polls (yielding the processor
	// in between) before it blocks in the kernel; 0 means 64.
	Spin int
	// SpinFor, if positive, makes a waiting side poll for at least this
	// long (and Spin times) before it sleeps: worth it while the ranks on
	// the host do not outnumber its cores (a futex wake-up costs several
	// microseconds on a VM). SetSpinFor changes it later.
	SpinFor time.Duration
}

// HostName names this host the way ranks tell hosts apart: the kernel boot
// id (HostID), else the host name, else "localhost".
func HostName() string {
	if id := strings.TrimSpace(HostID()); id != "" {
		return id
	}
	h, _ := os.Hostname()
	return cmp.Or(h, "localhost")
}
