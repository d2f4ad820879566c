package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid no longer runs (a zombie waiting for its
// reaper counts as gone: it runs nothing).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S …: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// waitGone polls until every pid is gone or the deadline passes.
func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for {
		var alive []int
		for _, p := range pids {
			if !gone(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("processes still running: %v (of %v)", alive, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readPids reads the pids the test scripts write, one per line.
func readPids(t *testing.T, dir string, n int) []int {
	t.Helper()
	var pids []int
	end := time.Now().Add(10 * time.Second)
	for len(pids) < n {
		pids = pids[:0]
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil {
					pids = append(pids, p)
				}
			}
		}
		if time.Now().After(end) {
			t.Fatalf("only %d of %d pids written: %v", len(pids), n, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pids
}

// stubborn is a rank that spawns a grandchild, ignores SIGTERM, and writes
// both pids to pidDir/<name>.
func stubborn(name, pidDir, logDir string) Spec {
	script := fmt.Sprintf(`trap '' TERM
sleep 1000 &
echo $$ $! > %s/%s.tmp && mv %s/%s.tmp %s/%s
echo started %s
while true; do sleep 1; done`, pidDir, name, pidDir, name, pidDir, name, name)
	return Spec{Name: name, Rank: 0, Argv: []string{"sh", "-c", script}, Env: os.Environ(), LogPath: filepath.Join(logDir, name+".log")}
}

// TestCancelLeavesNoOrphans kills the supervising context: every process,
// the grandchildren they spawned included, must be gone when Wait returns,
// although they ignore SIGTERM (SIGKILL after the grace period).
func TestCancelLeavesNoOrphans(t *testing.T) {
	dir := t.TempDir()
	pidDir := filepath.Join(dir, "pids")
	os.MkdirAll(pidDir, 0o755)
	var specs []Spec
	for i := range 3 {
		s := stubborn(fmt.Sprintf("rank-%d", i), pidDir, filepath.Join(dir, "logs"))
		s.Rank = i
		specs = append(specs, s)
	}
	g, err := Start(specs)
	if err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, pidDir, 6)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Wait(ctx, 300*time.Millisecond) }()
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after cancel")
	}
	if el := time.Since(t0); el < 250*time.Millisecond {
		t.Errorf("stopped after %s: the SIGTERM grace was not honoured", el)
	}
	waitGone(t, pids, 2*time.Second)
	if b, _ := os.ReadFile(specs[1].LogPath); !strings.Contains(string(b), "started rank-1") {
		t.Errorf("log of rank-1: %q", b)
	}
}

// TestRankFailureStopsTheRest: one rank exits 3; Wait names it with its
// status and log tail and stops the others (which would run forever).
func TestRankFailureStopsTheRest(t *testing.T) {
	dir := t.TempDir()
	pidDir := filepath.Join(dir, "pids")
	os.MkdirAll(pidDir, 0o755)
	ok := stubborn("rank-0", pidDir, dir)
	bad := Spec{Name: "rank-1", Rank: 1, Env: os.Environ(), LogPath: filepath.Join(dir, "rank-1.log"),
		Argv: []string{"sh", "-c", `for i in $(seq 1 1000); do echo "line $i"; done; echo "Traceback: boom" >&2; sleep 0.3; exit 3`}}
	g, err := Start([]Spec{ok, bad})
	if err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, pidDir, 2)
	err = g.Wait(context.Background(), 200*time.Millisecond)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Wait: %v", err)
	}
	if ee.Name != "rank-1" || ee.Rank != 1 || ee.Code != 3 || ee.Signal != 0 {
		t.Errorf("exit %+v", ee.Exit)
	}
	if !strings.HasSuffix(strings.TrimSpace(ee.Tail), "Traceback: boom") || strings.Contains(ee.Tail, "line 1\n") || len(ee.Tail) > TailBytes {
		t.Errorf("tail (%d bytes) %q", len(ee.Tail), ee.Tail)
	}
	if !strings.Contains(ee.Error(), "rank-1") || !strings.Contains(ee.Error(), "status 3") || !strings.Contains(ee.Error(), "boom") {
		t.Errorf("message %q", ee.Error())
	}
	waitGone(t, append(pids, g.Pids()...), 2*time.Second)
}

// TestCleanExitAndSignal: all ranks exiting 0 is success (a daemon one of
// them left behind is stopped too); a rank killed by a signal is reported
// with the signal's name.
func TestCleanExitAndSignal(t *testing.T) {
	dir := t.TempDir()
	g, err := Start([]Spec{
		{Name: "rank-0", Argv: []string{"sh", "-c", "sleep 1000 & echo $! > " + dir + "/daemon; exit 0"}, Env: os.Environ()},
		{Name: "rank-1", Argv: []string{"true"}, Env: os.Environ()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background(), time.Second); err != nil {
		t.Fatalf("clean exit: %v", err)
	}
	waitGone(t, readPids(t, dir, 1), 2*time.Second)

	g, err = Start([]Spec{{Name: "rank-0", Argv: []string{"sh", "-c", "kill -SEGV $$"}, Env: os.Environ()}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Wait(context.Background(), time.Second)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Signal != syscall.SIGSEGV || ee.Code != -1 || !strings.Contains(err.Error(), "SIGSEGV") {
		t.Errorf("signalled rank: %v", err)
	}
}

func TestStartErrorKillsStarted(t *testing.T) {
	dir := t.TempDir()
	_, err := Start([]Spec{
		{Name: "rank-0", Argv: []string{"sh", "-c", "echo $$ > " + dir + "/p; sleep 1000"}, Env: os.Environ()},
		{Name: "rank-1", Argv: []string{"no-such-program-cann"}, Env: os.Environ()},
	})
	var se *StartError
	if !errors.As(err, &se) || se.Name != "rank-1" {
		t.Fatalf("Start: %v", err)
	}
	if pids, _ := os.ReadFile(dir + "/p"); len(pids) > 0 {
		p, _ := strconv.Atoi(strings.TrimSpace(string(pids)))
		waitGone(t, []int{p}, 2*time.Second)
	}
	// PATH comes from the child's environment.
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "hello-cann"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	g, err := Start([]Spec{{Name: "rank-0", Argv: []string{"hello-cann"}, Env: []string{"PATH=" + bin}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestSupervisorKilledTakesChildrenAlong SIGKILLs a process that
// supervises a group (as when a node worker dies): the parent-death signal
// must end its children.
func TestSupervisorKilledTakesChildrenAlong(t *testing.T) {
	if os.Getenv("LAUNCH_TEST_SUPERVISOR") != "" {
		return // the helper itself, see TestHelperSupervisor
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSupervisor$", "-test.v")
	cmd.Env = append(os.Environ(), "LAUNCH_TEST_SUPERVISOR="+dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, dir, 4) // each rank and the grandchild it spawned
	for end := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(dir, "groups.json")); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no pid file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Let the helper's Go runtime go on (threads come and go) for a while.
	time.Sleep(300 * time.Millisecond)
	for _, p := range pids {
		if gone(p) {
			t.Fatalf("child %d died before its supervisor", p)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The ranks die with their supervisor (parent-death signal) …
	var ranks, grandchildren []int
	for i, p := range pids {
		if i%2 == 0 {
			ranks = append(ranks, p)
		} else {
			grandchildren = append(grandchildren, p)
		}
	}
	waitGone(t, ranks, 2*time.Second)
	// … what they spawned is swept by the next supervisor.
	if n, err := SweepPidFile(filepath.Join(dir, "groups.json")); err != nil || n != 2 {
		t.Errorf("sweep: %d groups, %v", n, err)
	}
	waitGone(t, grandchildren, 2*time.Second)
	if n, err := SweepPidFile(filepath.Join(dir, "groups.json")); n != 0 || err != nil {
		t.Errorf("second sweep: %d %v", n, err)
	}
}

// TestHelperSupervisor is the supervisor process of the test above.
func TestHelperSupervisor(t *testing.T) {
	dir := os.Getenv("LAUNCH_TEST_SUPERVISOR")
	if dir == "" {
		t.Skip("helper process only")
	}
	var specs []Spec
	for i := range 2 {
		specs = append(specs, Spec{Name: fmt.Sprintf("rank-%d", i), Env: os.Environ(),
			Argv: []string{"sh", "-c", fmt.Sprintf("sleep 1000 & echo $$ $! > %s/r%d.tmp; mv %s/r%d.tmp %s/r%d; exec sleep 1000", dir, i, dir, i, dir, i)}})
	}
	g, err := Start(specs)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WritePidFile(filepath.Join(dir, "groups.json")); err != nil {
		t.Fatal(err)
	}
	// Churn goroutines and threads meanwhile.
	for i := 0; i < 200; i++ {
		go func() { time.Sleep(time.Millisecond) }()
	}
	_ = g.Wait(context.Background(), time.Second)
}

// TestNonRankProcesses: a process that is not a rank (msrun's scheduler)
// serves the ranks. Once every rank has exited cleanly the job is done:
// a scheduler failing afterwards, or still running (it is stopped), does
// not fail the group; one failing while the ranks run does, unless they
// all finish cleanly within AuxSettle. In a group without ranks every
// process counts.
func TestNonRankProcesses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sched, rank string // sh scripts
		noRanks     bool
		wantErr     string // "" : Wait returns nil
		wantIgnored string // the scheduler's exit as Ignored lists it ("": none)
		within      time.Duration
	}{
		{name: "fails after the ranks", sched: "trap '' TERM; sleep 0.1; exit 1", rank: "exit 0", wantIgnored: "status 1", within: 5 * time.Second},
		{name: "outlives the ranks", sched: "sleep 1000", rank: "exit 0", wantIgnored: "killed by SIGTERM", within: 5 * time.Second},
		{name: "outlives the ranks ignoring SIGTERM", sched: "trap '' TERM; while true; do sleep 0.05; done", rank: "exit 0",
			wantIgnored: "killed by SIGKILL", within: 5 * time.Second},
		{name: "exits cleanly after the ranks", sched: "trap '' TERM; sleep 0.1", rank: "exit 0", within: 5 * time.Second},
		{name: "fails as the ranks finish", sched: "exit 1", rank: "sleep 0.3; exit 0", wantIgnored: "status 1", within: 5 * time.Second},
		{name: "fails while the ranks run", sched: "exit 1", rank: "sleep 1000", wantErr: "scheduler", within: 10 * time.Second},
		{name: "rank fails", sched: "sleep 1000", rank: "exit 4", wantErr: "status 4", within: 10 * time.Second},
		{name: "no ranks", sched: "exit 1", rank: "sleep 1000", noRanks: true, wantErr: "scheduler", within: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r0, r1 := 0, 1
			if tc.noRanks {
				r0, r1 = -1, -1
			}
			g, err := Start([]Spec{
				{Name: "scheduler", Rank: -1, Argv: []string{"sh", "-c", tc.sched}, Env: os.Environ(), LogPath: filepath.Join(dir, "scheduler.log")},
				{Name: "rank-0", Rank: r0, Argv: []string{"sh", "-c", tc.rank}, Env: os.Environ(), LogPath: filepath.Join(dir, "rank-0.log")},
				{Name: "rank-1", Rank: r1, Argv: []string{"sh", "-c", tc.rank}, Env: os.Environ()},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			err = g.Wait(ctx, 300*time.Millisecond)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait did not return within %v", tc.within)
			}
			var ee *ExitError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Wait: %v; want nil (the ranks finished)", err)
			case tc.wantErr != "" && (!errors.As(err, &ee) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Wait: %v; want an ExitError naming %q", err, tc.wantErr)
			}
			ign := g.Ignored()
			switch {
			case tc.wantIgnored == "" && len(ign) > 0:
				t.Errorf("ignored %v; want none", ign)
			case tc.wantIgnored != "" && (len(ign) != 1 || ign[0].Name != "scheduler" || !strings.Contains(ign[0].String(), tc.wantIgnored)):
				t.Errorf("ignored %v; want the scheduler's exit (%s)", ign, tc.wantIgnored)
			}
			waitGone(t, g.Pids(), 2*time.Second)
		})
	}
}

// TestScriptOf: the script file a Python entrypoint runs, if any.
func TestScriptOf(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string // "": none
	}{
		{[]string{"python3", "train.py", "--lr", "0.1"}, "train.py"},
		{[]string{"/usr/bin/python3.11", "-u", "-W", "ignore", "src/train.py"}, "src/train.py"},
		{[]string{"python", "-Wignore", "-X", "dev", "-OO", "t.py"}, "t.py"},
		{[]string{"pypy3", "--", "-weird.py"}, "-weird.py"},
		{[]string{"python3", "-m", "torch.distributed.run", "train.py"}, ""},
		{[]string{"python3", "-um", "pkg"}, ""},
		{[]string{"python3", "-c", "print(1)"}, ""},
		{[]string{"python3", "-"}, ""},
		{[]string{"python3"}, ""},
		{[]string{"sh", "-c", "python3 missing.py"}, ""},
		{[]string{"python3-config", "x.py"}, ""},
		{[]string{"./train.sh", "train.py"}, ""},
		// Shells: the first operand after the options.
		{[]string{"bash", "train.sh", "--steps", "10"}, "train.sh"},
		{[]string{"/bin/sh", "-eux", "run/train.sh"}, "run/train.sh"},
		{[]string{"bash", "-o", "pipefail", "+o", "nounset", "--norc", "t.sh"}, "t.sh"},
		{[]string{"bash", "--rcfile", "my.rc", "t.sh"}, "t.sh"},
		{[]string{"zsh", "--", "-odd.sh"}, "-odd.sh"},
		{[]string{"bash", "-lc", "python3 train.py"}, ""},
		{[]string{"sh", "-s", "arg"}, ""},
		{[]string{"bash", "-"}, ""},
		{[]string{"bash"}, ""},
		{[]string{"bashful", "x.sh"}, ""},
	} {
		got, ok := ScriptOf(tc.argv)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ScriptOf(%q) = %q, %v; want %q", tc.argv, got, ok, tc.want)
		}
	}
}

// TestStartRefusesAMissingScript: a Python (or shell) entrypoint whose script is not
// in the working directory does not start (a *ScriptError naming it and
// the directory), nor do the other processes; one that is there does.
func TestStartRefusesAMissingScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	_, err = Start([]Spec{{Name: "rank-0", Argv: []string{py, "train.py"}, Env: os.Environ(), Dir: dir}})
	var se *ScriptError
	var st *StartError
	if !errors.As(err, &st) || !errors.As(err, &se) || se.Script != "train.py" || se.Path != filepath.Join(dir, "train.py") ||
		!strings.Contains(err.Error(), "the entrypoint's script train.py is not in the processes' working directory "+dir) {
		t.Fatalf("Start: %v; want a ScriptError for train.py in %s", err, dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := Start([]Spec{{Name: "rank-0", Argv: []string{py, "train.py"}, Env: os.Environ(), Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	// A shell script the same way (sh would exit 127 on every launch).
	_, err = Start([]Spec{{Name: "rank-0", Argv: []string{"sh", "-e", "train.sh"}, Env: os.Environ(), Dir: dir}})
	if !errors.As(err, &se) || se.Script != "train.sh" {
		t.Fatalf("Start: %v; want a ScriptError for train.sh", err)
	}
}

// TestExitNamesTheProgram: a failed process's ExitError names the program
// it ran as found in the PATH of its environment (a symbolic link with
// where it leads), and Programs lists what the group runs — a Python
// that lacks a module is usually another Python than the one meant.
func TestExitNamesTheProgram(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	real := filepath.Join(dir, "real-python")
	if err := os.WriteFile(real, []byte("#!/bin/sh\necho \"No module named 'torch'\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(bin, "python9")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"looked up in PATH", []string{"python9", "-c", "pass"}, "python9 = " + filepath.Join(bin, "python9") + " → " + real},
		{"an absolute path", []string{real}, real},
		{"relative to the workdir", []string{"./real-python"}, real},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Start([]Spec{{Name: "rank-0", Argv: tc.argv, Env: env, Dir: dir, LogPath: filepath.Join(dir, "rank-0.log")}})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Programs(); len(got) != 1 || got[0] != tc.want {
				t.Errorf("Programs %q, want [%q]", got, tc.want)
			}
			err = g.Wait(context.Background(), time.Second)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Program != tc.want {
				t.Fatalf("Wait: %v; program %q, want %q", err, ee.Program, tc.want)
			}
		})
	}
}
