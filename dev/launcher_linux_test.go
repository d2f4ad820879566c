package dev

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/internal/procattr"
)

// TestChildDiesWithLauncher: a child of a Launcher that is SIGKILLed
// (crashed, OOM-killed) does not run on. The parent is this test binary
// again (DEV_TEST_PARENT): it starts a long sleep through a Launcher,
// prints its pid and waits; the test kills the parent and polls until
// the sleep is gone.
func TestChildDiesWithLauncher(t *testing.T) {
	if os.Getenv("DEV_TEST_PARENT") == "1" {
		l := &Launcher{Command: func(args ...string) *exec.Cmd { return exec.Command("sleep", args...) }}
		p, err := l.Start("orphan", "600")
		if err != nil {
			fmt.Println("start:", err)
			os.Exit(1)
		}
		fmt.Println(p.Pid())
		<-p.Done() // until killed
		os.Exit(0)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "-test.run=^TestChildDiesWithLauncher$")
	parent.Env = append(os.Environ(), "DEV_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("parent said %q (%v)", line, err)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	if !procattr.Exited(pid, 10*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL) // the sleep this test started, still running
		t.Fatalf("child %d still runs after its launcher was killed", pid)
	}
}
