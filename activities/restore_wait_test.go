package activities

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// silentReads is a loopback S3 endpoint (gofakes3 over real HTTP) whose
// object reads, once on, are taken and never answered; the rest (HEAD,
// listings, writes) is served.
type silentReads struct {
	on   atomic.Bool
	held atomic.Int64
}

func (s *silentReads) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.on.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/runs/") {
			s.held.Add(1)
			<-r.Context().Done()
			return
		}
		next.ServeHTTP(w, r)
	})
}

func silentReadsBucket(t *testing.T) (string, *silentReads) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	sr := &silentReads{}
	srv := httptest.NewServer(sr.wrap(gofakes3.New(backend).Server()))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	q := url.Values{"endpoint": {srv.URL}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	return "s3://ckpt?" + q.Encode(), sr
}

// TestPeersOutwaitARestore: a node that kept its state is ready at once
// while its peer reads the checkpoint (as a peer whose reads are slower
// than the others' is later); when the bucket stops answering reads, the
// reader must be the one to say so (CheckpointUnreachable, and the run
// holds for its storage) while its peer still waits to form the group —
// not the peer first, blaming it for never connecting (the run would
// replace a healthy node, then its replacement). The peer's connect timeout covers the load's
// (checkpoint.Options.LoadTimeout); the base timeout is set below the
// request timeout here, so without that the peer gives up first.
func TestPeersOutwaitARestore(t *testing.T) {
	const requestTimeout = 2 * time.Second
	bucket, reads := silentReadsBucket(t)
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
	nodes[1].forget(in)
	reads.on.Store(true)
	in.Session, in.From, in.To, in.Restore, in.Checkpoint = "run/act/g1/e2", 30, 60, ref, false
	_, errs, ends := runChunkTimed(t, nodes, in)
	wantLoadError(t, errs[1], spec.ErrTypeCheckpointUnreachable, "node node-2 cannot read the checkpoint at step 30", checkpoint.ErrStalled.Error())
	if reads.held.Load() == 0 {
		t.Fatal("no read reached the silent bucket")
	}
	// (Alone, the peer ends by naming node 2 once its own timeout is out;
	// in a run, the workflow cancels it when node 2 reports.)
	var ae *temporal.ApplicationError
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypePeerFailed {
		t.Fatalf("node 1: %v; want it to name node 2 once its connect timeout is out", errs[0])
	}
	if !ends[0].After(ends[1]) {
		t.Fatalf("node 1 gave up on forming the group %s before node 2 reported the silent bucket; want it to outwait the load",
			ends[1].Sub(ends[0]))
	}
	want := nodes[0].connectTimeout(in)
	if lo := 300*time.Millisecond + (checkpoint.Options{RequestTimeout: requestTimeout}).LoadTimeout(ref.Bytes); want != lo {
		t.Fatalf("connect timeout %s for a chunk restoring %d bytes; want %s", want, ref.Bytes, lo)
	}
}
