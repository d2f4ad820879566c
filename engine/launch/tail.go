package launch

import (
	"strings"
)

// LastLines returns the last n lines of the log at path, reading at most
// maxBytes from its end: a bounded tail for a heartbeat, whatever the log's
// size or line lengths. A line cut by the byte budget is dropped unless it
// is the only one (then its end is kept); carriage-return progress bars
// keep only what they drew last; invalid UTF-8 is replaced. nil when the
// log cannot be read or is empty.
func LastLines(path string, n, maxBytes int) []string {
	if n <= 0 || maxBytes <= 0 {
		return nil
	}
	// Tail drops a partial first line when it had to cut, unless that line
	// is all there is.
	s := strings.TrimRight(Tail(path, maxBytes), "\r\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		lines[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	return lines
}
