package ascend

import "testing"

// PipeGroup exposes pipeGroup (internal_test.go) to the external tests:
// n communicators over synchronous in-memory pipes, frames of chunkBytes,
// on the zero-copy (native) or the portable wire path.
func PipeGroup(t *testing.T, n, chunkBytes int, native bool) []*Communicator {
	return pipeGroup(t, n, chunkBytes, native)
}
