package bench

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/internal/procattr"
)

// TestRanksDieWithLauncher: ranks whose launcher is SIGKILLed (crashed,
// OOM-killed) do not run on. The launcher is this test binary again
// (BENCH_TEST_CHILD=parent, see TestMain) with ranks that sleep; the test
// kills it once both ranks said their pids and polls until they are gone.
func TestRanksDieWithLauncher(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to watch the ranks in")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "-test.run=^$")
	parent.Env = append(os.Environ(), "BENCH_TEST_CHILD=parent")
	stderr, err := parent.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	var pids []int
	sc := bufio.NewScanner(stderr)
	for len(pids) < 2 && sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "pid "); ok {
			pid, err := strconv.Atoi(p)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
	}
	if len(pids) < 2 {
		t.Fatalf("the ranks said pids %v (%v)", pids, sc.Err())
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	for _, pid := range pids {
		if !procattr.Exited(pid, 10*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // a rank this test started, still running
			t.Errorf("rank process %d still runs after its launcher was killed", pid)
		}
	}
}
