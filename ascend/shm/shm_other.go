//go:build !linux

package shm

import (
	"context"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// Supported reports whether this platform has the shared-memory transport.
const Supported = false

// Segment is a mapped segment file (unsupported here).
type Segment struct{}

// Create is unsupported on this platform.
func Create(dir string, ringBytes int) (*Segment, error) { return nil, ErrUnsupported }

// Open is unsupported on this platform.
func Open(path string) (*Segment, error) { return nil, ErrUnsupported }

// Path is empty.
func (s *Segment) Path() string { return "" }

// Unlink is unsupported.
func (s *Segment) Unlink() error { return ErrUnsupported }

// Close does nothing.
func (s *Segment) Close() error { return nil }

// Conn is unsupported on this platform.
type Conn struct{}

var _ ascend.Conn = (*Conn)(nil)

// NewConn is unsupported on this platform.
func NewConn(seg *Segment, side int, opts ConnOptions) *Conn { return &Conn{} }

// Send is unsupported.
func (c *Conn) Send(ctx context.Context, tag uint32, p []byte) error { return ErrUnsupported }

// Recv is unsupported.
func (c *Conn) Recv(ctx context.Context, p []byte) (uint32, int, error) { return 0, 0, ErrUnsupported }

// Close does nothing.
func (c *Conn) Close() error { return nil }

// SetSpinFor does nothing.
func (c *Conn) SetSpinFor(time.Duration, bool) {}

// SetInline does nothing.
func (c *Conn) SetInline(bool) {}

// HostID is empty: no host sharing is detected.
func HostID() string { return "" }

// Memory is unsupported on this platform: Create and Open fail.
type Memory struct {
	Dir string
}

var _ ascend.SharedMemory = Memory{}

// Create is unsupported.
func (Memory) Create(string, int) (ascend.SharedRegion, error) { return nil, ErrUnsupported }

// Open is unsupported.
func (Memory) Open(string, int) (ascend.SharedRegion, error) { return nil, ErrUnsupported }

// Wait returns at once.
func (Memory) Wait(*uint32, uint32, time.Duration) {}

// Wake does nothing.
func (Memory) Wake(*uint32) {}

// Yield does nothing.
func (Memory) Yield() {}

// PeerDown is false.
func (c *Conn) PeerDown() bool { return false }

// RemoveStale does nothing here.
func RemoveStale(dir string, age time.Duration) (int, error) { return 0, nil }
