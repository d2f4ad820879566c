package ascend

// Abort notices. When a Communicator breaks (a peer failed, a mismatch, its
// context was cancelled, or it was closed) it sends every live peer one
// empty frame whose tag says who failed and why, before closing the links.
// A peer that reads the notice instead of the frame it expected reports a
// *PeerError naming the rank that failed, not the messenger, and passes the
// notice on when it aborts in turn. So when one rank dies, every survivor
// names that rank (the neighbours see its links drop; the others get the
// notice around the ring). A notice is only sent where the link is between
// frames and only if it goes out within noticeGrace; otherwise the link is
// just closed and the peer sees it drop.
//
// Notice tag: culprit rank (20 bits) | kindAbort (4 bits) | reason (8 bits).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrPeerAborted is wrapped by a PeerError learned from another rank's
// abort notice (or the named rank's own, when it closed or was cancelled).
var ErrPeerAborted = errors.New("ascend: session aborted")

const (
	reasonLost     = 1 // the culprit's link failed (EOF, reset, I/O error)
	reasonTimeout  = 2 // the culprit made no progress within the deadline
	reasonMismatch = 3 // the culprit sent an unexpected frame
	reasonAborted  = 4 // the culprit itself closed or was cancelled
)

func reasonText(r uint32) string {
	switch r {
	case reasonLost:
		return "link lost"
	case reasonTimeout:
		return "made no progress within the deadline"
	case reasonMismatch:
		return "collective mismatch"
	case reasonAborted:
		return "closed or cancelled its communicator"
	}
	return fmt.Sprintf("failed (reason %d)", r)
}

// noticeGrace bounds writing a notice: it is tiny and either fits in the
// socket buffer at once or the peer is not reading anyway. The grace is
// for a link busy with a frame, and for the scheduler: on a loaded host
// (ranks outnumbering cores) the goroutine that writes a notice may first
// run tens of milliseconds after the abort — with 20 ms, until session
// 32, notices expired unsent under load and their peers blamed the
// messenger, whose link then dropped, instead of the rank that failed.
// It costs an abort time only where a link is stuck.
const noticeGrace = 250 * time.Millisecond

// abortedError is a failure learned from an abort notice. It matches
// ErrPeerAborted, and also ErrMismatch or os.ErrDeadlineExceeded when that
// is why the culprit was blamed.
type abortedError struct {
	culprit int
	via     int // the peer that delivered the notice (-1 before peerError)
	reason  uint32
}

func (e *abortedError) Error() string {
	msg := fmt.Sprintf("session aborted: rank %d %s", e.culprit, reasonText(e.reason))
	if e.via >= 0 && e.via != e.culprit {
		msg += fmt.Sprintf(" (reported by rank %d)", e.via)
	}
	return msg
}

func (e *abortedError) Unwrap() []error {
	switch e.reason {
	case reasonMismatch:
		return []error{ErrPeerAborted, ErrMismatch}
	case reasonTimeout:
		return []error{ErrPeerAborted, os.ErrDeadlineExceeded}
	}
	return []error{ErrPeerAborted}
}

func decodeNotice(tag uint32) error {
	return &abortedError{culprit: int(tag >> 12), via: -1, reason: tag & 0xFF}
}

// peerError builds the PeerError for err seen on the link to p; a notice
// names its culprit instead of p.
func (c *Communicator) peerError(op string, p *peer, err error) *PeerError {
	var n *abortedError
	if !errors.As(err, &n) {
		return &PeerError{Rank: p.rank, Op: op, Err: err}
	}
	e := *n
	e.via = p.rank
	if e.culprit >= c.size || e.culprit == c.rank {
		e.culprit = p.rank // e.g. a mismatch blamed on us: name the other side
	}
	return &PeerError{Rank: e.culprit, Op: op, Err: &e}
}

// noticeFor maps the cause of an abort to the notice to send.
func (c *Communicator) noticeFor(cause error) (culprit int, reason uint32) {
	var pe *PeerError
	var n *abortedError
	switch {
	case !errors.As(cause, &pe):
		return c.rank, reasonAborted // context, Close
	case errors.As(pe.Err, &n):
		return pe.Rank, n.reason // pass it on
	case errors.Is(pe.Err, ErrMismatch):
		return pe.Rank, reasonMismatch
	case errors.Is(pe.Err, os.ErrDeadlineExceeded):
		return pe.Rank, reasonTimeout
	}
	return pe.Rank, reasonLost
}

// notifyPeers sends the abort notice for cause to every peer at once, best
// effort: a link busy with a frame gets until noticeGrace to reach a frame
// boundary, and a peer not reading gets as long to take the frame.
func (c *Communicator) notifyPeers(cause error) {
	culprit, reason := c.noticeFor(cause)
	tag := uint32(culprit&0xFFFFF)<<12 | kindAbort<<8 | reason&0xFF
	ctx, cancel := context.WithTimeout(context.Background(), noticeGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range c.peers {
		// The culprit is told too: after a mismatch it is alive and learns
		// it from the notice; a dead one just fails the write.
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if lockBy(ctx, &p.sendMu) {
				_ = p.conn.Send(ctx, tag, nil)
				p.sendMu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// lockBy locks mu unless ctx ends first.
func lockBy(ctx context.Context, mu *sync.Mutex) bool {
	for !mu.TryLock() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// explainSendError: a write to p failed, perhaps because p aborted and
// closed. If p left an abort notice in the other direction, report that
// instead. The caller must not be receiving from p concurrently.
func (c *Communicator) explainSendError(p *peer, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), noticeGrace)
	defer cancel()
	if tag, _, rerr := p.conn.Recv(ctx, nil); rerr == nil && tag>>8&0xF == kindAbort {
		return decodeNotice(tag)
	}
	return err
}
