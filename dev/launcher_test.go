package dev

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestLauncherAppendsLogs: a process started under a name whose log
// another one still writes (a second quickstart on the same data dir, a
// node worker started again) adds its lines after the earlier ones: the
// log was truncated (os.Create) while the first writer kept its offset,
// leaving NUL bytes and losing its first lines.
func TestLauncherAppendsLogs(t *testing.T) {
	dir := t.TempDir()
	sh := func(args ...string) *exec.Cmd { return exec.Command("sh", args...) }
	first := &Launcher{Command: sh, LogDir: dir}
	// Writes a line, waits until told (a file appears), writes another.
	go1 := filepath.Join(dir, "go1")
	p1, err := first.Start("node-1", "-c", `echo first-a; while [ ! -e "$0" ]; do sleep 0.01; done; echo first-b`, go1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.StopAll(time.Second) })
	log := filepath.Join(dir, "node-1.log")
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(log)
			if strings.Contains(string(b), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("log never said %q:\n%q", want, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("\nfirst-a\n") // (the start line quotes it too)
	second := &Launcher{Command: sh, LogDir: dir}
	p2, err := second.Start("node-1", "-c", "echo second")
	if err != nil {
		t.Fatal(err)
	}
	<-p2.Done()
	if err := os.WriteFile(go1, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-p1.Done()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.ContainsRune(got, 0) || strings.Count(got, "=== ") != 2 || !strings.Contains(got, "started node-1: cann-train -c") {
		t.Fatalf("log %q: want two start lines and no NUL bytes", got)
	}
	var out []string // (the start lines quote the scripts)
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if !strings.HasPrefix(line, "=== ") {
			out = append(out, line)
		}
	}
	if strings.Join(out, ",") != "first-a,second,first-b" {
		t.Errorf("log %q: want first-a, second, first-b in that order", got)
	}
}
