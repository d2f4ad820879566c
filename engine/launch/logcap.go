package launch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// A process's output reaches its log through a pipe the supervisor reads
// (copyLog), so that the log stays bounded however much the process
// writes: it keeps the output's head and a rolling tail, and where it cut
// a line says how much it dropped:
//
//	<the first bytes, up to the last whole line within LogHead>
//	… 123456789 bytes dropped (the log keeps the first 1 MiB and at most the last 62 MiB of its process's output) …
//	<the last bytes, from a line's start>
//
// The tail is at the file's end, as Tail and LastLines read it.

// DefaultLogMax is the cap of a process's log when Spec.LogMax is 0.
const DefaultLogMax = 64 << 20

// MinLogMax is the smallest cap a log takes (a smaller Spec.LogMax is
// raised to it): room for a head, the marker and a tail longer than
// TailBytes.
const MinLogMax = 64 << 10

// LogHead is the most a log keeps of its output's head (a quarter of the
// cap, when that is less).
const LogHead = 1 << 20

// markerRoom is the room kept for the marker line.
const markerRoom = 200

// logReadSize is how much copyLog reads from the pipe at once.
const logReadSize = 32 << 10

// DroppedMarker is the line a capped log holds where it dropped output,
// with the number of bytes dropped so far; keepHead and keepTail are the
// sizes kept (for the reader's sake).
func DroppedMarker(dropped, keepHead, keepTail int64) string {
	return fmt.Sprintf("… %d bytes dropped (the log keeps the first %s and at most the last %s of its process's output) …\n",
		dropped, sizeText(keepHead), sizeText(keepTail))
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// cappedLog writes a log file of at most max bytes (see above). Only its
// own goroutine writes the file.
type cappedLog struct {
	f   *os.File
	max int64 // <= 0: no cap
	// size is the file's size; head the bytes of output kept at its start
	// (-1: not cut yet); marker the length of the marker after them.
	size, head, marker int64
	dropped            int64
	err                error // the first write error (the rest is discarded)
}

func newCappedLog(f *os.File, max int64) *cappedLog {
	return &cappedLog{f: f, max: max, head: -1}
}

// logMax is Spec.LogMax as a cap (0: none).
func logMax(v int64) int64 {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return DefaultLogMax
	}
	return max(v, MinLogMax)
}

// headMax is the most the head takes under the cap.
func (l *cappedLog) headMax() int64 { return min(LogHead, l.max/4) }

// tailRoom is what the tail may take once the log is cut.
func (l *cappedLog) tailRoom() int64 { return l.max - l.headMax() - markerRoom }

func (l *cappedLog) Write(p []byte) (int, error) {
	n := len(p)
	if l.err != nil {
		return n, nil // (drained, not written: the process must not block)
	}
	if l.max > 0 && l.size+int64(len(p)) > l.max {
		if room := l.tailRoom(); int64(len(p)) > room {
			// (Only with a tiny cap: a read is at most logReadSize.)
			l.dropped += int64(len(p)) - room
			p = p[int64(len(p))-room:]
		}
		if err := l.cut(int64(len(p))); err != nil {
			l.err = err
			return n, nil
		}
	}
	if _, err := l.f.WriteAt(p, l.size); err != nil {
		l.err = err
		return n, nil
	}
	l.size += int64(len(p))
	return n, nil
}

// cut drops the middle of the log so that incoming more bytes fit: the
// head stays (fixed at the first cut, up to its last whole line), then
// the marker, then about half the tail's room of the latest output, from
// a line's start.
func (l *cappedLog) cut(incoming int64) error {
	if l.head < 0 {
		h := min(l.headMax(), l.size)
		buf := make([]byte, h)
		if _, err := l.f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 && int64(i+1) >= h/2 {
			h = int64(i + 1)
		}
		l.head, l.marker = h, 0
	}
	bodyStart := l.head + l.marker
	body := l.size - bodyStart
	keep := min(body, l.tailRoom()/2, l.tailRoom()-incoming)
	keep = max(keep, 0)
	src := l.size - keep
	// From a line's start (within the first 64 KiB of what it keeps).
	if keep > 0 {
		buf := make([]byte, min(keep, 64<<10))
		if _, err := l.f.ReadAt(buf, src); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			src += int64(i + 1)
			keep -= int64(i + 1)
		}
	}
	l.dropped += body - keep
	// The head without a line's end (one line longer than the head) ends
	// its line before the marker.
	lead := ""
	if l.head > 0 {
		var last [1]byte
		if _, err := l.f.ReadAt(last[:], l.head-1); err == nil && last[0] != '\n' {
			lead = "\n"
		}
	}
	marker := lead + DroppedMarker(l.dropped, l.head, l.tailRoom())
	dst := l.head + int64(len(marker))
	if dst > src { // (cannot happen with markerRoom to spare; kept safe)
		keep -= dst - src
		l.dropped += dst - src
		src = dst
		marker = lead + DroppedMarker(l.dropped, l.head, l.tailRoom())
	}
	// Forward, in pieces: the destination lies before the source.
	buf := make([]byte, min(keep, 1<<20))
	for off := int64(0); off < keep; {
		m := min(int64(len(buf)), keep-off)
		if _, err := l.f.ReadAt(buf[:m], src+off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if _, err := l.f.WriteAt(buf[:m], dst+off); err != nil {
			return err
		}
		off += m
	}
	if _, err := l.f.WriteAt([]byte(marker), l.head); err != nil {
		return err
	}
	l.marker = int64(len(marker))
	l.size = dst + keep
	return l.f.Truncate(l.size)
}

// copyLog copies what the process writes to r into its log until every
// holder of the pipe's other end has closed it, then closes done.
func copyLog(r *os.File, l *cappedLog, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	defer l.f.Close()
	buf := make([]byte, logReadSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = l.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
