//go:build record

package workflows

// The scripted recorder: replay histories for the changes no end-to-end
// test reaches.
//
// Most replay histories in testdata come from the end-to-end tests (real
// node workers, CANN_TRAIN_RECORD_ALL). Some workflow.GetVersion changes
// are taken only in situations those tests cannot stage in seconds — a
// rescale signalled while another acquires, a green wait re-decided, a
// silent rank among equally blamed ones. TestRecordScripted stages each on
// the embedded Temporal server: TrainingRun runs on a real control worker,
// its activities are the unit tests' fakes served by real workers on the
// nodes' task queues, and the script acts in real time (signals from the
// client, chunks that take seconds). Each scenario checks that its run
// passed through its change, and writes the run's history to
// $CANN_TRAIN_RECORD_SCRIPTED/<name>.json, refusing to overwrite one
// (`make record-histories`; copy the new file into testdata and name it in
// replay_test.go). It is behind the record build tag, as the histories are
// recorded once and kept: CI replays them (TestReplayRecordedHistories)
// and vets this file.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

// recorder is one scenario's embedded server, client and workers.
type recorder struct {
	t   *testing.T
	srv *dev.Server
	c   client.Client
	dir string
}

// newRecorder starts a server for one scenario (opts: its options, the
// search attributes and a quiet logger added); it stops with the test.
func newRecorder(t *testing.T, opts dev.ServerOptions) *recorder {
	t.Helper()
	dir := os.Getenv("CANN_TRAIN_RECORD_SCRIPTED")
	if dir == "" {
		t.Fatal("CANN_TRAIN_RECORD_SCRIPTED names no directory to write the histories to (make record-histories)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sa := map[string]enumspb.IndexedValueType{
		spec.SearchAttrModel:    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		spec.SearchAttrNodes:    enumspb.INDEXED_VALUE_TYPE_INT,
		spec.SearchAttrStep:     enumspb.INDEXED_VALUE_TYPE_INT,
		spec.SearchAttrStatus:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		spec.SearchAttrStrategy: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
	opts.SearchAttributes, opts.Logger = sa, zap.NewNop()
	srv, err := dev.StartServer(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddr(), Namespace: srv.Namespace(), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &recorder{t: t, srv: srv, c: c, dir: dir}
}

// serve starts the control worker — TrainingRun, a Cluster that takes
// the run's signals and does nothing, and the control activities given
// by name — and one worker per node with the node activities. The
// Cluster runs as spec.DefaultClusterID.
func (r *recorder) serve(nodes []spec.Node, control, node map[string]any) {
	r.t.Helper()
	w := worker.New(r.c, spec.ControlTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
	w.RegisterWorkflowWithOptions(silentCluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
	for name, fn := range control {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	r.start(w)
	for _, n := range nodes {
		nw := worker.New(r.c, n.TaskQueue, worker.Options{})
		for name, fn := range node {
			nw.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
		r.start(nw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: spec.DefaultClusterID, TaskQueue: spec.ControlTaskQueue},
		spec.WorkflowCluster); err != nil {
		r.t.Fatal(err)
	}
}

func (r *recorder) start(w worker.Worker) {
	r.t.Helper()
	if err := w.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(w.Stop)
}

// silentCluster stands in for the Cluster: the run's release, drain and
// mark-failed signals reach it (the fakes play the Cluster's answers).
func silentCluster(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return false })
}

// run starts TrainingRun as id and waits for its end (a continue-as-new
// chain's last run), within limit.
func (r *recorder) run(id string, in RunInput, limit time.Duration) (spec.RunStatus, error) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: spec.ControlTaskQueue}, spec.WorkflowTrainingRun, in)
	if err != nil {
		r.t.Fatal(err)
	}
	var st spec.RunStatus
	err = run.Get(ctx, &st)
	if ctx.Err() != nil {
		r.t.Fatalf("%s did not end within %s", id, limit)
	}
	return st, err
}

// signal sends a signal to the run; a failure fails the test.
func (r *recorder) signal(id, name string, arg any) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.c.SignalWorkflow(ctx, id, "", name, arg); err != nil {
		r.t.Errorf("signal %s to %s: %v", name, id, err)
	}
}

// status queries the run id's status (false: no answer yet).
func (r *recorder) status(id string) (spec.RunStatus, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := r.c.QueryWorkflow(ctx, id, "", spec.QueryStatus)
	if err != nil {
		return spec.RunStatus{}, false
	}
	var st spec.RunStatus
	if err := v.Get(&st); err != nil {
		return spec.RunStatus{}, false
	}
	return st, true
}

// await polls the run id's status until ok holds of it, within limit: a
// script goroutine's helper, it reports a miss with Errorf and returns
// false.
func (r *recorder) await(id, what string, limit time.Duration, ok func(spec.RunStatus) bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if st, found := r.status(id); found && ok(st) {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, _ := r.status(id)
	r.t.Errorf("%s: not %s within %s (status %+v)", id, what, limit, st)
	return false
}

// save writes the history of id's run runID ("": the latest) as
// name.json, having checked that it asked for every change in changes.
func (r *recorder) save(id, runID, name string, changes ...string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &history.History{}
	it := r.c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			r.t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	asked := changesAsked(r.t, id, h)
	for _, ch := range changes {
		if !slices.Contains(asked, ch) {
			r.t.Fatalf("%s's history never asked for %q (it asked for %v): the scenario missed its change", id, ch, asked)
		}
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		r.t.Fatal(err)
	}
	path := filepath.Join(r.dir, name+".json")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		r.t.Fatalf("%v (a recorded history is kept: remove it first to record it again)", err)
	}
	if _, err := f.Write(b); err != nil {
		r.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("recorded %s (%d events, changes %v)", path, len(h.Events), asked)
}

// quietLogger drops the SDK's logs (the scenarios' failures say enough).
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// runActivities are the activities every scripted TrainingRun needs.
func runActivities(cl *fakeCluster, ch *fakeChunks) (control, node map[string]any) {
	return map[string]any{
			spec.ActivityAcquireNodes: cl.acquire,
			spec.ActivityWriteReport:  ch.report,
		}, map[string]any{
			spec.ActivityTrainChunk: ch.train,
			spec.ActivityCheckNodes: ch.check,
		}
}

// scenario stages one run on its own server (started with opts: a
// scenario may lower SuggestContinueAsNewEvents, say).
type scenario struct {
	name string
	run  func(t *testing.T, r *recorder)
	opts dev.ServerOptions
}

// recordScenarios runs each scenario as a subtest with a new recorder.
func recordScenarios(t *testing.T, scs []scenario) {
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newRecorder(t, sc.opts)) })
	}
}

// TestRecordScripted records the control scenarios (the green, external
// and chunk ones are TestRecordScripted* beside it).
func TestRecordScripted(t *testing.T) {
	recordScenarios(t, []scenario{
		{name: "trainingrun_newer_rescale", run: recordNewerRescale},
	})
}

// recordNewerRescale: a run on 3 nodes is scaled to 2 as its second chunk
// starts, and to 1 while that scale acquires its nodes: the second is
// applied after the first (versionNewerRescale), not dropped.
func recordNewerRescale(t *testing.T, r *recorder) {
	const id = "run/newer-rescale"
	nodes := testNodes("n1", "n2", "n3")
	cl := &fakeCluster{pool: nodes}
	ch := &fakeChunks{}
	// Chunks take a second: the first rescale reaches the run mid-chunk.
	ch.onStart = func(in spec.ChunkInput) {
		if in.From == 100 && in.Rank == 0 {
			r.signal(id, spec.SignalRescale, spec.Rescale{Nodes: 2})
		}
		time.Sleep(time.Second)
	}
	var once sync.Once
	cl.onAcquire = func(req spec.AcquireRequest) {
		if req.Count == 2 {
			once.Do(func() { r.signal(id, spec.SignalRescale, spec.Rescale{Nodes: 1}) })
		}
	}
	control, node := runActivities(cl, ch)
	r.serve(nodes, control, node)
	s := spec.RunSpec{Name: "newer-rescale", Nodes: 3, MinNodes: 1, Steps: 400, ChunkSteps: 100}.WithDefaults()
	st, err := r.run(id, RunInput{Spec: s}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rescalings) != 2 || st.Rescalings[0].ToNodes != 2 || st.Rescalings[1].ToNodes != 1 {
		t.Fatalf("rescalings %+v: want to 2, then to 1", st.Rescalings)
	}
	r.save(id, "", "trainingrun_newer_rescale", versionNewerRescale)
}
