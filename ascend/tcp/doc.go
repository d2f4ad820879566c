// Package tcp is the TCP transport of ascend.
//
// A worker process opens one node-level [Listener] for its lifetime; many
// communicators (sessions) come and go over it. [Connect] forms one rank's
// [ascend.Communicator] of a [Group]: each rank dials every lower rank's
// listener and accepts connections from every higher rank (a full mesh,
// meant for worlds up to ~64 ranks). The listener reads the first handshake
// message of an inbound connection and dispatches it to the Connect waiting
// for that (session, rank); a connection for a session nobody waits for yet
// is held (the peer may be faster) and dropped after ListenConfig.HoldTimeout,
// telling the dialer to retry.
//
// # Handshake
//
// Every connection starts with a mutually authenticated handshake over the
// group's shared token (length-prefixed messages, each at most 2 KiB):
//
//	dialer → listener: hello     magic, version, world size, from/to rank, nonceC, session
//	listener → dialer: challenge status, nonceS, HMAC(token, "server" ‖ transcript)
//	dialer → listener: proof     status, HMAC(token, "client" ‖ transcript)
//	listener → dialer: result    status
//
// where transcript = version, session, world size, both ranks and both
// nonces, and HMAC is HMAC-SHA256. Each side proves knowledge of the token
// over fresh nonces of the other side, with distinct roles, so a proof can be
// neither replayed nor reflected. A wrong token fails on both sides with a
// [*HandshakeError] wrapping [ErrAuth]; a different protocol version wraps
// [ErrVersion]; a different world size, a bad or duplicate rank wraps
// [ErrGroupMismatch]; malformed messages wrap [ascend.ErrProtocol].
// Payloads are not encrypted.
//
// After the handshake the two ranks agree on the link's medium (link.go):
// with Options.SharedMemory on both sides and the same host, the link
// becomes a shared-memory ring pair (package ascend/shm) and the TCP
// connection stays open only to notice the peer going away; otherwise it
// carries the frames itself.
//
// # Frames
//
// After the handshake the connection carries frames of
// [length uint32 LE][tag uint32 LE][8 zero bytes][payload][zero padding],
// payloads at most [MaxFrame] bytes, each frame padded to a multiple of 16
// bytes so that every payload starts 16-byte aligned in the stream (the
// kernel's copies of misaligned payloads are far slower; see frameAlign).
// Non-zero reserved or padding bytes are a protocol error. A message's
// frames go to the socket up to 16 per writev (SendFrames and
// TrySendFrames, ascend.FramesSender); the receiver reads them one by one.
// TCP_NODELAY is on. Every frame read and write runs under a deadline
// of Options.OpTimeout (or the context's deadline if earlier), so a dead or
// stuck peer becomes an [*ascend.PeerError] rather than a hang.
package tcp
