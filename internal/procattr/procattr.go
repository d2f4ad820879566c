// Package procattr ties child processes to their parent's life: a
// launcher that crashes, is OOM-killed or SIGKILLed leaves no rank or node
// worker running on (DieWithParent), and Exited tells when one is gone.
package procattr

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// Exited polls until process pid has exited — gone, or a zombie its new
// parent has not reaped yet — up to limit, and reports whether it did.
// It reads /proc (Linux); elsewhere it reports true at once.
func Exited(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a wait for an event
	}
}
