package workflows

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// An external job (spec.RunSpec.External) is the user's own script: the
// run launches it as one "world" — one RunExternal activity per node, each
// running that node's processes until they exit — and waits. The script
// checkpoints at its own pace; the first node uploads each checkpoint and
// signals it (SignalCheckpointSaved), so the run always knows the last
// one, whatever happens to the node afterwards. When a process exits
// non-zero or a node dies, the run stops the whole world, replaces dead
// nodes (a spare takes the rank), and launches a new world from the last
// checkpoint — bounded by max_restarts, as for built-in runs. Histories
// of built-in runs never reach this code: which path a run takes is fixed
// by its input.
//
// A pause (SignalPause) stops the world after its next checkpoint upload —
// a second pause before that stops it at once — and holds, phase paused,
// the nodes kept; a resume launches a new world from the last uploaded
// checkpoint, as a recovery does but without a failure (no restart is
// counted). Histories from before this replay through
// versionExternalPause's default: pauses ignored.
//
// A drained node (SignalEvict from the Cluster) uses the same stop too:
// after the next checkpoint upload the world stops, a free node takes the
// drained one's rank and the world relaunches from that checkpoint, no
// restart counted; with no node free it relaunches on the same nodes (and
// does not stop again for that drain). Between launches the node is left
// before the next one.
//
// A green policy (trainingrun_external_green.go) uses the same stop: the
// run plans before every launch and re-plans at every uploaded
// checkpoint; outside a planned slot it stops the world after that
// checkpoint, waits for the slot on a durable timer and relaunches from
// the checkpoint, no restart counted.
//
// A launch cannot continue-as-new while its activities run, and every
// checkpoint adds events (the signal, a workflow task, the search
// attributes, meter readings): a long launch would grow the history
// without bound, up to the server's hard limit, which terminates the run.
// So once the server suggests continue-as-new, the run stops the world
// after the next uploaded checkpoint but the job's last (a rollover,
// counted in the status), continues as new and relaunches from that
// checkpoint, no restart counted: one relaunch per few thousand events —
// and not before the launch has doubled the history it started with.
// Histories from before this replay through versionExternalRollover's
// default (asked only once the server suggests it).

// versionExternalPause: an external job acts on pause and resume. Asked
// only once a pause is pending, so that histories in which a pause was
// ignored replay.
const versionExternalPause = "external-pause"

// versionExternalRollover: an external launch is stopped after a
// checkpoint once the server suggests continue-as-new.
const versionExternalRollover = "external-rollover"

// versionExternalShortFails: an external job whose script exits 0 on
// every rank short of the job's steps (steps given) fails, typed
// spec.ErrTypeShortOfSteps — `run --wait`, `watch` and `status` exit
// non-zero, the Web UI and the dashboard say failed. Before, it completed
// and only its status's detail said where it stopped: a script that never
// ran its loop (its main() not called, a wrong --steps) passed for a run
// that trained. Asked only at such an end.
const versionExternalShortFails = "external-short-fails"

// versionStartFailRepeats: a launch that fails the same way as the
// launch before it, both before any process reported a step or the run
// gained a checkpoint (startFailure: an import error, a syntax error, a
// missing module — every rank's RankExit.NoStep), from the same step on
// the same nodes, fails the run, not retryable: relaunching only repeats
// it. Before, each such launch spent one of max_restarts until they ran
// out. Asked only at such a repeat.
const versionStartFailRepeats = "external-start-fail-repeats"

// errWorldPaused: runWorld stopped the world for a pause.
var errWorldPaused = errors.New("world stopped for a pause")

// errWorldGreen: runWorld stopped the world because a plan made at a
// checkpoint put the run outside its green slots.
var errWorldGreen = errors.New("world stopped for a green window")

// errWorldRollover: runWorld stopped the world after a checkpoint so that
// the run can continue as new.
var errWorldRollover = errors.New("world stopped to continue as new")

// errWorldEvict: runWorld stopped the world after a checkpoint to relaunch
// it without a drained node.
var errWorldEvict = errors.New("world stopped to leave a drained node")

// errWorldCancelled: runWorld stopped the world after a checkpoint
// because the run was cancelled (versionCancelAsksCheckpoint).
var errWorldCancelled = errors.New("world stopped: the run was cancelled")

// worldStop is why awaitWorld cancelled a world (worldRuns: it did not).
type worldStop int

const (
	worldRuns worldStop = iota
	stopForPause
	stopForGreen
	stopForRollover
	stopForEvict
	stopForCancel
	stopForStorage
)

// externalRun is what runExternal's coroutines share about the current
// launch (not state: a launch never spans continue-as-new).
type externalRun struct {
	// pausedCkpts counts the launch's checkpoints committed while a
	// pause was pending; rollCkpts those committed while the server
	// suggested continue-as-new (versionExternalRollover).
	pausedCkpts int
	rollCkpts   int
	// evictCkpts counts the launch's checkpoints committed while drained
	// nodes waited to be left (Controls.Evict); cancelCkpts those
	// committed since the run was cancelled (versionCancelAsksCheckpoint).
	evictCkpts  int
	cancelCkpts int
	// asked is the last step the run asked the world to checkpoint at
	// (requestCheckpoint); missed: the world went past it without taking
	// it (CheckpointSaved.Missed).
	asked  int64
	missed bool
	// unreported: asked for a checkpoint for a pause or nodes to leave,
	// the world's first node said its processes have reported no step
	// since their launch (spec.StepUnreported): the world is stopped at
	// once (versionStopUnreported). Set only while that stop is still
	// wanted, so that it is never stale: the stop follows at once.
	unreported bool
	// replans counts the asks at a green window's end that found the
	// world still starting: each has watchGreen plan now, as at a
	// checkpoint (nothing trained to lose if the plan stops it).
	replans int
	// launchEvents is the history's length when the launch began: a
	// launch rolls over only once it has at least doubled it (a launch on
	// thousands of nodes may start past the suggestion; rolling over at
	// once would only relaunch it again and again).
	launchEvents int
	// green: the run follows its green policy (versionExternalGreen).
	green bool
	// metered: the run records its trained stretches at checkpoints and
	// reads its nodes' energy meters (versionExternalEnergy).
	metered bool
	// ckpts counts the launch's new checkpoints; markAt and markStep are
	// when and at which step the launch's trained time was last recorded
	// (its start, then checkpoints): the run's segments.
	ckpts    int
	markAt   time.Time
	markStep int64
	// meters are each node's share of its host meter's energy at markAt
	// (nil: the launch's energy is modelled); reading: a reading is in
	// flight. While metered, checkpoints are recorded only every
	// meterEvery (a reading costs history events): pendAt and pendStep
	// are the last checkpoint not recorded yet (pendAt zero: none).
	meters   []float64
	reading  bool
	pendAt   time.Time
	pendStep int64
	// keep: the launch's first node keeps the uploads the bucket refuses
	// (versionExternalStoreKept); keptAt is the step of one it kept after
	// another refusal in a row (0: none): the world stops at once and the
	// run holds for its storage.
	keep   bool
	keptAt int64
	// lastKept is the step of the last refused upload of the launch its
	// first node kept (0: none): a world that fails with it newer than
	// the last stored checkpoint has the node store it first
	// (storeKeptAfterLoss); lastKeptAt is when the run heard of it.
	lastKept   int64
	lastKeptAt time.Time
	// keptTried: storeKeptAfterLoss asked the first node (once a launch).
	keptTried bool
	// first is the launch's first node, which keeps the refused uploads
	// (the run's membership may have moved on since).
	first spec.Node
	// cancelKept: a checkpoint the first node kept was refused after the
	// run was cancelled (versionKeptOnCancel): the world stops at once,
	// and the node stores it before the run ends (storeKeptOnCancel).
	cancelKept bool
	// startFail is the last launch's failure when it failed while
	// starting (startFailure; "" otherwise): the next launch failing the
	// same way fails the run (versionStartFailRepeats). Not state: after
	// continue-as-new a repeat costs one more launch.
	startFail string
}

// runExternal is TrainingRun's main loop for an external job.
func (r *run) runExternal(ctx workflow.Context) (spec.RunStatus, error) {
	ext := &externalRun{green: r.externalGreen(ctx), metered: r.externalEnergy(ctx)}
	r.ext = ext
	r.listenCheckpoints(ctx, ext)
	if len(r.st.Membership.Nodes) == 0 {
		if err := r.acquire(ctx); err != nil {
			return r.fail(ctx, err)
		}
	}
	for {
		if r.shouldContinueAsNew(ctx) {
			r.settle(ctx)
			return spec.RunStatus{}, workflow.NewContinueAsNewError(ctx, TrainingRun,
				RunInput{Spec: r.spec, ClusterID: r.clusterID, State: &r.st})
		}
		if r.st.StorageHeld {
			done, err := r.storeKeptTry(ctx)
			if err != nil {
				if err := r.recover(ctx, err); err != nil {
					return r.fail(ctx, err)
				}
				continue
			}
			if done {
				break // the job's final checkpoint is stored
			}
			continue
		}
		if ext.green {
			if err := r.beforeLaunch(ctx); errors.Is(err, errWaitRollover) {
				continue // (continues as new above)
			} else if err != nil {
				return r.fail(ctx, err)
			}
		} else if r.st.Ctl.Paused && r.externalPause(ctx) {
			if err := r.holdWorld(ctx); err != nil {
				return r.fail(ctx, err)
			}
		}
		if r.externalEvictDue() && r.st.Status.Step == r.ckptStep() {
			r.evict(ctx) // between launches: nothing to stop
		}
		before := r.ckptStep()
		err := r.runWorld(ctx, ext)
		var failed *chunkFailure
		if !errors.As(err, &failed) || r.ckptStep() > before {
			r.st.Ctl.ResumeUnspent = false // spent: the world trained on, or was stopped on purpose
		}
		if err == nil {
			break
		}
		if errors.Is(err, errWorldRollover) {
			r.settle(ctx)
			return spec.RunStatus{}, workflow.NewContinueAsNewError(ctx, TrainingRun,
				RunInput{Spec: r.spec, ClusterID: r.clusterID, State: &r.st})
		}
		if errors.Is(err, errWorldCancelled) {
			return r.st.Status, ctx.Err() // stopped at its checkpoint: the run ends cancelled there
		}
		if errors.Is(err, errWorldPaused) || errors.Is(err, errWorldGreen) || errors.Is(err, errWorldEvict) ||
			errors.Is(err, errWorldStorage) {
			continue
		}
		if err := r.recover(ctx, err); err != nil {
			return r.fail(ctx, err)
		}
	}
	if ext.green {
		r.priceChunks(ctx)
	}
	if short := r.shortOfSteps(); short != "" &&
		workflow.GetVersion(ctx, versionExternalShortFails, workflow.DefaultVersion, 1) >= 1 {
		return r.fail(ctx, temporal.NewNonRetryableApplicationError(short, spec.ErrTypeShortOfSteps, nil))
	}
	r.releaseNodes(ctx)
	r.setPhase(ctx, spec.PhaseCompleted)
	if s := &r.st.Status; s.TotalSteps > 0 && s.Step < s.TotalSteps {
		// Its script's own word that it is done, short of the job's steps
		// (a shorter loop, another --steps): said, not failed.
		s.Detail = fmt.Sprintf("the script ended (exit status 0) at step %d, short of the job's %d steps", s.Step, s.TotalSteps)
		if s.Step == 0 {
			s.Detail = fmt.Sprintf("the script ended (exit status 0) without reporting a step (cann_train.report), short of the job's %d steps", s.TotalSteps)
		}
	}
	return r.st.Status, nil
}

// shortOfSteps says how a script that ended cleanly fell short of the
// job's steps ("" when it did not, or when the job gave none: then the
// script decides its length).
func (r *run) shortOfSteps() string {
	s := r.st.Status
	if s.TotalSteps <= 0 || s.Step >= s.TotalSteps {
		return ""
	}
	why := fmt.Sprintf("the script ended (exit status 0) at step %d, short of the job's %d steps", s.Step, s.TotalSteps)
	switch {
	case s.Step == 0 && s.LastCkpt != nil:
		// (It trained — rank 0 committed checkpoints — but never said its
		// steps: the run's step is rank 0's report.)
		why = fmt.Sprintf("the script ended (exit status 0) without reporting a step (cann_train.report), short of the job's %d steps, "+
			"though rank 0 committed checkpoints up to step %d: call cann_train.report(step) every step or every few on rank 0",
			s.TotalSteps, s.LastCkpt.Step)
	case s.Step == 0:
		why = fmt.Sprintf("the script ended (exit status 0) without reporting a step (cann_train.report), short of the job's %d steps "+
			"(did it run its training loop?)", s.TotalSteps)
	}
	return why + "; a job that gives steps completes only there: fix the script's length (report(step) takes the step just " +
		"completed, counting from 1), or leave steps out for a script that decides its own"
}

// startFailure is the signature of a world's failure when it failed
// while starting, "" otherwise: every node that failed says a process
// exited before any process of its node reported a step
// (RankExit.NoStep), the others were stopped after it, and the launch
// uploaded no checkpoint. It holds the step the launch started from, the
// nodes, and the first exit's status and log tail (not its rank's name):
// two launches with the same signature failed the same way.
func (r *run) startFailure(f *chunkFailure, errs []error, from, ckptBefore int64) string {
	if !f.retryable || len(f.failed) > 0 || f.corrupt || r.ckptStep() != ckptBefore {
		return ""
	}
	var first *spec.RankExit
	for _, err := range errs {
		var ae *temporal.ApplicationError
		var ce *temporal.CanceledError
		switch {
		case err == nil || errors.As(err, &ce):
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeRankExited:
			var d spec.RankExit
			if !ae.HasDetails() || ae.Details(&d) != nil || !d.NoStep {
				return ""
			}
			if first == nil {
				first = &d
			}
		default:
			return ""
		}
	}
	if first == nil {
		return ""
	}
	tail := strings.Split(strings.TrimRight(first.LogTail, "\n"), "\n")
	tail = tail[max(0, len(tail)-5):]
	return fmt.Sprintf("from %d on %s: status %d %s, program %s, log %q", from, strings.Join(r.st.Membership.NodeIDs(), " "),
		first.ExitCode, first.Signal, first.Program, strings.Join(tail, "\n"))
}

// listenCheckpoints records the checkpoints the first node uploads while
// a world runs.
func (r *run) listenCheckpoints(ctx workflow.Context, ext *externalRun) {
	ch := workflow.GetSignalChannel(ctx, spec.SignalCheckpointSaved)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var c spec.CheckpointSaved
			ch.Receive(ctx, &c)
			if c.Missed {
				if c.Session == r.st.Session && c.Ref.Step >= ext.asked {
					ext.missed = true
					workflow.GetLogger(ctx).Info("the world went past the requested checkpoint without taking it", "step", c.Ref.Step)
				}
				continue
			}
			if !r.onCheckpoint(ctx, c) {
				continue
			}
			if r.cancelSeen {
				ext.cancelCkpts++
			}
			if ext.green || ext.metered {
				r.markTrained(ctx, ext, c.Ref.Step)
			}
			ext.ckpts++
			if r.st.Ctl.Paused {
				ext.pausedCkpts++
			}
			// Not at the job's last step: that world is about to finish.
			last := r.spec.Steps > 0 && c.Ref.Step >= r.spec.Steps
			if !last && r.externalEvictDue() {
				ext.evictCkpts++
			}
			info := workflow.GetInfo(ctx)
			grown := info.GetCurrentHistoryLength() >= 2*ext.launchEvents
			if !last && info.GetContinueAsNewSuggested() && grown && r.externalRollover(ctx) {
				ext.rollCkpts++
			}
		}
	})
}

// onCheckpoint records a checkpoint of the current launch; it reports
// whether it was new.
func (r *run) onCheckpoint(ctx workflow.Context, c spec.CheckpointSaved) bool {
	log := workflow.GetLogger(ctx)
	if c.Session != r.st.Session {
		// A world that was stopped may still finish an upload; the run
		// has moved on from it.
		log.Warn("checkpoint from an earlier launch ignored", "session", c.Session, "step", c.Ref.Step)
		return false
	}
	s := &r.st.Status
	if c.Failed != "" {
		// Shown by the status query until a later checkpoint is stored.
		again := s.CheckpointFailed != nil
		r.refused(ctx, &spec.CheckpointFailure{Step: c.Ref.Step, Error: c.Failed})
		if ext := r.ext; ext != nil && ext.keep && c.Kept {
			if c.Ref.Step > ext.lastKept {
				ext.lastKept, ext.lastKeptAt = c.Ref.Step, workflow.Now(ctx)
			}
			// Kept, it stops the world (the run holds with it) when it is
			// the second refusal in a row, or when the run waits for a
			// checkpoint to stop the world at (a pause, nodes to leave,
			// the end of its green window): it loses nothing.
			why := ""
			switch {
			case ext.keptAt > 0 || ext.cancelKept:
			case r.cancelSeen && workflow.GetVersion(ctx, versionKeptOnCancel, workflow.DefaultVersion, 1) >= 1:
				// The checkpoint a cancellation waits for: the world stops
				// now, the node stores it as the run ends.
				ext.cancelKept = true
				log.Warn("the checkpoint upload the cancellation waits for failed; its directory is kept: the world stops",
					"step", c.Ref.Step, "error", c.Failed)
				return false
			case again:
				why = "a second checkpoint upload in a row failed"
			case (r.checkpointWanted() || r.greenWindowOver(ctx, ext)) &&
				workflow.GetVersion(ctx, versionKeptForStop, workflow.DefaultVersion, 1) >= 1:
				why = "a checkpoint upload failed while the run waits to stop the world"
			}
			if why != "" {
				ext.keptAt = c.Ref.Step
				log.Warn(why+"; its directory is kept: the world stops", "step", c.Ref.Step, "error", c.Failed)
				return false
			}
		}
		log.Warn("a checkpoint's upload failed; the world goes on", "step", c.Ref.Step, "error", c.Failed, "kept", c.Kept)
		return false
	}
	if last := s.LastCkpt; last != nil && c.Ref.Step <= last.Step {
		return false
	}
	ref := c.Ref
	r.commitCheckpoint(ctx, ref)
	if c.Loss != 0 {
		s.Loss = c.Loss
	}
	if c.From == 0 && s.InitialLoss == 0 {
		s.InitialLoss = c.FirstLoss // the first launch may not be the one that finishes
	}
	r.resumedAt(c.FirstStepAt, c.FirstLoss)
	s.UpdatedAt = workflow.Now(ctx)
	log.Info("checkpoint uploaded", "step", ref.Step, "key", ref.Key)
	r.publish(ctx)
	return true
}

// resumedAt completes the last recovery with the first step after it
// (when the launch after it first stepped, and that step's loss) as soon
// as the launch says so — at a checkpoint, or as it fails — rather than
// only when it ends cleanly (noteResumed): a launch that later fails or
// is cancelled keeps it. Not for a recovery an earlier run of this name
// carried over, nor from a step before the recovery was acted on.
// (Status only: no command.)
func (r *run) resumedAt(first time.Time, loss float32) {
	s := &r.st.Status
	n := len(s.Recoveries)
	if n == 0 || first.IsZero() || !s.Recoveries[n-1].ResumedAt.IsZero() {
		return
	}
	if k := len(s.Resumed); k > 0 && n <= s.Resumed[k-1].Recoveries {
		return
	}
	if rec := &s.Recoveries[n-1]; first.After(rec.SeenAt) {
		rec.ResumedAt, rec.ResumeLoss = first, loss
	}
}

// firstStepOf is the latest first step any node of a failed world
// reported (its RankExited detail, a timed-out node's last heartbeat):
// when every node that said had stepped; zero when none said.
func firstStepOf(errs []error) time.Time {
	var first time.Time
	for _, err := range errs {
		var ae *temporal.ApplicationError
		var te *temporal.TimeoutError
		switch {
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeRankExited:
			var d spec.RankExit
			if ae.HasDetails() && ae.Details(&d) == nil && d.FirstStepAt.After(first) {
				first = d.FirstStepAt
			}
		case errors.As(err, &te) && te.HasLastHeartbeatDetails():
			var p spec.ChunkProgress
			if te.LastHeartbeatDetails(&p) == nil && p.FirstStepAt.After(first) {
				first = p.FirstStepAt
			}
		}
	}
	return first
}

// externalPause: this run acts on a pending pause (false when replaying a
// history from before external jobs could pause).
func (r *run) externalPause(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionExternalPause, workflow.DefaultVersion, 1) >= 1
}

// externalRollover: this run stops a launch to continue as new (false
// when replaying a history from before rollovers).
func (r *run) externalRollover(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionExternalRollover, workflow.DefaultVersion, 1) >= 1
}

// holdWorld holds a paused external job between launches until a resume;
// the next launch starts from the last uploaded checkpoint.
func (r *run) holdWorld(ctx workflow.Context) error {
	r.st.Status.Step = 0
	if c := r.st.Status.LastCkpt; c != nil {
		r.st.Status.Step = c.Step
	}
	if err := r.hold(ctx); err != nil {
		return err
	}
	r.setPhase(ctx, spec.PhaseTraining)
	return nil
}

// runWorld launches the job on the current membership from the last
// checkpoint and waits for every node; it returns a *chunkFailure when
// the world did not finish cleanly, errWorldPaused or errWorldGreen when
// it was stopped for a pause or for a green window.
func (r *run) runWorld(ctx workflow.Context, ext *externalRun) error {
	r.st.Epoch++
	m := r.st.Membership
	r.st.Session = fmt.Sprintf("%s/g%d/e%d", r.st.Status.RunID, m.Generation, r.st.Epoch)
	from := r.st.Status.Step
	ckptBefore, startFailedBefore := r.ckptStep(), ext.startFail
	ext.startFail = ""
	started := workflow.Now(ctx)
	port := r.spec.External.MasterPort
	if port == 0 {
		err := workflow.ExecuteActivity(portOptions(ctx, r.spec, m.Nodes[0]), spec.ActivityReservePort).Get(ctx, &port)
		if err != nil {
			errs := make([]error, len(m.Nodes))
			errs[0] = err
			return r.blameWorld(ctx, from, started, workflow.Now(ctx), errs, nil)
		}
	}
	ext.meters, ext.pendAt = nil, time.Time{}
	if ext.metered {
		ext.meters = r.readMeters(ctx, "this launch")
	}
	// A world that takes checkpoint requests is not cancelled with the
	// run: a cancellation asks it for a checkpoint first (awaitWorld).
	runCtx := ctx
	if m.TakesCheckpointRequests() && ctx.Err() == nil &&
		workflow.GetVersion(ctx, versionCancelAsksCheckpoint, workflow.DefaultVersion, 1) >= 1 {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	cctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	futures := make([]workflow.Future, len(m.Nodes))
	procs := r.spec.External.ProcsPerNode
	ext.keep, ext.keptAt, ext.lastKept, ext.cancelKept, ext.keptTried = r.keepsRefused(ctx, m.Nodes[0]), 0, 0, false, false
	ext.first = m.Nodes[0]
	ns := r.nodeSpec()
	// spec.NoRestarts as the node sees it: none left (TORCHELASTIC_MAX_RESTARTS
	// 0), and a value node workers from before it validate.
	ns.MaxRestarts = ns.RestartBudget()
	for rank, node := range m.Nodes {
		fault := r.faultFor(node.ID, from, math.MaxInt64)
		in := spec.ExternalInput{
			RunID: r.st.Status.RunID, Spec: ns, Membership: m, Rank: rank, Session: r.st.Session,
			Restarts: r.st.Restarts, MasterPort: port, Restore: r.st.Status.LastCkpt,
			KillAtStep: fault.AtStep, Freeze: fault.Freeze(), KeepRefused: ext.keep && rank == 0,
		}
		summary := fmt.Sprintf("%s · ranks %d–%d of %d on %s · from step %d · gen %d",
			r.spec.External.Launcher, rank*procs, rank*procs+procs-1, len(m.Nodes)*procs, node.ID, from, m.Generation)
		futures[rank] = workflow.ExecuteActivity(externalOptions(cctx, r.spec, node, summary), spec.ActivityRunExternal, in)
	}
	ext.pausedCkpts, ext.rollCkpts, ext.evictCkpts, ext.cancelCkpts, ext.ckpts = 0, 0, 0, 0, 0
	ext.asked, ext.missed, ext.unreported, ext.replans = 0, false, false, 0
	ext.launchEvents = workflow.GetInfo(ctx).GetCurrentHistoryLength()
	ext.markAt, ext.markStep = started, from
	results, errs, gone, stop := r.awaitWorld(ctx, runCtx, futures, cancel, ext)
	r.settle(ctx) // checkpoint signals delivered with the results
	// and recorded: the last one may still be reading the meters
	_ = workflow.Await(ctx, func() bool { return !ext.reading })
	if stop != worldRuns && stoppedByRun(errs) {
		// Its processes run on until their nodes see the cancellation (at
		// the next heartbeat); checkpoints they upload meanwhile are
		// ignored, so the run holds at — and resumes from — the one the
		// stop waited for.
		r.closeLaunch(ctx, ext, true)
		log := workflow.GetLogger(ctx)
		if stop == stopForRollover {
			log.Info("world stopped to continue as new", "session", r.st.Session, "step", r.ckptStep(),
				"history_events", workflow.GetInfo(ctx).GetCurrentHistoryLength())
			r.st.Session = ""
			r.st.Status.Step = r.ckptStep() // where the next launch starts
			r.st.Status.Rollovers++
			return errWorldRollover
		}
		if stop == stopForEvict {
			log.Info("world stopped to leave drained node(s)", "session", r.st.Session, "step", r.ckptStep(),
				"nodes", r.st.Status.Evicting)
			r.st.Session = ""
			r.st.Status.Step = r.ckptStep() // where the next launch starts
			return errWorldEvict
		}
		if stop == stopForCancel {
			log.Info("world stopped: the run was cancelled", "session", r.st.Session, "step", r.ckptStep())
			r.st.Session = ""
			r.st.Status.Step = r.ckptStep()
			return errWorldCancelled
		}
		if stop == stopForStorage {
			r.st.Session = ""
			if r.ckptStep() >= ext.keptAt {
				// A later checkpoint was stored before the world stopped.
				log.Info("world stopped for a refused checkpoint; a later one was stored meanwhile", "kept", ext.keptAt, "step", r.ckptStep())
				r.st.Status.Step = r.ckptStep()
				return errWorldStorage
			}
			log.Warn("world stopped: the bucket refused its checkpoint", "kept", ext.keptAt)
			if (ext.green || ext.metered) && ext.keptAt > ext.markStep &&
				workflow.GetVersion(ctx, versionKeptTrained, workflow.DefaultVersion, 1) >= 1 {
				// Trained up to the kept checkpoint, which the hold stores.
				r.recordTrained(ctx, ext, workflow.Now(ctx), ext.keptAt)
			}
			r.holdKept(ctx, ext.keptAt, false)
			return errWorldStorage
		}
		if stop == stopForGreen {
			log.Info("world stopped for a green window", "session", r.st.Session, "step", r.ckptStep())
			r.st.Session = ""
			r.chunksNow++ // a launch is a unit of history, as a chunk is
			return errWorldGreen
		}
		log.Info("world stopped for a pause", "session", r.st.Session)
		r.st.Session = ""
		return errWorldPaused
	}
	if f := r.blameWorld(ctx, from, started, workflow.Now(ctx), errs, gone); f != nil {
		r.resumedAt(firstStepOf(errs), 0) // (before recover adds this failure's recovery)
		r.closeLaunch(ctx, ext, false)
		if slices.Contains(f.failed, ext.first.ID) {
			ext.lastKept = 0 // lost with its node
		}
		if (ext.green || ext.metered) && keptToStore(ctx, ext, r.ckptStep()) &&
			workflow.GetVersion(ctx, versionKeptLossTrained, workflow.DefaultVersion, 1) >= 1 && r.storeKeptAfterLoss(ctx, ext) {
			// Stored: the world trained up to it for the run.
			r.recordTrained(ctx, ext, ext.lastKeptAt, ext.lastKept)
		}
		if ext.green || ext.metered {
			r.recordLostLaunch(ctx, ext, f)
		}
		r.preferCause(ctx, f)
		r.storageTrouble(ctx, f, errs, r.st.Status.Step)
		r.probeReads(ctx, f, errs)
		r.storeKeptAfterLoss(ctx, ext)
		if sig := r.startFailure(f, errs, from, ckptBefore); sig != "" {
			if sig == startFailedBefore && workflow.GetVersion(ctx, versionStartFailRepeats, workflow.DefaultVersion, 1) >= 1 {
				f.retryable = false
				check := "check the program it runs and its imports"
				if from > 0 { // (a message: no command depends on it)
					check = fmt.Sprintf("the launches restored the checkpoint of step %d, so the program ran before: look at "+
						"loading that checkpoint, or at what changed on these nodes — the program, its environment", from)
				}
				f.reason = "the job failed the same way on two launches in a row, before any rank reported a step — relaunching " +
					"would only fail again (" + check + ": the job's entrypoint is looked up in the node worker's PATH): " + f.reason
			}
			ext.startFail = sig
		}
		return f
	}
	if c := results[0].Checkpoint; c != nil && r.st.Status.LastCkpt != nil && c.Step <= r.st.Status.LastCkpt.Step {
		results[0].Checkpoint = nil // already recorded from its signal
	}
	if ext.green || ext.metered {
		// Recorded in workflow time from the last checkpoint on (the
		// stretches before it were recorded at each checkpoint), not
		// again over the nodes' whole launch.
		r.recordTrained(ctx, ext, workflow.Now(ctx), max(ext.markStep, results[0].To))
		for i := range results {
			results[i].StartedAt = time.Time{}
		}
	}
	r.absorb(ctx, results, results[0].To) // (an external job's launches are not judged for slowness)
	if f := results[0].CheckpointFailed; f != nil && ext.keep {
		// Its final upload refused, kept by the first node.
		r.refused(ctx, f)
		r.holdKept(ctx, f.Step, true)
		return errWorldStorage
	}
	return nil
}

// awaitWorld waits for every node's activity. After the first failure it
// gives the others a grace period — a heartbeat timeout and a half, at
// least 2 s more — to
// end on their own (a dead node's activity times out; its peers' processes
// usually exit when they lose it), then cancels the rest, so that a dead
// node is named as such and a hung collective does not hold the run. A
// node that names a pending one as gone (PeerFailed: the node workers
// watch each other) stops the world at once; so does a pending node that
// a finished one, asked while every node that ended ended cleanly, finds
// gone (checkStragglers: nobody watches a node whose neighbours are done).
// A pending pause cancels the world once a checkpoint was uploaded since
// it was asked for (at once after a second pause); a green run's plan at a
// checkpoint that puts it outside its slots cancels it too; stop reports
// which did (the first).
func (r *run) awaitWorld(ctx, runCtx workflow.Context, futures []workflow.Future, cancel workflow.CancelFunc,
	ext *externalRun) (results []spec.ChunkResult, errs []error, gone []spec.PeerFailure, stop worldStop) {
	n := len(futures)
	results = make([]spec.ChunkResult, n)
	errs = make([]error, n)
	done := make([]bool, n)
	left := n
	sel := workflow.NewSelector(ctx)
	for i, f := range futures {
		sel.AddFuture(f, func(f workflow.Future) {
			errs[i] = f.Get(ctx, &results[i])
			done[i] = true
			left--
		})
	}
	tctx, stopTimer := workflow.WithCancel(ctx)
	defer stopTimer()
	pause, stopWorld := workflow.NewFuture(ctx)
	workflow.Go(tctx, func(ctx workflow.Context) {
		err := workflow.Await(ctx, func() bool {
			return r.st.Ctl.Paused && (ext.pausedCkpts > 0 || r.st.Ctl.PauseNow || ext.unreported)
		})
		if err == nil && r.externalPause(ctx) {
			stopWorld.Set(nil, nil)
		}
	})
	sel.AddFuture(pause, func(workflow.Future) {
		if stop != worldRuns {
			return // already stopping for a green window or a rollover
		}
		stop = stopForPause
		why := "a checkpoint was uploaded"
		switch {
		case ext.pausedCkpts > 0:
		case ext.unreported:
			why = "no step reported since its launch: nothing to lose"
		default:
			why = "asked to stop at once"
		}
		workflow.GetLogger(ctx).Info("pause: stopping the world", "why", why, "session", r.st.Session)
		cancel()
	})
	if r.st.Membership.TakesCheckpointRequests() {
		workflow.Go(tctx, func(ctx workflow.Context) {
			for asks := 0; ; asks++ {
				if workflow.Await(ctx, r.checkpointWanted) != nil {
					return
				}
				if asks > 0 && workflow.GetVersion(ctx, versionAskAgain, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
					return
				}
				why := "a pause"
				if !r.st.Ctl.Paused {
					why = "nodes to leave: " + strings.Join(r.st.Status.Evicting, ", ")
				}
				if _, unreported := r.requestCheckpoint(ctx, why, true); unreported && r.checkpointWanted() {
					ext.unreported = true
				}
				// Still wanted: the world stops at that checkpoint (or
				// the next). Withdrawn (a resume): asked again when next
				// wanted.
				if workflow.Await(ctx, func() bool { return !r.checkpointWanted() }) != nil {
					return
				}
			}
		})
	}
	if runCtx != ctx {
		// The world's activities are on a disconnected context: the run's
		// cancellation reaches them through here.
		sel.AddFuture(r.checkpointOnCancel(tctx, runCtx, ext), func(workflow.Future) {
			if stop == worldRuns {
				stop = stopForCancel
				workflow.GetLogger(ctx).Info("run cancelled: stopping the world", "session", r.st.Session, "step", r.ckptStep())
				cancel()
			}
		})
	}
	roll, rollWorld := workflow.NewFuture(ctx)
	workflow.Go(tctx, func(ctx workflow.Context) {
		if workflow.Await(ctx, func() bool { return ext.rollCkpts > 0 }) == nil {
			rollWorld.Set(nil, nil)
		}
	})
	sel.AddFuture(roll, func(workflow.Future) {
		if stop == worldRuns {
			stop = stopForRollover
			workflow.GetLogger(ctx).Info("history long: stopping the world after its checkpoint to continue as new",
				"session", r.st.Session, "step", r.ckptStep())
			cancel()
		}
	})
	if ext.keep {
		kept, keptWorld := workflow.NewFuture(ctx)
		workflow.Go(tctx, func(ctx workflow.Context) {
			if workflow.Await(ctx, func() bool { return ext.keptAt > 0 }) == nil {
				keptWorld.Set(nil, nil)
			}
		})
		sel.AddFuture(kept, func(workflow.Future) {
			if stop == worldRuns {
				stop = stopForStorage
				workflow.GetLogger(ctx).Info("the bucket refuses the job's checkpoints: stopping the world to store the kept one",
					"session", r.st.Session, "step", ext.keptAt)
				cancel()
			}
		})
	}
	leave, leaveWorld := workflow.NewFuture(ctx)
	workflow.Go(tctx, func(ctx workflow.Context) {
		if workflow.Await(ctx, func() bool { return ext.evictCkpts > 0 || ext.unreported && r.externalEvictDue() }) == nil {
			leaveWorld.Set(nil, nil)
		}
	})
	sel.AddFuture(leave, func(workflow.Future) {
		if stop == worldRuns {
			stop = stopForEvict
			workflow.GetLogger(ctx).Info("drained node(s): stopping the world after its checkpoint",
				"session", r.st.Session, "step", r.ckptStep(), "nodes", r.st.Status.Evicting)
			cancel()
		}
	})
	var gw *greenWatch
	if ext.green {
		gw = r.watchGreen(ctx, ext)
		if r.st.Membership.TakesCheckpointRequests() {
			r.askAtSlotEnd(tctx, gw)
		}
		sel.AddFuture(gw.outside, func(workflow.Future) {
			if stop == worldRuns {
				stop = stopForGreen
				r.stopForGreen(ctx, gw.slot)
				cancel()
			}
		})
	}
	graceSet, expired, blamedStop, checking, unformedStop := false, false, false, false, false
	for left > 0 {
		sel.Select(ctx)
		if expired {
			expired = false
			cancel()
			continue
		}
		if stop == worldRuns && !unformedStop && left > 0 && unformed(errs) &&
			workflow.GetVersion(ctx, versionStopUnformed, workflow.DefaultVersion, 1) >= 1 {
			// A node could not set up its part (its checkpoint, its host,
			// the job): the world never forms, and the other nodes'
			// processes would wait for its ranks until the grace below.
			unformedStop = true
			workflow.GetLogger(ctx).Info("a node could not set up its part of the world: stopping the world", "session", r.st.Session)
			cancel()
			continue
		}
		if stop == worldRuns && !blamedStop && left > 0 && blamesPending(done, errs) && r.worldBlameOn(ctx) {
			// A node found a pending one's worker gone: that node's
			// activity would only end at its heartbeat timeout, and the
			// world cannot go on without it.
			blamedStop = true
			workflow.GetLogger(ctx).Info("a node's worker is gone: stopping the world", "session", r.st.Session)
			cancel()
			continue
		}
		if stop == worldRuns && !checking && left > 0 && straggling(done, errs) && r.stragglerCheckOn(ctx) {
			checking = true
			live := func() bool { return stop == worldRuns && gone == nil && straggling(done, errs) }
			r.checkStragglers(ctx, tctx, sel, done, results, live, func(pfs []spec.PeerFailure) {
				gone = pfs
				workflow.GetLogger(ctx).Info("a pending node's worker is gone: stopping the world", "session", r.st.Session)
				cancel()
			})
			continue
		}
		if stop == worldRuns && !graceSet && left > 0 && anyErr(errs) {
			// The other nodes' processes get a heartbeat timeout and a
			// margin to see the loss and end by themselves (with their
			// own diagnostics) — less the heartbeat timeout when every
			// error is one: the silent nodes have been silent that long.
			graceSet = true
			hb := r.spec.HeartbeatTimeout.D()
			grace := hb + max(2*time.Second, hb/2)
			if onlyHeartbeatTimeouts(errs) {
				grace -= hb
			} else if onlyRankExits(errs) && workflow.GetVersion(ctx, versionRankExitGrace, workflow.DefaultVersion, 1) >= 1 {
				grace = rankExitGrace
			}
			sel.AddFuture(workflow.NewTimerWithOptions(tctx, grace, workflow.TimerOptions{
				Summary: "a rank failed: the other nodes' words until then, then stop the world"}), func(workflow.Future) { expired = true })
		}
	}
	if gw != nil {
		gw.finish(ctx)
	}
	return results, errs, gone, stop
}

// versionRankExitGrace: when every node that ended did so because one of
// its processes exited (RankExited: the script failed, its worker is
// alive and said so), the other nodes' processes get rankExitGrace to end
// by themselves, not a heartbeat timeout and half as much again (15 s by
// default): nothing is left for them to report that the exit has not,
// and each script failure cost that wait. Asked only then.
const versionRankExitGrace = "rank-exit-grace"

// rankExitGrace is long enough for the other ranks to see a failed rank's
// connections reset (gloo and HCCL abort within a second or two) and end
// with their own diagnostics.
const rankExitGrace = 2 * time.Second

// onlyRankExits reports whether every error of errs is RankExited (and
// there is one).
func onlyRankExits(errs []error) bool {
	return onlyErrors(errs, func(err error) bool {
		var ae *temporal.ApplicationError
		return errors.As(err, &ae) && ae.Type() == spec.ErrTypeRankExited
	})
}

// versionStopUnformed: a world in which a node failed before its
// processes started (unformed) is stopped at once; before, the other
// nodes' processes, waiting for that node's ranks to join, were given
// the grace for a loss — a heartbeat timeout and half as much again (15 s by default) —
// at every try of a hold for the job's checkpoint. Asked only then.
const versionStopUnformed = "stop-unformed"

// unformed reports whether a node of a world failed before its processes
// started, in a way the other nodes' answers would not change the run's
// verdict on: it could not read the checkpoint (the run asks the others
// to read it: probeReads), found it corrupt or deleted, found the bucket
// not shared, or could not set up its own host. (Not BadJob, nor
// CheckpointNotHere: whether every node fails so, or some, decides
// between the job or bucket and those hosts.)
func unformed(errs []error) bool {
	for _, err := range errs {
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) {
			continue
		}
		switch ae.Type() {
		case spec.ErrTypeCheckpointUnreachable, spec.ErrTypeCheckpointGone, spec.ErrTypeCorruptCheckpoint,
			spec.ErrTypeBucketNotShared, spec.ErrTypeNodeUnfit:
			return true
		}
	}
	return false
}

// versionCheckpointRequest: an external job's world on nodes that take
// checkpoint requests (spec.ChunkProtocolCheckpointRequest) is asked for
// a checkpoint as soon as the run wants to stop it after one — a pause,
// a drained or stopping node — instead of waiting for the job's next
// periodic checkpoint (a real job's may be half an hour off; a stopping
// worker's grace is shorter). Asked when the run first wants one during
// a launch.
const versionCheckpointRequest = "checkpoint-request"

// versionAskAgain: a world asked for a checkpoint for a pause that was
// withdrawn (a resume) before it stopped is asked again when the run next
// wants one in the same launch (another pause, nodes to leave). Before,
// only the first want of a launch asked; a later one waited for the
// job's next periodic checkpoint. Asked at the second want.
const versionAskAgain = "ask-again"

// versionStopUnreported: a pause or nodes to leave stop at once a world
// whose processes have reported no step since their launch (the first
// node answers the request spec.StepUnreported): a job still importing
// its framework, loading data or restoring has nothing to lose; at a
// green window's end such an answer has the run plan at once, as at a
// checkpoint. Before, such a world was not asked, and trained on to its
// next periodic checkpoint — half an hour for a real job — while the run
// waited to pause or to leave a node. Asked with the request.
const versionStopUnreported = "stop-unreported"

// checkpointWanted: the run stops the world after its next checkpoint —
// a pause (not a second one: that stops it at once) or nodes to leave.
func (r *run) checkpointWanted() bool {
	return r.st.Ctl.Paused && !r.st.Ctl.PauseNow || r.externalEvictDue()
}

// requestCheckpoint asks the world running now for a checkpoint soon: the
// first node picks a step ahead of its rank 0 (ActivityRequestCheckpoint),
// then every other node is given it, so that every rank's
// should_checkpoint() says yes at that step. A node that does not answer,
// or a world that cannot take the request (a script without the helper),
// changes nothing: the world stops after its next periodic checkpoint.
// With stopUnreported the first node may answer that the world's
// processes have reported no step since their launch (unreported: the
// caller may stop it at once, losing nothing) instead of no checkpoint.
func (r *run) requestCheckpoint(ctx workflow.Context, why string, stopUnreported bool) (asked, unreported bool) {
	if workflow.GetVersion(ctx, versionCheckpointRequest, workflow.DefaultVersion, 1) < 1 {
		return false, false
	}
	m, log := r.st.Membership, workflow.GetLogger(ctx)
	in := spec.CheckpointRequest{RunID: r.st.Status.RunID, Session: r.st.Session, Why: why}
	in.StopUnreported = stopUnreported && workflow.GetVersion(ctx, versionStopUnreported, workflow.DefaultVersion, 1) >= 1
	call := func(node spec.Node) workflow.Future {
		actx := nodeCallOptions(ctx, node, toStart(r.spec), 10*time.Second,
			fmt.Sprintf("ask the world's processes on %s for a checkpoint (%s)", node.ID, why))
		return workflow.ExecuteActivity(actx, spec.ActivityRequestCheckpoint, in)
	}
	err := call(m.Nodes[0]).Get(ctx, &in.Step)
	if err == nil && in.Step == spec.StepUnreported && in.StopUnreported {
		log.Info("no checkpoint requested: the world has reported no step since its launch", "why", why)
		return false, true
	}
	if err != nil || in.Step <= 0 {
		log.Info("no checkpoint requested; the world stops after its next one", "why", why, "error", err)
		return false, false
	}
	if r.ext != nil {
		r.ext.asked, r.ext.missed = in.Step, false
	}
	futures := make([]workflow.Future, 0, len(m.Nodes)-1)
	for _, node := range m.Nodes[1:] {
		futures = append(futures, call(node))
	}
	for i, f := range futures {
		var step int64
		if err := f.Get(ctx, &step); err != nil || step != in.Step {
			log.Warn("a node's processes were not asked for the checkpoint", "node", m.Nodes[i+1].ID, "step", in.Step, "error", err)
		}
	}
	log.Info("checkpoint requested of the world", "step", in.Step, "why", why)
	return true, false
}

// versionCancelAsksCheckpoint: a cancelled run whose external world takes
// checkpoint requests asks it for one and stops it once that (or any
// later) checkpoint is uploaded — within the job's cancel_grace, and at once when
// the world cannot be asked or goes past the step without taking it —
// and ends cancelled at that step (checkpointOnCancel); before, the
// world was cancelled with the run and the steps since its last
// checkpoint were lost. Asked when such a world is launched: its
// activities are then not cancelled with the workflow.
const versionCancelAsksCheckpoint = "external-cancel-checkpoint"

// checkpointOnCancel watches, while the world runs, for runCtx's
// cancellation: then it asks the world for a checkpoint and returns a
// future that is ready once one is uploaded — or at once when none could
// be asked for, when the world went past the step without taking it, or
// after the cancel grace. ctx ends the watch (the world ended first).
func (r *run) checkpointOnCancel(ctx, runCtx workflow.Context, ext *externalRun) workflow.Future {
	f, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(runCtx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.Select(ctx)
		if runCtx.Err() == nil || ctx.Err() != nil {
			return
		}
		r.cancelSeen = true
		workflow.GetLogger(ctx).Info("run cancelled: asking its world for a checkpoint first", "grace", r.spec.CancelGraceD())
		r.showCancelling(ctx, fmt.Sprintf("the world stops after a checkpoint, asked for now (within %s)", r.spec.CancelGraceD()))
		if asked, _ := r.requestCheckpoint(ctx, "the run was cancelled", true); asked || ext.cancelCkpts > 0 {
			_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: r.spec.CancelGraceD(),
				TimerOptions: workflow.TimerOptions{Summary: "cancelled: the world's checkpoint, asked for now, until then (cancel_grace)"}},
				func() bool { return ext.cancelCkpts > 0 || ext.missed || ext.cancelKept })
		}
		set.Set(nil, nil)
	})
	return f
}

// versionWorldBlame: awaitWorld stops the world as soon as a finished
// node blames a pending one (PeerFailed: the node workers watch each
// other), instead of waiting for the pending one's heartbeat timeout.
// Asked only then (older worlds never reported PeerFailed).
const versionWorldBlame = "world-blame"

func (r *run) worldBlameOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionWorldBlame, workflow.DefaultVersion, 1) >= 1
}

// blamesPending: a finished node's PeerFailed names a node still pending.
func blamesPending(done []bool, errs []error) bool {
	for i := range done {
		if !done[i] {
			continue
		}
		if pf, ok := peerFailed(errs[i]); ok && pf.Rank >= 0 && pf.Rank < len(done) && !done[pf.Rank] {
			return true
		}
	}
	return false
}

// stoppedByRun: the world ended by the run's cancellation for a pause or
// a green window (some nodes may have finished first), not by a failure
// nor by finishing.
func stoppedByRun(errs []error) bool {
	cancelled := false
	for _, err := range errs {
		var ce *temporal.CanceledError
		switch {
		case err == nil:
		case errors.As(err, &ce):
			cancelled = true
		default:
			return false
		}
	}
	return cancelled
}

func anyErr(errs []error) bool {
	for _, e := range errs {
		if e != nil {
			return true
		}
	}
	return false
}

// blameWorld is blame for a world: a node that timed out is dead (it is
// replaced); otherwise a process that exited is the reason (the world is
// restarted on the same nodes). The step the world had reached comes from
// the processes' reports (blame reads the dead nodes' last heartbeats). gone are
// pending nodes found dead after the others ended cleanly (awaitWorld).
func (r *run) blameWorld(ctx workflow.Context, from int64, started, seen time.Time, errs []error, gone []spec.PeerFailure) *chunkFailure {
	f := r.blame(ctx, from, started, seen, errs, gone)
	if f == nil {
		return nil
	}
	f.launch = true
	var exited error
	for _, err := range errs {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == spec.ErrTypeRankExited {
			var d spec.RankExit
			if ae.HasDetails() && ae.Details(&d) == nil {
				f.atStep = max(f.atStep, d.Step)
			}
			if exited == nil {
				exited = err
			}
		}
	}
	if len(f.failed) == 0 && !f.corrupt && exited != nil {
		f.first, f.reason = exited, message(exited)
		f.cause, f.reasonIsFirst = nil, false // nothing hidden by a cancellation
	}
	return f
}
