package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// helperDir is the repository's python/ directory (cann_train.py).
func helperDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	d := filepath.Join(filepath.Dir(file), "..", "..", "python")
	if _, err := os.Stat(filepath.Join(d, "cann_train.py")); err != nil {
		t.Fatalf("python helper: %v", err)
	}
	return d
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the helper protocol test needs it")
	}
	return p
}

// TestReportReaderPartialLines: only complete lines are events; a line
// that does not parse is counted and skipped.
func TestReportReaderPartialLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.jsonl")
	r := &ReportReader{Path: p}
	if ev, err := r.Poll(); err != nil || ev != nil {
		t.Fatalf("missing file: %v %v", ev, err)
	}
	f, _ := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	defer f.Close()
	f.WriteString(`{"event":"report","step":1,"loss":2.5}` + "\n" + `{"event":"rep`)
	ev, err := r.Poll()
	if err != nil || len(ev) != 1 || ev[0].Step != 1 || *ev[0].Loss != 2.5 {
		t.Fatalf("first poll %+v %v", ev, err)
	}
	f.WriteString(`ort","step":2,"metrics":{"acc":0.5}}` + "\nnot json\n" + `{"event":"saved","step":2}` + "\n")
	ev, err = r.Poll()
	if err != nil || len(ev) != 2 || ev[0].Step != 2 || ev[0].Loss != nil || ev[0].Metrics["acc"] != 0.5 ||
		ev[1].Event != EventSaved || r.Bad != 1 {
		t.Fatalf("second poll %+v %v bad=%d", ev, err, r.Bad)
	}
}

// TestPythonHelperProtocol runs a script (no torch) that uses
// python/cann_train.py under a supervisor that plays the node worker:
// reports arrive with step, loss and metrics; should_checkpoint follows
// CANN_TRAIN_CHECKPOINT_EVERY on every rank; saved() blocks until the
// worker has copied the directory and acknowledged; restored_step and
// checkpoint_dir come from the environment; rank 1's saved() is a no-op.
func TestPythonHelperProtocol(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	os.MkdirAll(ckpt, 0o755)
	os.WriteFile(filepath.Join(ckpt, "state.txt"), []byte("4"), 0o644)
	script := filepath.Join(dir, "train.py")
	os.WriteFile(script, []byte(`
import os, sys, time
import cann_train as ct
assert ct.managed()
start = ct.restored_step()
assert ct.restored_step() == start
if ct.rank() == 0:
    with open(os.path.join(ct.checkpoint_dir(), "state.txt")) as f:
        assert int(f.read()) == start, "restored state does not match restored_step"
for step in range(start + 1, start + 7):
    ct.report(step, loss=1.0 / step, acc=step / 10.0, nan=float("nan"))
    if ct.should_checkpoint():
        if ct.rank() == 0:
            with open(os.path.join(ct.checkpoint_dir(), "state.txt"), "w") as f:
                f.write(str(step))
        t0 = time.monotonic()
        ok = ct.saved(step, timeout=20)
        print("saved", step, ok, "waited %.3f" % (time.monotonic() - t0), flush=True)
print("done", ct.rank(), ct.world_size(), ct.total_steps(), flush=True)
`), 0o644)
	var specs []Spec
	for rank := range 2 {
		env := append(os.Environ(),
			"PYTHONPATH="+helperDir(t),
			"CANN_TRAIN_CHECKPOINT_DIR="+ckpt,
			"CANN_TRAIN_RESTORED_STEP=4",
			"CANN_TRAIN_CHECKPOINT_EVERY=3",
			"CANN_TRAIN_REPORT_FILE="+filepath.Join(dir, "r"+itoa(rank)+".jsonl"),
			"CANN_TRAIN_ACK_FILE="+filepath.Join(dir, "r"+itoa(rank)+".ack"),
			"CANN_TRAIN_RANK="+itoa(rank), "CANN_TRAIN_WORLD_SIZE=2", "CANN_TRAIN_TOTAL_STEPS=10")
		specs = append(specs, Spec{Name: "rank-" + itoa(rank), Rank: rank, Argv: []string{py, script}, Env: env,
			Dir: dir, LogPath: filepath.Join(dir, "rank-"+itoa(rank)+".log")})
	}
	g, err := Start(specs)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- g.Wait(context.Background(), time.Second) }()
	r0 := &ReportReader{Path: filepath.Join(dir, "r0.jsonl")}
	var steps, restored []int64
	var copied []string
	deadline := time.After(60 * time.Second)
loop:
	for {
		ev, err := r0.Poll()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev {
			switch e.Event {
			case EventRestored:
				restored = append(restored, e.Step)
			case EventReport:
				steps = append(steps, e.Step)
				if e.Loss == nil || e.Metrics["acc"] != float64(e.Step)/10 {
					t.Errorf("report %+v", e)
				}
				if _, ok := e.Metrics["nan"]; ok {
					t.Errorf("non-finite metric reported: %+v", e)
				}
			case EventSaved:
				// Hold the script for a while: saved() must wait for us.
				time.Sleep(300 * time.Millisecond)
				payload, _, err := PackDir(ckpt, 4096)
				if err != nil {
					t.Fatal(err)
				}
				out := t.TempDir()
				UnpackDir(payload, out)
				b, _ := os.ReadFile(filepath.Join(out, "state.txt"))
				copied = append(copied, string(b))
				if err := WriteAck(filepath.Join(dir, "r0.ack"), e.Step); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case err := <-waited:
			if err != nil {
				log0, _ := os.ReadFile(specs[0].LogPath)
				log1, _ := os.ReadFile(specs[1].LogPath)
				t.Fatalf("script failed: %v\n%s\n%s", err, log0, log1)
			}
			break loop
		case <-deadline:
			t.Fatal("script did not finish")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if ev, _ := r0.Poll(); len(ev) > 0 {
		for _, e := range ev {
			if e.Event == EventReport {
				steps = append(steps, e.Step)
			}
		}
	}
	if want := []int64{5, 6, 7, 8, 9, 10}; len(steps) != len(want) || steps[0] != 5 || steps[5] != 10 {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if len(restored) != 1 || restored[0] != 4 || r0.Bad != 0 {
		t.Errorf("restored events %v (%d lines skipped); want one, of step 4", restored, r0.Bad)
	}
	// Checkpoints at steps 6 and 9 (every 3), each copied as written.
	if strings.Join(copied, ",") != "6,9" {
		t.Errorf("copied checkpoints %v, want 6,9", copied)
	}
	log0, _ := os.ReadFile(specs[0].LogPath)
	parsed := 0
	for _, line := range strings.Split(strings.TrimSpace(string(log0)), "\n") {
		var step int
		var ok string
		var w float64
		if n, _ := fmt.Sscanf(line, "saved %d %s waited %f", &step, &ok, &w); n == 3 {
			parsed++
			if ok != "True" || w < 0.25 {
				t.Errorf("rank 0: %q: saved() must wait for the acknowledgement", line)
			}
		}
	}
	if parsed != 2 {
		t.Errorf("rank 0 logged %d saves: %q", parsed, log0)
	}
	if !strings.Contains(string(log0), "done 0 2 10") {
		t.Errorf("rank 0 log %q", log0)
	}
	log1, _ := os.ReadFile(specs[1].LogPath)
	if !strings.Contains(string(log1), "saved 6 True") || !strings.Contains(string(log1), "done 1 2 10") {
		t.Errorf("rank 1 log %q", log1)
	}
	// Without the node worker the helper stays silent and local.
	cmd := exec.Command(py, "-c", `import cann_train as ct, os
assert not ct.managed() and ct.restored_step() == 0 and ct.saved(3)
ct.report(1, loss=0.5)
assert not ct.should_checkpoint(5)
print(os.path.basename(ct.checkpoint_dir()))`)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PYTHONPATH="+helperDir(t))
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "checkpoints" {
		t.Errorf("unmanaged: %v %s", err, out)
	}
}

// TestPythonHelperCheckpointRequest: should_checkpoint() says yes at the
// step the node worker wrote to the request file (WriteAck's form) as
// well as at every checkpoint_every-th step, sees a new request when the
// file is replaced, and none while there is no file.
func TestPythonHelperCheckpointRequest(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	req := filepath.Join(dir, "checkpoint.request")
	if err := WriteAck(req, 7); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", `import os, cann_train as ct
req = os.environ["CANN_TRAIN_REQUEST_FILE"]
os.rename(req, req + ".hold")
assert not ct.should_checkpoint(7), "no request file: no request"
os.rename(req + ".hold", req)
assert ct.should_checkpoint(7), "the requested step"
assert ct.should_checkpoint(6) and not ct.should_checkpoint(8), "every 3 besides"
ct.report(7)
assert ct.should_checkpoint(), "the last reported step"
with open(req + ".tmp", "w") as f:
    f.write("11\n")
os.replace(req + ".tmp", req)
assert ct.should_checkpoint(11) and not ct.should_checkpoint(7), "a new request replaces the old"
assert not ct.should_checkpoint(0) and not ct.should_checkpoint(-1)
print("ok")`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+helperDir(t), "CANN_TRAIN_REQUEST_FILE="+req, "CANN_TRAIN_CHECKPOINT_EVERY=3",
		"CANN_TRAIN_REPORT_FILE="+filepath.Join(dir, "r.jsonl"), "CANN_TRAIN_RANK=0")
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// TestPythonHelperRestartCount: restart_count() is CANN_TRAIN_RESTART_COUNT
// (every launcher), else torchrun's TORCHELASTIC_RESTART_COUNT, else 0.
func TestPythonHelperRestartCount(t *testing.T) {
	py := python(t)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"CANN_TRAIN_RESTART_COUNT=3"}, "3"},
		{[]string{"CANN_TRAIN_RESTART_COUNT=2", "TORCHELASTIC_RESTART_COUNT=5"}, "2"},
		{[]string{"TORCHELASTIC_RESTART_COUNT=5"}, "5"},
		{nil, "0"},
	} {
		cmd := exec.Command(py, "-c", "import cann_train as ct; print(ct.restart_count())")
		cmd.Env = append([]string{"PYTHONPATH=" + helperDir(t), "PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1"}, tc.env...)
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("env %v: restart_count() = %q (%v), want %s", tc.env, got, err, tc.want)
		}
	}
}
