package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
)

// liveRun reads a running run's status, its step the chunk (or external
// launch) in flight's where that is further; a closed run is an error.
func liveRun(ctx context.Context, c client.Client, id string) (spec.RunStatus, error) {
	st, live, closed, err := readProgress(ctx, c, id)
	if live != nil && live.Step > st.Step {
		st.Step = live.Step // (the status's is the last boundary's, or the launch's start)
	}
	if closed {
		if err == nil {
			err = fmt.Errorf("%s has ended (%s)", id, st.Phase)
		}
		return st, err
	}
	return st, err
}

// openRun dials the server and reads the status of the running run named
// by arg (name or run/<name>); on success the caller closes c. For a
// request the server records whether or not a control worker answers now
// (what: "cancel", "pause"; empty: none), a running run that no control
// worker answers for is taken as it last recorded itself (its search
// attributes: phase, model, step), and a note on e.err says that the
// request waits for one (unanswered).
func openRun(ctx context.Context, e *env, arg, what string) (c client.Client, id string, st spec.RunStatus, unanswered bool, err error) {
	if c, err = dialQuiet(ctx, e); err != nil {
		return nil, "", st, false, err
	}
	id = runID(arg)
	st, err = liveRun(ctx, c, id)
	if noAnswer := (*noAnswerError)(nil); what != "" && errors.As(err, &noAnswer) {
		fmt.Fprintf(e.err, "note: %v\n  the %s is recorded and takes effect once a control worker runs the workflow\n", err, what)
		return c, id, st, true, nil
	}
	if what != "" && errors.Is(err, errNoControlWorker) {
		// The run is running (an ended one says so first), and the
		// server records the request without a worker: it is taken as
		// it last recorded itself, as when none answers.
		if seen, derr := recordedRun(ctx, c, id); derr == nil {
			fmt.Fprintf(e.err, "note: %v\n  the %s is recorded and takes effect once a control worker runs the workflow\n", err, what)
			return c, id, seen, true, nil
		}
	}
	if err != nil {
		err = withNearRuns(ctx, c, err)
		c.Close()
		return nil, "", st, false, err
	}
	return c, id, st, false, nil
}

// recordedRun is running run id as its search attributes last recorded
// it: phase, model, step.
func recordedRun(ctx context.Context, c client.Client, id string) (spec.RunStatus, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return spec.RunStatus{}, err
	}
	info := desc.GetWorkflowExecutionInfo()
	seen := rowFromVisibility(info.GetExecution(), info.GetStatus(), info.GetStartTime().AsTime(), info.GetSearchAttributes().GetIndexedFields())
	return spec.RunStatus{RunID: id, Phase: seen.Status, Model: seen.Model, Step: seen.Step}, nil
}

func signalRun(ctx context.Context, c client.Client, id, name string, arg any) error {
	if err := c.SignalWorkflow(ctx, id, "", name, arg); err != nil {
		return fmt.Errorf("signal %s to %s: %w", name, id, err)
	}
	return nil
}

func newPauseCmd(e *env) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "pause RUN",
		Short: "Hold a run at its next chunk boundary until `cann-train resume`",
		Long: `Asks the run to stop before its next chunk. The chunk that is training ends
early: within a second its nodes agree on a step and store a checkpoint there
(nodes of an older build finish the chunk, and checkpoint if it is due). The run
then holds — nodes kept, nothing trained — until 'cann-train resume RUN'. A
pause during a green-window wait holds the run after the wait too. A run still
waiting for its first nodes stops waiting and holds without any (it asks again
on resume). An external job (your own script) stops after its next checkpoint
upload — asked for now: its should_checkpoint() says yes a second or so ahead —
and resumes from it; a second pause stops it at once.`,
		Example: `  cann-train pause mnist-demo
  cann-train pause mnist-demo --wait 2m   # return once the run is paused`,
		Args: wantRun(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, id, st, unanswered, err := openRun(ctx, e, args[0], "pause")
			if err != nil {
				return err
			}
			defer c.Close()
			if st.Phase == spec.PhasePaused {
				fmt.Fprintf(e.out, "%s: already paused at step %d (`cann-train resume %s` ends the pause)\n", id, st.Step, args[0])
				return nil
			}
			if st.PauseRequested && wait > 0 {
				// Waiting for the pause asked for before: a second signal
				// would stop an external job at once, losing its steps
				// since its last checkpoint.
				fmt.Fprintf(e.out, "%s: a pause was already requested; waiting for it (a pause without --wait stops an external job at once)\n", id)
			} else if err := signalRun(ctx, c, id, spec.SignalPause, nil); err != nil {
				return err
			}
			if wait <= 0 {
				switch {
				case unanswered:
					fmt.Fprintf(e.out, "%s: pause requested%s; it holds at its next chunk boundary once a control worker runs it\n", id, atStep(st, true))
				case st.PauseRequested && st.Model == spec.ModelExternal:
					fmt.Fprintf(e.out, "%s: a pause was pending at step %d; the job is asked to stop at once\n", id, st.Step)
				case st.PauseRequested:
					fmt.Fprintf(e.out, "%s: a pause was already requested at step %d; it holds at the next chunk boundary\n", id, st.Step)
				case firstAcquire(st):
					fmt.Fprintf(e.out, "%s: pause requested while it waits for its first nodes; it stops waiting and holds without nodes\n", id)
				case st.Model == spec.ModelExternal:
					fmt.Fprintf(e.out, "%s: pause requested at step %d; it holds after the job's next checkpoint upload, "+
						"or at once while its processes have reported no step since their launch (pause again to stop it at once)\n", id, st.Step)
				default:
					fmt.Fprintf(e.out, "%s: pause requested at step %d; it holds at the next chunk boundary\n", id, st.Step)
				}
				return nil
			}
			st, err = awaitPhase(ctx, c, id, wait, spec.PhasePaused)
			if err != nil {
				return notWaiting(ctx, err, fmt.Sprintf("pause of %s requested; not waiting for it any more (cann-train status %s says when it holds)", id, runName(id)))
			}
			fmt.Fprintf(e.out, "%s: paused at step %d/%d\n", id, st.Step, st.TotalSteps)
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the run to be paused (0: do not wait)")
	atLeast(cmd.Flags(), "0", "wait")
	return cmd
}

// firstAcquire: the run waits for its first nodes (a pause or a rescale
// withdraws that wait at once).
func firstAcquire(st spec.RunStatus) bool {
	return st.Phase == spec.PhaseAcquiring && len(st.Nodes) == 0
}

// awaitPhase polls the run's status until it is in phase.
func awaitPhase(ctx context.Context, c client.Client, id string, limit time.Duration, phase spec.Phase) (spec.RunStatus, error) {
	return awaitLive(ctx, c, id, limit, string(phase), func(st spec.RunStatus) bool { return st.Phase == phase })
}

// awaitLive polls the running run's status until ok says so; what names
// the awaited state in the error when limit passes first.
func awaitLive(ctx context.Context, c client.Client, id string, limit time.Duration, what string, ok func(spec.RunStatus) bool) (spec.RunStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		st, _, closed, err := readProgress(ctx, c, id)
		switch {
		case closed && err == nil:
			return st, fmt.Errorf("%s ended (%s at step %d) before it was %s", id, st.Phase, st.Step, what)
		case closed:
			return st, err
		case err == nil && ok(st):
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("%s not %s after %s (%s): %w", id, what, limit, nowAt(st), deadlineCause(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nowAt says where a run was at the last status read: "now training at
// step 400", or that none was read.
func nowAt(st spec.RunStatus) string {
	if st.Phase == "" {
		return "no status read"
	}
	return fmt.Sprintf("now %s at step %d", st.Phase, st.Step)
}

// deadlineCause is the cause of a wait that ended (ended: its context's
// error) with err the last try's error: err alone when it says the same
// deadline already, else both (a Ctrl-C stays errors.Is context.Canceled).
func deadlineCause(err, ended error) error {
	if err != nil && errors.Is(ended, context.DeadlineExceeded) && strings.Contains(err.Error(), ended.Error()) {
		return err
	}
	return errors.Join(err, ended)
}

// atStep is " at step N" of the run's status st; a run no control worker
// answered for (unanswered: st is what it last recorded, its step maybe
// not at all) " (last recorded at step N)", or "" when none was.
func atStep(st spec.RunStatus, unanswered bool) string {
	switch {
	case !unanswered:
		return fmt.Sprintf(" at step %d", st.Step)
	case st.Step > 0:
		return fmt.Sprintf(" (last recorded at step %d)", st.Step)
	}
	return ""
}

func newCancelCmd(e *env) *cobra.Command {
	var wait time.Duration
	var force bool
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Stop a run now and give its nodes back; its checkpoints stay",
		Long: `Cancels the run's workflow, as 'temporal workflow cancel' does. The chunk that
is training ends first, within about a second, at a step its nodes agree on,
with a checkpoint there (nodes of chunk protocol 2: 'cann-train nodes -o json';
on older ones, or if it has not ended within a minute, it is stopped and the
steps since its last checkpoint are lost). An external job's world is asked for
a checkpoint (its script's should_checkpoint() says yes a second or so ahead)
and stopped once that is uploaded — at once when it cannot be asked (nodes of
chunk protocol below 3, a script that reports no step) or goes past the step
without checkpointing. The nodes go back to the pool and the run ends cancelled;
its checkpoints stay in the bucket ('cann-train checkpoint ls RUN'), 'cann-train
status RUN' still shows where it stopped, and 'cann-train run -f JOB --name RUN
--resume' goes on from there later.

A run of the built-in engine that holds for its checkpoint bucket (status
waiting-storage: the bucket refused its state, which its nodes keep in
memory) is not cancelled without --force: the steps since its last
checkpoint would be lost. Make the bucket take writes and 'cann-train resume
RUN' stores them first.`,
		Example: `  cann-train cancel mnist-demo
  cann-train cancel mnist-demo --wait 1m   # return once it has ended, saying at which step`,
		Args: wantRun(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, id, st, unanswered, err := openRun(ctx, e, args[0], "cancel")
			if err != nil {
				return err
			}
			defer c.Close()
			if lost := unsavedOnCancel(st); lost != "" && !force {
				return fmt.Errorf("%s: %s; a cancel throws them away. Make the bucket take writes and `cann-train resume %s` stores them at once (then cancel), or cancel --force to discard them",
					id, lost, runName(id))
			}
			if err := c.CancelWorkflow(ctx, id, ""); err != nil {
				return fmt.Errorf("cancel %s: %w", id, err)
			}
			if wait <= 0 {
				fmt.Fprintf(e.out, "%s: cancel requested%s\n", id, atStep(st, unanswered))
				return nil
			}
			wctx, stop := context.WithTimeout(ctx, wait)
			defer stop()
			for {
				end, _, closed, err := readProgress(wctx, c, id)
				var ended *runEnded
				switch {
				case closed && end.Phase == spec.PhaseCancelled:
					printCancelled(e.out, id, end)
					return nil
				case closed && errors.As(err, &ended):
					return err // it failed, or was terminated, first
				case closed:
					fmt.Fprintf(e.out, "%s: ended %s at step %d before the cancel took effect\n", id, end.Phase, end.Step)
					return nil
				}
				select {
				case <-wctx.Done():
					return notWaiting(ctx, fmt.Errorf("%s still running %s after the cancel (now %s at step %d): %w", id, wait, end.Phase, end.Step, wctx.Err()),
						fmt.Sprintf("cancel of %s requested; not waiting for it to end any more (cann-train status %s says where it stopped)", id, runName(id)))
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the run to end (0: do not wait)")
	cmd.Flags().BoolVar(&force, "force", false, "cancel a run that holds steps its bucket refused, discarding them")
	atLeast(cmd.Flags(), "0", "wait")
	return cmd
}

// printCancelled says where run id, cancelled, stopped (end: its last
// status), that its nodes are free again, and how to continue it.
func printCancelled(w io.Writer, id string, end spec.RunStatus) {
	freed := "; its nodes are free again"
	switch {
	case len(end.Nodes) == 0:
		freed = "" // (it held none: cancelled while it waited for them)
	case end.Model == spec.ModelExternal:
		// (Its nodes are given back as the cancel lands; its processes
		// get SIGTERM then, and SIGKILL after stop_grace.)
		freed = "; its nodes are free again once its processes have ended (SIGTERM now, SIGKILL after its stop_grace)"
	}
	fmt.Fprintf(w, "%s: %s%s\n", id, endText(end), freed)
	if end.LastCkpt == nil || end.Step >= end.TotalSteps {
		return
	}
	more := ""
	if k := end.KeptOnNode; k != nil && k.Step > end.LastCkpt.Step {
		more = fmt.Sprintf(" (from step %d once `cann-train checkpoint store-kept %s %s` on %s has stored it)", k.Step, runName(id), k.File, k.Node)
	} else if end.Model == spec.ModelExternal {
		// (Its processes may save on their SIGTERM, within stop_grace.)
		more = " (or from a later checkpoint its stopping processes still upload: `cann-train checkpoint ls` lists them)"
	}
	fmt.Fprintf(w, "%s: %s continues it from step %d%s\n", id, resumeCommand(id), end.LastCkpt.Step, more)
}

// notWaiting is the error of a --wait that Ctrl-C cut short (ctx: the
// command's) once the request was sent: what (the request goes on) is
// said instead of "interrupted". Any other err is as it is.
func notWaiting(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &interruptedError{what: what, err: err}
	}
	return err
}

// unsavedOnCancel says what a cancel of the run would lose that no
// checkpoint holds — a built-in run holding, for its refusing bucket,
// state its nodes keep only in memory — or "" when nothing. (An external
// job's first node keeps it on disk for `checkpoint store-kept`.)
func unsavedOnCancel(st spec.RunStatus) string {
	if st.Phase != spec.PhaseStorageWait || st.Model == spec.ModelExternal {
		return ""
	}
	last, at := int64(0), "it has no checkpoint"
	if st.LastCkpt != nil {
		last, at = st.LastCkpt.Step, fmt.Sprintf("its last checkpoint is at step %d", st.LastCkpt.Step)
	}
	if st.Step <= last {
		return ""
	}
	return fmt.Sprintf("it holds for its checkpoint bucket, which refused the state at step %d (%s): %d step(s) live only in its nodes' memory",
		st.Step, at, st.Step-last)
}

func newResumeCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "resume RUN",
		Short: "Resume a paused run; also cuts a green-window or storage wait short",
		Long: `Ends a pause — only the pause: a run with a green policy then trains when its
policy says, and one paused while it waited for its window waits for it again.
A run waiting for its green window starts its next chunk at once (the boundary
after it plans again; 'cann-train green override' ignores the policy for
longer). A run holding because its checkpoint storage refused its
checkpoints (waiting-storage) tries to store its state again at once.`,
		Example: `  cann-train resume mnist-demo`,
		Args:    wantRun(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, id, st, unanswered, err := openRun(ctx, e, args[0], "resume")
			if err != nil {
				return resumeEnded(err, runID(args[0]), st)
			}
			defer c.Close()
			waits := st.Phase == spec.PhasePaused || st.Phase == spec.PhaseGreenWait || st.Phase == spec.PhaseStorageWait
			if !unanswered && !waits && !st.PauseRequested {
				fmt.Fprintf(e.out, "%s: nothing to resume: %s at step %d, neither paused nor waiting\n", id, st.Phase, st.Step)
				return nil
			}
			if err := signalRun(ctx, c, id, spec.SignalResume, nil); err != nil {
				return err
			}
			switch {
			case unanswered:
				fmt.Fprintf(e.out, "%s: resume requested\n", id)
				return nil
			case !waits:
				fmt.Fprintf(e.out, "%s: pause withdrawn at step %d; it trains on\n", id, st.Step)
				return nil
			}
			if st.Phase == spec.PhaseGreenWait {
				fmt.Fprintf(e.out, "%s: resumed (was %s at step %d): the next chunk trains now; the run plans again after it and may wait "+
					"again (`cann-train green override %s` trains without the policy)\n", id, st.Phase, st.Step, strings.TrimPrefix(id, spec.RunIDPrefix))
				return nil
			}
			if st.Phase == spec.PhasePaused && st.Green != nil {
				name := strings.TrimPrefix(id, spec.RunIDPrefix)
				fmt.Fprintf(e.out, "%s: resumed (was %s at step %d): its green policy decides when it trains, and it may wait for a window "+
					"(then `cann-train resume %s` cuts the wait short, `cann-train green override %s` ignores the policy)\n", id, st.Phase, st.Step, name, name)
				return nil
			}
			fmt.Fprintf(e.out, "%s: resumed (was %s at step %d)\n", id, st.Phase, st.Step)
			return nil
		},
	}
}

// resumeEnded is err of a resume of run id, with how to go on with it
// when err says the run has ended (terminated while paused, failed) and
// st, its last status, names a checkpoint short of its end: a resume
// signal reaches only a running run.
func resumeEnded(err error, id string, st spec.RunStatus) error {
	var ended *runEnded
	if !errors.As(err, &ended) || st.LastCkpt == nil || (st.TotalSteps > 0 && st.LastCkpt.Step >= st.TotalSteps) {
		return err
	}
	return fmt.Errorf("%w: nothing to resume (a resume reaches a running run only); `%s` continues it from step %d",
		err, resumeCommand(id), st.LastCkpt.Step)
}

func newScaleCmd(e *env) *cobra.Command {
	var nodes int
	var wait time.Duration
	var clusterID string
	cmd := &cobra.Command{
		Use:   "scale RUN --nodes N  (or: scale RUN N)",
		Short: "Train a run on N nodes from its next chunk boundary",
		Long: `Changes the run's node count at the next chunk boundary (the chunk in flight
ends early, within a second, at a checkpoint its nodes store): the run asks the
Cluster for more nodes or releases some, starts a new membership generation
and resumes from the checkpoint at the current step (when the last checkpoint
is older, the checkpoint the last chunk is still uploading is awaited, or
one more chunk runs and checkpoints first, so no step is lost). A scale-up
takes the free nodes there and the others as they come free (asked for
while chunks train, as a run that lost a node grows back), training on
meanwhile. The global batch stays what it was at the start; each rank's
share changes. A paused run changes when it resumes; a run still waiting
for its first nodes asks for N instead at once.
N must be at least the run's min_nodes and at most its global batch.`,
		Example: `  cann-train scale mnist-demo --nodes 4
  cann-train scale mnist-demo 4
  cann-train scale mnist-demo 2 --wait 5m   # return once it trains on 2 nodes (exit 1, saying how far it got, if not by then)`,
		Args: wantRun(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			set := cmd.Flags().Changed("nodes")
			switch {
			case len(args) == 2 && set:
				return errors.New("give the node count once: scale RUN N or scale RUN --nodes N")
			case len(args) == 2:
				n, err := strconv.Atoi(args[1])
				if err != nil {
					return fmt.Errorf("node count %q: want a number", args[1])
				}
				nodes = n
			case !set:
				return errors.New("how many nodes? scale RUN N or scale RUN --nodes N")
			}
			if nodes < 1 || nodes > 1024 {
				if !set {
					return fmt.Errorf("node count %d: want 1..1024", nodes)
				}
				return fmt.Errorf("--nodes %d: want 1..1024", nodes)
			}
			ctx := cmd.Context()
			c, id, st, unanswered, err := openRun(ctx, e, args[0], "rescale")
			if err != nil {
				return err
			}
			defer c.Close()
			if st.Model == spec.ModelExternal {
				return fmt.Errorf("%s runs your own script, which keeps its world size (an external job's min_nodes is its nodes): scale changes runs of the built-in engine", id)
			}
			if unanswered {
				// Nothing to check it against here: the run refuses a count
				// outside min_nodes..global batch itself (its status says so).
				if err := signalRun(ctx, c, id, spec.SignalRescale, spec.Rescale{Nodes: nodes}); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%s: rescale to %d node(s) requested%s; the run checks it against its min_nodes and global batch "+
					"(`cann-train status %s` says if it refused it)\n", id, nodes, atStep(st, true), strings.TrimPrefix(id, spec.RunIDPrefix))
				return nil
			}
			if st.MinNodes > 0 && nodes < st.MinNodes {
				return fmt.Errorf("%d node(s) is below the run's min_nodes %d (its job's floor)", nodes, st.MinNodes)
			}
			if st.GlobalBatch > 0 && nodes > st.GlobalBatch {
				return fmt.Errorf("%d node(s) is more than the run's global batch %d: every rank needs an example per step", nodes, st.GlobalBatch)
			}
			if nodes == len(st.Nodes) && (st.PendingNodes == 0 || st.PendingNodes == nodes) && st.TargetNodes <= nodes {
				fmt.Fprintf(e.out, "%s: already on %d node(s)\n", id, nodes)
				return nil
			}
			if err := signalRun(ctx, c, id, spec.SignalRescale, spec.Rescale{Nodes: nodes}); err != nil {
				return err
			}
			if nodes == len(st.Nodes) && st.TargetNodes > nodes {
				// Shrunk after a failure: stay, instead of growing back.
				fmt.Fprintf(e.out, "%s: stays on %d node(s), not growing back to %d\n", id, nodes, st.TargetNodes)
				return nil
			}
			if nodes == len(st.Nodes) && st.PendingNodes > 0 {
				how := "replaces the pending rescale to %d"
				if st.Phase == spec.PhaseRescaling {
					how = "once the rescale to %d under way has ended"
				}
				fmt.Fprintf(e.out, "%s: stays on %d node(s) ("+how+")\n", id, nodes, st.PendingNodes)
				return nil
			}
			if more := nodes - len(st.Nodes); more > 0 {
				if note := freeNote(ctx, c, clusterID, more, len(st.Nodes)); note != "" {
					fmt.Fprintf(e.err, "%s: %s\n", id, note)
				}
			}
			if wait <= 0 || st.Phase == spec.PhasePaused {
				when := "at its next chunk boundary"
				switch {
				case st.Phase == spec.PhasePaused:
					when = "when it resumes (it is paused)"
				case firstAcquire(st):
					when = "now: it waits for its first nodes and asks for these instead"
				}
				fmt.Fprintf(e.out, "%s: %d → %d node(s) %s; it has trained %d of %d steps\n", id, len(st.Nodes), nodes, when, st.Step, st.TotalSteps)
				return nil
			}
			sw := &scaleWatch{nodes: nodes, seen: len(st.Rescalings), refused: st.RefusedRescale}
			st, err = awaitLive(ctx, c, id, wait, fmt.Sprintf("rescaled to %d node(s)", nodes), sw.settled)
			if err != nil && ctx.Err() == nil && sw.growing(st) {
				sw.print(e.out, id, st)
				return sw.short(id, wait, st)
			}
			if err != nil {
				return notWaiting(ctx, err, fmt.Sprintf("rescale of %s to %d node(s) requested; not waiting for it any more (cann-train status %s says when it is done)", id, nodes, runName(id)))
			}
			sw.print(e.out, id, st)
			if len(st.Nodes) != nodes {
				if st.RefusedRescale != sw.refused && st.RefusedRescale != "" {
					return fmt.Errorf("%s trains on %d node(s), not %d: %s", id, len(st.Nodes), nodes, st.RefusedRescale)
				}
				return fmt.Errorf("%s trains on %d node(s), not %d", id, len(st.Nodes), nodes)
			}
			if st.Phase == spec.PhaseGreenWait {
				// (the rescale cut the wait short; the run planned again)
				fmt.Fprintf(e.out, "%s: now on %d node(s) %v, waiting for its green window until %s (it trains on them then)\n",
					id, nodes, st.Nodes, st.WaitUntil.UTC().Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(e.out, "%s: now on %d node(s) %v\n", id, nodes, st.Nodes)
			return nil
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 0, "node count to train on")
	cmd.Flags().StringVar(&clusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow that owns the nodes")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the run to train on N nodes (a scale-up: as they come free), and say how it went (0: do not wait)")
	atLeast(cmd.Flags(), "0", "wait")
	return cmd
}

// scaleWatch follows a run's status after `scale --wait` asked it for
// nodes: a scale-up takes the free nodes at its boundary and the others
// as they come free, so it is done when the run trains on nodes — not at
// its first change — or when the run stopped growing toward them (a
// scale-down or an earlier build's scale-up that could not be filled,
// another scale since, a refusal).
type scaleWatch struct {
	nodes, seen int
	// refused is the run's RefusedRescale before the signal.
	refused string
	// taken: the run has taken the scale up (pending, growing toward it,
	// or changed for it).
	taken bool
}

// settled: the scale is over, one way or another (awaitLive's ok).
func (w *scaleWatch) settled(st spec.RunStatus) bool {
	if st.PendingNodes == w.nodes || st.TargetNodes == w.nodes ||
		slices.ContainsFunc(w.fresh(st), func(r spec.Rescaling) bool { return r.Reason == "" }) {
		w.taken = true
	}
	switch {
	case st.RefusedRescale != w.refused && st.RefusedRescale != "":
		return true
	case st.PendingNodes != 0:
		return false
	case len(st.Nodes) == w.nodes:
		return true
	}
	return w.taken && st.TargetNodes != w.nodes
}

// growing: the run trains on fewer nodes than asked for and takes more as
// they come free.
func (w *scaleWatch) growing(st spec.RunStatus) bool {
	return w.taken && st.PendingNodes == 0 && st.TargetNodes == w.nodes && len(st.Nodes) < w.nodes
}

// fresh are the changes of the run's nodes since the scale.
func (w *scaleWatch) fresh(st spec.RunStatus) []spec.Rescaling {
	return st.Rescalings[min(w.seen, len(st.Rescalings)):]
}

// print writes the changes since the scale, one a line.
func (w *scaleWatch) print(out io.Writer, id string, st spec.RunStatus) {
	for _, r := range w.fresh(st) {
		kind, line := rescalingLine(r)
		fmt.Fprintf(out, "%s: %-7s %s\n", id, kind, line)
	}
}

// short is the error of a --wait that ended while the run was still short
// of the nodes asked for (growing): how far it got, and that the scale
// goes on.
func (w *scaleWatch) short(id string, wait time.Duration, st spec.RunStatus) error {
	how := "`cann-train nodes` says which are free"
	if a := st.NodeAsk; a != nil {
		how = "asking: " + nodeAskLine(*a)
	}
	return fmt.Errorf("%s: on %d of %d node(s) so far after %s; it takes more as they come free, training on meanwhile (%s; `cann-train status %s` follows it)",
		id, len(st.Nodes), w.nodes, wait, how, runName(id))
}

// freeNote warns a scale-up that asks for more nodes than the Cluster has
// free now: the run takes those at its boundary and the others as they
// come free (a regrow), training on meanwhile. Empty when enough are
// free, or the registry cannot be read.
func freeNote(ctx context.Context, c client.Client, clusterID string, more, have int) string {
	reg, err := readRegistry(ctx, c, clusterID)
	if err != nil {
		return ""
	}
	states := map[string]int{}
	for _, r := range nodeRows(reg, time.Now()) { // judged as `cann-train nodes` does
		state, _, _ := strings.Cut(r.State, ":") // ("silent: no lease renewal …")
		states[state]++
	}
	free := states["free"]
	if free >= more {
		return ""
	}
	var others []string
	for _, st := range slices.Sorted(maps.Keys(states)) {
		if st != "free" {
			others = append(others, fmt.Sprintf("%d %s", states[st], st))
		}
	}
	return fmt.Sprintf("note: %d more node(s) asked for, %d free now (%d registered: %s; 'cann-train nodes' lists them): "+
		"the run takes the free ones at its boundary and the others as they come free, training on with its %d meanwhile", more, free, len(reg.Nodes), strings.Join(others, ", "), have)
}
