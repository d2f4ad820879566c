package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// Asynchronous checkpoints: a chunk that checkpoints (except the last, and
// a checkpoint a rescale waits for) has rank 0 snapshot the state at its
// last step and upload it in the background while the next chunk trains
// (engine/checkpoint.SaveAsync: the stall is a memory copy). The chunk
// reports it pending; the next chunk on that node reports it committed.
// If the node is lost first, the recovery looks the checkpoint up in the
// bucket (ResolveCheckpoint): a checkpoint exists only once its manifest
// is written, so one found is whole, and the lost steps stay within the
// checkpoint interval.

const versionAsyncCheckpoint = "async-checkpoint"

func (r *run) asyncCheckpoints(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionAsyncCheckpoint, workflow.DefaultVersion, 1) >= 1
}

// commitCheckpoint records a committed checkpoint newer than the last one.
func (r *run) commitCheckpoint(ctx workflow.Context, ref spec.CheckpointRef) {
	s := &r.st.Status
	if p := r.st.PendingCkpt; p != nil && p.Step <= ref.Step {
		r.st.PendingCkpt = nil
	}
	if s.LastCkpt != nil && ref.Step <= s.LastCkpt.Step {
		return
	}
	s.LastCkpt = &ref
	r.st.Unreached = 0 // (trained on since a Temporal stall)
	r.storedPast(ctx, ref.Step)
	s.Checkpoints++
	r.st.Checkpoints = append(r.st.Checkpoints, ref)
	if len(r.st.Checkpoints) > keepCheckpointRefs {
		r.st.Checkpoints = r.st.Checkpoints[len(r.st.Checkpoints)-keepCheckpointRefs:]
	}
}

// storedPast clears the status's failed checkpoint once one at its step
// or later committed at step: the storage works again. (Histories from
// before versionStorageWaits cleared it only for a later one: asked when
// the steps are equal.)
func (r *run) storedPast(ctx workflow.Context, step int64) {
	f := r.st.Status.CheckpointFailed
	if f == nil || step < f.Step || step == f.Step && !r.storageWaits(ctx) {
		return
	}
	r.st.Status.CheckpointFailed = nil
}

// resolvePending looks up, after a failure, the checkpoint whose upload
// was in flight; if it was committed the run resumes from it. When the
// storage does not answer whether it was (versionResolveWaits), the run
// holds until it does, as for a checkpoint it cannot read: the recovery
// does not rewind past a checkpoint that may be stored.
func (r *run) resolvePending(ctx workflow.Context) error {
	p := r.st.PendingCkpt
	if p == nil {
		return nil
	}
	r.st.PendingCkpt = nil
	if last := r.st.Status.LastCkpt; last != nil && last.Step >= p.Step {
		return nil
	}
	for held := false; ; held = true {
		ref, err := resolveCheckpoint(ctx, *p, impatient)
		switch {
		case err == nil:
			if held {
				r.resolveHeld(ctx)
			}
			r.commitCheckpoint(ctx, ref)
			return nil
		case ctx.Err() != nil || isType(err, spec.ErrTypeNoSuchCheckpoint) || !r.resolveWaits(ctx):
			if held {
				r.resolveHeld(ctx)
			}
			workflow.GetLogger(ctx).Warn("checkpoint uploading when the node was lost is not there; resuming from an older one",
				"step", p.Step, "error", err)
			return nil
		}
		err = r.waitToRead(ctx,
			fmt.Sprintf("the checkpoint storage did not say whether the checkpoint at step %d, uploading when the node was lost, is stored (%s); the run asks again",
				p.Step, message(err)),
			fmt.Sprintf("look the checkpoint at step %d up again", p.Step))
		if err != nil {
			return err
		}
	}
}

// resolveHeld ends resolvePending's hold: the storage answered.
func (r *run) resolveHeld(ctx workflow.Context) {
	s := &r.st.Status
	s.WaitUntil, s.Detail = time.Time{}, ""
	r.st.StorageWait = 0
	r.setPhase(ctx, spec.PhaseRecovering)
}

// versionResolveWaits: a recovery whose storage does not answer whether
// the checkpoint uploading when its node was lost is stored holds the run
// in waiting-storage until it answers (a resume cuts a wait short);
// before, it resumed from the checkpoint before that one, and lost a
// checkpoint interval of training to a storage outage of a few seconds.
// Asked only then.
const versionResolveWaits = "resolve-waits"

func (r *run) resolveWaits(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionResolveWaits, workflow.DefaultVersion, 1) >= 1
}

// isType reports whether err is, or wraps, an application error of type
// typ.
func isType(err error, typ string) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == typ
}

// versionSettlePending: a run that holds (paused, or waiting for a
// green window) or is cancelled looks its pending checkpoint up in the
// bucket first; before, the status (and so a later run --resume) named
// the checkpoint before it until a next chunk reported it. Version 2: a
// pause says paused at once and settles the checkpoint in the
// background, for as long as a large upload takes (1: it waited up to
// ~7 s before saying paused).
const versionSettlePending = "settle-pending-checkpoint"

// settleVersion is versionSettlePending's version for this run (asked
// only with a checkpoint pending).
func settleVersion(ctx workflow.Context) workflow.Version {
	return workflow.GetVersion(ctx, versionSettlePending, workflow.DefaultVersion, 2)
}

// settlePending commits the checkpoint rank 0 was still uploading when
// the last chunk ended, once it is in the bucket (its uploader is alive
// and finishing). One still missing after a few seconds stays pending:
// the node's next chunk reports it.
func (r *run) settlePending(ctx workflow.Context) {
	if r.st.PendingCkpt == nil || settleVersion(ctx) == workflow.DefaultVersion {
		return
	}
	r.settleCheckpoint(ctx, patient)
}

// settleHeld is settlePending for a paused run, in a coroutine: patient
// for as long as a large upload may take, while the run holds (a resume
// does not wait for it: the node's next chunk would report it too).
func (r *run) settleHeld(ctx workflow.Context) {
	workflow.Go(ctx, func(ctx workflow.Context) {
		step := r.st.Status.Step
		r.settleCheckpoint(ctx, held)
		if ctx.Err() == nil && r.st.Status.Phase == spec.PhasePaused && r.st.Status.Step == step {
			r.st.Status.Detail = r.pausedDetail(step)
			r.publish(ctx)
		}
	})
}

func (r *run) settleCheckpoint(ctx workflow.Context, wait patience) {
	p := r.st.PendingCkpt
	if p == nil {
		return
	}
	if last := r.st.Status.LastCkpt; last != nil && last.Step >= p.Step {
		r.st.PendingCkpt = nil
		return
	}
	ref, err := resolveCheckpoint(ctx, *p, wait)
	switch {
	case err == nil:
		r.commitCheckpoint(ctx, ref)
	case ctx.Err() == nil:
		workflow.GetLogger(ctx).Warn("checkpoint still uploading; the node's next chunk reports it", "step", p.Step, "error", err)
	}
}

// patience is how long resolveCheckpoint waits for a checkpoint that is
// not in the bucket yet.
type patience int

const (
	// impatient: a missing checkpoint is an answer.
	impatient patience = iota
	// patient: retried for about 7 s (its uploader is alive and finishing).
	patient
	// held: retried for about 30 min (a paused run, a large upload).
	held
)

// resolveCheckpoint runs ResolveCheckpoint for p, retried for a missing
// checkpoint as wait says.
func resolveCheckpoint(ctx workflow.Context, p spec.CheckpointRef, wait patience) (spec.CheckpointRef, error) {
	retry := &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{spec.ErrTypeNoSuchCheckpoint}}
	switch wait {
	case patient:
		retry = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 2 * time.Second, MaximumAttempts: 8}
	case held:
		retry = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: 70}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         retry,
		Summary:             "find the checkpoint at step " + itoa(int(p.Step)),
	})
	var ref spec.CheckpointRef
	err := workflow.ExecuteActivity(actx, spec.ActivityResolveCheckpoint, p).Get(ctx, &ref)
	return ref, err
}
