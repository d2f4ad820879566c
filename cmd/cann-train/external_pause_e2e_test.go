package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// pauseScript is a tiny training script on the Python helper alone (no
// torch): a weight that decays every step, checkpointed by rank 0 and
// restored on relaunch, a line of output per step. With CANN_E2E_CRASH_AT
// set, rank 1 of a fresh start exits 3 at that step (every rank with
// CANN_E2E_CRASH_ALL: the script has no collective to stop rank 0 as a
// real job's would). With CANN_E2E_OWN_SCHEDULE set it checkpoints every
// checkpoint_every steps by itself, not through should_checkpoint(): the
// run's checkpoint requests go unheard. With CANN_E2E_START_GATE set to a
// path, each rank writes PATH.<rank> and then waits for PATH to exist
// before its first step (a job still starting: importing, loading data).
const pauseScript = `import os, sys, time
import cann_train as ct

total, start = ct.total_steps(), ct.restored_step()
path = os.path.join(ct.checkpoint_dir(), "state.txt")
w = 1.0
if start:
    with open(path) as f:
        step, w = f.read().split()
    assert int(step) == start, (step, start)
    w = float(w)
print("rank %d of %d from step %d" % (ct.rank(), ct.world_size(), start), flush=True)
gate = os.environ.get("CANN_E2E_START_GATE")
if gate:
    open("%s.%d" % (gate, ct.rank()), "w").close()
    while not os.path.exists(gate):
        time.sleep(0.01)
rdv = os.environ.get("CANN_E2E_RENDEZVOUS")
if rdv:
    # Every rank of this launch (its MASTER_PORT) waits for the others,
    # as a real job's rendezvous does.
    mark = "%s.%s.%%d" % (rdv, os.environ["MASTER_PORT"])
    open(mark % ct.rank(), "w").close()
    while not all(os.path.exists(mark % r) for r in range(ct.world_size())):
        time.sleep(0.01)
for step in range(start + 1, total + 1):
    time.sleep(0.02)
    w *= 0.99
    print("rank %d step %d" % (ct.rank(), step), flush=True)
    if start == 0 and (ct.rank() == 1 or os.environ.get("CANN_E2E_CRASH_ALL")) and step == int(os.environ.get("CANN_E2E_CRASH_AT", "0")):
        print("rank %d: simulated crash" % ct.rank(), file=sys.stderr, flush=True)
        sys.exit(3)
    ct.report(step, loss=w)
    due = step % ct._env_int("CANN_TRAIN_CHECKPOINT_EVERY", 0) == 0 if os.environ.get("CANN_E2E_OWN_SCHEDULE") else ct.should_checkpoint(step)
    if due and ct.rank() == 0:
        with open(path, "w") as f:
            f.write("%d %r" % (step, w))
        ct.saved(step)
`

// TestExternalPauseResume runs a helper-only Python script on two node
// workers under the embedded server: `cann-train status` shows every
// rank's last log lines while it runs; `cann-train pause` stops the world
// after its next checkpoint upload and holds (no process left running);
// `cann-train resume` relaunches it from that checkpoint on the same
// nodes, no restart counted, and it completes. Its history is the replay
// test's trainingrun_external_metered.json
// (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata): the nodes' meters
// read at launches and checkpoints (none here: the energy is modelled);
// trainingrun_external_pause.json was recorded before that.
func TestExternalPauseResume(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job pause/resume e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")

	s := spec.RunSpec{Name: "ext-pause", Nodes: 2, Steps: 300, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_MARK": dir}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append(args, "--address", srv.FrontendAddr()))
		if err := root.ExecuteContext(ctx); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("cann-train %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	// until polls the run until ok says so.
	until := func(what string, ok func(st spec.RunStatus, live *spec.ChunkProgress, logs []spec.NodeLogs) bool) {
		t.Helper()
		for {
			st, live, logs, closed, err := readLive(ctx, c, run.GetID())
			if closed {
				dumpLogs(t, l.LogDir)
				t.Fatalf("run closed while waiting for %s: %+v %v", what, st, err)
			}
			if err == nil && ok(st, live, logs) {
				return
			}
			select {
			case <-ctx.Done():
				dumpLogs(t, l.LogDir)
				t.Fatalf("no %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// The log tail, live: both nodes' ranks with their step lines.
	until("both ranks' log tails", func(_ spec.RunStatus, _ *spec.ChunkProgress, logs []spec.NodeLogs) bool {
		if len(logs) != 2 {
			return false
		}
		for i, n := range logs {
			if n.NodeRank != i || len(n.Procs) != 1 || len(n.Procs[0].Lines) == 0 ||
				!strings.HasPrefix(n.Procs[0].Lines[len(n.Procs[0].Lines)-1], "rank ") {
				return false
			}
		}
		return true
	})
	text := cli("status", s.Name)
	for _, want := range []string{"logs         last 20 lines per process", "  rank-0 on node-1: ", "/rank-0.log\n", "  rank-1 on node-2: ", "/rank-1.log\n",
		"in the run's bucket under runs/" + s.Name + "/logs/run_" + s.Name + "_g1_e1/ once the launch ends", "    | rank 1 "} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
	var pausedAt int64
	until("step 60", func(_ spec.RunStatus, live *spec.ChunkProgress, _ []spec.NodeLogs) bool {
		if live != nil {
			pausedAt = live.Step
		}
		return pausedAt >= 60
	})

	if out := cli("pause", s.Name, "--wait", "60s"); !strings.Contains(out, "paused at step") {
		t.Fatalf("pause: %q", out)
	}
	var held Summary
	if err := json.Unmarshal([]byte(cli("status", s.Name, "-o", "json")), &held); err != nil {
		t.Fatal(err)
	}
	// Held at the first checkpoint uploaded after the pause: a periodic
	// one, or the one the pause asked for.
	asked := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if held.Status != spec.PhasePaused || held.Steps%50 != 0 && !slices.Contains(asked, held.Steps) || held.Steps <= pausedAt || held.Steps >= s.Steps ||
		!strings.HasSuffix(held.Checkpoints.LastURL, "/manifest.json") || len(held.Recoveries) != 0 {
		t.Fatalf("after pause (asked at step ≥ %d): %+v", pausedAt, held)
	}
	if len(held.Logs) != 0 {
		t.Errorf("log tails while paused: %+v", held.Logs)
	}
	// The world stops: no rank outlives the pause for long (the node sees
	// the cancellation at its next heartbeat, then SIGTERM).
	awaitNoProcesses(t, "CANN_E2E_MARK="+dir, "while paused")
	cli("resume", s.Name)
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run after resume: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || st.PauseRequested || len(st.Recoveries) != 0 {
		t.Fatalf("final status %s at step %d (pause requested %v, recoveries %d)", st.Phase, st.Step, st.PauseRequested, len(st.Recoveries))
	}
	if st.Loss <= 0 || st.Loss >= st.InitialLoss {
		t.Errorf("loss %.4f → %.4f", st.InitialLoss, st.Loss)
	}
	// Rank 0's reports: the first launch from step 1, the second from the
	// held checkpoint on (the restored state checked by the script).
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 2 || len(reps[0]) == 0 || len(reps[1]) == 0 {
		t.Fatalf("rank-0 report files: %d launches", len(reps))
	}
	if reps[0][0].Step != 1 || reps[1][0].Step != held.Steps+1 || reps[1][len(reps[1])-1].Step != s.Steps {
		t.Errorf("launch 1 from step %d, launch 2 %d..%d; want 1, then %d..%d",
			reps[0][0].Step, reps[1][0].Step, reps[1][len(reps[1])-1].Step, held.Steps+1, s.Steps)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_metered.json")
}

// TestExternalPauseAtARequestedCheckpoint: a job whose next periodic
// checkpoint is hundreds of steps off is paused within about a second:
// the run asks the world for a checkpoint (node-1 picks a step about a
// second ahead of its rank 0, node-2 is told it), the script's
// should_checkpoint() says yes there, and the run holds at that step;
// the resume relaunches the world from it, and a cancel, asking again,
// ends the run cancelled at the next requested checkpoint. The pause is
// asked, then waited for with pause --wait, which asks no second pause.
func TestExternalPauseAtARequestedCheckpoint(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job checkpoint request e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-asked", Nodes: 2, Steps: 600, CheckpointEvery: 500, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	var seen int64
	for seen < 60 {
		_, live, _, closed, err := readLive(ctx, c, run.GetID())
		if closed || ctx.Err() != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run closed or timed out before step 60: %v", err)
		}
		if live != nil {
			seen = live.Step
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli := cliRun(ctx, srv.FrontendAddr())
	t0 := time.Now()
	// A pause, then a wait for it: the wait asks no second pause (which
	// would stop the world at once, past its last checkpoint).
	first, _, err := cli("pause", s.Name)
	if err != nil || !strings.Contains(first, "pause requested at step ") {
		t.Fatalf("pause: %v %q", err, first)
	}
	out, _, err := cli("pause", s.Name, "--wait", "60s")
	took := time.Since(t0)
	t.Logf("pause: %q, then pause --wait: %q", first, out)
	if err != nil || !strings.Contains(out, "paused at step") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("pause: %v %q", err, out)
	}
	st := queryRun(ctx, t, c, run.GetID())
	asked1 := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	asked2 := requestedSteps(t, filepath.Join(dir, "work", "node-2"), s.Name)
	t.Logf("pause asked at step ≥ %d: held at step %d after %.2f s (periodic checkpoints every %d)", seen, st.Step, took.Seconds(), s.CheckpointEvery)
	if st.Phase != spec.PhasePaused || st.LastCkpt == nil || st.LastCkpt.Step != st.Step || st.Step <= seen || st.Step >= s.CheckpointEvery ||
		!slices.Equal(asked1, []int64{st.Step}) || !slices.Equal(asked2, []int64{st.Step}) {
		dumpLogs(t, l.LogDir)
		t.Fatalf("paused %s at step %d (checkpoint %+v); requests node-1 %v, node-2 %v: want held at the requested step past %d, before %d",
			st.Phase, st.Step, st.LastCkpt, asked1, asked2, seen, s.CheckpointEvery)
	}
	cli("resume", s.Name)
	// The relaunched world's rank 0 reports (the stopped world's last
	// heartbeats may still be pending on the server).
	for {
		reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
		if len(reps) == 2 && len(reps[1]) > 0 && reps[1][len(reps[1])-1].Step >= st.Step+20 {
			break
		}
		select {
		case <-ctx.Done():
			dumpLogs(t, l.LogDir)
			t.Fatalf("the relaunched world never reached step %d", st.Step+20)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A cancel asks for a checkpoint too, and the run ends cancelled at
	// it: nothing trained is lost.
	t0 = time.Now()
	out, _, err = cli("cancel", s.Name, "--wait", "60s")
	took = time.Since(t0)
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("cancel: %v %q", err, out)
	}
	final := queryRun(ctx, t, c, run.GetID())
	asked1 = requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	t.Logf("cancelled: ended at step %d after %.2f s; steps asked of the two worlds %v", final.Step, took.Seconds(), asked1)
	if final.Phase != spec.PhaseCancelled || final.LastCkpt == nil || final.LastCkpt.Step != final.Step || len(final.Recoveries) != 0 ||
		len(asked1) != 2 || !slices.Contains(asked1, final.Step) || final.Step <= st.Step+20 || final.Step >= s.CheckpointEvery ||
		final.Error != fmt.Sprintf("cancelled at step %d; last checkpoint at step %d", final.Step, final.Step) {
		dumpLogs(t, l.LogDir)
		t.Fatalf("after cancel: %s at step %d (checkpoint %+v, %q), requests %v: want cancelled at the requested checkpoint",
			final.Phase, final.Step, final.LastCkpt, final.Error, asked1)
	}
	awaitNoProcesses(t, "CANN_TRAIN_CHECKPOINT_DIR="+filepath.Join(dir, "work"), "after the cancel")
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 2 || len(reps[1]) == 0 || reps[1][0].Step != st.Step+1 {
		t.Errorf("rank-0 launches %d; want 2, the second from step %d", len(reps), st.Step+1)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_cancelling.json")
}

// TestExternalPauseWhileStarting: a pause that comes while the job's
// processes are still starting (they wait for a gate file before their
// first step, as a real job imports and loads data) stops the world at
// once: its first node says they have reported no step, so nothing is
// lost — before, the run waited for the job's next periodic checkpoint,
// which a job that never gets going never takes. The resume relaunches
// it from the start, and it completes.
func TestExternalPauseWhileStarting(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job pause e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	gate := filepath.Join(dir, "gate")
	s := spec.RunSpec{Name: "ext-starting", Nodes: 2, Steps: 100, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_START_GATE": gate}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for _, rank := range []string{".0", ".1"} {
		for _, err := os.Stat(gate + rank); err != nil; _, err = os.Stat(gate + rank) {
			select {
			case <-ctx.Done():
				dumpLogs(t, l.LogDir)
				t.Fatalf("rank %s never started", rank[1:])
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	cli := cliRun(ctx, srv.FrontendAddr())
	t0 := time.Now()
	out, _, err := cli("pause", s.Name, "--wait", "60s")
	took := time.Since(t0)
	if err != nil || !strings.Contains(out, "paused at step 0/") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("pause: %v %q", err, out)
	}
	awaitNoProcesses(t, "CANN_E2E_START_GATE="+gate, "while paused")
	t.Logf("paused while the job was starting: held %.2f s after the pause, at step 0", took.Seconds())
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cli("resume", s.Name)
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 {
		t.Fatalf("final status %s at step %d, recoveries %+v: want completed, no recovery", st.Phase, st.Step, st.Recoveries)
	}
	if asked := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name); len(asked) != 0 {
		t.Errorf("checkpoints requested %v; want none (the world was stopped, not asked)", asked)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_unreported.json")
}

// requestedSteps are the checkpoint steps the run asked of the worlds of
// run on the node whose work directory is nodeWork (its request files).
func requestedSteps(t *testing.T, nodeWork, run string) []int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(nodeWork, "runs", run, "worlds", "*", "checkpoint.request"))
	var out []int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		step, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, step)
	}
	return out
}

// startScriptCluster starts the embedded server, the control worker in
// this process and node-worker processes (work directories and checkpoint
// bucket under dir), and writes pauseScript to dir/train.py.
func startScriptCluster(ctx context.Context, t *testing.T, dir string, nodes ...string) (client.Client, *dev.Launcher, *dev.Server) {
	t.Helper()
	return startScriptClusterWith(ctx, t, dir, nil, nil, nodes...)
}

// startScriptClusterWith is startScriptCluster with env added to the node
// workers' environment and args to their command line.
func startScriptClusterWith(ctx context.Context, t *testing.T, dir string, env, args []string, nodes ...string) (client.Client, *dev.Launcher, *dev.Server) {
	t.Helper()
	return startScriptClusterOn(ctx, t, dir, dev.ServerOptions{}, env, args, nodes...)
}

// startScriptClusterOn is startScriptClusterWith on a server started with
// opts (search attributes added).
func startScriptClusterOn(ctx context.Context, t *testing.T, dir string, opts dev.ServerOptions, env, args []string,
	nodes ...string) (client.Client, *dev.Launcher, *dev.Server) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(pauseScript), 0o644); err != nil {
		t.Fatal(err)
	}
	opts.SearchAttributes = workers.SearchAttributes()
	srv, err := dev.StartServer(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	recordAllHistories(t, srv)
	c := controlInProcess(ctx, t, srv)
	l := newLauncher(dir, env...)
	t.Cleanup(func() { _ = l.StopAll(5 * time.Second) })
	for _, id := range nodes {
		a := append([]string{"worker", "node", "--id", id, "--address", srv.FrontendAddr(),
			"--checkpoint-url", "file://" + filepath.Join(dir, "ckpt"), "--work-dir", filepath.Join(dir, "work", id),
			"--log-level", "info"}, args...)
		if _, err := l.Start(id, a...); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, len(nodes))
	return c, l, srv
}

// TestExternalDrainMovesTheWorld drains a node of a running external job
// with `cann-train nodes drain`: the world stops after its next
// checkpoint upload and relaunches from it with the free node in the
// drained one's rank, no restart counted, and completes. Its history is
// the replay test's trainingrun_external_drain.json.
func TestExternalDrainMovesTheWorld(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job drain e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "ext-drain", Nodes: 2, Steps: 300, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for {
		_, live, _, closed, err := readLive(ctx, c, run.GetID())
		if closed || ctx.Err() != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run closed or timed out before step 60: %v", err)
		}
		if live != nil && live.Step >= 60 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"nodes", "drain", "node-2", "--reason", "swap the disk", "--address", srv.FrontendAddr()})
	if err := root.ExecuteContext(ctx); err != nil || !strings.Contains(out.String(), "ext-drain moves off it") {
		t.Fatalf("drain: %v %q %s", err, out.String(), errb.String())
	}
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run after the drain: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 0 {
		t.Fatalf("final status %s at step %d (recoveries %d)", st.Phase, st.Step, len(st.Recoveries))
	}
	asked := requestedSteps(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(st.Rescalings) != 1 || !slices.Equal(st.Rescalings[0].Removed, []string{"node-2"}) ||
		!slices.Equal(st.Rescalings[0].Added, []string{"node-3"}) || st.Rescalings[0].AtStep <= 60 ||
		st.Rescalings[0].AtStep%50 != 0 && !slices.Contains(asked, st.Rescalings[0].AtStep) {
		t.Errorf("node changes %+v; want node-2 left for node-3 at a checkpoint after step 60 (a periodic one or the one asked for: %v)", st.Rescalings, asked)
	}
	if !slices.Equal(st.Nodes, []string{"node-1", "node-3"}) {
		t.Errorf("final nodes %v", st.Nodes)
	}
	// node-1's rank-0 reports: the second launch starts after the
	// checkpoint the stop waited for.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), s.Name)
	if len(reps) != 2 || len(reps[1]) == 0 || reps[1][0].Step != st.Rescalings[0].AtStep+1 {
		t.Errorf("rank-0 launches %d; want 2, the second from step %d", len(reps), st.Rescalings[0].AtStep+1)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_drain.json")
}

// TestExternalCrashCountsLostWork: the script's first launch crashes at
// step 80; the run relaunches the world from the checkpoint at
// 50 and completes, and what the failed launch trained after that
// checkpoint is a lost segment (its energy counted). Its history is the
// replay test's trainingrun_external_lost_grace.json (with the 2 s grace
// after the ranks' exits; trainingrun_external_lost.json is from before).
func TestExternalCrashCountsLostWork(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job crash e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "ext-lost", Nodes: 2, Steps: 200, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir,
			Env: map[string]string{"CANN_E2E_CRASH_AT": "80", "CANN_E2E_CRASH_ALL": "1"}}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 1 || st.Recoveries[0].ResumeStep != 50 {
		t.Fatalf("final status %s at step %d, recoveries %+v: want completed after one relaunch from 50", st.Phase, st.Step, st.Recoveries)
	}
	var lost []spec.Segment
	for _, seg := range st.Segments {
		if seg.Lost {
			lost = append(lost, seg)
		}
	}
	if len(lost) != 1 || lost[0].FromStep != 50 || lost[0].ToStep < 50 || lost[0].ToStep > 80 || lost[0].Nodes != 2 || lost[0].WallSeconds <= 0 {
		t.Errorf("lost segments %+v: want the first launch's steps after its checkpoint at 50, up to the crash at 80", lost)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_lost_grace.json")
}
