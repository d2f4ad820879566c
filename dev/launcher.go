package dev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cann-train/cann-train/internal/procattr"
)

// CommandFunc builds the command that runs `cann-train <args...>`. The
// default re-executes this binary; tests substitute their own binary.
type CommandFunc func(args ...string) *exec.Cmd

// SelfCommand runs this executable with args.
func SelfCommand(args ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return exec.Command(self, args...)
}

// Proc is one child worker process.
type Proc struct {
	Name     string
	Args     []string
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
	exitedAt time.Time
}

// ExitedAt is when the process was seen to exit, valid after Done.
func (p *Proc) ExitedAt() time.Time { return p.exitedAt }

// Pid of the running process.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit error, valid after Done.
func (p *Proc) Err() error { return p.err }

// Kill sends SIGKILL: the process gets no chance to clean up, as when a
// machine dies.
func (p *Proc) Kill() error { return p.cmd.Process.Kill() }

// Stop asks the process to exit (SIGTERM, and SIGCONT so that a stopped
// process gets it) and kills it after grace.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("stop %s: killed after %s", p.Name, grace)
	}
}

// StoppedAt polls the process's state every interval until it is stopped
// (SIGSTOP: state T or t in /proc/<pid>/stat), it exits or ctx ends, and
// returns when it first saw it stopped (zero if it did not).
func (p *Proc) StoppedAt(ctx context.Context, every time.Duration) time.Time {
	path := fmt.Sprintf("/proc/%d/stat", p.Pid())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			// pid (comm) state …
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
				return time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-p.done:
			return time.Time{}
		case <-t.C:
		}
	}
}

// Launcher starts local worker processes that talk to one Temporal.
type Launcher struct {
	// Command builds a `cann-train` invocation. Default SelfCommand.
	Command CommandFunc
	// LogDir receives one <name>.log per process, appended to (each start
	// marked by a line of its own): a process started again under the
	// name, or by another launcher on the same directory, adds its lines
	// after the earlier ones and truncates none a running process still
	// writes. Empty: inherit stderr.
	LogDir string
	// Env is added to each child's environment.
	Env []string

	mu    sync.Mutex
	procs []*Proc
}

// Start launches `cann-train <args...>` as a child named name. On Linux
// the child dies with the launcher (procattr.DieWithParent): a launcher that
// crashes or is SIGKILLed leaves no worker running on.
func (l *Launcher) Start(name string, args ...string) (*Proc, error) {
	mk := l.Command
	if mk == nil {
		mk = SelfCommand
	}
	cmd := mk(args...)
	procattr.DieWithParent(cmd)
	cmd.Env = append(append(os.Environ(), cmd.Env...), l.Env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	var logFile *os.File
	if l.LogDir != "" {
		if err := os.MkdirAll(l.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("log dir: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(l.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log file for %s: %w", name, err)
		}
		if _, err := fmt.Fprintf(f, "=== %s started %s: cann-train %s\n", time.Now().UTC().Format(time.RFC3339), name, strings.Join(args, " ")); err != nil {
			f.Close()
			return nil, fmt.Errorf("log file for %s: %w", name, err)
		}
		logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.exitedAt = time.Now()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// Proc is the last child started as name (nil if none).
func (l *Launcher) Proc(name string) *Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.procs) - 1; i >= 0; i-- {
		if l.procs[i].Name == name {
			return l.procs[i]
		}
	}
	return nil
}

// StopAll stops every child still running.
func (l *Launcher) StopAll(grace time.Duration) error {
	l.mu.Lock()
	procs := append([]*Proc(nil), l.procs...)
	l.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Stop(grace)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
