// Package ascend is the collective-communication engine of cann-train: the
// role NCCL, HCCL or Gloo play for other frameworks. A [Communicator] binds
// one rank of a fixed-size group (a "session") to point-to-point [Conn]s to
// every other rank and runs collectives over them.
//
// # Contract
//
//   - Every rank of a session calls the same collectives, in the same order,
//     with the same arguments where the arguments must agree (buffer length,
//     [Op], broadcast root). Frames carry a tag derived from a per-call
//     sequence number, the collective kind and its op/root, so most
//     disagreements are detected and reported as [ErrMismatch] instead of
//     silently corrupting data.
//   - Collectives are synchronous and in place: when AllReduce or Broadcast
//     returns, buf holds the result and no goroutine of the Communicator
//     touches buf any more. Every rank receives a bit-identical result.
//   - float32 values travel little-endian. On little-endian hosts buffers are
//     sent and received without conversion (unsafe reinterpretation); on
//     big-endian hosts they are converted through a reused scratch buffer.
//   - The context is the first argument of every blocking call. Its deadline
//     bounds every frame; its cancellation aborts the collective promptly by
//     closing the connections.
//   - Failure is sticky: after any error other than an argument error
//     ([ErrInvalid]) the Communicator is broken. It sends its peers an abort
//     notice and closes its connections, so the failure reaches every rank
//     quickly, and every later call returns the same error ([ErrClosed]
//     after Close). The caller forms a new session to continue.
//   - A failure involving a peer is a [*PeerError] naming the rank that
//     failed: the neighbours of a dead or stuck rank see its links drop or
//     time out, and every other rank learns the culprit from the abort
//     notices passed on (then Err wraps [ErrPeerAborted], plus
//     os.ErrDeadlineExceeded or [ErrMismatch] when that was the cause).
//     A rank that closes or is cancelled names itself in its notice. Blame
//     is best effort: notices are not sent on a link busy mid-frame, and
//     two ranks that time out at the same moment may name each other.
//   - A Communicator's collectives must be called from one goroutine at a
//     time (they are serialised internally for safety). Close may be called
//     concurrently with a collective and aborts it.
//   - There is no package-level mutable state; several communicators, in one
//     process or many, are independent.
//
// Algorithms live one per file, each with its α-β cost at the top: the
// chunked ring for AllReduce (allreduce_ring.go), a pipelined binomial tree
// for Broadcast (broadcast_tree.go) and dissemination for Barrier
// (barrier_dissemination.go); abort notices are in abort.go.
//
// Transports implement [Conn]; package ascend/tcp is the TCP transport with
// a node-level listener, rendezvous and mutual authentication, and package
// ascend/ascendtest spawns in-process groups over loopback TCP for tests.
//
// # Non-goals (of this version)
//
//   - Algorithm selection (halving-doubling, tree AllReduce, hierarchical
//     intra/inter node), an α-β cost model, a shared-memory transport and a
//     benchmark harness in the style of nccl-tests come later; the API is
//     shaped so they slot in behind the same methods.
//   - No data types other than float32, no ReduceScatter/AllGather/
//     point-to-point API yet, no non-blocking collectives, no streams.
//   - No fault tolerance inside a session: a session does not survive the
//     loss of a rank; recovery is forming a new session.
//   - Transport encryption is out of scope: peers are mutually authenticated
//     (in ascend/tcp) but payloads travel in clear text.
package ascend
