package pidlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A second lock on the file is refused, naming the holder's pid; once the
// holder's file is closed the lock is free again.
func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	WritePID(f)
	_, err = TryLock(path) // (another open file description: flock refuses it too)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != fmt.Sprintf("pid %d", os.Getpid()) {
		t.Fatalf("second lock: %v; want a HeldError naming pid %d", err, os.Getpid())
	}
	f.Close()
	g, err := TryLock(path)
	if err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	g.Close()
	if _, err := TryLock(filepath.Join(t.TempDir(), "no", "such", "dir", "x.lock")); err == nil || errors.As(err, &held) {
		t.Fatalf("lock in a missing directory: %v; want the open's error", err)
	}
}
