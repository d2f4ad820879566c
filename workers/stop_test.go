package workers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeWorker's Stop returns once release is closed (the activities in
// flight ended, or the SDK's stop timeout passed).
type fakeWorker struct {
	called  chan struct{}
	release chan struct{}
	// node's chunks end with the Stop, unless they outlast the grace.
	node     *fakeNode
	outlasts bool
}

func (w *fakeWorker) Stop() {
	close(w.called)
	<-w.release
	if !w.outlasts {
		w.node.running = 0
	}
}

// fakeNode has running chunks and, with upload, a checkpoint uploading
// until ctx ends (or done is closed).
type fakeNode struct {
	running int
	upload  bool
	done    chan struct{}
	settle  chan time.Time // the deadline Settle was given
	comm    *fakeListener
	// commOpen: the listener was still open when Settle began.
	commOpen bool
	// ended: EndChunks was called; endedFirst: before the worker's Stop.
	ended, endedFirst bool
	worker            *fakeWorker
}

// fakeListener records its Close.
type fakeListener struct{ closed bool }

func (l *fakeListener) Close() error {
	l.closed = true
	return nil
}

func (n *fakeNode) Running() int { return n.running }

func (n *fakeNode) EndChunks() {
	n.ended = true
	select {
	case <-n.worker.called:
	default:
		n.endedFirst = true
	}
}

func (n *fakeNode) Settle(ctx context.Context) (string, int64, error) {
	d, _ := ctx.Deadline()
	n.commOpen = !n.comm.closed
	n.settle <- d
	if !n.upload {
		return "", 0, nil
	}
	select {
	case <-n.done:
		return "run/x", 400, nil
	case <-ctx.Done():
		return "run/x", 400, context.Cause(ctx)
	}
}

// TestStop: a stopping node worker asks its chunks in flight to end
// early, waits for its worker's Stop (the chunk in flight), closes its collective listener, and then, within what
// is left of the grace, waits for the checkpoint upload; a second signal
// (Hurry) ends either wait at once.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		running  int
		outlasts bool // the chunk in flight outlasts the grace
		upload   bool
		// hurry: close Hurry while the worker stops (1) or while the
		// upload settles (2); 0: never.
		hurry int
		// finish: the upload finishes (else it waits out the grace).
		finish bool
		logs   []string
	}{
		{name: "idle", logs: nil},
		{name: "chunk in flight", running: 1,
			logs: []string{"stopping: no new chunks; ending the one(s) in flight at a step the run's nodes agree on, with a checkpoint there (a second signal stops at once)"}},
		{name: "chunk outlasts the grace", running: 1, outlasts: true,
			logs: []string{"stopping: no new chunks; ending the one(s) in flight at a step the run's nodes agree on, with a checkpoint there (a second signal stops at once)",
				"stop grace over: the chunk in flight was cancelled; its run recovers from its last checkpoint"}},
		{name: "hurried during the chunk", running: 1, hurry: 1,
			logs: []string{"stopping: no new chunks; ending the one(s) in flight at a step the run's nodes agree on, with a checkpoint there (a second signal stops at once)",
				"stopping now: the chunk in flight is abandoned; its run recovers from its last checkpoint"}},
		{name: "upload finishes", upload: true, finish: true,
			logs: []string{"checkpoint upload finished before stopping"}},
		{name: "upload outlasts the grace", upload: true,
			logs: []string{"stopping with the checkpoint upload unfinished: the run recovers from an earlier one"}},
		{name: "hurried during the upload", upload: true, hurry: 2,
			logs: []string{"stopping with the checkpoint upload unfinished: the run recovers from an earlier one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &fakeNode{running: tc.running, upload: tc.upload, done: make(chan struct{}), settle: make(chan time.Time, 1),
				comm: &fakeListener{}}
			w := &fakeWorker{called: make(chan struct{}), release: make(chan struct{}), node: n, outlasts: tc.outlasts}
			n.worker = w
			hurry := make(chan struct{})
			const grace = 300 * time.Millisecond
			core, logs := observer.New(zap.InfoLevel)
			start := time.Now()
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				stop(w, n, n.comm, NodeOptions{StopGrace: grace, Hurry: hurry}, errors.New("terminated signal received"), zap.New(core))
			}()
			<-w.called
			select {
			case <-returned:
				t.Fatal("stop returned before the worker stopped")
			default:
			}
			if tc.hurry == 1 {
				close(hurry)
				<-returned // without the worker's Stop returning
				close(w.release)
			} else {
				close(w.release)
				deadline := <-n.settle
				if d := deadline.Sub(start); d < grace || d > grace+time.Second {
					t.Errorf("the upload may take until %v after the stop began, want the grace, %v", d, grace)
				}
				switch {
				case tc.hurry == 2:
					close(hurry)
				case tc.finish:
					close(n.done)
				}
				<-returned
			}
			if tc.hurry != 1 && (n.commOpen || !n.comm.closed) {
				t.Errorf("collective listener open while the upload settled: %v, closed at the end: %v; want it closed once the worker stopped",
					n.commOpen, n.comm.closed)
			}
			if !n.ended || !n.endedFirst {
				t.Errorf("chunks asked to end early: %v, before the worker's Stop: %v; want both", n.ended, n.endedFirst)
			}
			var got []string
			for _, e := range logs.All() {
				got = append(got, e.Message)
			}
			// Every stop, idle or not, says that it begins, why, and that
			// it ended.
			want := append(append([]string{"node worker stopping"}, tc.logs...), "node worker stopped")
			if !slices.Equal(got, want) {
				t.Errorf("logged %q, want %q", got, want)
			}
			if all := logs.All(); len(all) > 0 {
				if first := all[0]; first.Level != zap.InfoLevel || first.ContextMap()["reason"] != "terminated signal received" {
					t.Errorf("first entry %q at %v with %v; want info with the reason", first.Message, first.Level, first.ContextMap())
				}
			}
			if tc.hurry == 0 && tc.upload && !tc.finish && time.Since(start) < grace {
				t.Errorf("returned after %v, before the grace (%v) was over", time.Since(start), grace)
			}
		})
	}
}
