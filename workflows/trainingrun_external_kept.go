package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// An external job's checkpoints are its script's directories, which the
// first node uploads (activities' supervision.upload). A bucket that
// refuses them — full, its credentials expired, its endpoint down — used
// to leave the world training on with nothing stored, and a refused final
// upload failed the run: every step since the last stored checkpoint was
// lost. A built-in run holds instead, its nodes keeping the state
// (storeHeld); so does an external job on nodes that speak
// spec.ChunkProtocolStoreKept:
//
//   - the first node keeps the directory of each refused upload on its disk
//     (the last one; ExternalInput.KeepRefused, CheckpointSaved.Kept);
//   - a second refusal in a row stops the world at once, and a refused final
//     upload ends it as finished (its result's CheckpointFailed): the run
//     holds in waiting-storage at the kept step;
//   - each try of the hold asks the first node to store what it kept
//     (ActivityStoreKept); refused, the next try waits longer
//     (nextStorageWait; a resume tries at once); stored, the job
//     relaunches from it — or, after its final upload, completes;
//   - a first node that keeps nothing at that step (NothingKept: its disk
//     wiped) or is lost ends the hold as a failure: the run recovers
//     from its last stored checkpoint, as before.
//
// The first refusal alone stops nothing, as for a built-in run: the next
// checkpoint may be stored — unless the run waits for a checkpoint to
// stop the world at (a pause, drained nodes, a green window's end): the
// kept one serves. A world that fails meanwhile (a node lost)
// has its first node, still alive, store the one it kept before the
// recovery (storeKeptAfterLoss): the relaunch starts there rather than
// at the checkpoint before it. The hold is in the run's state (StorageHeld,
// KeptFinal) and crosses continue-as-new.

// versionExternalStoreKept: an external job's world on a first node that
// speaks spec.ChunkProtocolStoreKept is asked to keep refused uploads, and
// the run holds for its storage as above. Asked at each launch on such a
// node (histories from before such nodes never ask it).
const versionExternalStoreKept = "external-store-kept"

// errWorldStorage: runWorld stopped (or saw finish) a world whose
// checkpoint the bucket refused, kept by its first node: the run holds
// for its storage.
var errWorldStorage = errors.New("world stopped: the bucket refuses its checkpoints")

// storeKeptTimeout bounds one try of storing a kept checkpoint (it
// heartbeats meanwhile): a large job's directory takes minutes.
const storeKeptTimeout = 30 * time.Minute

// keepsRefused: the launch's first node keeps the uploads the bucket
// refuses (asked once per launch, on nodes that can).
func (r *run) keepsRefused(ctx workflow.Context, first spec.Node) bool {
	return first.ChunkProtocol() >= spec.ChunkProtocolStoreKept &&
		workflow.GetVersion(ctx, versionExternalStoreKept, workflow.DefaultVersion, 1) >= 1
}

// holdKept starts the run's hold for its storage at step, the checkpoint
// its first node kept; final: the world had finished (the job completes
// once it is stored).
func (r *run) holdKept(ctx workflow.Context, step int64, final bool) {
	r.st.StorageHeld, r.st.KeptFinal, r.st.StorageWait, r.st.StoreTries = true, final, 0, 0
	r.st.Status.Step = step
	workflow.GetLogger(ctx).Warn("the bucket refuses the job's checkpoints: holding until it stores the one the first node kept",
		"step", step, "node", r.st.Membership.Nodes[0].ID, "final", final)
}

// storeKeptTry is one try of an external job's hold for its storage:
// after the wait the last refusal set (none at first; a resume cuts it
// short) the first node stores the checkpoint it kept at the run's step.
// Stored, the hold ends (done: it was the job's final one); refused, the
// next wait doubles. The first node lost or keeping nothing ends the hold
// with a *chunkFailure for recover: back to the last stored checkpoint.
func (r *run) storeKeptTry(ctx workflow.Context) (done bool, err error) {
	s := &r.st.Status
	node := r.st.Membership.Nodes[0]
	held := r.metrics(ctx).Gauge(metricStorageHeld)
	held.Update(1)
	if w := r.st.StorageWait; w > 0 {
		err := r.holdFor(ctx, w,
			fmt.Sprintf("the checkpoint storage refuses the job's checkpoints; node %s keeps the one at step %d and stores it again", node.ID, s.Step),
			fmt.Sprintf("store the checkpoint at step %d again", s.Step))
		if err != nil {
			return false, err
		}
	}
	s.Detail = fmt.Sprintf("the checkpoint storage refused the job's checkpoint; node %s keeps the one at step %d and stores it now", node.ID, s.Step)
	s.WaitUntil = time.Time{}
	r.setPhase(ctx, spec.PhaseStorageWait)
	started := workflow.Now(ctx)
	out, err := r.storeKeptOn(ctx, node, s.Step, toStart(r.spec), storeKeptTimeout, "")
	r.chunksNow++ // a unit of history, as a chunk is
	if err == nil && out.Checkpoint == nil && out.Failed == nil {
		err = temporal.NewApplicationError(fmt.Sprintf("node %s stored nothing and said no error", node.ID), spec.ErrTypeNothingKept)
	}
	switch {
	case err != nil:
		step := s.Step
		r.endKeptHold(ctx)
		if ctx.Err() != nil {
			r.heldAtCancel = step // (storeKeptOnCancel)
			return false, err
		}
		errs := make([]error, len(r.st.Membership.Nodes))
		errs[0] = err
		f := r.blameWorld(ctx, step, started, workflow.Now(ctx), errs, nil)
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == spec.ErrTypeNothingKept {
			f.retryable = true // the job goes back to its last stored checkpoint
		}
		f.reason = fmt.Sprintf("the checkpoint at step %d kept for the storage is lost: %s", step, f.reason)
		return false, f
	case out.Failed != nil:
		r.refused(ctx, out.Failed)
		r.st.StoreTries++
		r.st.StorageWait = nextStorageWait(r.st.StorageWait)
		return false, nil
	}
	final := r.st.KeptFinal
	r.commitCheckpoint(ctx, *out.Checkpoint)
	r.endKeptHold(ctx)
	s.UpdatedAt = workflow.Now(ctx)
	r.publish(ctx)
	workflow.GetLogger(ctx).Info("checkpoint storage takes the job's checkpoints again", "step", out.Checkpoint.Step, "final", final)
	return final, nil
}

// storeKeptOn asks node to store the checkpoint at step (or later) it
// kept (ActivityStoreKept), taken within startWithin and done within
// timeout; it heartbeats while it stores. why ends the call's summary.
func (r *run) storeKeptOn(ctx workflow.Context, node spec.Node, step int64, startWithin, timeout time.Duration,
	why string) (spec.StoreKeptResult, error) {
	actx := workflow.WithHeartbeatTimeout(nodeCallOptions(ctx, node, startWithin, timeout,
		fmt.Sprintf("store the checkpoint at step %d that %s kept%s", step, node.ID, why)), r.spec.HeartbeatTimeout.D())
	var out spec.StoreKeptResult
	err := workflow.ExecuteActivity(actx, spec.ActivityStoreKept,
		spec.StoreKeptInput{RunID: r.st.Status.RunID, Spec: r.nodeSpec(), Step: step, Session: r.st.Session}).Get(ctx, &out)
	return out, err
}

// endKeptHold ends the hold: the run's step is its last stored
// checkpoint's (where the next launch starts).
func (r *run) endKeptHold(ctx workflow.Context) {
	r.st.StorageHeld, r.st.KeptFinal, r.st.StorageWait, r.st.StoreTries = false, false, 0, 0
	s := &r.st.Status
	s.WaitUntil, s.Detail = time.Time{}, ""
	s.Step = r.ckptStep()
	r.metrics(ctx).Gauge(metricStorageHeld).Update(0)
	r.setPhase(ctx, spec.PhaseTraining)
}

// versionKeptForStop: a refused upload, kept, while the run waits for a
// checkpoint to stop the world at (a pause, drained nodes to leave, the
// end of an interruptible green run's window) stops it as a second
// refusal does: the run holds until the first node stores it, then
// pauses, moves or plans. Before, the run waited for the job's next
// checkpoint (the request it made had been answered by the refused one).
// Asked only then.
const versionKeptForStop = "kept-for-stop"

// greenWindowOver: an interruptible green run's world trains past the end
// of its planned window (the run asked it for a checkpoint to plan at:
// askAtSlotEnd).
func (r *run) greenWindowOver(ctx workflow.Context, ext *externalRun) bool {
	return ext.green && !r.slotEnd.IsZero() && !workflow.Now(ctx).Before(r.slotEnd)
}

// versionKeptTrained: a green or metered run's world stopped for a kept
// checkpoint records its training up to that checkpoint (its energy and
// CO₂); before, the stretch since the last stored checkpoint was in no
// segment. Asked only then.
const versionKeptTrained = "kept-trained"

// versionKeptAfterLoss: a world that failed after its first node kept a
// refused checkpoint newer than the run's last stored one has that node,
// alive, store it before the recovery (storeKeptAfterLoss). Asked only
// then.
const versionKeptAfterLoss = "kept-after-loss"

// storeKeptAfterLoss is one try, as the world ext's launch failed, of
// storing the checkpoint its first node kept after a refused upload, when
// it is newer than the last stored one and the node is not among those
// lost: stored, the recovery resumes from it (the steps since are all it
// loses). Refused or not kept, nothing changes: the recovery goes back
// to the last stored checkpoint, as before.
func (r *run) storeKeptAfterLoss(ctx workflow.Context, ext *externalRun) (stored bool) {
	if !keptToStore(ctx, ext, r.ckptStep()) || workflow.GetVersion(ctx, versionKeptAfterLoss, workflow.DefaultVersion, 1) < 1 {
		return false
	}
	ext.keptTried = true
	log := workflow.GetLogger(ctx)
	out, err := r.storeKeptOn(ctx, ext.first, ext.lastKept, keptAfterLossStart, storeKeptTimeout, ", before the recovery")
	switch {
	case err != nil:
		log.Warn("the checkpoint the first node kept could not be stored before the recovery", "step", ext.lastKept, "error", err)
	case out.Failed != nil:
		r.refused(ctx, out.Failed)
		log.Warn("the bucket refused the kept checkpoint again; the recovery goes back to the last stored one", "step", ext.lastKept,
			"error", out.Failed.Error)
	case out.Checkpoint != nil:
		r.commitCheckpoint(ctx, *out.Checkpoint)
		log.Info("stored the checkpoint the first node kept: the recovery resumes there", "step", out.Checkpoint.Step)
		return out.Checkpoint.Step >= ext.lastKept
	}
	return false
}

// keptToStore: the failed world ext's first node kept a refused
// checkpoint newer than the last stored one (stored; none when the node
// was among those lost: runWorld forgets it), and has not been asked to
// store it yet.
func keptToStore(ctx workflow.Context, ext *externalRun, stored int64) bool {
	return ext.keep && !ext.keptTried && ext.lastKept > stored && ctx.Err() == nil
}

// versionKeptLossTrained: a green or metered run's world that failed after
// its first node kept a refused checkpoint has the node store it before
// the launch's lost stretch is recorded: stored, the training up to it is
// recorded as trained, and only what came after as lost. Before, the
// store came after, and the whole stretch since the last stored
// checkpoint counted as lost although the recovery resumed at the kept
// one. Asked only then.
const versionKeptLossTrained = "kept-loss-trained"

// keptAfterLossStart bounds the wait for the first node to take the
// store after a failed world: a node that does not answer by then is
// left to the recovery.
const keptAfterLossStart = 10 * time.Second

// versionKeptOnCancel: an external job cancelled with a checkpoint its
// first node kept — the one its hold is for, or a refused upload newer
// than the last stored one, the one the cancellation asked for included
// — has the node store it once before the run ends (storeKeptOnCancel):
// stored, the run ends at it; refused again, its end says where the node
// keeps it. A refusal of the checkpoint the cancellation waits for stops
// the world at once (before, the world trained on for the cancel grace,
// and the run ended at its last stored checkpoint with the kept one left
// on the node unsaid). Asked only then.
const versionKeptOnCancel = "kept-on-cancel"

// keptOnCancel is the checkpoint an external job's first node keeps as
// the run is cancelled, when it is newer than the last stored one (step
// 0: none): the one the run held for (the hold keeps its membership), or
// the last refused upload of its last launch (on that launch's first
// node: a recovery may have moved on).
func (r *run) keptOnCancel() (step int64, node spec.Node) {
	switch ext := r.ext; {
	case ext == nil || len(r.st.Membership.Nodes) == 0:
	case r.st.StorageHeld:
		step, node = r.st.Status.Step, r.st.Membership.Nodes[0]
	case r.heldAtCancel > 0:
		step, node = r.heldAtCancel, r.st.Membership.Nodes[0]
	case ext.keep:
		step, node = ext.lastKept, ext.first
	}
	if step <= r.ckptStep() {
		return 0, spec.Node{}
	}
	return step, node
}

// storeKeptOnCancel is one try, as a cancelled external job ends, of
// storing the checkpoint its first node kept (keptOnCancel), within the
// run's cancel grace. It returns what the run's end should add (""
// when stored or none is kept).
func (r *run) storeKeptOnCancel(ctx workflow.Context) string {
	step, node := r.keptOnCancel()
	if step == 0 || workflow.GetVersion(ctx, versionKeptOnCancel, workflow.DefaultVersion, 1) < 1 {
		return ""
	}
	grace := r.spec.CancelGraceD()
	r.showCancelling(ctx, fmt.Sprintf("node %s stores the checkpoint at step %d it kept when the bucket refused it (within %s)",
		node.ID, step, grace))
	out, err := r.storeKeptOn(ctx, node, step, keptAfterLossStart, grace, ", before the run ends cancelled")
	if err == nil && out.Checkpoint == nil && out.Failed == nil {
		err = fmt.Errorf("node %s stored nothing and said no error", node.ID)
	}
	log := workflow.GetLogger(ctx)
	switch {
	case err != nil:
		log.Warn("the checkpoint the first node kept could not be stored as the run ends", "step", step, "error", err)
		return fmt.Sprintf("; the checkpoint at step %d that node %s kept when the bucket refused it was not stored: %v",
			step, node.ID, failureMessage(err))
	case out.Failed != nil:
		r.refused(ctx, out.Failed)
		r.st.Status.KeptOnNode = &spec.KeptCheckpoint{Step: out.Failed.Step, Node: node.ID, File: out.Kept}
		log.Warn("the bucket refused the kept checkpoint again as the run ends", "step", out.Failed.Step, "error", out.Failed.Error)
		return fmt.Sprintf("; node %s keeps the checkpoint at step %d that the bucket refused (%s): `cann-train checkpoint store-kept` stores it once the bucket takes it, then `cann-train run --resume` continues from it",
			node.ID, out.Failed.Step, out.Kept)
	}
	r.commitCheckpoint(ctx, *out.Checkpoint)
	log.Info("stored the checkpoint the first node kept: the run ends at it", "step", out.Checkpoint.Step)
	return ""
}
