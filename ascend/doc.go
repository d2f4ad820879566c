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
//   - Collectives are synchronous: when one returns, its output holds the
//     result and no goroutine of the Communicator touches the caller's
//     buffers any more. Most have an in-place form (AllReduce(buf)) and an
//     out-of-place one (AllReduceInto(dst, src), src left untouched);
//     dst and src must be the same slice or not overlap. Every rank of an
//     AllReduce or AllGather receives a bit-identical result (each element
//     is reduced once, by one rank, and then copied).
//   - Operations: AllReduce, ReduceScatter, AllGather and AllGatherV,
//     Broadcast, Reduce (to a root; the other ranks' buffers are left
//     untouched), AllToAll and AllToAllV, Barrier, and point-to-point Send,
//     Recv and SendRecv (see p2p.go for how they interleave with
//     collectives). The ops are Sum, Avg, Max and Min on float32.
//   - float64 and int32 go through the generic functions of typed.go
//     (AllReduceOf, ReduceScatterOf, ReduceOf, AllGatherOf, AllGatherVOf,
//     BroadcastOf, AllToAllOf, AllToAllVOf, SendOf, RecvOf; float32 there
//     is the methods): data movement runs the float32 machinery on the
//     buffers' 4-byte words, reductions a pairwise exchange of shares that
//     each owner folds in rank order (the ring's volume, bit-identical on
//     every rank). Avg is for floats only; Sum on int32 wraps.
//   - After the first call at a given size, no operation allocates: its
//     scratch buffers belong to the Communicator and are reused.
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
// # Algorithms
//
// Algorithms live one per file, each with its α-β-γ cost at the top: ring
// (ring.go: ring AllReduce, ReduceScatter and AllGather, pipelined chain
// Broadcast and Reduce), recursive halving-doubling (halving_doubling.go:
// Rabenseifner AllReduce, ReduceScatter and AllGather, any world size),
// binomial tree (tree.go: pipelined Broadcast and Reduce, and AllReduce as
// the two), recursive doubling (recursive_doubling.go: small-message
// AllReduce), hierarchical two-level AllReduce (hierarchical.go: within
// hosts, then among host leaders), pairwise exchange (alltoall_pairwise.go),
// Bruck's AllToAll for small blocks (alltoall_bruck.go)
// and dissemination (barrier_dissemination.go). Each call picks the algorithm with the lowest
// predicted time from an α-β-γ cost model (algorithm.go) whose parameters
// Calibrate measures on the links when a communicator starts (tcp.Connect
// does it; a few milliseconds) and the ranks agree on, so they all choose
// alike. The model prices both an algorithm's critical path and its share
// of the total work, which is what counts when ranks share CPUs. The
// choice can be forced with Config.Algorithm or SetAlgorithm, or per
// process with ASCEND_ALGO=ring|hd|tree|rd|hier (or per collective,
// "allreduce=hd,broadcast=tree"), like NCCL_ALGO and HCCL_ALGO; frames
// carry the algorithm, so ranks that disagree fail with ErrMismatch.
// Abort notices are in abort.go.
//
// Ranks of one host can also share memory (shared.go): AllocShared gives
// every rank a buffer the others map, and an AllReduce, ReduceScatter,
// AllGather(V) or Broadcast of shared buffers reads the peers' data where
// it lies (direct.go) instead of sending it over the links, folding in the
// ring's order so that its bits are the ring's. The sums run on AVX2 where the CPU has it (reduce_amd64.s).
//
// Transports implement [Conn]; package ascend/tcp is the TCP transport with
// a node-level listener, rendezvous and mutual authentication, package
// ascend/shm is the shared-memory transport tcp.Connect switches
// same-host links to on request (and the memory shared buffers live in),
// package ascend/ascendtest spawns
// in-process groups over loopback TCP for tests, and package ascend/bench
// is the nccl-tests style benchmark.
//
// # Non-goals (of this version)
//
//   - The hierarchical algorithm treats a host's links alike whatever
//     they are; the direct algorithms (shared buffers) cover AllReduce,
//     ReduceScatter, AllGather(V) and Broadcast (not Reduce, AllToAll),
//     and only when every rank is on one host.
//   - No data types other than float32, no non-blocking collectives, no
//     streams, no in-place AllToAll.
//   - One TCP connection per pair of ranks (NCCL's socket transport can
//     stripe a message over several, NCCL_NSOCKS_PERTHREAD). On this 2-core
//     VM, a 4 MiB message striped over 2 or 4 loopback connections, a
//     reader and a writer goroutine per connection, moved 2.99–3.19 GB/s
//     per end both ways at once against 2.71–2.84 for one connection (one
//     way 5.7–7.0 against 5.0–6.2; 256 KiB no gain), three alternations:
//     less than the run-to-run noise of an allreduce here, while every
//     extra connection needs its own polling reader competing for the two
//     cores. On hosts whose NIC outruns one core's TCP stream it would
//     pay; it is not built.
//   - Senders copy their payload into the socket (writev). Handing the
//     pages over instead (vmsplice into a pipe, splice into the socket:
//     the receiver's copy then is the only one on loopback) moved 2.5–2.7
//     GB/s one way against write's 4.0–5.1 (4 MiB messages, three
//     alternations; the kernel takes a reference on every 4 KiB page),
//     and would forbid touching a sent buffer until the peer has read it.
//   - No fault tolerance inside a session: a session does not survive the
//     loss of a rank; recovery is forming a new session.
//   - Transport encryption is out of scope: peers are mutually authenticated
//     (in ascend/tcp) but payloads travel in clear text.
package ascend
