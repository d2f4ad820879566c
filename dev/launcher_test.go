package dev

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestStoppedProcess: StoppedAt sees a SIGSTOPped child, reports nothing
// for a running one, and Stop ends a stopped child by SIGTERM (SIGCONT
// delivers it) long before its grace runs out.
func TestStoppedProcess(t *testing.T) {
	l := &Launcher{Command: func(args ...string) *exec.Cmd { return exec.Command("sleep", args...) }}
	p, err := l.Start("sleeper", "60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if l.Proc("sleeper") != p || l.Proc("other") != nil {
		t.Fatalf("Proc lookup: %v, %v", l.Proc("sleeper"), l.Proc("other"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if at := p.StoppedAt(ctx, time.Millisecond); !at.IsZero() {
		t.Fatalf("a running process seen stopped at %v", at)
	}
	before := time.Now()
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	at := p.StoppedAt(ctx2, time.Millisecond)
	if at.IsZero() || at.Before(before) {
		t.Fatalf("stopped process seen at %v (stopped after %v)", at, before)
	}
	const grace = 20 * time.Second
	start := time.Now()
	if err := p.Stop(grace); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if d := time.Since(start); d > grace/2 {
		t.Errorf("a stopped process took %v to stop (grace %v): SIGTERM was not delivered", d, grace)
	}
	if at := p.StoppedAt(context.Background(), time.Millisecond); !at.IsZero() {
		t.Errorf("an exited process seen stopped at %v", at)
	}
}
