package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is one process for Start.
type Spec struct {
	// Name labels the process in errors ("rank-3", "scheduler").
	Name string
	// Rank is its global rank (-1: not a rank).
	Rank int
	// Argv is the command; a program name without '/' is looked up in the
	// PATH of Env (else of this process), a relative path from Dir.
	Argv []string
	// Env is the whole environment (KEY=VALUE).
	Env []string
	// Dir is the working directory ("" : this process's).
	Dir string
	// LogPath receives stdout and stderr, truncated at start, through a
	// pipe: it keeps the output's head and a rolling tail, at most LogMax
	// bytes in all (0: DefaultLogMax; below MinLogMax, MinLogMax;
	// negative: no cap), with a marker line where it dropped output
	// (DroppedMarker).
	LogPath string
	LogMax  int64
}

// Exit is how one process ended.
type Exit struct {
	Name string
	Rank int
	Pid  int
	// Code is the exit status; -1 when a signal killed it.
	Code int
	// Signal killed it (0: none).
	Signal syscall.Signal
	// At is when it was reaped.
	At time.Time
}

// OK reports a clean exit (status 0).
func (e Exit) OK() bool { return e.Code == 0 && e.Signal == 0 }

func (e Exit) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("%s (pid %d) killed by %s", e.Name, e.Pid, SignalName(e.Signal))
	}
	return fmt.Sprintf("%s (pid %d) exited with status %d", e.Name, e.Pid, e.Code)
}

// ExitError reports the first process of a group that did not exit
// cleanly, with the end of its output and the program it ran.
type ExitError struct {
	Exit
	LogPath string
	Tail    string
	// Program is the program as it was found and run (ProgramText: the
	// entrypoint's name and the path it resolved to).
	Program string
}

func (e *ExitError) Error() string {
	last := lastLine(e.Tail)
	if last == "" {
		return e.Exit.String()
	}
	return e.Exit.String() + ": " + last
}

// StartError reports a process that could not be started.
type StartError struct {
	Name string
	Err  error
}

func (e *StartError) Error() string { return fmt.Sprintf("start %s: %v", e.Name, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// TailBytes is how much of a log ExitError.Tail keeps.
const TailBytes = 4 << 10

// Group is a set of processes started together, each the leader of its own
// process group (so that stopping it reaches whatever it spawned), each
// with SIGKILL as its parent-death signal (so that a node worker killed
// outright takes them along).
type Group struct {
	procs []*proc
	exits chan Exit
	// release ends the OS thread that started the processes (see Start).
	release chan struct{}
	stopMu  sync.Mutex
	stopped bool
	// ignored are the failed exits Wait did not count (Ignored).
	ignoredMu sync.Mutex
	ignored   []Exit
}

type proc struct {
	spec Spec
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	exit Exit
	// program is ProgramText of what it runs.
	program string
	// logDone is closed once its log has all the output (nil: no log).
	logDone chan struct{}
}

// Start starts every process of specs, or none: when one cannot start, the
// ones already started are killed and a *StartError returned.
//
// The processes are forked from one OS thread locked for the group's
// lifetime: Linux delivers the parent-death signal when the forking
// *thread* exits (golang/go#27505), so the thread must outlive them.
func Start(specs []Spec) (*Group, error) {
	g := &Group{exits: make(chan Exit, len(specs)), release: make(chan struct{})}
	type result struct{ err error }
	started := make(chan result)
	go func() {
		runtime.LockOSThread()
		started <- result{g.startAll(specs)}
		<-g.release
		runtime.UnlockOSThread()
	}()
	if r := <-started; r.err != nil {
		g.kill()
		g.waitAll()
		close(g.release)
		return nil, r.err
	}
	go func() {
		g.waitAll()
		close(g.release)
	}()
	return g, nil
}

func (g *Group) startAll(specs []Spec) error {
	for _, s := range specs {
		if len(s.Argv) == 0 {
			return &StartError{Name: s.Name, Err: errors.New("empty command")}
		}
		prog, err := lookPath(s.Argv[0], s.Env, s.Dir)
		if err != nil {
			return &StartError{Name: s.Name, Err: err}
		}
		if err := checkScript(s.Argv, s.Dir); err != nil {
			return &StartError{Name: s.Name, Err: err}
		}
		if s.LogPath != "" {
			if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
				return &StartError{Name: s.Name, Err: err}
			}
		}
		// Output goes through a pipe to a goroutine that keeps the log
		// bounded (copyLog). Wait never waits on that goroutine, which a
		// grandchild holding the pipe could keep reading: Stop waits for
		// it a bounded while (logDrain).
		var logf, pr, pw *os.File
		if s.LogPath != "" {
			logf, err = os.OpenFile(s.LogPath, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
			if err == nil {
				if pr, pw, err = os.Pipe(); err != nil {
					logf.Close()
				}
			}
		} else {
			pw, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		}
		if err != nil {
			return &StartError{Name: s.Name, Err: err}
		}
		cmd := &exec.Cmd{Path: prog, Args: slices.Clone(s.Argv), Env: s.Env, Dir: s.Dir, Stdout: pw, Stderr: pw}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		pw.Close() // the child has its own descriptor
		if err != nil {
			if pr != nil {
				pr.Close()
				logf.Close()
			}
			return &StartError{Name: s.Name, Err: err}
		}
		var logDone chan struct{}
		if pr != nil {
			logDone = make(chan struct{})
			go copyLog(pr, newCappedLog(logf, logMax(s.LogMax)), logDone)
		}
		p := &proc{spec: s, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), logDone: logDone,
			program: ProgramText(s.Argv[0], prog, s.Dir)}
		g.procs = append(g.procs, p)
		go p.wait(g.exits)
	}
	return nil
}

func (p *proc) wait(exits chan<- Exit) {
	err := p.cmd.Wait()
	e := Exit{Name: p.spec.Name, Rank: p.spec.Rank, Pid: p.pid, At: time.Now()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		e.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Code, e.Signal = -1, ws.Signal()
		}
	default:
		e.Code = -1
	}
	p.exit = e
	close(p.done)
	exits <- e
}

func (g *Group) waitAll() {
	for _, p := range g.procs {
		<-p.done
	}
}

// Pids are the processes' ids (the leaders of their process groups).
func (g *Group) Pids() []int {
	out := make([]int, len(g.procs))
	for i, p := range g.procs {
		out[i] = p.pid
	}
	return out
}

// Programs are the programs the processes run, as ProgramText says
// them, each once, in the order of the processes.
func (g *Group) Programs() []string {
	var out []string
	for _, p := range g.procs {
		if !slices.Contains(out, p.program) {
			out = append(out, p.program)
		}
	}
	return out
}

// ProgramText says which program an entrypoint's argv0 ran, resolved (as
// lookPath found it) to path from dir: "python3 = /usr/bin/python3" for a
// name looked up in PATH, the absolute path for one given as a path, and
// the file a symbolic link leads to after an arrow
// ("/usr/bin/python3 → /usr/bin/python3.11"). A Python that lacks a
// module is often another Python than the one meant: this names it.
func ProgramText(argv0, path, dir string) string {
	abs := path
	if !filepath.IsAbs(abs) && dir != "" {
		abs = filepath.Join(dir, abs)
	}
	if a, err := filepath.Abs(abs); err == nil {
		abs = a
	}
	text := abs
	if !strings.Contains(argv0, "/") {
		text = argv0 + " = " + abs
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		text += " → " + real
	}
	return text
}

// Exits delivers each process's exit once, in the order they are reaped.
// Wait consumes them; use one or the other.
func (g *Group) Exits() <-chan Exit { return g.exits }

// signal sends sig to every process group (leaders already reaped too:
// what they spawned may still run).
func (g *Group) signal(sig syscall.Signal) {
	for _, p := range g.procs {
		_ = syscall.Kill(-p.pid, sig)
	}
}

func (g *Group) kill() { g.signal(syscall.SIGKILL) }

// alive reports whether any process of the groups still exists.
func (g *Group) alive() bool {
	for _, p := range g.procs {
		select {
		case <-p.done:
		default:
			return true
		}
		if syscall.Kill(-p.pid, 0) == nil && groupRuns(p.pid) {
			return true
		}
	}
	return false
}

// groupRuns reports whether process group pgid has a member that is not a
// zombie. Reparented grandchildren may stay zombies for a while (or for
// good, under a PID 1 that does not reap); they run nothing.
func groupRuns(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: assume it runs
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		if f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// Stop ends every process and whatever each spawned: SIGTERM to each
// process group, SIGKILL to those left after grace, then it waits until
// every leader is reaped (and, for at most a few seconds more, until the
// groups are empty). Safe to call more than once and concurrently.
func (g *Group) Stop(grace time.Duration) {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if !g.stopped {
		g.stopped = true
		g.signal(syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for g.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	g.kill()
	g.waitAll()
	// Grandchildren are reparented to init (or a subreaper) and may take
	// a moment to be reaped; zombies never leave the group, so bound it.
	for end := time.Now().Add(3 * time.Second); g.alive() && time.Now().Before(end); {
		g.kill()
		time.Sleep(20 * time.Millisecond)
	}
	g.drainLogs(logDrain)
}

// logDrain bounds how long Stop waits for the logs to hold the last of
// the output: a process that left its process group may still hold its
// pipe.
const logDrain = 2 * time.Second

// drainLogs waits, at most d in all, until every log has the whole output
// of its process (every holder of its pipe closed it).
func (g *Group) drainLogs(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, p := range g.procs {
		if p.logDone == nil {
			continue
		}
		select {
		case <-p.logDone:
		case <-t.C:
			return
		}
	}
}

// AuxSettle is how long Wait holds the failure of a process that is not a
// rank (msrun's scheduler) while ranks still run: when they all exit
// cleanly meanwhile, the job finished and the failure is not its own.
const AuxSettle = time.Second

// Wait supervises the group until every process has exited cleanly (nil),
// one exits otherwise (the rest are stopped, with grace, and an
// *ExitError for that one is returned), or ctx ends (all are stopped and
// ctx's error returned). Whatever the processes spawned is stopped too
// before Wait returns: nothing outlives it.
//
// Processes that are not ranks (Spec.Rank < 0: msrun's scheduler) serve
// the ranks: once every rank has exited cleanly the job is done, and
// Wait stops those still running (SIGTERM, SIGKILL after grace) and
// returns nil, however they end — Ignored lists the ones that failed. One
// failing while ranks run is the group's failure, unless every rank then
// exits cleanly within AuxSettle (the two ends raced). In a group of no
// ranks at all every process counts.
func (g *Group) Wait(ctx context.Context, grace time.Duration) error {
	left, ranks := len(g.procs), 0
	for _, p := range g.procs {
		if p.spec.Rank >= 0 {
			ranks++
		}
	}
	hasRanks := ranks > 0
	fail := func(e Exit) error {
		g.Stop(grace)
		p := g.byName(e.Name)
		return &ExitError{Exit: e, LogPath: p.spec.LogPath, Tail: Tail(p.spec.LogPath, TailBytes), Program: p.program}
	}
	var held *Exit // a non-rank's failure while ranks run
	var settle <-chan time.Time
	for left > 0 {
		if hasRanks && ranks == 0 {
			// Every rank exited cleanly: what serves them is stopped.
			if held != nil {
				g.ignore(*held)
			}
			g.Stop(grace)
			for ; left > 0; left-- {
				if e := <-g.exits; !e.OK() {
					g.ignore(e)
				}
			}
			return nil
		}
		select {
		case e := <-g.exits:
			left--
			if e.Rank >= 0 {
				ranks--
			}
			switch {
			case e.OK():
			case e.Rank < 0 && hasRanks && ranks == 0:
				g.ignore(e) // (after the ranks)
			case e.Rank < 0 && hasRanks:
				if held == nil {
					held, settle = &e, time.After(AuxSettle)
				}
			case held != nil:
				return fail(*held) // (the first failure)
			default:
				return fail(e)
			}
		case <-settle:
			return fail(*held)
		case <-ctx.Done():
			g.Stop(grace)
			return ctx.Err()
		}
	}
	if held != nil { // (the ranks, then the last of them, exited cleanly)
		g.ignore(*held)
	}
	g.Stop(grace) // daemons the script left behind
	return nil
}

func (g *Group) ignore(e Exit) {
	g.ignoredMu.Lock()
	defer g.ignoredMu.Unlock()
	g.ignored = append(g.ignored, e)
}

// Ignored lists the processes that are not ranks and failed (or were
// stopped) once every rank had exited cleanly, which Wait did not count as
// the group's failure.
func (g *Group) Ignored() []Exit {
	g.ignoredMu.Lock()
	defer g.ignoredMu.Unlock()
	return slices.Clone(g.ignored)
}

func (g *Group) byName(name string) *proc {
	for _, p := range g.procs {
		if p.spec.Name == name {
			return p
		}
	}
	return &proc{}
}

// Tail returns up to max bytes from the end of the file at path, starting
// at a line boundary when it had to cut ("" when it cannot be read).
func Tail(path string, max int) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max64(0, st.Size()-int64(max))
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := strings.IndexByte(string(buf), '\n'); i >= 0 && i+1 < len(buf) {
			buf = buf[i+1:]
		}
	}
	return string(buf)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	const maxLen = 300
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

// lookPath finds prog as the child would: in the PATH of its environment
// (this process's when env has none). Names with a '/' are left to exec,
// relative to dir.
func lookPath(prog string, env []string, dir string) (string, error) {
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			return "", err
		}
		return prog, nil
	}
	pathEnv, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv, found = v, true
		}
	}
	if !found {
		pathEnv = os.Getenv("PATH")
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) && dir != "" {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH", prog)
}

// ScriptError reports a script an entrypoint names for Python or a shell
// that is not there: the interpreter would start and exit at once, on
// every launch.
type ScriptError struct {
	// Script is the path as the entrypoint names it; Path where it was
	// looked for (Script from Dir).
	Script, Path string
	// Dir is the processes' working directory ("": the supervisor's).
	Dir string
	Err error
}

func (e *ScriptError) Error() string {
	where := "the processes' working directory " + e.Dir
	if e.Dir == "" {
		where = "the node worker's working directory"
	}
	if filepath.IsAbs(e.Script) {
		return fmt.Sprintf("the entrypoint's script %s: %v", e.Script, e.Err)
	}
	return fmt.Sprintf("the entrypoint's script %s is not in %s (%v)", e.Script, where, e.Err)
}

func (e *ScriptError) Unwrap() error { return e.Err }

// pythonName and shellName match the interpreters ScriptOf knows.
var (
	pythonName = regexp.MustCompile(`^(python|pypy)[0-9.]*$`)
	shellName  = regexp.MustCompile(`^(ba|da|k|z)?sh$`)
)

// ScriptOf returns the script file a Python interpreter or a POSIX shell in
// argv runs (its first operand), and false when argv runs no interpreter
// ScriptOf knows or no file (-c, -m, -s, - for standard input, no
// operand).
func ScriptOf(argv []string) (string, bool) {
	if len(argv) < 2 {
		return "", false
	}
	if shellName.MatchString(filepath.Base(argv[0])) {
		return shellScriptOf(argv)
	}
	if !pythonName.MatchString(filepath.Base(argv[0])) {
		return "", false
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return operandAfter(argv, i)
		case a == "-":
			return "", false
		case a == "--check-hash-based-pycs":
			i++
		case strings.HasPrefix(a, "--"): // --help, --version …
		case strings.HasPrefix(a, "-"):
			// A cluster of flags: c and m take the rest (no file), W and X
			// their value (the rest, else the next argument).
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'c', 'm':
					return "", false
				case 'W', 'X':
					if j == len(a)-1 {
						i++
					}
					j = len(a)
				}
			}
		default:
			return a, true
		}
	}
	return "", false
}

// shellScriptOf is ScriptOf for a shell: its first operand after the
// options (-o and +o take a value; -c runs a string, -s standard input;
// --norc, --login … stand alone; -- ends them).
func shellScriptOf(argv []string) (string, bool) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return operandAfter(argv, i)
		case a == "-" || a == "+":
			return "", false
		case strings.HasPrefix(a, "--"):
			if a == "--rcfile" || a == "--init-file" {
				i++
			}
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+"):
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'c', 's':
					return "", false
				case 'o', 'O':
					i++ // its option name
				}
			}
		default:
			return a, true
		}
	}
	return "", false
}

// operandAfter is the operand after the "--" at argv[i], if any.
func operandAfter(argv []string, i int) (string, bool) {
	if i+1 < len(argv) {
		return argv[i+1], true
	}
	return "", false
}

// checkScript refuses argv whose script (ScriptOf) is not a file, from
// dir.
func checkScript(argv []string, dir string) error {
	script, ok := ScriptOf(argv)
	if !ok {
		return nil
	}
	p := script
	if !filepath.IsAbs(p) && dir != "" {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return &ScriptError{Script: script, Path: p, Dir: dir, Err: err}
	case st.IsDir():
		// (python runs a directory's __main__.py)
		if _, err := os.Stat(filepath.Join(p, "__main__.py")); err != nil {
			return &ScriptError{Script: script, Path: p, Dir: dir, Err: fmt.Errorf("a directory without __main__.py")}
		}
	}
	return nil
}

// SignalName is a signal's conventional name, e.g. "SIGKILL".
func SignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
		syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
