package tcp

// Liveness probes while a group forms. Before the group has formed no abort
// notice flows (ascend/abort.go), so a link that breaks says only that its
// peer hung up: because its process died, or because it gave up after a
// third rank failed. The peer's listener tells the two apart: a dead
// process's address refuses connections, a live one answers. With
// Options.RefusedGrace, Connect asks before it blames.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// ErrPeerLeft is wrapped by Connect's error when a peer hung up while the
// group formed although its process is alive (its listener answered): it
// left because of another failure, so the error names no rank to blame.
var ErrPeerLeft = errors.New("tcp: a peer left the forming group alive")

// probeHold bounds waiting for a probed listener's answer. A live one
// answers at once; a killed process's listener may still take the probe
// into its accept queue just after the process's links dropped, and resets
// it when it closes too (a refusal); a frozen one never answers (unknown).
const probeHold = 200 * time.Millisecond

// msgPing is never a valid hello: a live listener answers it with a
// challenge message carrying stProtocol and hangs up (readHello).
const msgPing = 5

// errListenerGone: a probe was accepted, then dropped unanswered.
var errListenerGone = errors.New("accepted a probe, then dropped it unanswered (its listener closed)")

// ping sends msgPing over c and waits up to hold for the answer: alive if
// any handshake message comes back, errListenerGone if c is reset or
// closed first, neither if nothing comes.
func ping(c net.Conn, hold time.Duration) (alive bool, err error) {
	_ = c.SetDeadline(time.Now().Add(hold))
	if err := writeMsg(c, msgPing, stOK, nil); err != nil {
		return false, fmt.Errorf("%w: %v", errListenerGone, err)
	}
	_, _, err = readMsg(c, msgChallenge)
	var ne net.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ne) && ne.Timeout():
		return false, nil
	}
	return false, fmt.Errorf("%w: %v", errListenerGone, err)
}

// probe looks, after first, at rank peer's address until it has refused
// every connection for grace (its process is gone: the *ascend.PeerError,
// how prefixing its message), a connection there is answered (alive), or
// ctx ends (neither).
func probe(ctx context.Context, peer int, addr string, grace, first time.Duration, how string) (alive bool, gone error) {
	return probeUntil(ctx, peer, addr, grace, first, deadline{}, how)
}

// probeUntil is probe that also gives up on an address that has taken no
// TCP connection by reach (when set): the *ascend.PeerError says it cannot
// be reached.
func probeUntil(ctx context.Context, peer int, addr string, grace, first time.Duration, reach deadline, how string) (alive bool, gone error) {
	var d net.Dialer
	var refused refusals
	reached := false
	every := grace / 4
	if every <= 0 {
		every = max(reach.within/8, 10*time.Millisecond)
	}
	t := time.NewTimer(max(first, 0))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
		}
		c, err := dialBefore(ctx, &d, addr, reached, reach)
		if err == nil {
			reached = true
			var ok bool
			ok, err = ping(c, probeHold)
			c.Close()
			if ok {
				return true, nil
			}
		}
		if gone := refused.note(err, grace, peer, addr, how); gone != nil {
			return false, gone
		}
		if !reached && reach.passed() {
			return false, unreachable(peer, addr, how, reach, err)
		}
		t.Reset(every)
	}
}

// dialBefore dials addr; until the address has taken a connection
// (reached) a dial gives up at reach (when set), not only at ctx's end: a
// dropped SYN leaves a dial hanging for minutes.
func dialBefore(ctx context.Context, d *net.Dialer, addr string, reached bool, reach deadline) (net.Conn, error) {
	if reached || !reach.set() {
		return d.DialContext(ctx, "tcp", addr)
	}
	dctx, cancel := context.WithDeadline(ctx, reach.by)
	defer cancel()
	return d.DialContext(dctx, "tcp", addr)
}

// deadline is when a rank's address must have taken a connection
// (Options.ReachWithin after Connect began; zero: never asked).
type deadline struct {
	by     time.Time
	within time.Duration
}

func reachBy(within time.Duration) deadline {
	if within <= 0 {
		return deadline{}
	}
	return deadline{by: time.Now().Add(within), within: within}
}

func (d deadline) set() bool    { return !d.by.IsZero() }
func (d deadline) passed() bool { return d.set() && !time.Now().Before(d.by) }

// unreachable is the *ascend.PeerError for rank peer, whose address addr
// took no connection by the deadline (how prefixes the message; err is
// the last dial's).
func unreachable(peer int, addr, how string, reach deadline, err error) error {
	return &ascend.PeerError{Rank: peer, Op: "connect",
		Err: fmt.Errorf("%s%s has taken no connection in %v (unreachable: a partition, or a firewall on its port): %w",
			how, addr, reach.within, err)}
}

// refusals tracks how long a rank's address has refused every connection.
type refusals struct{ since time.Time }

// note records a dial's outcome; once the address has refused every
// connection for grace (> 0) it returns the *ascend.PeerError naming the
// rank (how prefixes its message).
func (r *refusals) note(err error, grace time.Duration, peer int, addr, how string) error {
	switch {
	case err == nil || !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, errListenerGone):
		r.since = time.Time{}
	case r.since.IsZero():
		r.since = time.Now()
	case grace > 0 && time.Since(r.since) >= grace:
		return &ascend.PeerError{Rank: peer, Op: "connect",
			Err: fmt.Errorf("%s%s has refused connections for %v (%s): %w",
				how, addr, time.Since(r.since).Round(time.Millisecond), refusedWhy(addr), err)}
	}
	return nil
}

// refusedWhy says why a rank's address refuses connections. A loopback
// address is this host's: a rank on another host that registered one is
// refused here whether it lives or not.
func refusedWhy(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err == nil && (host == "localhost" || ip != nil && ip.IsLoopback()) {
		return "its node worker is gone, or listens elsewhere than its --comm-advertise — or it runs on another host, " +
			"where it registered a loopback address that only its own host can dial: give that worker --comm-listen 0.0.0.0:PORT or a --comm-advertise"
	}
	return "its node worker is gone, or listens elsewhere than its --comm-advertise"
}

// probeWindow bounds the probes after a broken link: long enough to see a
// dead address refuse for grace, or a live one answer.
func probeWindow(grace time.Duration) time.Duration { return 2*grace + probeHold }

// blameGone turns err, a failed link exchange (*linksError), into an
// *ascend.PeerError naming the lowest rank whose link broke and whose
// address then refuses connections for grace, or, when every such rank
// answered, an error wrapping ErrPeerLeft. Otherwise (no grace, ctx ended,
// a rank neither refused nor answered) it returns err.
func blameGone(ctx context.Context, err error, addrs []string, grace time.Duration) error {
	var le *linksError
	if grace <= 0 || ctx.Err() != nil || !errors.As(err, &le) {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, probeWindow(grace))
	defer cancel()
	alive := make([]bool, len(le.peers))
	gone := make([]error, len(le.peers))
	var wg sync.WaitGroup
	for i, p := range le.peers {
		if addrs[p] == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			how := fmt.Sprintf("rank %d's link broke and ", p)
			alive[i], gone[i] = probe(pctx, p, addrs[p], grace, 0, how)
		}()
	}
	wg.Wait()
	all := true
	for i, g := range gone {
		var pe *ascend.PeerError
		if errors.As(g, &pe) {
			return &ascend.PeerError{Rank: pe.Rank, Op: pe.Op, Err: fmt.Errorf("%w (%v)", err, pe.Err)}
		}
		all = all && alive[i]
	}
	if all {
		return fmt.Errorf("%w: %v (every rank whose link broke is alive)", ErrPeerLeft, err)
	}
	return err
}

// checkLost vets err, the group's first barrier failing: a lost link to a
// rank, seen directly or through another rank's notice, blames that rank
// only if it is not alive — a rank that gave up forming the group after a
// third rank failed hangs up without a notice. If the rank answers, err
// becomes an error wrapping ErrPeerLeft (naming nobody). Timeouts and
// mismatches, and every error without grace, stand.
func checkLost(ctx context.Context, err error, addrs []string, grace time.Duration) error {
	var pe *ascend.PeerError
	if grace <= 0 || ctx.Err() != nil || !errors.As(err, &pe) || pe.Rank < 0 || pe.Rank >= len(addrs) || addrs[pe.Rank] == "" ||
		errors.Is(pe, os.ErrDeadlineExceeded) || errors.Is(pe, ascend.ErrMismatch) {
		return err
	}
	if alive, _ := Probe(ctx, pe.Rank, addrs[pe.Rank], grace); alive {
		return fmt.Errorf("%w: %v (rank %d is alive)", ErrPeerLeft, err, pe.Rank)
	}
	return err
}

// Probe asks whether the process behind rank's listener at addr (a node
// worker's, say) is alive: alive when the listener answers, gone (an
// *ascend.PeerError naming rank) once the address has refused connections
// for grace, neither when ctx ends or 2·grace plus a reply's wait pass
// first (a host that drops packets, a frozen process).
func Probe(ctx context.Context, rank int, addr string, grace time.Duration) (alive bool, gone error) {
	pctx, cancel := context.WithTimeout(ctx, probeWindow(grace))
	defer cancel()
	alive, gone = probe(pctx, rank, addr, grace, 0, "")
	var pe *ascend.PeerError
	if errors.As(gone, &pe) {
		pe.Op = "probe"
	}
	return alive, gone
}
