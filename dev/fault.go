package dev

import (
	"os"
	"syscall"
)

// KillSelfAt returns a step hook that SIGKILLs this process once the given
// global step has completed: no deferred cleanup, no goodbye to peers or to
// Temporal — what a node that loses power does. Used by tests and demos.
func KillSelfAt(step int64) func(int64) {
	return func(s int64) {
		if s == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}
