package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// A green policy for an external job. A built-in run follows its policy
// at chunk boundaries (beforeChunk); an external job has no chunks, so its
// boundaries are its launches and its uploaded checkpoints:
//
//   - before every launch (the first, a relaunch after a recovery, after
//     a pause or a green stop) beforeLaunch does what beforeChunk does:
//     hold while paused, price what was trained, plan the remaining work
//     and, outside a planned slot, wait on the same durable timer named
//     for the slot ("green window 14:00–18:00 UTC, 120 g/kWh"); a resume
//     or an override cuts the wait short;
//   - while a world runs, every checkpoint it uploads is a re-plan
//     (watchGreen, with the PlanCarbon activity as at chunk boundaries);
//     when the plan puts the present outside its slots the world is
//     stopped as a pause stops it — after that checkpoint — and the next
//     launch boundary waits for the slot and relaunches from the
//     checkpoint, no restart counted.
//
// The remaining work is steps left × the pace measured between the
// launches' starts and checkpoints (workflow time, so start-up is in the
// pace); before the first checkpoint it is green.work's share of the
// steps left; with steps unknown it is green.work less the time trained so
// far. A script that never calls saved() is planned only at launch: once
// it runs, nothing stops it. The trained stretches are the run's segments
// (modelled energy: node_watts × nodes × PUE), priced at every plan and at
// the end, so the carbon figures, the budget alert and `green report`
// work as for built-in runs. Steps a stopped or failed world trained past
// its last checkpoint are neither counted nor priced.

// versionExternalGreen: an external job follows its green policy. Asked
// only for runs with a policy, which external jobs could not have before.
const versionExternalGreen = "external-green"

// externalGreen: this external run follows its green policy.
func (r *run) externalGreen(ctx workflow.Context) bool {
	return r.spec.Green != nil && r.st.Status.Green != nil &&
		workflow.GetVersion(ctx, versionExternalGreen, workflow.DefaultVersion, 1) >= 1
}

// beforeLaunch is an external green run's boundary before a launch, as
// beforeChunk is a built-in run's: hold while paused, then price, re-plan
// and wait for the next slot while outside one. A resume at this boundary
// (ending a pause or cutting a wait) lets the launch start now.
func (r *run) beforeLaunch(ctx workflow.Context) error {
	r.settle(ctx)
	s := &r.st.Status
	s.Step = r.ckptStep()
	resumes := r.st.Ctl.Resumes
	for {
		if r.st.Ctl.Paused && r.externalPause(ctx) {
			if err := r.hold(ctx); err != nil {
				return err
			}
			continue
		}
		cut := r.st.Ctl.Resumes != resumes
		slot, wait := r.planGreen(ctx, !cut)
		if !wait {
			break
		}
		if err := r.waitGreen(ctx, slot); err != nil {
			return err
		}
	}
	s.Detail, s.WaitUntil = "", time.Time{}
	if s.Phase != spec.PhaseTraining {
		r.setPhase(ctx, spec.PhaseTraining)
	}
	return nil
}

// greenWatch is watchGreen's state for one launch.
type greenWatch struct {
	// outside is set once a plan put the run outside its slots; slot is
	// the next one.
	outside workflow.Future
	slot    spec.CarbonSlot
	// planning: a PlanCarbon call is in flight; over: the launch ended.
	planning, over bool
}

// watchGreen re-plans at every checkpoint the current launch uploads
// until a plan puts the run outside its slots — not while a pause is
// pending (that checkpoint is the pause's), nor at the job's last step
// (stopping a world that is about to finish would only delay its end).
func (r *run) watchGreen(ctx workflow.Context, ext *externalRun) *greenWatch {
	outside, set := workflow.NewFuture(ctx)
	gw := &greenWatch{outside: outside}
	workflow.Go(ctx, func(ctx workflow.Context) {
		seen := 0
		for {
			err := workflow.Await(ctx, func() bool { return gw.over || ext.ckpts > seen })
			if err != nil || gw.over {
				return
			}
			seen = ext.ckpts
			if r.st.Ctl.Paused || (r.spec.Steps > 0 && r.ckptStep() >= r.spec.Steps) {
				continue // the pause's checkpoint; the job's last one
			}
			gw.planning = true
			slot, wait := r.planGreen(ctx, true)
			gw.planning = false
			if wait && !gw.over {
				gw.slot = slot
				set.Set(nil, nil)
				return
			}
		}
	})
	return gw
}

// finish ends the watch when the launch has ended, after a plan in
// flight (its answer no longer stops anything).
func (gw *greenWatch) finish(ctx workflow.Context) {
	gw.over = true
	_ = workflow.Await(ctx, func() bool { return !gw.planning })
}

// stopForGreen notes why the world is being stopped.
func (r *run) stopForGreen(ctx workflow.Context, slot spec.CarbonSlot) {
	s := &r.st.Status
	label := slot.Label(workflow.Now(ctx))
	s.Detail = fmt.Sprintf("stopping the world after the checkpoint at step %d: outside the planned slots (next: %s)",
		r.ckptStep(), label)
	workflow.GetLogger(ctx).Info("green plan: stopping the world after the checkpoint", "step", r.ckptStep(),
		"next", label, "session", r.st.Session)
	r.publish(ctx)
}

// markTrained records the launch's training since its last mark as a
// segment (to be priced; its pace plans the rest). Within one instant
// nothing is recorded: the steps go into the next segment.
func (r *run) markTrained(ctx workflow.Context, ext *externalRun, step int64) {
	now := workflow.Now(ctx)
	if !now.After(ext.markAt) {
		return
	}
	r.recordSegment(ext.markAt, now, ext.markStep, max(step, ext.markStep), make([]spec.ChunkResult, len(r.st.Membership.Nodes)))
	ext.markAt, ext.markStep = now, max(step, ext.markStep)
}

// ckptStep is the step of the last uploaded checkpoint (0: none).
func (r *run) ckptStep() int64 {
	if c := r.st.Status.LastCkpt; c != nil {
		return c.Step
	}
	return 0
}

// externalWork is remainingWork for an external job, from the last
// uploaded checkpoint (what a relaunch starts from): steps left × the
// measured seconds per step; before any measurement green.work's share of
// the steps left; with the job's steps unknown, green.work less the time
// trained so far. 0 makes the planner take one forecast step.
func (r *run) externalWork() time.Duration {
	var wall float64
	var steps int64
	for _, seg := range r.st.Status.Segments {
		wall += seg.WallSeconds
		steps += seg.ToStep - seg.FromStep
	}
	est := r.spec.Green.Work.D()
	if r.spec.Steps <= 0 {
		return max(0, est-time.Duration(wall*float64(time.Second)))
	}
	left := r.spec.Steps - r.ckptStep()
	switch {
	case left <= 0:
		return 0
	case steps > 0 && wall > 0:
		return time.Duration(wall / float64(steps) * float64(left) * float64(time.Second))
	case est > 0:
		return time.Duration(float64(est) * float64(left) / float64(r.spec.Steps))
	}
	return 0
}
