package launch

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"syscall"
)

// A node worker that is SIGKILLed takes its direct children along (their
// parent-death signal), but not what they spawned. Such leftovers are
// swept by the next supervisor on that node: the group's process-group
// ids and their leaders' start times are kept in a pid file while it runs
// and killed by SweepPidFile.

type pidEntry struct {
	Pgid  int    `json:"pgid"`
	Start string `json:"start"` // the leader's start time (/proc stat field 22)
}

// WritePidFile records the group's process groups at path.
func (g *Group) WritePidFile(path string) error {
	var es []pidEntry
	for _, p := range g.procs {
		es = append(es, pidEntry{Pgid: p.pid, Start: startTime(p.pid)})
	}
	b, err := json.Marshal(es)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// SweepPidFile kills (SIGKILL) what is left of the process groups recorded
// at path and removes the file; it returns how many groups it signalled.
// A leader that still exists but started at another time is another
// process that reused the id, and is spared; a group whose leader is gone
// cannot have had its id reused while any member lives.
func SweepPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var es []pidEntry
	if err := json.Unmarshal(b, &es); err != nil {
		os.Remove(path)
		return 0, err
	}
	n := 0
	for _, e := range es {
		if e.Pgid <= 1 {
			continue
		}
		if st := startTime(e.Pgid); st != "" && st != e.Start {
			continue
		}
		if syscall.Kill(-e.Pgid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n, os.Remove(path)
}

// startTime is field 22 of /proc/<pid>/stat ("" when there is no such
// process).
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + itoa10(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): field 22 is f[19].
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func itoa10(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
