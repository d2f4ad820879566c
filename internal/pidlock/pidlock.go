// Package pidlock holds a resource for one process at a time: an
// exclusive flock on a lock file — released with the file, so whenever
// and however the process ends — that names the holder's process ID for
// the message of the one refused. The dev server's database and a
// quickstart's run name use it.
package pidlock

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HeldError is a lock another process holds.
type HeldError struct {
	Holder string // "pid N", or "pid unknown" when its file does not say
}

func (e *HeldError) Error() string { return "held by another process (" + e.Holder + ")" }

// TryLock opens path, creating it, and takes its lock without waiting:
// a *HeldError when another process holds it.
func TryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "pid unknown"
		if b, rerr := io.ReadAll(io.LimitReader(f, 64)); rerr == nil && strings.TrimSpace(string(b)) != "" {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Holder: holder}
		}
		return nil, err
	}
	return f, nil
}

// WritePID records this process's ID in f, locked by TryLock, for the
// message of a process refused later. (Only for the message: the lock
// holds without it.)
func WritePID(f *os.File) {
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}
