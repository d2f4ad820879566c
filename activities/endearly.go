package activities

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/spec"
)

// EndChunks asks the chunks in flight on this node to end early: their
// ranks agree with their peers at their next vote (stopVote) to stop after
// that step, store a checkpoint there and return it as the chunk's end
// (ChunkResult.EndedBy names this node), so that the run goes on from it
// without this node instead of losing the chunk. A stopping worker calls
// it: a chunk longer than its stop grace would otherwise be cancelled.
// Chunks begun after it end after their first step.
func (n *Node) EndChunks() { n.ending.Store(true) }

// EndChunk is ActivityEndChunk: the run asks that its chunk in.Session,
// in flight here or about to start, end early, at a step its ranks agree
// on, with a checkpoint there — a pause, drain or rescale signalled during
// a long chunk then takes effect within a second. Asking for a chunk that
// has ended, or never runs here, does nothing.
func (n *Node) EndChunk(_ context.Context, in spec.EndChunkInput) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !slices.Contains(n.endAsked, in.Session) {
		n.endAsked = append(n.endAsked, in.Session)
		if len(n.endAsked) > maxEndAsked {
			n.endAsked = slices.Delete(n.endAsked, 0, len(n.endAsked)-maxEndAsked)
		}
	}
	n.Logger.Info("the run asks to end its chunk in flight early", zap.String("run", in.RunID), zap.String("session", in.Session), zap.String("why", in.Why))
	return nil
}

// maxEndAsked bounds the sessions EndChunk keeps (one asked for a chunk
// that never came is forgotten after so many others).
const maxEndAsked = 16

// endAskedFor reports whether the run asked to end chunk session early.
func (n *Node) endAskedFor(session string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.endAsked, session)
}

// endDone forgets the request to end chunk session (it has ended).
func (n *Node) endDone(session string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.endAsked = slices.DeleteFunc(n.endAsked, func(s string) bool { return s == session })
}

// voteEvery is about how often a chunk's ranks vote on ending it early:
// rank 0 sets the next vote so many steps on as take this long (at least
// one). A vote is one allreduce of two floats — a few tens of
// microseconds over TCP, against the 25 s a stopping worker waits.
const voteEvery = 200 * time.Millisecond

// maxVoteSteps bounds the steps between votes (a float32 holds it
// exactly).
const maxVoteSteps = 1 << 20

// voter is the part of a communicator a vote uses.
type voter interface {
	AllReduce(ctx context.Context, buf []float32, op ascend.Op) error
}

// endReason is why a rank wants its chunk to end early.
type endReason struct {
	stopping bool // its node's worker is stopping (EndChunks)
	asked    bool // the run asked (EndChunk)
}

// stopVote is how a chunk's ranks agree on ending the chunk before its
// last step: every rank must stop after the same step, since each step is
// a collective. After the steps rank 0 chose, they allreduce (max) what
// they want — 0 nothing, 1 the run asked to end, global rank + 2 the
// rank's node is stopping — and rank 0's number of steps to the next
// vote. Ranks vote only when every node of the membership speaks
// spec.ChunkProtocolEndEarly (an older node would never join); a world
// of one rank needs no vote.
type stopVote struct {
	comm    voter // nil: no vote (one rank alone, or an older peer)
	alone   bool  // the world is this rank
	lead    bool  // global rank 0: chooses the interval
	global  int
	want    func() endReason
	next    int64 // the step after which the ranks vote next
	since   time.Time
	sinceAt int64 // the step the interval's time counts from
	buf     [2]float32
}

func newStopVote(comm voter, in spec.ChunkInput, p place, want func() endReason) *stopVote {
	v := &stopVote{alone: p.world == 1, lead: p.global == 0, global: p.global, want: want,
		next: in.From + 1, since: time.Now(), sinceAt: in.From}
	if !v.alone && in.Membership.EndsEarly() {
		v.comm = comm
	}
	return v
}

// after is called by every rank once step done (global, counted from 1)
// has completed. It reports, once the ranks agreed to end the chunk
// there, stop and the global rank whose node is stopping (-1: none; the
// run asked).
func (v *stopVote) after(ctx context.Context, done int64) (stop bool, stopping int, err error) {
	if v.alone {
		w := v.want()
		if w.stopping {
			return true, v.global, nil
		}
		return w.asked, -1, nil
	}
	if v.comm == nil || done < v.next {
		return false, -1, nil
	}
	v.buf[0], v.buf[1] = 0, 0
	switch w := v.want(); {
	case w.stopping:
		v.buf[0] = float32(v.global + 2)
	case w.asked:
		v.buf[0] = 1
	}
	if v.lead {
		steps := int64(maxVoteSteps)
		if el := time.Since(v.since); el > 0 {
			steps = int64(float64(done-v.sinceAt) * float64(voteEvery) / float64(el))
		}
		v.buf[1] = float32(min(max(steps, 1), maxVoteSteps))
	}
	if err := v.comm.AllReduce(ctx, v.buf[:], ascend.Max); err != nil {
		return false, -1, err
	}
	v.since, v.sinceAt = time.Now(), done
	v.next = done + min(max(int64(v.buf[1]), 1), maxVoteSteps)
	switch got := int(v.buf[0]); {
	case got >= 2:
		return true, got - 2, nil
	case got == 1:
		return true, -1, nil
	}
	return false, -1, nil
}
