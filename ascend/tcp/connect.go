package tcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
)

// Group is one rank's description of a session.
type Group struct {
	// Session identifies this communicator instance and must be unique per
	// instance (e.g. "run/<id>/g3/e7"); at most 1024 bytes.
	Session string
	// Rank is this rank, in [0, len(Addrs)).
	Rank int
	// Addrs[i] is rank i's listener address; len(Addrs) is the world size.
	// Several ranks may share one listener.
	Addrs []string
	// Token is the per-run secret all ranks share (e.g. 32 random bytes).
	Token []byte
}

// Options tunes Connect. The zero value uses the defaults.
type Options struct {
	// ConnectTimeout bounds forming the whole group, including waiting for
	// slower ranks to start. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// OpTimeout bounds every frame read and write of the communicator: a
	// peer that makes no progress for this long fails the collective with
	// an *ascend.PeerError wrapping os.ErrDeadlineExceeded. It must exceed
	// the largest skew between ranks entering a collective. Default
	// DefaultOpTimeout; negative disables it (then only the context's
	// deadline applies).
	OpTimeout time.Duration
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF when positive. Zero leaves
	// the kernel's autotuning alone, which on Linux is usually faster.
	SocketBuffer int
	// Algorithm forces a collective algorithm (ascend.Config.Algorithm);
	// the zero value selects automatically (or per ASCEND_ALGO). It must
	// be equal on all ranks.
	Algorithm ascend.Algorithm
	// ChunkBytes is the communicator's frame size (ascend.Config.ChunkBytes;
	// 0 means ascend.DefaultChunkBytes, at most MaxFrame). It must be equal
	// on all ranks.
	ChunkBytes int
	// SharedMemory makes the link to every peer on the same host a
	// shared-memory ring (package ascend/shm), provided the peer sets it
	// too and both see the same /dev/shm; the TCP connection then only
	// watches the peer's liveness. Other links stay TCP.
	SharedMemory bool
	// SharedMemoryRing is the ring capacity per direction of those links
	// (0: shm.DefaultRingBytes).
	SharedMemoryRing int
	// Spin is how long a TCP receive polls the socket before it sleeps in
	// the kernel, which cuts small-message latency 3–4× (see spinReader).
	// Zero means DefaultSpin while the ranks on this host do not outnumber
	// its cores and no polling otherwise; negative never polls.
	Spin time.Duration
	// Hosts, if set, names every rank's host (len = world size, equal on
	// all ranks), overriding what the ranks found out (kernel boot ids);
	// the hierarchical algorithm groups ranks by it.
	Hosts []string
	// SkipCalibration skips measuring the links when the group forms
	// (ascend.Communicator.Calibrate, a few milliseconds); the cost model
	// then stays ascend.DefaultCostModel. It must be equal on all ranks.
	SkipCalibration bool
	// RefusedGrace, when positive, ends Connect with an *ascend.PeerError
	// naming a rank whose address has refused every connection for this
	// long (a lower rank, which this one dials; a higher rank that has not
	// dialled this one within RefusedGrace, or a rank whose link broke while
	// the links were set up, is probed): where every rank's
	// listener is known to be up before the group forms (node workers open
	// theirs before they register), a refusal means that rank's process is
	// gone, and waiting out ConnectTimeout only delays its replacement.
	// Zero keeps waiting until ConnectTimeout (ranks that may still be
	// starting).
	RefusedGrace time.Duration
	// ReachWithin, when positive, ends Connect with an *ascend.PeerError
	// naming a rank whose address has not taken one TCP connection within
	// this long of Connect's start (a lower rank, dialled; a higher rank,
	// probed): a partition, or a firewall on its port. A rank whose
	// listener answers may take until ConnectTimeout to join — it may be
	// slow to get ready (restoring a checkpoint) — so ConnectTimeout can
	// be long without a peer that cannot be reached costing that long.
	ReachWithin time.Duration
}

const (
	DefaultConnectTimeout = 60 * time.Second
	DefaultOpTimeout      = 2 * time.Minute
	// DefaultSpin covers a loopback or same-rack round trip with room to
	// spare, yet costs a waiting rank at most this much CPU per frame.
	DefaultSpin = 50 * time.Microsecond
)

// Connect forms rank g.Rank's Communicator of the session g.Session: it
// dials the lower ranks, accepts the higher ranks through l, authenticates
// every link, and returns once all ranks are connected (it ends with a
// barrier, then calibrates the cost model unless Options.SkipCalibration
// is set). It fails with a *HandshakeError (wrapping ErrAuth, ErrVersion,
// ErrGroupMismatch or ascend.ErrProtocol), with context.DeadlineExceeded
// when ConnectTimeout passes, or with the ctx's error. A rank that never
// connected within ConnectTimeout and (with RefusedGrace) a rank whose
// address refuses connections are named by an *ascend.PeerError in the
// chain, so that a caller can blame that rank. With RefusedGrace, a link
// that breaks while the group forms (the link exchange, the first barrier)
// is checked against the peer's listener (probe.go): the peer is named if
// its address refuses connections, and if it answers — alive, it hung up
// because a third rank failed, and the abort notices that would say so
// flow only once the group has formed — the error wraps ErrPeerLeft and
// names nobody.
func Connect(ctx context.Context, l *Listener, g Group, opts Options) (*ascend.Communicator, error) {
	c, err := connect(ctx, l, g, opts)
	if err != nil {
		return nil, fmt.Errorf("tcp: connect session %q rank %d: %w", g.Session, g.Rank, err)
	}
	return c, nil
}

func connect(ctx context.Context, l *Listener, g Group, opts Options) (*ascend.Communicator, error) {
	world := len(g.Addrs)
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: nil listener", ascend.ErrInvalid)
	case world < 1 || world > maxWorld:
		return nil, fmt.Errorf("%w: world size %d", ascend.ErrInvalid, world)
	case g.Rank < 0 || g.Rank >= world:
		return nil, fmt.Errorf("%w: rank %d of %d", ascend.ErrInvalid, g.Rank, world)
	case len(g.Session) == 0 || len(g.Session) > maxSession:
		return nil, fmt.Errorf("%w: session of %d bytes", ascend.ErrInvalid, len(g.Session))
	case len(g.Token) == 0:
		return nil, fmt.Errorf("%w: empty token", ascend.ErrInvalid)
	case opts.ChunkBytes < 0 || opts.ChunkBytes > MaxFrame:
		return nil, fmt.Errorf("%w: ChunkBytes %d", ascend.ErrInvalid, opts.ChunkBytes)
	case opts.Hosts != nil && len(opts.Hosts) != world:
		return nil, fmt.Errorf("%w: %d hosts for world size %d", ascend.ErrInvalid, len(opts.Hosts), world)
	}
	for j := 0; j < g.Rank; j++ {
		if g.Addrs[j] == "" {
			return nil, fmt.Errorf("%w: empty address for rank %d", ascend.ErrInvalid, j)
		}
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	switch {
	case opts.OpTimeout == 0:
		opts.OpTimeout = DefaultOpTimeout
	case opts.OpTimeout < 0:
		opts.OpTimeout = 0
	}
	deadline := time.Now().Add(opts.ConnectTimeout)
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	s := side{token: append([]byte(nil), g.Token...), session: g.Session, world: world, rank: g.Rank, rand: rand.Reader}
	k := key{g.Session, g.Rank}
	w, err := l.register(k, world+8)
	if err != nil {
		return nil, err
	}
	defer l.unregister(k, w)

	ncs, err := mesh(cctx, l, w, s, g.Addrs, opts.RefusedGrace, reachBy(opts.ReachWithin))
	if err != nil {
		return nil, err
	}
	for _, nc := range ncs {
		if nc == nil {
			continue
		}
		_ = nc.SetNoDelay(true)
		if opts.SocketBuffer > 0 {
			_ = nc.SetReadBuffer(opts.SocketBuffer)
			_ = nc.SetWriteBuffer(opts.SocketBuffer)
		}
	}
	conns, hostIDs, err := links(cctx, ncs, g.Rank, opts)
	if err != nil {
		// Name the rank that died before hanging up on the others: they
		// would take our leaving for a death.
		err = blameGone(cctx, err, g.Addrs, opts.RefusedGrace)
		closeLinks(conns)
		closeAll(ncs)
		return nil, err
	}
	if opts.Hosts != nil {
		hostIDs = opts.Hosts
	}
	cfg := ascend.Config{Rank: g.Rank, Size: world, Session: g.Session, Conns: conns, Algorithm: opts.Algorithm, ChunkBytes: opts.ChunkBytes, Hosts: ascend.HostIndex(hostIDs)}
	if opts.SharedMemory && shm.Supported {
		cfg.Shared, cfg.OpTimeout = shm.Memory{}, opts.OpTimeout // AllocShared
	}
	comm, err := ascend.New(cfg)
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	// Return only once every rank has its full mesh.
	bctx, bcancel := context.WithDeadline(ctx, deadline)
	defer bcancel()
	if err := comm.Barrier(bctx); err != nil {
		comm.Close()
		return nil, fmt.Errorf("group not formed: %w", checkLost(ctx, err, g.Addrs, opts.RefusedGrace))
	}
	if !opts.SkipCalibration {
		if _, err := comm.Calibrate(bctx); err != nil {
			comm.Close()
			return nil, fmt.Errorf("calibrating links: %w", err)
		}
	}
	return comm, nil
}

type result struct {
	peer int
	nc   *net.TCPConn
	err  error
}

// failGrace is how long handshakes already in flight may finish after Connect
// has failed, so that their peers learn the cause (e.g. ErrAuth) instead of
// waiting for their ConnectTimeout.
const failGrace = time.Second

// mesh dials the lower ranks and accepts the higher ranks, authenticating
// each link. It returns conns indexed by rank (nil for self).
func mesh(ctx context.Context, l *Listener, w *waiter, s side, addrs []string, refusedGrace time.Duration, reach deadline) ([]*net.TCPConn, error) {
	world := len(addrs)
	// loopCtx stops dialling and accepting; hsCtx interrupts handshakes.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	hsCtx, stopHandshakes := context.WithCancel(ctx)
	defer stopHandshakes()
	results := make(chan result, world)
	var wg sync.WaitGroup
	deliver := func(r result) {
		select {
		case results <- r:
		case <-loopCtx.Done():
			if r.nc != nil {
				r.nc.Close()
			}
		}
	}
	for j := 0; j < s.rank; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := dialPeer(loopCtx, hsCtx, s, j, addrs[j], refusedGrace, reach)
			deliver(result{j, nc, err})
		}()
	}
	if refusedGrace > 0 || reach.set() {
		// A higher rank dials us; one whose process is gone never does, and
		// only its address can tell (it refuses connections, or takes
		// none).
		first := refusedGrace
		if first <= 0 {
			first = reach.within / 4
		}
		for j := s.rank + 1; j < world; j++ {
			if addrs[j] == "" {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				how := fmt.Sprintf("rank %d never connected and ", j)
				if _, gone := probeUntil(loopCtx, j, addrs[j], refusedGrace, first, reach, how); gone != nil {
					deliver(result{peer: j, err: gone})
				}
			}()
		}
	}
	{ // Even the highest rank accepts, to refuse stray dialers explicitly.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case in := <-w.ch:
					wg.Add(1)
					go func() {
						defer wg.Done()
						deliver(acceptPeer(hsCtx, s, in))
					}()
				case <-l.done:
					deliver(result{peer: -1, err: ErrListenerClosed})
					return
				case <-loopCtx.Done():
					return
				}
			}
		}()
	}

	ncs := make([]*net.TCPConn, world)
	need := world - 1
	var err error
	for need > 0 && err == nil {
		select {
		case r := <-results:
			var gone *ascend.PeerError
			switch {
			case r.err != nil && errors.As(r.err, &gone):
				err = r.err // probe
			case r.err != nil && r.peer > s.rank && !fatal(r.err):
				// An inbound attempt died (e.g. the peer gave up and will
				// redial); keep waiting.
			case r.err != nil:
				err = r.err
			case ncs[r.peer] != nil:
				r.nc.Close()
				err = &HandshakeError{Session: s.session, Rank: s.rank, Peer: r.peer, Addr: r.nc.RemoteAddr().String(),
					Err: fmt.Errorf("%w: rank %d connected twice", ErrGroupMismatch, r.peer)}
			default:
				ncs[r.peer] = r.nc
				need--
			}
		case <-ctx.Done():
			var missing []int
			for i, nc := range ncs {
				if nc == nil && i != s.rank {
					missing = append(missing, i)
				}
			}
			err = fmt.Errorf("waiting for ranks %s: %w", rankList(missing), ctx.Err())
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && len(missing) > 0 {
				// Never showed up: blame the first (the others are in
				// the message).
				err = &ascend.PeerError{Rank: missing[0], Op: "connect", Err: err}
			}
		}
	}
	stopLoops()
	if err == nil {
		stopHandshakes()
	} else {
		// Let handshakes in flight finish briefly so those peers fail fast
		// with the real cause; their results are discarded below.
		t := time.AfterFunc(failGrace, stopHandshakes)
		defer t.Stop()
	}
	wg.Wait()
	for len(results) > 0 {
		if r := <-results; r.nc != nil && (err != nil || ncs[r.peer] != r.nc) {
			r.nc.Close()
		}
	}
	if err != nil {
		closeAll(ncs)
		return nil, err
	}
	return ncs, nil
}

func closeAll(ncs []*net.TCPConn) {
	for _, nc := range ncs {
		if nc != nil {
			nc.Close()
		}
	}
}

// fatal reports errors retrying cannot fix.
func fatal(err error) bool {
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrVersion) || errors.Is(err, ErrGroupMismatch)
}

// dialPeer dials rank peer until the handshake succeeds, fails fatally or
// ctx ends; hsCtx bounds a handshake in progress.
func dialPeer(ctx, hsCtx context.Context, s side, peer int, addr string, refusedGrace time.Duration, reach deadline) (*net.TCPConn, error) {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var refused refusals
	reached := false
	for {
		c, err := dialBefore(ctx, &d, addr, reached, reach)
		if gone := refused.note(err, refusedGrace, peer, addr, ""); gone != nil {
			return nil, gone
		}
		if err != nil && !reached && reach.passed() {
			return nil, unreachable(peer, addr, "", reach, err)
		}
		if err == nil {
			reached = true
			nc := c.(*net.TCPConn)
			remote, herr := underCtx(hsCtx, nc, func() (bool, error) { return clientHandshake(nc, s, peer) })
			if herr == nil {
				return nc, nil
			}
			nc.Close()
			he := &HandshakeError{Session: s.session, Rank: s.rank, Peer: peer, Addr: addr, Remote: remote, Err: herr}
			if errors.Is(herr, ascend.ErrProtocol) && !remote {
				// What answers at the rank's address is no rank of ours
				// (another service, a proxy): the rank cannot be reached
				// there, which retrying on the same nodes does not change.
				return nil, &ascend.PeerError{Rank: peer, Op: "connect",
					Err: fmt.Errorf("%s does not answer as a cann-train node (another program listens there: check that node's --comm-advertise): %w", addr, he)}
			}
			if fatal(herr) || errors.Is(herr, ascend.ErrProtocol) {
				return nil, he
			}
			err = herr
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial rank %d (%s): %w (last error: %v)", peer, addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// acceptPeer runs the listener side of the handshake for a dispatched
// connection.
func acceptPeer(ctx context.Context, s side, in *inbound) result {
	remote, err := underCtx(ctx, in.nc, func() (bool, error) { return serverHandshake(in.nc, s, in.hello) })
	if err != nil {
		addr := in.nc.RemoteAddr().String()
		in.nc.Close()
		return result{peer: in.hello.from, err: &HandshakeError{Session: s.session, Rank: s.rank, Peer: in.hello.from, Addr: addr, Remote: remote, Err: err}}
	}
	return result{peer: in.hello.from, nc: in.nc}
}

// underCtx runs f with nc's deadline tied to ctx.
func underCtx(ctx context.Context, nc *net.TCPConn, f func() (bool, error)) (bool, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	remote, err := f()
	if !stop() {
		if err == nil {
			err = ctx.Err()
		}
		return remote, err
	}
	_ = nc.SetDeadline(time.Time{})
	return remote, err
}

// rankList prints ranks as [2 5 7], or for many as the first few, the
// last and the count: [491 496 502 522 527 … 999] (473 ranks). A world
// of hundreds printed every missing rank in every rank's error.
func rankList(ranks []int) string {
	const head = 5
	if len(ranks) <= head+2 {
		return fmt.Sprint(ranks)
	}
	return fmt.Sprintf("%v … %d] (%d ranks)", strings.TrimSuffix(fmt.Sprint(ranks[:head]), "]"), ranks[len(ranks)-1], len(ranks))
}
