package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/engine/energy"
	"github.com/cann-train/cann-train/internal/suggest"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
)

func runID(arg string) string {
	if strings.HasPrefix(arg, spec.RunIDPrefix) {
		return arg
	}
	return spec.RunIDPrefix + arg
}

// runName is runID's inverse: the run's name from its name or workflow ID.
func runName(arg string) string { return strings.TrimPrefix(arg, spec.RunIDPrefix) }

func newStatusCmd(e *env) *cobra.Command {
	var output, ui, rankTable string
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Show a run's status (RUN is the name or run/<name>)",
		Example: `  cann-train status mnist-demo
  cann-train status run/mnist-demo -o json
  cann-train status mnist-demo --rank-table hccl.json   # from the run's topology scan`,
		Args: wantRun(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			c, err := dialQuiet(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			st, live, logs, _, err := readLive(cmd.Context(), c, runID(args[0]))
			if err != nil && st.RunID == "" {
				return withNearRuns(cmd.Context(), c, err)
			}
			if noAnswer := (*noAnswerError)(nil); errors.As(err, &noAnswer) {
				if perr := printUnanswered(e.out, noAnswer, live, summarize(st, e.uiLink(ui), e.namespace, nil), output); perr != nil {
					return perr
				}
				return err
			}
			ended := err // a run that failed or was cancelled: its status, then why
			if live != nil && live.Step > st.Step {
				st.Step, st.Loss = live.Step, live.Loss
			}
			if live != nil {
				liveResumed(&st, live.FirstStepAt)
			}
			if rankTable != "" {
				if st.Topology == nil || st.Topology.RankTable == "" {
					return fmt.Errorf("%s has no rank table: it scans its topology only with collective: auto or topology_scan: true", st.RunID)
				}
				if err := os.WriteFile(rankTable, []byte(st.Topology.RankTable+"\n"), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(e.err, "wrote the HCCL rank table of %s's scanned nodes to %s\n", st.RunID, rankTable) // (stderr: -o json stays JSON)
			}
			sum := summarize(st, e.uiLink(ui), e.namespace, nil)
			sum.Logs = logs
			if phaseLive(st.Phase) {
				livenow(&sum, st, live, time.Now())
				sum.Waiting = waitingWhy(cmd.Context(), c, st)
			}
			if err := printSummary(e.out, st, sum, output); err != nil {
				return err
			}
			return ended
		},
	}
	cmd.Flags().StringVar(&rankTable, "rank-table", "", "write the HCCL rank table (v1.0) of the run's scanned nodes to this file")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	addUIFlag(cmd.Flags(), &ui)
	return cmd
}

func newWatchCmd(e *env) *cobra.Command {
	var output, ui string
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run live: step/total, loss, samples/s, ETA",
		Long: `Follows RUN until it ends. The progress goes to stderr: on a terminal one line
redrawn in place (step/total, and while the run trains its ETA, loss and
samples/s; while it does not, what it waits for), to a file or a pipe a line per
change of phase (or of what a run that does not train waits for) and per tenth
of the steps, with the ETA while the run trains. While a run replaces a node it
shows the step it resumes from (its last checkpoint). Then stdout gets the run's
final status as 'cann-train status' prints it (-o json: its JSON object) — that
of a run that failed or was cancelled too, with exit status 1. -o jsonl writes
JSON lines on stdout instead, the last one saying how the run ended. A server or
control worker that stops answering is waited out, and said. Ctrl-C stops
watching; the run goes on.`,
		Example: `  cann-train watch mnist-demo
  cann-train watch mnist-demo -o jsonl | jq .loss`,
		Args: wantRun(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json", "jsonl"); err != nil {
				return err
			}
			c, err := dialQuiet(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			return watchToEnd(cmd.Context(), e, c, runID(args[0]), output, e.uiLink(ui))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, json (final status) or jsonl (one progress object per line)")
	addUIFlag(cmd.Flags(), &ui)
	return cmd
}

// watchToEnd is watch's body: it follows run id until it ends, its
// progress on e.err (-o jsonl: JSON lines on e.out), then prints its final
// status on e.out as `status` does — that of a run that failed or was
// cancelled too, before the error that says so. Interrupted, it says that
// the run goes on.
func watchToEnd(ctx context.Context, e *env, c client.Client, id, output, ui string) error {
	w := e.err
	if output == "jsonl" {
		w = e.out
	}
	st, err := watchRun(ctx, c, id, w, output == "jsonl", nil)
	var ended *runEnded
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return &interruptedError{what: fmt.Sprintf("stopped watching %s; the run goes on (cann-train cancel %s stops it)", id, runName(id)), err: err}
	case output == "jsonl":
		return err // (its last line said how it ended)
	case err != nil && (st.RunID == "" || !errors.As(err, &ended)):
		return withNearRuns(ctx, c, err)
	}
	if perr := printStatus(e.out, st, output, ui, e.namespace); perr != nil {
		return perr
	}
	return err
}

// dialQuiet dials the server as the flags say, without the SDK's info
// logs; the client knows where it is connected (placeOf).
func dialQuiet(ctx context.Context, e *env) (client.Client, error) {
	log, err := e.logger()
	if err != nil {
		return nil, err
	}
	o, err := e.clientOptions(log)
	if err != nil {
		return nil, err
	}
	c, err := workers.Dial(ctx, o)
	if err != nil {
		return nil, err
	}
	return &placedClient{Client: c, address: cmp.Or(o.Address, "127.0.0.1:7233"), namespace: cmp.Or(o.Namespace, "default")}, nil
}

// placedClient is a client that knows where it is connected — the
// server's address and the namespace — for the messages that name them:
// a run not found, no control worker, the server not answering.
type placedClient struct {
	client.Client
	address, namespace string
}

// placeOf says where c is connected: "" and "" for a client that does
// not say (one dialQuiet did not dial).
func placeOf(c client.Client) (address, namespace string) {
	if p, ok := c.(*placedClient); ok {
		return p.address, p.namespace
	}
	return "", ""
}

// readProgress returns the run's status (its result once closed; for a
// run that failed or was cancelled, what its status query still answers,
// with the *runEnded error), the freshest heartbeat of a running chunk, and
// whether the run has closed.
func readProgress(ctx context.Context, c client.Client, id string) (spec.RunStatus, *spec.ChunkProgress, bool, error) {
	st, live, _, closed, err := readLive(ctx, c, id)
	return st, live, closed, err
}

// readLive is readProgress with the log tails of a running external job:
// the second heartbeat detail of each node's RunExternal activity (nodes
// in rank order; none once the run has closed, nor from a launch being
// stopped).
func readLive(ctx context.Context, c client.Client, id string) (spec.RunStatus, *spec.ChunkProgress, []spec.NodeLogs, bool, error) {
	var st spec.RunStatus
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		de := &describeError{id: id, err: err}
		de.address, de.namespace = placeOf(c)
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			return st, nil, nil, false, de
		}
		// Started by hand without the prefix (`temporal workflow start
		// --workflow-id NAME`): say so rather than "no run". (Not for
		// run/run/NAME: run/NAME has the prefix.)
		if bare := strings.TrimPrefix(id, spec.RunIDPrefix); bare != id && !strings.HasPrefix(bare, spec.RunIDPrefix) {
			if d, err := c.DescribeWorkflowExecution(ctx, bare, ""); err == nil && d.GetWorkflowExecutionInfo().GetType().GetName() == spec.WorkflowTrainingRun {
				de.bare = bare
			}
		}
		return st, nil, nil, false, de
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		err := c.GetWorkflow(ctx, id, "").Get(ctx, &st)
		if st.RunID == "" {
			// A failed or cancelled run returns no result, but its status
			// query still answers (a control worker replays its history):
			// where it stopped, its checkpoints, its recoveries.
			ended := &runEnded{id: id, status: info.GetStatus(), err: err}
			var last spec.RunStatus
			if controlWorkerPolls(ctx, c) == nil {
				if q, qerr := queryWorkflow(ctx, c, id, "", spec.QueryStatus); qerr == nil && q.Get(&last) == nil {
					st = last
				}
			}
			if st.RunID != "" && phaseLive(st.Phase) {
				// A terminated (or timed-out) run ran no code to say it
				// ended: its status still reads the phase it was in.
				st.Phase = spec.Phase(activities.ExecutionName(info.GetStatus()))
			}
			return st, nil, nil, true, ended
		}
		return st, nil, nil, true, err
	}
	var beats []pendingBeat
	for _, pa := range desc.GetPendingActivities() {
		name := pa.GetActivityType().GetName()
		if (name != spec.ActivityTrainChunk && name != spec.ActivityRunExternal) || pa.GetHeartbeatDetails() == nil {
			continue
		}
		b := pendingBeat{stopping: pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED}
		if t := pa.GetScheduledTime(); t != nil {
			b.scheduled = t.AsTime()
		}
		ptrs := []any{&b.progress}
		if name == spec.ActivityRunExternal {
			ptrs = append(ptrs, &b.logs)
		}
		if converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), ptrs...) != nil {
			continue
		}
		beats = append(beats, b)
	}
	live, logs := liveOf(beats, nil)
	// The status query is answered by a control worker: with none polling,
	// it would wait out the RPC deadline and say only that.
	if err := controlWorkerPolls(ctx, c); err != nil {
		return st, live, logs, false, err
	}
	q, err := queryWorkflow(ctx, c, id, "", spec.QueryStatus)
	// A workflow task failing again and again (a bug, a history this
	// build cannot replay) leaves queries unanswered too, though a control
	// worker polls: say that, not that none answered.
	failing := desc.GetPendingWorkflowTask().GetAttempt()
	if noAnswer := (*noAnswerError)(nil); errors.As(err, &noAnswer) {
		noAnswer.seen = rowFromVisibility(info.GetExecution(), info.GetStatus(), info.GetStartTime().AsTime(), info.GetSearchAttributes().GetIndexedFields())
		noAnswer.taskAttempts = failing
		st := spec.RunStatus{RunID: id, Phase: noAnswer.seen.Status, Model: noAnswer.seen.Model, Step: noAnswer.seen.Step}
		return st, live, logs, false, err
	}
	if err != nil && failing > 1 {
		return st, live, logs, false, fmt.Errorf("query %s: %s: %w", id, taskFailing(failing), err)
	}
	if err != nil {
		return st, live, logs, false, fmt.Errorf("query %s: %w", id, err)
	}
	if err := q.Get(&st); err != nil {
		return st, live, logs, false, fmt.Errorf("decode status of %s: %w", id, err)
	}
	live, logs = liveOf(beats, &st)
	if rewinding(st) {
		// The chunk (or launch) in flight failed: the run goes back to
		// its last checkpoint. Neither its last heartbeats nor the step
		// it had reached are its progress (watch said "acquiring step
		// 2827" for a run that failed at 2897 and resumed at 2643).
		live, st.Step = nil, resumeStep(st)
	}
	return st, live, logs, false, nil
}

// pendingBeat is the last heartbeat of a pending TrainChunk or RunExternal
// activity: its progress, an external launch's log tails, whether it is
// being stopped (cancel requested) and when it was scheduled.
type pendingBeat struct {
	progress  spec.ChunkProgress
	logs      spec.NodeLogs
	stopping  bool
	scheduled time.Time
}

// liveOf is the freshest of beats (nil: none) and the log tails of the
// launch running now (nodes in rank order; not a launch being stopped).
// Given the run's status st, it leaves out the beats of a chunk that
// failed: activities scheduled before the run acted on its last failure,
// still pending (a lost node's until its heartbeat timeout, the others'
// while they are being stopped) — the first poll after a recovery read
// the failed chunk's step as the new generation's.
func liveOf(beats []pendingBeat, st *spec.RunStatus) (*spec.ChunkProgress, []spec.NodeLogs) {
	var failedAt time.Time // (zero: no failure acted on, or not known)
	if st != nil && len(st.Recoveries) > 0 {
		failedAt = st.Recoveries[len(st.Recoveries)-1].SeenAt
	}
	var live *spec.ChunkProgress
	var logs []spec.NodeLogs
	var first time.Time // the launch's first step, when every node has had it
	firstAll := true
	for _, b := range beats {
		if !failedAt.IsZero() && !b.scheduled.IsZero() && b.scheduled.Before(failedAt) {
			continue
		}
		if b.stopping {
			// A launch (or chunk) the run stopped: not the one training
			// now. The run does not wait for it, and what it trains past
			// the checkpoint the stop waited for is not the run's: a
			// paused external job showed the step its stopping world
			// reached (107) while it held at, and resumed from, 100.
			continue
		}
		// (At the same step, a node storing a checkpoint: it says what
		// the chunk waits for.)
		if p := b.progress; live == nil || p.Step > live.Step || p.Step == live.Step && p.Storing > 0 && live.Storing == 0 {
			live = &p
		}
		if b.logs.Node != "" {
			logs = append(logs, b.logs)
		}
		firstAll = firstAll && !b.progress.FirstStepAt.IsZero()
		if b.progress.FirstStepAt.After(first) {
			first = b.progress.FirstStepAt
		}
	}
	if live != nil {
		live.FirstStepAt = time.Time{}
		if firstAll {
			live.FirstStepAt = first // (the step is complete when the slowest node has it)
		}
	}
	slices.SortFunc(logs, func(a, b spec.NodeLogs) int { return a.NodeRank - b.NodeRank })
	return live, logs
}

// rewinding: a run in phase acquiring or recovering has no chunk
// training — it is starting, or going back to its last checkpoint after
// a failure (the status's step is still the failed chunk's start then).
func rewinding(st spec.RunStatus) bool {
	return st.Phase == spec.PhaseAcquiring || st.Phase == spec.PhaseRecovering
}

// resumeStep is the step a run acquiring or recovering trains from next:
// its last checkpoint's, 0 without one — at its start, the step it has
// (0, or the checkpoint a resumed run starts from).
func resumeStep(st spec.RunStatus) int64 {
	if st.LastCkpt != nil {
		return st.LastCkpt.Step
	}
	return 0
}

// queryTimeout bounds a query: a control worker answers in milliseconds
// (a replay of a rolled-over history in well under a second). The server
// gives up sooner, keeping part of the deadline for its reply.
const queryTimeout = 5 * time.Second

// queryWorkflow asks workflow id (runID: its latest run if empty) the query name,
// bounded by queryTimeout; one no control worker answered in time fails
// as a *noAnswerError.
func queryWorkflow(ctx context.Context, c client.Client, id, runID, name string) (converter.EncodedValue, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, runID, name)
	if err == nil || ctx.Err() != nil {
		return v, err
	}
	var deadline *serviceerror.DeadlineExceeded
	var canceled *serviceerror.Canceled
	if qctx.Err() != nil || errors.As(err, &deadline) || errors.As(err, &canceled) ||
		status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Canceled {
		_, namespace := placeOf(c)
		return nil, &noAnswerError{id: id, query: name, err: err, namespace: namespace}
	}
	return nil, err
}

// noAnswerError is a query no control worker answered in time while the
// server describes the workflow: the server still lists a worker's
// poller for minutes after it stopped, so controlWorkerPolls cannot tell.
type noAnswerError struct {
	id, query string
	err       error
	// namespace is the one asked in ("": not known, see placeOf).
	namespace string
	// seen is what a run last recorded in its search attributes (its
	// status's stand-in; readLive sets it).
	seen dashboardRow
	// taskAttempts is the attempt of the run's pending workflow task
	// (readLive sets it): above 1, the task keeps failing.
	taskAttempts int32
}

func (e *noAnswerError) Error() string {
	if e.taskAttempts > 1 {
		return fmt.Sprintf("%s's %s query went unanswered: %s", e.id, e.query, taskFailing(e.taskAttempts))
	}
	return fmt.Sprintf("no control worker answered %s's %s query in time: %s", e.id, e.query, e.hint())
}

// hint is what a query no control worker answered may mean, and what to do.
func (e *noAnswerError) hint() string {
	return fmt.Sprintf("one may have just stopped (the server lists a stopped worker for minutes); runs wait for one and lose nothing (start `%s`, or see its log)",
		controlWorkerCmd(e.namespace))
}

// others is what the dashboard says of the runs it did not ask after
// this query went unanswered (Error names this run): their queries
// would not be answered either.
func (e *noAnswerError) others() string {
	return "no control worker answers status queries (one went unanswered in time, so this run's was not asked): " + e.hint()
}

// taskFailing says that a run's workflow task has failed attempts-1 times
// in a row: the control worker answers, but cannot run the workflow.
func taskFailing(attempts int32) string {
	return fmt.Sprintf("its workflow task has failed %d time(s) in a row: the control worker's log says why (a bug, or a history this "+
		"build cannot replay); the run moves again once a control worker can run it (`temporal workflow describe` shows the failure)", attempts-1)
}

func (e *noAnswerError) Unwrap() error { return e.err }

// printUnanswered prints the status of a run whose status query no
// control worker answered: what the run last recorded in its search
// attributes and, when a chunk is in flight, its latest heartbeat.
func printUnanswered(w io.Writer, e *noAnswerError, live *spec.ChunkProgress, sum Summary, output string) error {
	r := e.seen
	if live != nil && live.Step > r.Step {
		r.Step, r.Loss = live.Step, live.Loss
	}
	if output == "json" {
		// The summary's shape, with what is known: no node names.
		sum.Steps, sum.FinalLoss = r.Step, r.Loss
		sum.Detail = fmt.Sprintf("as the run last recorded it (on %d node(s)): no control worker answered", r.Nodes)
		sum.Error = e.Error()
		return printSummary(w, spec.RunStatus{}, sum, output)
	}
	fmt.Fprintf(w, "run          %s\n", e.id)
	fmt.Fprintf(w, "status       %s (as the run last recorded it: no control worker answered)\n", r.Status)
	fmt.Fprintf(w, "model        %s on %d node(s)\n", r.Model, r.Nodes)
	fmt.Fprintf(w, "steps        %d\n", r.Step)
	if live != nil {
		fmt.Fprintf(w, "in flight    a chunk at step %d, loss %.4g (its latest heartbeat)\n", live.Step, live.Loss)
	}
	if sum.WebUI != "" {
		fmt.Fprintf(w, "web UI       %s\n", sum.WebUI)
	}
	return nil
}

// describeError is readLive's when the server does not describe the run:
// it knows none of that ID, or did not answer.
type describeError struct {
	id  string
	err error
	// bare: a TrainingRun workflow runs under the ID without the run/
	// prefix (started by hand).
	bare string
	// address and namespace: where the run was looked for ("": not
	// known, see placeOf).
	address, namespace string
	// near are the names of the runs there nearest the one asked for
	// (withNearRuns).
	near []string
}

func (e *describeError) Error() string {
	var nf *serviceerror.NotFound
	where := "here"
	if e.namespace != "" {
		where = fmt.Sprintf("in namespace %s at %s", e.namespace, e.address)
	}
	switch {
	case errors.As(e.err, &nf) && e.bare != "":
		return fmt.Sprintf("no run %s %s, but a TrainingRun workflow has the ID %q: it was started without the %s prefix, which cann-train finds runs by "+
			"(its workflow is steered with the temporal CLI: `temporal workflow signal|cancel --workflow-id %s`; start it as %s<spec name> to use cann-train)",
			e.id, where, e.bare, spec.RunIDPrefix, e.bare, spec.RunIDPrefix)
	case errors.As(e.err, &nf):
		hint := "cann-train dashboard lists the runs"
		if guess := suggest.DidYouMean(e.near); guess != "" {
			hint = guess + " " + hint
		}
		if e.namespace != "" {
			hint += "; --namespace and --address look elsewhere"
		}
		return fmt.Sprintf("no run %s %s (%s): %v", e.id, where, hint, e.err)
	}
	return fmt.Sprintf("describe %s: %v", e.id, e.err)
}

// withNearRuns completes err where it is a run the server does not know
// (readLive's *describeError) with the names of the runs nearest the one
// asked for, for a command to say; any other err is as it is. (Not in
// readLive: its callers that expect no run, as `run` before it starts
// one, would list the runs for nothing.)
func withNearRuns(ctx context.Context, c client.Client, err error) error {
	var de *describeError
	var nf *serviceerror.NotFound
	if errors.As(err, &de) && errors.As(de.err, &nf) && de.bare == "" && de.near == nil {
		de.near = nearRuns(ctx, c, runName(de.id))
	}
	return err
}

// nearRunsListed bounds the runs nearRuns compares a name with: one page
// of the list, the running ones and those that ended last first.
const nearRunsListed = 1000

// nearRuns names the runs whose names are nearest name (a run the
// server does not know), from one listing of the namespace's runs: for
// run/NAME typed as a name (run/run/NAME), NAME where it runs; none when
// nothing is near, or the list fails.
func nearRuns(ctx context.Context, c client.Client, name string) []string {
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: nearRunsListed, Query: dashboardQuery("")})
	if err != nil {
		return nil
	}
	var names []string
	for _, ex := range resp.GetExecutions() {
		names = append(names, runName(ex.GetExecution().GetWorkflowId()))
	}
	for strings.HasPrefix(name, spec.RunIDPrefix) { // (the prefix typed twice)
		name = strings.TrimPrefix(name, spec.RunIDPrefix)
		if slices.Contains(names, name) {
			return []string{name}
		}
	}
	return suggest.Nearest(name, names)
}

// serverSilent says that err is the server not answering (down,
// restarting, out of reach), rather than answering no.
func serverSilent(err error) bool {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	return errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded) ||
		status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded
}

// serverDown says that the server at address does not answer.
func serverDown(address string) string {
	if address == "" {
		return "the server is not answering"
	}
	return "the server at " + address + " is not answering"
}

func (e *describeError) Unwrap() error { return e.err }

// progressLine is one line of `watch -o jsonl`.
// A loss of 0 is one not measured yet (a chunk's first heartbeat, a job
// that reports none): null. The speed is a training run's only (0 for one
// paused, waiting or ended: its last chunk's is no speed of now), as the
// dashboard's.
func progressLine(id string, st spec.RunStatus, step int64, loss float32, sps float64) map[string]any {
	if st.Phase != spec.PhaseTraining {
		sps = 0
	}
	line := map[string]any{
		"workflow_id": id, "status": st.Phase, "step": step, "steps": st.TotalSteps,
		"loss": loss, "samples_per_sec": sps, "generation": st.Generation, "time": time.Now().UTC(),
	}
	if loss == 0 {
		line["loss"] = nil
	}
	return line
}

// changeTeller says each recovery and change of the node count of a run
// once, in a line of its own: the ones before a watch began too, but not
// those of the earlier run a resumed one carries over.
type changeTeller struct {
	w                io.Writer
	told, toldScales int
}

func newChangeTeller(w io.Writer, before *spec.RunStatus) *changeTeller {
	t := &changeTeller{w: w}
	if before != nil {
		t.told, t.toldScales = len(before.Recoveries), len(before.Rescalings)
	}
	return t
}

// news says whether st has a change not told yet.
func (t *changeTeller) news(st spec.RunStatus) bool {
	return t.told < len(st.Recoveries) || t.toldScales < len(st.Rescalings)
}

// tell says the changes not told yet in the order they came, by
// generation (a watch of an ended run listed every recovery, then every
// rescale: gen 2, gen 5, gen 3, gen 4).
func (t *changeTeller) tell(st spec.RunStatus) {
	for t.told < len(st.Recoveries) || t.toldScales < len(st.Rescalings) {
		if t.toldScales == len(st.Rescalings) ||
			(t.told < len(st.Recoveries) && st.Recoveries[t.told].Generation <= st.Rescalings[t.toldScales].Generation) {
			r := summarizeRecovery(st.Recoveries[t.told], nil)
			fmt.Fprintf(t.w, "%-*s %s: %s\n", kindWidth, "recovered", recoveryHeadline(r), r.Reason)
			t.told++
			continue
		}
		kind, line := rescalingLine(st.Rescalings[t.toldScales])
		fmt.Fprintf(t.w, "%-*s %s\n", kindWidth, kind, line)
		t.toldScales++
	}
}

// kindWidth is the width of the first column of watch's lines — the
// phase, or what changed (recovered, rescale …): the widest phase's
// (waiting-storage), so that every line's second column lines up.
var kindWidth = func() int {
	n := 0
	for _, p := range strings.Split(runPhases(), ", ") {
		n = max(n, len(p))
	}
	return max(n, len(phaseTerminated), len(phaseTimedOut), len("recovered"))
}()

// watchRun polls the run until it closes, drawing a progress line on w
// when it is a terminal (liveBar), else writing a line per change of
// phase and per tenth of the steps (or JSON lines), and returns the final
// status. It waits out trouble that passes (the server or the control
// worker away for a while), saying so once per kind; interrupted (ctx
// done), it returns ctx's error and says nothing more.
//
// before is an earlier run's last status that this one resumes (nil: none):
// its recoveries and node-count changes, carried over, are not said again.
func watchRun(ctx context.Context, c client.Client, id string, w io.Writer, jsonl bool, before *spec.RunStatus) (spec.RunStatus, error) {
	var bar *liveBar
	var lines *progressLines
	switch {
	case jsonl:
	case isTerminal(w):
		bar = &liveBar{w: w, cols: terminalCols(w)}
	default:
		lines = &progressLines{w: w, decile: -1}
	}
	address, _ := placeOf(c)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	var last int64 = -1
	var lastErr string
	var high stepMark
	changes := newChangeTeller(w, before)
	tell := func(st spec.RunStatus) {
		if jsonl || !changes.news(st) {
			return
		}
		bar.clear()
		changes.tell(st)
	}
	for {
		st, live, closed, err := readProgress(ctx, c, id)
		if ctx.Err() != nil {
			// Interrupted: what the poll says now is the interruption
			// (a call cut short), not the run's.
			return st, ctx.Err()
		}
		tell(st)
		if closed {
			if lines != nil && st.Phase != "" { // no status when the run failed
				lines.update(st, st.Step, st.Loss, st.SamplesPerSec, time.Time{}, time.Now())
			}
			if jsonl {
				// The end, as a line of its own: the status it ended in
				// (the workflow's, where its status query did not answer)
				// and, where it did not complete, why.
				line := progressLine(id, st, st.Step, st.Loss, st.SamplesPerSec)
				var ended *runEnded
				if st.Phase == "" && errors.As(err, &ended) {
					line["status"] = activities.ExecutionName(ended.status)
				}
				if err != nil {
					line["error"] = err.Error()
				}
				_ = json.NewEncoder(w).Encode(line)
			}
			if st.Phase != "" {
				bar.finish(st) // (the final figures, not the last poll's)
			} else {
				bar.clear()
			}
			return st, err
		}
		if err != nil && !transient(err) {
			bar.clear()
			return st, err
		}
		if !jsonl && err != nil && err.Error() != lastErr {
			bar.clear()
			fmt.Fprintf(w, "waiting: %s\n", trouble(err, address)) // once per kind of trouble
		}
		if err != nil {
			lastErr = err.Error()
		} else {
			lastErr = ""
		}
		now := time.Now()
		step, loss, sps, at := st.Step, st.Loss, st.SamplesPerSec, st.UpdatedAt
		// A chunk heartbeats from its start, before any step (loss 0): the
		// live figures win only once they are ahead of the status, as in
		// `status`.
		if live != nil && live.Step > step {
			step, loss, sps, at = live.Step, live.Loss, live.SamplesPerSec*float64(max(1, len(st.Nodes))), live.At
		}
		step = high.hold(st, step)
		switch {
		case jsonl && step != last && phaseLive(st.Phase):
			// (An ended phase is said once, by the run's last line, when
			// it has closed: the run's end was written twice.)
			_ = json.NewEncoder(w).Encode(progressLine(id, st, step, loss, sps))
		case lines != nil && err == nil:
			lines.update(st, step, loss, sps, at, now)
		case bar != nil && st.Phase != "":
			bar.draw(st, step, loss, sps, at, now)
		}
		last = step
		select {
		case <-ctx.Done():
			bar.clear()
			return st, ctx.Err()
		case <-tick.C:
		}
	}
}

// trouble is what watch says while it waits err out: that the server does
// not answer (at address, where known), said as such, else err.
func trouble(err error, address string) string {
	var noAnswer *noAnswerError // (a query's deadline: the control worker's silence)
	if errors.As(err, &noAnswer) || !serverSilent(err) {
		return err.Error()
	}
	return fmt.Sprintf("%s (%v); trying again", serverDown(address), err)
}

// liveBar is watchRun's progress on a terminal: one line redrawn in place,
// cut to the terminal's width (a longer one wraps, and each redraw then
// scrolls). While the run trains it gives the loss, samples/s and the ETA
// (etaMeter); while it does not, why (its status's detail), and no speed
// or ETA. A nil *liveBar draws nothing.
type liveBar struct {
	w     io.Writer
	cols  func() int // the terminal's width now
	eta   etaMeter
	shown bool // a line is drawn, not ended
}

// draw draws the line of run st at step (at: when the run had it, zero
// where not known) as of now.
func (b *liveBar) draw(st spec.RunStatus, step int64, loss float32, sps float64, at, now time.Time) {
	eta, ok := b.eta.estimate(st, step, at, now)
	st.Detail = greenDetail(st.Detail, now)
	fmt.Fprint(b.w, "\r"+barLine(st, step, loss, sps, eta, ok, b.cols())+"\033[K")
	b.shown = true
}

// finish draws the run's final status and ends the line.
func (b *liveBar) finish(st spec.RunStatus) {
	if b == nil {
		return
	}
	b.draw(st, st.Step, st.Loss, st.SamplesPerSec, time.Time{}, time.Now())
	fmt.Fprintln(b.w)
	b.shown = false
}

// clear erases the line drawn, for a line of text in its place.
func (b *liveBar) clear() {
	if b == nil || !b.shown {
		return
	}
	fmt.Fprint(b.w, "\r\033[K")
	b.shown = false
}

// terminalCols returns the width of the terminal w is (read at each call:
// it may be resized), 80 where it cannot be read.
func terminalCols(w io.Writer) func() int {
	return func() int {
		if f, ok := w.(*os.File); ok {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
				return cols
			}
		}
		return 80
	}
}

// barLine is liveBar's line, at most cols-1 columns (the last column would
// wrap on some terminals): the phase and step/total with the percentage;
// a bar where there is room for one; while training the ETA (etaOK:
// known); while training (and once ended) the loss; while training
// samples/s; the status's detail (why a run that does not train waits).
// The bar is barMax wide, narrower where the terminal is (down to
// barMin); where even that leaves no room for every figure, samples/s
// (the last, the one cut first) goes to make room for it, but no other
// figure does (below that the line has no bar, and samples/s again: an
// 80-column terminal drew none, though the percentage begs for one). What
// does not fit is cut, the end first. An external job cancelled before its
// first checkpoint has no step to show (stepUnknownAtEnd).
func barLine(st spec.RunStatus, step int64, loss float32, sps float64, eta time.Duration, etaOK bool, cols int) string {
	room := cols - 1
	if stepUnknownAtEnd(st) {
		return cutLine(fmt.Sprintf("%-*s %s", kindWidth, st.Phase, unknownEndShort), room)
	}
	// (The step padded to the total's digits: the bar does not move as
	// the step gains one.)
	head := fmt.Sprintf("%-*s %*d", kindWidth, st.Phase, len(strconv.FormatInt(max(0, st.TotalSteps), 10)), step)
	if st.TotalSteps > 0 {
		head += fmt.Sprintf("/%d %3d%%", st.TotalSteps, 100*min(step, st.TotalSteps)/st.TotalSteps)
	}
	figs := ""
	if st.Phase == spec.PhaseTraining && etaOK {
		figs += "  ETA " + etaText(eta)
	}
	if loss != 0 && (st.Phase == spec.PhaseTraining || !phaseLive(st.Phase)) {
		figs += fmt.Sprintf("  loss %.4g", loss)
	}
	speed := ""
	if st.Phase == spec.PhaseTraining && sps > 0 {
		speed = fmt.Sprintf("  %.0f samples/s", sps)
	}
	detail := ""
	if st.Detail != "" {
		detail = "  " + st.Detail
	}
	// The bar is as wide as the room left by the head and what the tail
	// may need — the figures' widest, not this redraw's: a figure a digit
	// longer or shorter must not move the bar at every redraw (nor may
	// samples/s come and go with it: whether it makes room for the bar
	// depends on the terminal's width alone).
	width := func(withSpeed bool) int {
		need, widest := utf8.RuneCountInString(figs), figuresWidestNoSpeed
		if withSpeed {
			need += utf8.RuneCountInString(speed)
			widest = figuresWidest
		}
		if st.Phase == spec.PhaseTraining {
			need = max(need, utf8.RuneCountInString(widest))
		}
		need += utf8.RuneCountInString(detail)
		return min(barMax, room-utf8.RuneCountInString(head)-3-need)
	}
	n, withSpeed := width(true), true
	if n < barMin && width(false) >= barMin {
		n, withSpeed = width(false), false
	}
	if n >= barMin && st.TotalSteps > 0 {
		done := int(int64(n) * min(step, st.TotalSteps) / st.TotalSteps)
		head += " [" + strings.Repeat("#", done) + strings.Repeat("-", n-done) + "]"
	} else {
		withSpeed = true // (no bar: nothing to make room for)
	}
	tail := figs
	if withSpeed {
		tail += speed
	}
	return cutLine(head+tail+detail, room)
}

// cutLine is line in at most room columns: cut, its end "…", where
// longer.
func cutLine(line string, room int) string {
	if r := []rune(line); len(r) > room {
		return strings.TrimRight(string(r[:max(0, room-1)]), " ") + "…"
	}
	return line
}

// The live line's bar is at most barMax wide; narrower than barMin, it is
// not drawn.
const (
	barMax = 30
	barMin = 10
)

// figuresWidest is as wide as a training run's figures in the live line
// get (barLine); figuresWidestNoSpeed the same without samples/s.
const (
	figuresWidestNoSpeed = "  ETA 59m59s  loss 0.0001234"
	figuresWidest        = figuresWidestNoSpeed + "  1234567 samples/s"
)

// etaText is an ETA to the second, or to the minute past an hour.
func etaText(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// etaMeter estimates how long a watched run has left from the steps it
// moved while watched — since the first poll of the stretch of training
// under way, not from the run's start: a watch that begins at step 32000
// did not see those steps go by. The speed is measured up to when the run
// had its newest step (its heartbeat's time), not up to the poll: the
// step moves once per heartbeat, and measured to the poll the speed fell
// between two and the ETA climbed by a fifth every second. A new
// generation, a pause or any other phase, or a step going back, starts a
// stretch again. Until a stretch has lasted etaSettle, the run's average
// speed (its status's steps_per_sec, where known) stands in.
type etaMeter struct {
	on    bool // a stretch of training is measured
	gen   int64
	from  time.Time // when the run had step0, the stretch's first step
	step0 int64
	at    time.Time // when the run had step, the newest step seen
	step  int64
}

// etaSettle is how long a stretch is measured before its own speed is
// trusted.
const etaSettle = 3 * time.Second

// estimate is the time left for run st at step, which it had at at (zero,
// or later than now: taken as now); false while the run does not train
// (no ETA), or its speed is not known yet.
func (m *etaMeter) estimate(st spec.RunStatus, step int64, at, now time.Time) (time.Duration, bool) {
	if st.Phase != spec.PhaseTraining || st.TotalSteps <= 0 {
		m.on = false
		return 0, false
	}
	if at.IsZero() || at.After(now) {
		at = now
	}
	if !m.on || st.Generation != m.gen || step < m.step0 {
		m.on, m.gen, m.from, m.step0, m.at, m.step = true, st.Generation, at, step, at, step
	}
	if step > m.step {
		if at.After(m.at) { // (two clocks a little apart: never back)
			m.at = at
		}
		m.step = step
	}
	left := st.TotalSteps - step
	if left <= 0 {
		return 0, true
	}
	rate := st.StepsPerSec
	if took := m.at.Sub(m.from); took >= etaSettle && m.step > m.step0 {
		rate = float64(m.step-m.step0) / took.Seconds()
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(left) / rate * float64(time.Second)), true
}

// stepMark keeps a watched run's step from going back while it trains on
// in one generation: between a launch's (or chunk's) last heartbeat and
// the status that takes in its end, the status may still say the step it
// started from, or its last checkpoint's. A recovery (a new generation),
// a pause or any other phase may rewind it, and then it does.
type stepMark struct {
	phase spec.Phase
	gen   int64
	step  int64
}

func (m *stepMark) hold(st spec.RunStatus, step int64) int64 {
	if st.Phase == spec.PhaseTraining && m.phase == spec.PhaseTraining && st.Generation == m.gen && step < m.step {
		return m.step
	}
	m.phase, m.gen, m.step = st.Phase, st.Generation, step
	return step
}

// noControlWorkerError: no worker polls the control task queue of the
// namespace, so no run there moves and no status query is answered.
type noControlWorkerError struct {
	namespace string // ("": not known, see placeOf)
}

// errNoControlWorker is every *noControlWorkerError to errors.Is.
var errNoControlWorker error = &noControlWorkerError{}

func (e *noControlWorkerError) Error() string {
	in := ""
	if e.namespace != "" {
		in = " in namespace " + e.namespace
	}
	return fmt.Sprintf("no control worker polls task queue %q%s: runs wait for one, and neither their status nor the node list can be read (start `%s`, or use `cann-train quickstart`)",
		spec.ControlTaskQueue, in, controlWorkerCmd(e.namespace))
}

func (e *noControlWorkerError) Is(target error) bool {
	_, ok := target.(*noControlWorkerError)
	return ok
}

// controlWorkerCmd is the command that starts a control worker serving
// namespace ("": not known).
func controlWorkerCmd(namespace string) string {
	if namespace == "" || namespace == "default" {
		return "cann-train worker control"
	}
	return "cann-train worker control --namespace " + namespace
}

// controlWorkerPolls returns a *noControlWorkerError (errNoControlWorker)
// naming c's namespace when the server lists no poller on the control
// task queue (queries would wait out their deadline); nil when it lists
// one or cannot say.
func controlWorkerPolls(ctx context.Context, c client.Client) error {
	if ok, err := workers.ControlWorkerPolls(ctx, c); err == nil && !ok {
		_, namespace := placeOf(c)
		return &noControlWorkerError{namespace: namespace}
	}
	return nil
}

// runEnded is a run that closed without a status: it failed, was
// terminated or timed out. Its message keeps what each layer said and
// drops what Temporal's errors repeat (the activity's IDs and identity,
// the cause quoted again in every wrapper).
type runEnded struct {
	id     string
	status enumspb.WorkflowExecutionStatus
	err    error
}

func (e *runEnded) Error() string {
	word, text := strings.ToLower(e.status.String()), failureText(e.err)
	status := word
	if e.status == enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		status = string(spec.PhaseCancelled) // (the status's word, not Temporal's spelling)
	}
	if text == "" || text == word || text == status { // a terminated run's error says only that
		return fmt.Sprintf("%s %s", e.id, status)
	}
	return fmt.Sprintf("%s %s: %s", e.id, status, text)
}

func (e *runEnded) Unwrap() error { return e.err }

// failureText is err's chain as one line: each wrapper's own words (its
// message less its cause's), the root cause's message and its type.
func failureText(err error) string {
	var parts []string
	for err != nil {
		next := errors.Unwrap(err)
		var own string
		switch e := err.(type) {
		case *temporal.WorkflowExecutionError, *temporal.ActivityError:
			// Only IDs and the cause.
		case *temporal.ApplicationError:
			own = e.Message()
			if next != nil {
				// A wrapped Go error's message is its cause's text as
				// the workflow saw it: an error's message, not its
				// Error() with the type the conversion adds.
				said := next.Error()
				if n, ok := next.(*temporal.ApplicationError); ok {
					said = n.Message()
				}
				cut, ok := strings.CutSuffix(own, said)
				if !ok { // the message does not quote its cause: it says it all (a failed run's own error)
					next = nil
				}
				own = cut
			}
			if next == nil && e.Type() != "" && e.Type() != "wrapError" && e.Type() != spec.ErrTypeRunFailed {
				own += " (" + e.Type() + ")"
			}
		default:
			own = err.Error()
			next = nil
		}
		if own = strings.TrimSuffix(strings.TrimSpace(own), ":"); own != "" {
			parts = append(parts, own)
		}
		err = next
	}
	return strings.Join(parts, ": ")
}

// isTerminal reports whether w is a terminal, where a redrawn progress bar
// makes sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressLines is watchRun's output to a log or a pipe: one line when the
// phase changes (or, while the run does not train, what it waits for)
// and one per tenth of the steps — with the ETA while the run trains —,
// instead of a bar redrawn with carriage returns several times a second.
// A detail that comes and goes while the run trains (the carbon intensity
// read at a chunk boundary) is no news: it doubled lines.
type progressLines struct {
	w      io.Writer
	phase  spec.Phase
	detail string
	decile int64
	eta    etaMeter
}

// update takes a poll of run st at step (at: when the run had it, zero
// where not known), as of now.
func (p *progressLines) update(st spec.RunStatus, step int64, loss float32, sps float64, at, now time.Time) {
	eta, etaOK := p.eta.estimate(st, step, at, now)
	decile := int64(0)
	if st.TotalSteps > 0 {
		decile = min(step, st.TotalSteps) * 10 / st.TotalSteps
	}
	detailNews := st.Detail != p.detail && st.Phase != spec.PhaseTraining
	if st.Phase == p.phase && !detailNews && decile == p.decile {
		return
	}
	p.phase, p.detail, p.decile = st.Phase, st.Detail, decile
	if stepUnknownAtEnd(st) {
		fmt.Fprintf(p.w, "%-*s %s\n", kindWidth, st.Phase, unknownEndShort)
		return
	}
	if st.Phase != spec.PhaseTraining {
		sps = 0 // (the last chunk's: not the speed of a run that does not train)
	}
	line := fmt.Sprintf("%-*s step %d/%d", kindWidth, st.Phase, step, st.TotalSteps)
	if st.Phase == spec.PhaseTraining && etaOK {
		line += "  ETA " + etaText(eta)
	}
	line += figures(loss, sps, 0)
	if st.Detail != "" {
		line += "  (" + greenDetail(st.Detail, now) + ")"
	}
	fmt.Fprintln(p.w, line)
}

// figures are a progress line's loss and speed (padded to width, for a
// bar redrawn in place), each left out while it is zero (nothing trained
// yet, or a job that reports no loss).
func figures(loss float32, sps float64, width int) string {
	out := ""
	if loss != 0 {
		out += fmt.Sprintf("  loss %.4g", loss)
	}
	if sps > 0 {
		out += fmt.Sprintf("  %*.0f samples/s", width, sps)
	}
	return out
}

// transient errors (a query while no control worker polls, say; the
// server restarting) are retried by the next poll. A run the server does
// not know is not: it was never started under that name (or is past the
// namespace's retention), and `watch nosuch` waited forever.
func transient(err error) bool {
	var nf *serviceerror.NotFound
	return !errors.Is(err, context.Canceled) && !errors.As(err, &nf)
}

// Summary is the run summary that quickstart and `run --wait -o json` print.
type Summary struct {
	// runWith is the command that ran it, when known (`run -f FILE
	// --wait`): the resume hint names its job file rather than JOB.
	runWith string
	// serverGone: the server that ran it has stopped (a quickstart's,
	// without --keep): no hint names a command that would ask it.
	serverGone bool
	WorkflowID string     `json:"workflow_id"`
	Status     spec.Phase `json:"status"`
	Model      string     `json:"model"`
	Nodes      []string   `json:"nodes"`
	// Steps is the step reached; Step says the same under the name the
	// dashboard and `watch -o jsonl` give it (their "steps" is the job's,
	// total_steps here).
	Steps int64 `json:"steps"`
	Step  int64 `json:"step"`
	// LastStepAt is when a node of the chunk or launch in flight last
	// reported a step (live runs, `status` only): its age tells a script
	// or rank that stopped stepping.
	LastStepAt time.Time `json:"last_step_at,omitzero"`
	// StoringCheckpoint is the step of the checkpoint a node of the chunk
	// in flight says it is storing (live runs, `status` only; 0: none),
	// since StoringSince (the node's clock).
	StoringCheckpoint int64     `json:"storing_checkpoint,omitempty"`
	StoringSince      time.Time `json:"storing_since,omitzero"`
	// liveStep and liveTo are the chunk in flight's step and end, from
	// its heartbeat (livenow): a chunk stepped to its end and silent since
	// is storing its checkpoint.
	liveStep, liveTo int64
	// TotalSteps is the job's steps (0: an external job that gave none).
	TotalSteps     int64             `json:"total_steps"`
	InitialLoss    float32           `json:"initial_loss"`
	FinalLoss      float32           `json:"final_loss"`
	EvalMetricName string            `json:"eval_metric_name"`
	EvalMetric     float64           `json:"eval_metric"` // (null where EvalMetricName is empty: MarshalJSON)
	WallSeconds    float64           `json:"wall_seconds"`
	StepsPerSec    float64           `json:"steps_per_sec"`
	SamplesPerSec  float64           `json:"samples_per_sec"`
	CommShare      float64           `json:"comm_share"`
	ScalingEff     float64           `json:"scaling_efficiency,omitempty"`
	ChunkIdle      float64           `json:"chunk_idle_s"`
	Chunks         int               `json:"chunks"`
	Checkpoints    CheckpointsInfo   `json:"checkpoints"`
	Recoveries     []RecoverySummary `json:"recoveries"`
	// Rollovers: an external job's launches stopped after a checkpoint
	// for the run to continue as new (its history had grown long).
	Rollovers int `json:"rollovers,omitempty"`
	// Resumed: the earlier runs of this name it continues (run --resume).
	Resumed       []spec.Resumption `json:"resumed,omitempty"`
	WeightsSHA256 string            `json:"weights_sha256"`
	// DataSHA256 fingerprints the data set the run trains on.
	DataSHA256 string `json:"data_sha256,omitempty"`
	// SlowNodes are the nodes setting the run's pace (spec.SlowNode).
	SlowNodes []spec.SlowNode `json:"slow_nodes,omitempty"`
	// Crowded is a node with fewer cores than ranks (spec.RunStatus.Crowded).
	Crowded *spec.CrowdedNode `json:"crowded,omitempty"`
	// CutOff are the nodes the run left for being cut off from its
	// checkpoint bucket (spec.RunStatus.CutOff).
	CutOff []string `json:"cut_off,omitempty"`
	WebUI  string   `json:"web_ui,omitempty"`
	Error  string   `json:"error,omitempty"`
	// Detail says what the status is about (the green window waited for,
	// the pause, the storage held for); WaitUntil ends a green wait, or
	// the wait before the run stores its checkpoint again.
	Detail         string        `json:"detail,omitempty"`
	WaitUntil      time.Time     `json:"wait_until,omitzero"`
	PauseRequested bool          `json:"pause_requested,omitempty"`
	PendingNodes   int           `json:"pending_nodes,omitempty"`
	RefusedRescale string        `json:"refused_rescale,omitempty"`
	RefusedSignal  string        `json:"refused_signal,omitempty"`
	IgnoredSignals []string      `json:"ignored_signals,omitempty"`
	TargetNodes    int           `json:"target_nodes,omitempty"`
	Evicting       []string      `json:"evicting,omitempty"`
	Stopping       []string      `json:"stopping,omitempty"`
	Leaving        []string      `json:"leaving,omitempty"`
	NodeAsk        *spec.NodeAsk `json:"node_ask,omitempty"`
	// Waiting says why a run waiting for free nodes waits (waitNote: the
	// run it waits behind, who holds the nodes); `status` asks the node
	// registry for it.
	Waiting      string             `json:"waiting,omitempty"`
	MinNodes     int                `json:"min_nodes,omitempty"`
	GlobalBatch  int                `json:"global_batch,omitempty"`
	RanksPerNode int                `json:"ranks_per_node,omitempty"`
	Rescalings   []spec.Rescaling   `json:"rescalings,omitempty"`
	Green        *spec.GreenStatus  `json:"green,omitempty"`
	Topology     *spec.TopologyPlan `json:"topology,omitempty"`
	// Sync is the gradient exchange's policy (optimizer, compression,
	// overlap) and what it achieved.
	Sync *spec.SyncStatus `json:"sync,omitempty"`
	// Strategy is the parallel-strategy search's plan (strategy: auto).
	Strategy *spec.StrategyPlan `json:"strategy,omitempty"`
	// Energy is what the nodes' meters measured of the trained stretches
	// (absent when nothing was measured).
	Energy *EnergySummary `json:"energy,omitempty"`
	// Report is where the finished run's report is stored ("URL KEY").
	Report string `json:"report,omitempty"`
	// Logs are the last lines of each process of a running external job,
	// per node (`status` only, while a launch runs; the whole logs are on
	// the nodes and, once a launch ends, in the run's bucket).
	Logs []spec.NodeLogs `json:"logs,omitempty"`
}

// summaryFields are Summary's, without its MarshalJSON.
type summaryFields Summary

// summaryJSON is Summary as JSON (MarshalJSON).
type summaryJSON struct {
	summaryFields
	EvalMetric *float64 `json:"eval_metric"`
}

// jsonForm is s as JSON writes it: eval_metric null where the run has no
// evaluation (eval_metric_name empty).
func (s Summary) jsonForm() summaryJSON {
	out := summaryJSON{summaryFields: summaryFields(s)}
	if s.EvalMetricName != "" {
		v := s.EvalMetric
		out.EvalMetric = &v
	}
	return out
}

// MarshalJSON writes s with eval_metric null where the run has no
// evaluation: a failed run's "eval_metric": 0 read as 0 % accuracy.
// (quickstartSummary, which embeds it, has its own.)
func (s Summary) MarshalJSON() ([]byte, error) { return json.Marshal(s.jsonForm()) }

// RecoverySummary is one node replacement as users read it. Times are
// measured from the fault when the CLI injected it (quickstart --inject:
// the kill, or the freeze), else from the first surviving peer noticing
// the loss.
type RecoverySummary struct {
	Generation  int64    `json:"generation"`
	FailedNode  string   `json:"failed_node"`
	FailedNodes []string `json:"failed_nodes"`
	// Replacement is the first of Replacements (the spares that took the
	// failed nodes' ranks).
	Replacement  string   `json:"replacement"`
	Replacements []string `json:"replacements,omitempty"`
	// Back are failed nodes taken again (their workers restarted); Nodes
	// the run's size after the recovery (0: not recorded).
	Back  []string `json:"back,omitempty"`
	Nodes int      `json:"nodes,omitempty"`
	// Removed are the nodes the run left behind (the failed ones not
	// back, and after a shrink any no longer alive).
	Removed      []string `json:"removed,omitempty"`
	Reason       string   `json:"reason"`
	FailedAtStep int64    `json:"failed_at_step"`
	ResumeStep   int64    `json:"resume_step"`
	LostSteps    int64    `json:"lost_steps"`
	// StepUnknown: how far the failed chunk got is unknown (an outage):
	// its steps past FailedAtStep were lost too (spec.Recovery).
	StepUnknown bool `json:"step_unknown,omitempty"`
	// ResumeLoss is the first loss after the recovery (0: unknown).
	ResumeLoss float32 `json:"resume_loss,omitempty"`
	// DetectSeconds: fault → the workflow acts on the failure.
	DetectSeconds float64 `json:"detect_s"`
	// ReplaceSeconds: the workflow acts → new membership.
	ReplaceSeconds float64 `json:"replace_s"`
	// ResumeSeconds: fault → first completed step after the recovery.
	ResumeSeconds float64 `json:"resume_s"`
	// From says what the times count from: "kill", "freeze",
	// "peer_notice", or "failure_seen" when nothing earlier is known (the
	// nodes fell silent: no peer noticed; DetectSeconds is then 0).
	From string `json:"from"`
	// Shrunk: no spare was free; the run went on with fewer nodes.
	Shrunk bool `json:"shrunk,omitempty"`
	// Outage: every node's heartbeats were lost at once and every node
	// answered after (the service was out): none failed, no restart.
	Outage bool `json:"outage,omitempty"`
	// Stopped: the failed node's worker was stopping; its chunk ended
	// early at a checkpoint (no step lost, no restart counted).
	Stopped bool `json:"stopped,omitempty"`
}

// injected is a fault the CLI injected: when it struck the node and its
// kind (spec.FaultKill or spec.FaultFreeze).
type injected struct {
	at   time.Time
	kind string
}

func summarizeRecovery(r spec.Recovery, faults map[string]injected) RecoverySummary {
	out := RecoverySummary{
		Generation: r.Generation, FailedNodes: r.FailedNodes, Reason: r.Reason,
		FailedAtStep: r.FailedAtStep, ResumeStep: r.ResumeStep, LostSteps: r.LostSteps, StepUnknown: r.StepUnknown, ResumeLoss: r.ResumeLoss,
		ReplaceSeconds: r.ReplaceSeconds, From: "peer_notice", Shrunk: r.Shrunk, Outage: r.Outage, Stopped: r.Stopped,
		Replacements: r.Replacement, Back: r.Back, Nodes: r.Nodes, Removed: r.Removed,
	}
	if len(r.FailedNodes) > 0 {
		out.FailedNode = r.FailedNodes[0]
	}
	if len(r.Replacement) > 0 {
		out.Replacement = r.Replacement[0]
	}
	t0 := r.NoticedAt
	if f, ok := faults[out.FailedNode]; ok {
		t0, out.From = f.at, f.kind
	}
	if t0.IsZero() {
		t0, out.From = r.SeenAt, "failure_seen"
	}
	if !t0.IsZero() {
		out.DetectSeconds = r.SeenAt.Sub(t0).Seconds()
		if !r.ResumedAt.IsZero() {
			out.ResumeSeconds = r.ResumedAt.Sub(t0).Seconds()
		}
	}
	return out
}

// EnergySummary is the energy the nodes' meters measured over a run's
// trained stretches (its segments): facility overhead (a green policy's
// PUE) included, waits and failed work not.
type EnergySummary struct {
	KWh float64 `json:"kwh"`
	// MeanWatts is KWh over the measured stretches' training time.
	MeanWatts float64 `json:"mean_watts"`
	// TrainedSeconds is the measured stretches' training time.
	TrainedSeconds float64 `json:"trained_s"`
	// Measured of Segments stretches carry a measurement (the others ran
	// where a node had no meter).
	Measured int `json:"measured_segments"`
	Segments int `json:"segments"`
}

// energySummary sums the measured segments; nil when none is.
func energySummary(segs []spec.Segment) *EnergySummary {
	e := &EnergySummary{}
	var joules float64
	for _, sg := range segs {
		if sg.Lost {
			continue // a failed chunk: modelled, in the green report
		}
		e.Segments++
		if sg.Joules > 0 {
			e.Measured++
			joules += sg.Joules
			e.TrainedSeconds += sg.WallSeconds
		}
	}
	if e.Segments == 0 {
		return nil
	}
	e.KWh = joules / energy.JoulesPerKWh
	if e.TrainedSeconds > 0 {
		e.MeanWatts = joules / e.TrainedSeconds
	}
	return e
}

// CheckpointsInfo counts checkpoints and names the last one.
type CheckpointsInfo struct {
	Count    int    `json:"count"`
	LastURL  string `json:"last_url"`
	LastStep int64  `json:"last_step,omitempty"`
	// Failed is the last checkpoint whose upload failed, when none
	// committed since.
	Failed *spec.CheckpointFailure `json:"failed,omitempty"`
}

func summarize(st spec.RunStatus, uiBase, namespace string, faults map[string]injected) Summary {
	s := Summary{
		WorkflowID: st.RunID, Status: st.Phase, Model: st.Model, Nodes: st.Nodes, Steps: st.Step, Step: st.Step, TotalSteps: st.TotalSteps,
		InitialLoss: st.InitialLoss, FinalLoss: st.Loss, EvalMetricName: st.EvalMetric, EvalMetric: st.EvalValue,
		WallSeconds: st.UpdatedAt.Sub(st.StartedAt).Seconds(), StepsPerSec: st.StepsPerSec,
		SamplesPerSec: st.SamplesPerSec, CommShare: st.CommShare, ScalingEff: st.ScalingEfficiency, ChunkIdle: st.ChunkIdleSeconds, Chunks: st.Chunks,
		Checkpoints: CheckpointsInfo{Count: st.Checkpoints}, Recoveries: []RecoverySummary{}, Rollovers: st.Rollovers, Resumed: st.Resumed,
		WeightsSHA256: st.WeightsSHA256, DataSHA256: st.DataSHA256, SlowNodes: st.SlowNodes, Crowded: st.Crowded, CutOff: st.CutOff, Error: st.Error,
		Detail: st.Detail, WaitUntil: st.WaitUntil, PauseRequested: st.PauseRequested, PendingNodes: st.PendingNodes, RefusedRescale: st.RefusedRescale, RefusedSignal: st.RefusedSignal, IgnoredSignals: st.IgnoredSignals, TargetNodes: st.TargetNodes,
		Evicting: st.Evicting, Stopping: st.Stopping, Leaving: st.Leaving, NodeAsk: st.NodeAsk, MinNodes: st.MinNodes, GlobalBatch: st.GlobalBatch, RanksPerNode: st.RanksPerNode, Rescalings: st.Rescalings, Green: st.Green,
		Topology: st.Topology, Sync: st.Sync, Strategy: st.Strategy, Report: st.Report,
		Energy: energySummary(st.Segments),
	}
	for _, r := range st.Recoveries {
		s.Recoveries = append(s.Recoveries, summarizeRecovery(r, faults))
	}
	if st.LastCkpt != nil {
		s.Checkpoints.LastURL, s.Checkpoints.LastStep = checkpointURL(*st.LastCkpt), st.LastCkpt.Step
	}
	s.Checkpoints.Failed = st.CheckpointFailed
	if uiBase != "" && st.RunID != "" {
		s.WebUI = workflowURL(uiBase, namespace, st.RunID)
	}
	return s
}

// workflowURL is the Web UI's page of workflow id at uiBase.
func workflowURL(uiBase, namespace, id string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(uiBase, "/"), url.PathEscape(namespace), url.PathEscape(id))
}

// checkpointURL names a checkpoint's manifest as one URL.
func checkpointURL(r spec.CheckpointRef) string {
	u, err := url.Parse(r.URL)
	if err != nil {
		return r.URL + "/" + r.Key
	}
	u.RawQuery = ""
	return strings.TrimRight(u.String(), "/") + "/" + r.Key
}

// staleStep is the age past which status says when the last step came.
const staleStep = 30 * time.Second

// livenow completes a live run's summary at now: its wall time so far (not
// to its last status change) and when the chunk or launch in flight last
// reported a step.
func livenow(s *Summary, st spec.RunStatus, live *spec.ChunkProgress, now time.Time) {
	if !st.StartedAt.IsZero() && now.After(st.StartedAt) {
		s.WallSeconds = now.Sub(st.StartedAt).Seconds()
	}
	if live != nil && !live.At.IsZero() {
		s.LastStepAt = live.At
	}
	if live != nil {
		s.liveStep, s.liveTo = live.Step, live.To
		s.StoringCheckpoint, s.StoringSince = live.Storing, live.StoringSince
	}
}

func printStatus(w io.Writer, st spec.RunStatus, output, uiBase, namespace string) error {
	return printSummary(w, st, summarize(st, uiBase, namespace, nil), output)
}

// printStatusOf is printStatus for the run that command started (`run -f
// FILE --wait`): its resume hint is that command.
func printStatusOf(w io.Writer, st spec.RunStatus, output, uiBase, namespace, command string) error {
	s := summarize(st, uiBase, namespace, nil)
	s.runWith = command
	return printSummary(w, st, s, output)
}

func printSummary(w io.Writer, st spec.RunStatus, s Summary, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return printSummaryAt(w, st, s, time.Now())
}

// printSummaryAt is printSummary's text as of asOf.
func printSummaryAt(w io.Writer, st spec.RunStatus, s Summary, asOf time.Time) error {
	fmt.Fprintf(w, "run          %s\n", s.WorkflowID)
	fmt.Fprintf(w, "status       %s\n", statusLineAt(s, asOf))
	if s.Waiting != "" {
		fmt.Fprintf(w, "waiting      %s\n", s.Waiting)
	}
	live := phaseLive(s.Status)
	switch {
	case len(s.Nodes) == 0 && live:
		fmt.Fprintf(w, "model        %s, no nodes yet\n", s.Model)
	case len(s.Nodes) == 0:
		fmt.Fprintf(w, "model        %s, had no nodes\n", s.Model)
	default:
		ranks := ""
		if s.RanksPerNode > 1 {
			ranks = fmt.Sprintf(", %d ranks", len(s.Nodes)*s.RanksPerNode)
		}
		on := " on"
		if !live && s.Status != spec.PhaseCompleted {
			on = ", had" // (given back: they are the pool's again)
		}
		fmt.Fprintf(w, "model        %s%s %d node(s)%s %v\n", s.Model, on, len(s.Nodes), ranks, s.Nodes)
	}
	printControls(w, s)
	if s.RefusedSignal != "" {
		fmt.Fprintf(w, "signal       %s\n", s.RefusedSignal)
	}
	if len(s.IgnoredSignals) > 0 {
		send := "; `cann-train pause|resume|scale|green` send them"
		if s.serverGone {
			send = ""
		}
		fmt.Fprintf(w, "signal       ignored, not a run's: %s (a run's signals: pause, resume, rescale, green-override, evict, inject-fault%s)\n",
			strings.Join(s.IgnoredSignals, ", "), send)
	}
	switch {
	case stepUnknownAtEnd(st) && st.TotalSteps == 0:
		fmt.Fprintln(w, "steps        - (not known: it stored no checkpoint, where an external job's step is recorded)")
	case stepUnknownAtEnd(st):
		fmt.Fprintf(w, "steps        -/%d (not known: it stored no checkpoint, where an external job's step is recorded)\n", st.TotalSteps)
	case st.Model == spec.ModelExternal && st.TotalSteps == 0:
		fmt.Fprintf(w, "steps        %d (the job has not said its total yet)\n", st.Step)
	case st.Model == spec.ModelExternal:
		// An external job runs in launches of its script, not chunks.
		fmt.Fprintf(w, "steps        %d/%d\n", st.Step, st.TotalSteps)
	default:
		fmt.Fprintf(w, "steps        %d/%d in %d chunk(s)\n", st.Step, st.TotalSteps, s.Chunks)
	}
	if age := asOf.Sub(s.LastStepAt); !s.LastStepAt.IsZero() && age > staleStep && s.Status == spec.PhaseTraining {
		who := "a node" // (one that hangs is found by its heartbeat timeout)
		switch {
		case st.Model == spec.ModelExternal:
			who = "the script (a rank stuck in a collective, a slow data loader, a long evaluation)"
		case s.StoringCheckpoint > 0:
			for_ := ""
			if !s.StoringSince.IsZero() {
				for_ = fmt.Sprintf(" for %s", asOf.Sub(s.StoringSince).Round(time.Second))
			}
			fmt.Fprintf(w, "             no step reported for %s: a node of the chunk in flight has been storing the checkpoint at step %d%s: "+
				"the checkpoint bucket has not taken it yet (an upload, or a save it does not answer: up to the request timeout a try)\n",
				age.Round(time.Second), s.StoringCheckpoint, for_)
			who = ""
		case s.liveTo > 0 && s.liveStep >= s.liveTo && len(s.Nodes) > 0:
			// (Node workers from before ChunkProgress.Storing.)
			// Every step of the chunk is trained: its rank 0 stores the
			// checkpoint there (an upload, a save the bucket holds up to
			// its request timeout a try), not a node that stopped.
			fmt.Fprintf(w, "             no step reported for %s: the chunk in flight trained to its end, step %d, and its rank 0 (node %s) "+
				"is storing the checkpoint there: the checkpoint bucket has not taken it yet (an upload, or a save it does not answer: "+
				"up to the request timeout a try)\n", age.Round(time.Second), s.liveStep, s.Nodes[0])
			who = ""
		}
		if who != "" {
			fmt.Fprintf(w, "             no step reported for %s: %s has not moved past step %d\n", age.Round(time.Second), who, st.Step)
		}
	}
	// Before any chunk ended (the first, which may take minutes, or one
	// lost before it did) there is no first loss nor a measured speed: a
	// chunk in flight's heartbeat gives the step and loss. A run that
	// ended so will never have them.
	first := st.Model != spec.ModelExternal && s.Chunks == 0 && s.InitialLoss == 0
	switch {
	case st.Model == spec.ModelExternal && s.InitialLoss == 0 && s.FinalLoss == 0:
		fmt.Fprintln(w, "loss         - (none reported)")
	case first && st.Step > 0 && s.FinalLoss != 0 && !live:
		fmt.Fprintf(w, "loss         %.4g at step %d (its last; it ended before a chunk did)\n", s.FinalLoss, st.Step)
	case first && st.Step > 0 && live:
		fmt.Fprintf(w, "loss         %.4g at step %d (the chunk in flight's; none has ended yet)\n", s.FinalLoss, st.Step)
	case first && !live:
		fmt.Fprintln(w, "loss         - (it ended before a chunk did)")
	case first:
		fmt.Fprintln(w, "loss         - (no chunk has ended yet)")
	default:
		fmt.Fprintf(w, "loss         %.4g → %.4g\n", s.InitialLoss, s.FinalLoss)
	}
	if s.EvalMetricName != "" {
		fmt.Fprintf(w, "eval         %s %.4f\n", s.EvalMetricName, s.EvalMetric) // (the name in the label's column overran it)
	}
	// Each figure says its basis: steps/s is the run's average over its
	// trained chunks, samples/s and the comm share the last chunk's (or
	// launch's) — under one label, 249.7 steps/s × a batch of 96 was not
	// the 30943 samples/s beside it.
	switch {
	case st.Model == spec.ModelExternal && s.StepsPerSec == 0:
		// (measured when a launch ends: none has yet)
	case st.Model == spec.ModelExternal && s.SamplesPerSec == 0: // (its script's communication is its own)
		fmt.Fprintf(w, "speed        %.1f steps/s over the run; samples/s - (the script reports no samples_per_sec)\n", s.StepsPerSec)
	case st.Model == spec.ModelExternal:
		fmt.Fprintf(w, "speed        %.1f steps/s over the run; last launch %.0f samples/s\n", s.StepsPerSec, s.SamplesPerSec)
	case s.Chunks == 0 && s.StepsPerSec == 0 && !live:
		fmt.Fprintln(w, "speed        - (not measured: it ended before a chunk did)")
	case s.Chunks == 0 && s.StepsPerSec == 0:
		fmt.Fprintln(w, "speed        measured when the first chunk ends (`cann-train watch` shows the chunk in flight's)")
	default:
		fmt.Fprintf(w, "speed        %.1f steps/s over the run; last chunk %.0f samples/s, comm share %.0f%%; idle between chunks %.3fs\n",
			s.StepsPerSec, s.SamplesPerSec, 100*s.CommShare, s.ChunkIdle)
	}
	for _, sn := range s.SlowNodes {
		drain := fmt.Sprintf(" (`cann-train nodes drain %s` moves the run off it)", sn.NodeID)
		if s.serverGone {
			drain = ""
		}
		fmt.Fprintf(w, "slow node    %s computes %.1f× its peers' time, %d chunks in a row since step %d: the run trains at its pace%s\n",
			sn.NodeID, sn.Factor, sn.Chunks, sn.Since, drain)
	}
	if c := s.Crowded; c != nil {
		fmt.Fprintf(w, "crowded      %s trains %d ranks on %d core(s): they take turns (%.3g per core), and ranks beyond its cores add no computation\n",
			c.NodeID, c.Ranks, c.Cores, float64(c.Ranks)/float64(c.Cores))
	}
	for _, id := range s.CutOff {
		fmt.Fprintf(w, "cut off      %s could not reach the run's checkpoint bucket where its peers did: the run took it off and takes it no more until its worker registers again\n", id)
	}
	if s.ScalingEff > 0 {
		fmt.Fprintf(w, "scaling      %.0f%% of %d× one rank on a core of its own (the topology scan's measured computation)\n",
			100*s.ScalingEff, len(s.Nodes)*max(1, s.RanksPerNode))
	}
	if s.Checkpoints.LastURL == "" {
		fmt.Fprintf(w, "checkpoints  %d\n", s.Checkpoints.Count)
	} else {
		fmt.Fprintf(w, "checkpoints  %d, last %s\n", s.Checkpoints.Count, s.Checkpoints.LastURL)
	}
	if f := s.Checkpoints.Failed; f != nil {
		fmt.Fprintf(w, "             the checkpoint at step %d could not be stored (none since): %s\n", f.Step, f.Error)
	}
	for i, r := range s.Resumed {
		fmt.Fprintf(w, "resumed      from step %d at %s: an earlier run %s\n", r.FromStep, r.At.UTC().Format("2006-01-02 15:04:05"), endedAs(r.Phase, r.Step, r.Error))
		now := s.DataSHA256 // the data set of the run after this resumption
		if i+1 < len(s.Resumed) {
			now = s.Resumed[i+1].DataSHA256
		}
		if r.DataSHA256 != "" && now != "" && now != r.DataSHA256 {
			fmt.Fprintf(w, "             on another data set: it trained on sha256 %s, the run after it on %s\n", r.DataSHA256, now)
		}
	}
	if s.Rollovers > 0 {
		fmt.Fprintf(w, "rollovers    %d (relaunched from a checkpoint to continue as new: the history had grown long)\n", s.Rollovers)
	}
	fmt.Fprintf(w, "recoveries   %d\n", len(s.Recoveries))
	for _, r := range s.Recoveries {
		times := recoveryTimes(r)
		if times != "" {
			times = "; " + times
		}
		fmt.Fprintf(w, "  %s%s\n      %s\n", recoveryHeadline(r), times, r.Reason)
	}
	if s.Sync != nil {
		fmt.Fprintf(w, "gradients    %s\n", s.Sync)
		if s.Sync.Decision != "" {
			fmt.Fprintf(w, "             decided at step %d: %s\n", s.Sync.DecidedAtStep, s.Sync.Decision)
		}
		if s.Sync.Phase != "" {
			fmt.Fprintf(w, "             now: %s\n", s.Sync.Phase)
		}
	}
	printStrategy(w, s.Strategy, s.RanksPerNode, s.StepsPerSec)
	if e := s.Energy; e != nil && e.Measured == 0 {
		how := "" // (its green policy's signal prices it)
		if s.Green == nil {
			how = " --trace FILE --trace-start TIME" // (no policy: a trace, replayed from a time it holds)
		}
		report := fmt.Sprintf("`cann-train green report %s%s`", strings.TrimPrefix(s.WorkflowID, spec.RunIDPrefix), how)
		if s.serverGone {
			// (It reads the run from the server, which has stopped.)
			report = "with `--keep` the server stays up for " + report + " to model it"
		} else {
			report += " models it"
		}
		fmt.Fprintf(w, "energy       not measured: no node had a meter (%s)\n", report)
	} else if e != nil {
		all := ""
		if e.Measured < e.Segments {
			all = fmt.Sprintf("; %d of %d trained stretches (the others ran where a node had no meter)", e.Measured, e.Segments)
		}
		fmt.Fprintf(w, "energy       %.4f kWh measured, %.0f W over %s of training%s\n",
			e.KWh, e.MeanWatts, (time.Duration(e.TrainedSeconds * float64(time.Second))).Round(time.Second), all)
	}
	printGreenOf(w, s.Green, live, !s.serverGone, asOf)
	printTopology(w, s.Topology)
	if s.WeightsSHA256 != "" {
		fmt.Fprintf(w, "weights      sha256 %s\n", s.WeightsSHA256)
	}
	if s.DataSHA256 != "" {
		fmt.Fprintf(w, "data         sha256 %s (the data set every node compared)\n", s.DataSHA256)
	}
	fmt.Fprintf(w, "wall         %.1fs\n", s.WallSeconds)
	ended := s.Error
	if st.Error == s.Error {
		ended = endText(st)
	}
	switch {
	case s.Error != "" && s.Status == spec.PhaseCancelled:
		fmt.Fprintf(w, "ended        %s\n", ended) // (asked for: no error)
	case s.Error != "":
		fmt.Fprintf(w, "error        %s\n", ended)
	}
	if !live && s.Status != spec.PhaseCompleted && s.Checkpoints.LastURL != "" && st.Step < st.TotalSteps {
		again := resumeCommand(s.WorkflowID)
		if s.runWith != "" {
			again = s.runWith + " --resume"
		}
		fmt.Fprintf(w, "resume       %s continues it from step %d\n", again, s.Checkpoints.LastStep)
	}
	printLogs(w, runName(s.WorkflowID), s.Logs)
	if s.Report != "" {
		fmt.Fprintf(w, "report       %s\n", reportURL(s.Report))
	}
	if s.WebUI != "" {
		fmt.Fprintf(w, "web UI       %s\n", s.WebUI)
	}
	return nil
}

// resumeCommand is the command that continues run id (its workflow ID)
// from its last checkpoint: its job file under the run's name, which
// --name may have given it.
func resumeCommand(id string) string {
	return fmt.Sprintf("cann-train run -f JOB --name %s --resume", runName(id))
}

// reportURL names a stored report ("URL KEY", Summary.Report) as one URL,
// as checkpointURL names a checkpoint; as it is when it is not "URL KEY".
func reportURL(report string) string {
	i := strings.LastIndex(report, " ") // (the key has no space; a file URL's path may)
	if i < 0 {
		return report
	}
	return checkpointURL(spec.CheckpointRef{URL: report[:i], Key: report[i+1:]})
}

// printLogs prints the live log tails of an external job's processes
// (of run name), and where their whole logs are: each process's file on
// its node, and the launch's directory in the run's bucket — named
// run_<name>_g<generation>_e<launch>, as the session the tails are of.
func printLogs(w io.Writer, name string, logs []spec.NodeLogs) {
	if len(logs) == 0 {
		return
	}
	where := "on the nodes; in the run's bucket once the launch ends"
	if s := logs[0].Session; s != "" {
		where = fmt.Sprintf("on each node, the file named; in the run's bucket under %s/ once the launch ends",
			path.Dir(activities.LogKey(name, s, "rank-0")))
	}
	fmt.Fprintf(w, "logs         last %d lines per process, live (whole logs: %s)\n", spec.LogTailLines, where)
	for _, n := range logs {
		for _, p := range n.Procs {
			if n.Dir != "" {
				fmt.Fprintf(w, "  %s on %s: %s\n", p.Process, n.Node, filepath.Join(n.Dir, p.Process+".log"))
			} else {
				fmt.Fprintf(w, "  %s on %s\n", p.Process, n.Node)
			}
			if len(p.Lines) == 0 {
				fmt.Fprintln(w, "    (no output yet)")
			}
			for _, l := range p.Lines {
				fmt.Fprintf(w, "    | %s\n", l)
			}
		}
	}
}

// statusLine is the phase with what it is about: "paused at step 200…"
// (a detail that begins with the phase, alone), "waiting-green: waiting
// for the green window until …".
func statusLine(s Summary) string { return statusLineAt(s, time.Now()) }

// statusLineAt is statusLine as of now (a green wait's time: greenDetail).
func statusLineAt(s Summary, now time.Time) string {
	line := string(s.Status)
	detail := greenDetail(s.Detail, now)
	if !phaseLive(s.Status) {
		// A run Temporal ended without its code (terminated, timed out)
		// keeps its last live detail: not its hints to act on it — a
		// resume cannot reach it (the resume line says what continues it).
		detail = resumeHint.ReplaceAllString(detail, "")
	}
	switch {
	case detail == "":
	case strings.HasPrefix(detail, line+" "):
		line = detail
	default:
		line += ": " + detail
	}
	switch {
	case !phaseLive(s.Status):
	case s.PauseRequested && s.Status != spec.PhasePaused && s.Model == spec.ModelExternal:
		line += " (pause requested: the job stops after its next checkpoint upload; pause again to stop it at once)"
	case s.PauseRequested && s.Status != spec.PhasePaused:
		line += " (pause requested: holds at the next chunk boundary)"
	}
	return line
}

// resumeHint is the "(cann-train resume NAME continues)" a paused run's
// detail ends with.
var resumeHint = regexp.MustCompile(` \(cann-train resume \S+ continues\)`)

// printControls prints the node count's limits and changes.
func printControls(w io.Writer, s Summary) {
	if s.MinNodes == 0 && s.GlobalBatch == 0 && s.PendingNodes == 0 && s.TargetNodes == 0 && len(s.Rescalings) == 0 && len(s.Evicting) == 0 && len(s.Leaving) == 0 &&
		s.RefusedRescale == "" {
		return
	}
	// min_nodes is the job's floor after a failure, not the plan's size;
	// an external job's global batch is its script's own.
	line := fmt.Sprintf("min_nodes %d", s.MinNodes)
	if s.GlobalBatch > 0 {
		line += fmt.Sprintf(", global batch %d", s.GlobalBatch)
	}
	if s.RanksPerNode > 1 {
		line += fmt.Sprintf(", %d ranks per node", s.RanksPerNode)
	}
	if s.PendingNodes > 0 {
		line += fmt.Sprintf("; rescale to %d pending (next chunk boundary)", s.PendingNodes)
	}
	// (Only nodes the run holds: an evict signal sent by hand may name
	// another, which the run keeps in its list and never moves off.)
	if drained := slices.DeleteFunc(slices.Clone(s.Evicting), func(n string) bool {
		return slices.Contains(s.Stopping, n) || !slices.Contains(s.Nodes, n)
	}); len(drained) > 0 {
		line += fmt.Sprintf("; drained %v still held, replaced at a chunk boundary", drained)
	}
	if len(s.Stopping) > 0 {
		line += fmt.Sprintf("; %v: worker stopping, replaced at a chunk boundary", s.Stopping)
	}
	if len(s.Leaving) > 0 {
		line += fmt.Sprintf("; slow %v replaced at a chunk boundary once a node is free (slow_node: replace)", s.Leaving)
	}
	if phaseLive(s.Status) && s.TargetNodes > len(s.Nodes) && s.PendingNodes == 0 {
		if scaledShort(s) {
			line += fmt.Sprintf("; %d of %d asked for by a scale: it takes more as they come free, at chunk boundaries", len(s.Nodes), s.TargetNodes)
		} else {
			line += fmt.Sprintf("; %d of %d after losing some: free nodes are taken back at chunk boundaries", len(s.Nodes), s.TargetNodes)
		}
	}
	fmt.Fprintf(w, "nodes        %s\n", line)
	if a := s.NodeAsk; a != nil && phaseLive(s.Status) {
		fmt.Fprintf(w, "  %-10s %s\n", "asking", nodeAskLine(*a))
	}
	for _, r := range s.Rescalings {
		kind, change := rescalingLine(r)
		fmt.Fprintf(w, "  %-10s %s\n", kind, change)
	}
	if s.RefusedRescale != "" {
		fmt.Fprintf(w, "  %-10s %s\n", "refused", s.RefusedRescale)
	}
}

// waitingWhy is waitNote for run st when an acquire of it waits for free
// nodes (its first, or one to grow back or move off a node): why, from the
// node registry, as `cann-train nodes` says it. "" when none waits or the
// registry does not answer within a few seconds (the status is shown
// without it).
func waitingWhy(ctx context.Context, c client.Client, st spec.RunStatus) string {
	if st.Phase != spec.PhaseAcquiring && (st.NodeAsk == nil || st.NodeAsk.WaitingSince.IsZero()) {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	reg, rows, err := judgedNodes(ctx, c, cmp.Or(st.ClusterID, spec.DefaultClusterID), time.Now())
	if err != nil {
		return ""
	}
	return waitNote(reg, rows, st.RunID)
}

// phaseLive: a run in phase p has not ended.
func phaseLive(p spec.Phase) bool {
	return !slices.Contains([]spec.Phase{spec.PhaseCompleted, spec.PhaseFailed, spec.PhaseCancelled, phaseTerminated, phaseTimedOut}, p)
}

// phaseTerminated and phaseTimedOut are the phases the CLI shows for a
// run Temporal ended without its code (which would have said failed or
// cancelled): Temporal's names for how it closed.
var (
	phaseTerminated = spec.Phase(activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED))
	phaseTimedOut   = spec.Phase(activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT))
)

// nodeAskLine says how a run waiting for a free node asks for one:
// "growing back to 3 nodes: an ask waits for a free node since 21:30:05Z
// (one ends the chunk in flight early)".
func nodeAskLine(a spec.NodeAsk) string {
	switch {
	case !a.WaitingSince.IsZero():
		return fmt.Sprintf("%s: an ask waits for a free node since %s (one ends the chunk in flight early)", a.Why, a.WaitingSince.UTC().Format("15:04:05Z"))
	case !a.Next.IsZero():
		return fmt.Sprintf("%s: asks for a free node from %s on (at the first chunk boundary then, or while a chunk trains)", a.Why, a.Next.UTC().Format("2006-01-02 15:04:05Z"))
	}
	return a.Why + ": asks for a free node at the next chunk boundary"
}

// rescalingLine says what a change of the node count did: its kind
// (rescale, or replace for a drained node) and "gen 3 at step 400: 2 → 3
// nodes +[node-3]".
// scaledShort: the run trains on fewer nodes than its target because its
// last change of nodes was a scale that found too few free (node-operations
// audit #5: it read "after losing some"), not a loss since.
func scaledShort(s Summary) bool {
	n := len(s.Rescalings)
	if n == 0 {
		return false
	}
	r := s.Rescalings[n-1]
	if r.Reason != "" || r.Regrow || r.Error != "" || r.ToNodes >= s.TargetNodes {
		return false
	}
	for _, rec := range s.Recoveries {
		if rec.Shrunk && rec.Generation > r.Generation {
			return false
		}
	}
	return true
}

func rescalingLine(r spec.Rescaling) (kind, line string) {
	change := fmt.Sprintf("%d → %d nodes", r.FromNodes, r.ToNodes)
	if len(r.Added) > 0 {
		change += fmt.Sprintf(" +%v", r.Added)
	}
	if len(r.Removed) > 0 {
		change += fmt.Sprintf(" −%v", r.Removed)
	}
	kind = "rescale"
	switch {
	case r.Regrow:
		kind = "regrow"
	case r.Reason != "":
		kind = "replace"
		change += " (" + r.Reason + ")"
	}
	if r.Error != "" {
		change = fmt.Sprintf("%d → %d nodes refused: %s", r.FromNodes, r.FromNodes, r.Error)
		if r.Reason != "" {
			change = r.Reason + ": " + r.Error
		}
	}
	return kind, fmt.Sprintf("gen %d at step %d: %s", r.Generation, r.AtStep, change)
}

// printGreen prints the green policy's plan and carbon figures (live: the
// run has not ended; now: for the wait in progress).
func printGreen(w io.Writer, g *spec.GreenStatus, live bool, now time.Time) {
	printGreenOf(w, g, live, true, now)
}

// printGreenOf is printGreen for a run whose server may have stopped
// (serverUp false: a quickstart's, without --keep): no hint then names a
// command that would ask it.
func printGreenOf(w io.Writer, g *spec.GreenStatus, live, serverUp bool, now time.Time) {
	if g == nil {
		return
	}
	p := g.Policy
	kind := "contiguous window"
	if p.Interruptible {
		kind = "interruptible"
		if p.MinSlot > 0 {
			kind += fmt.Sprintf(", slots ≥ %s", p.MinSlot.D())
		}
	}
	fmt.Fprintf(w, "green        %s; %s; deadline %s after the start\n", p.Source(), kind, p.Deadline.D())
	if g.Overridden {
		until := "for good"
		if !g.OverrideUntil.IsZero() {
			until = "until " + greenClock(g.OverrideUntil, now)
		}
		fmt.Fprintf(w, "  override   policy ignored %s\n", until)
	}
	overridden := overrideTextIn(g, now, func(t time.Time) string { return greenClock(t, now) })
	switch pl := g.Plan; {
	case pl != nil && live && overridden != "":
		// The run trains at once while the override lasts: the plan's
		// windows are not the ones it follows (a plan is never made
		// under an override), so they are not listed.
		next := "the run trains at once, and plans again once the override ends"
		if !g.OverrideUntil.IsZero() && !now.Before(g.OverrideUntil) {
			next = "the run plans again at its next chunk boundary"
		} else if g.OverrideUntil.IsZero() {
			next = "the run trains at once (green override --clear restores the policy)"
		}
		fmt.Fprintf(w, "  plan       (%s) %d slot(s) planned %s, not followed: %s\n",
			overridden, len(pl.Slots), greenClock(pl.MadeAt, now), next)
	case pl != nil && live:
		fmt.Fprintf(w, "  plan       %d slot(s) for %s of training by %s: %.0f g/kWh expected vs %.0f over the same work started now (planned %s)\n",
			len(pl.Slots), roughDuration(pl.Work.D()), greenClock(pl.Deadline, now),
			pl.ExpectedGPerKWh, pl.BaselineGPerKWh, greenClock(pl.MadeAt, now))
		for _, sl := range pl.Slots {
			fmt.Fprintf(w, "    %s\n", sl.Label(pl.MadeAt))
		}
	case pl != nil:
		// (An ended run's last plan is history: its windows will not be.)
		not := ""
		if overridden != "" {
			not = " (" + overridden + ": not followed)"
		}
		fmt.Fprintf(w, "  last plan  made %s, for %s of training then left%s\n", greenClock(pl.MadeAt, now), roughDuration(pl.Work.D()), not)
	}
	// The intensity read at the last plan: the present only while the run
	// goes on (an ended run's "now" was a stale reading).
	reading := ""
	switch {
	case g.NowGPerKWh <= 0:
	case live:
		reading = fmt.Sprintf("now %.0f g/kWh; ", g.NowGPerKWh)
	default:
		reading = fmt.Sprintf("last read %.0f g/kWh; ", g.NowGPerKWh)
	}
	waited := fmt.Sprintf("%.2f h", g.Waited(now)/3600)
	if d := time.Duration(g.Waited(now) * float64(time.Second)); d < time.Hour {
		waited = roughDuration(d) // (27s, not 0.01 h)
	}
	fmt.Fprintf(w, "  carbon     %.4f kWh, %.2f g CO2eq (%.0f g/kWh); %s%d green wait(s), %s waited\n",
		g.KWh, g.Grams, g.GPerKWh, reading, g.Waits, waited)
	if g.Batch > 0 && p.Batch != nil {
		last := ""
		if g.BatchAction != "" {
			last = "; last decision " + g.BatchAction
		}
		fmt.Fprintf(w, "  batch      global batch %d, learning rate %.4g (carbon controller, threshold %.0f g/kWh); %d change(s)%s\n",
			g.Batch, g.LearningRate, p.Batch.ThresholdG, len(g.Schedule), last)
	}
	if g.BudgetG > 0 {
		alert := ""
		switch {
		case g.BudgetExceeded:
			alert = " — EXCEEDED"
		case g.BudgetAlert:
			alert = fmt.Sprintf(" — ALERT (≥ %.0f%%)", 100*spec.BudgetAlertFraction)
		}
		fmt.Fprintf(w, "  budget     %.4g g, %.1f%% used%s\n", g.BudgetG, g.BudgetUsedPct, alert)
	}
	if g.Note != "" {
		fmt.Fprintf(w, "  note       %s\n", g.Note)
	}
	if g.PriceNote != "" {
		when := "not priced yet (tried again at the next chunk boundary)"
		switch {
		case !live && !serverUp:
			when = "not priced (the run has ended; with `--keep` the server stays up for `cann-train green report` to price it again)"
		case !live:
			when = "not priced (the run has ended; `cann-train green report` prices it again)"
		}
		fmt.Fprintf(w, "  pricing    the last chunks %s: %s\n", when, g.PriceNote)
	}
}

// overrideText is "overridden until T" (with "ended" once T has passed at
// now: the run notes it at its next chunk boundary) or "overridden for
// good" while a green override sets g's policy, and its plan, aside; ""
// when none does. T is in RFC 3339 (green report's); status writes it as
// its other green times (overrideTextIn, greenClock).
func overrideText(g *spec.GreenStatus, now time.Time) string {
	return overrideTextIn(g, now, func(t time.Time) string { return t.UTC().Format(time.RFC3339) })
}

// overrideTextIn is overrideText with T as clock writes it.
func overrideTextIn(g *spec.GreenStatus, now time.Time, clock func(time.Time) string) string {
	switch {
	case g == nil || !g.Overridden:
		return ""
	case g.OverrideUntil.IsZero():
		return "overridden for good"
	case !now.Before(g.OverrideUntil):
		return "overridden until " + clock(g.OverrideUntil) + ", ended"
	}
	return "overridden until " + clock(g.OverrideUntil)
}

// greenClock is a clock time in a green run's status as its green windows
// say theirs (spec.CarbonSlot.Label): "14:00 UTC" on now's day (UTC),
// "2026-12-07 14:00 UTC" on another; to the minute.
func greenClock(t, now time.Time) string {
	return greenClockOf(t, now, "15:04")
}

// greenClockOf is greenClock with clock the time's layout ("15:04",
// "15:04:05").
func greenClockOf(t, now time.Time, clock string) string {
	const day = "2006-01-02"
	t = t.UTC()
	if t.Format(day) == now.UTC().Format(day) {
		return t.Format(clock) + " UTC"
	}
	return t.Format(day+" "+clock) + " UTC"
}

// greenWaitUntil is the RFC 3339 time a green wait's detail says it waits
// until ("waiting for the green window until 2026-12-07T14:00:00Z (green
// window 14:00–18:00 UTC, …)", as the run words it).
var greenWaitUntil = regexp.MustCompile(`(waiting for the green window until )(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))`)

// greenDetail is a run's detail as the CLI shows it at now: the time a
// green wait waits until as greenClock writes it, not in RFC 3339 beside
// its window's "14:00–18:00 UTC" (to the second where the window starts
// off the minute, as the window's own label then is). Any other detail is
// as it is. (-o json keeps the detail as the run says it.)
func greenDetail(detail string, now time.Time) string {
	return greenWaitUntil.ReplaceAllStringFunc(detail, func(m string) string {
		parts := greenWaitUntil.FindStringSubmatch(m)
		t, err := time.Parse(time.RFC3339, parts[2])
		if err != nil {
			return m
		}
		clock := "15:04"
		if t.Second() != 0 {
			clock = "15:04:05"
		}
		return parts[1] + greenClockOf(t, now, clock)
	})
}

// printTopology prints what the run's topology scan measured and chose.
func printTopology(w io.Writer, t *spec.TopologyPlan) {
	if t == nil {
		return
	}
	fmt.Fprintf(w, "topology     %d host(s), %d slow link(s), scanned at generation %d; gradient allreduce: %s\n",
		t.HostCount, t.SlowLinks, t.Generation, t.Algorithm)
	for _, l := range t.Levels {
		fmt.Fprintf(w, "  %-11s %d links, α %.1f µs, %.2f GB/s\n", l.Name, l.Links, float64(l.AlphaNS)/1e3, l.BytesPerSec/1e9)
	}
	for _, p := range t.Predictions {
		fmt.Fprintf(w, "  predicted  %-5s %.1f µs for %d bytes\n", p.Algorithm, p.Seconds*1e6, t.GradientBytes)
	}
}

// printStrategy prints the parallel-strategy search's choice, each
// candidate's prediction, and the prediction against the measured speed.
func printStrategy(w io.Writer, p *spec.StrategyPlan, perNode int, stepsPerSec float64) {
	if p == nil {
		return
	}
	if perNode > 1 {
		fmt.Fprintf(w, "strategy     data parallel %d of %d rank(s), %d node(s) of %d: %s\n",
			p.DataParallel, p.MaxRanks, p.DataParallel/perNode, perNode, p.Reason)
	} else {
		fmt.Fprintf(w, "strategy     data parallel %d of %d node(s): %s\n", p.DataParallel, p.MaxRanks, p.Reason)
	}
	for _, c := range p.Candidates {
		mark := " "
		if c.Ranks == p.DataParallel {
			mark = "*"
		}
		comm := "allreduce"
		if c.Codec != "" {
			comm = fmt.Sprintf("%s exchange (%.3g encoding)", c.Codec, 1e3*c.CodecSeconds)
		}
		fmt.Fprintf(w, "           %s %d rank(s): step %.3g ms = %.3g compute + %.3g %s; %.0f examples/s; %.2g rank(s) per core\n",
			mark, c.Ranks, 1e3*c.StepSeconds, 1e3*c.ComputeSeconds, 1e3*c.CommSeconds, comm, c.ExamplesPerSec, c.Oversubscription)
	}
	if p.PredictedStepSeconds > 0 && stepsPerSec > 0 {
		fmt.Fprintf(w, "             predicted %.0f steps/s, measured %.0f (×%.2f)\n", 1/p.PredictedStepSeconds, stepsPerSec, stepsPerSec*p.PredictedStepSeconds)
	}
}

// endedAs says how an earlier run ended — "cancelled at step 200",
// "failed at step 340: <why>" — without the parts of its error that
// repeat the phase and step or name its last checkpoint (the resumed
// run's own line says where it continued from).
func endedAs(phase spec.Phase, step int64, errText string) string {
	why := strings.Trim(repeatsEnd.ReplaceAllString(errText, ""), "; ")
	if why == "" {
		return fmt.Sprintf("%s at step %d", phase, step)
	}
	return fmt.Sprintf("%s at step %d: %s", phase, step, why)
}

// stepUnknownAtEnd: run st is an external job cancelled before its script
// stored a checkpoint. An external job's step is recorded at its
// checkpoints (a launch's is its start), so its status's step — 0, which
// its end read as "cancelled at step 0" — is not where it stopped, and
// that is not known. (A checkpoint the bucket refused, or that a node
// kept, has a step the run did reach: its end says it.)
func stepUnknownAtEnd(st spec.RunStatus) bool {
	return st.Model == spec.ModelExternal && st.Phase == spec.PhaseCancelled && st.LastCkpt == nil && st.KeptOnNode == nil &&
		st.CheckpointFailed == nil && cancelledAt.MatchString(st.Error)
}

// unknownEnd and unknownEndShort say where a run stepUnknownAtEnd
// stopped: in the status's and the dashboard's words for its end, and
// after the phase in watch's lines.
const (
	unknownEnd      = "cancelled before its first checkpoint (an external job's step is known only at its checkpoints)"
	unknownEndShort = "before its first checkpoint (its step is not known: an external job reports it at its checkpoints)"
)

// cancelledAt is the opening of a cancelled run's error (its end: where it
// stopped).
var cancelledAt = regexp.MustCompile(`^cancelled at step \d+`)

// endText is how run st ended, as status's "ended" (or "error") line and
// the dashboard's DETAIL say it: its error, but "cancelled before its
// first checkpoint" where stepUnknownAtEnd (not "cancelled at step 0").
// (-o json keeps the error as the run says it.)
func endText(st spec.RunStatus) string {
	if !stepUnknownAtEnd(st) {
		return st.Error
	}
	return cancelledAt.ReplaceAllLiteralString(st.Error, unknownEnd)
}

// repeatsEnd matches what endedAs leaves out of an earlier run's error:
// its "cancelled at step N" opening and "last checkpoint at step N".
var repeatsEnd = regexp.MustCompile(`^cancelled at step \d+|(^|; )last checkpoint at step \d+`)

// liveResumed completes the last recovery's first-step time from the
// running launch's heartbeats (first: when every node had its first step)
// where the workflow has not recorded it yet — an external job's launch
// reports it only when it ends — as the workflow's noteResumed would: not
// for a recovery an earlier run of this name carried over, nor from a
// step before the recovery was acted on.
func liveResumed(st *spec.RunStatus, first time.Time) {
	n := len(st.Recoveries)
	if n == 0 || first.IsZero() || !st.Recoveries[n-1].ResumedAt.IsZero() {
		return
	}
	if k := len(st.Resumed); k > 0 && n <= st.Resumed[k-1].Recoveries {
		return
	}
	if r := &st.Recoveries[n-1]; first.After(r.SeenAt) {
		r.ResumedAt = first
	}
}

// recoveryTimes says how fast a recovery was, counted from the fault when
// known (an injected one, a peer's notice), else from when the workflow
// saw the chunk fail.
func recoveryTimes(r RecoverySummary) string {
	if r.From == "failure_seen" {
		var parts []string
		if len(r.FailedNodes) > 0 {
			parts = append(parts, "no peer noticed first")
		}
		if r.ResumeSeconds > 0 {
			parts = append(parts, fmt.Sprintf("first step %.2fs after the chunk failed", r.ResumeSeconds))
		}
		return strings.Join(parts, "; ")
	}
	from := strings.ReplaceAll(r.From, "_", " ")
	if r.ResumeSeconds <= 0 { // (it failed, or waits, before a step)
		return fmt.Sprintf("detected %.2fs after the %s; no first step recorded since", r.DetectSeconds, from)
	}
	return fmt.Sprintf("detected %.2fs, first step %.2fs after the %s", r.DetectSeconds, r.ResumeSeconds, from)
}

// recoveryHeadline says what a recovery did: "gen 2: node-2 → node-3 at
// step 121, rewound to 100 (21 steps lost)" — every failed node, the
// spares that took their ranks, the ones taken back, a shrink.
func recoveryHeadline(r RecoverySummary) string {
	if len(r.FailedNodes) == 0 {
		// No node lost (a corrupt checkpoint, say): the run went back.
		what := "no node lost, restarted on the same nodes"
		if r.Outage {
			what = "service outage, no node lost"
		}
		if r.StepUnknown {
			lost := "what it trained was lost"
			if r.LostSteps > 0 {
				lost = fmt.Sprintf("%d steps lost, and what it trained", r.LostSteps)
			}
			return fmt.Sprintf("gen %d: %s; the chunk from step %d was in flight (how far it got is unknown: no node's word reached the run), rewound to %d (%s)",
				r.Generation, what, r.FailedAtStep, r.ResumeStep, lost)
		}
		return fmt.Sprintf("gen %d: %s; at step %d, rewound to %d (%d steps lost)",
			r.Generation, what, r.FailedAtStep, r.ResumeStep, r.LostSteps)
	}
	failed := r.FailedNode
	if len(r.FailedNodes) > 1 {
		failed = strings.Join(r.FailedNodes, " ")
	}
	var to []string
	switch {
	case len(r.Replacements) > 0:
		to = append(to, strings.Join(r.Replacements, " "))
	case r.Replacement != "":
		to = append(to, r.Replacement)
	}
	if len(r.Back) > 0 {
		to = append(to, strings.Join(r.Back, " ")+" (back)")
	}
	// Nodes dropped that were not among the failed: gone too (a worker
	// that was not back when the run acquired).
	var also []string
	for _, id := range r.Removed {
		if !slices.Contains(r.FailedNodes, id) {
			also = append(also, id)
		}
	}
	switch {
	case r.Shrunk && r.Nodes > 0 && len(also) > 0:
		to = append(to, fmt.Sprintf("(no spare: shrunk to %d; %s gone too)", r.Nodes, strings.Join(also, " ")))
	case r.Shrunk && r.Nodes > 0:
		to = append(to, fmt.Sprintf("(no spare: shrunk to %d)", r.Nodes))
	case r.Shrunk:
		to = append(to, "(no spare: shrunk)")
	case len(to) == 0:
		// A record from before Back was kept: the same node(s) again.
		to = append(to, failed+" (back)")
	}
	return fmt.Sprintf("gen %d: %s → %s at step %d, rewound to %d (%d steps lost)",
		r.Generation, failed, strings.Join(to, ", "), r.FailedAtStep, r.ResumeStep, r.LostSteps)
}

// roughDuration is d to the second, and a positive d under one "under 1s"
// (not "0s", which reads as none).
func roughDuration(d time.Duration) string {
	if d > 0 && d < time.Second {
		return "under 1s"
	}
	return d.Round(time.Second).String()
}
