package activities

import (
	"context"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/spec"
)

// EndChunks asks the chunks in flight on this node to end early: their
// ranks agree with their peers at their next vote (stopVote) to stop after
// that step, store a checkpoint there and return it as the chunk's end, so
// that the run goes on from it without this node instead of losing the
// chunk. A stopping worker calls it: a chunk longer than its stop grace
// would otherwise be cancelled. Chunks begun after it end after their
// first step.
func (n *Node) EndChunks() { n.ending.Store(true) }

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

// stopVote is how a chunk's ranks agree on ending the chunk before its
// last step: every rank must stop after the same step, since each step is
// a collective. After the steps rank 0 chose, they allreduce (max) the
// global rank + 1 of a rank whose node is ending its chunks (0: none) and
// rank 0's number of steps to the next vote. Ranks vote only when every
// node of the membership speaks spec.ChunkProtocolEndEarly (an older
// node would never join); a world of one rank needs no vote.
type stopVote struct {
	comm    voter // nil: no vote (one rank alone, or an older peer)
	alone   bool  // the world is this rank
	lead    bool  // global rank 0: chooses the interval
	global  int
	ending  func() bool
	next    int64 // the step after which the ranks vote next
	since   time.Time
	sinceAt int64 // the step the interval's time counts from
	buf     [2]float32
}

func newStopVote(comm voter, in spec.ChunkInput, p place, ending func() bool) *stopVote {
	v := &stopVote{alone: p.world == 1, lead: p.global == 0, global: p.global, ending: ending,
		next: in.From + 1, since: time.Now(), sinceAt: in.From}
	if !v.alone && endsEarly(in.Membership) {
		v.comm = comm
	}
	return v
}

// endsEarly reports whether every node of m votes on ending chunks early.
func endsEarly(m spec.Membership) bool {
	for _, nd := range m.Nodes {
		if nd.ChunkProtocol() < spec.ChunkProtocolEndEarly {
			return false
		}
	}
	return true
}

// after is called by every rank once step done (global, counted from 1)
// has completed. It reports the global rank that asked to end the chunk
// there (with stop), once the ranks agreed on it.
func (v *stopVote) after(ctx context.Context, done int64) (stop bool, by int, err error) {
	switch {
	case v.alone:
		return v.ending(), v.global, nil
	case v.comm == nil || done < v.next:
		return false, 0, nil
	}
	v.buf[0], v.buf[1] = 0, 0
	if v.ending() {
		v.buf[0] = float32(v.global + 1)
	}
	if v.lead {
		steps := int64(maxVoteSteps)
		if el := time.Since(v.since); el > 0 {
			steps = int64(float64(done-v.sinceAt) * float64(voteEvery) / float64(el))
		}
		v.buf[1] = float32(min(max(steps, 1), maxVoteSteps))
	}
	if err := v.comm.AllReduce(ctx, v.buf[:], ascend.Max); err != nil {
		return false, 0, err
	}
	v.since, v.sinceAt = time.Now(), done
	v.next = done + min(max(int64(v.buf[1]), 1), maxVoteSteps)
	if v.buf[0] > 0 {
		return true, int(v.buf[0]) - 1, nil
	}
	return false, 0, nil
}
