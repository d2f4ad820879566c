package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLogIsCapped: a chatty rank (about 400 KiB of numbered lines, a
// 100 KiB burst in one write among them) then an error and a failure.
// Under a cap its log keeps the head and the tail, at most the cap,
// with one marker line saying how many bytes it dropped — the head, the
// dropped bytes and the tail adding up to the whole output; the exit's
// tail, the error message and LastLines still end with the error. A
// negative cap keeps everything.
func TestLogIsCapped(t *testing.T) {
	const lines = 30000
	script := `awk 'BEGIN { for (i = 1; i <= 15000; i++) print "line " i
  s = ""; for (i = 0; i < 10240; i++) s = s "burst-xyz"; printf "%s\n", s
  for (i = 15001; i <= ` + strconv.Itoa(lines) + `; i++) print "line " i }'
echo "Traceback: the end" >&2
exit 3`
	whole := 0
	for i := 1; i <= lines; i++ {
		whole += len(fmt.Sprintf("line %d\n", i))
	}
	whole += 10240*len("burst-xyz") + 1 + len("Traceback: the end\n")
	marker := regexp.MustCompile(`(?m)^… (\d+) bytes dropped \(the log keeps the first .* and at most the last .* of its process's output\) …\n`)
	for _, tc := range []struct {
		name   string
		max    int64
		capped bool
	}{
		{"the smallest cap", MinLogMax, true},
		{"a cap of 200 KiB", 200 << 10, true},
		{"a cap below the smallest", 1000, true}, // (raised to MinLogMax)
		{"no cap", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sp := Spec{Name: "rank-0", Rank: 0, Argv: []string{"sh", "-c", script}, Env: os.Environ(),
				LogPath: filepath.Join(dir, "rank-0.log"), LogMax: tc.max}
			g, err := Start([]Spec{sp})
			if err != nil {
				t.Fatal(err)
			}
			err = g.Wait(context.Background(), time.Second)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 3 {
				t.Fatalf("Wait: %v", err)
			}
			if !strings.HasSuffix(ee.Tail, fmt.Sprintf("line %d\nTraceback: the end\n", lines)) || !strings.HasSuffix(ee.Error(), ": Traceback: the end") {
				t.Errorf("exit tail %q, error %q", ee.Tail, ee.Error())
			}
			if got := LastLines(sp.LogPath, 2, 1024); len(got) != 2 || got[0] != fmt.Sprintf("line %d", lines) || got[1] != "Traceback: the end" {
				t.Errorf("LastLines: %q", got)
			}
			b, err := os.ReadFile(sp.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			if !strings.HasPrefix(log, "line 1\nline 2\n") {
				t.Errorf("the log does not start with the output's head: %q", log[:min(len(log), 40)])
			}
			ms := marker.FindAllStringSubmatchIndex(log, -1)
			if !tc.capped {
				if len(log) != whole || len(ms) != 0 {
					t.Errorf("uncapped log: %d bytes (want %d), %d markers", len(log), whole, len(ms))
				}
				return
			}
			if limit := max(tc.max, MinLogMax); int64(len(log)) > limit {
				t.Errorf("log of %d bytes; want at most %d", len(log), limit)
			}
			if len(ms) != 1 {
				t.Fatalf("%d marker lines in the log; want 1:\n%s", len(ms), log[:min(len(log), 2000)])
			}
			m := ms[0]
			dropped, _ := strconv.Atoi(log[m[2]:m[3]])
			head, tail := log[:m[0]], log[m[1]:]
			if len(head)+dropped+len(tail) != whole {
				t.Errorf("head %d + dropped %d + tail %d bytes = %d; want the output's %d", len(head), dropped, len(tail),
					len(head)+dropped+len(tail), whole)
			}
			// Whole lines on both sides, each side an unbroken run of them.
			lineRe := regexp.MustCompile(`^line (\d+)$`)
			for side, text := range map[string]string{"head": head, "tail": strings.TrimSuffix(tail, "Traceback: the end\n")} {
				if !strings.HasSuffix(text, "\n") {
					t.Fatalf("%s does not end a line: …%q", side, text[max(0, len(text)-40):])
				}
				prev := -1
				for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
					sm := lineRe.FindStringSubmatch(l)
					if sm == nil {
						t.Fatalf("%s: %q is not a whole line of the output", side, l[:min(len(l), 60)])
					}
					n, _ := strconv.Atoi(sm[1])
					if prev >= 0 && n != prev+1 {
						t.Fatalf("%s: line %d follows line %d", side, n, prev)
					}
					prev = n
				}
			}
		})
	}
}
