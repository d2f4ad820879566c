package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cann-train/cann-train/spec"
)

// serverRun is one workflow of a runServer.
type serverRun struct {
	typ     string // its workflow type ("": TrainingRun)
	status  enumspb.WorkflowExecutionStatus
	result  spec.RunStatus  // a completed run's result
	err     error           // a closed run's error (failed, cancelled)
	query   *spec.RunStatus // its status query's answer (nil: none in time)
	started time.Time
	pending []*workflowpb.PendingActivityInfo // a running run's activities
}

// runServer is a Temporal server as the monitoring commands ask it:
// runs described, listed, awaited and queried, a control worker polling
// (unless noWorker). fail, where set, may fail (or interrupt) a call,
// by its kind and count ("list" 2: the second list).
type runServer struct {
	client.Client // (nothing else is called)
	runs          map[string]*serverRun
	noWorker      bool
	fail          func(call string, n int) error
	calls         map[string]int
}

func newRunServer(runs map[string]*serverRun) *runServer {
	return &runServer{runs: runs, calls: map[string]int{}}
}

func (f *runServer) call(kind string) error {
	f.calls[kind]++
	if f.fail == nil {
		return nil
	}
	return f.fail(kind, f.calls[kind])
}

func (f *runServer) info(id string) *workflowpb.WorkflowExecutionInfo {
	r := f.runs[id]
	typ := r.typ
	if typ == "" {
		typ = spec.WorkflowTrainingRun
	}
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "r1"}, FirstRunId: "r1",
		Type: &commonpb.WorkflowType{Name: typ}, Status: r.status, StartTime: timestamppb.New(r.started)}
}

func (f *runServer) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if err := f.call("describe"); err != nil {
		return nil, err
	}
	if _, ok := f.runs[id]; !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: f.info(id), PendingActivities: f.runs[id].pending}, nil
}

func (f *runServer) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	if err := f.call("list"); err != nil {
		return nil, err
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, id := range slices.Sorted(maps.Keys(f.runs)) {
		if len(resp.Executions) < int(req.GetPageSize()) {
			resp.Executions = append(resp.Executions, f.info(id))
		}
	}
	return resp, nil
}

func (f *runServer) CountWorkflow(context.Context, *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	return &workflowservice.CountWorkflowExecutionsResponse{Count: int64(len(f.runs))}, nil
}

func (f *runServer) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	if f.noWorker {
		return &workflowservice.DescribeTaskQueueResponse{}, nil
	}
	return &workflowservice.DescribeTaskQueueResponse{Pollers: []*taskqueuepb.PollerInfo{{Identity: "control"}}}, nil
}

func (f *runServer) QueryWorkflow(_ context.Context, id, _, _ string, _ ...any) (converter.EncodedValue, error) {
	if err := f.call("query"); err != nil {
		return nil, err
	}
	r, ok := f.runs[id]
	switch {
	case !ok:
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	case r.query == nil:
		return nil, serviceerror.NewDeadlineExceeded("context deadline exceeded")
	}
	return encodedJSON{*r.query}, nil
}

func (f *runServer) GetWorkflow(_ context.Context, id, _ string) client.WorkflowRun {
	return &runOutcome{run: f.runs[id]}
}

// runOutcome is a closed serverRun's outcome.
type runOutcome struct {
	client.WorkflowRun
	run *serverRun
}

func (w *runOutcome) Get(_ context.Context, v any) error {
	if w.run.err != nil {
		return w.run.err
	}
	return encodedJSON{w.run.result}.Get(v)
}

// encodedJSON is a query's answer.
type encodedJSON struct{ v any }

func (e encodedJSON) HasValue() bool { return true }
func (e encodedJSON) Get(p any) error {
	b, err := json.Marshal(e.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, p)
}

// placed is f as dialQuiet dials it: at 127.0.0.1:17233, in namespace.
func placed(f *runServer, namespace string) client.Client {
	return &placedClient{Client: f, address: "127.0.0.1:17233", namespace: namespace}
}

// cancelledRun is a run cancelled at step 4650 of 400000 with a
// checkpoint there: its status query still answers where it stopped.
func cancelledRun() *serverRun {
	st := spec.RunStatus{RunID: "run/cancel-e", Phase: spec.PhaseCancelled, Model: "mlp-mnist", Nodes: []string{"node-2"}, Step: 4650, TotalSteps: 400000,
		InitialLoss: 2.3, Loss: 0.0403, Chunks: 10, StepsPerSec: 1100, Error: "cancelled at step 4650; last checkpoint at step 4650", Checkpoints: 9,
		LastCkpt: &spec.CheckpointRef{URL: "file:///b", Run: "cancel-e", Step: 4650, Key: "runs/cancel-e/ckpt/000000004650/manifest.json"}}
	return &serverRun{status: enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, err: temporal.NewCanceledError(), query: &st}
}

// TestWatchPrintsTheEnd (B2): watching a run that ended prints its final
// status as `status` does — a cancelled or failed one's too (text, or
// the JSON object), before the error that says how it ended.
func TestWatchPrintsTheEnd(t *testing.T) {
	done := spec.RunStatus{RunID: "run/done-a", Phase: spec.PhaseCompleted, Model: "mlp-mnist", Step: 400, TotalSteps: 400, Loss: 0.251}
	f := newRunServer(map[string]*serverRun{
		"run/cancel-e": cancelledRun(),
		"run/done-a":   {status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, result: done},
	})
	for _, tc := range []struct {
		id, output string
		ended      bool   // the command fails, saying how the run ended
		want       string // in its stdout
	}{
		{"run/cancel-e", "json", true, `"status": "cancelled"`},
		{"run/cancel-e", "text", true, "resume       cann-train run -f JOB --name cancel-e --resume continues it from step 4650\n"},
		{"run/done-a", "json", false, `"status": "completed"`},
		{"run/done-a", "text", false, "steps        400/400"},
	} {
		t.Run(tc.id+" -o "+tc.output, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := watchToEnd(context.Background(), &env{out: &out, err: &errb, namespace: "default"}, f, tc.id, tc.output, "")
			var ended *runEnded
			if errors.As(err, &ended) != tc.ended || !tc.ended && err != nil {
				t.Errorf("error %v; want the run's end said: %v", err, tc.ended)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("stdout:\n%s\nwant %q", out.String(), tc.want)
			}
			if tc.output == "json" {
				var sum Summary
				if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.WorkflowID != tc.id {
					t.Errorf("stdout is not the run's status: %v\n%s", err, out.String())
				}
			}
		})
	}
}

// TestWatchInterrupted (U3): Ctrl-C during a watch says that the run goes
// on, and no "waiting:" line for the call it cut short.
func TestWatchInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newRunServer(map[string]*serverRun{"run/train-a": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}})
	f.fail = func(call string, n int) error {
		if call == "describe" {
			cancel() // (Ctrl-C, while the call is in flight)
			return status.Error(codes.Canceled, "context canceled")
		}
		return nil
	}
	var out, errb bytes.Buffer
	err := watchToEnd(ctx, &env{out: &out, err: &errb}, f, "run/train-a", "text", "")
	line, failed, code := lastWords(err, true)
	if want := "cann-train: stopped watching run/train-a; the run goes on (cann-train cancel train-a stops it)"; line != want || failed || code != 130 {
		t.Errorf("ends on %q (failed %v, exit %d); want %q, exit 130", line, failed, code, want)
	}
	if strings.Contains(errb.String(), "waiting:") || out.Len() > 0 {
		t.Errorf("stderr %q, stdout %q: want neither a waiting line nor a status", errb.String(), out.String())
	}
}

// TestLastWords (U3): how a command ends: an interruption says what it
// leaves going (or that it was interrupted) with exit code 130, an error
// says itself (once), success says nothing.
func TestLastWords(t *testing.T) {
	stopped := &interruptedError{what: "pause of run/x requested; not waiting for it any more", err: fmt.Errorf("wait: %w", context.Canceled)}
	for _, tc := range []struct {
		name        string
		err         error
		interrupted bool
		line        string
		failed      bool
		code        int
	}{
		{"success", nil, false, "", false, 0},
		{"an error", errors.New("no run run/x"), false, "cann-train: no run run/x", true, 1},
		{"said already", &exitError{errors.New("x")}, false, "", true, 1},
		{"interrupted", fmt.Errorf("list: %w", context.Canceled), true, "cann-train: interrupted", false, 130},
		{"interrupted, saying what goes on", stopped, true, "cann-train: pause of run/x requested; not waiting for it any more", false, 130},
		{"cancelled, not by a signal", context.Canceled, false, "cann-train: context canceled", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, failed, code := lastWords(tc.err, tc.interrupted)
			if line != tc.line || failed != tc.failed || code != tc.code {
				t.Errorf("got %q, failed %v, exit %d; want %q, %v, %d", line, failed, code, tc.line, tc.failed, tc.code)
			}
		})
	}
}

// TestNotWaiting (U3): a --wait that Ctrl-C cut short says that the
// request stands; any other error is as it was.
func TestNotWaiting(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	waited := fmt.Errorf("run/x not paused after 1m0s (now training at step 40): %w", context.Canceled)
	var stopped *interruptedError
	if err := notWaiting(gone, waited, "pause of run/x requested; not waiting for it any more"); !errors.As(err, &stopped) ||
		!errors.Is(err, context.Canceled) || err.Error() != "pause of run/x requested; not waiting for it any more" {
		t.Errorf("interrupted: %v", err)
	}
	timedOut := fmt.Errorf("run/x not paused after 1m0s: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		ctx context.Context
		err error
	}{{live, waited}, {gone, timedOut}} {
		if err := notWaiting(tc.ctx, tc.err, "x"); err != tc.err {
			t.Errorf("notWaiting(%v) = %v; want it as it was", tc.err, err)
		}
	}
}

// TestETAMeter (B1): the ETA comes from the steps moved while watched —
// not the steps the run had when the watch attached — once measured for
// a while (the run's average speed before); none while the run does not
// train; a new stretch of training measures again.
func TestETAMeter(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	training := spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 400000, Generation: 1}
	averaged := training
	averaged.StepsPerSec = 1000
	paused := training
	paused.Phase = spec.PhasePaused
	regen := training
	regen.Generation = 2
	var m etaMeter
	for _, tc := range []struct {
		name string
		st   spec.RunStatus
		step int64
		at   time.Duration
		eta  time.Duration // 0: none
	}{
		{"attached at step 32000: no speed known", training, 32000, 0, 0},
		{"the first second", training, 33100, time.Second, 0},
		{"measured: 1100 steps/s since the watch began", training, 36400, 4 * time.Second, 330 * time.Second},
		{"paused: no ETA", paused, 36400, 5 * time.Second, 0},
		{"training again: the run's average until measured", averaged, 36400, 6 * time.Second, 363600 * time.Millisecond},
		{"measured again, from where it went on", averaged, 41200, 10 * time.Second, 299 * time.Second},
		{"a new generation rewound", regen, 40000, 11 * time.Second, 0},
	} {
		eta, ok := m.estimate(tc.st, tc.step, t0.Add(tc.at), t0.Add(tc.at))
		if ok != (tc.eta != 0) || (eta-tc.eta).Abs() > time.Second {
			t.Errorf("%s: ETA %v (%v); want %v", tc.name, eta, ok, tc.eta)
		}
	}
}

// TestBarLine (B1, B8): the live line fits the terminal (a wider one
// wraps and scrolls); while the run trains it has the speed and ETA, and
// while it does not, why it waits and neither.
func TestBarLine(t *testing.T) {
	training := spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 400000}
	paused := spec.RunStatus{Phase: spec.PhasePaused, TotalSteps: 400000, Detail: "paused at step 4473 (cann-train resume pause-b continues)"}
	acquiring := spec.RunStatus{Phase: spec.PhaseAcquiring, TotalSteps: 400000, Detail: "waiting for 2 free node(s) until 23:14:36 UTC (node_wait 15m0s)"}
	for _, tc := range []struct {
		name  string
		st    spec.RunStatus
		step  int64
		eta   time.Duration
		etaOK bool
		cols  int
		want  []string
		never []string
	}{
		{"training", training, 32001, 334 * time.Second, true, 120,
			[]string{"training         32001/400000   8% [##", "  ETA 5m34s  loss 0.0071  38368 samples/s"}, nil},
		{"training, narrow", training, 32001, 334 * time.Second, true, 70, []string{"training         32001/400000   8%  ETA 5m34s  loss 0.0071"}, []string{"["}},
		{"paused", paused, 4473, 0, false, 120, []string{"paused at step 4473 (cann-train resume pause-b continues)"}, []string{"samples/s", "ETA"}},
		{"acquiring", acquiring, 0, 0, false, 200, []string{"acquiring            0/400000   0% [", "waiting for 2 free node(s)"}, []string{"samples/s", "ETA"}},
		{"acquiring, narrow", acquiring, 0, 0, false, 50, []string{"acquiring            0/400000   0%  waiting for…"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := barLine(tc.st, tc.step, 0.0071, 38368, tc.eta, tc.etaOK, tc.cols)
			if n := utf8.RuneCountInString(line); n > tc.cols-1 {
				t.Errorf("%q: %d columns, wider than %d-1", line, n, tc.cols)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q lacks %q", line, w)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(line, w) {
					t.Errorf("%q has %q", line, w)
				}
			}
		})
	}
}

// The bar keeps its width while the figures after it change length by a
// digit or two (it jumped at every redraw in a terminal a little narrow
// for a full bar).
func TestBarLineWidthSteady(t *testing.T) {
	training := spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 400000}
	bar := func(line string) string {
		i, j := strings.Index(line, "["), strings.Index(line, "]")
		if i < 0 || j < i {
			t.Fatalf("no bar in %q", line)
		}
		return line[i : j+1]
	}
	for cols := 96; cols <= 106; cols++ {
		a := bar(barLine(training, 32001, 0.0071, 38368, 334*time.Second, true, cols))
		b := bar(barLine(training, 32001, 0.00712, 9368, 34*time.Second, true, cols))
		if len(a) != len(b) {
			t.Errorf("%d columns: bar %q, then %q", cols, a, b)
		}
	}
	// Nor does it move as the step gains digits (0, 264, 32001 of 400000).
	for cols := 100; cols <= 140; cols += 10 {
		var at []int
		for _, step := range []int64{0, 264, 32001, 400000} {
			at = append(at, strings.Index(barLine(training, step, 0.0071, 38368, 334*time.Second, true, cols), "["))
		}
		if slices.Min(at) != slices.Max(at) || at[0] < 0 {
			t.Errorf("%d columns: the bar starts at %v as the step grows", cols, at)
		}
	}
}

// TestLiveBarClears: a line said while the bar is drawn (a recovery, a
// wait) starts on a cleared line, not after the bar.
func TestLiveBarClears(t *testing.T) {
	var b bytes.Buffer
	bar := &liveBar{w: &b, cols: func() int { return 80 }}
	bar.draw(spec.RunStatus{Phase: spec.PhaseTraining, TotalSteps: 100}, 10, 0.5, 0, time.Time{}, time.Now())
	bar.clear()
	bar.clear() // (nothing drawn: nothing to clear)
	if got := b.String(); !strings.HasPrefix(got, "\r") || strings.Count(got, "\r\033[K") != 1 || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("drawn and cleared: %q", got)
	}
	var none *liveBar // (no bar: a log or JSON lines)
	none.clear()
	none.finish(spec.RunStatus{})
}

// TestRunNotFound (U4): a run the server does not know is said with the
// namespace and the server asked, and (withNearRuns) the nearest names
// from one list — which reading the run alone does not ask for; the run/
// prefix typed twice is not a run started without it; a run started
// without it is said so.
func TestRunNotFound(t *testing.T) {
	f := newRunServer(map[string]*serverRun{
		"run/train-a": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"run/train-b": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"run/done-a":  {status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
		"sdk-bare":    {status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
	})
	for _, tc := range []struct {
		arg   string
		want  string
		never []string
		lists int
	}{
		{"trian-a", "no run run/trian-a in namespace default at 127.0.0.1:17233 (did you mean train-a? cann-train dashboard lists the runs; --namespace and --address look elsewhere): ", nil, 1},
		{"run/run/train-a", "no run run/run/train-a in namespace default at 127.0.0.1:17233 (did you mean train-a? ", []string{"without the run/ prefix"}, 1},
		{"zzz-unrelated", "no run run/zzz-unrelated in namespace default at 127.0.0.1:17233 (cann-train dashboard lists the runs;", []string{"did you mean"}, 1},
		{"sdk-bare", `no run run/sdk-bare in namespace default at 127.0.0.1:17233, but a TrainingRun workflow has the ID "sdk-bare": it was started without the run/ prefix`, nil, 0},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			clear(f.calls)
			c := placed(f, "default")
			_, _, _, err := readProgress(context.Background(), c, runID(tc.arg))
			if f.calls["list"] != 0 {
				t.Errorf("reading the run listed the runs")
			}
			err = withNearRuns(context.Background(), c, err)
			var nf *serviceerror.NotFound
			if err == nil || !errors.As(err, &nf) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %q", err, tc.want)
			}
			for _, never := range tc.never {
				if strings.Contains(err.Error(), never) {
					t.Errorf("error %v says %q", err, never)
				}
			}
			if f.calls["list"] != tc.lists {
				t.Errorf("%d list(s); want %d", f.calls["list"], tc.lists)
			}
		})
	}
}

// TestRunArgument (U4, U7): an empty RUN is refused as empty, a missing
// one points to the list; dashboard is also ls, list and ps.
func TestRunArgument(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"status", ""}, []string{`RUN "" is empty`}},
		{[]string{"watch", "run/"}, []string{`RUN "run/" is empty`}},
		{[]string{"cancel", " "}, []string{`RUN " " is empty`}},
		{[]string{"scale", "", "2"}, []string{`RUN "" is empty`}},
		{[]string{"status"}, []string{"status needs RUN (usage: cann-train status RUN", "; cann-train dashboard lists the runs"}},
		{[]string{"pause"}, []string{"pause needs RUN", "cann-train dashboard lists the runs"}},
	} {
		var out bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
		root.SetArgs(append(tc.args, "--address", "127.0.0.1:1"))
		err := root.Execute()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %v; want %q", tc.args, err, w)
			}
		}
	}
	root := newRootCmd(&env{})
	for _, alias := range []string{"dashboard", "ls", "list", "ps"} {
		if c, _, err := root.Find([]string{alias}); err != nil || c.Name() != "dashboard" {
			t.Errorf("%s finds %v, %v; want dashboard", alias, c, err)
		}
	}
}

// TestNoControlWorkerNamesTheNamespace (U5): no control worker is said
// of the namespace asked, with the command that starts one there.
func TestNoControlWorkerNamesTheNamespace(t *testing.T) {
	f := newRunServer(map[string]*serverRun{"run/other-ns": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}})
	f.noWorker = true
	for _, tc := range []struct {
		namespace string
		want      string
	}{
		{"other", `no control worker polls task queue "cann-train" in namespace other: runs wait for one, and neither their status nor the node list can be read (start ` + "`cann-train worker control --namespace other`"},
		{"default", `no control worker polls task queue "cann-train" in namespace default: runs wait for one, and neither their status nor the node list can be read (start ` + "`cann-train worker control`,"},
	} {
		_, _, _, err := readProgress(context.Background(), placed(f, tc.namespace), "run/other-ns")
		if !errors.Is(err, errNoControlWorker) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("namespace %s: %v\nwant %q", tc.namespace, err, tc.want)
		}
	}
}

// TestDashboardUnreadRows (B4, C6): once a status query went unanswered
// the dashboard asks no other run's, and says so without naming the run
// asked on their rows; a cancelled run's status it could not read says
// cancelled, the run's spelling.
func TestDashboardUnreadRows(t *testing.T) {
	f := newRunServer(map[string]*serverRun{
		"run/wait-c":  {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"run/pause-b": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"run/train-a": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
	})
	rows, _, err := dashboardRows(context.Background(), placed(f, "default"), "default", dashboardQuery(""), 20, "")
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	for _, r := range rows {
		for _, other := range rows {
			if other.WorkflowID != r.WorkflowID && strings.Contains(r.Unread, other.WorkflowID) {
				t.Errorf("row %s says %q, naming %s", r.WorkflowID, r.Unread, other.WorkflowID)
			}
		}
		if strings.Contains(r.Unread, r.WorkflowID) {
			asked++
		} else if !strings.HasPrefix(r.Unread, "no control worker answers status queries") {
			t.Errorf("row %s: unread %q", r.WorkflowID, r.Unread)
		}
	}
	if asked != 1 || f.calls["query"] != 1 {
		t.Errorf("%d row(s) name their run, %d query(s); want the one asked", asked, f.calls["query"])
	}

	c := cancelledRun()
	c.query = nil
	f = newRunServer(map[string]*serverRun{"run/cancel-e": c})
	f.noWorker = true
	rows, _, err = dashboardRows(context.Background(), f, "default", dashboardQuery(""), 20, "")
	if err != nil || len(rows) != 1 || rows[0].Detail != "cancelled" {
		t.Errorf("cancelled run, status unread: %+v, %v; want its detail cancelled", rows, err)
	}
}

// TestDashboardWatch (B5, B6): dashboard --watch into a file writes no
// terminal codes, each table after a blank line; it waits out a server
// that stops answering, its header saying since when, over the last
// table read, and Ctrl-C ends it as it ends watch (exit 130); once, it
// says the server is not answering.
func TestDashboardWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newRunServer(map[string]*serverRun{"run/train-a": {status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		result: spec.RunStatus{RunID: "run/train-a", Phase: spec.PhaseCompleted, Step: 10, TotalSteps: 10}}})
	f.fail = func(call string, n int) error {
		switch {
		case call != "list":
		case n == 2 || n == 3:
			return serviceerror.NewUnavailable("connection refused")
		case n == 5:
			cancel() // (Ctrl-C)
		}
		return nil
	}
	var out, errb bytes.Buffer
	o := dashboardOptions{output: "text", namespace: "default", limit: 20, watch: true, every: time.Nanosecond}
	// Ctrl-C ends it as it ends watch: exit status 130, saying what goes on.
	err := showDashboard(ctx, placed(f, "default"), &out, &errb, o)
	if line, failed, code := lastWords(err, true); line != "cann-train: stopped watching the dashboard; the runs go on" || failed || code != 130 {
		t.Errorf("interrupted: %v: ends on %q (failed %v, exit %d); want exit 130, saying the runs go on", err, line, failed, code)
	}
	text := out.String()
	if strings.Contains(text, "\033") {
		t.Errorf("terminal codes into a file:\n%q", text)
	}
	if n := strings.Count(text, "cann-train dashboard  "); n != 4 || f.calls["list"] != 5 {
		t.Errorf("%d tables in %d lists; want 4 in 5:\n%s", n, f.calls["list"], text)
	}
	if n := strings.Count(text, "server 127.0.0.1:17233 not answering since "); n != 2 || strings.Count(text, "train-a  ") != 4 ||
		!strings.Contains(text, ", retrying; the runs as of ") {
		t.Errorf("want the outage said twice, over the last table:\n%s", text)
	}
	if !strings.HasPrefix(text, "cann-train dashboard  ") || !strings.Contains(text, "\n\ncann-train dashboard  ") {
		t.Errorf("want each table after a blank line:\n%s", text)
	}

	f = newRunServer(nil)
	f.fail = func(string, int) error { return serviceerror.NewDeadlineExceeded("context deadline exceeded") }
	o.watch = false
	err = showDashboard(context.Background(), placed(f, "default"), &out, &errb, o)
	if err == nil || !strings.HasPrefix(err.Error(), "the server at 127.0.0.1:17233 is not answering: list runs") {
		t.Errorf("once, server silent: %v", err)
	}
}

// TestWatchSaysTheServerIsSilent (B5): a watch waiting out a server that
// does not answer says so, naming it, not only "context deadline
// exceeded".
func TestWatchSaysTheServerIsSilent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&describeError{id: "run/wait-c", err: context.DeadlineExceeded, address: "127.0.0.1:17233", namespace: "default"},
			"the server at 127.0.0.1:17233 is not answering (describe run/wait-c: context deadline exceeded); trying again"},
		{status.Error(codes.Unavailable, "connection refused"), "the server at 127.0.0.1:17233 is not answering (rpc error: code = Unavailable desc = connection refused); trying again"},
		{&noAnswerError{id: "run/x", query: "status", err: serviceerror.NewDeadlineExceeded("x")}, "no control worker answered run/x's status query in time"},
		{errNoControlWorker, "no control worker polls task queue"},
	} {
		if got := trouble(tc.err, "127.0.0.1:17233"); !strings.HasPrefix(got, tc.want) {
			t.Errorf("trouble(%v) = %q\nwant %q", tc.err, got, tc.want)
		}
	}
}

// TestWatchWaitsOutTheServer (B5): a watch whose server stops answering
// says so once, naming it, and goes on polling.
func TestWatchWaitsOutTheServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newRunServer(map[string]*serverRun{"run/wait-c": {status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}})
	f.fail = func(call string, n int) error {
		switch {
		case call != "describe":
		case n <= 2:
			return &serviceerror.DeadlineExceeded{Message: "context deadline exceeded"}
		default:
			cancel() // (Ctrl-C, at the third poll)
			return status.Error(codes.Canceled, "context canceled")
		}
		return nil
	}
	var w bytes.Buffer
	if _, err := watchRun(ctx, placed(f, "default"), "run/wait-c", &w, false, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("watch: %v", err)
	}
	want := "waiting: the server at 127.0.0.1:17233 is not answering (describe run/wait-c: context deadline exceeded); trying again\n"
	if w.String() != want {
		t.Errorf("watch wrote %q\nwant %q", w.String(), want)
	}
}

// TestPrintCancelled (B7): a cancel --wait says where the run stopped and
// a command that continues it: its job file under the run's name.
func TestPrintCancelled(t *testing.T) {
	var b bytes.Buffer
	printCancelled(&b, "run/cancel-e", *cancelledRun().query)
	want := "run/cancel-e: cancelled at step 4650; last checkpoint at step 4650; its nodes are free again\n" +
		"run/cancel-e: cann-train run -f JOB --name cancel-e --resume continues it from step 4650\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// An external job's processes get stop_grace to end after the cancel.
	b.Reset()
	ext := *cancelledRun().query
	ext.Model = spec.ModelExternal
	printCancelled(&b, "run/cancel-e", ext)
	if want := "its nodes are free again once its processes have ended (SIGTERM now, SIGKILL after its stop_grace)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("external job: got\n%s\nwant %q", b.String(), want)
	}
	// … and one cancelled before its first checkpoint has no step known.
	b.Reset()
	ext.LastCkpt, ext.Step, ext.Error = nil, 0, "cancelled at step 0"
	printCancelled(&b, "run/cancel-e", ext)
	if want := "run/cancel-e: cancelled before its first checkpoint (an external job's step is known only at its checkpoints); its nodes"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("external job without a checkpoint: got\n%s\nwant %q", b.String(), want)
	}
}

// TestHelpResumeCommands (B7): no help text gives `cann-train run JOB`,
// which run refuses (a job file is given with -f).
func TestHelpResumeCommands(t *testing.T) {
	eachCommand(newRootCmd(&env{}), func(c *cobra.Command) {
		for _, text := range []string{c.Short, c.Long, c.Example} {
			if strings.Contains(text, "cann-train run JOB") {
				t.Errorf("%s's help gives `cann-train run JOB`: %q", c.CommandPath(), text)
			}
		}
	})
}

// TestStatusTextEnded (U10, C3, C4): an ended run's status says nothing
// live ("when the first chunk ends"), a cancel is not an error, the nodes
// it gave back are had, not held; a paused run's status says paused once;
// a report is one URL.
func TestStatusTextEnded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    spec.RunStatus
		want  []string
		never []string
	}{
		{"cancelled", *cancelledRun().query,
			[]string{"model        mlp-mnist, had 1 node(s) [node-2]\n", "ended        cancelled at step 4650; last checkpoint at step 4650\n",
				"loss         2.3 → 0.0403\n", "resume       cann-train run -f JOB --name cancel-e --resume continues it from step 4650\n"},
			[]string{"error  "}},
		{"cancelled in its first chunk", spec.RunStatus{RunID: "run/c", Phase: spec.PhaseCancelled, Model: "mlp-mnist", Nodes: []string{"node-2"}, Step: 300,
			TotalSteps: 400000, Loss: 0.5, Error: "cancelled at step 300"},
			[]string{"ended        cancelled at step 300\n", "loss         0.5 at step 300 (its last; it ended before a chunk did)\n",
				"speed        - (not measured: it ended before a chunk did)\n"},
			[]string{"error  ", "measured when the first chunk ends", "none has ended yet"}},
		{"failed before a step", spec.RunStatus{RunID: "run/fail-d", Phase: spec.PhaseFailed, Model: "mlp-mnist", TotalSteps: 400000, Error: "acquire nodes: only 3 free"},
			[]string{"model        mlp-mnist, had no nodes\n", "error        acquire nodes: only 3 free\n", "loss         - (it ended before a chunk did)\n"},
			[]string{"no chunk has ended yet", "measured when the first chunk ends"}},
		{"training", spec.RunStatus{RunID: "run/train-a", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"node-1"}, TotalSteps: 400000},
			[]string{"model        mlp-mnist on 1 node(s) [node-1]\n", "loss         - (no chunk has ended yet)\n", "speed        measured when the first chunk ends"}, nil},
		{"completed", spec.RunStatus{RunID: "run/done-a", Phase: spec.PhaseCompleted, Model: "mlp-mnist", Nodes: []string{"node-1"}, Step: 400, TotalSteps: 400, Chunks: 1,
			InitialLoss: 2.4, Loss: 0.25, Report: "file:///tmp/h/checkpoints runs/done-a/report.json"},
			[]string{"model        mlp-mnist on 1 node(s) [node-1]\n", "report       file:///tmp/h/checkpoints/runs/done-a/report.json\n"}, nil},
		{"paused", spec.RunStatus{RunID: "run/pause-b", Phase: spec.PhasePaused, Model: "mlp-mnist", Nodes: []string{"node-1"}, Step: 4473, TotalSteps: 400000,
			Detail: "paused at step 4473 (cann-train resume pause-b continues)"},
			[]string{"status       paused at step 4473 (cann-train resume pause-b continues)\n"}, []string{"paused: paused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printStatus(&b, tc.st, "text", "", "default"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("status text:\n%s\nwant %q", b.String(), w)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(b.String(), w) {
					t.Errorf("status text:\n%s\nhas %q", b.String(), w)
				}
			}
		})
	}
}
