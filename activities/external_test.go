package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
)

func externalNode(t *testing.T, id, ckptURL string) *Node {
	t.Helper()
	n := &Node{ID: id, Logger: zap.NewNop(), WorkDir: filepath.Join(t.TempDir(), id), DefaultCheckpointURL: ckptURL}
	t.Cleanup(func() { n.Close() })
	return n
}

func externalInput(name, workdir string, nodes int, argv ...string) spec.ExternalInput {
	s := spec.RunSpec{Name: name, Nodes: nodes, CheckpointEvery: 2,
		External: &spec.ExternalJob{Entrypoint: argv, ProcsPerNode: 2, Workdir: workdir, StopGrace: spec.Duration(300 * time.Millisecond)}}.WithDefaults()
	var m spec.Membership
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		m.Nodes = append(m.Nodes, spec.Node{ID: id, TaskQueue: spec.NodeTaskQueue(id), CommAddr: "127.0.0.1:1"})
	}
	m.Generation = 1
	return spec.ExternalInput{RunID: "run/" + name, Spec: s, Membership: m, Session: "run/" + name + "/g1/e1", MasterPort: 29999}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestRunExternalStorageDown: a world whose bucket does not serve the
// checkpoint to restore (an S3 endpoint nothing listens on) fails as the
// built-in model's chunks do — CheckpointUnreachable, naming the node, the
// step and the bucket: the run holds for its storage — before any
// process starts.
func TestRunExternalStorageDown(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	work := t.TempDir()
	n := externalNode(t, "n1", "mem://")
	in := externalInput("down", work, 1, "sh", "-c", "touch started")
	in.Restore = &spec.CheckpointRef{URL: "s3://ckpt?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1",
		Run: "down", Step: 4, Key: "runs/down/ckpt/000000000004/manifest.json"}
	_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
	wantLoadError(t, err, spec.ErrTypeCheckpointUnreachable, "node n1 cannot read the checkpoint at step 4 from s3://ckpt")
	if _, err := os.Stat(filepath.Join(work, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the job started (%v); want no process before its checkpoint is restored", err)
	}
}

// TestRunExternalUnwritableWorkDir: a node whose work directory cannot
// be made (here a file stands where it goes) fails the world as NodeUnfit,
// naming the node and the directory — retryable: the run replaces the
// node, where BadJob failed the run — while a program this host lacks
// stays BadJob (the job's fault unless another node launched it).
func TestRunExternalUnwritableWorkDir(t *testing.T) {
	work := t.TempDir()
	hooks := externalHooks{progress: func(spec.ChunkProgress) {}}
	n := externalNode(t, "n1", "mem://")
	if err := os.WriteFile(n.WorkDir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := n.runExternal(context.Background(), externalInput("nodir", work, 1, "sh", "-c", "touch started"), hooks)
	wantLoadError(t, err, spec.ErrTypeNodeUnfit, "node n1: work directory:", n.WorkDir)
	if _, err := os.Stat(filepath.Join(work, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job started (%v)", err)
	}

	m := externalNode(t, "n1", "mem://") // (its own work directory)
	_, err = m.runExternal(context.Background(), externalInput("noprog", work, 1, filepath.Join(work, "no-such-program")), hooks)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBadJob || !ae.NonRetryable() || !strings.Contains(ae.Message(), "no-such-program") {
		t.Fatalf("a program the host lacks: %v; want a non-retryable BadJob naming it", err)
	}
}

// TestRunExternalMissingCheckpoint: a world told to restore a checkpoint
// its node's bucket does not hold (each node its own mem://) fails as the
// built-in model's chunks do — CheckpointNotHere (the run replaces the
// node) while the miss is younger than BucketGrace, then BucketNotShared
// (the run fails, saying every node must reach one bucket) — before any
// process starts.
func TestRunExternalMissingCheckpoint(t *testing.T) {
	work := t.TempDir()
	n := externalNode(t, "n1", "mem://")
	n.BucketGrace = 50 * time.Millisecond
	in := externalInput("elsewhere", work, 1, "sh", "-c", "touch started")
	in.Restore = &spec.CheckpointRef{URL: "mem://", Run: "elsewhere", Step: 4, Key: "runs/elsewhere/ckpt/000000000004/manifest.json"}
	hooks := externalHooks{progress: func(spec.ChunkProgress) {}}
	_, err := n.runExternal(context.Background(), in, hooks)
	wantLoadError(t, err, spec.ErrTypeCheckpointNotHere, "node n1 does not find the run's checkpoint at step 4", "has found none of the run's checkpoints there")
	time.Sleep(60 * time.Millisecond) // past the grace
	_, err = n.runExternal(context.Background(), in, hooks)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBucketNotShared || !ae.NonRetryable() {
		t.Fatalf("past the grace: want a non-retryable BucketNotShared, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rank started without its checkpoint: %v", err)
	}
}

// TestRunExternalCancelLeavesNoOrphans kills the activity's context while
// two ranks run (each with a grandchild, each ignoring SIGTERM): every
// process must be gone when the activity returns. The ranks saw the
// torchrun contract and the helper's variables.
func TestRunExternalCancelLeavesNoOrphans(t *testing.T) {
	work := t.TempDir()
	script := `trap '' TERM
sleep 1000 &
env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|MASTER_PORT|CANN_TRAIN_[A-Z_]*|PYTHONPATH)=' | sort > env-$RANK.txt
echo $$ $! > pids-$RANK.tmp && mv pids-$RANK.tmp pids-$RANK
echo "rank $RANK up"
while true; do sleep 1; done`
	n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "ckpt"))
	in := externalInput("cancel-me", work, 1, "sh", "-c", script)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := n.runExternal(ctx, in, externalHooks{progress: func(spec.ChunkProgress) {}})
		done <- err
	}()
	var pids []int
	for end := time.Now().Add(20 * time.Second); len(pids) < 4; {
		pids = pids[:0]
		for r := range 2 {
			b, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("pids-%d", r)))
			for _, f := range strings.Fields(string(b)) {
				p, _ := strconv.Atoi(f)
				pids = append(pids, p)
			}
		}
		if time.Now().After(end) {
			t.Fatalf("ranks did not start: %v", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("runExternal: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("runExternal did not return after its context was cancelled")
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d survived the cancelled activity (all: %v)", p, pids)
		}
	}
	env, _ := os.ReadFile(filepath.Join(work, "env-1.txt"))
	for _, want := range []string{"RANK=1\n", "LOCAL_RANK=1\n", "WORLD_SIZE=2\n", "MASTER_PORT=29999\n",
		"CANN_TRAIN_CHECKPOINT_EVERY=2\n", "CANN_TRAIN_RESTORED_STEP=0\n", "CANN_TRAIN_RANK=1\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("rank 1 environment lacks %q:\n%s", want, env)
		}
	}
	if !strings.Contains(string(env), filepath.Join(n.WorkDir, "lib")) {
		t.Errorf("PYTHONPATH lacks the helper:\n%s", env)
	}
	if _, err := os.Stat(filepath.Join(n.WorkDir, "lib", "cann_train.py")); err != nil {
		t.Errorf("helper not written: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(n.WorkDir, "runs", "cancel-me", "worlds", "*", "rank-0.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "rank 0 up") {
		t.Errorf("rank-0.log: %q", b)
	}
}

// TestRunExternalRankExitIsTyped: a rank exiting 7 fails the activity with
// a RankExited error naming it, its status, its last step and its log.
func TestRunExternalRankExitIsTyped(t *testing.T) {
	// Rank 1 crashes only once rank 0 has its TERM trap (the file says
	// so): a crash before that would kill rank 0 before it could log.
	script := `if [ "$RANK" = 1 ]; then
  while [ ! -e rank0-trapped ]; do sleep 0.01; done
  echo '{"event":"report","step":3,"loss":1.5}' >> "$CANN_TRAIN_REPORT_FILE"
  echo "RuntimeError: CUDA is not a thing here" >&2; exit 7
fi
trap 'echo got TERM; exit 0' TERM
touch rank0-trapped
while true; do sleep 0.05; done`
	bucket := filepath.Join(t.TempDir(), "ckpt")
	n := externalNode(t, "n1", "file://"+bucket)
	in := externalInput("crash", t.TempDir(), 1, "sh", "-c", script)
	_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
	// Both processes' logs are in the run's bucket, the crashed one's
	// error among them.
	for proc, want := range map[string]string{"rank-1": "CUDA is not a thing", "rank-0": "got TERM"} {
		b, rerr := os.ReadFile(filepath.Join(bucket, filepath.FromSlash(LogKey(in.Spec.Name, in.Session, proc))))
		if rerr != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s's log in the bucket: %q, %v (want %q)", proc, b, rerr, want)
		}
	}
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeRankExited || ae.NonRetryable() {
		t.Fatalf("want a retryable %s error, got %v", spec.ErrTypeRankExited, err)
	}
	var d spec.RankExit
	if err := ae.Details(&d); err != nil {
		t.Fatal(err)
	}
	if d.Rank != 1 || d.Process != "rank-1" || d.ExitCode != 7 || d.Node != "n1" || d.Step != 3 ||
		!strings.Contains(d.LogTail, "CUDA is not a thing") || !strings.HasSuffix(d.LogFile, "rank-1.log") {
		t.Errorf("detail %+v", d)
	}
	if !strings.Contains(ae.Message(), "rank-1 on node n1 exited with status 7 at step 3") || !strings.Contains(ae.Message(), "CUDA is not a thing") {
		t.Errorf("message %q", ae.Message())
	}
	// Where the whole log is: on the node, and its copy in the bucket
	// (a file:// bucket's as a path), named by the launch's directory.
	key := LogKey(in.Spec.Name, in.Session, "rank-1")
	if d.BucketLog != key || d.NoStep || !strings.HasPrefix(d.Program, "sh = /") {
		t.Errorf("detail %+v; want bucket log %s, a step reported, program sh = …", d, key)
	}
	where := "whole log: " + d.LogFile + " on node n1; copied when the launch ends to " + filepath.Join(bucket, filepath.FromSlash(key))
	if !strings.HasSuffix(ae.Message(), "\n"+where) || !strings.Contains(key, "run_crash_g1_e1") {
		t.Errorf("message %q; want it to end with %q", ae.Message(), where)
	}
	if strings.Contains(ae.Message(), "before any step") {
		t.Errorf("message %q names no program for a rank that reported a step", ae.Message())
	}
}

// TestRunExternalStartupFailureNamesTheProgram: a rank that fails before
// any process of its node reported a step (an import error: often
// another interpreter than the one meant) says which program ran, found
// where (the node worker's PATH, the job's env PATH, or a path as given),
// and that its node saw no step (RankExit.NoStep).
func TestRunExternalStartupFailureNamesTheProgram(t *testing.T) {
	bin := t.TempDir()
	py := filepath.Join(bin, "python7")
	if err := os.WriteFile(py, []byte("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct {
		name string
		argv []string
		env  map[string]string
		want string
	}{
		{"the worker's PATH", []string{"python7", "train.py"}, nil, "before any step (it ran python7 = " + py + ", found in the node worker's PATH)"},
		{"the job's PATH", []string{"python7", "train.py"}, map[string]string{"PATH": bin}, "before any step (it ran python7 = " + py + ", found in the PATH of the job's external.env)"},
		{"a path", []string{py, "train.py"}, nil, "before any step (it ran " + py + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			os.WriteFile(filepath.Join(work, "train.py"), nil, 0o644)
			in := externalInput("nomod", work, 1, tc.argv...)
			in.Spec.External.Env = tc.env
			n := externalNode(t, "n1", "mem://")
			_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
			var ae *temporal.ApplicationError
			var d spec.RankExit
			if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeRankExited || ae.Details(&d) != nil {
				t.Fatalf("runExternal: %v; want RankExited", err)
			}
			if !d.NoStep || !strings.Contains(ae.Message(), tc.want) || !strings.Contains(ae.Message(), "No module named 'torch'") {
				t.Errorf("message %q (no step %v); want %q", ae.Message(), d.NoStep, tc.want)
			}
			// A mem:// bucket is the node worker's own memory: no copy to name.
			if d.BucketLog != "" || !strings.HasSuffix(ae.Message(), "whole log: "+d.LogFile+" on node n1") {
				t.Errorf("message %q, bucket log %q", ae.Message(), d.BucketLog)
			}
		})
	}
}

// TestRunExternalCheckpointsRestoreOnAnotherNode runs a helper-using
// script that commits a checkpoint every 2 steps; the node uploads each
// and reports it. A second launch on another node (another work
// directory) restores the last one before the script starts.
func TestRunExternalCheckpointsRestoreOnAnotherNode(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "train.py"), []byte(`
import os, sys
import cann_train as ct
start = ct.restored_step()
path = os.path.join(ct.checkpoint_dir(), "w.txt")
w = float(open(path).read()) if start else 10.0
for step in range(start + 1, start + 6):
    w *= 0.5
    ct.report(step, loss=w)
    if ct.should_checkpoint(step) and ct.rank() == 0:
        # Replaced whole: a rank still starting up may be reading the
        # restored value (a plain rewrite let it read an empty file).
        with open(path + ".tmp", "w") as f:
            f.write(repr(w))
        os.replace(path + ".tmp", path)
        assert ct.saved(step, timeout=30)
print("rank", ct.rank(), "from", start, "w", w)
`), 0o644)
	url := "file://" + filepath.Join(t.TempDir(), "bucket")
	n1 := externalNode(t, "n1", url)
	in := externalInput("resume", work, 1, py, "train.py")
	var mu sync.Mutex
	var saved []spec.CheckpointSaved
	var progress []spec.ChunkProgress
	hooks := externalHooks{
		progress: func(p spec.ChunkProgress) { mu.Lock(); progress = append(progress, p); mu.Unlock() },
		saved:    func(c spec.CheckpointSaved) error { mu.Lock(); saved = append(saved, c); mu.Unlock(); return nil },
	}
	res, err := n1.runExternal(context.Background(), in, hooks)
	if err != nil {
		t.Fatal(err)
	}
	// Steps 2 and 4 committed by the script; the directory at the clean
	// exit is the step-4 one, so no final upload.
	if len(saved) != 2 || saved[0].Ref.Step != 2 || saved[1].Ref.Step != 4 || saved[1].Session != in.Session {
		t.Fatalf("saved %+v", saved)
	}
	if res.From != 0 || res.To != 5 || res.FirstLoss != 5 || res.LastLoss != 0.3125 || res.Checkpoint == nil || res.Checkpoint.Step != 4 {
		t.Errorf("result %+v", res)
	}
	if last := progress[len(progress)-1]; last.Step != 5 || last.LastCheckpoint != 4 {
		t.Errorf("last progress %+v", last)
	}
	// Relaunch on another node from step 4: w = 10 × 0.5⁴ = 0.625.
	n2 := externalNode(t, "n2", url)
	in2 := externalInput("resume", work, 1, py, "train.py")
	in2.Membership.Nodes[0].ID = "n2"
	in2.Session = "run/resume/g2/e2"
	in2.Restore = &saved[1].Ref
	res2, err := n2.runExternal(context.Background(), in2, externalHooks{progress: func(spec.ChunkProgress) {}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.From != 4 || res2.To != 9 || res2.FirstLoss != 0.3125 {
		t.Errorf("resumed result %+v: want steps 5..9 continuing the loss curve", res2)
	}
	logs, _ := filepath.Glob(filepath.Join(n2.WorkDir, "runs", "resume", "worlds", "*", "rank-1.log"))
	if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "rank 1 from 4") {
		t.Errorf("rank 1 on the new node: %q", b)
	}

	// Asked whether it reads that checkpoint (its run found another node
	// that could not), n2 answers from its restore in that world without
	// reading it again — here its route to the bucket is cut since —, and
	// reads it (and fails) when asked about a world it did not restore.
	useStore(n2, url, deadRoute(t))
	probe := spec.ProbeReadInput{RunID: in2.RunID, Checkpoint: saved[1].Ref, Session: in2.Session}
	if err := probeRead(n2, probe); err != nil {
		t.Errorf("n2 asked about the world it restored the checkpoint in: %v", err)
	}
	probe.Session = "run/resume/g3/e3"
	wantLoadError(t, probeRead(n2, probe), spec.ErrTypeCheckpointUnreachable, "node n2 cannot read the checkpoint at step 4")
}

// TestRunExternalTellsAFailedUpload: with a bucket that refuses writes,
// every checkpoint the script commits is told to the run as failed (the
// script goes on).
func TestRunExternalTellsAFailedUpload(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "train.py"), []byte(`
import os
import cann_train as ct
for step in range(1, 5):
    ct.report(step, loss=1.0 / step)
    if ct.should_checkpoint(step) and ct.rank() == 0:
        open(os.path.join(ct.checkpoint_dir(), "w.txt"), "w").write(str(step))
        ct.saved(step, timeout=30)
`), 0o644)
	bucket := filepath.Join(t.TempDir(), "bucket")
	n := externalNode(t, "n1", "file://"+bucket)
	// The bucket opens, but its runs/ is a file: every write fails.
	if err := os.MkdirAll(bucket, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bucket, "runs"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []spec.CheckpointSaved
	in := externalInput("full", work, 1, py, "train.py")
	_, err = n.runExternal(context.Background(), in, externalHooks{
		progress: func(spec.ChunkProgress) {},
		saved:    func(c spec.CheckpointSaved) error { mu.Lock(); told = append(told, c); mu.Unlock(); return nil },
	})
	// The final upload (what the directory holds at the clean exit) fails
	// the node's activity, typed for the workflow.
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeCheckpointStorage {
		t.Errorf("run: %v; want %s", err, spec.ErrTypeCheckpointStorage)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) < 2 || told[0].Ref.Step != 2 || told[1].Ref.Step != 4 {
		t.Fatalf("told %+v; want the checkpoints at 2 and 4", told)
	}
	for _, c := range told[:2] {
		if c.Failed == "" || c.Ref.Key != "" || c.Session != in.Session {
			t.Errorf("told %+v: want a failed upload of this launch", c)
		}
	}
}

// TestRunExternalRefusesAnEmptyCheckpoint: a script that says saved(N)
// with nothing in its checkpoint directory (its files written elsewhere)
// commits nothing: through the helper, saved() raises, naming the
// directory, and the rank exits with it in its log tail; around it (the
// event written by hand), the node worker commits nothing and tells the
// run nothing — an empty checkpoint restored would have nothing to load.
func TestRunExternalRefusesAnEmptyCheckpoint(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	for _, tc := range []struct {
		name, save string
		exits      bool // the rank exits non-zero, naming the directory
	}{
		{"the helper", "ct.saved(step, timeout=30)", true},
		{"by hand", `ct._append({"event": "saved", "step": step})`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			os.WriteFile(filepath.Join(work, "train.py"), []byte(`
import os
import cann_train as ct
for step in range(1, 5):
    ct.report(step, loss=1.0 / step)
    if ct.should_checkpoint(step) and ct.rank() == 0:
        open(os.path.join(os.getcwd(), "state-%d.txt" % step), "w").write(str(step))  # not in checkpoint_dir()
        `+tc.save+`
`), 0o644)
			n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "bucket"))
			var mu sync.Mutex
			var told []spec.CheckpointSaved
			in := externalInput("empty-"+strings.ReplaceAll(tc.name, " ", "-"), work, 1, py, "train.py")
			res, err := n.runExternal(context.Background(), in, externalHooks{
				progress: func(spec.ChunkProgress) {},
				saved:    func(c spec.CheckpointSaved) error { mu.Lock(); told = append(told, c); mu.Unlock(); return nil },
			})
			mu.Lock()
			defer mu.Unlock()
			if len(told) != 0 {
				t.Errorf("told %+v; want no checkpoint committed or refused", told)
			}
			if tc.exits {
				var ae *temporal.ApplicationError
				if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeRankExited || !strings.Contains(err.Error(), "is empty: write the checkpoint's files into cann_train.checkpoint_dir()") {
					t.Errorf("run: %v; want rank 0's exit, naming the empty directory", err)
				}
				return
			}
			if err != nil || res == nil || res.Checkpoint != nil {
				t.Errorf("run: %+v, %v; want it to end without a checkpoint", res, err)
			}
		})
	}
}

// TestRunExternalAscendAndMSRun: an ascend launch writes the HCCL rank
// table its processes name in RANK_TABLE_FILE; an msrun launch runs the
// scheduler on the first node only.
func TestRunExternalAscendAndMSRun(t *testing.T) {
	work := t.TempDir()
	// (An msrun worker waits up to 10 s for the scheduler's line: once
	// every rank has exited the launch stops the scheduler, which may not
	// have run yet.)
	script := `echo "$RANK_ID $DEVICE_ID $RANK_SIZE $HCCL_CONNECT_TIMEOUT $MS_ROLE $MS_NODE_ID" > "out-$CANN_TRAIN_RANK"
[ -n "$RANK_TABLE_FILE" ] && cp "$RANK_TABLE_FILE" "table-$CANN_TRAIN_RANK.json"
if [ "$MS_ROLE" = MS_WORKER ]; then i=0; while [ ! -s out--1 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; fi
exit 0`
	in := externalInput("asc", work, 2, "sh", "-c", script)
	in.Spec.External.Launcher = spec.LauncherAscend
	in.Membership.Nodes[0].CommAddr = "10.1.0.1:7000"
	in.Membership.Nodes[1].CommAddr = "10.1.0.2:7000"
	in.Membership.Nodes[1].DeviceIPs = []string{"192.168.1.8", "192.168.1.9"}
	in.Rank = 1
	n := externalNode(t, "n2", "file://"+filepath.Join(t.TempDir(), "ckpt"))
	if _, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}}); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(work, "out-3"))
	if got := strings.TrimSpace(string(out)); got != "3 1 4 600" {
		t.Errorf("rank 3 saw %q", got)
	}
	table, _ := os.ReadFile(filepath.Join(work, "table-2.json"))
	for _, want := range []string{`"server_count": "2"`, `"server_id": "n2"`, `"device_ip": "192.168.1.9"`, `"device_ip": "10.1.0.1"`, `"rank_id": "3"`} {
		if !strings.Contains(string(table), want) {
			t.Errorf("rank table lacks %s:\n%s", want, table)
		}
	}

	in = externalInput("ms", work, 2, "sh", "-c", script)
	in.Spec.External.Launcher = spec.LauncherMSRun
	n1 := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "ckpt"))
	if _, err := n1.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}}); err != nil {
		t.Fatal(err)
	}
	sched, _ := os.ReadFile(filepath.Join(work, "out--1"))
	w1, _ := os.ReadFile(filepath.Join(work, "out-1"))
	if !strings.Contains(string(sched), "MS_SCHED") || !strings.HasSuffix(strings.TrimSpace(string(w1)), "MS_WORKER 1") {
		t.Errorf("scheduler %q, worker 1 %q", sched, w1)
	}
}

// TestRunExternalLogTail: while the processes run, the heartbeat's log
// tail holds each process's last spec.LogTailLines lines, node and
// session named.
func TestRunExternalLogTail(t *testing.T) {
	work := t.TempDir()
	script := `i=1; while [ $i -le 30 ]; do echo "rank $RANK line $i"; i=$((i+1)); done
echo "rank $RANK warning" >&2
touch ready-$RANK
while [ ! -e go ]; do sleep 0.02; done`
	n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "ckpt"))
	in := externalInput("tail-me", work, 1, "sh", "-c", script)
	tails := make(chan func() spec.NodeLogs, 1)
	done := make(chan error, 1)
	go func() {
		_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {},
			logs: func(f func() spec.NodeLogs) { tails <- f }})
		done <- err
	}()
	var tail func() spec.NodeLogs
	select {
	case tail = <-tails:
	case err := <-done:
		t.Fatalf("runExternal returned before handing over the log tail: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no log tail")
	}
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, e0 := os.Stat(filepath.Join(work, "ready-0"))
		_, e1 := os.Stat(filepath.Join(work, "ready-1"))
		if e0 == nil && e1 == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("ranks did not start")
		}
	}
	// (The output reaches the log through the node worker's pipe: the
	// lines may land just after the file the script touched.)
	var got spec.NodeLogs
	waitFor(t, "the ranks' last lines in their logs", func() bool {
		got = tail()
		for _, p := range got.Procs {
			if len(p.Lines) == 0 || !strings.HasSuffix(p.Lines[len(p.Lines)-1], " warning") {
				return false
			}
		}
		return true
	})
	if got.Node != "n1" || got.NodeRank != 0 || got.Session != in.Session || len(got.Procs) != 2 {
		t.Fatalf("tail %+v", got)
	}
	for r, p := range got.Procs {
		if p.Process != fmt.Sprintf("rank-%d", r) || p.Rank != r || len(p.Lines) != spec.LogTailLines {
			t.Fatalf("process %d: %+v", r, p)
		}
		// stdout and stderr share the log: the last line is the warning,
		// the 19 before it lines 12..30.
		if first, last := p.Lines[0], p.Lines[len(p.Lines)-1]; first != fmt.Sprintf("rank %d line 12", r) || last != fmt.Sprintf("rank %d warning", r) {
			t.Errorf("rank %d: lines %q … %q", r, first, last)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the processes did not exit")
	}
}

// TestRunExternalNamesAGoneNode: node n2's worker is gone (its collective
// listener's address refuses connections). When this node's processes
// exit because of it, the node reports PeerFailed naming n2 instead of a
// RankExited that would restart the world on n2; when n2 answers, the
// exit stays RankExited. When the processes hang instead (a collective
// waiting for n2), the watch of the neighbour nodes stops them and names
// n2 all the same.
func TestRunExternalNamesAGoneNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		n2     string // "gone", "alive", "dies" (alive, then gone while the world runs)
		blame  bool
	}{
		{"exit, n2 gone", "exit 3", "gone", true},
		{"exit, n2 alive", "exit 3", "alive", false},
		{"hang, n2 dies", "while true; do sleep 0.05; done", "dies", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "ckpt"))
			n.PeerWatch = 100 * time.Millisecond
			in := externalInput("gone", t.TempDir(), 2, "sh", "-c", tc.script)
			l, err := tcp.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			in.Membership.Nodes[0].CommAddr = "127.0.0.1:1" // this node: never probed
			in.Membership.Nodes[1].CommAddr = l.Addr()
			switch tc.n2 {
			case "gone":
				l.Close()
			case "dies":
				time.AfterFunc(300*time.Millisecond, func() { l.Close() })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = n.runExternal(ctx, in, externalHooks{progress: func(spec.ChunkProgress) {}})
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an application error", err)
			}
			if !tc.blame {
				if ae.Type() != spec.ErrTypeRankExited {
					t.Fatalf("err = %v, want RankExited", err)
				}
				return
			}
			var pf spec.PeerFailure
			if ae.Type() != spec.ErrTypePeerFailed || ae.Details(&pf) != nil || pf.Rank != 1 || !strings.Contains(ae.Message(), "node n2") {
				t.Fatalf("err = %v (detail %+v), want PeerFailed naming node rank 1 (n2)", err, pf)
			}
			// In the job's words: the node, its node_rank and its ranks,
			// not the collective engine's probe of a "peer rank".
			if msg := ae.Message(); !strings.HasPrefix(msg, "node n2 (node_rank 1 of the world's 2 nodes: ranks 2-3) is gone: ") ||
				strings.Contains(msg, "ascend:") || strings.Contains(msg, "peer rank") || strings.Contains(msg, "probe") {
				t.Errorf("message %q; want the lost node named in an external job's terms", msg)
			}
			t.Log(ae.Message())
		})
	}
}

// askedScript trains until should_checkpoint() says yes, checkpoints
// there (rank 0 commits it) and exits.
const askedScript = `
import os, sys, time
import cann_train as ct
for step in range(1, ct.total_steps() + 1):
    time.sleep(0.005)
    ct.report(step, loss=1.0 / step)
    if ct.should_checkpoint(step):
        if ct.rank() == 0:
            open(os.path.join(ct.checkpoint_dir(), "w.txt"), "w").write(str(step))
            assert ct.saved(step, timeout=30)
        print("rank", ct.rank(), "checkpoint", step, flush=True)
        sys.exit(0)
`

// TestRunExternalTakesACheckpointRequest: asked for a checkpoint
// (RequestCheckpoint, step 0: the node picks) while the world runs, the
// node writes a step ahead of its processes to their request file; both
// ranks' should_checkpoint() say yes there, rank 0 commits it and it is
// uploaded and told — with no periodic checkpoint for thousands of
// steps. A request for another world, or once the world has ended,
// asks nothing.
func TestRunExternalTakesACheckpointRequest(t *testing.T) {
	n, in, w := startScript(t, "asked", 100000, askedScript)
	at := w.past(t, 20)
	if s, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: "run/asked/g9/e9"}); s != 0 || err != nil {
		t.Errorf("request for another world: %d, %v; want 0", s, err)
	}
	step, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: in.Session, Why: "a test"})
	if err != nil || step <= at || step >= in.Spec.CheckpointEvery {
		t.Fatalf("requested step %d (%v); want one past step %d, before the periodic one", step, err, at)
	}
	res := w.end(t)
	if told := w.told(); len(told) != 1 || told[0].Ref.Step != step || told[0].Ref.Key == "" || res.Checkpoint == nil || res.Checkpoint.Step != step {
		t.Fatalf("told %+v, result %+v; want the requested step %d uploaded", told, res, step)
	}
	for rank := range 2 {
		logs, _ := filepath.Glob(filepath.Join(n.WorkDir, "runs", "asked", "worlds", "*", fmt.Sprintf("rank-%d.log", rank)))
		if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), fmt.Sprintf("rank %d checkpoint %d", rank, step)) {
			t.Errorf("rank %d's log %q; want its checkpoint at the requested step %d", rank, b, step)
		}
	}
	if s, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: in.Session}); s != 0 || err != nil {
		t.Errorf("request once the world ended: %d, %v; want 0", s, err)
	}
}

// TestRunExternalAnswersUnreported: a world whose processes have
// reported no step yet (still starting: this script waits for a go file)
// is asked for no checkpoint; a run that stops such worlds at once
// (StopUnreported) is told so (spec.StepUnreported). Once it reports, the
// same ask picks a step.
func TestRunExternalAnswersUnreported(t *testing.T) {
	n, in, w := startScript(t, "starting", 100000, strings.Replace(askedScript, "\nfor step", `
while not os.path.exists("go"):
    time.sleep(0.01)
for step`, 1))
	serving := func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.asks != nil && n.asks.session == in.Session && n.asks.running
	}
	for deadline := time.Now().Add(30 * time.Second); !serving(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the world never took asks")
		}
	}
	for _, tc := range []struct {
		stop bool
		want int64
	}{{false, 0}, {true, spec.StepUnreported}} {
		step, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: in.Session, StopUnreported: tc.stop})
		if step != tc.want || err != nil {
			t.Errorf("asked (stop unreported: %v) before any report: %d, %v; want %d", tc.stop, step, err, tc.want)
		}
	}
	if err := os.WriteFile(filepath.Join(in.Spec.External.Workdir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	at := w.past(t, 20)
	step, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: in.Session, StopUnreported: true})
	if err != nil || step <= at {
		t.Fatalf("asked once reporting: step %d (%v); want one past %d", step, err, at)
	}
	if res := w.end(t); res.Checkpoint == nil || res.Checkpoint.Step != step {
		t.Fatalf("result %+v; want the requested checkpoint at %d", res, step)
	}
}

// TestRequestCheckpointWhileSettingUp: a world admitted on the node but
// still being set up (its checkpoint restoring, its processes not yet
// started) is asked for no checkpoint; a run that stops such worlds at
// once is told it has nothing to lose. Another session's world is not
// this one.
func TestRequestCheckpointWhileSettingUp(t *testing.T) {
	n := externalNode(t, "n1", "mem://")
	_, unserve := n.serveAsks("run/a/g1/e1")
	defer unserve()
	for _, tc := range []struct {
		in   spec.CheckpointRequest
		want int64
	}{
		{spec.CheckpointRequest{RunID: "run/a", Session: "run/a/g1/e1", StopUnreported: true}, spec.StepUnreported},
		{spec.CheckpointRequest{RunID: "run/a", Session: "run/a/g1/e1"}, 0},
		{spec.CheckpointRequest{RunID: "run/a", Session: "run/a/g1/e1", Step: 40, StopUnreported: true}, 0}, // (a step to write: nothing runs to read it)
		{spec.CheckpointRequest{RunID: "run/a", Session: "run/a/g1/e0", StopUnreported: true}, 0},
	} {
		if got, err := n.RequestCheckpoint(t.Context(), tc.in); got != tc.want || err != nil {
			t.Errorf("RequestCheckpoint(%+v) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestRunExternalTellsAMissedRequest: a script that checkpoints on its
// own schedule goes past the requested step; rank 0's node tells the run
// so, once (CheckpointSaved.Missed), and uploads nothing for it.
func TestRunExternalTellsAMissedRequest(t *testing.T) {
	n, in, w := startScript(t, "deaf", 400, `
import time
import cann_train as ct
for step in range(1, ct.total_steps() + 1):
    time.sleep(0.005)
    ct.report(step, loss=1.0 / step)
`)
	w.past(t, 20)
	step, err := n.RequestCheckpoint(t.Context(), spec.CheckpointRequest{RunID: in.RunID, Session: in.Session})
	if err != nil || step == 0 {
		t.Fatalf("requested step %d: %v", step, err)
	}
	w.end(t)
	if told := w.told(); len(told) != 1 || !told[0].Missed || told[0].Ref.Step != step || told[0].Ref.Key != "" || told[0].Session != in.Session {
		t.Fatalf("told %+v; want one missed request at step %d", told, step)
	}
}

// TestAheadBy: a requested checkpoint lies the job's request_lead ahead
// at the pace measured so far, and never fewer than minRequestSteps.
func TestAheadBy(t *testing.T) {
	for _, tc := range []struct {
		step, first int64
		took        float64
		lead        time.Duration
		want        int64
	}{
		{120, 20, 1, time.Second, 220},     // 100 steps a second
		{120, 20, 1, 3 * time.Second, 420}, // a longer lead
		{120, 20, 2, 1500 * time.Millisecond, 195},
		{21, 20, 10, time.Second, 23},     // slow steps: the floor
		{1000, 0, 0.5, time.Second, 3000}, // 2,000 a second
	} {
		if got := aheadBy(tc.step, tc.first, tc.took, tc.lead); got != tc.want {
			t.Errorf("aheadBy(%d, %d, %v, %v) = %d, want %d", tc.step, tc.first, tc.took, tc.lead, got, tc.want)
		}
	}
}

// runningWorld is an external world run on a node in the background, as
// RunExternal would (runExternal with hooks that record).
type runningWorld struct {
	mu       sync.Mutex
	saved    []spec.CheckpointSaved
	progress chan int64 // each step the node heartbeats, latest kept
	done     chan worldEnd
}

type worldEnd struct {
	res *spec.ChunkResult
	err error
}

// startScript runs script (Python) as job name of steps steps, with no
// periodic checkpoint before step 50,000, on a node of one world (two
// processes) in the background.
func startScript(t *testing.T, name string, steps int64, script string) (*Node, spec.ExternalInput, *runningWorld) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "bucket"))
	in := externalInput(name, work, 1, py, "train.py")
	in.Spec.Steps, in.Spec.CheckpointEvery = steps, 50000
	return n, in, startWorld(t, n, in)
}

func startWorld(t *testing.T, n *Node, in spec.ExternalInput) *runningWorld {
	w := &runningWorld{progress: make(chan int64, 1), done: make(chan worldEnd, 1)}
	hooks := externalHooks{
		progress: func(p spec.ChunkProgress) {
			select {
			case <-w.progress:
			default:
			}
			w.progress <- p.Step
		},
		saved: func(c spec.CheckpointSaved) error {
			w.mu.Lock()
			w.saved = append(w.saved, c)
			w.mu.Unlock()
			return nil
		},
	}
	go func() {
		res, err := n.runExternal(t.Context(), in, hooks)
		w.done <- worldEnd{res, err}
	}()
	return w
}

// past waits until the world's progress is past step and returns it.
func (w *runningWorld) past(t *testing.T, step int64) int64 {
	t.Helper()
	for {
		select {
		case at := <-w.progress:
			if at > step {
				return at
			}
		case e := <-w.done:
			t.Fatalf("the world ended before step %d: %+v %v", step, e.res, e.err)
		}
	}
}

// end waits for the world to end cleanly and returns its result.
func (w *runningWorld) end(t *testing.T) *spec.ChunkResult {
	t.Helper()
	e := <-w.done
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.res
}

// told is what the node told the run about checkpoints.
func (w *runningWorld) told() []spec.CheckpointSaved {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.saved)
}

// TestRunExternalLogUploadHoldsNoNextWorld: a world's logs go to the
// run's bucket as it ends, even cancelled; a bucket that does not take
// them holds that activity's end, not the node: the next world (a
// relaunch) starts on the node meanwhile. Before, the node's one world
// slot was held until the uploads gave up (30 s), and every try of a
// hold on a bucket that hangs waited so.
func TestRunExternalLogUploadHoldsNoNextWorld(t *testing.T) {
	release := make(chan struct{})
	bucket := s3fake.Bucket(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/logs/") {
				select { // held until the test lets go, then refused
				case <-release:
				case <-r.Context().Done():
				}
				w.WriteHeader(http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	work := t.TempDir()
	n := externalNode(t, "n1", bucket)
	first := externalInput("relaunch", work, 1, "sh", "-c", `echo up > up-$RANK; while true; do sleep 1; done`)
	ctx, cancel := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := n.runExternal(ctx, first, externalHooks{progress: func(spec.ChunkProgress) {}})
		firstDone <- err
	}()
	waitFor(t, "the first world's ranks", func() bool {
		_, e0 := os.Stat(filepath.Join(work, "up-0"))
		_, e1 := os.Stat(filepath.Join(work, "up-1"))
		return e0 == nil && e1 == nil
	})
	cancel()

	second := externalInput("relaunch", work, 1, "sh", "-c", `echo up > second-$RANK`)
	second.Session = "run/relaunch/g1/e2"
	secondDone := make(chan error, 1)
	go func() {
		_, err := n.runExternal(context.Background(), second, externalHooks{progress: func(spec.ChunkProgress) {}})
		secondDone <- err
	}()
	waitFor(t, "the second world's ranks, while the first world's logs are held", func() bool {
		_, e0 := os.Stat(filepath.Join(work, "second-0"))
		return e0 == nil
	})
	select {
	case err := <-firstDone:
		t.Fatalf("the first world ended (%v) before its held log uploads: the test proves nothing", err)
	default:
	}
	let()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the first world: %v; want it cancelled", err)
	}
	if err := <-secondDone; err != nil {
		t.Errorf("the second world: %v", err)
	}
}

// waitFor polls cond every 20 ms for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

// TestRunExternalMSRunScheduler: msrun's scheduler is no rank. Once the
// node's ranks have all exited cleanly the world is done, whether the
// scheduler then fails or outlives them (it is stopped); one failing
// while the ranks run fails the world, placed at the step the node's
// ranks had reached (the scheduler reports none).
func TestRunExternalMSRunScheduler(t *testing.T) {
	// The ranks report step 7, then exit or wait for the scheduler.
	rank := `echo '{"event":"report","step":7,"loss":0.5}' >> "$CANN_TRAIN_REPORT_FILE"; touch "reported-$CANN_TRAIN_RANK"; `
	for _, tc := range []struct {
		name, sched, ranks string
		wantStep           int64 // -1: the world ends cleanly
		wantMsg            string
	}{
		{"fails after the ranks", "trap '' TERM; while [ ! -e done-0 ] || [ ! -e done-1 ]; do sleep 0.02; done; sleep 0.2; exit 1",
			rank + `touch "done-$CANN_TRAIN_RANK"; exit 0`, -1, ""},
		{"outlives the ranks", "sleep 1000", rank + "exit 0", -1, ""},
		{"fails while the ranks run", "while [ ! -e reported-0 ]; do sleep 0.02; done; sleep 0.3; exit 1", rank + "sleep 1000", 7,
			"scheduler on node n1 exited with status 1 with its node's ranks at step 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			script := `if [ "$MS_ROLE" = MS_SCHED ]; then ` + tc.sched + `; fi; ` + tc.ranks
			in := externalInput("ms", work, 1, "sh", "-c", script)
			in.Spec.External.Launcher = spec.LauncherMSRun
			n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "ckpt"))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := n.runExternal(ctx, in, externalHooks{progress: func(spec.ChunkProgress) {}})
			if tc.wantStep < 0 {
				if err != nil || res == nil || res.To != 7 {
					t.Fatalf("runExternal: %+v, %v; want the world done at step 7", res, err)
				}
				return
			}
			var ae *temporal.ApplicationError
			var d spec.RankExit
			if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeRankExited || ae.Details(&d) != nil {
				t.Fatalf("runExternal: %v; want RankExited", err)
			}
			if d.Process != "scheduler" || d.Rank != -1 || d.Step != tc.wantStep || !strings.Contains(ae.Message(), tc.wantMsg) {
				t.Errorf("detail %+v, message %q; want the scheduler at step %d (%q)", d, ae.Message(), tc.wantStep, tc.wantMsg)
			}
		})
	}
}

// TestRunExternalAscendNPUs: an ascend launch gives each process the NPU
// its node names (spec.Node.NPUIDs, in local-rank order) as DEVICE_ID,
// ASCEND_DEVICE_ID and rank-table device_id, with that NPU's hccn.conf
// address; a node advertised by host name stands in its resolved address
// for the device_ip it lacks. Every launcher's processes see the restart
// count (CANN_TRAIN_RESTART_COUNT).
func TestRunExternalAscendNPUs(t *testing.T) {
	work := t.TempDir()
	script := `echo "$RANK_ID $DEVICE_ID $ASCEND_DEVICE_ID $CANN_TRAIN_RESTART_COUNT" > "out-$CANN_TRAIN_RANK"
cp "$RANK_TABLE_FILE" "table-$CANN_TRAIN_RANK.json"`
	in := externalInput("npus", work, 2, "sh", "-c", script)
	in.Spec.External.Launcher = spec.LauncherAscend
	in.Restarts = 2
	in.Membership.Nodes[0].CommAddr = "localhost:7000" // no hccn.conf: its resolved address stands in
	in.Membership.Nodes[1].CommAddr = "10.1.0.2:7000"
	in.Membership.Nodes[1].NPUIDs = []int{3, 1}
	in.Membership.Nodes[1].DeviceIPs = []string{"192.168.1.0", "192.168.1.1", "", "192.168.1.3"}
	in.Rank = 1
	n := externalNode(t, "n2", "file://"+filepath.Join(t.TempDir(), "ckpt"))
	if _, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}}); err != nil {
		t.Fatal(err)
	}
	for rank, want := range map[int]string{2: "2 3 3 2", 3: "3 1 1 2"} {
		out, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("out-%d", rank)))
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("rank %d saw RANK_ID DEVICE_ID ASCEND_DEVICE_ID CANN_TRAIN_RESTART_COUNT %q, want %q", rank, got, want)
		}
	}
	b, _ := os.ReadFile(filepath.Join(work, "table-2.json"))
	tab, err := ranktable.Parse(b)
	if err != nil {
		t.Fatalf("rank table: %v\n%s", err, b)
	}
	for rank, want := range []struct {
		id int
		ip string
	}{{0, "127.0.0.1"}, {1, "127.0.0.1"}, {3, "192.168.1.3"}, {1, "192.168.1.1"}} {
		if _, d, ok := tab.Lookup(rank); !ok || d.DeviceID != want.id || d.DeviceIP != want.ip {
			t.Errorf("rank %d: device %+v, want NPU %d at %s", rank, d, want.id, want.ip)
		}
	}

	// A host name that does not resolve: the launch fails at once,
	// saying what to give.
	in.Membership.Nodes[0].CommAddr = "no-such-host.invalid:7000"
	in.Session = "run/npus/g1/e2"
	_, err = n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBadJob || !ae.NonRetryable() ||
		!strings.Contains(ae.Message(), "/etc/hccn.conf") || !strings.Contains(ae.Message(), "--comm-advertise IP:PORT") ||
		!strings.Contains(ae.Message(), `"no-such-host.invalid"`) {
		t.Fatalf("an unresolved host name: %v; want a BadJob saying to give hccn.conf or --comm-advertise", err)
	}
}

// TestRunExternalAscendVisibleDevices: a job whose env renumbers the NPUs
// (ASCEND_RT_VISIBLE_DEVICES "1,3", as a container given NPUs 1 and 3)
// gives each process its NPU's index there as DEVICE_ID and
// ASCEND_DEVICE_ID; a malformed list is a BadJob naming it.
func TestRunExternalAscendVisibleDevices(t *testing.T) {
	for _, tc := range []struct {
		visible string
		want    map[int]string // rank → DEVICE_ID ASCEND_DEVICE_ID
		err     string
	}{
		{visible: "1,3", want: map[int]string{2: "1 1", 3: "0 0"}},
		{visible: "1,x", err: `ASCEND_RT_VISIBLE_DEVICES="1,x"`},
	} {
		work := t.TempDir()
		in := externalInput("visible", work, 2, "sh", "-c", `echo "$DEVICE_ID $ASCEND_DEVICE_ID" > "out-$CANN_TRAIN_RANK"`)
		in.Spec.External.Launcher = spec.LauncherAscend
		in.Spec.External.Env = map[string]string{"ASCEND_RT_VISIBLE_DEVICES": tc.visible}
		in.Membership.Nodes[1].NPUIDs = []int{3, 1}
		in.Rank = 1
		n := externalNode(t, "n2", "file://"+filepath.Join(t.TempDir(), "ckpt"))
		_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
		if tc.err != "" {
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBadJob || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want a BadJob naming %s", tc.visible, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for rank, want := range tc.want {
			out, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("out-%d", rank)))
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("%s: rank %d saw DEVICE_ID ASCEND_DEVICE_ID %q, want %q", tc.visible, rank, got, want)
			}
		}
	}
}

// TestRunExternalMissingScript: a Python entrypoint whose script is not
// in the job's workdir on the node fails the world at once with a
// non-retryable BadJob naming the script and the directory (the run then
// fails, or replaces a spare that lacks the checkout), not a RankExited
// the run would retry max_restarts times; without external.workdir the
// error says the processes ran in the node worker's own directory.
func TestRunExternalMissingScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	work := t.TempDir()
	cwd, _ := os.Getwd()
	for _, tc := range []struct {
		name, workdir string
		want          []string
	}{
		{"in the workdir", work, []string{"node n1: ", "the entrypoint's script no-such-train.py is not in the processes' working directory " + work,
			"external.workdir"}},
		{"no workdir", "", []string{"node n1: ", "the entrypoint's script no-such-train.py is not in the node worker's working directory",
			"names no external.workdir", cwd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := externalNode(t, "n1", "mem://")
			in := externalInput("noscript", tc.workdir, 1, py, "-u", "no-such-train.py")
			_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBadJob || !ae.NonRetryable() {
				t.Fatalf("runExternal: %v; want a non-retryable BadJob", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(ae.Message(), w) {
					t.Errorf("message %q lacks %q", ae.Message(), w)
				}
			}
		})
	}
}

// TestPickHostIP: the address a host name stands in with for a device_ip:
// routable before loopback, IPv4 before IPv6, never link-local or zoned.
func TestPickHostIP(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		in   []netip.Addr
		want string
	}{
		{addrs("127.0.1.1", "10.0.0.7"), "10.0.0.7"},
		{addrs("2001:db8::7", "10.0.0.7"), "10.0.0.7"},
		{addrs("::1", "2001:db8::7"), "2001:db8::7"},
		{addrs("::1", "127.0.0.1"), "127.0.0.1"},
		{addrs("fe80::1%eth0", "fe80::2", "::ffff:10.1.2.3"), "10.1.2.3"},
		{addrs("fe80::1%eth0"), ""},
		{nil, ""},
	} {
		if got := pickHostIP(tc.in); got != tc.want {
			t.Errorf("pickHostIP(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
