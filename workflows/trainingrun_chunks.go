package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/internal/redact"
	"github.com/cann-train/cann-train/spec"
)

// chunkFailure is one failed chunk, with the nodes to blame.
type chunkFailure struct {
	// launch: an external job's world failed (words only).
	launch    bool
	from      int64
	atStep    int64     // step the survivors were in (0 if unknown)
	noticed   time.Time // first survivor noticed the loss
	started   time.Time
	seen      time.Time
	failed    []string // node IDs
	reason    string
	retryable bool
	// corrupt: the checkpoint the chunk restored from failed verification,
	// or was deleted (CheckpointGone).
	corrupt bool
	// unfit are the nodes that cannot serve the run as they are set up:
	// they do not find the checkpoint to restore in a bucket where they
	// never found the run's checkpoints (CheckpointNotHere: they do not
	// reach it), or lack its data set (NodeUnfit). They are replaced;
	// those without data (misconfigured) stay failed until their workers
	// register again — a bucket is the run's, and other runs may not need
	// it.
	unfit         []string
	unfitWhy      []string // each one's words
	misconfigured []string
	// otherData are the unfit nodes that hold another data set than the
	// run's (their NodeUnfit's DataDisagreement, by node ID), and
	// runData the run's as they said it.
	otherData map[string]string
	runData   string
	first     error
	// lostState names the nodes that answered NoState: a node process
	// restarted under the same ID between two chunks holds no state for
	// the chunk's first step (and its checkpoint may still be uploading).
	// cause is the first error that is not a cancellation (the ranks
	// await cancelled after another's failure), when first is one.
	lostState []string
	cause     error
	// reasonIsFirst: reason is first's message (no node to blame).
	reasonIsFirst bool
	// unshared: a node's BucketNotShared message (the run cannot recover
	// from a checkpoint some of its nodes do not see).
	unshared string
	// unfitCkpt: a node's CheckpointUnfit message (the checkpoint is
	// another job's: the run fails, dropping none).
	unfitCkpt string
	// unread: the checkpoint to restore that the storage did not serve
	// (CheckpointUnreachable; the first such node's words, unreadBy, or
	// the first whose own read failed); storageDown: that is all that
	// failed — no node to blame, the run holds for its storage
	// (waitToLoad), unless its nodes' reads show a node cut off from the
	// bucket its peers read (cutOff).
	unread      *spec.CheckpointFailure
	unreadBy    string
	storageDown bool
	// cutOff: failed are nodes found cut off from the run's bucket
	// (run.cutOff): replaced without a restart counted.
	cutOff bool
	// unreached are the nodes whose chunk (or world) the SDK stopped
	// because their heartbeats did not reach Temporal
	// (TemporalUnreachable): alive, not to blame; unreachedOnly: that is
	// all that failed (versionTemporalUnreachable).
	unreached     []string
	unreachedWhy  string
	unreachedOnly bool
	// stopped: no chunk failed — the last one ended early, at a stored
	// checkpoint, because the worker of the node in failed was stopping
	// (stoppedNode): a planned loss, which counts no restart.
	stopped bool
	// endedEarly: failed are the nodes the chunk ended early for
	// (stoppedNode; stopped too).
	endedEarly bool
	// allSilent: every node's activity timed out for want of heartbeats,
	// none reported anything — all dead at once, or the service (or the
	// nodes' way to it) out for longer than the heartbeat timeout
	// (recover asks them: answerAfterSilence).
	allSilent bool
}

// onOtherData notes that node holds another data set than the run's, as
// d says (its own NodeUnfit, or a peer's PeerFailed).
func (f *chunkFailure) onOtherData(node string, d spec.DataDisagreement) {
	if d.Run == "" || d.Node == "" || d.Node == d.Run {
		return
	}
	if f.otherData == nil {
		f.otherData = map[string]string{}
	}
	f.otherData[node], f.runData = d.Node, d.Run
}

// addUnfit notes that node cannot serve the run, in why's words;
// misconfigured: failed until its worker registers again.
func (f *chunkFailure) addUnfit(node, why string, misconfigured bool) {
	f.unfit = append(f.unfit, node)
	f.unfitWhy = append(f.unfitWhy, why)
	if misconfigured {
		f.misconfigured = append(f.misconfigured, node)
	}
}

func (f *chunkFailure) Error() string {
	return fmt.Sprintf("%s from step %d: %s", f.unit(), f.from, f.reason)
}

// unit is what failed: a chunk, or an external job's launch of its world.
func (f *chunkFailure) unit() string {
	if f.launch {
		return "launch"
	}
	return "chunk"
}

func (f *chunkFailure) Unwrap() error { return f.first }

// versionCheckpointChunks: with checkpoint_every below chunk_steps a chunk
// ends at the next multiple of checkpoint_every, where its checkpoint is
// due; before, checkpoints came only every chunk_steps.
const versionCheckpointChunks = "checkpoint-chunks"

// checkpointEnd ends a chunk [from, to) early at the next multiple of
// checkpoint_every when checkpoints are asked for more often than
// chunk_steps (checkpoints are taken at chunk boundaries).
func (r *run) checkpointEnd(ctx workflow.Context, from, to int64) int64 {
	every := r.spec.CheckpointEvery
	if every <= 0 || every >= r.spec.ChunkSteps {
		return to
	}
	next := (from/every + 1) * every
	if next >= to || workflow.GetVersion(ctx, versionCheckpointChunks, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return to
	}
	return next
}

// trainChunk runs steps [from, to) as one TrainChunk per node and waits for
// all of them. On failure it returns a *chunkFailure naming the nodes that
// timed out (dead or stuck) or that their peers blamed. A chunk after
// which the run holds no checkpoint it can do without — its own,
// synchronous one refused, or a second upload refused in a row — holds
// the run until the storage takes the state its nodes kept (storeHeld).
func (r *run) trainChunk(ctx workflow.Context) error {
	from := r.st.Status.Step
	to := r.checkpointEnd(ctx, from, r.chunkEnd(from, min(from+r.spec.ChunkSteps, r.spec.Steps)))
	every := r.spec.CheckpointEvery
	ckpt := to == r.spec.Steps || to/every > from/every || r.st.ForceCheckpoint
	// The last chunk and a forced checkpoint (a rescale waits for it) save
	// synchronously; the others upload while the next chunk trains.
	async := ckpt && to < r.spec.Steps && !r.st.ForceCheckpoint && r.asyncCheckpoints(ctx)
	report := ckpt && !async && r.storageWaits(ctx)
	cameBack := slices.Clone(r.st.CameBack)
	results, err := r.runChunk(ctx, chunkPlan{from: from, to: to, checkpoint: ckpt, async: async, report: report})
	if err != nil {
		return err
	}
	// Those that came back before it trained hold its state now (a new
	// membership named their new processes). State only.
	r.st.CameBack = slices.DeleteFunc(r.st.CameBack, func(id string) bool { return slices.Contains(cameBack, id) })
	r.st.StorageWait, r.st.CutOff = 0, nil // (a hold for a checkpoint to read is over)
	lead := results[0]
	if lead.Checkpoint != nil || lead.EarlierCheckpoint != nil {
		r.st.WriteCutOff = nil // rank 0's node stored one: the storage takes its writes
	}
	again := lead.CheckpointFailed != nil && r.st.Status.CheckpointFailed != nil
	r.absorb(ctx, results, to)
	if f := r.stoppedNode(ctx, results); f != nil {
		return f
	}
	if r.st.Status.CheckpointFailed == nil || lead.Checkpoint != nil {
		return nil // stored, or no second refusal
	}
	// (A refused synchronous checkpoint is reported only in the new
	// version; the background case asks it here.)
	own := report && lead.CheckpointFailed != nil && lead.CheckpointFailed.Step == to
	if own || (again && r.storageWaits(ctx)) {
		r.st.StorageHeld, r.st.StorageWait = true, 0
	}
	return nil
}

// versionEndedEarly: a chunk whose ranks ended it early for a node whose
// worker was stopping (ChunkResult.EndedBy), with its checkpoint stored
// there, has the run replace that node at once (stoppedNode), counting no
// restart. Before, the run's next chunk failed on the node (its address
// refusing connections) and the recovery counted a restart: a rolling
// upgrade of the node workers spent max_restarts. Asked only then.
const versionEndedEarly = "ended-early"

// stoppedNode is the planned loss after a chunk that its ranks ended early
// for a node whose worker is stopping (the lead result's EndedBy), at a
// checkpoint they stored: recover then replaces the node — and every
// other node whose ranks say theirs was stopping too (Stopping: several
// stopped at once) —, as after a failure but with no restart counted and
// no step lost, before a chunk is planned on it. nil when no node
// stopped, or the checkpoint at the chunk's end was not stored (the run's
// next chunk then fails on the node, as before).
func (r *run) stoppedNode(ctx workflow.Context, results []spec.ChunkResult) *chunkFailure {
	lead := results[0]
	by := lead.EndedBy
	members := r.st.Membership.NodeIDs()
	if by == "" || lead.Checkpoint == nil || lead.Checkpoint.Step != lead.To || !slices.Contains(members, by) ||
		workflow.GetVersion(ctx, versionEndedEarly, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	// (Stopping is set only by node workers newer than these histories.)
	var stopped []string
	for _, res := range results {
		if (res.NodeID == by || res.Stopping) && slices.Contains(members, res.NodeID) && !slices.Contains(stopped, res.NodeID) {
			stopped = append(stopped, res.NodeID)
		}
	}
	now := workflow.Now(ctx)
	workflow.GetLogger(ctx).Info("a node's worker is stopping: its chunk ended early, at a checkpoint; replacing the node", "nodes", stopped, "step", lead.To)
	why := stoppedWhy(stopped, lead.To)
	return &chunkFailure{from: lead.To, atStep: lead.To, noticed: lead.EndedAt, started: now, seen: now, failed: stopped,
		reason: why, first: errors.New(why), retryable: true, stopped: true, endedEarly: true}
}

// stoppedWhy says that the workers of nodes stopped and the chunk ended
// at step for them.
func stoppedWhy(nodes []string, step int64) string {
	if len(nodes) == 1 {
		return fmt.Sprintf("node %s's worker stopped; the chunk ended at step %d for it, with a checkpoint there", nodes[0], step)
	}
	return fmt.Sprintf("the workers of nodes %s stopped; the chunk ended at step %d for them, with a checkpoint there", strings.Join(nodes, ", "), step)
}

// alsoStopping are the nodes of removed — those the recovery's acquire
// moved the run off — that it does not blame (failed) but was told are
// stopping (Evict.Stopping): the Cluster hands no stopping node back, so
// a worker's SIGTERM that came too late for its ranks to say so (after
// the chunk's vote, in its last steps) still moves its node in the same
// recovery. In the order of before, the membership recovered from.
func (r *run) alsoStopping(before, removed, failed []string) []string {
	var also []string
	for _, id := range before {
		if slices.Contains(removed, id) && !slices.Contains(failed, id) && r.saidStopping(id) {
			also = append(also, id)
		}
	}
	return also
}

// chunkFlight is the chunk training now, whose nodes may be asked to end
// it early (endInFlight): its session, its rank 0's node, its steps, and
// whether the run asked yet.
type chunkFlight struct {
	session  string
	lead     spec.Node
	from, to int64
	asked    bool
}

// versionEndOnControl: a pause, rescale or drain signalled while a chunk
// trains asks the chunk's nodes to end it early (endInFlight), so that it
// takes effect within a second, at a checkpoint, instead of at the
// chunk's planned end — minutes, for a long chunk. Asked only then.
const versionEndOnControl = "end-on-control"

// endInFlight asks the chunk in flight, if any and when its nodes can, to
// end early for why (a pause, a rescale, a drain): rank 0's node is told
// (ActivityEndChunk), its ranks and their peers agree on a step at their
// next vote, and the chunk returns there with a checkpoint, where the run
// acts on the control at its chunk boundary. A node that does not answer
// changes nothing: the chunk ends as planned (or fails, if the node is
// gone).
func (r *run) endInFlight(ctx workflow.Context, why string) {
	f := r.flight
	if f == nil || f.asked || f.to-f.from < 2 ||
		workflow.GetVersion(ctx, versionEndOnControl, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	f.asked = true
	actx := nodeCallOptions(ctx, f.lead, toStart(r.spec), 10*time.Second,
		fmt.Sprintf("end the chunk %d–%d early on %s: %s", f.from, f.to, f.lead.ID, why))
	fut := workflow.ExecuteActivity(actx, spec.ActivityEndChunk, spec.EndChunkInput{RunID: r.st.Status.RunID, Session: f.session, Why: why})
	workflow.Go(ctx, func(ctx workflow.Context) {
		if err := fut.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("the chunk in flight was not asked to end early; the run acts at its planned end", "why", why, "error", err)
		}
	})
}

// versionCancelEndsChunk: a run cancelled while a chunk trains on nodes
// that can end it early has them end it at a checkpoint first
// (endOnCancel), and ends cancelled at that step; before, the chunk was
// cancelled with the workflow and the steps since its last checkpoint
// were lost (a `run --resume` trained them again). Asked when such a
// chunk starts: its activities are then not cancelled with the workflow.
const versionCancelEndsChunk = "cancel-ends-chunk"

// endOnCancel watches, while the chunk in flight trains (its activities
// on dctx, which the run's cancellation does not reach), for ctx's
// cancellation: then it asks the chunk's nodes to end it early, at a
// checkpoint (endInFlight), and cancels it (cancel) if it has not
// returned within the job's cancel_grace (a vote, then rank 0's
// synchronous upload; RunSpec.CancelGraceD). The run then ends cancelled at the step
// the chunk reached (cancelSeen). Call the returned func once the chunk
// has returned.
func (r *run) endOnCancel(ctx, dctx workflow.Context, cancel workflow.CancelFunc) (over func()) {
	done := workflow.NewChannel(dctx)
	workflow.Go(dctx, func(gctx workflow.Context) {
		ended := false
		sel := workflow.NewSelector(gctx)
		sel.AddReceive(done, func(workflow.ReceiveChannel, bool) { ended = true })
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.Select(gctx)
		if ended {
			return
		}
		r.cancelSeen = true
		workflow.GetLogger(gctx).Info("run cancelled: its chunk in flight ends early, at a checkpoint, first", "grace", r.spec.CancelGraceD())
		r.showCancelling(gctx, fmt.Sprintf("the chunk in flight ends at a checkpoint first (within %s)", r.spec.CancelGraceD()))
		r.endInFlight(gctx, "the run was cancelled")
		tctx, stopTimer := workflow.WithCancel(gctx)
		defer stopTimer()
		wait := workflow.NewSelector(gctx)
		wait.AddReceive(done, func(workflow.ReceiveChannel, bool) {})
		wait.AddFuture(workflow.NewTimerWithOptions(tctx, r.spec.CancelGraceD(), workflow.TimerOptions{
			Summary: "cancelled: the chunk in flight may end at a checkpoint until then (cancel_grace)"}), func(f workflow.Future) {
			if f.Get(gctx, nil) == nil {
				workflow.GetLogger(gctx).Warn("the cancelled run's chunk did not end within the grace; cancelling it", "grace", r.spec.CancelGraceD())
				cancel()
			}
		})
		wait.Select(gctx)
	})
	return func() { done.Close() }
}

// versionCancellingPhase: a cancelled run that waits for its chunk in
// flight (or its external world) to end at a checkpoint says so in its
// phase, PhaseCancelling (status, CannStatus, the Web UI); before, it
// stayed training, only its Detail saying why. Asked when the
// cancellation is seen during a chunk or launch.
const versionCancellingPhase = "cancelling-phase"

// showCancelling shows that the cancelled run waits for its checkpoint
// (what: for what): phase cancelling, or, replaying a history from before
// the phase, the Web UI's details alone (publish would add a command
// there), the detail saying it is cancelled.
func (r *run) showCancelling(ctx workflow.Context, what string) {
	if workflow.GetVersion(ctx, versionCancellingPhase, workflow.DefaultVersion, 1) >= 1 {
		r.st.Status.Detail = what
		r.setPhase(ctx, spec.PhaseCancelling)
		return
	}
	r.st.Status.Detail = "cancelled: " + what
	r.showDetails(ctx)
}

// chunkPlan is what one chunk does: train steps [from, to) and, with
// checkpoint, save the state at to (async: in the background; report: a
// refusal is reported, not a failure). from == to: save only.
type chunkPlan struct {
	from, to                  int64
	checkpoint, async, report bool
	// saver: the node that stores a save-only chunk's checkpoint
	// (spec.ChunkInput.Saver).
	saver int
}

func (c chunkPlan) saveOnly() bool { return c.from == c.to }

// runChunk runs plan as one TrainChunk per node of the membership and
// returns their results (rank order), or the failure with its blame.
func (r *run) runChunk(ctx workflow.Context, plan chunkPlan) ([]spec.ChunkResult, error) {
	from, to := plan.from, plan.to
	r.st.Epoch++
	m := r.st.Membership
	session := fmt.Sprintf("%s/g%d/e%d", r.st.Status.RunID, m.Generation, r.st.Epoch)
	started := workflow.Now(ctx)

	// Runs from before the controls train in the engine's batch-per-rank
	// mode; newer ones fix the global batch so that rescales keep it.
	globalBatch := 0
	var schedule []spec.BatchChange
	if r.controlled(ctx) {
		globalBatch, schedule = r.spec.GlobalBatch(), r.schedule()
	}
	algo := r.algorithm(ctx)
	codecName, calibrate := r.chunkCodec(ctx, from)
	flight := !plan.saveOnly() && m.EndsEarly()
	// A chunk that can end early is not cancelled with the run: a
	// cancellation asks it to end at a checkpoint first (endOnCancel). (A
	// run cancelled already schedules nothing: its chunk fails at once.)
	actx := ctx
	if flight && ctx.Err() == nil && workflow.GetVersion(ctx, versionCancelEndsChunk, workflow.DefaultVersion, 1) >= 1 {
		actx, _ = workflow.NewDisconnectedContext(ctx)
	}
	cctx, cancel := workflow.WithCancel(actx)
	defer cancel()
	futures := make([]workflow.Future, len(m.Nodes))
	for rank, node := range m.Nodes {
		fault := r.faultFor(node.ID, from, to)
		in := spec.ChunkInput{
			RunID: r.st.Status.RunID, Spec: r.nodeSpec(), Membership: m, Rank: rank,
			Session: session, Token: r.st.Token, From: from, To: to,
			Restore: r.st.Status.LastCkpt, Checkpoint: plan.checkpoint, Evaluate: to == r.spec.Steps && !plan.saveOnly(),
			KillAtStep:  fault.AtStep,
			Freeze:      fault.Freeze(),
			GlobalBatch: globalBatch,
			Schedule:    schedule,
			Algorithm:   algo,
			Codec:       codecName,
			Calibrate:   calibrate,
			DataSHA256:  r.st.DataSHA256,

			AsyncCheckpoint:      plan.async,
			ReportStorageFailure: plan.report,
			Saver:                plan.saver,
		}
		summary := fmt.Sprintf("chunk %d · steps %d–%d · rank %d/%d on %s · gen %d",
			r.st.Status.Chunks+1, from, to, rank, len(m.Nodes), node.ID, m.Generation)
		if plan.saveOnly() {
			summary = fmt.Sprintf("store the checkpoint at step %d · rank %d/%d on %s · gen %d", from, rank, len(m.Nodes), node.ID, m.Generation)
		}
		futures[rank] = workflow.ExecuteActivity(chunkOptions(cctx, r.spec, node, summary), spec.ActivityTrainChunk, in)
	}
	if flight {
		r.flight = &chunkFlight{session: session, lead: m.Nodes[0], from: from, to: to}
		r.endAtSlotEnd(cctx)
		r.watchForNodes(cctx)
	}
	over := func() {}
	if actx != ctx {
		over = r.endOnCancel(ctx, actx, cancel)
	}
	results, errs, gone := r.await(actx, futures, cancel)
	over()
	r.flight = nil
	fail := r.blame(ctx, from, started, workflow.Now(ctx), errs, gone)
	if fail == nil {
		if r.st.DataSHA256 == "" {
			r.st.DataSHA256 = results[0].DataSHA256 // (the nodes agreed on it)
			r.st.Status.DataSHA256 = r.st.DataSHA256
			r.noteDataChange(ctx)
		}
		return results, nil
	}
	if len(fail.lostState) > 0 || fail.cause != nil {
		if workflow.GetVersion(ctx, versionLostState, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			// As recorded before: a node without state failed the run.
			fail.retryable = fail.retryable && len(fail.lostState) == 0
		} else if fail.cause != nil {
			fail.first = fail.cause // a failed run is Failed, not Canceled
		}
	}
	// Repeats the line above for new histories and adds the reason;
	// that line stays for histories recorded between the two versions.
	r.preferCause(ctx, fail)
	r.storageTrouble(ctx, fail, errs, to)
	kept := false
	switch {
	case plan.saveOnly():
		// Nothing trained to keep; the recovery goes back to the last
		// stored checkpoint — the one the hold was for, when the saver
		// stored it before another node was lost.
		r.keepSaved(ctx, plan, results, errs)
	case len(gone) > 0:
		kept = r.salvage(ctx, results, errs, false)
	case finishedButSilent(errs):
		fail.atStep = max(fail.atStep, to)
		kept = r.salvage(ctx, results, errs, true)
	}
	if !kept {
		r.recordLost(ctx, fail, len(m.Nodes))
	}
	return nil, fail
}

// versionStorageWaits: a run whose checkpoint storage refuses what it
// needs — the synchronous checkpoint of its last chunk or of a forced
// one, or a second background upload in a row — holds with its nodes'
// state until the storage takes it (storeHeld). Before, it trained
// on without checkpoints after a refused upload, retrained a chunk whose
// synchronous checkpoint was refused, and failed once a second
// checkpoint was refused: a full bucket cost the run every step since
// its last stored checkpoint. Asked when a chunk saves synchronously, and
// when a second upload in a row failed.
const versionStorageWaits = "storage-waits"

func (r *run) storageWaits(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionStorageWaits, workflow.DefaultVersion, 1) >= 1
}

// storageRetryFirst and storageRetryMax: how long a run that holds for
// its checkpoint storage waits before it stores again, doubling after
// every refusal up to the maximum (each try is a few events per node in
// the run's history). A resume tries at once.
const (
	storageRetryFirst = 15 * time.Second
	storageRetryMax   = 10 * time.Minute
)

// storeHeld is one try of a run that holds for its checkpoint storage:
// after the wait the last refusal set (none at first; a resume cuts it
// short), a save-only chunk stores the state the nodes keep at the run's
// step. Stored, the hold ends and the run trains on (a pause or rescale
// signalled meanwhile applies at that boundary); refused, the next wait
// doubles, from storageRetryFirst up to storageRetryMax. A node lost
// meanwhile ends the hold with its chunk's failure: the recovery goes
// back to the last stored checkpoint. The hold lives in the run's state,
// so it crosses continue-as-new (a long hold grows the history).
func (r *run) storeHeld(ctx workflow.Context) error {
	s := &r.st.Status
	held := r.metrics(ctx).Gauge(metricStorageHeld)
	held.Update(1)
	if w := r.st.StorageWait; w > 0 {
		if err := r.waitForStorage(ctx, w); err != nil {
			return err
		}
	}
	if workflow.GetVersion(ctx, versionStoringSaysSo, workflow.DefaultVersion, 1) >= 1 {
		s.Detail = fmt.Sprintf("the checkpoint storage%s refused the run's checkpoint; its nodes keep the state at step %d and store it now", r.bucketShown(), s.Step)
		s.WaitUntil = time.Time{}
		r.setPhase(ctx, spec.PhaseStorageWait)
	}
	saver := r.storeSaver(ctx)
	if saver > 0 { // (only runs that say so above get one)
		s.Detail += " from node " + r.st.Membership.Nodes[saver].ID
	}
	stored, bySaver, err := r.storeKept(ctx, saver)
	if err == nil && !stored {
		r.st.StoreTries++
		r.st.StorageWait = nextStorageWait(r.st.StorageWait)
		return nil
	}
	if err == nil && bySaver && saver > 0 {
		r.wroteElsewhere(ctx, saver)
	} else if err == nil {
		r.st.WriteCutOff = nil // rank 0's node stored it: the storage takes its writes
	}
	r.st.StorageHeld, r.st.StorageWait, r.st.StoreTries = false, 0, 0
	s.WaitUntil, s.Detail = time.Time{}, ""
	held.Update(0)
	if err == nil {
		workflow.GetLogger(ctx).Info("checkpoint storage takes the run's checkpoints again", "step", s.Step)
		r.heldBetweenChunks()
	}
	return err
}

// bucketShown is " (URL)" naming the bucket the run's checkpoints go to,
// its password masked: the job's checkpoint_url, else the default its
// rank 0's node registered ("" where neither says).
func (r *run) bucketShown() string {
	url := r.spec.CheckpointURL
	if url == "" && len(r.st.Membership.Nodes) > 0 {
		url = r.st.Membership.Nodes[0].CheckpointURL
	}
	if url == "" {
		return ""
	}
	return " (" + redact.URL(url) + ")"
}

// versionStoringSaysSo: a run that holds for its storage says "store it
// now" while a save-only chunk tries (in waiting-storage, the first try
// too); before, the first try said training and the others the time it
// started at — minutes, with a bucket that does not answer. Asked at
// every try.
const versionStoringSaysSo = "storing-says-so"

// nextStorageWait is the wait after a refusal, the last having been prev
// (0: the first).
func nextStorageWait(prev time.Duration) time.Duration {
	return min(max(storageRetryFirst, 2*prev), storageRetryMax)
}

// waitForStorage says that the run holds for its storage and waits d,
// or until a resume.
func (r *run) waitForStorage(ctx workflow.Context, d time.Duration) error {
	step := r.st.Status.Step
	return r.holdFor(ctx, d,
		fmt.Sprintf("the checkpoint storage%s refuses the run's checkpoints; its nodes keep the state at step %d and store it again", r.bucketShown(), step),
		fmt.Sprintf("store the checkpoint at step %d again", step))
}

// holdFor waits d in the waiting-storage phase, or until a resume; the
// status says what the run does then (what, "at" the time).
func (r *run) holdFor(ctx workflow.Context, d time.Duration, what, summary string) error {
	s := &r.st.Status
	now := workflow.Now(ctx)
	s.WaitUntil = now.Add(d)
	s.Detail = fmt.Sprintf("%s at %s (cann-train resume: now)", what, s.WaitUntil.UTC().Format("15:04:05 UTC"))
	r.setPhase(ctx, spec.PhaseStorageWait)
	workflow.GetLogger(ctx).Warn("holding for the checkpoint storage", "step", s.Step, "retry_in", d)
	was := r.st.Ctl.Resumes
	_, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      d,
		TimerOptions: workflow.TimerOptions{Summary: summary},
	}, func() bool { return r.st.Ctl.Resumes != was })
	return err
}

// versionLoadWaits: a chunk that failed only because the storage did
// not serve the checkpoint its nodes restore from (CheckpointUnreachable)
// holds the run until it does (waitToLoad); before, it was a restart
// like any failure, and an outage of the storage through max_restarts
// tries failed the run. Asked only then.
const versionLoadWaits = "load-waits"

// waitToLoad holds a run whose storage did not serve the checkpoint to
// restore (f): no node is blamed, no restart counted, nothing trained is
// lost. After the wait (storageRetryFirst, doubling up to
// storageRetryMax while the storage keeps failing; a resume cuts it
// short) the run tries the chunk again. A pause, rescale or drain
// signalled meanwhile applies then, at the boundary.
func (r *run) waitToLoad(ctx workflow.Context, f *chunkFailure) error {
	if err := r.waitToRead(ctx, f.reason+"; the run reads it again", fmt.Sprintf("read the checkpoint at step %d again", f.unread.Step)); err != nil {
		return err
	}
	s := &r.st.Status
	s.WaitUntil, s.Detail = time.Time{}, ""
	r.heldBetweenChunks()
	r.setPhase(ctx, spec.PhaseTraining) // (an external job's relaunch sets none)
	return nil
}

// waitToRead is one wait of a run that holds because its storage does
// not serve a read (a checkpoint to restore, or to look up): the next of
// the doubling waits (nextStorageWait), in waiting-storage with the
// cann_train_storage_held gauge at 1, saying what (holdFor).
func (r *run) waitToRead(ctx workflow.Context, what, summary string) error {
	d := nextStorageWait(r.st.StorageWait)
	r.st.StorageWait = d
	held := r.metrics(ctx).Gauge(metricStorageHeld)
	held.Update(1)
	err := r.holdFor(ctx, d, what, summary)
	held.Update(0)
	return err
}

// storeKept runs a save-only chunk at the run's step, its checkpoint
// stored by node saver, and reports whether the state is stored now (by
// it — bySaver — or by the upload rank 0 had in flight from the chunk
// before).
func (r *run) storeKept(ctx workflow.Context, saver int) (stored, bySaver bool, err error) {
	step := r.st.Status.Step
	results, err := r.runChunk(ctx, chunkPlan{from: step, to: step, checkpoint: true, report: true, saver: saver})
	if err != nil {
		return false, false, err
	}
	r.chunksNow++ // a unit of history, as a chunk is
	s, lead, saved := &r.st.Status, results[0], results[saver]
	if lead.EarlierCheckpoint != nil {
		r.commitCheckpoint(ctx, *lead.EarlierCheckpoint)
	}
	// (Rank 0 stores nothing when its upload of this step landed; another
	// saver, which cannot know, stored the same checkpoint again.)
	bySaver = saved.Checkpoint != nil && (lead.EarlierCheckpoint == nil || lead.EarlierCheckpoint.Step < step)
	if bySaver {
		r.st.ForceCheckpoint = false
		r.commitCheckpoint(ctx, *saved.Checkpoint)
	}
	if p := r.st.PendingCkpt; p != nil && p.Step <= step {
		r.st.PendingCkpt = nil // settled by the chunk, either way
	}
	stored = s.LastCkpt != nil && s.LastCkpt.Step >= step
	if f := saved.CheckpointFailed; f != nil && !stored {
		r.refused(ctx, f)
	}
	s.UpdatedAt = workflow.Now(ctx)
	r.publish(ctx)
	return stored, bySaver, nil
}

// versionSaverKept: a save-only chunk that failed after its saver stored
// the held state (another node lost meanwhile) keeps that checkpoint —
// and rank 0's upload from the chunk before, landed meanwhile —: the
// recovery resumes there. Before, it went back to the checkpoint stored
// before the hold, and the steps the hold was for were trained again.
// Asked only when there is one to keep.
const versionSaverKept = "saver-kept"

// keepSaved commits the checkpoints a save-only chunk that failed (plan;
// results and errs by rank) stored before the failure: its saver's, and
// an upload rank 0 had in flight from the chunk before that landed.
func (r *run) keepSaved(ctx workflow.Context, plan chunkPlan, results []spec.ChunkResult, errs []error) {
	var saved []spec.CheckpointRef
	if errs[0] == nil && results[0].EarlierCheckpoint != nil {
		saved = append(saved, *results[0].EarlierCheckpoint)
	}
	if s := plan.saver; s >= 0 && s < len(errs) && errs[s] == nil && results[s].Checkpoint != nil && results[s].Checkpoint.Step == plan.to {
		saved = append(saved, *results[s].Checkpoint)
	}
	if len(saved) == 0 || workflow.GetVersion(ctx, versionSaverKept, workflow.DefaultVersion, 1) < 1 {
		return
	}
	for _, c := range saved {
		r.commitCheckpoint(ctx, c)
	}
	workflow.GetLogger(ctx).Info("kept the checkpoint the failed save-only chunk stored", "last_checkpoint", r.st.Status.LastCkpt)
}

// salvage keeps the checkpoints rank 0 reported for a chunk that every
// rank but the gone ones finished (await's straggler check): the chunk's
// own (committed, or still uploading: found in the bucket once rank 0 has
// written it, retried for a few seconds) and an earlier one it finished
// uploading. The recovery then resumes from the
// chunk's end instead of redoing it — the checkpoint holds the state
// every rank reached, bit for bit what the rerun would compute. Nothing
// when rank 0 is among the gone, nor for the run's last chunk (whose
// results — final loss, evaluation, weights — the rerun reports).
//
// timedOut: the lost ranks are not gone but silent (they stopped
// heartbeating after the others finished: frozen).
func (r *run) salvage(ctx workflow.Context, results []spec.ChunkResult, errs []error, timedOut bool) (kept bool) {
	lead := results[0]
	if errs[0] != nil || lead.To >= r.spec.Steps || lead.Checkpoint == nil && lead.PendingCheckpoint == nil && lead.EarlierCheckpoint == nil {
		return false // (the last chunk is redone: its results end the run)
	}
	// (versionSalvageTimedOut first: a history from before it never asks
	// versionSalvage here.)
	if timedOut && workflow.GetVersion(ctx, versionSalvageTimedOut, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	if workflow.GetVersion(ctx, versionSalvage, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	if lead.EarlierCheckpoint != nil {
		r.commitCheckpoint(ctx, *lead.EarlierCheckpoint)
	}
	if p := lead.PendingCheckpoint; p != nil {
		// Rank 0 is alive and finishing the upload: wait for it.
		ref, err := resolveCheckpoint(ctx, *p, patient)
		if err != nil {
			workflow.GetLogger(ctx).Warn("the chunk's checkpoint did not appear; the chunk is redone", "step", p.Step, "error", err)
		} else {
			r.commitCheckpoint(ctx, ref)
		}
	}
	if lead.Checkpoint != nil {
		r.st.ForceCheckpoint = false
		r.commitCheckpoint(ctx, *lead.Checkpoint)
	}
	workflow.GetLogger(ctx).Info("kept the checkpoints of a chunk its surviving ranks finished", "to", lead.To,
		"last_checkpoint", r.st.Status.LastCkpt)
	last := r.st.Status.LastCkpt
	if last == nil || last.Step != lead.To || workflow.GetVersion(ctx, versionSalvageAbsorb, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	r.absorbSalvaged(ctx, results, errs)
	return true
}

// versionLostSegments: a failed chunk that is not kept adds a lost
// segment, so that energy accounting counts the work a failure cost
// (before: only chunks that completed). Asked at such a failure.
const versionLostSegments = "lost-segments"

// recordLost adds the failed chunk f, trained on nodes nodes, as a lost
// segment: from the chunk's start to when the run saw it fail (workflow
// time; the nodes report nothing from a failed chunk), its energy
// modelled.
func (r *run) recordLost(ctx workflow.Context, f *chunkFailure, nodes int) {
	if !f.seen.After(f.started) || workflow.GetVersion(ctx, versionLostSegments, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	seg := lostSegment(f, nodes, r.st.Membership.Generation, r.st.Status.Segments)
	if r.spec.Green != nil {
		r.st.Unpriced = append(r.st.Unpriced, seg)
	}
	r.appendSegment(seg)
}

// lostSegment is f's lost segment after the segments before. Those come
// from the nodes' clocks: one ahead of the server's must not swallow it
// (it is moved after them, not cut).
func lostSegment(f *chunkFailure, nodes int, generation int64, before []spec.Segment) spec.Segment {
	start, end := f.started, f.seen
	if n := len(before); n > 0 {
		if last := before[n-1].End; start.Before(last) {
			end, start = end.Add(last.Sub(start)), last
		}
	}
	return spec.Segment{Start: start, End: end, Nodes: nodes, Generation: generation, FromStep: f.from,
		ToStep: max(f.from, f.atStep), WallSeconds: f.seen.Sub(f.started).Seconds(), Chunks: 1, Lost: true}
}

// versionSalvageAbsorb: a salvaged chunk's progress counts (absorbSalvaged);
// before, the status jumped to its end with the loss, chunk count, trained
// time and energy of the chunk before. Asked when the chunk's end is kept.
const versionSalvageAbsorb = "salvage-absorb"

// absorbSalvaged counts a chunk kept by salvage, from the ranks that
// finished it: its loss, steps and training time, its weights' hash and
// its stretch for energy accounting (modelled: the lost node's meter
// reading is gone). Not its speeds, traffic or warm-up measures, which
// want every rank (a run past an undecided auto codec measures again).
func (r *run) absorbSalvaged(ctx workflow.Context, results []spec.ChunkResult, errs []error) {
	var start, end time.Time
	var secs float64
	for i, res := range results {
		if errs[i] != nil {
			continue
		}
		if start.IsZero() || res.StartedAt.Before(start) {
			start = res.StartedAt
		}
		end = maxTime(end, res.EndedAt)
		secs = max(secs, res.Seconds)
	}
	lead := results[0]
	r.countChunk(lead, secs)
	r.recordSegment(start, end, lead.From, lead.To, results) // a lost rank's Joules are 0: modelled
	r.noteResumed(results)                                   // (this chunk came after an earlier recovery)
	r.metrics(ctx).Gauge(metricStep).Update(float64(lead.To))
}

// versionSalvage: a chunk lost to a node gone after its last step keeps
// rank 0's checkpoints (salvage). Asked only when there are some.
const versionSalvage = "salvage-checkpoints"

// versionSalvageTimedOut: so does one lost to a node that stopped
// heartbeating after the others finished it (a frozen node; before, only
// a gone one's). Asked only when there are checkpoints to keep.
const versionSalvageTimedOut = "salvage-timed-out"

// finishedButSilent: the ranks that failed all timed out heartbeating (a
// rank in its chunk that fell silent), and every other rank finished the
// chunk: the silent ones took part in its every collective, and the
// chunk's end is what every rank reached.
func finishedButSilent(errs []error) bool {
	return onlyHeartbeatTimeouts(errs) && slices.Contains(errs, nil)
}

// onlyHeartbeatTimeouts: some errors, each a heartbeat timeout.
func onlyHeartbeatTimeouts(errs []error) bool {
	return onlyErrors(errs, func(err error) bool {
		var te *temporal.TimeoutError
		return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
	})
}

// onlyErrors: errs holds an error, and each one is.
func onlyErrors(errs []error, is func(error) bool) bool {
	some := false
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !is(err) {
			return false
		}
		some = true
	}
	return some
}

// await collects every rank's outcome. A rank whose process died never
// reports; its peers do at once, naming it (PeerFailed). As soon as every
// rank still pending is blamed by a peer and every other rank has failed,
// the pending ones are cancelled instead of waiting out their heartbeat
// timeout: detection in milliseconds, not seconds. When a pending rank is
// blamed but others are not (a dead rank that only some peers dial: the
// ones waiting for its connection do not notice), the rest get
// blameGrace to report — their votes name the culprit — and are then
// cancelled too: the chunk cannot finish without the blamed rank.
//
// A rank that dies after the chunk's last collective is named by nobody:
// its peers finish. While every rank that reported succeeded and some
// have not, a finished node is asked whether the pending nodes' workers
// are alive (checkStragglers); the gone ones are returned, and every
// pending rank cancelled.
func (r *run) await(ctx workflow.Context, futures []workflow.Future, cancel workflow.CancelFunc) ([]spec.ChunkResult, []error, []spec.PeerFailure) {
	n := len(futures)
	results := make([]spec.ChunkResult, n)
	errs := make([]error, n)
	done := make([]bool, n)
	sel := workflow.NewSelector(ctx)
	for i, f := range futures {
		sel.AddFuture(f, func(f workflow.Future) {
			errs[i] = f.Get(ctx, &results[i])
			done[i] = true
		})
	}
	tctx, stopTimer := workflow.WithCancel(ctx)
	defer stopTimer()
	cancelled, timing, checking := false, false, false
	var gone []spec.PeerFailure
	for slices.Contains(done, false) {
		sel.Select(ctx)
		switch {
		case cancelled:
		case r.onlyBlamedPending(done, errs) || hopeless(done, errs):
			cancelled = true
			cancel()
		case !timing && blamedPending(done, errs) && r.blameGraceOn(ctx):
			timing = true
			sel.AddFuture(workflow.NewTimerWithOptions(tctx, blameGrace, workflow.TimerOptions{
				Summary: "some ranks name a peer that has not answered: wait for its word, then cancel the rest"}), func(f workflow.Future) {
				if f.Get(ctx, nil) == nil && !cancelled {
					workflow.GetLogger(ctx).Info("ranks not blamed by their peers cancelled after the grace", "grace", blameGrace)
					cancelled = true
					cancel()
				}
			})
		case !checking && straggling(done, errs) && r.stragglerCheckOn(ctx):
			checking = true
			live := func() bool { return !cancelled && straggling(done, errs) }
			r.checkStragglers(ctx, tctx, sel, done, results, live, func(pfs []spec.PeerFailure) {
				gone, cancelled = pfs, true
				cancel()
			})
		}
	}
	return results, errs, gone
}

// straggling: some ranks reported, all of them success, and some have not.
func straggling(done []bool, errs []error) bool {
	reported := 0
	for i, d := range done {
		if d {
			if errs[i] != nil {
				return false
			}
			reported++
		}
	}
	return reported > 0 && reported < len(done)
}

// stragglerWait is how long the ranks still pending after the others
// finished a chunk may take before a finished node is asked whether their
// workers are alive (a live rank 0 may still be saving a checkpoint or
// evaluating: it is asked about, not blamed).
const stragglerWait = 500 * time.Millisecond

// versionStragglerCheck: await asks a finished node about ranks still
// pending after the others finished (before, a rank that died after the
// chunk's last collective was found by its heartbeat timeout). Asked when
// the case first arises.
const versionStragglerCheck = "straggler-check"

func (r *run) stragglerCheckOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionStragglerCheck, workflow.DefaultVersion, 1) >= 1
}

// checkStragglers asks, stragglerWait from now and then at doubling
// intervals while live holds (until the heartbeat timeout, which finds a
// dead rank anyway), the lowest finished rank's node whether the pending
// ranks' workers are alive (CheckNodes). The first answer naming any gone
// goes to onGone, with the step the chunk ended at. A check that fails
// (the asked node is gone too, or runs a build without CheckNodes) counts
// as "alive"; the next one is still scheduled.
func (r *run) checkStragglers(ctx, tctx workflow.Context, sel workflow.Selector, done []bool, results []spec.ChunkResult,
	live func() bool, onGone func([]spec.PeerFailure)) {
	start, wait := workflow.Now(ctx), stragglerWait
	var next func()
	next = func() {
		if workflow.Now(ctx).Sub(start)+wait >= r.spec.HeartbeatTimeout.D() {
			return
		}
		timer := workflow.NewTimerWithOptions(tctx, wait, workflow.TimerOptions{
			Summary: "some nodes finished: then ask one whether the others are alive"})
		sel.AddFuture(timer, func(f workflow.Future) {
			if f.Get(ctx, nil) != nil || !live() {
				return
			}
			asker := slices.Index(done, true)
			var pending []int
			for i, d := range done {
				if !d {
					pending = append(pending, i)
				}
			}
			node := r.st.Membership.Nodes[asker]
			in := spec.CheckNodesInput{Membership: r.st.Membership, Ranks: pending}
			check := workflow.ExecuteActivity(checkOptions(tctx, node, pending), spec.ActivityCheckNodes, in)
			sel.AddFuture(check, func(f workflow.Future) {
				var answer []spec.PeerFailure
				err := f.Get(ctx, &answer)
				if !live() {
					return
				}
				var pfs []spec.PeerFailure // only ranks asked about
				for _, pf := range answer {
					if slices.Contains(pending, pf.Rank) {
						pf.Step = results[asker].To
						pfs = append(pfs, pf)
					}
				}
				if err == nil && len(pfs) > 0 {
					workflow.GetLogger(ctx).Warn("pending ranks' nodes are gone", "asked", node.ID, "gone", len(pfs))
					onGone(pfs)
					return
				}
				wait *= 2
				next()
			})
		})
	}
	next()
}

// errTypeNodeGone is the failure of a chunk whose pending ranks' nodes
// were found gone (await).
const errTypeNodeGone = "NodeGone"

// blameGrace is how long ranks that no peer blames may still report once
// a pending rank has been blamed (see await).
const blameGrace = 500 * time.Millisecond

// versionBlameGrace: await cancels unblamed pending ranks after
// blameGrace (histories from before it waited for their heartbeat
// timeout).
const versionBlameGrace = "blame-grace"

func (r *run) blameGraceOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionBlameGrace, workflow.DefaultVersion, 1) >= 1
}

// blamedPending: every finished rank failed with PeerFailed, and one of
// them blames a rank that is still pending.
func blamedPending(done []bool, errs []error) bool {
	blamed, ok := peerBlames(done, errs)
	if !ok {
		return false
	}
	for i := range done {
		if !done[i] && blamed[i] {
			return true
		}
	}
	return false
}

// peerBlames is the set of ranks the finished ranks blame, and whether
// every finished rank failed with PeerFailed.
func peerBlames(done []bool, errs []error) (map[int]bool, bool) {
	blamed := map[int]bool{}
	for i := range done {
		if !done[i] {
			continue
		}
		pf, ok := peerFailed(errs[i])
		if !ok {
			return nil, false
		}
		blamed[pf.Rank] = true
	}
	return blamed, true
}

// heldOtherDataPending: a finished rank blames a pending one for holding
// another data set (PeerFailure.Data). That node is alive and about to
// say so itself, in words that name its data: await waits blameGrace for
// it rather than cancel it at once. (Only newer node workers send Data:
// older histories never meet the case.)
func heldOtherDataPending(done []bool, errs []error) bool {
	for i := range done {
		if !done[i] {
			continue
		}
		if pf, ok := peerFailed(errs[i]); ok && pf.Data != nil && pf.Rank >= 0 && pf.Rank < len(done) && !done[pf.Rank] {
			return true
		}
	}
	return false
}

// hopeless: a rank failed for a reason other than losing a peer (it timed
// out — dead or stuck — or hit a real error). The group cannot finish the
// chunk, and ranks still waiting for it (in a collective, or still
// forming the group) would only wait out their own timeouts.
func hopeless(done []bool, errs []error) bool {
	for i := range done {
		if !done[i] || errs[i] == nil {
			continue
		}
		if _, ok := peerFailed(errs[i]); !ok {
			return true
		}
	}
	return false
}

// onlyBlamedPending: some rank failed, every finished rank failed with
// PeerFailed, and every pending rank is blamed by one of them.
func (r *run) onlyBlamedPending(done []bool, errs []error) bool {
	blamed, ok := peerBlames(done, errs)
	if !ok || heldOtherDataPending(done, errs) {
		return false
	}
	pending := 0
	for _, d := range done {
		if !d {
			pending++
		}
	}
	if pending == 0 || pending == len(done) {
		return false
	}
	for i := range done {
		if !done[i] && !blamed[i] {
			return false
		}
	}
	return true
}

// peerFailed decodes a PeerFailed error's detail.
func peerFailed(err error) (spec.PeerFailure, bool) {
	var ae *temporal.ApplicationError
	var pf spec.PeerFailure
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypePeerFailed || !ae.HasDetails() || ae.Details(&pf) != nil {
		return pf, false
	}
	return pf, true
}

// blame turns per-rank errors into one failure, or nil if all succeeded.
// A rank whose activity timed out is dead or stuck; otherwise the ranks its
// peers name are suspects, the most-named first — and of several named as
// often, those that never reported themselves (cancelled while pending)
// if any did: a rank that reported was alive then.
//
// gone are ranks a finished node found dead after the others had finished
// (await): theirs is the failure.
func (r *run) blame(ctx workflow.Context, from int64, started, seen time.Time, errs []error, gone []spec.PeerFailure) *chunkFailure {
	f := &chunkFailure{from: from, started: started, seen: seen, retryable: true}
	var timedOut, untaken []string
	blamed := map[int]int{}
	hostCannot := r.hostCannotLaunch(ctx, errs)
	for rank, err := range errs {
		if err == nil {
			continue
		}
		if f.first == nil {
			f.first = err
		}
		node := r.st.Membership.Nodes[rank].ID
		var te *temporal.TimeoutError
		var ce *temporal.CanceledError
		var ae *temporal.ApplicationError
		switch {
		case errors.As(err, &te):
			timedOut = append(timedOut, node)
			if te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
				untaken = append(untaken, node)
			}
			// Its last heartbeat says how far it got.
			var p spec.ChunkProgress
			if te.HasLastHeartbeatDetails() && te.LastHeartbeatDetails(&p) == nil {
				f.atStep = max(f.atStep, p.Step)
			}
		case errors.As(err, &ce):
			// Cancelled by await: its peers blamed it (counted below).
		case errors.As(err, &ae) && (ae.Type() == spec.ErrTypeCorruptCheckpoint || ae.Type() == spec.ErrTypeCheckpointGone):
			f.corrupt = true
		case errors.As(err, &ae) && (ae.Type() == spec.ErrTypeCheckpointNotHere || ae.Type() == spec.ErrTypeNodeUnfit):
			// (Types only newer node workers send: histories before them
			// never take this branch, so it needs no version.)
			f.addUnfit(node, ae.Message(), ae.Type() == spec.ErrTypeNodeUnfit)
			if ae.Type() == spec.ErrTypeNodeUnfit {
				var d spec.DataDisagreement
				if ae.HasDetails() && ae.Details(&d) == nil {
					f.onOtherData(node, d)
				}
			}
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeBadJob && hostCannot:
			f.addUnfit(node, ae.Message(), true)
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeNoState:
			f.lostState = append(f.lostState, node)
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeBucketNotShared:
			f.retryable = false
			if f.unshared == "" {
				f.unshared = ae.Message()
			}
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeCheckpointUnfit:
			// (A type only newer node workers send: no version.)
			f.retryable = false
			if f.unfitCkpt == "" {
				f.unfitCkpt = ae.Message()
			}
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypePeerFailed:
			if pf, ok := peerFailed(err); ok && pf.Rank >= 0 && pf.Rank < len(errs) {
				blamed[pf.Rank]++
				f.atStep = max(f.atStep, pf.Step)
				if pf.Data != nil { // (only newer node workers say it: no version)
					f.onOtherData(r.st.Membership.Nodes[pf.Rank].ID, *pf.Data)
				}
				if id := r.st.Membership.Nodes[pf.Rank].ID; pf.Unfit != "" && !slices.Contains(f.unfit, id) {
					// Unfit in its peers' words (an older build): as if it
					// had said so itself. (Only newer node workers say it.)
					f.addUnfit(id, pf.Unfit, true)
				}
				if f.noticed.IsZero() || pf.NoticedAt.Before(f.noticed) {
					f.noticed = pf.NoticedAt
				}
			}
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeTemporalUnreachable &&
			workflow.GetVersion(ctx, versionTemporalUnreachable, workflow.DefaultVersion, 1) >= 1:
			f.unreached = append(f.unreached, node)
			if f.unreachedWhy == "" {
				f.unreachedWhy = ae.Message()
			}
			// How far it got (newer node workers say it).
			var p spec.ChunkProgress
			if ae.HasDetails() && ae.Details(&p) == nil && p.Step > 0 &&
				workflow.GetVersion(ctx, versionUnreachedStep, workflow.DefaultVersion, 1) >= 1 {
				f.atStep = max(f.atStep, p.Step)
			}
		case errors.As(err, &ae) && ae.Type() == spec.ErrTypeCheckpointUnreachable:
			// (A type only newer node workers send: no version.) The
			// words of a node whose own read failed, where the ranks
			// compared their reads (every one says it then).
			u := &spec.CheckpointFailure{Step: from, Error: ae.Message()}
			if ae.HasDetails() {
				_ = ae.Details(u)
			}
			if f.unread == nil || (!slices.Contains(f.unread.Unread, f.unreadBy) && slices.Contains(u.Unread, node)) {
				f.unread, f.unreadBy = u, node
			}
		case errors.As(err, &ae) && ae.NonRetryable():
			f.retryable = false
		}
	}
	if f.first == nil {
		return nil
	}
	for _, id := range f.unreached {
		// Alive, as it said itself: its peers lost it because the SDK
		// stopped its chunk, not because it failed.
		if rank := slices.Index(r.st.Membership.NodeIDs(), id); rank >= 0 {
			delete(blamed, rank)
		}
	}
	var ce *temporal.CanceledError
	if errors.As(f.first, &ce) {
		for _, err := range errs {
			if err != nil && !errors.As(err, &ce) {
				f.cause = err
				break
			}
		}
	}
	switch {
	case f.unshared != "":
		f.reason = f.unshared // (not the peers' words: it is no node's loss)
	case f.unfitCkpt != "":
		f.reason = f.unfitCkpt // (nor is this)
	case f.corrupt:
		f.reason = message(f.first)
		for _, err := range errs {
			var ae *temporal.ApplicationError
			if errors.As(err, &ae) && (ae.Type() == spec.ErrTypeCorruptCheckpoint || ae.Type() == spec.ErrTypeCheckpointGone) {
				f.reason = ae.Message()
				break
			}
		}
	case len(f.unfit) > 0:
		// Theirs is the failure, whatever their peers said of them.
		f.failed = f.unfit
		f.reason = f.unfitWhy[0]
		if n := len(f.unfit); n > 1 {
			f.reason += fmt.Sprintf(" (and %d more: %s)", n-1, strings.Join(f.unfit[1:], " "))
		}
	case len(timedOut) > 0:
		f.failed = timedOut
		f.reason = timeoutReason(timedOut, untaken)
		f.allSilent = len(timedOut) == len(errs) && len(untaken) == 0
	case len(gone) > 0:
		for _, pf := range gone {
			f.failed = append(f.failed, r.st.Membership.Nodes[pf.Rank].ID)
			f.atStep = max(f.atStep, pf.Step)
			if f.noticed.IsZero() || pf.NoticedAt.Before(f.noticed) {
				f.noticed = pf.NoticedAt
			}
		}
		f.reason = fmt.Sprintf("node(s) %v gone before reporting, after the other nodes finished (their workers' listeners refuse connections)", f.failed)
		f.cause = temporal.NewApplicationError(f.reason, errTypeNodeGone)
	case len(blamed) > 0:
		top := 0
		for _, n := range blamed {
			top = max(top, n)
		}
		var tied []int
		for _, rank := range workflow.DeterministicKeys(blamed) {
			if blamed[rank] == top {
				tied = append(tied, rank)
			}
		}
		if silent := silentRanks(tied, errs); len(silent) > 0 && len(silent) < len(tied) &&
			workflow.GetVersion(ctx, versionSilentSuspects, workflow.DefaultVersion, 1) >= 1 {
			tied = silent
		}
		for _, rank := range tied {
			f.failed = append(f.failed, r.st.Membership.Nodes[rank].ID)
		}
		// In the peers' words: the first error may be the lost rank's own
		// activity, cancelled once its peers named it.
		said := f.first
		if f.cause != nil {
			said = f.cause
		}
		f.reason = fmt.Sprintf("peers lost node(s) %v: %s", f.failed, message(said))
	case len(f.unreached) > 0:
		f.reason, f.unreachedOnly = f.unreachedWhy, true
		if n := len(f.unreached); n > 1 {
			f.reason += fmt.Sprintf(" (and %d more: %s)", n-1, strings.Join(f.unreached[1:], " "))
		}
	case f.unread != nil:
		f.reason, f.storageDown = f.unread.Error, true
	case len(f.lostState) > 0:
		// Alive, restarted: nobody is marked failed; the new generation
		// restores every rank from the last committed checkpoint.
		f.reason = fmt.Sprintf("node(s) %v restarted and lost their state", f.lostState)
	default:
		f.reason, f.reasonIsFirst = message(f.first), true
	}
	return f
}

// versionHostCannotLaunch: a node that cannot launch an external job
// (BadJob: no such program, its workdir missing) is the failed node,
// replaced and marked misconfigured, when the job has trained before and
// another node of the world did not fail so — the job is sound, that host
// lacks it. Before, and still for a job that never trained or that no
// node launches (a typo), BadJob fails the run. Asked only in that case.
const versionHostCannotLaunch = "host-cannot-launch"

// hostCannotLaunch: errs are a world's where some nodes, not all, failed
// as BadJob, and the run's job has trained before (a step or a
// checkpoint): those hosts are at fault, not the job.
func (r *run) hostCannotLaunch(ctx workflow.Context, errs []error) bool {
	bad := 0
	for _, err := range errs {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == spec.ErrTypeBadJob {
			bad++
		}
	}
	if bad == 0 || bad == len(errs) || (r.st.Status.Step == 0 && r.st.Status.LastCkpt == nil) {
		return false
	}
	return workflow.GetVersion(ctx, versionHostCannotLaunch, workflow.DefaultVersion, 1) >= 1
}

// storageTrouble handles a chunk or world whose checkpoint could not be
// stored (rank 0's ErrTypeCheckpointStorage; its detail names the step,
// else to): the first time since a checkpoint was stored it is noted in
// the status and the chunk is retried like any failure (the storage may
// have hiccuped); when one had already failed — in the background, or
// such a chunk before — the run gives up instead of rewinding and
// retraining for a bucket that keeps refusing (full, gone, not allowed).
// Its stored checkpoints stay; the status says which failed.
func (r *run) storageTrouble(ctx workflow.Context, f *chunkFailure, errs []error, to int64) {
	var failed *spec.CheckpointFailure
	for _, err := range errs {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == spec.ErrTypeCheckpointStorage {
			failed = &spec.CheckpointFailure{Step: to, Error: ae.Message()}
			if ae.HasDetails() {
				_ = ae.Details(failed) // else the chunk's end
			}
			break
		}
	}
	if failed == nil {
		return
	}
	s := &r.st.Status
	if earlier := s.CheckpointFailed; earlier != nil &&
		workflow.GetVersion(ctx, versionStorageGivesUp, workflow.DefaultVersion, 1) >= 1 {
		f.retryable = false
		which := fmt.Sprintf("the checkpoint at step %d could not be stored, nor now the one at %d", earlier.Step, failed.Step)
		if earlier.Step == failed.Step {
			which = fmt.Sprintf("the checkpoint at step %d could not be stored, twice", failed.Step)
		}
		f.reason = fmt.Sprintf("checkpoint storage keeps failing: %s "+
			"(the run's stored checkpoints are kept; fix the bucket and start again from them): %s", which, failed.Error)
	}
	r.refused(ctx, failed)
}

// refused records f, a checkpoint the bucket refused, in the status (until
// one at its step or later is stored) and the refusals metric.
func (r *run) refused(ctx workflow.Context, f *spec.CheckpointFailure) {
	r.st.Status.CheckpointFailed = f
	r.metrics(ctx).Counter(metricCkptRefused).Inc(1)
}

// versionStorageGivesUp: a chunk whose checkpoint could not be stored,
// after an earlier one could not either, fails the run (before: retried
// like any failure, up to max_restarts). Asked only then.
const versionStorageGivesUp = "storage-gives-up"

// timeoutReason says why the timed-out nodes are presumed dead: silent
// while they trained, or their task never taken (nobody polled their
// queue: the worker is gone, or hangs).
func timeoutReason(timedOut, untaken []string) string {
	if len(untaken) == 0 {
		return fmt.Sprintf("node(s) %v stopped heartbeating", timedOut)
	}
	silent := slices.DeleteFunc(slices.Clone(timedOut), func(n string) bool { return slices.Contains(untaken, n) })
	why := fmt.Sprintf("node(s) %v never took their task (no worker polled their queue)", untaken)
	if len(silent) > 0 {
		why = fmt.Sprintf("node(s) %v stopped heartbeating; %s", silent, why)
	}
	return why
}

// versionSilentSuspects: of ranks blamed equally often, blame keeps those
// that never reported (before: all of them). Asked only when the two
// differ.
const versionSilentSuspects = "silent-suspects"

// silentRanks are the ranks among ranks whose activity never reported:
// cancelled while pending, or timed out.
func silentRanks(ranks []int, errs []error) []int {
	var out []int
	for _, rank := range ranks {
		var ce *temporal.CanceledError
		var te *temporal.TimeoutError
		if errors.As(errs[rank], &ce) || errors.As(errs[rank], &te) {
			out = append(out, rank)
		}
	}
	return out
}

// preferCause replaces a cancellation that stands for a failure's first
// error — the ranks await cancelled after another rank failed — with that
// rank's own error, so that the run's reason says what went wrong and a
// run that gives up ends Failed, not Canceled.
func (r *run) preferCause(ctx workflow.Context, f *chunkFailure) {
	if f.cause == nil {
		return
	}
	if workflow.GetVersion(ctx, versionFailureCause, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	f.first = f.cause
	if f.reasonIsFirst {
		f.reason = message(f.cause)
	}
}

// absorb folds a successful chunk into the run's status; planned is the
// step it was to reach (its ranks may have ended it earlier).
func (r *run) absorb(ctx workflow.Context, results []spec.ChunkResult, planned int64) {
	s := &r.st.Status
	var start, end time.Time
	var samples, secs, comm float64
	for i, res := range results {
		if i == 0 || res.StartedAt.Before(start) {
			start = res.StartedAt
		}
		if res.EndedAt.After(end) {
			end = res.EndedAt
		}
		samples += res.SamplesPerSec
		secs = max(secs, res.Seconds)
		comm += res.CommShare / float64(len(results))
	}
	if !r.st.LastChunkEnd.IsZero() && !start.IsZero() {
		r.st.IdleSum += start.Sub(r.st.LastChunkEnd).Seconds()
		r.st.IdleCount++
		s.ChunkIdleSeconds = r.st.IdleSum / float64(r.st.IdleCount)
	}
	r.st.LastChunkEnd = end
	lead := results[0]
	if f := lead.CheckpointFailed; f != nil {
		r.refused(ctx, f)
		workflow.GetLogger(ctx).Warn("a checkpoint's upload failed; the run keeps its older ones", "step", f.Step, "error", f.Error)
	}
	r.countChunk(lead, secs)
	s.Step = lead.To
	s.SamplesPerSec = samples
	m := r.metrics(ctx)
	m.Gauge(metricStep).Update(float64(s.Step))
	m.Gauge(metricSamplesPerSec).Update(samples)
	s.CommShare = comm
	ranks := float64(len(results) * r.spec.LocalRanks())
	if one, ok := s.Topology.SingleRankSamplesPerSec(float64(r.spec.GlobalBatch()) / ranks); ok {
		s.ScalingEfficiency = samples / (ranks * one)
	}
	s.Crowded = crowded(results, r.spec.LocalRanks())
	r.absorbSync(results)
	r.noteSlow(ctx, results, planned)
	r.decideOnMeasure(ctx, results)
	r.recordSegment(start, end, lead.From, lead.To, results)
	if lead.EarlierCheckpoint != nil {
		r.commitCheckpoint(ctx, *lead.EarlierCheckpoint)
	}
	if lead.PendingCheckpoint != nil {
		p := *lead.PendingCheckpoint
		r.st.PendingCkpt = &p
	}
	if lead.Checkpoint != nil {
		r.st.ForceCheckpoint = false
		s.LastCkpt = lead.Checkpoint
		r.storedPast(ctx, lead.Checkpoint.Step)
		s.Checkpoints++
		r.st.Checkpoints = append(r.st.Checkpoints, *lead.Checkpoint)
		if len(r.st.Checkpoints) > keepCheckpointRefs {
			r.st.Checkpoints = r.st.Checkpoints[len(r.st.Checkpoints)-keepCheckpointRefs:]
		}
	}
	if lead.EvalMetric != "" {
		s.EvalMetric, s.EvalValue = lead.EvalMetric, lead.EvalValue
	}
	r.noteResumed(results)
	s.UpdatedAt = workflow.Now(ctx)
	r.publish(ctx)
}

// countChunk counts a chunk that trained lead's steps in secs (its
// slowest rank's time): its first loss when the run's first, its last
// loss, steps and time, the weights' hash it reached.
func (r *run) countChunk(lead spec.ChunkResult, secs float64) {
	s := &r.st.Status
	if s.Step == 0 {
		s.InitialLoss = lead.FirstLoss
	}
	r.st.TrainSeconds += secs
	r.st.StepsTrained += lead.To - lead.From
	if r.st.TrainSeconds > 0 {
		s.StepsPerSec = float64(r.st.StepsTrained) / r.st.TrainSeconds
	}
	if lead.To > lead.From {
		// A launch that trained nothing (an external job restored at its
		// last step) keeps the loss of the checkpoint it restored.
		s.Loss = lead.LastLoss
	}
	s.WeightsSHA256 = lead.WeightsSHA256
	s.Chunks++
	r.chunksNow++
}

// noteResumed completes the last recovery with the first step after it:
// when the slowest rank had it, and its loss — not one an earlier run of
// this name carried over (Resumption.Recoveries): this run's first step
// came after that run ended, maybe days later. (Status only: no command,
// so histories replay.)
func (r *run) noteResumed(results []spec.ChunkResult) {
	s := &r.st.Status
	n := len(s.Recoveries)
	if n == 0 || !s.Recoveries[n-1].ResumedAt.IsZero() {
		return
	}
	if k := len(s.Resumed); k > 0 && n <= s.Resumed[k-1].Recoveries {
		return
	}
	var first time.Time
	for _, res := range results {
		first = maxTime(first, res.FirstStepAt) // (a lost rank's is zero)
	}
	s.Recoveries[n-1].ResumedAt = first
	s.Recoveries[n-1].ResumeLoss = results[0].FirstLoss
}

// failureMarks are the Cluster's records of f's failed nodes: each names
// the worker process the run saw fail (a worker restarted meanwhile under
// the same ID is healthy, and the run may take it back at once), and an
// unfit node is failed in its own words — as misconfigured when it lacks
// the data set, or holds another than the run's. A node that holds
// another and registered it (so that the run's next acquires pass it
// over) is not failed but given back, fit for runs on its data set.
func (r *run) failureMarks(f *chunkFailure) []spec.MarkFailed {
	var marks []spec.MarkFailed
	for _, id := range f.failed {
		var node spec.Node
		if i := slices.IndexFunc(r.st.Membership.Nodes, func(n spec.Node) bool { return n.ID == id }); i >= 0 {
			node = r.st.Membership.Nodes[i]
		}
		why := f.reason
		if i := slices.Index(f.unfit, id); i >= 0 {
			why = f.unfitWhy[i] // (not the first unfit node's words)
		}
		mf := spec.MarkFailed{NodeID: id, RunID: r.st.Status.RunID, Reason: why, Incarnation: node.Incarnation,
			Misconfigured: slices.Contains(f.misconfigured, id)}
		if has, ok := f.otherData[id]; ok {
			// (As its peers found it, if it did not say so itself.)
			mf.OtherData = has == node.DataSHA256
			mf.Misconfigured = !mf.OtherData
		}
		marks = append(marks, mf)
	}
	return marks
}

// dropOtherData adds to f's failed nodes those of the membership that
// registered another data set than the run's (f.runData, once the run's
// own): they would
// refuse the next chunk, each costing a restart — and the first that
// said so cancelled the others before they could.
func (r *run) dropOtherData(f *chunkFailure) {
	for _, n := range r.st.Membership.Nodes {
		if n.DataSHA256 == "" || n.DataSHA256 == f.runData || slices.Contains(f.failed, n.ID) {
			continue
		}
		why := fmt.Sprintf("node %s registered data set sha256 %s…, not the run's (%s…)", n.ID, spec.ShortSHA256(n.DataSHA256), spec.ShortSHA256(f.runData))
		f.failed = append(slices.Clip(f.failed), n.ID) // (f.failed may be f.unfit: blame)
		f.addUnfit(n.ID, why, false)
		f.onOtherData(n.ID, spec.DataDisagreement{Run: f.runData, Node: n.DataSHA256})
	}
}

// recover handles a failed chunk: mark the blamed nodes failed, re-fill the
// membership (keeping healthy nodes in their ranks), start a new generation
// and rewind to the last committed checkpoint. It returns an error when the
// failure is not recoverable or the restart budget is spent.
func (r *run) recover(ctx workflow.Context, err error) error {
	if ctx.Err() != nil {
		return err // the workflow was cancelled, and its chunks with it
	}
	var f *chunkFailure
	if !errors.As(err, &f) {
		return err
	}
	if !f.retryable {
		if f.unfitCkpt != "" {
			r.st.Status.CheckpointUnfit = true
		}
		return fmt.Errorf("not retryable: %w", f)
	}
	if f.storageDown && !r.cutOff(ctx, f) && workflow.GetVersion(ctx, versionLoadWaits, workflow.DefaultVersion, 1) >= 1 {
		return r.waitToLoad(ctx, f)
	}
	r.st.StorageWait = 0 // (a hold for a checkpoint to read is over)
	outage := f.allSilent && workflow.GetVersion(ctx, versionServiceOutage, workflow.DefaultVersion, 1) >= 1 &&
		r.answerAfterSilence(ctx, f)
	if f.unreachedOnly && r.st.Unreached < maxFreeUnreached {
		// A stall of Temporal shorter than the heartbeat timeout: as an
		// outage — the same nodes, no restart counted — a few times in a
		// row (a node that never reaches Temporal must not relaunch for
		// ever).
		r.st.Unreached++
		outage = true
		f.reason += "; restarted on the same nodes, no restart counted"
	}
	if !f.stopped && !outage && r.stoppingOnly(f) &&
		workflow.GetVersion(ctx, versionStoppingNoRestart, workflow.DefaultVersion, 1) >= 1 {
		f.stopped = true
		f.reason += " (its worker was stopping, SIGTERM: no restart counted)"
	}
	if !f.stopped && !outage && r.cameBackOnly(f) &&
		workflow.GetVersion(ctx, versionStoppedCameBack, workflow.DefaultVersion, 1) >= 1 {
		f.stopped = true
		f.reason = cameBackWhy(f.lostState)
	}
	r.st.CameBack = nil // (every rank restores from the last checkpoint now)
	// Replacements that count against max_restarts: not after an outage,
	// nor of a stopping worker's node or of one cut off from the bucket.
	counted := !outage && !f.stopped && !f.cutOff
	if f.corrupt && workflow.GetVersion(ctx, versionCorruptNoRestart, workflow.DefaultVersion, 1) >= 1 {
		// A bad checkpoint lost no node: falling back past it costs no
		// restart (each such recovery drops one checkpoint, so they end).
		counted = counted && !f.storageOnly()
	}
	if r.st.Restarts >= r.spec.MaxRestarts && counted {
		if r.spec.MaxRestarts == spec.NoRestarts {
			return fmt.Errorf("no restarts allowed (max_restarts: 0): %w", f)
		}
		return fmt.Errorf("gave up after %d restart(s): %w", r.st.Restarts, f)
	}
	if f.corrupt && len(r.st.Checkpoints) <= 1 && len(r.st.Status.Resumed) > 0 {
		// (Only resumed runs: RunInput.Resume.) Starting over from step
		// 0 would train over the earlier run's checkpoints.
		return fmt.Errorf("%w; this resumed run knows no earlier checkpoint to fall back to: `cann-train checkpoint verify %s` names the good ones", f, r.spec.Name)
	}
	if counted {
		r.st.Restarts++
	}
	r.setPhase(ctx, spec.PhaseRecovering)
	workflow.GetLogger(ctx).Warn("chunk failed; recovering", "error", f.Error(), "failed", f.failed)
	if f.corrupt {
		r.dropLastCheckpoint(ctx, f.reason)
		if workflow.GetVersion(ctx, versionSkipGone, workflow.DefaultVersion, 1) >= 1 {
			r.dropGone(ctx)
		}
	}
	if r.st.DataSHA256 == "" && f.runData != "" {
		// The run's data set, as its nodes found it (and told the unfit
		// ones): the next acquire passes over free nodes holding another,
		// and the next chunk's nodes check theirs against it.
		r.st.DataSHA256, r.st.Status.DataSHA256 = f.runData, f.runData
		r.noteDataChange(ctx)
	}
	if f.runData != "" && f.runData == r.st.DataSHA256 {
		r.dropOtherData(f)
	}
	marks := r.failureMarks(f)
	withAcquire := len(marks) > 0 && workflow.GetVersion(ctx, versionFailedWithAcquire, workflow.DefaultVersion, 1) >= 1
	if withAcquire {
		r.failedNodes = marks
	} else {
		r.signalFailed(ctx, marks)
	}
	before := slices.Clone(r.st.Membership.NodeIDs())
	// Without a spare, go on with the healthy nodes (at least min_nodes)
	// rather than wait for one.
	minCount := 0
	if workflow.GetVersion(ctx, versionShrinkOnFailure, workflow.DefaultVersion, 1) >= 1 {
		if least := r.minNodes(ctx); least < r.size() {
			minCount = least
		}
	}
	// Say why the run waits (status, dashboard, Web UI) while it does.
	prevDetail := r.st.Status.Detail
	if len(f.failed) > 0 {
		r.st.Status.Detail = fmt.Sprintf("replacing %s, lost in the %s from step %d", strings.Join(f.failed, " "), f.unit(), f.from)
		if f.stopped {
			// (Not lost: its worker stopped on purpose.)
			r.st.Status.Detail = fmt.Sprintf("replacing %s, whose worker stopped, at step %d", strings.Join(f.failed, " "), f.from)
		}
	}
	if outage {
		// The same nodes, still the run's: a new generation of them.
		r.st.Membership.Generation++
		r.st.Status.Generation = r.st.Membership.Generation
		err = nil
	} else {
		err = r.acquireNodes(ctx, spec.PhaseAcquiring, r.size(), minCount)
	}
	r.st.Status.Detail = prevDetail
	if err != nil {
		if withAcquire {
			r.signalFailed(ctx, marks) // the Cluster may not have seen the request
		}
		// (Why they were lost: the last word a failed run has of it.)
		return fmt.Errorf("replace node(s) %v (%s): %w", f.failed, f.reason, err)
	}
	shrunk := len(r.st.Membership.Nodes) < len(before)
	var replacement, back, removed []string
	failedIDs := slices.Concat(f.failed, f.lostState)
	after := r.st.Membership.NodeIDs()
	for _, id := range after {
		switch {
		case !slices.Contains(before, id):
			replacement = append(replacement, id)
		case slices.Contains(failedIDs, id):
			back = append(back, id)
		}
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			removed = append(removed, id)
		}
	}
	reason := f.reason
	if also := r.alsoStopping(before, removed, failedIDs); len(also) > 0 {
		// (State only: the Cluster was told of them when their workers
		// left it.)
		named := slices.DeleteFunc(slices.Clone(before), func(id string) bool {
			return !slices.Contains(failedIDs, id) && !slices.Contains(also, id)
		})
		for _, id := range failedIDs {
			if !slices.Contains(named, id) {
				named = append(named, id) // (not a member: none so far)
			}
		}
		failedIDs = named
		if f.endedEarly {
			reason = stoppedWhy(failedIDs, f.from)
		} else {
			reason += fmt.Sprintf("; the worker of %s was stopping too: moved off with it", strings.Join(also, ", "))
		}
	}
	if err := r.resolvePending(ctx); err != nil {
		return err
	}
	resume := int64(0)
	if r.st.Status.LastCkpt != nil {
		resume = r.st.Status.LastCkpt.Step
	}
	now := workflow.Now(ctx)
	// The failure came in the chunk and after the checkpoint resumed from
	// (a silent node's last heartbeat may say less, an error that names no
	// step nothing).
	failedAt := max(f.atStep, f.from, resume)
	rec := spec.Recovery{
		Generation:     r.st.Membership.Generation,
		FailedNodes:    failedIDs,
		Replacement:    replacement,
		Back:           back,
		Removed:        removed,
		Nodes:          len(r.st.Membership.Nodes),
		Reason:         reason,
		AtStep:         f.from,
		FailedAtStep:   failedAt,
		ResumeStep:     resume,
		NoticedAt:      f.noticed,
		SeenAt:         f.seen,
		ReplacedAt:     now,
		DetectSeconds:  f.seen.Sub(f.started).Seconds(),
		ReplaceSeconds: now.Sub(f.seen).Seconds(),
		Shrunk:         shrunk,
		Outage:         outage,
		Stopped:        f.stopped,
	}
	if shrunk {
		r.shrank(ctx, len(before))
		workflow.GetLogger(ctx).Warn("no spare node free; training on with fewer nodes",
			"nodes", len(r.st.Membership.Nodes), "before", len(before), "min_nodes", r.spec.MinNodes)
	}
	rec.LostSteps = failedAt - resume
	// No node said how far the chunk got: every heartbeat stopped (their
	// details lost with a restarted server) or none reached Temporal. Its
	// steps since resume were lost, how many unknown.
	rec.StepUnknown = outage && f.atStep == 0
	r.st.Status.Recoveries = append(r.st.Status.Recoveries, rec)
	r.st.Status.Step = resume
	r.st.LastChunkEnd = time.Time{}
	if outage && workflow.GetVersion(ctx, versionOutagePhase, workflow.DefaultVersion, 1) >= 1 {
		// The acquire that says "training" after other recoveries is
		// skipped: an external job's relaunch sets no phase, and its run
		// read "recovering" to its end.
		r.setPhase(ctx, spec.PhaseTraining)
		return nil
	}
	r.publish(ctx)
	return nil
}

// versionUnreachedStep: a node's TemporalUnreachable error says the step
// it reached (its details, from newer node workers), which the recovery
// counts as how far the chunk got; before, a stall's recovery said "0
// steps lost" (watch audit #2). Asked only for such an error.
const versionUnreachedStep = "unreached-step"

// versionOutagePhase: a recovery that goes on on the same nodes (an
// outage, a stall of Temporal) sets the phase back to training; before,
// an external job's run said "recovering" until it ended (external audit
// #2). Asked only then.
const versionOutagePhase = "outage-phase"

// versionTemporalUnreachable: a chunk or world stopped only because its
// nodes' heartbeats did not reach Temporal — the SDK retries one for
// about a second, then stops the activity (TemporalUnreachable) — goes on
// on the same nodes, blaming none and counting no restart, up to
// maxFreeUnreached times in a row without a checkpoint committed. Before,
// a stall of the server of a few seconds, shorter than the heartbeat
// timeout, read "context canceled" and spent a restart: four such stalls
// failed a run (external audit #1). Asked only for that error type.
const versionTemporalUnreachable = "temporal-unreachable"

// maxFreeUnreached bounds the recoveries in a row from Temporal stalls
// that count no restart.
const maxFreeUnreached = 3

// versionCorruptNoRestart: a chunk that failed only because the
// checkpoint it restored from is corrupt or gone — no node lost, none
// unfit — counts no restart; before, each corrupt checkpoint spent one of
// max_restarts, and a run with more corrupt newest checkpoints than that
// failed without trying the good one before them, and its resume hint
// named the corrupt one. Asked only for a corrupt checkpoint.
const versionCorruptNoRestart = "corrupt-no-restart"

// storageOnly: f is a bad checkpoint's alone — no node failed, lost its
// state, or was found unfit.
func (f *chunkFailure) storageOnly() bool {
	return f.corrupt && len(f.failed) == 0 && len(f.lostState) == 0 && len(f.unfit) == 0
}

// versionStoppingNoRestart: a failure whose every failed node the Cluster
// said is stopping (spec.Evict.Stopping: its worker got SIGTERM) — a
// chunk or an external world that did not reach a checkpoint within the
// worker's stop grace, and was cancelled there — counts no restart
// (Recovery.Stopped), as a chunk that ended at a checkpoint for the stop
// does; the steps since the last checkpoint are lost all the same.
// Before, each such stop spent one of max_restarts: a rolling upgrade of
// an external job's hosts could fail the run. Asked only then.
const versionStoppingNoRestart = "stopping-no-restart"

// stoppingOnly: f failed nodes, and only nodes the run was told are
// stopping (noteEvict).
func (r *run) stoppingOnly(f *chunkFailure) bool {
	if len(f.failed) == 0 || len(f.lostState) > 0 || f.corrupt {
		return false
	}
	for _, id := range f.failed {
		if !r.saidStopping(id) {
			return false
		}
	}
	return true
}

// versionStoppedCameBack: a chunk that failed only because nodes whose
// workers were stopped on purpose (SIGTERM) and registered again while
// the run held them between chunks — paused, or waiting for a green
// window — hold no state (NoState: RunState.CameBack) counts no restart
// (Recovery.Stopped), as a stop in the middle of a chunk does, and its
// recovery says so. Before, each such stop and restart of a paused run's
// node worker spent one of max_restarts ("restarted and lost their
// state"): a rolling upgrade during a pause could fail the run. Asked
// only then.
const versionStoppedCameBack = "stopped-came-back"

// cameBackOnly: f failed only because nodes lost their state, and every
// one of them is a node whose worker the run knows was stopped and came
// back while it held it (RunState.CameBack).
func (r *run) cameBackOnly(f *chunkFailure) bool {
	if len(f.lostState) == 0 || len(f.failed) > 0 || f.corrupt || len(f.unfit) > 0 || !f.retryable {
		return false
	}
	for _, id := range f.lostState {
		if !slices.Contains(r.st.CameBack, id) {
			return false
		}
	}
	return true
}

// cameBackWhy says that the workers of nodes were stopped and came back
// while the run held them between chunks.
func cameBackWhy(nodes []string) string {
	if len(nodes) == 1 {
		return fmt.Sprintf("node %s's worker was stopped (SIGTERM) and registered again while the run held it between chunks: "+
			"its new process holds no state, so every rank resumed from the last checkpoint (a planned stop: no restart counted)", nodes[0])
	}
	return fmt.Sprintf("the workers of nodes %s were stopped (SIGTERM) and registered again while the run held them between chunks: "+
		"their new processes hold no state, so every rank resumed from the last checkpoint (a planned stop: no restart counted)", strings.Join(nodes, ", "))
}

// saidStopping: the run was told that node id's worker is stopping
// (noteEvict, Evict.Stopping).
func (r *run) saidStopping(id string) bool {
	return slices.ContainsFunc(r.st.Ctl.Evict, func(e spec.Evict) bool { return e.NodeID == id && e.Stopping })
}

// versionServiceOutage: when every node of a chunk or world timed out
// for want of heartbeats, recover first asks each node's worker to take a
// call (answerAfterSilence). Those that do were alive: the service, or
// the nodes' way to it, was out for longer than the heartbeat timeout —
// every heartbeat of that while was lost, not the nodes. When all answer
// the run resumes on them from its last checkpoint (a new generation),
// marks nobody failed and counts no restart; before, it failed every
// node, waited for other nodes or for theirs to come back (a lease TTL),
// and spent a restart on each outage. Asked only then.
const versionServiceOutage = "service-outage"

// silenceAnswerWithin is how long a node silent in a chunk may take to
// take answerAfterSilence's call: after an outage the workers' pollers
// come back within their backoff (up to 10 s in the SDK).
const silenceAnswerWithin = 20 * time.Second

// answerAfterSilence asks the worker of every node f found silent to take
// a call on its queue (CheckNodes asking about nobody), all at once, and
// narrows f.failed to those that did not. It reports whether all did:
// then f.failed is empty and f.reason says what happened.
func (r *run) answerAfterSilence(ctx workflow.Context, f *chunkFailure) bool {
	var futures []workflow.Future
	var nodes []string
	for _, n := range r.st.Membership.Nodes {
		if !slices.Contains(f.failed, n.ID) {
			continue
		}
		actx := nodeCallOptions(ctx, n, max(toStart(r.spec), silenceAnswerWithin), 10*time.Second,
			"every node went silent: is "+n.ID+"'s worker there?")
		futures = append(futures, workflow.ExecuteActivity(actx, spec.ActivityCheckNodes,
			spec.CheckNodesInput{Membership: r.st.Membership}))
		nodes = append(nodes, n.ID)
	}
	var silent []string
	for i, fut := range futures {
		if fut.Get(ctx, nil) != nil {
			silent = append(silent, nodes[i])
		}
	}
	if len(silent) > 0 {
		if len(silent) < len(nodes) {
			f.failed = silent
			f.reason = timeoutReason(silent, nil) + " (the others answer)"
		}
		return false
	}
	f.failed = nil
	f.reason = fmt.Sprintf("every node's heartbeats stopped at once for over heartbeat_timeout (%s) and every node answers now: "+
		"the Temporal service, or the nodes' way to it, was out; no node failed", r.spec.HeartbeatTimeout.D())
	return true
}

// versionFailedWithAcquire: a recovery tells the Cluster which nodes
// failed in its acquire request (AcquireRequest.Failed) instead of one
// mark-failed signal per node, awaited before it — one round trip less
// between seeing a failure and the new membership. Asked only when nodes
// are marked failed.
const versionFailedWithAcquire = "failed-with-acquire"

// signalFailed tells the Cluster of failures by signal, each awaited.
func (r *run) signalFailed(ctx workflow.Context, marks []spec.MarkFailed) {
	for _, mf := range marks {
		_ = workflow.SignalExternalWorkflow(ctx, r.clusterID, "", spec.SignalMarkFailed, mf).Get(ctx, nil)
	}
}

// message is an activity error's own message, without the wrapping chain.
func message(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Message()
	}
	return err.Error()
}

// failureMessage is err's text for people (the status, the dashboard):
// an activity's failure in its cause's own words, without the IDs and
// error types Temporal adds to its text.
func failureMessage(err error) string {
	text := err.Error()
	var ae *temporal.ActivityError
	if errors.As(err, &ae) {
		if cause := errors.Unwrap(ae); cause != nil {
			text = strings.Replace(text, ae.Error(), message(cause), 1)
		}
	}
	return text
}

// keepCheckpointRefs bounds how far back a run can fall on corruption.
const keepCheckpointRefs = 8

// versionSkipGone: a recovery that falls back past a corrupt or deleted
// checkpoint looks the ones before it up in the bucket, newest first, and
// falls back past those that are gone too (dropGone); before, each took a
// restart of its own — a deleted run directory cost one per checkpoint
// the run knew (up to eight), and failed the run once max_restarts ran
// out. Asked only then.
const versionSkipGone = "skip-gone-checkpoints"

// dropGone drops, newest first, the checkpoints the run would resume
// from whose manifest is no longer in their bucket (NoSuchCheckpoint),
// and stops at the first one there, or when the bucket does not answer
// (the restore then says what it finds). A resumed run keeps its oldest:
// it must not start over on top of the earlier run's checkpoints.
func (r *run) dropGone(ctx workflow.Context) {
	for last := r.st.Status.LastCkpt; last != nil; last = r.st.Status.LastCkpt {
		if len(r.st.Checkpoints) <= 1 && len(r.st.Status.Resumed) > 0 {
			return
		}
		_, err := resolveCheckpoint(ctx, *last, impatient)
		if err == nil || !isType(err, spec.ErrTypeNoSuchCheckpoint) {
			return
		}
		r.dropLastCheckpoint(ctx, "gone too: "+message(err))
	}
}

// dropLastCheckpoint forgets the checkpoint that failed verification, so
// the run resumes from the one before it (or from step 0).
func (r *run) dropLastCheckpoint(ctx workflow.Context, why string) {
	bad := r.st.Status.LastCkpt
	if n := len(r.st.Checkpoints); n > 0 {
		r.st.Checkpoints = r.st.Checkpoints[:n-1]
	}
	r.st.Status.LastCkpt = nil
	if n := len(r.st.Checkpoints); n > 0 {
		prev := r.st.Checkpoints[n-1]
		r.st.Status.LastCkpt = &prev
	}
	to := int64(0)
	if r.st.Status.LastCkpt != nil {
		to = r.st.Status.LastCkpt.Step
	}
	var from int64 = -1
	if bad != nil {
		from = bad.Step
	}
	workflow.GetLogger(ctx).Warn("falling back to an earlier checkpoint", "corrupt_step", from, "resume_step", to, "why", why)
}

// noteDataChange warns when a resumed run trains on another data set
// than the run it resumes (the status names both): its checkpoint's
// weights and data position came from the other.
func (r *run) noteDataChange(ctx workflow.Context) {
	res := r.st.Status.Resumed
	if len(res) == 0 || r.st.DataSHA256 == "" {
		return
	}
	if was := res[len(res)-1].DataSHA256; was != "" && was != r.st.DataSHA256 {
		workflow.GetLogger(ctx).Warn("the run trains on another data set than the run it resumes",
			"data_sha256", r.st.DataSHA256, "resumed_data_sha256", was, "from_step", res[len(res)-1].FromStep)
	}
}

// crowded is the node of results with the fewest cores when it has fewer
// than ranks (nil otherwise, and for results that do not say: an external
// job's, or a worker before Cores).
func crowded(results []spec.ChunkResult, ranks int) *spec.CrowdedNode {
	var c *spec.CrowdedNode
	for _, res := range results {
		if res.Cores > 0 && res.Cores < ranks && (c == nil || res.Cores < c.Cores) {
			c = &spec.CrowdedNode{NodeID: res.NodeID, Ranks: ranks, Cores: res.Cores}
		}
	}
	return c
}

// nodeSpec is the spec a node's activity is given: the job's, its bucket
// pinned to the last checkpoint's where the job names none. A node saves
// into the job's checkpoint_url, else its worker's --checkpoint-url: with
// workers of different defaults a new rank 0 (a replacement, a rescale)
// moved the run's checkpoints to its own bucket unseen, where `checkpoint
// ls`, verify and gc, asking the last one, saw only those after the move.
// (Activity inputs only: no version.)
func (r *run) nodeSpec() spec.RunSpec {
	s := r.spec
	if last := r.st.Status.LastCkpt; s.CheckpointURL == "" && last != nil && last.URL != "" {
		s.CheckpointURL = last.URL
	}
	// spec.NoRestarts as nodes see it: none left, in a value node workers
	// from before it validate (they refused a negative max_restarts).
	s.MaxRestarts = s.RestartBudget()
	return s
}
