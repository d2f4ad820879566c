package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// torchOnPath makes `python3` in the node workers' PATH an interpreter
// that imports torch with gloo (Debian's python3-torch installs into the
// system Python, which a pyenv or venv python3 may shadow), or skips. It
// looks once per test binary (importing torch takes seconds) and, where
// the first python3 on PATH is not the one, puts a directory holding a
// link to it first in this process's PATH for good: the tests that want
// it run side by side (t.Setenv is not for those).
func torchOnPath(t *testing.T) {
	t.Helper()
	if ok, err := torch.find(); err != nil {
		t.Fatalf("put the python3 that imports torch on PATH: %v", err)
	} else if !ok {
		t.Skip("torch with gloo is not importable by python3 or /usr/bin/python3 (apt-get install python3-torch): " +
			"skipping the external-job e2e test")
	}
}

// torch is torchOnPath's finding, made once; TestMain removes the
// directory it put on PATH.
var torch torchPath

type torchPath struct {
	once sync.Once
	ok   bool
	err  error
	bin  string // the directory put first on PATH, if any
}

func (p *torchPath) find() (bool, error) {
	p.once.Do(func() {
		for i, cand := range []string{"python3", "/usr/bin/python3"} {
			py, err := exec.LookPath(cand)
			if err != nil {
				continue
			}
			check := exec.Command(py, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()")
			if check.Run() != nil {
				continue
			}
			p.ok = true
			if i == 0 {
				return // (PATH's own python3)
			}
			if p.bin, err = os.MkdirTemp("", "cann-train-torch-"); err == nil {
				err = os.Symlink(py, filepath.Join(p.bin, "python3"))
			}
			if err != nil {
				p.err = err
				return
			}
			os.Setenv("PATH", p.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			return
		}
	})
	return p.ok, p.err
}

func (p *torchPath) cleanup() {
	if p.bin != "" {
		os.RemoveAll(p.bin)
	}
}

// quickstartJSON runs `cann-train quickstart args… -o json` and decodes
// the summary.
func quickstartJSON(ctx context.Context, t *testing.T, dir string, args ...string) Summary {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(append([]string{"quickstart", "--port", "0", "--ui-port", "-1", "-o", "json", "--data-dir", dir,
		"--log-level", "warn"}, args...))
	err := root.ExecuteContext(ctx)
	var sum Summary
	if jerr := json.Unmarshal(out.Bytes(), &sum); err != nil || jerr != nil {
		dumpLogs(t, filepath.Join(dir, "logs"))
		dumpWorlds(t, filepath.Join(dir, "work"))
		t.Fatalf("quickstart %v: %v (%v)\nstderr:\n%s\nstdout:\n%s", args, err, jerr, errb.String(), out.String())
	}
	t.Logf("summary: %s", out.String())
	// The progress says each recovery in a line of its own; the control
	// worker's warnings go to its log file, not between the lines.
	for _, r := range sum.Recoveries {
		if want := "recovered" + strings.Repeat(" ", kindWidth+1-len("recovered")) + recoveryHeadline(r) + ": "; !strings.Contains(errb.String(), want) {
			t.Errorf("quickstart's progress lacks %q:\n%s", want, errb.String())
		}
	}
	if strings.Contains(errb.String(), "\tWARN\t") {
		t.Errorf("a worker's warning in the progress:\n%s", errb.String())
	}
	return sum
}

// dumpWorlds logs the tails of the external job's per-rank logs.
func dumpWorlds(t *testing.T, work string) {
	logs, _ := filepath.Glob(filepath.Join(work, "*", "runs", "*", "worlds", "*", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		t.Logf("--- %s (tail)\n%s", l, b)
	}
}

type reportLine struct {
	Event string   `json:"event"`
	Step  int64    `json:"step"`
	Loss  *float64 `json:"loss"`
}

// worldReports reads rank-0's report files on a node, one slice per launch
// in launch order.
func worldReports(t *testing.T, nodeWork, run string) [][]reportLine {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(nodeWork, "runs", run, "worlds", "*", "rank-0.jsonl"))
	sort.Slice(files, func(i, j int) bool {
		a, _ := os.Stat(files[i])
		b, _ := os.Stat(files[j])
		return a.ModTime().Before(b.ModTime())
	})
	var out [][]reportLine
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		var lines []reportLine
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r reportLine
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Event == "report" {
				lines = append(lines, r)
			}
		}
		fh.Close()
		out = append(out, lines)
	}
	return out
}

// TestExternalTorchDDP runs examples/torch-ddp (PyTorch DDP over gloo) on
// two node-worker processes × two ranks under the embedded server: the
// loss falls, checkpoints are committed and uploaded, every rank logs.
func TestExternalTorchDDP(t *testing.T) {
	torchOnPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sum := quickstartJSON(ctx, t, dir, "-f", "../../examples/torch-ddp/job.yaml", "--name", "e2e-ddp", "--steps", "100")
	if sum.Status != spec.PhaseCompleted || sum.Steps != 100 || len(sum.Nodes) != 2 || sum.Model != spec.ModelExternal {
		t.Fatalf("status %s, steps %d, nodes %v, model %s", sum.Status, sum.Steps, sum.Nodes, sum.Model)
	}
	if !(sum.InitialLoss > 2 && sum.FinalLoss < 0.7*sum.InitialLoss) {
		t.Errorf("loss did not fall: %.4f → %.4f", sum.InitialLoss, sum.FinalLoss)
	}
	// checkpoint_every 25 → 25, 50, 75, 100 (the script also saves at its last step).
	if sum.Checkpoints.Count != 4 || !strings.HasSuffix(sum.Checkpoints.LastURL, "000000000100/manifest.json") {
		t.Errorf("checkpoints %+v", sum.Checkpoints)
	}
	if len(sum.Recoveries) != 0 {
		t.Errorf("recoveries %+v", sum.Recoveries)
	}
	for node, ranks := range map[string][]string{"node-1": {"rank-0", "rank-1"}, "node-2": {"rank-2", "rank-3"}} {
		for _, r := range ranks {
			logs, _ := filepath.Glob(filepath.Join(dir, "work", node, "runs", "e2e-ddp", "worlds", "*", r+".log"))
			if len(logs) != 1 {
				t.Errorf("%s on %s: logs %v", r, node, logs)
			}
		}
	}
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), "e2e-ddp")
	if len(reps) != 1 || len(reps[0]) != 100 || reps[0][0].Step != 1 || reps[0][99].Step != 100 {
		t.Errorf("rank-0 reports: %d launches", len(reps))
	}
}

// TestExternalNodeKilledResumesOnSpare SIGKILLs node-2's worker (its two
// ranks die with it) once it reports step 90. The run must notice, take
// the spare, and relaunch the world from the last uploaded checkpoint —
// restored onto every node, the spare included — so that the loss curve
// goes on from there instead of from step 0.
func TestExternalNodeKilledResumesOnSpare(t *testing.T) {
	torchOnPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sum := quickstartJSON(ctx, t, dir, "-f", "../../examples/torch-ddp/job.yaml", "--name", "e2e-ddp-kill",
		"--steps", "160", "--spares", "1", "--inject", "kill:node-2@90", "--heartbeat-timeout", "3s")
	if sum.Status != spec.PhaseCompleted || sum.Steps != 160 {
		t.Fatalf("status %s at step %d", sum.Status, sum.Steps)
	}
	if len(sum.Recoveries) != 1 {
		t.Fatalf("recoveries %+v, want one", sum.Recoveries)
	}
	rec := sum.Recoveries[0]
	if rec.FailedNode != "node-2" || rec.Replacement != "node-3" {
		t.Errorf("recovery %+v: want node-2 replaced by the spare node-3", rec)
	}
	// node-1 found node-2's worker gone (its address refused connections)
	// rather than the run waiting for node-2's 3 s heartbeat timeout.
	if !strings.Contains(rec.Reason, "refused connections") || rec.DetectSeconds >= 3 {
		t.Errorf("recovery %+v: want node-2 named by its peer within the 3 s heartbeat timeout", rec)
	}
	if rec.ResumeStep < 50 || rec.ResumeStep > 90 || rec.ResumeStep%25 != 0 || rec.FailedAtStep < 90 {
		t.Errorf("recovery %+v: want a resume from the last checkpoint before step 90 (50 or 75)", rec)
	}
	if !(rec.ResumeLoss > 0 && rec.ResumeLoss < 0.7*sum.InitialLoss) {
		t.Errorf("first loss after the resume %.4f vs initial %.4f: the curve restarted", rec.ResumeLoss, sum.InitialLoss)
	}
	if sum.Nodes[0] != "node-1" || sum.Nodes[1] != "node-3" {
		t.Errorf("nodes after recovery %v", sum.Nodes)
	}
	// Rank 0's reports: the first launch from step 1, the second from the
	// checkpoint on.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), "e2e-ddp-kill")
	if len(reps) != 2 || len(reps[1]) == 0 {
		t.Fatalf("rank-0 report files: %d launches", len(reps))
	}
	if reps[0][0].Step != 1 || reps[1][0].Step != rec.ResumeStep+1 || reps[1][len(reps[1])-1].Step != 160 {
		t.Errorf("steps: launch 1 from %d, launch 2 %d..%d; want 1, then %d..160",
			reps[0][0].Step, reps[1][0].Step, reps[1][len(reps[1])-1].Step, rec.ResumeStep+1)
	}
	// The spare restored the checkpoint too, and its ranks ran from there.
	spare := worldReports(t, filepath.Join(dir, "work", "node-3"), "e2e-ddp-kill")
	if len(spare) != 0 {
		t.Logf("node-3 has rank-0 files: %d (unexpected but harmless)", len(spare))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "work", "node-3", "runs", "e2e-ddp-kill", "worlds", "*", "rank-2.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("spare's rank-2 reports: %v", logs)
	}
	b, _ := os.ReadFile(logs[0])
	var first reportLine // (its first report: a "restored" line may come before it)
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if json.Unmarshal(line, &first) == nil && first.Event == "report" {
			break
		}
	}
	if first.Step != rec.ResumeStep+1 {
		t.Errorf("the spare's first step %d, want %d", first.Step, rec.ResumeStep+1)
	}
	// No process of the run outlived it — the killed node's ranks included.
	if left := processesWithEnv(dir); len(left) > 0 {
		t.Errorf("processes of the run still alive: %v", left)
	}
}

// TestExternalFrozenNodeResumesOnSpare: node-2 and its PyTorch processes
// hang (SIGSTOP) at step 90. Nobody can tell from outside (its listener
// accepts; its peers' gloo waits); its heartbeat timeout names it, the
// world is stopped two seconds later rather than a heartbeat timeout more,
// and it resumes on the spare from the last checkpoint.
func TestExternalFrozenNodeResumesOnSpare(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	torchOnPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sum := quickstartJSON(ctx, t, dir, "-f", "../../examples/torch-ddp/job.yaml", "--name", "e2e-ddp-freeze",
		"--steps", "160", "--spares", "1", "--inject", "freeze:node-2@90", "--heartbeat-timeout", "3s")
	if sum.Status != spec.PhaseCompleted || sum.Steps != 160 || len(sum.Recoveries) != 1 {
		t.Fatalf("status %s at step %d, recoveries %+v; want completed after one", sum.Status, sum.Steps, sum.Recoveries)
	}
	rec := sum.Recoveries[0]
	if rec.FailedNode != "node-2" || rec.Replacement != "node-3" || rec.From != spec.FaultFreeze ||
		!strings.Contains(rec.Reason, "stopped heartbeating") {
		t.Errorf("recovery %+v: want the frozen node-2 replaced by the spare node-3", rec)
	}
	// Silent for at most the 3 s heartbeat timeout, then 2 s for the
	// other node's processes (before: another heartbeat timeout on top).
	if rec.DetectSeconds <= 0 || rec.DetectSeconds > 6 {
		t.Errorf("recovery %+v: found %.2fs after the freeze, want within 6s", rec, rec.DetectSeconds)
	}
	if rec.ResumeStep < 50 || rec.ResumeStep > 90 || rec.ResumeStep%25 != 0 || rec.FailedAtStep < rec.ResumeStep {
		t.Errorf("recovery %+v: want a resume from the last checkpoint before step 90 (50 or 75)", rec)
	}
	if left := processesWithEnv(dir); len(left) > 0 {
		t.Errorf("processes of the run still alive: %v", left)
	}
}

// awaitNoProcesses waits up to 15 s until no live process's environment
// mentions s (processesWithEnv): a stopped world's ranks have exited.
func awaitNoProcesses(t *testing.T, s, when string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := processesWithEnv(s)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks still running %s: %v", when, left)
		}
	}
}

// processesWithEnv lists live processes whose environment mentions s (the
// ranks' CANN_TRAIN_* paths name their data directory).
func processesWithEnv(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(s)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}
