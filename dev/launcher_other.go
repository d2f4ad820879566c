//go:build !linux

package dev

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// there a launcher that dies without StopAll leaves its children running.
func dieWithParent(*exec.Cmd) {}
