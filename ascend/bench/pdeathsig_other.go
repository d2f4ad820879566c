//go:build !linux

package bench

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// there Launch's ranks outlive a launcher that dies without stopping them.
func dieWithParent(*exec.Cmd) {}
