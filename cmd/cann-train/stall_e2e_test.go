package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestRunOutlivesTemporalStalls: the node workers reach Temporal through
// a proxy that cuts their connections and refuses new ones for a few
// seconds, twice — a blip shorter than the heartbeat timeout, as a
// stalled or restarting server, or a network, gives. The SDK retries a
// heartbeat that fails so (Unavailable) for about a second, then stops
// the activity with the RPC's error as its context's cause: each chunk
// in flight stops, on live nodes. The run goes on on the same nodes from its last
// checkpoint, blaming none and counting no restart (max_restarts 1: the
// second stall failed the run, "gave up after 1 restart(s): … context
// canceled"), and says "training" again after each, and how far the chunk
// got (its nodes' TemporalUnreachable errors say it). Its history is the
// replay test's trainingrun_temporal_stall.json.
func TestRunOutlivesTemporalStalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv, _ := startServerClient(ctx, t)
	c := controlInProcess(ctx, t, srv)
	px := startCutProxy(t, srv.FrontendAddr())
	l := newLauncher(dir)
	defer func() { _ = l.StopAll(5 * time.Second) }()
	for _, id := range []string{"node-1", "node-2"} {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", px.addr(),
			"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt")); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, 2)

	// Chunks of a few seconds, cut near their start: the SDK stops an
	// activity up to 2 s into a cut (its next heartbeat, then a second of
	// retries), and a chunk that ends first, or a cut between chunks,
	// costs nothing.
	const chunk = 4000
	s := spec.RunSpec{Name: "stall", Nodes: 2, Steps: 3 * chunk, ChunkSteps: chunk, CheckpointEvery: chunk, MaxRestarts: 1,
		HeartbeatTimeout: spec.Duration(30 * time.Second)}.WithDefaults() // (far above the cut, and a loaded host's pauses)
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for i := range 2 {
		untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a chunk just begun", func(st spec.RunStatus, live *spec.ChunkProgress) bool {
			return st.Phase == spec.PhaseTraining && len(st.Recoveries) == i && live != nil &&
				live.To-live.Step >= chunk*3/4 // (its first beats: a heartbeat's details reach the server once a second)
		})
		px.cut(3 * time.Second)
		st := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the recovery from the stall", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
			return len(st.Recoveries) > i && st.Step > st.Recoveries[i].ResumeStep
		})
		if st.Phase != spec.PhaseTraining {
			t.Errorf("after stall %d: %s, want training", i+1, st.Phase)
		}
	}
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d: want completed", st.Phase, st.Step)
	}
	if len(st.Recoveries) != 2 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("recoveries %+v: want one per stall", st.Recoveries)
	}
	for i, rec := range st.Recoveries {
		t.Logf("stall %d: %s; first step %.2fs after the failure was seen", i+1, rec.Reason, rec.ResumedAt.Sub(rec.SeenAt).Seconds())
		if !rec.Outage || len(rec.FailedNodes) != 0 || len(rec.Replacement) != 0 ||
			!strings.Contains(rec.Reason, "could not reach Temporal to heartbeat") || !strings.Contains(rec.Reason, "no restart counted") {
			t.Errorf("recovery %d %+v: want the stall said, no node failed or replaced, no restart counted", i+1, rec)
		}
		// The stalled nodes said how far they got (versionUnreachedStep).
		if rec.StepUnknown || rec.FailedAtStep <= rec.AtStep || rec.LostSteps != rec.FailedAtStep-rec.ResumeStep {
			t.Errorf("recovery %d: at step %d of the chunk from %d (unknown: %v), %d lost; want the step the nodes reached",
				i+1, rec.FailedAtStep, rec.AtStep, rec.StepUnknown, rec.LostSteps)
		}
	}
	noNodeMarkedFailed(ctx, t, c, "Temporal stalled, not the node")
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_temporal_stall.json")
}

// cutProxy relays TCP connections to a backend and can cut the way for
// a while (cut): it closes the connections it relays and drops new ones
// until the time is up, as a server that restarts or a network that
// blips does.
type cutProxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	until   time.Time             // connections are dropped until then
	conns   map[net.Conn]net.Conn // client side → backend side
}

func startCutProxy(t *testing.T, backend string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, backend: backend, conns: map[net.Conn]net.Conn{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			cut := time.Now().Before(p.until)
			p.mu.Unlock()
			if cut {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in] = out
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); relay(out, in) }()
			go func() { defer wg.Done(); relay(in, out) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
		wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cut closes every relayed connection and drops new ones for d.
func (p *cutProxy) cut(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
	p.closeAll()
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for in, out := range p.conns {
		in.Close()
		out.Close()
		delete(p.conns, in)
	}
}

// relay copies src to dst until either closes.
func relay(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	_, _ = io.Copy(dst, src)
}
