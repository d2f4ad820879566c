package tcp

import (
	"errors"
	"fmt"
)

var (
	// ErrAuth reports that the peer does not know the group token, or that
	// the peer rejected ours. Retrying with the same token cannot succeed.
	ErrAuth = errors.New("tcp: authentication failed: token mismatch")
	// ErrVersion reports a peer speaking another protocol version.
	ErrVersion = errors.New("tcp: protocol version mismatch")
	// ErrGroupMismatch reports a peer with a different world size, an
	// out-of-range or duplicate rank, or another session.
	ErrGroupMismatch = errors.New("tcp: group mismatch")
	// ErrListenerClosed is returned by Connect when its Listener is closed.
	ErrListenerClosed = errors.New("tcp: listener closed")

	// errRetry: the listener dropped the connection before a Connect
	// claimed it (hold timeout, busy); the dialer should try again.
	errRetry = errors.New("tcp: peer not ready, retry")
)

// HandshakeError is a failed handshake between this rank and Peer. Connect
// wraps it with the session and rank.
type HandshakeError struct {
	Session string
	Rank    int    // this rank
	Peer    int    // the peer's rank (-1 if unknown)
	Addr    string // the peer's address
	// Remote is true when the peer refused us (e.g. it found our proof of
	// the token wrong) rather than us refusing the peer.
	Remote bool
	Err    error
}

func (e *HandshakeError) Error() string {
	who := ""
	if e.Remote {
		who = "peer rejected us: "
	}
	return fmt.Sprintf("handshake with rank %d (%s): %s%v", e.Peer, e.Addr, who, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }
