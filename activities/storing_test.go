package activities

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
)

// TestTrainChunkSaysItStores: while rank 0 stores the chunk's checkpoint
// at its end (a bucket that holds the upload), its heartbeats say so —
// ChunkProgress.Storing, the step, since when — rather than leave the
// status to guess from a chunk stepped to its end and silent; once
// stored, the chunk ends.
func TestTrainChunkSaysItStores(t *testing.T) {
	// Once on, the bucket takes the checkpoint's writes and never answers
	// them; the first beat that says "storing" once one is held lets them
	// through.
	writes := &s3fake.Hang{Match: func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/runs/")
	}}
	writes.On.Store(true)
	bucket := s3fake.Bucket(t, writes.Wrap)
	nodes, m := newNodes(t, 2, bucket)
	for _, n := range nodes {
		n.CheckpointRequestTimeout = 500 * time.Millisecond
	}
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 30, Checkpoint: true}

	var mu sync.Mutex
	var storing []spec.ChunkProgress // rank 0's beats that said so
	// (The SDK throttles what reaches a test environment's heartbeat
	// listener: the node's own beats are observed.)
	nodes[0].observeBeats = func(p spec.ChunkProgress) {
		if p.Storing == 0 {
			return
		}
		mu.Lock()
		storing = append(storing, p)
		mu.Unlock()
		if writes.Held.Load() > 0 { // (a beat before the first write: not yet)
			writes.On.Store(false)
		}
	}
	res, errs := runChunk(t, nodes, in)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if res[0].Checkpoint == nil || res[0].Checkpoint.Step != 30 {
		t.Fatalf("rank 0 stored %+v; want the checkpoint at step 30", res[0].Checkpoint)
	}
	if writes.Held.Load() == 0 {
		t.Fatal("no write reached the silent bucket")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(storing) == 0 {
		t.Fatal("no heartbeat said the node was storing its checkpoint")
	}
	if p := storing[0]; p.Storing != 30 || p.Step != 30 || p.StoringSince.IsZero() || time.Since(p.StoringSince) > time.Minute {
		t.Errorf("the beat said %+v; want storing 30 at step 30, since a moment ago", p)
	}
}
