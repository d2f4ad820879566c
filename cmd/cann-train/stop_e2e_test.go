package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeStopsGracefully: the worker of rank 0 (the node that writes
// the run's checkpoints), told to stop (SIGTERM, as a supervisor,
// Kubernetes or `docker compose stop` does) in the middle of a chunk far
// longer than its stop grace, leaves the cluster at once — the registry
// says "worker stopped", and that stays its reason after its peers blame
// it (`nodes`: stopped) — and ends the chunk early: its ranks and their
// peer agree on a step, rank 0 stores a checkpoint there, and the worker
// exits, cleanly, well within its default --stop-grace (25 s). The run
// moves rank 0 to the spare at that step, before it plans a chunk on
// node-1, and loses none: it resumes from that checkpoint, and counts no
// restart. (Before, the worker waited out its grace for the chunk,
// then cancelled it: the run rewound to its start.)
func TestNodeStopsGracefully(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	cli := cliAt(ctx, t, addr, l.LogDir)
	// One chunk of about 40 minutes here (4,500 steps/s on two nodes).
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "stop", Nodes: 2, Steps: chunk, ChunkSteps: chunk}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 200
	})
	node1 := l.Proc("node-1")
	if err := syscall.Kill(node1.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	for r := registryRecord(ctx, t, c, "node-1"); !r.Failed; r = registryRecord(ctx, t, c, "node-1") {
		select { // the Cluster takes the signal at its next workflow task
		case <-ctx.Done():
			t.Fatalf("node-1 never left the cluster: %+v", r)
		case <-node1.Done():
			t.Fatalf("node-1 exited (%v) without leaving the cluster: %+v", node1.Err(), r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-node1.Done():
	case <-ctx.Done():
		t.Fatal("node-1 did not exit")
	}
	if err := node1.Err(); err != nil {
		t.Errorf("node-1 exited with %v, want a clean exit", err)
	}
	exited := time.Since(signalled)
	if exited >= workers.DefaultStopGrace {
		t.Errorf("node-1 took %v to exit, its whole stop grace (%v): the chunk did not end early", exited, workers.DefaultStopGrace)
	}
	st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the run training on node-3", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return len(st.Recoveries) > 0 && live != nil && live.Step > st.Recoveries[0].ResumeStep
	})
	if len(st.Recoveries) != 1 {
		t.Fatalf("recoveries %+v, want one", st.Recoveries)
	}
	rec := st.Recoveries[0]
	if !slices.Equal(rec.FailedNodes, []string{"node-1"}) || !slices.Equal(rec.Replacement, []string{"node-3"}) ||
		rec.ResumeStep < 200 || rec.ResumeStep >= chunk || rec.LostSteps != 0 || st.LastCkpt == nil || st.LastCkpt.Step < rec.ResumeStep ||
		!rec.Stopped || !strings.Contains(rec.Reason, "node-1's worker stopped") {
		t.Errorf("recovery %+v, last checkpoint %+v; want node-1's rank on node-3 from the checkpoint where the chunk ended, past step 200, "+
			"no step lost, as node-1's worker stopped", rec, st.LastCkpt)
	}
	t.Logf("node-1 exited %v after its SIGTERM; the chunk ended at step %d; the run had replaced node-1 %v after the signal",
		exited.Round(time.Millisecond), rec.ResumeStep, rec.ReplacedAt.Sub(signalled).Round(time.Millisecond))
	cancelAndAwait(ctx, t, c, run)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_stopped_node.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_stop.json")
	if r := registryRecord(ctx, t, c, "node-1"); !r.Failed || r.FailReason != spec.ReasonWorkerStopped {
		t.Errorf("node-1 in the registry: failed %v, %q; want failed, %q", r.Failed, r.FailReason, spec.ReasonWorkerStopped)
	}
	listed := false
	for _, line := range strings.Split(cli("nodes"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "node-1" {
			listed = strings.HasPrefix(f[1], "stopped:")
		}
	}
	if !listed {
		t.Errorf("cann-train nodes does not list node-1 as stopped:\n%s", cli("nodes"))
	}
	log, err := os.ReadFile(filepath.Join(l.LogDir, "node-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stopping: no new chunks; ending the one(s) in flight at a step the run's nodes agree on",
		"ending the chunk early: a node of the run is stopping", "checkpoint committed"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("node-1's log does not say %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "chunk cancelled") {
		t.Errorf("node-1's log says the chunk was cancelled:\n%s", log)
	}
}

// TestControlsEndALongChunk: a run whose chunks are far longer than an
// operator waits (10,000,000 steps: about 40 minutes here) is paused with
// `cann-train pause --wait` and a node of it drained with `nodes drain`,
// each while a chunk trains. Each takes effect within seconds: the run
// asks rank 0's node to end the chunk (EndChunk), the ranks agree on a
// step and store a checkpoint there, and the run holds at that step, or
// moves off the drained node to the spare at it. (Before, each waited for
// the chunk's planned end.) Then `cann-train cancel --wait` ends the chunk
// the same way and the run ends cancelled at that step, its checkpoint
// there (before, the chunk was cancelled and its steps lost).
func TestControlsEndALongChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3")
	cli := cliAt(ctx, t, addr, l.LogDir)
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "long", Nodes: 2, Steps: 2 * chunk, ChunkSteps: chunk}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	training := func(what string, past int64) spec.RunStatus {
		t.Helper()
		return untilStatus(ctx, t, c, run.GetID(), l.LogDir, what, func(st spec.RunStatus, live *spec.ChunkProgress) bool {
			return st.Phase == spec.PhaseTraining && live != nil && live.Step >= past+200
		})
	}
	training("the first chunk under way", 0)
	asked := time.Now()
	out := cli("pause", "long", "--wait", "60s")
	paused := time.Since(asked)
	st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "paused", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhasePaused
	})
	if !strings.Contains(out, fmt.Sprintf("paused at step %d", st.Step)) || st.Step < 200 || st.Step >= chunk ||
		st.LastCkpt == nil || st.LastCkpt.Step != st.Step {
		t.Fatalf("pause said %q; the run holds at step %d, last checkpoint %+v; want it held within the chunk, at a checkpoint", out, st.Step, st.LastCkpt)
	}
	t.Logf("`pause --wait` returned %v after it was run: paused at step %d", paused.Round(time.Millisecond), st.Step)
	cli("resume", "long")
	training("training again", st.Step)
	asked = time.Now()
	cli("nodes", "drain", "node-2", "--reason", "swap the disk")
	moved := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "moved off node-2", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Rescalings) > 0
	})
	took := time.Since(asked)
	rs := moved.Rescalings[0]
	if !slices.Equal(rs.Removed, []string{"node-2"}) || !slices.Equal(rs.Added, []string{"node-3"}) || rs.Error != "" ||
		rs.ResumeStep <= st.Step || rs.ResumeStep >= chunk || len(moved.Recoveries) != 0 {
		t.Fatalf("rescaling %+v (recoveries %+v); want node-2 replaced by node-3 within the chunk, after the pause", rs, moved.Recoveries)
	}
	t.Logf("drained node-2: the run moved to node-3 at step %d, %v after `nodes drain`", rs.ResumeStep, took.Round(time.Millisecond))
	training("training on node-3", rs.ResumeStep)
	asked = time.Now()
	out = cli("cancel", "long", "--wait", "60s")
	took = time.Since(asked)
	var canceled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Fatalf("the cancelled run ended with %v", err)
	}
	end := queryRun(ctx, t, c, run.GetID())
	if end.Phase != spec.PhaseCancelled || end.Step <= rs.ResumeStep || end.Step >= chunk || end.LastCkpt == nil || end.LastCkpt.Step != end.Step ||
		!strings.Contains(out, fmt.Sprintf("cancelled at step %d; last checkpoint at step %d", end.Step, end.Step)) ||
		!strings.Contains(out, fmt.Sprintf("--resume continues it from step %d", end.Step)) {
		t.Fatalf("cancel said %q; the run ended at step %d, last checkpoint %+v; want it cancelled within the chunk, at a checkpoint", out, end.Step, end.LastCkpt)
	}
	t.Logf("`cancel --wait` returned %v after it was run: cancelled at step %d, its checkpoint there", took.Round(time.Millisecond), end.Step)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_cancelling.json")
}

// cancelAndAwait cancels run (as `temporal workflow cancel` does) and
// waits for it to end Canceled.
func cancelAndAwait(ctx context.Context, t *testing.T, c client.Client, run client.WorkflowRun) {
	t.Helper()
	if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	var canceled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Fatalf("the cancelled run ended with %v", err)
	}
}

// TestNodeWorkerWaitsForTemporal: a node worker started before its
// Temporal server (a host booting, a deployment's pods starting together)
// says that the server does not answer and tries again, instead of
// exiting; once the server is up on that address it registers.
func TestNodeWorkerWaitsForTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // (free again: nothing answers there until the server starts)
	l := newLauncher(dir)
	t.Cleanup(func() { _ = l.StopAll(5 * time.Second) })
	node, err := l.Start("node-1", "worker", "node", "--id", "node-1", "--address", fmt.Sprintf("127.0.0.1:%d", port),
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--log-level", "info")
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, _ := os.ReadFile(filepath.Join(l.LogDir, "node-1.log"))
		if strings.Contains(string(b), "Temporal does not answer yet; trying again") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node-1 never said it waits for Temporal:\n%s", b)
		case <-node.Done():
			t.Fatalf("node-1 exited (%v) before its server started:\n%s", node.Err(), b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	srv, err := dev.StartServer(ctx, dev.ServerOptions{FrontendPort: port, SearchAttributes: workers.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	recordAllHistories(t, srv)
	c := controlInProcess(ctx, t, srv)
	waitRegistered(ctx, t, c, 1)
	select {
	case <-node.Done():
		t.Fatalf("node-1 exited: %v", node.Err())
	default:
	}
}

// TestExternalStopMovesTheWorld: the worker of a node running an external
// job's process is stopped (SIGTERM). The Cluster tells the run
// (Evict, Stopping), whose world stops after its next checkpoint upload —
// well within the worker's stop grace — and relaunches from it with the
// free node in that rank, no restart counted; the stopped worker exits
// cleanly once its process is done. (Before, the world kept the stopping
// node: here it finished on it within the worker's grace; a longer job
// crashed when the grace ended, relaunched from its last checkpoint as
// after a failure.)
func TestExternalStopMovesTheWorld(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job stop e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptCluster(ctx, t, dir, "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "ext-stop", Nodes: 2, Steps: 300, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the world past step 60", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 60
	})
	signalled := time.Now()
	node2 := sigterm(t, l, "node-2")
	st := awaitRun(ctx, t, run, l.LogDir)
	if err := exited(ctx, t, "node-2", node2); err != nil {
		t.Errorf("node-2 exited with %v, want a clean exit", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 {
		t.Fatalf("final status %s at step %d, recoveries %+v: want completed, none", st.Phase, st.Step, st.Recoveries)
	}
	if len(st.Rescalings) != 1 || !slices.Equal(st.Rescalings[0].Removed, []string{"node-2"}) ||
		!slices.Equal(st.Rescalings[0].Added, []string{"node-3"}) || st.Rescalings[0].AtStep%50 != 0 ||
		!strings.Contains(st.Rescalings[0].Reason, "node-2 stopping") {
		t.Fatalf("node changes %+v; want node-2 left for node-3 at a checkpoint, as it was stopping", st.Rescalings)
	}
	t.Logf("node-2 stopped: the world moved to node-3 at step %d, %v after the signal",
		st.Rescalings[0].AtStep, st.Rescalings[0].At.Sub(signalled).Round(time.Millisecond))
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_stop.json")
}

// TestTwoNodesStopAtOnce: both nodes of a run have their workers stopped
// at the same moment (a rolling restart that takes several hosts at a
// time) in the middle of a long chunk. The ranks' vote names one of them
// and each rank says whether its own node was stopping; the chunk ends
// there for both, at a checkpoint, both workers exit cleanly, and the run
// moves to the two spares at that step in one recovery naming both,
// losing no step and counting no restart.
func TestTwoNodesStopAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, l, _ := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3", "node-4")
	const chunk = 10_000_000
	s := spec.RunSpec{Name: "stop-two", Nodes: 2, Steps: chunk, ChunkSteps: chunk, MaxRestarts: 1}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	first := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the first chunk under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 200
	})
	held := first.Nodes
	signalled := time.Now()
	procs := make([]*dev.Proc, len(held))
	for i, id := range held {
		procs[i] = sigterm(t, l, id)
	}
	for i, id := range held {
		if err := exited(ctx, t, id, procs[i]); err != nil {
			t.Errorf("%s exited with %v, want a clean exit", id, err)
		}
	}
	exited := time.Since(signalled)
	if exited >= workers.DefaultStopGrace {
		t.Errorf("the workers took %v to exit, their whole stop grace: the chunk did not end early", exited)
	}
	st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the run training on the spares", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && len(st.Recoveries) > 0 && !slices.ContainsFunc(st.Nodes, func(n string) bool { return slices.Contains(held, n) }) &&
			live.Step > st.Recoveries[len(st.Recoveries)-1].ResumeStep
	})
	for _, rec := range st.Recoveries {
		if !rec.Stopped || rec.LostSteps != 0 || rec.ResumeStep < 200 {
			t.Errorf("recovery %+v; want a stop, no step lost, past step 200", rec)
		}
	}
	rec := st.Recoveries[0]
	if len(st.Recoveries) != 1 || !slices.Equal(rec.FailedNodes, held) || st.LastCkpt == nil || st.LastCkpt.Step < rec.ResumeStep ||
		!strings.Contains(rec.Reason, fmt.Sprintf("the workers of nodes %s stopped", strings.Join(held, ", "))) {
		t.Errorf("recoveries %+v, last checkpoint %+v; want one naming both stopped nodes, from the checkpoint where the chunk ended",
			st.Recoveries, st.LastCkpt)
	}
	t.Logf("%v stopped at once: both exited %v after the signal; the chunk ended at step %d; recoveries %d, the run on %v",
		held, exited.Round(time.Millisecond), rec.ResumeStep, len(st.Recoveries), st.Nodes)
	cancelAndAwait(ctx, t, c, run)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_stopped_two.json")
}

// TestExternalStopPastTheGrace: an external job that checkpoints on its
// own schedule (not through should_checkpoint(): the run's request goes
// unheard) and whose next checkpoint is further off than its node
// worker's stop grace (1 s here) cannot stop at one: the stopping worker
// cancels its part of the world when the grace ends, and the run
// relaunches from the last checkpoint on the spare, losing the steps
// since — but, the node having been said to stop, counting no restart
// (Recovery.Stopped).
func TestExternalStopPastTheGrace(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job stop e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptClusterWith(ctx, t, dir, nil, []string{"--stop-grace", "1s"}, "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "ext-stop-late", Nodes: 2, Steps: 600, CheckpointEvery: 200, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_OWN_SCHEDULE": "1"}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the world past its first checkpoint", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return st.LastCkpt != nil && live != nil && live.Step >= 210
	})
	node2 := sigterm(t, l, "node-2")
	st := awaitRun(ctx, t, run, l.LogDir)
	_ = exited(ctx, t, "node-2", node2) // (cleanly or not: its grace ended the world)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 1 {
		t.Fatalf("final status %s at step %d, recoveries %+v: want completed after one recovery", st.Phase, st.Step, st.Recoveries)
	}
	rec := st.Recoveries[0]
	if !slices.Equal(rec.FailedNodes, []string{"node-2"}) || !slices.Equal(rec.Replacement, []string{"node-3"}) || !rec.Stopped ||
		rec.ResumeStep != 200 || !strings.Contains(rec.Reason, "no restart counted") {
		t.Fatalf("recovery %+v; want node-2 replaced by node-3 from the checkpoint at 200, as a stop (no restart counted)", rec)
	}
	t.Logf("node-2 stopped before a checkpoint: the world relaunched on node-3 from step %d (%d steps lost), no restart counted",
		rec.ResumeStep, rec.LostSteps)
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_stop_late.json")
}

// TestExternalStopAtARequestedCheckpoint: a stop like the one above (a
// 5 s grace here, the next periodic checkpoint some 8 s off) of a job
// that asks should_checkpoint() every step loses nothing: told that
// node-2 stops, the run asks the world for a checkpoint, which comes
// within the grace, and moves the world there to the spare — no
// recovery, no step lost.
func TestExternalStopAtARequestedCheckpoint(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job stop e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptClusterWith(ctx, t, dir, nil, []string{"--stop-grace", "5s"}, "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "ext-stop-asked", Nodes: 2, Steps: 700, CheckpointEvery: 600, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the world under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step >= 100
	})
	signalled := time.Now()
	node2 := sigterm(t, l, "node-2")
	if err := exited(ctx, t, "node-2", node2); err != nil {
		t.Errorf("node-2 exited with %v, want a clean exit", err)
	}
	exitedAfter := time.Since(signalled)
	st := awaitRun(ctx, t, run, l.LogDir)
	asked := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 || len(st.Rescalings) != 1 ||
		!slices.Equal(st.Rescalings[0].Removed, []string{"node-2"}) || !slices.Equal(st.Rescalings[0].Added, []string{"node-3"}) ||
		!slices.Equal(asked, []int64{st.Rescalings[0].AtStep}) || st.Rescalings[0].AtStep >= s.CheckpointEvery {
		t.Fatalf("final status %s at step %d, recoveries %+v, node changes %+v, checkpoints asked %v: want node-2 left for node-3 at the requested checkpoint, no recovery",
			st.Phase, st.Step, st.Recoveries, st.Rescalings, asked)
	}
	t.Logf("node-2 stopped (5 s grace) %.2f s after the signal, before the first periodic checkpoint: the world moved to node-3 at the requested step %d, no step lost",
		exitedAfter.Seconds(), st.Rescalings[0].AtStep)
}

// sigterm stops the named worker process as a supervisor does.
func sigterm(t *testing.T, l *dev.Launcher, name string) *dev.Proc {
	t.Helper()
	p := l.Proc(name)
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return p
}

// exited waits for the named worker process p to exit and returns how.
func exited(ctx context.Context, t *testing.T, name string, p *dev.Proc) error {
	t.Helper()
	select {
	case <-p.Done():
		return p.Err()
	case <-ctx.Done():
		t.Fatalf("%s did not exit", name)
		return nil
	}
}

// TestStoppedNodeStaysWithItsPausedRun: the worker of a node a paused run
// holds is stopped (SIGTERM) and started again. The node stays the run's
// across the restart — another run waits, it does not take it (before,
// the stop freed it, and the run found it gone when it resumed: a run
// waiting for its green window then trained after it) — and the resumed
// run trains on both its nodes again and completes. Its Cluster history
// is the replay test's cluster_stop_keeps_holder.json.
func TestStoppedNodeStaysWithItsPausedRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	cli := cliAt(ctx, t, addr, l.LogDir)
	s := spec.RunSpec{Name: "held", Nodes: 2, Steps: 3000, ChunkSteps: 100}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "training under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
		return st.Step >= 100 && live != nil
	})
	cli("pause", s.Name, "--wait", "60s")
	node2 := l.Proc("node-2")
	gone := registryRecord(ctx, t, c, "node-2").Node.Incarnation
	if err := syscall.Kill(node2.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-node2.Done()
	if r := registryRecord(ctx, t, c, "node-2"); !r.Failed || r.Run != run.GetID() {
		t.Fatalf("node-2 after its worker stopped: failed %v, run %q; want failed, still the paused run's", r.Failed, r.Run)
	}
	if _, err := l.Start("node-2-again", "worker", "node", "--id", "node-2", "--address", addr,
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	for r := registryRecord(ctx, t, c, "node-2"); r.Failed || r.Node.Incarnation == gone; r = registryRecord(ctx, t, c, "node-2") {
		select {
		case <-ctx.Done():
			t.Fatalf("node-2's worker never registered again: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r := registryRecord(ctx, t, c, "node-2"); r.Run != run.GetID() {
		t.Fatalf("node-2 registered again, held by %q; want the paused run's", r.Run)
	}
	other := startRun(ctx, t, c, workflows.RunInput{Spec: spec.RunSpec{Name: "other", Nodes: 1, Steps: 100, NodeWait: spec.Duration(time.Minute)}.WithDefaults()})
	untilStatus(ctx, t, c, other.GetID(), l.LogDir, "the other run waits", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.HasPrefix(st.Detail, "waiting for 1 free node(s)")
	})
	cli("resume", s.Name)
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || !slices.Equal(st.Nodes, []string{"node-1", "node-2"}) {
		t.Errorf("the paused run ended %s at step %d on %v; want completed on node-1 and node-2", st.Phase, st.Step, st.Nodes)
	}
	if st := awaitRun(ctx, t, other, l.LogDir); st.Phase != spec.PhaseCompleted {
		t.Errorf("the other run ended %s: %s", st.Phase, st.Error)
	}
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_stop_keeps_holder.json")
}
