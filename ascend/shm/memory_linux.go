//go:build linux

package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cann-train/cann-train/ascend"
)

// Memory is ascend.SharedMemory over files of a tmpfs (Dir, DefaultDir
// if empty): the ranks of one host map each other's shared buffers
// (ascend.Communicator.AllocShared) and sleep on futex words in them.
type Memory struct {
	Dir string
}

var _ ascend.SharedMemory = Memory{}

func (m Memory) path(name string) (string, error) {
	if name == "" || filepath.Base(name) != name {
		return "", fmt.Errorf("shm: bad region name %q", name)
	}
	dir := m.Dir
	if dir == "" {
		dir = DefaultDir
	}
	return filepath.Join(dir, name), nil
}

// Region is a mapped shared-memory region: an ascend.SharedRegion.
type Region struct {
	path string
	mem  []byte
}

// Bytes is the mapping.
func (r *Region) Bytes() []byte { return r.mem }

// Unlink removes the region's file; mappings stay valid.
func (r *Region) Unlink() error { return os.Remove(r.path) }

// Close unmaps the region.
func (r *Region) Close() error {
	if r.mem == nil {
		return nil
	}
	err := syscall.Munmap(r.mem)
	r.mem = nil
	return err
}

// Create implements ascend.SharedMemory: a new file (a stale one of the
// same name, left by a crashed process of an earlier session, is
// replaced), mapped and pre-faulted, since a first touch of a page costs
// far more than the copy on some VMs.
func (m Memory) Create(name string, size int) (ascend.SharedRegion, error) {
	path, err := m.path(name)
	if err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shm: region %s of %d bytes", name, size)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		os.Remove(path)
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("shm: %s: %w", path, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("shm: mmap %s: %w", path, err)
	}
	for i := 0; i < len(mem); i += pageSize {
		mem[i] = 0 // make sure every page is there and writable
	}
	return &Region{path: path, mem: mem}, nil
}

// Open implements ascend.SharedMemory.
func (m Memory) Open(name string, size int) (ascend.SharedRegion, error) {
	path, err := m.path(name)
	if err != nil {
		return nil, err
	}
	mem, err := mapFile(path, syscall.MAP_POPULATE, func(got int64) error {
		if got != int64(size) {
			return fmt.Errorf("shm: %s has %d bytes, want %d", path, got, size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Region{path: path, mem: mem}, nil
}

// Wait implements ascend.SharedMemory with a futex.
func (Memory) Wait(addr *uint32, val uint32, timeout time.Duration) {
	ts := syscall.NsecToTimespec(int64(max(timeout, time.Microsecond)))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake implements ascend.SharedMemory.
func (Memory) Wake(addr *uint32) { futexWake(addr) }

// Yield implements ascend.SharedMemory: sched_yield.
func (Memory) Yield() { osYield() }

// PeerDown reports that the peer closed its end or went away (its TCP
// connection dropped), without reading anything; also true once this end
// is closed.
func (c *Conn) PeerDown() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.closed.Load() || c.peerDown() // the segment is mapped while not closed
}

// RemoveStale removes the files this package made in dir (DefaultDir if
// empty) that are older than age, and returns how many. Segment and
// region files are unlinked as soon as the peers mapped them (within a
// connect or operation timeout), so an old one was left by a process
// killed in between; its mappings, if any process still had one, stay
// valid. Files of other programs are not touched.
func RemoveStale(dir string, age time.Duration) (int, error) {
	if dir == "" {
		dir = DefaultDir
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("shm: %w", err)
	}
	removed := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "ascend-") {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < age {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			removed++
		}
	}
	return removed, nil
}
