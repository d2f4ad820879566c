//go:build !linux

package procattr

import "os/exec"

// DieWithParent does nothing where the kernel has no parent-death signal:
// there a launcher that dies without stopping its children leaves them
// running.
func DieWithParent(*exec.Cmd) {}
