package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL cmd's process when the launcher
// dies (crashed, OOM-killed, SIGKILLed), so no rank runs on orphaned. The
// signal comes when the thread that started the child exits; Go's runtime
// keeps its threads unless a goroutine locked to one exits, which Launch's
// does not. A command self already gave its own SysProcAttr keeps it.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}
