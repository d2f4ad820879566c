package activities

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
)

// TestPeersOutwaitARestore: a node that kept its state is ready at once
// while its peer reads the checkpoint (as a peer whose reads are slower
// than the others' is later); when the bucket stops answering reads, the
// reader must be the one to say so (CheckpointUnreachable, and the run
// holds for its storage) while its peer still waits to form the group —
// not the peer first, blaming it for never connecting (the run would
// replace a healthy node, then its replacement); the peer then says it
// too (agreeOnRead), naming no node that read it. The peer's connect
// timeout covers the load's (checkpoint.Options.LoadTimeout); the base
// timeout is set below the request timeout here, so without that the
// peer gives up first.
func TestPeersOutwaitARestore(t *testing.T) {
	const requestTimeout = 2 * time.Second
	// Once on, the bucket takes object reads and never answers them.
	reads := &s3fake.Hang{Match: func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/runs/")
	}}
	bucket := s3fake.Bucket(t, reads.Wrap)
	nodes, m := newNodes(t, 2, bucket)
	for _, n := range nodes {
		n.CheckpointRequestTimeout = requestTimeout
		n.connectWait = 300 * time.Millisecond
	}
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 30, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ref := res[0].Checkpoint
	if ref == nil || ref.Bytes == 0 {
		t.Fatalf("rank 0 stored %+v; want the checkpoint at step 30 with its size", ref)
	}

	// Node 2 lost its state; node 1 keeps its own and reads nothing.
	nodes[1].forget(in, nodes[1].began)
	reads.On.Store(true)
	in.Session, in.From, in.To, in.Restore, in.Checkpoint = "run/act/g1/e2", 30, 60, ref, false
	started := time.Now()
	_, errs, ends := runChunkTimed(t, nodes, in)
	wantLoadError(t, errs[1], spec.ErrTypeCheckpointUnreachable, "node node-2 cannot read the checkpoint at step 30", checkpoint.ErrStalled.Error())
	if reads.Held.Load() == 0 {
		t.Fatal("no read reached the silent bucket")
	}
	// The peer waited for node 2 to join the group and say so: it fails
	// the chunk alike, naming node 2, and nobody as having read it (it
	// kept its state) — the storage, not node 2, is at fault. Had it
	// given up first, it would blame node 2 for never connecting.
	var ae *temporal.ApplicationError
	var f spec.CheckpointFailure
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypeCheckpointUnreachable || ae.Details(&f) != nil {
		t.Fatalf("node 1: %v; want it to outwait node 2's load and report it (CheckpointUnreachable)", errs[0])
	}
	if !slices.Equal(f.Unread, []string{"node-2"}) || len(f.ReadBy) != 0 || !strings.Contains(f.Error, "(no node read it)") {
		t.Errorf("node 1's detail %+v; want node-2 unread, no node having read it", f)
	}
	if !ends[0].After(started.Add(requestTimeout)) {
		t.Errorf("node 1 ended %s after the chunk started; want it to outwait node 2's load (%s or more)", ends[0].Sub(started), requestTimeout)
	}
	want := nodes[0].connectTimeout(in)
	if lo := 300*time.Millisecond + (checkpoint.Options{RequestTimeout: requestTimeout}).LoadTimeout(ref.Bytes); want != lo {
		t.Fatalf("connect timeout %s for a chunk restoring %d bytes; want %s", want, ref.Bytes, lo)
	}
}
