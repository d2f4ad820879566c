package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/engine/topology"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// TestQuickstartJSON runs the real quickstart: embedded server, control
// worker, three node-worker processes, real MNIST training over TCP.
func TestQuickstartJSON(t *testing.T) {
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	dir := t.TempDir()
	root.SetArgs([]string{"quickstart", "--nodes", "3", "--steps", "300", "--chunk-steps", "100",
		"--port", "0", "--ui-port", "-1", "-o", "json", "--data-dir", dir, "--log-level", "warn",
		"--name", "e2e-quickstart", "--collective", "auto"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		dumpLogs(t, filepath.Join(dir, "logs"))
		t.Fatalf("quickstart: %v\nstderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	var s map[string]any
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	for _, k := range []string{"workflow_id", "status", "nodes", "steps", "initial_loss", "final_loss",
		"eval_metric", "wall_seconds", "checkpoints", "recoveries"} {
		if _, ok := s[k]; !ok {
			t.Errorf("summary lacks %q", k)
		}
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary: %s", out.String())
	if sum.Status != spec.PhaseCompleted || sum.Steps != 300 || len(sum.Nodes) != 3 {
		t.Fatalf("status %s, steps %d, nodes %v", sum.Status, sum.Steps, sum.Nodes)
	}
	if !(sum.FinalLoss < 0.6*sum.InitialLoss) {
		t.Errorf("loss did not fall: %.4f → %.4f", sum.InitialLoss, sum.FinalLoss)
	}
	if sum.EvalMetricName != "test_accuracy" || sum.EvalMetric < 0.85 {
		t.Errorf("test accuracy %s = %.4f, want ≥ 0.85 after 300 steps", sum.EvalMetricName, sum.EvalMetric)
	}
	if sum.Checkpoints.Count != 3 || !strings.HasSuffix(sum.Checkpoints.LastURL, "manifest.json") {
		t.Errorf("checkpoints %+v", sum.Checkpoints)
	}
	if sum.Recoveries == nil || len(sum.Recoveries) != 0 {
		t.Errorf("recoveries = %v, want an empty list", sum.Recoveries)
	}
	// --collective auto: the node workers measured their links before the
	// first chunk and the cost model picked the allreduce from them.
	if tp := sum.Topology; tp == nil || tp.HostCount != 1 || len(tp.Levels) != 1 || tp.Algorithm == "" ||
		len(tp.Predictions) < 3 || tp.Levels[0].Links != 6 || tp.Levels[0].BytesPerSec <= 0 {
		t.Errorf("topology = %+v, want one host, 6 measured links, predictions and a chosen algorithm", tp)
	} else if rt, err := ranktable.Parse([]byte(tp.RankTable)); err != nil || rt.RankSize() != 3 || len(rt.Servers) != 1 {
		t.Errorf("the scan's rank table does not read back as 3 devices on 1 server: %v\n%s", err, tp.RankTable)
	} else if err := topology.CheckRankTable(rt); err != nil {
		// (topo-scan --read-rank-table's checks: no device_ip shared)
		t.Errorf("the scan's rank table: %v\n%s", err, tp.RankTable)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "runs")); err != nil {
		t.Errorf("no checkpoint files written: %v", err)
	}
	// The finished run's report is stored next to its checkpoints.
	var report spec.RunStatus
	if rb, err := os.ReadFile(filepath.Join(dir, "checkpoints", filepath.FromSlash(spec.ReportKey("e2e-quickstart")))); err != nil {
		t.Errorf("no report in the bucket (status says %q): %v", sum.Report, err)
	} else if err := json.Unmarshal(rb, &report); err != nil || report.Phase != spec.PhaseCompleted ||
		report.WeightsSHA256 != sum.WeightsSHA256 || report.Step != 300 || !strings.HasSuffix(sum.Report, spec.ReportKey("e2e-quickstart")) {
		t.Errorf("report %s (%v): phase %s, step %d, weights %s; status says %q, weights %s",
			rb, err, report.Phase, report.Step, report.WeightsSHA256, sum.Report, sum.WeightsSHA256)
	}

	// checkpoint verify passes, then names the one object we corrupt.
	verify := func() (string, error) {
		var vout, verr bytes.Buffer
		cmd := newRootCmd(&env{out: &vout, err: &verr, command: childCommand})
		cmd.SetArgs([]string{"checkpoint", "verify", "e2e-quickstart", "--url", "file://" + filepath.Join(dir, "checkpoints")})
		err := cmd.Execute()
		return vout.String(), err
	}
	if out, err := verify(); err != nil || strings.Count(out, "ok ") != 3 {
		t.Fatalf("verify of a good run: %v\n%s", err, out)
	}
	// Corrupt the first content chunk the step-200 manifest lists.
	run := filepath.Join(dir, "checkpoints", "runs", "e2e-quickstart")
	mb, err := os.ReadFile(filepath.Join(run, "ckpt", "000000000200", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		Chunks []struct {
			Hash string `json:"hash"`
		} `json:"chunks"`
	}
	if err := json.Unmarshal(mb, &man); err != nil || len(man.Chunks) == 0 {
		t.Fatalf("manifest at step 200 lists no chunks (%v): %s", err, mb)
	}
	chunkKey := "chunks/" + man.Chunks[0].Hash
	victim := filepath.Join(run, filepath.FromSlash(chunkKey))
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out2, err := verify()
	if err == nil || !strings.Contains(out2, "CORRUPT  step 200") || !strings.Contains(out2, chunkKey) || strings.Count(out2, "ok ") != 2 {
		t.Errorf("verify after corrupting step 200: %v\n%s", err, out2)
	}
}

// TestControlWorkerKilledMidRun kills the control worker (SIGKILL) while a
// run trains on two node-worker processes, starts a new control worker,
// and checks the run finishes — and that the new worker did the finishing.
// The run is long (4000 steps: seconds, where the test looks every 20 ms)
// so that it cannot finish between two looks: with 400 steps it once did
// (0.34 s at 2,125 steps/s, looking every 100 ms).
func TestControlWorkerKilledMidRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pc := startProcessCluster(ctx, t, t.TempDir(), "node-1", "node-2")
	c, l := pc.c, pc.l
	s := spec.RunSpec{Name: "survive-control-kill", Nodes: 2, Steps: 4000, ChunkSteps: 100,
		HeartbeatTimeout: spec.Duration(5 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	// Wait until the first chunk is done and the second is under way.
	for {
		st, live, closed, err := readProgress(ctx, c, run.GetID())
		if closed {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run closed before the kill: %+v %v", st, err)
		}
		if err == nil && st.Step >= 100 && live != nil && live.Step > 110 {
			t.Logf("killing control worker at step %d (heartbeat step %d)", st.Step, live.Step)
			break
		}
		select {
		case <-ctx.Done():
			dumpLogs(t, l.LogDir)
			t.Fatal("run made no progress")
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Meanwhile the server still lists the killed worker's poller: status
	// and dashboard say that no control worker answers, with what the run
	// last recorded, instead of a bare "context deadline exceeded"; a
	// pause is recorded all the same (the new control worker holds the
	// run at its next boundary, and a resume lets it go on), and so are a
	// rescale, which the run itself then refuses (below min_nodes), and a
	// green override, which a run without a green policy ignores.
	// (The commands run side by side: each waits out its query's
	// deadline, queryTimeout, one after another half a minute.)
	pc.replaceControl(t, func() {
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, args := range [][]string{{"status", s.Name}, {"dashboard"}, {"nodes"}, {"pause", s.Name}, {"scale", s.Name, "1"},
			{"green", "override", s.Name, "--for", "1h"}} {
			wg.Go(func() { cliWithoutControl(ctx, t, pc, args) })
		}
	})
	if _, err := awaitPhase(ctx, c, run.GetID(), time.Minute, spec.PhasePaused); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("the pause asked while no control worker ran: %v", err)
	}
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the rescale asked meanwhile refused", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return strings.Contains(st.RefusedRescale, "rescale to 1 node(s) refused: want 2..")
	})
	cli := cliAt(ctx, t, pc.srv.FrontendAddr(), l.LogDir)
	cli("resume", s.Name)
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run failed after control worker restart: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != 4000 || st.Loss >= st.InitialLoss {
		t.Fatalf("final status %+v", st)
	}
	// The history shows workflow tasks completed by two different workers,
	// and every chunk activity carries a readable summary for the Web UI.
	chunks := 0
	hist := fetchHistory(ctx, t, c, run.GetID())
	identities := taskIdentities(hist)
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			var summary string
			if p := ev.GetUserMetadata().GetSummary(); p != nil {
				_ = converter.GetDefaultDataConverter().FromPayload(p, &summary)
			}
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == spec.ActivityTrainChunk {
				chunks++
				if !strings.HasPrefix(summary, "chunk ") || !strings.Contains(summary, "steps ") {
					t.Errorf("chunk activity without a readable summary: %q", summary)
				}
			}
		}
	}
	if len(identities) < 2 {
		t.Errorf("workflow tasks completed by %v; want the killed and the new control worker", identities)
	}
	if chunks != 2*40 {
		t.Errorf("%d chunk activities scheduled, want 80 (40 chunks × 2 nodes)", chunks)
	}
	// The run is findable in the Web UI by its search attributes.
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	sa := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	for key, want := range map[string]any{
		spec.SearchAttrModel: spec.ModelMLPMNIST, spec.SearchAttrStatus: string(spec.PhaseCompleted),
		spec.SearchAttrNodes: float64(2), spec.SearchAttrStep: float64(4000), spec.SearchAttrStrategy: "fixed dp=2",
	} {
		var got any
		if p, ok := sa[key]; !ok || converter.GetDefaultDataConverter().FromPayload(p, &got) != nil || got != want {
			t.Errorf("search attribute %s = %v, want %v", key, got, want)
		}
	}
	recordHistory(t, hist, "trainingrun.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster.json")
}

func fetchHistory(ctx context.Context, t *testing.T, c client.Client, id string) *history.History {
	t.Helper()
	h, err := historyOf(ctx, c, id, "")
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	for _, ev := range h.Events {
		checkTimerSummary(t, id, ev)
	}
	return h
}

// checkTimerSummary: every timer a run's history starts says in the Web
// UI what it waits for — not blank, nor the SDK's placeholder.
func checkTimerSummary(t *testing.T, id string, ev *history.HistoryEvent) {
	t.Helper()
	if ev.GetEventType() != enumspb.EVENT_TYPE_TIMER_STARTED {
		return
	}
	var summary string
	if p := ev.GetUserMetadata().GetSummary(); p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &summary)
	}
	if summary == "" || summary == "AwaitWithTimeout" {
		t.Errorf("%s: timer of event %d (%s) has the summary %q: the Web UI cannot say what it waits for",
			id, ev.GetEventId(), ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration(), summary)
	}
}

// queryRun asks the run's workflow, running or closed, for its status.
func queryRun(ctx context.Context, t *testing.T, c client.Client, id string) spec.RunStatus {
	t.Helper()
	v, err := c.QueryWorkflow(ctx, id, "", spec.QueryStatus)
	var st spec.RunStatus
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		t.Fatalf("query %s's status: %v", id, err)
	}
	return st
}

// recordHistory writes a history for the replay tests when
// CANN_TRAIN_RECORD_HISTORY names a directory (see workflows/testdata).
func recordHistory(t *testing.T, h *history.History, name string) {
	dir := os.Getenv("CANN_TRAIN_RECORD_HISTORY")
	if dir == "" {
		return
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s (%d events)", name, len(h.Events))
}

func dumpLogs(t *testing.T, dir string) {
	// (Recursive: a quickstart's logs are under logs/<run>/.)
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(path)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		rel, _ := filepath.Rel(dir, path)
		t.Logf("--- %s (tail)\n%s", rel, b)
		return nil
	})
}

// TestNodeKilledMidRunIsReplaced SIGKILLs a node-worker process mid-chunk.
// The run must detect it, mark it failed, take the spare, rewind to the
// last checkpoint in a new generation, finish — and end with exactly the
// weights of a run that never failed (same seed, same global batch). A
// second run loses a node right after a chunk's last step, before the
// node reports the chunk: its peers finish and name nobody, so the run
// must find it by asking a finished node (well within the heartbeat
// timeout), resume from the checkpoint rank 0 made at the chunk's end,
// and end with the fault-free weights too.
func TestNodeKilledMidRunIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// node-2 holds rank 1; `cann-train fault kill` makes it die mid-chunk,
	// after step 130 (the last checkpoint is at 100); node-4 is the spare.
	const victim = "node-2"
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3", "node-4", "node-5")
	hb := 3 * time.Second
	base := spec.RunSpec{Nodes: 3, Steps: 400, ChunkSteps: 50, HeartbeatTimeout: spec.Duration(hb)}.WithDefaults()
	start := func(name string) client.WorkflowRun {
		s := base
		s.Name = name
		run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
		return run
	}
	finish := func(run client.WorkflowRun) spec.RunStatus {
		var st spec.RunStatus
		if err := run.Get(ctx, &st); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run did not survive the kill: %v", err)
		}
		t.Logf("recoveries %+v", st.Recoveries)
		if st.Phase != spec.PhaseCompleted || st.Step != base.Steps {
			t.Fatalf("status %s at step %d", st.Phase, st.Step)
		}
		if len(st.Recoveries) != 1 {
			dumpLogs(t, l.LogDir) // a second recovery's cause is in the nodes' logs
			t.Fatalf("recoveries %+v, want exactly one", st.Recoveries)
		}
		return st
	}
	run := start("node-killed")
	faultKill(ctx, t, addr, "node-killed", victim, 130)
	st := finish(run)
	rec := st.Recoveries[0]
	if len(rec.FailedNodes) != 1 || rec.FailedNodes[0] != victim || len(rec.Replacement) != 1 || rec.Replacement[0] != "node-4" {
		t.Errorf("recovery %+v: want %s replaced by the spare node-4", rec, victim)
	}
	if rec.FailedAtStep != 130 || rec.ResumeStep != 100 || rec.LostSteps != 30 || rec.ResumedAt.IsZero() {
		t.Errorf("recovery %+v: want failure at 130, rewind to 100, 30 steps lost, and a resume time", rec)
	}
	if st.Nodes[1] != "node-4" {
		t.Errorf("nodes after recovery %v: the spare must take the lost rank", st.Nodes)
	}
	// The failed chunk's energy counts: a lost segment, 100 to the step
	// its peers reached.
	var lost []spec.Segment
	for _, seg := range st.Segments {
		if seg.Lost {
			lost = append(lost, seg)
		}
	}
	if len(lost) != 1 || lost[0].FromStep != 100 || lost[0].ToStep != 130 || lost[0].Nodes != 3 || lost[0].WallSeconds <= 0 {
		t.Errorf("lost segments %+v: want the chunk from 100 that failed at 130, on 3 nodes", lost)
	}
	// Now on node-1, node-3 and node-4 (node-5 spare): node-3 (rank 1)
	// dies once step 150 — the end of the chunk from 100 — is done.
	after := start("node-gone-after-chunk")
	faultKill(ctx, t, addr, "node-gone-after-chunk", "node-3", 150)
	gone := finish(after)
	grec := gone.Recoveries[0]
	if len(grec.FailedNodes) != 1 || grec.FailedNodes[0] != "node-3" || !strings.Contains(grec.Reason, "gone before reporting") {
		t.Errorf("recovery %+v: want node-3 found gone after its chunk", grec)
	}
	// Rank 0 finished the chunk and uploaded its checkpoint at 150: the
	// run keeps it and loses no step, and counts the chunk as trained.
	if grec.DetectSeconds >= hb.Seconds() || grec.FailedAtStep != 150 || grec.ResumeStep != 150 || grec.LostSteps != 0 {
		t.Errorf("recovery %+v: want it found before the %s heartbeat timeout, at step 150, resumed from 150", grec, hb)
	}
	var trained int64
	for _, seg := range gone.Segments {
		trained += seg.ToStep - seg.FromStep
	}
	if trained != base.Steps || gone.Chunks != int(base.Steps/base.ChunkSteps) {
		t.Errorf("%d chunks, segments %+v: want the salvaged chunk counted (%d steps trained in %d chunks)",
			gone.Chunks, gone.Segments, base.Steps, base.Steps/base.ChunkSteps)
	}
	// A fault-free run on the surviving nodes, same seed and batch.
	var clean spec.RunStatus
	if err := start("fault-free").Get(ctx, &clean); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatal(err)
	}
	if len(clean.Recoveries) != 0 || clean.Step != base.Steps {
		t.Fatalf("reference run %+v", clean)
	}
	for _, r := range []spec.RunStatus{st, gone} {
		if r.WeightsSHA256 != clean.WeightsSHA256 {
			t.Errorf("recovered run %s's weights %s differ from the fault-free run's %s", r.RunID, r.WeightsSHA256, clean.WeightsSHA256)
		}
	}
	// trainingrun_recovery.json: recorded before failures travelled with
	// the acquire request; trainingrun_recovery_acquire.json: before the
	// failed chunk was a lost segment (keep them).
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_recovery_lost.json")
	// trainingrun_recovery_gone.json: recorded before the salvage;
	// trainingrun_recovery_salvage.json: before it counted the chunk (keep them).
	recordHistory(t, fetchHistory(ctx, t, c, after.GetID()), "trainingrun_recovery_salvage_absorbed.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_recovery.json")
}

// faultKill runs `cann-train fault kill`: node SIGKILLs itself once run
// completes step.
func faultKill(ctx context.Context, t *testing.T, addr, run, node string, step int64) {
	t.Helper()
	var fout, ferr bytes.Buffer
	fault := newRootCmd(&env{out: &fout, err: &ferr, command: childCommand})
	fault.SetArgs([]string{"fault", "kill", "--run", run, "--node", node, "--at-step", strconv.FormatInt(step, 10), "--address", addr})
	if err := fault.ExecuteContext(ctx); err != nil {
		t.Fatalf("fault kill: %v\n%s", err, ferr.String())
	}
}

// registryRecord is node id's record in the default Cluster's registry;
// the test fails when it has none.
func registryRecord(ctx context.Context, t *testing.T, c client.Client, id string) workflows.NodeRecord {
	t.Helper()
	reg, err := readRegistry(ctx, c, spec.DefaultClusterID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reg.Nodes {
		if r.Node.ID == id {
			return r
		}
	}
	t.Fatalf("node %s is not in the registry", id)
	return workflows.NodeRecord{}
}

// waitRegistered fails the test unless n nodes register.
func waitRegistered(ctx context.Context, t *testing.T, c client.Client, n int) {
	t.Helper()
	if err := awaitNodes(ctx, c, spec.DefaultClusterID, n); err != nil {
		t.Fatal(err)
	}
}

// startInProcessControl starts the embedded server, serves the control
// queue from this test process, and starts the named node workers as
// processes (checkpoints under dir/ckpt, fault injection allowed, logs
// under dir/logs); it returns once they all registered. Cleanups stop all.
func startInProcessControl(ctx context.Context, t *testing.T, dir string, nodes ...string) (c client.Client, l *dev.Launcher, addr string) {
	t.Helper()
	return startInProcessControlWith(ctx, t, dir, controlSetup{}, nodes...)
}

// controlSetup varies startInProcessControlWith.
type controlSetup struct {
	metrics       client.MetricsHandler // the control worker's metrics
	checkpointURL string                // the node workers'; default file://<dir>/ckpt
	// cluster, when set, starts the Cluster before the nodes register
	// with it (e.g. with a small MaxHistoryEvents).
	cluster *workflows.ClusterInput
}

// startInProcessControlWith is startInProcessControl set up by cs.
func startInProcessControlWith(ctx context.Context, t *testing.T, dir string, cs controlSetup, nodes ...string) (c client.Client, l *dev.Launcher, addr string) {
	t.Helper()
	srv, err := dev.StartServer(ctx, dev.ServerOptions{SearchAttributes: workers.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop) // after the control worker's cleanup (LIFO)
	recordAllHistories(t, srv)
	c = controlInProcessWith(ctx, t, srv, cs.metrics)
	l = newLauncher(dir)
	t.Cleanup(func() { _ = l.StopAll(5 * time.Second) })
	ckpt := cs.checkpointURL
	if ckpt == "" {
		ckpt = "file://" + filepath.Join(dir, "ckpt")
	}
	if cs.cluster != nil {
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: spec.DefaultClusterID, TaskQueue: spec.ControlTaskQueue},
			spec.WorkflowCluster, *cs.cluster); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range nodes {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", srv.FrontendAddr(),
			"--checkpoint-url", ckpt, "--log-level", "info",
			"--allow-fault-injection"); err != nil {
			t.Fatal(err)
		}
	}
	// Ranks go to free nodes in ID order: with all registered, the last
	// ones are the spares.
	if len(nodes) > 0 {
		if err := awaitNodes(ctx, c, spec.DefaultClusterID, len(nodes)); err != nil {
			dumpLogs(t, l.LogDir) // (which worker did not register, and why)
			t.Fatal(err)
		}
	}
	return c, l, srv.FrontendAddr()
}

// newLauncher starts this test's worker processes: their logs go to
// dir/logs, and their home (CANN_TRAIN_HOME: the default work directory,
// bucket and data directory) is dir/home, not the developer's, nor
// another test's (tests run side by side: a node worker sweeps the
// process groups its work directory's pid file names). env is added to
// each child's environment.
func newLauncher(dir string, env ...string) *dev.Launcher {
	return &dev.Launcher{Command: childCommand, LogDir: filepath.Join(dir, "logs"),
		Env: append([]string{"CANN_TRAIN_HOME=" + filepath.Join(dir, "home")}, env...)}
}

// startRun starts in's TrainingRun as run/<its spec's name> on the
// control queue.
func startRun(ctx context.Context, t *testing.T, c client.Client, in workflows.RunInput) client.WorkflowRun {
	t.Helper()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: spec.RunIDPrefix + in.Spec.Name, TaskQueue: spec.ControlTaskQueue},
		spec.WorkflowTrainingRun, in)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// untilStatus polls run id's status until ok says so and returns it; the
// run closing, or ctx ending, first fails the test with the node logs in
// logDir.
func untilStatus(ctx context.Context, t *testing.T, c client.Client, id, logDir, what string,
	ok func(st spec.RunStatus, live *spec.ChunkProgress) bool) spec.RunStatus {
	t.Helper()
	for {
		st, live, closed, err := readProgress(ctx, c, id)
		if closed {
			dumpLogs(t, logDir)
			t.Fatalf("run closed while waiting for %s: %+v %v", what, st, err)
		}
		if err == nil && ok(st, live) {
			return st
		}
		select {
		case <-ctx.Done():
			dumpLogs(t, logDir)
			t.Fatalf("no %s: %+v", what, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitRun waits for run's result; a failed run fails the test, with the
// node logs in logDir.
func awaitRun(ctx context.Context, t *testing.T, run client.WorkflowRun, logDir string) spec.RunStatus {
	t.Helper()
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, logDir)
		t.Fatalf("run %s: %v", run.GetID(), err)
	}
	return st
}

// serverOnDisk returns a function that starts the embedded server on one
// port and one SQLite file in dir, so that a test can stop the server and
// start it again with its history (a restart, an outage).
func serverOnDisk(ctx context.Context, t *testing.T, dir string) func() *dev.Server {
	t.Helper()
	port, err := dev.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "temporal.db")
	return func() *dev.Server {
		srv, err := dev.StartServer(ctx, dev.ServerOptions{FrontendPort: port, DBFile: db, SearchAttributes: workers.SearchAttributes()})
		if err != nil {
			t.Fatal(err)
		}
		recordAllHistories(t, srv)
		return srv
	}
}

// controlInProcess dials srv and serves the control queue from this test
// process until the test ends.
func controlInProcess(ctx context.Context, t *testing.T, srv *dev.Server) client.Client {
	t.Helper()
	return controlInProcessWith(ctx, t, srv, nil)
}

func controlInProcessWith(ctx context.Context, t *testing.T, srv *dev.Server, h client.MetricsHandler) client.Client {
	t.Helper()
	log, _ := workers.NewLogger("warn", false)
	c, err := workers.Dial(ctx, workers.ClientOptions{Address: srv.FrontendAddr(), Logger: log, MetricsHandler: h})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopControl := context.WithCancel(ctx)
	controlDone := make(chan error, 1)
	go func() { controlDone <- workers.RunControl(wctx, c, srv.Namespace(), log) }()
	t.Cleanup(func() {
		stopControl()
		<-controlDone
		c.Close()
	})
	return c
}

// processCluster is an embedded server with the control worker and node
// workers as separate processes (tests that kill the control worker).
type processCluster struct {
	srv     *dev.Server
	c       client.Client
	l       *dev.Launcher
	common  []string // flags every worker gets
	control *dev.Proc
}

// startServerClient starts a dev server (with the search attributes the
// workers upsert) and a client of it; cleanups close both.
func startServerClient(ctx context.Context, t *testing.T) (*dev.Server, client.Client) {
	t.Helper()
	srv, err := dev.StartServer(ctx, dev.ServerOptions{SearchAttributes: workers.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	recordAllHistories(t, srv)
	c, err := workers.Dial(ctx, workers.ClientOptions{Address: srv.FrontendAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return srv, c
}

// startProcessCluster starts the server, control worker "control-1" and
// the named node workers (checkpoints under dir/ckpt); cleanups stop all.
func startProcessCluster(ctx context.Context, t *testing.T, dir string, nodes ...string) *processCluster {
	t.Helper()
	srv, c := startServerClient(ctx, t)
	var err error
	pc := &processCluster{srv: srv, c: c, l: newLauncher(dir),
		common: []string{"--address", srv.FrontendAddr(), "--log-level", "info"}}
	t.Cleanup(func() { _ = pc.l.StopAll(5 * time.Second) })
	if pc.control, err = pc.l.Start("control-1", append([]string{"worker", "control"}, pc.common...)...); err != nil {
		t.Fatal(err)
	}
	for _, id := range nodes {
		if _, err := pc.l.Start(id, append([]string{"worker", "node", "--id", id, "--checkpoint-url", "file://" + filepath.Join(dir, "ckpt")}, pc.common...)...); err != nil {
			t.Fatal(err)
		}
	}
	return pc
}

// replaceControl SIGKILLs the control worker, calls each meanwhile, and
// starts "control-2".
func (pc *processCluster) replaceControl(t *testing.T, meanwhile ...func()) {
	t.Helper()
	if err := pc.control.Kill(); err != nil {
		t.Fatal(err)
	}
	<-pc.control.Done()
	for _, f := range meanwhile {
		f()
	}
	if _, err := pc.l.Start("control-2", append([]string{"worker", "control"}, pc.common...)...); err != nil {
		t.Fatal(err)
	}
}

// cliWithoutControl runs `cann-train args…` while pc has no control worker
// (TestControlWorkerKilledMidRun) and checks what it says and how soon.
func cliWithoutControl(ctx context.Context, t *testing.T, pc *processCluster, args []string) {
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(append(args, "--address", pc.srv.FrontendAddr()))
	start := time.Now()
	err := root.ExecuteContext(ctx)
	took := time.Since(start)
	var noAnswer *noAnswerError
	switch args[0] {
	case "status":
		if !errors.As(err, &noAnswer) || !strings.Contains(out.String(), "training (as the run last recorded it") ||
			!strings.Contains(out.String(), "mlp-mnist on 2 node(s)") {
			t.Errorf("status without an answering control worker (%v): %v\n%s", took, err, out.String())
		}
	case "dashboard":
		if err != nil || !strings.Contains(out.String(), "status unreadable: no control worker answered") {
			t.Errorf("dashboard without an answering control worker (%v): %v\n%s", took, err, out.String())
		}
	case "scale": // (below min_nodes: the run itself refuses it, later)
		if err != nil || !strings.Contains(out.String(), "rescale to 1 node(s) requested") ||
			!strings.Contains(errb.String(), "the rescale is recorded and takes effect once a control worker runs the workflow") {
			t.Errorf("scale without an answering control worker (%v): %v\n%s%s", took, err, out.String(), errb.String())
		}
	case "green": // (the run has no green policy: it ignores the override)
		if err != nil || !strings.Contains(out.String(), "green policy ignored until ") ||
			!strings.Contains(errb.String(), "the green override is recorded and takes effect once a control worker runs the workflow") ||
			!strings.Contains(errb.String(), "a run without one ignores the override") {
			t.Errorf("green override without an answering control worker (%v): %v\n%s%s", took, err, out.String(), errb.String())
		}
	case "pause":
		if err != nil || !strings.Contains(out.String(), "pause requested") || strings.Contains(out.String(), "at step 0") ||
			!strings.Contains(errb.String(), "the pause is recorded and takes effect once a control worker runs the workflow") {
			t.Errorf("pause without an answering control worker (%v): %v\n%s%s", took, err, out.String(), errb.String())
		}
	default:
		if !errors.As(err, &noAnswer) || !strings.Contains(err.Error(), spec.DefaultClusterID+"'s registry query") {
			t.Errorf("nodes without an answering control worker (%v): %v", took, err)
		}
	}
	if took > 2*queryTimeout {
		t.Errorf("%s took %v", args[0], took)
	}
}

// taskIdentities are the workers that completed the run's workflow tasks.
func taskIdentities(hist *history.History) map[string]bool {
	ids := map[string]bool{}
	for _, ev := range hist.GetEvents() {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			ids[ev.GetWorkflowTaskCompletedEventAttributes().GetIdentity()] = true
		}
	}
	return ids
}
