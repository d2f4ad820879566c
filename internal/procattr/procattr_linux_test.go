package procattr

import (
	"os/exec"
	"testing"
	"time"
)

// TestExited: a running process has not exited (within the limit); one
// killed has, reaped or not.
func TestExited(t *testing.T) {
	for _, reap := range []bool{true, false} {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if Exited(pid, 50*time.Millisecond) {
			t.Fatalf("process %d said exited while it sleeps", pid)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if reap {
			_ = cmd.Wait()
		}
		if !Exited(pid, 10*time.Second) {
			t.Errorf("process %d (reaped %v) not seen exited after its kill", pid, reap)
		}
		if !reap {
			_ = cmd.Wait()
		}
	}
}
