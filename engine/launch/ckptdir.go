package launch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// A checkpoint directory travels through engine/checkpoint as one opaque
// payload, which that store cuts into fixed-size chunks and stores by
// content. PackDir lays the directory out so that a file that did not
// change yields the same chunks as last time — and is not uploaded again:
//
//	magic "CTDIR\x00v1" | uint64 LE header length | header (JSON) | zeros to Align
//	file ≥ SmallFile: starts at a multiple of Align, zeros to the next one
//	…
//	small files, back to back (one or a few chunks for all of them)
//
// Align must be the store's chunk size. The header lists every file
// (path with '/', mode bits, size, offset) and every directory.

const dirMagic = "CTDIR\x00v1"

// SmallFile is the size below which files are packed together rather than
// each aligned to a chunk.
const SmallFile = 64 << 10

// MaxDirBytes bounds a packed checkpoint (the payload is held in memory).
const MaxDirBytes = 16 << 30

type dirHeader struct {
	Align int         `json:"align"`
	Files []fileEntry `json:"files"`
	Dirs  []string    `json:"dirs,omitempty"`
}

type fileEntry struct {
	Path   string      `json:"path"`
	Mode   fs.FileMode `json:"mode"`
	Size   int64       `json:"size"`
	Offset int64       `json:"offset"`
}

// DirStats describes a packed directory.
type DirStats struct {
	Files int
	Bytes int64 // file contents
	// Skipped are entries that are neither files nor directories
	// (symlinks, sockets …), relative paths.
	Skipped []string
}

// PackDir reads every regular file under dir into one payload (see the
// layout above). align is the checkpoint store's chunk size.
func PackDir(dir string, align int) ([]byte, DirStats, error) {
	var st DirStats
	if align < 512 || align%4 != 0 {
		return nil, st, fmt.Errorf("launch: pack alignment %d", align)
	}
	h := dirHeader{Align: align}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == DirMarker && d.Type().IsRegular():
			// (ResetDir's, not the checkpoint's)
		case d.IsDir():
			h.Dirs = append(h.Dirs, rel)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			h.Files = append(h.Files, fileEntry{Path: rel, Mode: info.Mode().Perm(), Size: info.Size()})
		default:
			st.Skipped = append(st.Skipped, rel)
		}
		return nil
	})
	if err != nil {
		return nil, st, fmt.Errorf("launch: read checkpoint dir: %w", err)
	}
	// Large files first, each on its own chunks, then the small ones.
	slices.SortStableFunc(h.Files, func(a, b fileEntry) int {
		as, bs := a.Size < SmallFile, b.Size < SmallFile
		switch {
		case as == bs:
			return strings.Compare(a.Path, b.Path)
		case bs:
			return -1
		}
		return 1
	})
	var total int64
	for _, f := range h.Files {
		total += f.Size
	}
	if total > MaxDirBytes {
		return nil, st, fmt.Errorf("launch: checkpoint dir holds %d bytes (at most %d)", total, int64(MaxDirBytes))
	}
	// Offsets depend on the header's length, which depends on them: size
	// the header with placeholder offsets as wide as the real ones.
	alignUp := func(n int64) int64 { return (n + int64(align) - 1) / int64(align) * int64(align) }
	for i := range h.Files {
		h.Files[i].Offset = MaxDirBytes * 2
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, st, err
	}
	off := alignUp(int64(len(dirMagic) + 8 + len(hb)))
	for i := range h.Files {
		f := &h.Files[i]
		if f.Size >= SmallFile {
			off = alignUp(off)
		}
		f.Offset = off
		off += f.Size
		if f.Size >= SmallFile {
			off = alignUp(off)
		}
	}
	if hb, err = json.Marshal(h); err != nil {
		return nil, st, err
	}
	buf := make([]byte, off)
	copy(buf, dirMagic)
	binary.LittleEndian.PutUint64(buf[len(dirMagic):], uint64(len(hb)))
	copy(buf[len(dirMagic)+8:], hb)
	for _, f := range h.Files {
		if err := readFull(filepath.Join(dir, filepath.FromSlash(f.Path)), buf[f.Offset:f.Offset+f.Size]); err != nil {
			return nil, st, fmt.Errorf("launch: read %s: %w", f.Path, err)
		}
		st.Files++
		st.Bytes += f.Size
	}
	return buf, st, nil
}

// readFull reads exactly len(dst) bytes of the file; a file that changed
// size meanwhile is an error (the script was still writing it).
func readFull(p string, dst []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := f.ReadAt(dst, 0)
	if n == len(dst) {
		var one [1]byte
		if m, _ := f.ReadAt(one[:], int64(n)); m != 0 {
			return errors.New("file grew while it was read")
		}
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("file shrank while it was read: %w", err)
}

// UnpackDir writes a PackDir payload's files under dir (which must exist
// and is expected empty but for DirMarker: see ResetDir).
func UnpackDir(payload []byte, dir string) (DirStats, error) {
	var st DirStats
	h, err := checkedHeader(payload)
	if err != nil {
		return st, err
	}
	for _, d := range h.Dirs {
		p, err := safeJoin(dir, d)
		if err != nil {
			return st, err
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return st, err
		}
	}
	for _, f := range h.Files {
		p, err := safeJoin(dir, f.Path)
		if err != nil {
			return st, err
		}
		if path.Clean(f.Path) == DirMarker {
			continue // (ResetDir's: a payload does not make a directory owned)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return st, err
		}
		mode := f.Mode.Perm() | 0o600
		if err := os.WriteFile(p, payload[f.Offset:f.Offset+f.Size], mode); err != nil {
			return st, err
		}
		st.Files++
		st.Bytes += f.Size
	}
	return st, nil
}

func readHeader(payload []byte) (*dirHeader, error) {
	if len(payload) < len(dirMagic)+8 || !bytes.Equal(payload[:len(dirMagic)], []byte(dirMagic)) {
		return nil, errors.New("launch: not a packed checkpoint directory")
	}
	n := binary.LittleEndian.Uint64(payload[len(dirMagic):])
	start := uint64(len(dirMagic) + 8)
	if n > uint64(len(payload))-start {
		return nil, errors.New("launch: packed checkpoint directory: header out of bounds")
	}
	var h dirHeader
	if err := json.Unmarshal(payload[start:start+n], &h); err != nil {
		return nil, fmt.Errorf("launch: packed checkpoint directory: %w", err)
	}
	return &h, nil
}

// IsPackedDir reports whether payload is a PackDir payload.
func IsPackedDir(payload []byte) bool {
	return len(payload) >= len(dirMagic) && bytes.Equal(payload[:len(dirMagic)], []byte(dirMagic))
}

// safeJoin joins a header path under dir, refusing anything that would
// leave it.
func safeJoin(dir, rel string) (string, error) {
	c := path.Clean(rel)
	if rel == "" || path.IsAbs(rel) || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("launch: packed checkpoint directory: bad path %q", rel)
	}
	return filepath.Join(dir, filepath.FromSlash(c)), nil
}

// DirMarker is the file ResetDir keeps in a checkpoint directory it owns:
// it empties an existing directory only when the marker is there (or the
// directory is empty). PackDir leaves it out and UnpackDir never writes
// it: it is not part of a checkpoint.
const DirMarker = ".cann-train-checkpoint-dir"

// NotOwnedError is ResetDir's refusal of a directory that holds files
// but no DirMarker: ResetDir did not make it, and emptying it could
// delete someone's files.
type NotOwnedError struct {
	Dir string
	// Found names the first few entries (sorted; directories end in '/'),
	// Total counts them all.
	Found []string
	Total int
}

// notOwnedShown is how many entries a NotOwnedError names.
const notOwnedShown = 5

func (e *NotOwnedError) Error() string {
	list := strings.Join(e.Found, ", ")
	if more := e.Total - len(e.Found); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%s holds files the node worker did not put there: %s (no %s marker)", e.Dir, list, DirMarker)
}

// ResetDir makes dir an empty checkpoint directory (creating it and its
// parents) that holds only DirMarker. A directory that exists already is
// emptied only if it holds the marker; one that is empty is adopted (the
// marker written); any other is refused with a *NotOwnedError, and
// nothing in it is touched.
func ResetDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	owned := slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return e.Name() == DirMarker && e.Type().IsRegular() })
	if !owned && len(entries) > 0 {
		ne := &NotOwnedError{Dir: dir, Total: len(entries)}
		for _, e := range entries[:min(len(entries), notOwnedShown)] { // (ReadDir sorts by name)
			name := e.Name()
			if e.IsDir() {
				name += "/"
			}
			ne.Found = append(ne.Found, name)
		}
		return ne
	}
	for _, e := range entries {
		if e.Name() == DirMarker && owned {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if owned {
		return nil
	}
	return writeMarker(dir)
}

// ResetOwnDir is ResetDir for a directory that is the caller's whatever
// it holds (one under the node worker's own work directory, which may
// predate DirMarker): it is emptied in any case.
func ResetOwnDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeMarker(dir); err != nil {
		return err
	}
	return ResetDir(dir)
}

// MarkDir writes DirMarker into dir, an existing directory the caller
// owns (ResetDir made or emptied it), so that a script that emptied or
// recreated it — deleting the marker — does not make it look foreign; a
// dir that is gone is left so.
func MarkDir(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	return writeMarker(dir)
}

func writeMarker(dir string) error {
	return os.WriteFile(filepath.Join(dir, DirMarker), []byte("The cann-train node worker empties this directory before every launch of the job.\n"), 0o644)
}

// CheckPacked checks a PackDir payload without unpacking it: its header
// reads, and every file lies inside the payload under a relative path.
func CheckPacked(payload []byte) (DirStats, error) {
	var st DirStats
	h, err := checkedHeader(payload)
	if err != nil {
		return st, err
	}
	for _, f := range h.Files {
		st.Files++
		st.Bytes += f.Size
	}
	return st, nil
}

// checkedHeader is payload's header once every directory and file it
// lists stays under the directory it unpacks to and every file lies
// inside the payload.
func checkedHeader(payload []byte) (*dirHeader, error) {
	h, err := readHeader(payload)
	if err != nil {
		return nil, err
	}
	for _, d := range h.Dirs {
		if _, err := safeJoin(".", d); err != nil {
			return nil, err
		}
	}
	for _, f := range h.Files {
		if _, err := safeJoin(".", f.Path); err != nil {
			return nil, err
		}
		if f.Size < 0 || f.Offset < 0 || f.Offset+f.Size > int64(len(payload)) {
			return nil, fmt.Errorf("launch: checkpoint payload: %s out of bounds", f.Path)
		}
	}
	return h, nil
}
