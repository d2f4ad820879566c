package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// How a rank came by its state at a chunk's first step, as it tells its
// peers (agreeOnRead).
const (
	readFailed = 0 // its read of the checkpoint failed (CheckpointUnreachable)
	readKept   = 1 // it kept its state from the chunk before: it read nothing
	readOK     = 2 // it read the checkpoint from the bucket
)

// comparesReads reports whether in's ranks compare their reads of the
// checkpoint the chunk restores (spec.ChunkProtocolReadCheck): only a
// chunk that starts from one, of more than one node, all speaking it.
func comparesReads(in spec.ChunkInput) bool {
	return in.Restore != nil && in.Restore.Step == in.From && len(in.Membership.Nodes) > 1 && in.Membership.ComparesReads()
}

// unreachable reports whether err is a read of a checkpoint that the
// storage did not serve (loadError's CheckpointUnreachable).
func unreachable(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == spec.ErrTypeCheckpointUnreachable
}

// agreeOnRead tells, once the group has formed, every rank how each came
// by its state (an allgather of one float a rank: readFailed, readKept or
// readOK); unread is this rank's failed read (nil: read or kept). All
// read or kept: nil. Else every rank fails the chunk alike, as
// CheckpointUnreachable with the nodes that could not read the checkpoint
// and those that read it (spec.CheckpointFailure.Unread, ReadBy) — in its
// own words if its read failed. A node that could not read what its peers
// read is cut off from the bucket (the run replaces it when that happens
// twice in a row); when no node read it, the storage is at fault (the run
// holds for it). Before, the rank whose read failed left at once and its
// peers, still waiting for it to join the group, were cancelled before
// they could show that they had read it: the run held as for a storage
// outage until an operator drained the node.
func agreeOnRead(ctx context.Context, comm *ascend.Communicator, in spec.ChunkInput, p place, read bool, unread error) error {
	mine := float32(readKept)
	switch {
	case unread != nil:
		mine = readFailed
	case read:
		mine = readOK
	}
	all := make([]float32, p.world)
	if err := comm.AllGatherInto(ctx, all, []float32{mine}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return peerError(err, in.From, p.perNode, in.Membership.Nodes)
	}
	var failed, readBy []string
	for node, nd := range in.Membership.Nodes {
		ranks := all[node*p.perNode:][:p.perNode]
		switch {
		case slices.Contains(ranks, readFailed):
			failed = append(failed, nd.ID)
		case slices.Contains(ranks, readOK):
			readBy = append(readBy, nd.ID)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	ref := in.Restore
	var why string
	switch {
	case unread != nil:
		var ae *temporal.ApplicationError
		why = unread.Error()
		if errors.As(unread, &ae) {
			why = ae.Message()
		}
	default:
		why = fmt.Sprintf("%s cannot read the checkpoint at step %d from %s", spec.NodesWord(failed), ref.Step, ref.URL)
	}
	switch {
	case len(readBy) > 0:
		why += fmt.Sprintf(" (%s read it)", spec.NodesWord(readBy))
	case unread == nil:
		why += " (no node read it)"
	}
	cause := unread
	if cause == nil {
		cause = errors.New(why)
	}
	return temporal.NewApplicationErrorWithCause(why, spec.ErrTypeCheckpointUnreachable, cause,
		spec.CheckpointFailure{Step: ref.Step, Error: why, Unread: failed, ReadBy: readBy})
}

// restoredIn is a world (its session) that restored a checkpoint (its
// key) on this node (Node.restored).
type restoredIn struct{ session, key string }

// keepRestored is how many worlds' restores a node remembers.
const keepRestored = 16

// noteRestored remembers that the world session restored checkpoint key
// here.
func (n *Node) noteRestored(session, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.restored = append(n.restored, restoredIn{session, key})
	if len(n.restored) > keepRestored {
		n.restored = slices.Delete(n.restored, 0, len(n.restored)-keepRestored)
	}
}

// restoredHere reports whether the world session restored checkpoint key
// on this node.
func (n *Node) restoredHere(session, key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return session != "" && slices.Contains(n.restored, restoredIn{session, key})
}

// ProbeRead is ActivityProbeRead: it answers whether this node reads run
// in.RunID's checkpoint in.Checkpoint from its bucket — nil when it does.
// An external job's nodes restore its checkpoint directory before their
// world forms, with no group to compare reads in (agreeOnRead): when some
// could not, the run asks the world's other nodes, and those that read it
// show the others cut off from the bucket rather than the storage down.
// A node whose part of that world (in.Session) restored it answers at
// once; one whose restore did not finish (the world was stopped first)
// reads it now, heartbeating while it does. Its error is a read's
// (CheckpointUnreachable, CheckpointNotHere, …; a corrupt checkpoint is
// one it could read).
func (n *Node) ProbeRead(ctx context.Context, in spec.ProbeReadInput) error {
	ref := in.Checkpoint
	if ref.URL == "" || ref.Key == "" {
		err := fmt.Errorf("probe read: no checkpoint to read (url %q, key %q)", ref.URL, ref.Key)
		return temporal.NewNonRetryableApplicationError(err.Error(), "BadProbeInput", err)
	}
	if n.restoredHere(in.Session, ref.Key) {
		n.Logger.Info("probe read: this node restored the run's checkpoint in that world", zap.String("run", in.RunID),
			zap.String("session", in.Session), zap.Int64("step", ref.Step))
		return nil
	}
	hb := startHeartbeater(ctx, spec.ChunkProgress{Step: ref.Step, LastCheckpoint: ref.Step}, activity.GetInfo(ctx).HeartbeatTimeout, false)
	defer hb.stop()
	store, err := n.store(ctx, ref.URL)
	if err != nil {
		return err
	}
	var ce *checkpoint.CorruptError
	if _, err := store.Load(ctx, toRef(ref)); err != nil && !errors.As(err, &ce) {
		return n.loadError(ctx, in.RunID, ref, err)
	}
	n.Logger.Info("probe read: the run's checkpoint is readable from this node", zap.String("run", in.RunID), zap.Int64("step", ref.Step))
	return nil
}
