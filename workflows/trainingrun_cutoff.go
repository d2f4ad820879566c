package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// CutOff is RunState.CutOff: the nodes that could not read the checkpoint
// at Step in the run's last try while other nodes of the chunk read it.
type CutOff struct {
	Step  int64    `json:"step"`
	Nodes []string `json:"nodes"`
}

// versionCutOff: nodes that could not read the checkpoint their peers
// read, two tries in a row, are replaced (cutOff); before, the run held
// as for a storage down until an operator drained them. Asked only then.
const versionCutOff = "cut-off"

// versionCutOffFree: replacing nodes found cut off from the bucket counts
// no restart (chunkFailure.cutOff); before, it counted one, and a run
// whose max_restarts were spent failed at the second strike where it had
// held before versionCutOff. Asked only at a second strike.
const versionCutOffFree = "cut-off-free"

// cutOff reports whether f — a chunk that failed only because nodes could
// not read the checkpoint it restores — shows nodes cut off from the
// bucket: nodes that could not read it in the try before either, while
// other nodes read it both times (spec.CheckpointFailure.ReadBy: the
// ranks compared their reads). f then names them as the failed nodes,
// like nodes that do not reach the run's bucket (CheckpointNotHere): the
// run replaces them — no restart counted: the tries trained nothing, and
// the run takes them no more, so they cannot spend max_restarts — and
// the Cluster holds them failed until their leases have shown them alive
// for a TTL.
// The run itself takes them no more while their worker processes run
// (RunState.CutOffLeft, AcquireRequest.Shun): taken back, each would cost
// a hold and a replacement again, where a run short of nodes should wait
// for one, or train on fewer.
// The first time, the run holds as for its storage, saying who is
// replaced if it fails so again, and remembers them (RunState.CutOff): a
// bucket that throttles, or serves some requests and not others, fails a
// healthy node's read as easily once. A try that no node read (ReadBy
// empty) is the storage's fault: nothing is remembered.
func (r *run) cutOff(ctx workflow.Context, f *chunkFailure) bool {
	u, prev := f.unread, r.st.CutOff
	r.st.CutOff = nil
	if len(u.ReadBy) == 0 || len(u.Unread) == 0 {
		return false
	}
	var again, first []string
	for _, id := range u.Unread {
		if prev != nil && prev.Step == u.Step && slices.Contains(prev.Nodes, id) {
			again = append(again, id)
		} else {
			first = append(first, id)
		}
	}
	if len(again) == 0 || workflow.GetVersion(ctx, versionCutOff, workflow.DefaultVersion, 1) < 1 {
		r.st.CutOff = &CutOff{Step: u.Step, Nodes: u.Unread}
		f.reason += fmt.Sprintf("; the run replaces %s if the next try fails so again", spec.NodesWord(u.Unread))
		return false
	}
	if len(first) > 0 {
		r.st.CutOff = &CutOff{Step: u.Step, Nodes: first}
	}
	why := fmt.Sprintf("%s could not read the checkpoint at step %d in two tries in a row while %s read it: cut off from the bucket (%s)",
		spec.NodesWord(again), u.Step, spec.NodesWord(u.ReadBy), u.Error)
	for _, id := range again {
		f.addUnfit(id, why, false)
		if i := slices.IndexFunc(r.st.Membership.Nodes, func(n spec.Node) bool { return n.ID == id }); i >= 0 {
			r.shun(r.st.Membership.Nodes[i])
		}
	}
	f.failed, f.reason, f.storageDown = again, why, false
	if f.cutOff = workflow.GetVersion(ctx, versionCutOffFree, workflow.DefaultVersion, 1) >= 1; f.cutOff {
		f.reason += " (no restart counted: the tries trained nothing, and the run takes it no more)"
	}
	return true
}

// versionProbeReads: an external job's world that could not launch
// because nodes could not read its checkpoint asks the world's other
// nodes to read it (probeReads), so that a node cut off from the bucket
// is replaced at the second try (cutOff) as in a built-in run's chunk;
// before, the run held as for a storage down until an operator drained
// the node. Asked only for such a world with a node to ask.
const versionProbeReads = "probe-reads"

// probeReadTimeout bounds a node's read of a checkpoint when the run asks
// for one (ActivityProbeRead; it heartbeats meanwhile): a large job's
// checkpoint directory takes minutes.
const probeReadTimeout = 10 * time.Minute

// probeReads follows an external job's world that failed only because
// nodes could not read the checkpoint it restores (f.storageDown): its
// nodes restore alone, before the world forms, with no group to compare
// reads in (spec.ChunkProtocolReadCheck), and those that read it were
// cancelled with the world. The run asks them — those that speak
// spec.ChunkProtocolReadProbe — whether they read it (ActivityProbeRead:
// one whose restore in that world finished says so at once, the others
// read it now), and names in f.unread the nodes whose read failed and
// those that read it, as a built-in chunk's ranks do: cutOff then tells a
// node cut off from the bucket from a storage down. No node to ask: the
// hold as before.
func (r *run) probeReads(ctx workflow.Context, f *chunkFailure, errs []error) {
	ref := r.st.Status.LastCkpt
	if !f.storageDown || f.unread == nil || len(f.unread.ReadBy) > 0 || ref == nil || ctx.Err() != nil {
		return
	}
	m := r.st.Membership.Nodes
	var unread []string
	var ask []spec.Node
	for rank, err := range errs {
		var ae *temporal.ApplicationError
		switch {
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeCheckpointUnreachable:
			unread = append(unread, m[rank].ID)
		case m[rank].ChunkProtocol() >= spec.ChunkProtocolReadProbe:
			ask = append(ask, m[rank])
		}
	}
	if len(unread) == 0 || len(ask) == 0 || workflow.GetVersion(ctx, versionProbeReads, workflow.DefaultVersion, 1) < 1 {
		return
	}
	futures := make([]workflow.Future, len(ask))
	for i, node := range ask {
		actx := workflow.WithHeartbeatTimeout(nodeCallOptions(ctx, node, toStart(r.spec), probeReadTimeout,
			fmt.Sprintf("read the checkpoint at step %d on %s (%s could not)", ref.Step, node.ID, spec.NodesWord(unread))),
			r.spec.HeartbeatTimeout.D())
		futures[i] = workflow.ExecuteActivity(actx, spec.ActivityProbeRead, spec.ProbeReadInput{RunID: r.st.Status.RunID, Checkpoint: *ref, Session: r.st.Session})
	}
	var readBy []string
	for i, fut := range futures {
		if err := fut.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("a node asked to read the run's checkpoint could not either", "node", ask[i].ID, "step", ref.Step, "error", err)
			continue
		}
		readBy = append(readBy, ask[i].ID)
	}
	f.unread.Unread, f.unread.ReadBy = unread, readBy
	if len(readBy) > 0 {
		f.reason += fmt.Sprintf(" (%s read it)", spec.NodesWord(readBy))
	} else {
		f.reason += " (no node read it)"
	}
}

// versionAnySaver: a hold's save-only chunks name each node in turn the
// saver (storeSaver), from rank 0's next; before, rank 0 stored every
// try, and a rank 0 that could not write to the bucket held the run
// until an operator drained it. Asked only for such a chunk of nodes that
// all speak spec.ChunkProtocolSaver, more than one.
const versionAnySaver = "any-saver"

// storeSaver is the node that stores the state in the hold's next try:
// rank 0's node refused the checkpoint that began the hold, and each
// refused try moves on to the next node (RunState.StoreTries).
func (r *run) storeSaver(ctx workflow.Context) int {
	n := len(r.st.Membership.Nodes)
	if n < 2 || !r.st.Membership.AnySaver() || workflow.GetVersion(ctx, versionAnySaver, workflow.DefaultVersion, 1) < 1 {
		return 0
	}
	return (r.st.StoreTries + 1) % n
}

// wroteElsewhere follows a hold that node saver's checkpoint ended: the
// nodes that refused in it — rank 0's, whose refusal began it, and the
// savers of the tries before — cannot write where saver's node does. The
// first time the run trains on and remembers them (RunState.WriteCutOff:
// a bucket that throttles refuses a healthy node as easily, once); when
// one of them refuses so in the next hold too, the run moves off it at
// this boundary, as off a slow node (spec.Evict.Leave: a free node takes
// its rank; short of one the run keeps it), and takes it no more while
// its worker process runs (RunState.CutOffLeft). The checkpoint just
// stored is at the run's step: the move loses nothing.
func (r *run) wroteElsewhere(ctx workflow.Context, saver int) {
	m := r.st.Membership.Nodes
	by := m[saver].ID
	refused := []string{m[0].ID}
	for t := range r.st.StoreTries {
		if id := m[(t+1)%len(m)].ID; !slices.Contains(refused, id) {
			refused = append(refused, id)
		}
	}
	refused = slices.DeleteFunc(refused, func(id string) bool { return id == by })
	prev := r.st.WriteCutOff
	r.st.WriteCutOff = nil
	var again []string
	for _, id := range refused {
		if slices.Contains(prev, id) {
			again = append(again, id)
		}
	}
	log := workflow.GetLogger(ctx)
	if len(again) == 0 {
		r.st.WriteCutOff = refused
		log.Warn("checkpoint stored by another node than the ones the storage refused; moved off them if they are refused so again",
			"stored_by", by, "refused", refused, "step", r.st.Status.Step)
		return
	}
	why := fmt.Sprintf("cut off from the bucket: could not store the run's checkpoint in two holds in a row while node %s stored it", by)
	for _, id := range again {
		log.Warn("node cannot write to the run's bucket; the run moves off it", "node", id, "stored_by", by)
		r.leaveNode(id, why)
		r.shun(m[slices.IndexFunc(m, func(n spec.Node) bool { return n.ID == id })])
	}
}

// shun has the run take n's worker process no more (RunState.CutOffLeft)
// and says so in its status (RunStatus.CutOff).
func (r *run) shun(n spec.Node) {
	r.st.CutOffLeft = append(r.st.CutOffLeft, spec.NodeProcess{ID: n.ID, Incarnation: n.Incarnation})
	if !slices.Contains(r.st.Status.CutOff, n.ID) {
		r.st.Status.CutOff = append(r.st.Status.CutOff, n.ID)
	}
}
