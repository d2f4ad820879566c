package procattr

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel SIGKILL cmd's process when the launcher
// dies, as engine/launch's supervisor does for its ranks. The signal comes
// when the thread that started the child exits; Go's runtime keeps its
// threads unless a goroutine locked to one exits. A command that already
// has a parent-death signal keeps it.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}
