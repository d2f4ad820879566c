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
// (energy measured, or modelled as node_watts × nodes × PUE: below),
// priced at every plan and at the end, so the carbon figures, the budget
// alert and `green report` work as for built-in runs. Steps a stopped or
// failed world trained past its last checkpoint are neither counted nor
// priced.
//
// Where every node has an energy meter (RAPL, npu-smi, nvidia-smi) the
// segments carry measured energy instead: the run reads all nodes' meters
// (ReadEnergy, on each node's queue) before a launch, at its first
// checkpoint meterEvery after the last reading (the checkpoints between
// are pending: in the pace, recorded at the next reading), when it is
// stopped and at its end, and a segment's energy is the sum of the nodes'
// shares of their hosts' energy between two readings, × PUE. A node
// without a reading turns the launch's remaining segments to the model,
// all ranks or none, as for chunks. External runs without a green policy
// record their segments and read the meters the same way (PUE 1), so
// that `green report --trace` can price them afterwards; only a policy
// plans.

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
// and wait for the next slot while outside one. A resume that cuts a wait
// at this boundary lets the launch start now; one that ends a pause hands
// the boundary back to the green policy (resumeEndsPause).
func (r *run) beforeLaunch(ctx workflow.Context) error {
	r.settle(ctx)
	s := &r.st.Status
	s.Step = r.ckptStep()
	resumes, cut := r.st.Ctl.Resumes, false
	for {
		if r.st.Ctl.Paused && r.externalPause(ctx) {
			if err := r.hold(ctx); err != nil {
				return err
			}
			if r.st.Ctl.Resumes != resumes && r.resumeEndsPause(ctx) {
				resumes = r.st.Ctl.Resumes // spent on the pause
			}
			continue
		}
		cut = r.st.Ctl.Resumes != resumes || r.resumeCarried(ctx)
		slot, wait := r.planGreen(ctx, !cut)
		if !wait {
			break
		}
		if err := r.waitGreen(ctx, slot); err != nil {
			return err
		}
		if r.rollInWait(ctx) {
			return errWaitRollover
		}
	}
	r.st.Ctl.ResumeUnspent = cut
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
// (and when a window's end finds the world still starting: replans)
// until a plan puts the run outside its slots — not while a pause is
// pending (that checkpoint is the pause's), nor at the job's last step
// (stopping a world that is about to finish would only delay its end).
func (r *run) watchGreen(ctx workflow.Context, ext *externalRun) *greenWatch {
	outside, set := workflow.NewFuture(ctx)
	gw := &greenWatch{outside: outside}
	workflow.Go(ctx, func(ctx workflow.Context) {
		seen, replans := 0, 0
		for {
			err := workflow.Await(ctx, func() bool { return gw.over || ext.ckpts > seen || ext.replans > replans })
			if err != nil || gw.over {
				return
			}
			seen, replans = ext.ckpts, ext.replans
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

// versionExternalSlotEnd: an interruptible green run's external world,
// on nodes that take checkpoint requests, is asked for a checkpoint when
// the planned window it trains in ends; the plan made at that checkpoint
// then stops it. Before, it trained on into the dirty hours until its
// next periodic checkpoint. Asked when a window's end is first due
// during a launch.
const versionExternalSlotEnd = "external-slot-end"

// askAtSlotEnd asks the world for a checkpoint when the window it trains
// in ends (r.slotEnd, which every plan sets anew: the timer follows it)
// until the launch ends (gw.over, or ctx).
func (r *run) askAtSlotEnd(ctx workflow.Context, gw *greenWatch) {
	workflow.Go(ctx, func(ctx workflow.Context) {
		for !gw.over {
			end, now := r.slotEnd, workflow.Now(ctx)
			moved := func() bool { return gw.over || !r.slotEnd.Equal(end) }
			if end.IsZero() || !end.After(now) {
				if workflow.Await(ctx, moved) != nil {
					return
				}
				continue
			}
			if workflow.GetVersion(ctx, versionExternalSlotEnd, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				return
			}
			ok, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: end.Sub(now),
				TimerOptions: workflow.TimerOptions{Summary: fmt.Sprintf("ask the world for a checkpoint at the green window's end, %s UTC", end.UTC().Format("15:04"))}},
				moved)
			if err != nil {
				return
			}
			if ok {
				continue // re-planned: another end, or none
			}
			why := fmt.Sprintf("the green window ended at %s UTC", end.UTC().Format("15:04"))
			if _, unreported := r.requestCheckpoint(ctx, why, true); unreported && r.ext != nil {
				r.ext.replans++ // still starting: plan now (watchGreen)
			}
			if workflow.Await(ctx, moved) != nil {
				return
			}
		}
	})
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
// segment (to be priced; its pace plans the rest), with the energy the
// nodes' meters counted since the last mark when every node has one.
// Within one instant nothing is recorded: the steps go into the next
// segment. A metered launch records a checkpoint only meterEvery after
// its last mark; until then it is pending (in the pace, not priced yet).
func (r *run) markTrained(ctx workflow.Context, ext *externalRun, step int64) {
	_ = workflow.Await(ctx, func() bool { return !ext.reading })
	now := workflow.Now(ctx)
	if ext.meters != nil && now.Sub(ext.markAt) < r.meterEvery() {
		if now.After(ext.markAt) {
			ext.pendAt, ext.pendStep = now, max(step, ext.markStep)
		}
		return
	}
	r.recordTrained(ctx, ext, now, step)
}

// meterEvery is how long a metered launch trains between readings
// (external.meter_every). By default 3 minutes per node: a round of
// readings is three history events per node, so this keeps it to about
// one event per minute of training, and a launch — which cannot
// continue-as-new while it runs — far from Temporal's history limits.
func (r *run) meterEvery() time.Duration {
	if d := r.spec.External.MeterEvery.D(); d > 0 {
		return d
	}
	return time.Duration(3*max(len(r.st.Membership.Nodes), 1)) * time.Minute
}

// recordTrained records the launch's training from its last mark to end
// (step), with the meters read now when the launch is metered. Callers
// have waited until no reading is in flight (markTrained, and runWorld
// once its world has ended).
func (r *run) recordTrained(ctx workflow.Context, ext *externalRun, end time.Time, step int64) {
	if !end.After(ext.markAt) {
		return
	}
	results := make([]spec.ChunkResult, len(r.st.Membership.Nodes))
	if ext.meters != nil {
		ext.reading = true
		cur := r.readMeters(ctx, "the rest of this launch")
		ext.reading = false
		for i := range cur {
			// A meter that went back (restarted with its node) gives 0:
			// the segment is modelled.
			results[i].Joules = max(0, cur[i]-ext.meters[i])
		}
		ext.meters = cur
	}
	step = max(step, ext.markStep)
	r.recordSegment(ext.markAt, end, ext.markStep, step, results)
	ext.markAt, ext.markStep, ext.pendAt = end, step, time.Time{}
}

// closeLaunch records a stopped or failed launch's pending checkpoint:
// after a stop measured up to now (the nodes are alive; the few seconds
// trained past the checkpoint are in the reading), after a failure
// modelled (a dead node would hold the recovery up to a reading's
// timeout).
func (r *run) closeLaunch(ctx workflow.Context, ext *externalRun, stopped bool) {
	if ext.pendAt.IsZero() {
		return
	}
	if !stopped {
		ext.meters = nil
	}
	r.recordTrained(ctx, ext, ext.pendAt, ext.pendStep)
}

// recordLostLaunch records what a failed launch trained after its last
// recorded checkpoint as a lost segment (see recordLost): the world
// restarts from that checkpoint.
func (r *run) recordLostLaunch(ctx workflow.Context, ext *externalRun, f *chunkFailure) {
	lost := &chunkFailure{from: ext.markStep, atStep: f.atStep, started: ext.markAt, seen: workflow.Now(ctx)}
	r.recordLost(ctx, lost, len(r.st.Membership.Nodes))
	ext.markAt = lost.seen
}

// versionExternalEnergy: an external run measures its launches' energy
// on the nodes' meters and records its trained stretches at every
// checkpoint, with a green policy or without (for `green report`).
// Asked once per execution; histories from before it replay with
// modelled energy (green runs) or one stretch per finished launch.
const versionExternalEnergy = "external-energy"

// externalEnergy: this external run reads its nodes' meters.
func (r *run) externalEnergy(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionExternalEnergy, workflow.DefaultVersion, 1) >= 1
}

// readMeters reads every node's host meter at once and returns each
// node's share of its host's energy so far (nodes on one host split it,
// so the run counts the host once), facility overhead included — or nil
// when a node has no reading (no meter, the meter failed, the node did
// not answer): what (the stretch the readings were for) is then modelled,
// as a chunk is when one of its nodes has no measurement.
func (r *run) readMeters(ctx workflow.Context, what string) []float64 {
	m := r.st.Membership
	futures := make([]workflow.Future, len(m.Nodes))
	for i, nd := range m.Nodes {
		futures[i] = workflow.ExecuteActivity(meterOptions(ctx, nd), spec.ActivityReadEnergy)
	}
	pue := 1.0 // the facility's overhead is a green policy's
	if r.spec.Green != nil {
		pue = r.spec.Green.WithDefaults().PUE
	}
	out := make([]float64, len(futures))
	why := ""
	for i, f := range futures {
		var rd spec.EnergyReading
		switch err := f.Get(ctx, &rd); {
		case err != nil:
			why = fmt.Sprintf("node %s: %s", m.Nodes[i].ID, message(err))
		case rd.Meter == "":
			why = rd.Reason
		default:
			out[i] = rd.Joules * pue / float64(m.HostShares(i))
		}
	}
	if why != "" {
		workflow.GetLogger(ctx).Info("energy: modelling "+what, "why", why, "session", r.st.Session)
		return nil
	}
	return out
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
		if seg.Lost {
			continue // its steps are trained again: not the pace
		}
		wall += seg.WallSeconds
		steps += seg.ToStep - seg.FromStep
	}
	if e := r.ext; e != nil && !e.pendAt.IsZero() {
		wall += e.pendAt.Sub(e.markAt).Seconds() // waiting for a reading
		steps += e.pendStep - e.markStep
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
