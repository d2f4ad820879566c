package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// Change IDs for workflow.GetVersion: histories recorded before these
// features replay through the old code paths.
const (
	// versionControls: pause, resume, rescale, green-override and the
	// green policy act at chunk boundaries.
	versionControls = "chunk-boundary-controls"
	// versionShrinkOnFailure: without a spare, a failed node's run goes on
	// with the healthy nodes (≥ min_nodes) instead of waiting.
	versionShrinkOnFailure = "shrink-on-failure"
	// versionLostState: a node that restarted between chunks (NoState)
	// is recovered from the last checkpoint instead of failing the run,
	// and a run that does fail reports a rank's own error, not the
	// cancellation of the others. Asked only when a chunk saw either.
	versionLostState = "lost-state"
	// versionFailureCause: a failed chunk or external world whose other
	// ranks were cancelled names the failing rank's own error as its
	// reason, and an external world ends Failed with it instead of
	// Canceled. Asked only when a cancellation hid such an error.
	versionFailureCause = "failure-cause"
)

// Controls is what the control signals asked for; it crosses
// continue-as-new in RunState.
type Controls struct {
	// Paused: hold at the next chunk boundary until a resume.
	Paused bool `json:"paused,omitempty"`
	// PauseNow: a second pause came before the first took effect; an
	// external job then stops its world at once instead of after its next
	// checkpoint upload (built-in runs hold at the chunk boundary either
	// way).
	PauseNow bool `json:"pause_now,omitempty"`
	// Resumes counts resume signals; a change cuts a green wait short.
	Resumes int `json:"resumes,omitempty"`
	// ResumeUnspent: a resume cut the green policy's wait at the last
	// boundary and the chunk (an external job's launch) it let start has
	// not completed: a failure carries the cut to the next boundary
	// (versionResumeOutlivesLoss), where the run would otherwise wait
	// again without having trained.
	ResumeUnspent bool `json:"resume_unspent,omitempty"`
	// Rescale is the node count asked for and not yet applied (0: none).
	Rescale int `json:"rescale,omitempty"`
	// Evict are drained nodes to move off at the next chunk boundary;
	// EvictRetry, when set, is when to ask again after no node was free.
	Evict      []spec.Evict `json:"evict,omitempty"`
	EvictRetry time.Time    `json:"evict_retry,omitzero"`
	// Override ignores the green policy, until OverrideUntil when set.
	Override      bool      `json:"override,omitempty"`
	OverrideUntil time.Time `json:"override_until,omitzero"`
	// Overrides counts green-override signals (wakes a green wait).
	Overrides int `json:"overrides,omitempty"`
}

// segmentGap: chunks closer than this on one membership are one segment.
const segmentGap = time.Minute

// maxSegments bounds RunStatus.Segments; older ones are merged.
const maxSegments = 256

// listen records the control signals in the run's state as they arrive;
// the main loop acts on them at chunk boundaries. Signals that arrive in
// one workflow task are taken channel by channel, so a pause and a resume
// sent together end resumed.
func (r *run) listen(ctx workflow.Context) {
	described := func(name, what string) workflow.ReceiveChannel { // (the Web UI lists them with it)
		return workflow.GetSignalChannelWithOptions(ctx, name, workflow.SignalChannelOptions{Description: what})
	}
	pause := described(spec.SignalPause, "Hold at the next checkpoint, keeping the nodes (no payload): `cann-train pause RUN`")
	resume := described(spec.SignalResume, "End a pause, or a green wait, and train on (no payload): `cann-train resume RUN`")
	rescale := described(spec.SignalRescale, `Change the node count at the next chunk boundary ({"nodes": N}): `+"`cann-train scale RUN N`")
	override := described(spec.SignalGreenOverride, `Ignore the green policy ({} for good, {"until": T} for a while, {"clear": true} to end it): `+
		"`cann-train green override RUN`")
	evict := described(spec.SignalEvict, `Move off a node at the next chunk boundary ({"node_id": ID}); the node registry sends it for `+
		"`cann-train nodes drain`")
	log := workflow.GetLogger(ctx)
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) {
		c.ReceiveAsync(nil) // (any payload: none is read)
		log.Info("pause requested: holding at the next chunk boundary", "step", r.st.Status.Step)
		r.st.Ctl.PauseNow = r.st.Ctl.Paused
		r.st.Ctl.Paused = true
		r.st.Status.PauseRequested = true
		r.endInFlight(ctx, "pause")
	})
	sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) {
		c.ReceiveAsync(nil)
		log.Info("resume requested", "step", r.st.Status.Step)
		r.st.Ctl.Paused = false
		r.st.Ctl.PauseNow = false
		r.st.Ctl.Resumes++
		r.st.Status.PauseRequested = false
	})
	sel.AddReceive(rescale, func(c workflow.ReceiveChannel, _ bool) {
		var req spec.Rescale
		raw, err := receive(c, &req)
		if err == nil {
			err = r.strictPayload(ctx, raw, &spec.Rescale{})
		}
		if err == nil && (len(raw) == 0 || string(raw) == "null") {
			// (Refused as before, as a rescale to 0 nodes: only the words
			// are new.)
			err = errors.New("it has no payload")
		}
		if err != nil {
			log.Warn("rescale refused: its payload does not decode", "error", err)
			r.st.Status.RefusedRescale = fmt.Sprintf(`a rescale signal refused: %v (want {"nodes": N})`, err)
			return
		}
		if r.spec.IsExternal() {
			// (Refused as before, by the range below, which is empty for
			// an external job: only the words are new.)
			log.Warn("rescale refused: an external job keeps its world size", "nodes", req.Nodes)
			r.st.Status.RefusedRescale = fmt.Sprintf("rescale to %d node(s) refused: an external job keeps its world size (%d nodes)", req.Nodes, r.spec.Nodes)
			return
		}
		// Every rank needs at least one example of the global batch (the
		// smallest the batch controller has set, too).
		least := r.spec.MinNodes
		if req.Nodes < least {
			least = r.minNodes(ctx)
		}
		if most := min(1024, r.minBatch()/r.spec.LocalRanks()); req.Nodes < least || req.Nodes > most {
			log.Warn("rescale refused: node count out of range", "nodes", req.Nodes, "min_nodes", least,
				"global_batch", r.minBatch())
			r.st.Status.RefusedRescale = fmt.Sprintf("rescale to %d node(s) refused: want %d..%d (min_nodes %d; every rank needs an example of the global batch %d)",
				req.Nodes, least, most, least, r.minBatch())
			if err := unknownField(raw, &spec.Rescale{}); err != nil {
				r.st.Status.RefusedRescale += fmt.Sprintf("; its payload %s: %v", clipPayload(raw), err)
			}
			return
		}
		r.st.Status.RefusedRescale = ""
		log.Info("rescale requested: applied at the next chunk boundary", "nodes", req.Nodes)
		r.st.Ctl.Rescale = req.Nodes
		r.st.Status.PendingNodes = req.Nodes
		if req.Nodes != len(r.st.Membership.Nodes) {
			r.endInFlight(ctx, fmt.Sprintf("rescale to %d node(s)", req.Nodes))
		}
	})
	onCheckedSignal(sel, override, r.refuseSignal(ctx, spec.SignalGreenOverride), func(o spec.GreenOverride, raw json.RawMessage) error {
		if err := r.strictPayload(ctx, raw, &spec.GreenOverride{}); err != nil {
			return err // (a misspelt "clear" would turn the override on)
		}
		r.st.Status.RefusedSignal = ""
		r.st.Ctl.Overrides++
		r.st.Ctl.Override, r.st.Ctl.OverrideUntil = !o.Clear, o.Until
		if o.Clear {
			r.st.Ctl.OverrideUntil = time.Time{}
		}
		log.Info("green override", "on", r.st.Ctl.Override, "until", r.st.Ctl.OverrideUntil)
		r.noteOverride(ctx)
		return nil
	})
	onSignal(sel, evict, r.refuseSignal(ctx, spec.SignalEvict), func(ev spec.Evict) { r.noteEvict(ctx, ev) })
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel.Select(ctx)
		}
	})
}

// versionStrictSignals: a rescale or green-override signal whose payload
// names a field its type lacks is refused, as one that does not decode
// (before, the field was ignored: {"clearr": true} turned the override
// on). Asked only for such a payload.
const versionStrictSignals = "strict-signals"

// strictPayload is the error of a control signal's payload raw that
// names a field v's type lacks (versionStrictSignals); nil otherwise.
func (r *run) strictPayload(ctx workflow.Context, raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	err := unknownField(raw, v)
	if err == nil || workflow.GetVersion(ctx, versionStrictSignals, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	return fmt.Errorf("its payload %s: %w", clipPayload(raw), err)
}

// refuseSignal reports a control signal name whose payload did not
// decode: in the control worker's log and the run's status, which keeps
// the last. (Status only: no command.)
func (r *run) refuseSignal(ctx workflow.Context, name string) func(error) {
	return func(err error) {
		workflow.GetLogger(ctx).Warn("signal refused: its payload does not decode", "signal", name, "error", err)
		r.st.Status.RefusedSignal = fmt.Sprintf("%s signal refused: %v", name, err)
	}
}

// settle lets the signal coroutines take every signal already delivered,
// so that continue-as-new carries them: a signal handed to a blocked
// coroutine is applied only when that coroutine next runs.
func (r *run) settle(ctx workflow.Context) {
	done := false
	workflow.Go(ctx, func(workflow.Context) { done = true })
	_ = workflow.Await(ctx, func() bool { return done })
}

// controlled: this run acts on control signals and the green policy at
// chunk boundaries (false when replaying a history from before them).
func (r *run) controlled(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionControls, workflow.DefaultVersion, 1) >= 1
}

// beforeChunk is the chunk boundary: hold while paused, apply a pending
// rescale, replace drained nodes, then follow the green policy — price
// the finished chunks, re-plan, and wait for the next slot when outside
// one. Any change of the
// controls during a wait is acted on at once. A resume that cuts a wait
// at this boundary lets the next chunk start now; one that ends a pause
// hands the boundary back to the green policy (resumeEndsPause).
func (r *run) beforeChunk(ctx workflow.Context) error {
	r.settle(ctx)
	resumes := r.st.Ctl.Resumes
	deferred, cut := false, false
	for {
		if r.st.Ctl.Paused {
			if err := r.hold(ctx); err != nil {
				return err
			}
			if r.st.Ctl.Resumes != resumes && r.resumeEndsPause(ctx) {
				resumes = r.st.Ctl.Resumes // spent on the pause
			}
			continue
		}
		if n := r.st.Ctl.Rescale; n > 0 && !deferred {
			deferred = !r.rescale(ctx, n)
			continue
		}
		if r.evictDue(ctx) && !deferred {
			deferred = !r.evict(ctx)
			continue
		}
		if !deferred && r.regrowDue(ctx) {
			deferred = !r.regrow(ctx)
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
	r.st.Status.Detail = ""
	r.st.Status.WaitUntil = time.Time{}
	if r.st.Status.Phase != spec.PhaseTraining {
		r.setPhase(ctx, spec.PhaseTraining)
	}
	return nil
}

// versionResumeEndsPause: the resume that ends a pause of a run with a
// green policy is spent on the pause: the policy decides the boundary as
// before the pause — a run paused while it waited for a window waits for
// it again, and a second resume cuts that wait. Before, it cut the wait
// too: a contiguous job paused and resumed in its wait ran to the end at
// once, in the hours it waited to avoid, with the resume saying only that
// the pause ended (green audit, session 53). Asked only then.
const versionResumeEndsPause = "resume-ends-pause"

// resumeEndsPause: the resume that ended this boundary's hold is spent
// on the pause (see versionResumeEndsPause).
func (r *run) resumeEndsPause(ctx workflow.Context) bool {
	return r.spec.Green != nil && workflow.GetVersion(ctx, versionResumeEndsPause, workflow.DefaultVersion, 1) >= 1
}

// versionResumeOutlivesLoss: a resume that cut a green wait short is
// spent only by a chunk (launch) that completes; one that failed carries
// it to the next boundary, which trains at once. Before, the run planned
// there as if never resumed and waited again. Asked only at a boundary
// after such a failure.
const versionResumeOutlivesLoss = "resume-outlives-loss"

// resumeCarried: the last boundary's resume was not spent (its chunk
// failed): this boundary does not wait either.
func (r *run) resumeCarried(ctx workflow.Context) bool {
	return r.st.Ctl.ResumeUnspent && r.spec.Green != nil &&
		workflow.GetVersion(ctx, versionResumeOutlivesLoss, workflow.DefaultVersion, 1) >= 1
}

// hold waits at the chunk boundary until a resume; the checkpoint the
// last chunk was uploading is settled meanwhile (settleHeld), so that a
// paused run's status comes to name its checkpoint at the step it holds
// at.
func (r *run) hold(ctx workflow.Context) error {
	v := workflow.DefaultVersion
	if r.st.PendingCkpt != nil {
		v = settleVersion(ctx)
	}
	if v == 1 {
		r.st.Status.Detail = fmt.Sprintf("pausing at step %d: its checkpoint is uploading", r.st.Status.Step)
		r.settleCheckpoint(ctx, patient)
	}
	r.st.Status.Detail = r.pausedDetail(r.st.Status.Step)
	if v >= 2 {
		r.st.Status.Detail = fmt.Sprintf("paused at step %d; its checkpoint is still uploading (cann-train resume %s continues)", r.st.Status.Step, r.spec.Name)
	}
	r.setPhase(ctx, spec.PhasePaused)
	if v >= 2 {
		r.settleHeld(ctx)
	}
	workflow.GetLogger(ctx).Info("paused", "step", r.st.Status.Step)
	if err := workflow.Await(ctx, func() bool { return !r.st.Ctl.Paused }); err != nil {
		return err
	}
	r.st.Status.Detail = ""
	r.heldBetweenChunks() // (the pause)
	workflow.GetLogger(ctx).Info("resumed", "step", r.st.Status.Step)
	return nil
}

// pausedDetail is the status detail of the run paused at step: the
// command that resumes it.
func (r *run) pausedDetail(step int64) string {
	return fmt.Sprintf("paused at step %d (cann-train resume %s continues)", step, r.spec.Name)
}

// rescale changes the node count to n at this boundary (see changeNodes).
// A rescale the Cluster cannot fill is dropped; the run trains on.
func (r *run) rescale(ctx workflow.Context, n int) bool {
	if n == len(r.st.Membership.Nodes) {
		r.st.Ctl.Rescale, r.st.Status.PendingNodes = 0, 0
		r.setTarget(0) // asked to stay at this size: no growing back
		return true
	}
	if cur := len(r.st.Membership.Nodes); n > cur && !r.spec.IsExternal() &&
		workflow.GetVersion(ctx, versionScaleUpGrows, workflow.DefaultVersion, 1) >= 1 {
		// Grow as a shrunk run grows back: the free nodes now, the rest
		// as they come free, training on meanwhile — from a checkpoint at
		// this step (the next chunk makes one when there is none).
		if !r.atCheckpoint(ctx, n, "") {
			return false
		}
		r.st.Ctl.Rescale, r.st.Status.PendingNodes = 0, 0
		r.setTarget(n)
		return r.grow(ctx, true)
	}
	rec, done := r.changeNodes(ctx, n, 0, r.spec.NodeWait.D(), "")
	if !done {
		return false
	}
	r.st.Status.Rescalings = append(r.st.Status.Rescalings, rec)
	if r.st.Ctl.Rescale != n && workflow.GetVersion(ctx, versionNewerRescale, workflow.DefaultVersion, 1) >= 1 {
		// Another rescale came while this one was under way: it is next.
	} else {
		r.st.Ctl.Rescale, r.st.Status.PendingNodes = 0, 0
	}
	if rec.Error == "" {
		r.setTarget(0) // the node count asked for is the plan now
	}
	r.publish(ctx)
	return true
}

// versionScaleUpGrows: a rescale to more nodes takes the free ones at
// once and the rest as they come free (the regrow: asked for while chunks
// train), training on meanwhile. Before, the run stopped training and
// waited up to node_wait at the boundary for all of them, and nothing
// (another scale, a pause) called that wait off.
const versionScaleUpGrows = "scale-up-grows"

// versionNewerRescale: a rescale signalled while another was under way
// (its nodes being acquired) is applied after it; before, the end of the
// first dropped it. Asked only then.
const versionNewerRescale = "newer-rescale"

// regrowFirst and regrowRetry: how long a run below its target size
// trains on after it shrank (it had just taken every free node; workers
// that crashed are often back seconds later), and after the Cluster had
// no free node for it, before it asks — the latter doubling with every
// ask that finds none, up to regrowMax (each ask is a few events in the
// run's and the Cluster's histories); node_wait when shorter.
const (
	regrowFirst = 10 * time.Second
	regrowRetry = time.Minute
	regrowMax   = 16 * time.Minute
)

// nextRegrowWait is the wait after an ask that found no free node, the
// last wait having been prev (0: none yet).
func nextRegrowWait(prev time.Duration) time.Duration {
	return min(max(regrowRetry, 2*prev), regrowMax)
}

func (r *run) regrowAfter(ctx workflow.Context, wait time.Duration) time.Time {
	return workflow.Now(ctx).Add(min(wait, r.spec.NodeWait.D()))
}

// versionRegrow: a run that went on with fewer nodes (a failure without
// a spare, a drained node without a replacement) takes free nodes back
// at chunk boundaries, up to the size it had (before: it stayed small
// until a rescale). Asked only when such a run is at a boundary where it
// could change.
const versionRegrow = "regrow"

// setTarget records the node count to grow back to (0: none).
func (r *run) setTarget(n int) {
	r.st.Status.TargetNodes = n
	if n == 0 {
		r.st.RegrowAt, r.st.RegrowWait = time.Time{}, 0
	}
}

// shrank notes that the run went on with fewer nodes than before (from):
// it grows back to the larger of from and an earlier target, asking
// first regrowFirst from now.
func (r *run) shrank(ctx workflow.Context, from int) {
	if r.spec.IsExternal() {
		return // (it keeps its world size: min_nodes is nodes)
	}
	r.setTarget(max(r.st.Status.TargetNodes, from))
	r.st.RegrowAt, r.st.RegrowWait = r.regrowAfter(ctx, regrowFirst), 0
}

// regrowTarget is the size to grow back to: the target, but no more
// nodes than every rank can have an example of the smallest global batch
// the carbon batch controller has set since (as for a rescale).
func (r *run) regrowTarget() int {
	return min(r.st.Status.TargetNodes, r.minBatch()/r.spec.LocalRanks())
}

// regrowDue: the run is below its target size, its last ask is a while
// ago, and this boundary has (or is uploading) the checkpoint a new
// membership starts from — a regrow never makes a chunk checkpoint just
// to ask. Not for external jobs (they keep their world size).
func (r *run) regrowDue(ctx workflow.Context) bool {
	s := &r.st.Status
	if r.regrowTarget() <= len(r.st.Membership.Nodes) || r.spec.IsExternal() || s.Step >= r.spec.Steps ||
		workflow.Now(ctx).Before(r.st.RegrowAt) {
		return false
	}
	at := s.Step == 0 || s.LastCkpt != nil && s.LastCkpt.Step == s.Step || r.st.PendingCkpt != nil && r.st.PendingCkpt.Step == s.Step
	return at && workflow.GetVersion(ctx, versionRegrow, workflow.DefaultVersion, 1) >= 1
}

// regrow asks the Cluster for free nodes, at once, up to the target size
// (at least one more than the run has): they take the next ranks and the
// run resumes from the checkpoint at this step. With none free it trains
// on and asks again regrowRetry later (doubling), recording nothing. It returns
// false when the change waits for a checkpoint (see changeNodes).
func (r *run) regrow(ctx workflow.Context) bool { return r.grow(ctx, false) }

// grow is regrow; scaled: toward a rescale's size (recorded as that
// rescale, not as growing back).
func (r *run) grow(ctx workflow.Context, scaled bool) bool {
	target, cur := r.regrowTarget(), len(r.st.Membership.Nodes)
	why := fmt.Sprintf("growing back to %d nodes", target)
	if scaled {
		why = ""
	}
	rec, done := r.changeNodes(ctx, target, cur+1, 0, why)
	if !done {
		return false
	}
	if rec.Error != "" {
		// None free: ask again later, and later still after each miss.
		r.st.RegrowWait = nextRegrowWait(r.st.RegrowWait)
		r.st.RegrowAt = r.regrowAfter(ctx, r.st.RegrowWait)
		r.scaleAsksSoon(ctx, scaled)
		return true
	}
	r.st.RegrowAt, r.st.RegrowWait = r.regrowAfter(ctx, regrowRetry), 0
	rec.Regrow = !scaled
	r.st.Status.Rescalings = append(r.st.Status.Rescalings, rec)
	if len(r.st.Membership.Nodes) >= r.st.Status.TargetNodes {
		r.setTarget(0)
	} else {
		r.scaleAsksSoon(ctx, scaled)
	}
	r.publish(ctx)
	return true
}

// versionScaleAsksSoon: a scale-up that found fewer free nodes than it
// asked for asks for the others scaleAskAfter later (while the next chunk
// trains, an ask that waits for a node to come free: watchForNodes), not a
// minute (regrowRetry) later as a run growing back after a loss does — the
// nodes were asked for just now, and a scale --wait waits for them. Asked
// only for such a scale.
const versionScaleAsksSoon = "scale-asks-soon"

// scaleAskAfter is how long after a scale-up short of nodes the run first
// asks for the missing ones (after the boundary that took the free ones:
// not at that boundary again).
const scaleAskAfter = time.Second

// scaleAsksSoon has a scale-up (scaled) still short of its size ask for
// the missing nodes scaleAskAfter from now (see versionScaleAsksSoon).
func (r *run) scaleAsksSoon(ctx workflow.Context, scaled bool) {
	if !scaled || !r.regrowWanted() || workflow.GetVersion(ctx, versionScaleAsksSoon, workflow.DefaultVersion, 1) < 1 {
		return
	}
	r.st.RegrowAt = r.regrowAfter(ctx, scaleAskAfter)
}

// versionNodesInFlight: a run waiting for a free node — below its size
// after a loss, to grow back (regrow), or keeping a drained node for want
// of a replacement (evict) — asks the Cluster, while a chunk trains,
// whether one is free when it would have asked at a chunk boundary
// (RegrowAt, EvictRetry), and ends the chunk early when one is
// (endInFlight): before, it asked only at chunk boundaries, a chunk's
// length later (minutes, or more for long chunks). Asked when such a
// chunk starts.
const versionNodesInFlight = "nodes-in-flight"

// versionFreeNodesWait: the asks of watchForNodes wait in the FreeNodes
// activity for a node to come free (AcquireRequest.Wait, freeNodesWait),
// and an ask that waited its whole time is followed by the next at once:
// a node that registers while a chunk trains is taken within seconds
// (FreeNodes looks every freeNodesPoll), where it waited for the next ask
// of a backing-off schedule — up to 16 minutes for a run growing back,
// 1 for a drained node's replacement — and the history holds one ask per
// freeNodesWait instead of one per ask. Asked before a chunk's first ask.
const versionFreeNodesWait = "free-nodes-wait"

// freeNodesWait is how long one FreeNodes ask of a run waiting for a
// free node waits for one while a chunk trains; freeNodesHold how long
// the Cluster holds the node it found for the run (spec.UpdateHoldFree),
// so that another run waiting too does not take it before the chunk,
// ended early for it, reaches its boundary.
const (
	freeNodesWait = 5 * time.Minute
	freeNodesHold = 2 * time.Minute
)

// watchForNodes starts, for the chunk in flight (ctx: its context, which
// ends with it), the asks of a run waiting for a free node: at the time
// the run would have asked at a chunk boundary, it asks the Cluster how
// many free nodes it could take (ActivityFreeNodes), waiting up to
// freeNodesWait for one (versionFreeNodesWait); one free ends the chunk
// early, and the boundary takes it; none backs the boundaries' asks off
// as a boundary's miss does, and — after a whole wait — asks again at
// once.
func (r *run) watchForNodes(ctx workflow.Context) {
	// An ask cut by the last chunk's end — still out as this chunk starts,
	// or seen cut by its coroutine — goes on in this chunk's first ask
	// only: a later need for nodes waits its time again. (seq: the last
	// chunk's coroutine, which may run after this, records nothing more.)
	r.askSeq++
	seq := r.askSeq
	cut := r.askCut || r.askOut
	r.askCut, r.askOut, r.askingSince = false, false, time.Time{}
	if _, _, ok := r.wantsNodes(); !ok || r.flight == nil ||
		workflow.GetVersion(ctx, versionNodesInFlight, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		waited := false
		for {
			why, next, ok := r.wantsNodes()
			if !ok {
				return
			}
			if d := next.Sub(workflow.Now(ctx)); d > 0 && !waited && !goOnCutAsk(ctx, cut) {
				if workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: "ask for a free node: " + why}).Get(ctx, nil) != nil {
					return // the chunk ended
				}
			}
			// (Recorded at the first ask; later calls answer the same.)
			waits := workflow.GetVersion(ctx, versionFreeNodesWait, workflow.DefaultVersion, 1) >= 1
			var free int
			req := spec.AcquireRequest{RunID: r.st.Status.RunID, DataSHA256: r.st.DataSHA256, Count: r.nodesWanted(), Shun: r.st.CutOffLeft}
			if waits {
				req.Wait, req.Hold = freeNodesWait, freeNodesHold
			}
			start := workflow.Now(ctx)
			if waits {
				r.askingSince = start
				r.askOut = true // (it may hold the node it finds)
			}
			err := workflow.ExecuteActivity(freeNodesOptions(ctx, why, req.Wait), spec.ActivityFreeNodes, r.clusterID, req).Get(ctx, &free)
			cut = false // (its first ask is out)
			latest := seq == r.askSeq
			if latest {
				r.askingSince, r.askOut = time.Time{}, false
			}
			switch {
			case ctx.Err() != nil:
				if latest { // (else the next chunk's took it as cut)
					r.askCut = waits // (it may have held a node as the chunk ended)
				}
				return
			case err == nil && free > 0:
				if waits {
					// What the run waits for may have changed while the
					// ask waited (a rescale, a drain withdrawn).
					var still bool
					if why, _, still = r.wantsNodes(); !still {
						return
					}
				}
				r.dueNow(ctx)
				r.endInFlight(ctx, fmt.Sprintf("%s: %d free node(s)", why, free))
				return
			case err != nil:
				workflow.GetLogger(ctx).Warn("could not ask the Cluster for free nodes; asking again later", "why", why, "error", err)
			}
			// None: the boundaries' next ask as after a boundary's miss.
			now := workflow.Now(ctx)
			if r.regrowWanted() && !now.Before(r.st.RegrowAt) {
				r.st.RegrowWait = nextRegrowWait(r.st.RegrowWait)
				r.st.RegrowAt = r.regrowAfter(ctx, r.st.RegrowWait)
			}
			if r.evictWanted() && !now.Before(r.st.Ctl.EvictRetry) {
				r.st.Ctl.EvictRetry = now.Add(r.evictWait(ctx))
			}
			// An ask that waited (most of) its time is followed by the
			// next at once; one answered sooner (an error, a control
			// worker of an earlier build that does not wait) by the next
			// at the boundaries' time.
			waited = err == nil && req.Wait > 0 && now.Sub(start) >= req.Wait/2
		}
	})
}

// versionFoundAsks: a node found by an ask of watchForNodes is taken at
// the boundary of the chunk it ends, even where the ask came sooner than
// the boundaries' next ask (RegrowAt, EvictRetry): an ask that follows a
// whole wait at once comes before the retry time that wait set (a minute
// on, or up to regrowMax for a run growing back). Before, that boundary
// did not ask, the next chunk was ended for the node too, and the node,
// held for the run, stood idle until then. Asked only when a found node
// comes before those times.
const versionFoundAsks = "found-asks"

// dueNow makes the boundaries' asks due now (versionFoundAsks): an ask
// while the chunk trained found a free node.
func (r *run) dueNow(ctx workflow.Context) {
	now := workflow.Now(ctx)
	regrow := r.regrowWanted() && now.Before(r.st.RegrowAt)
	evict := r.evictWanted() && now.Before(r.st.Ctl.EvictRetry)
	if !regrow && !evict || workflow.GetVersion(ctx, versionFoundAsks, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if regrow {
		r.st.RegrowAt = now
	}
	if evict {
		r.st.Ctl.EvictRetry = now
	}
}

// versionCutAsks: when a chunk ends while an ask of watchForNodes that
// holds the node it finds (versionFreeNodesWait) is out, the next chunk's
// asks start at once, not at the boundaries' next ask time. The ask,
// cancelled with its chunk, may have held a node for the run as the
// chunk ended (the control worker hears of the cancel only at its next
// heartbeat); that node stood idle, held from other runs, until then — a
// minute or more. Asked only after such a chunk.
const versionCutAsks = "cut-asks"

// goOnCutAsk reports whether the chunk starting asks at once because the
// last chunk's ask was cut by its end (cut: askCut as the chunk started;
// versionCutAsks).
func goOnCutAsk(ctx workflow.Context, cut bool) bool {
	return cut && workflow.GetVersion(ctx, versionCutAsks, workflow.DefaultVersion, 1) >= 1
}

// wantsNodes says whether the run waits for a free node, why, and when it
// asks next.
func (r *run) wantsNodes() (why string, next time.Time, ok bool) {
	var whys []string
	if r.regrowWanted() {
		whys = append(whys, fmt.Sprintf("growing back to %d nodes", r.regrowTarget()))
		next = r.st.RegrowAt
	}
	if r.evictWanted() {
		var ids []string
		for _, e := range r.heldEvicts() {
			ids = append(ids, e.NodeID)
		}
		if len(whys) == 0 || r.st.Ctl.EvictRetry.Before(next) {
			next = r.st.Ctl.EvictRetry // (the earlier of the two asks)
		}
		whys = append(whys, "replacing "+strings.Join(ids, ", "))
	}
	return strings.Join(whys, "; "), next, len(whys) > 0
}

// nodesWanted is how many free nodes a run waiting for some (wantsNodes)
// could take at its next boundary: up to its regrow target, and one for
// each node it keeps to move off. A FreeNodes ask has the Cluster hold
// up to that many for it (one found ends the chunk).
func (r *run) nodesWanted() int {
	n := 0
	if r.regrowWanted() {
		n += r.regrowTarget() - len(r.st.Membership.Nodes)
	}
	if r.evictWanted() {
		n += len(r.heldEvicts())
	}
	return max(n, 1)
}

// regrowWanted: the run is below the size it grows back to.
func (r *run) regrowWanted() bool {
	return !r.spec.IsExternal() && r.regrowTarget() > len(r.st.Membership.Nodes) && r.st.Status.Step < r.spec.Steps
}

// evictWanted: the run keeps a node to move off (drained, or slow) that
// it found no free node to replace (evict), and asks again at EvictRetry.
func (r *run) evictWanted() bool {
	return !r.spec.IsExternal() && r.st.Status.Step < r.spec.Steps && !r.st.Ctl.EvictRetry.IsZero() && len(r.heldEvicts()) > 0
}

// heldEvicts are the nodes to move off (Ctl.Evict) that the run holds.
func (r *run) heldEvicts() []spec.Evict {
	ids := r.st.Membership.NodeIDs()
	var held []spec.Evict
	for _, e := range r.st.Ctl.Evict {
		if slices.Contains(ids, e.NodeID) {
			held = append(held, e)
		}
	}
	return held
}

// evictWait is how long a run that kept a node to move off waits before
// it asks again for a free node: evictRetry, or node_wait when that is
// shorter (versionEvictNodeWait), as a regrow's asks.
func (r *run) evictWait(ctx workflow.Context) time.Duration {
	if nw := r.spec.NodeWait.D(); nw < evictRetry && workflow.GetVersion(ctx, versionEvictNodeWait, workflow.DefaultVersion, 1) >= 1 {
		return nw
	}
	return evictRetry
}

// versionEvictNodeWait: a job whose node_wait is shorter than evictRetry
// asks for a drained node's replacement that often (before: every
// evictRetry regardless). Asked only for such a job.
const versionEvictNodeWait = "evict-node-wait"

// evictRetry: how long a run that found no free node to replace a drained
// one trains on before it asks again.
const evictRetry = time.Minute

// noteEvict records that a node the run holds was drained (spec.Evict);
// the run replaces it at the next chunk boundary (evict) — an external job
// stops its world after its next checkpoint upload and relaunches from it
// without the node (or at once when no world runs).
func (r *run) noteEvict(ctx workflow.Context, ev spec.Evict) {
	log := workflow.GetLogger(ctx)
	pending := func(e spec.Evict) bool { return e.NodeID == ev.NodeID }
	if ev.Undrained {
		if i := slices.IndexFunc(r.st.Ctl.Evict, pending); i >= 0 {
			log.Info("drained node put back before the run left it: kept", "node", ev.NodeID)
			if r.st.Ctl.Evict[i].Stopping && !slices.Contains(r.st.CameBack, ev.NodeID) {
				// Its worker stopped and is back: a new process, without
				// the run's state (State only: see versionStoppedCameBack).
				r.st.CameBack = append(r.st.CameBack, ev.NodeID)
			}
			r.setEvict(slices.DeleteFunc(r.st.Ctl.Evict, pending))
		}
		return
	}
	if slices.ContainsFunc(r.st.Ctl.Evict, pending) {
		return
	}
	what := "node drained"
	if ev.Stopping {
		what = "node's worker stopping"
	}
	log.Info(what+": replaced at the next chunk boundary (an external job: after its next checkpoint upload)",
		"node", ev.NodeID, "reason", ev.Reason)
	r.setEvict(append(r.st.Ctl.Evict, ev))
	r.st.Ctl.EvictRetry = time.Time{}
	if slices.Contains(r.st.Membership.NodeIDs(), ev.NodeID) && !ev.Stopping { // (a stopping node ends it itself)
		r.endInFlight(ctx, "drain of "+ev.NodeID)
	}
}

// leaveNode has the run move off node id at its next chunk boundary, as
// off a slow node (spec.Evict.Leave: not drained, only a free node takes
// its rank), and reports whether it was not to already.
func (r *run) leaveNode(id, why string) bool {
	if slices.ContainsFunc(r.st.Ctl.Evict, func(e spec.Evict) bool { return e.NodeID == id }) {
		return false
	}
	r.setEvict(append(r.st.Ctl.Evict, spec.Evict{NodeID: id, Reason: why, Leave: true}))
	r.st.Ctl.EvictRetry = time.Time{}
	return true
}

// setEvict sets the nodes to move off, and the status's lists of them:
// drained ones and those whose workers stop (Evicting; the latter in
// Stopping too) and slow ones the run leaves (Leaving).
func (r *run) setEvict(evs []spec.Evict) {
	r.st.Ctl.Evict, r.st.Status.Evicting, r.st.Status.Stopping, r.st.Status.Leaving = evs, nil, nil, nil
	for _, e := range evs {
		switch {
		case e.Leave:
			r.st.Status.Leaving = append(r.st.Status.Leaving, e.NodeID)
		default:
			r.st.Status.Evicting = append(r.st.Status.Evicting, e.NodeID)
			if e.Stopping {
				r.st.Status.Stopping = append(r.st.Status.Stopping, e.NodeID)
			}
		}
	}
}

// evictDue: drained nodes wait to be replaced and no failed attempt asked
// to wait.
func (r *run) evictDue(ctx workflow.Context) bool {
	return len(r.st.Ctl.Evict) > 0 && !workflow.Now(ctx).Before(r.st.Ctl.EvictRetry)
}

// externalEvictDue: an external job has drained nodes to leave and has not
// tried yet. A job finding no free node keeps them (a stop costs a
// relaunch: it is not tried again until another node is drained).
func (r *run) externalEvictDue() bool {
	return len(r.st.Ctl.Evict) > 0 && r.st.Ctl.EvictRetry.IsZero()
}

// evict moves the run off the drained nodes it holds, at this boundary:
// free nodes take their ranks; without enough of them the run goes on
// without them down to min_nodes, as after a failure; short of that it
// keeps them, says so once, and asks again evictWait later. Like a
// rescale it first lets a chunk checkpoint when the last checkpoint is
// older than the current step (it then returns false).
func (r *run) evict(ctx workflow.Context) bool {
	ids := r.st.Membership.NodeIDs()
	held := r.heldEvicts()
	r.setEvict(held)
	if len(held) == 0 {
		r.st.Ctl.EvictRetry = time.Time{}
		return true
	}
	reasons := make([]string, len(held))
	var leave []string
	for i, e := range held {
		reasons[i] = e.NodeID + " drained"
		if e.Stopping {
			reasons[i] = e.NodeID + " stopping"
		}
		if e.Leave {
			reasons[i] = e.NodeID + " replaced"
			leave = append(leave, e.NodeID)
		}
		if e.Reason != "" {
			reasons[i] += ": " + e.Reason
		}
	}
	minCount := 0
	if least := r.minNodes(ctx); least < len(ids) && len(leave) == 0 {
		minCount = least // (a node left for a faster one: only for one)
	}
	r.leaving = leave // (for this acquire only: not a recovery's before it)
	rec, done := r.changeNodes(ctx, len(ids), minCount, 0, strings.Join(reasons, "; "))
	r.leaving = nil
	if !done {
		return false
	}
	for _, id := range rec.Removed {
		if slices.Contains(leave, id) && !slices.Contains(r.st.SlowLeft, id) {
			r.st.SlowLeft = append(r.st.SlowLeft, id)
		}
	}
	if rec.Error != "" {
		wait := r.evictWait(ctx)
		if r.st.Ctl.EvictRetry.IsZero() {
			again := "asking again every " + wait.String()
			if r.spec.IsExternal() {
				again = "kept until the job's nodes next change"
			}
			rec.Error = "no free node to take its place; training on with it, " + again + " (" + rec.Error + ")"
			r.st.Status.Rescalings = append(r.st.Status.Rescalings, rec)
		}
		r.st.Ctl.EvictRetry = workflow.Now(ctx).Add(wait)
		r.publish(ctx)
		return true
	}
	r.st.Status.Rescalings = append(r.st.Status.Rescalings, rec)
	r.setEvict(nil)
	r.st.Ctl.EvictRetry = time.Time{}
	if rec.ToNodes < rec.FromNodes {
		r.shrank(ctx, rec.FromNodes)
	}
	r.publish(ctx)
	return true
}

// changeNodes re-acquires count nodes at this boundary (or, when the
// Cluster has too few, at least minCount > 0 of them), waiting up to wait:
// the Cluster keeps the live nodes in ranks below count, leaves drained
// ones out and fills or frees the rest; a new generation starts from the
// checkpoint at the current step. When the last checkpoint is older than
// the current step, nothing changes: the next chunk checkpoints at its end
// (so no trained step is lost) and changeNodes returns false. Otherwise it
// returns the change (its Error set when the Cluster could not fill it:
// the run trains on with its nodes), which the caller records. why says
// what asked for it (empty: a rescale).
func (r *run) changeNodes(ctx workflow.Context, count, minCount int, wait time.Duration, why string) (spec.Rescaling, bool) {
	log := workflow.GetLogger(ctx)
	s := &r.st.Status
	cur := len(r.st.Membership.Nodes)
	if !r.atCheckpoint(ctx, count, why) {
		return spec.Rescaling{}, false
	}
	before := slices.Clone(r.st.Membership.NodeIDs())
	s.Detail = fmt.Sprintf("rescaling %d → %d nodes at step %d", cur, count, s.Step)
	if why != "" {
		s.Detail = fmt.Sprintf("changing nodes at step %d (%s)", s.Step, why)
	}
	rec := spec.Rescaling{AtStep: s.Step, FromNodes: cur, ToNodes: count, ResumeStep: s.Step, Reason: why}
	if err := r.acquireNodesWithin(ctx, spec.PhaseRescaling, count, minCount, wait); err != nil {
		log.Warn("node change failed; training on with the current nodes", "nodes", count, "why", why, "error", err)
		rec.Error = message(err)
		rec.Generation = r.st.Membership.Generation
		rec.ToNodes = cur
	} else {
		after := r.st.Membership.NodeIDs()
		for _, id := range after {
			if !slices.Contains(before, id) {
				rec.Added = append(rec.Added, id)
			}
		}
		for _, id := range before {
			if !slices.Contains(after, id) {
				rec.Removed = append(rec.Removed, id)
			}
		}
		rec.Generation = r.st.Membership.Generation
		rec.ToNodes = len(after)
		r.st.LastChunkEnd = time.Time{}
		log.Info("nodes changed", "from", cur, "to", len(after), "generation", rec.Generation, "added", rec.Added,
			"removed", rec.Removed, "why", why)
	}
	rec.At = workflow.Now(ctx)
	s.Detail = ""
	return rec, true
}

// atCheckpoint reports whether the run has a checkpoint at its step (or
// none is needed: step 0), once the one rank 0 is still uploading there
// has settled; if not, the next chunk makes one at its end, and a change
// to count nodes (why) waits for it.
func (r *run) atCheckpoint(ctx workflow.Context, count int, why string) bool {
	s := &r.st.Status
	if s.Step > 0 && (s.LastCkpt == nil || s.LastCkpt.Step != s.Step) {
		r.settleForChange(ctx, why)
	}
	if s.Step > 0 && (s.LastCkpt == nil || s.LastCkpt.Step != s.Step) {
		r.st.ForceCheckpoint = true
		workflow.GetLogger(ctx).Info("node change waits for a checkpoint at the end of the next chunk", "step", s.Step, "nodes", count, "why", why)
		return false
	}
	return true
}

// versionChangeSettles: a node change at a boundary whose checkpoint
// the last chunk is still uploading waits for that upload (a few seconds)
// and changes there; before, it trained one more chunk to checkpoint
// synchronously at its end, so that `scale` took effect a chunk late.
// Asked only when the pending checkpoint is at the current step.
const versionChangeSettles = "change-settles-upload"

// settleForChange commits the checkpoint at the current step that rank
// 0 is still uploading, once it is in the bucket (patient: a few
// seconds). The change then resumes from it; if it does not appear, the
// next chunk checkpoints first, as before.
func (r *run) settleForChange(ctx workflow.Context, why string) {
	s := &r.st.Status
	p := r.st.PendingCkpt
	if p == nil || p.Step != s.Step || workflow.GetVersion(ctx, versionChangeSettles, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	what := "rescaling"
	if why != "" {
		what = "changing nodes (" + why + ")"
	}
	s.Detail = fmt.Sprintf("%s at step %d once its checkpoint is uploaded", what, s.Step)
	r.settleCheckpoint(ctx, patient)
}

// heldBetweenChunks notes a hold (a pause, a green wait, a storage hold)
// between the last chunk and the next: the hold is no gap between chunks
// (LastChunkEnd), and the next chunk starts a segment of its own, so that
// the hold is never priced or metered as training (a chunk within
// segmentGap of the last merged with it, the wait between included).
func (r *run) heldBetweenChunks() {
	r.st.LastChunkEnd = time.Time{}
	r.st.SegmentBreak = true
}

// recordSegment adds a finished chunk to the trained segments (and to the
// chunks PlanCarbon still has to price).
func (r *run) recordSegment(start, end time.Time, from, to int64, results []spec.ChunkResult) {
	if start.IsZero() || !end.After(start) {
		return
	}
	seg := spec.Segment{Start: start, End: end, Nodes: len(results), Generation: r.st.Membership.Generation,
		FromStep: from, ToStep: to, WallSeconds: end.Sub(start).Seconds(), Chunks: 1}
	measured := true
	for _, res := range results {
		seg.Joules += res.Joules
		measured = measured && res.Joules > 0
	}
	if !measured {
		seg.Joules = 0 // all ranks or none: a partial figure would undercount
	}
	if r.spec.Green != nil {
		r.st.Unpriced = append(r.st.Unpriced, seg)
	}
	segs := r.st.Status.Segments
	held := r.st.SegmentBreak
	r.st.SegmentBreak = false
	if n := len(segs); n > 0 && !held {
		last := &segs[n-1]
		if !last.Lost && last.Generation == seg.Generation && last.Nodes == seg.Nodes && (last.Joules > 0) == measured &&
			!seg.Start.Before(last.End.Add(-segmentGap)) && seg.Start.Sub(last.End) < segmentGap {
			last.End = maxTime(last.End, seg.End)
			last.ToStep = seg.ToStep
			last.WallSeconds += seg.WallSeconds
			last.Joules += seg.Joules
			last.Chunks++
			return
		}
	}
	r.appendSegment(seg)
}

// appendSegment adds seg to the status's segments, merging the two
// oldest when there are too many (a lost one with its neighbour too: the
// list stays bounded).
func (r *run) appendSegment(seg spec.Segment) {
	segs := append(r.st.Status.Segments, seg)
	if len(segs) > maxSegments {
		a, b := segs[0], segs[1]
		a.End, a.ToStep = maxTime(a.End, b.End), b.ToStep
		a.WallSeconds += b.WallSeconds
		a.Joules += b.Joules
		if segs[0].Joules == 0 || b.Joules == 0 {
			a.Joules = 0 // one of them is modelled: model both
		}
		a.Chunks += b.Chunks
		a.Lost = a.Lost && b.Lost
		segs = append([]spec.Segment{a}, segs[2:]...)
	}
	r.st.Status.Segments = segs
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
