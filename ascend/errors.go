package ascend

import (
	"errors"
	"fmt"
	"os"
)

var (
	// ErrClosed is returned by every call on a Communicator after Close.
	ErrClosed = errors.New("ascend: communicator closed")
	// ErrMismatch reports that ranks disagree about a collective: a
	// different kind, op, root, buffer length or call order.
	ErrMismatch = errors.New("ascend: collective mismatch between ranks")
	// ErrProtocol reports a malformed or out-of-bounds frame or message.
	ErrProtocol = errors.New("ascend: protocol violation")
	// ErrInvalid reports an invalid argument. Argument errors are detected
	// before any I/O and do not break the Communicator.
	ErrInvalid = errors.New("ascend: invalid argument")
)

// PeerError reports a failure observed on the link to one peer: an I/O error,
// a timeout (Err wraps os.ErrDeadlineExceeded), the peer going away (io.EOF,
// io.ErrUnexpectedEOF, a reset) or a protocol/mismatch violation.
type PeerError struct {
	Rank int    // the peer's rank
	Op   string // the operation: "allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall", "barrier", "send", "recv", "sendrecv", "calibrate"
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("ascend: %s: peer rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// Timeout reports whether the peer made no progress within the deadline.
func (e *PeerError) Timeout() bool { return errors.Is(e.Err, os.ErrDeadlineExceeded) }

// errorf wraps sentinel with a formatted message.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
