package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// TestTrainChunkCollectsOldChunks: rank 0's node deletes the chunks its
// retention left unreferenced (with the grace period off), and only those:
// every retained checkpoint still loads, and the bucket holds fewer chunk
// objects than the same run's with the default hour of grace, where none
// is old enough to go.
func TestTrainChunkCollectsOldChunks(t *testing.T) {
	const chunks = spec.DefaultKeepCheckpoints + 4
	run := func(t *testing.T, grace time.Duration) (url string, dir string, objects int) {
		dir = t.TempDir()
		url = "file://" + dir
		nodes, m := newNodes(t, 1, url)
		nodes[0].CheckpointGCGrace = grace
		s := spec.RunSpec{Name: "gc", Nodes: 1, Steps: 2 * chunks, ChunkSteps: 2}.WithDefaults()
		for c := range chunks {
			in := spec.ChunkInput{RunID: "run/gc", Spec: s, Membership: m, Session: fmt.Sprintf("run/gc/g1/e%d", c+1), Token: "secret",
				From: int64(2 * c), To: int64(2*c + 2), Checkpoint: true}
			if _, errs := runChunk(t, nodes, in); errs[0] != nil {
				t.Fatalf("chunk %d: %v", c, errs[0])
			}
		}
		nodes[0].gc.wait()
		entries, err := os.ReadDir(filepath.Join(dir, "runs", "gc", "chunks"))
		if err != nil {
			t.Fatal(err)
		}
		return url, dir, len(entries)
	}
	_, _, kept := run(t, 0)
	url, _, collected := run(t, -1)
	t.Logf("chunk objects: %d kept, %d collected", kept, collected)
	if collected >= kept {
		t.Fatalf("%d chunk objects after collection, %d with an hour's grace: nothing was collected", collected, kept)
	}

	ctx := context.Background()
	store, err := checkpoint.OpenWithOptions(ctx, url, checkpoint.Options{GCGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	refs, err := store.List(ctx, "gc")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != spec.DefaultKeepCheckpoints || refs[len(refs)-1].Step != 2*chunks {
		t.Fatalf("retained %d checkpoints ending at %v; want %d ending at step %d", len(refs), refs, spec.DefaultKeepCheckpoints, 2*chunks)
	}
	for _, r := range refs {
		if _, err := store.Load(ctx, r); err != nil {
			t.Errorf("retained checkpoint at step %d no longer loads: %v", r.Step, err)
		}
	}
}

// TestTrainChunkKeepsTheJobsRetention: a job's keep_checkpoints and
// keep_every are what its nodes keep: the newest N and every multiple of
// keep_every, milestones included however old.
func TestTrainChunkKeepsTheJobsRetention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		last  int
		every int64
		want  []int64
	}{
		{"default", 0, 0, []int64{10, 12, 14, 16, 18, 20, 22, 24}},
		{"newest 2", 2, 0, []int64{22, 24}},
		{"newest 2 and every 8", 2, 8, []int64{8, 16, 22, 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			url := "file://" + dir
			nodes, m := newNodes(t, 1, url)
			s := spec.RunSpec{Name: "keep", Nodes: 1, Steps: 24, ChunkSteps: 2, KeepCheckpoints: tc.last, KeepEvery: tc.every}.WithDefaults()
			for c := range 12 {
				in := spec.ChunkInput{RunID: "run/keep", Spec: s, Membership: m, Session: fmt.Sprintf("run/keep/g1/e%d", c+1), Token: "secret",
					From: int64(2 * c), To: int64(2*c + 2), Checkpoint: true}
				if _, errs := runChunk(t, nodes, in); errs[0] != nil {
					t.Fatalf("chunk %d: %v", c, errs[0])
				}
			}
			store, err := checkpoint.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			refs, err := store.List(context.Background(), "keep")
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, r := range refs {
				got = append(got, r.Step)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept checkpoints at steps %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCollectorRunsOnePassAtATime: a deletion while a pass runs, or
// sooner than every after the last one began, starts none; later ones do;
// after close none starts.
func TestCollectorRunsOnePassAtATime(t *testing.T) {
	var c collector
	key := gcKey{"mem://", "r"}
	var passes atomic.Int32
	release := make(chan struct{})
	blocking := func(context.Context) { passes.Add(1); <-release }
	c.deleted(key, 0, blocking)
	c.deleted(key, 0, blocking) // the first one runs
	close(release)
	c.wait()
	if n := passes.Load(); n != 1 {
		t.Fatalf("%d passes for two deletions during one; want 1", n)
	}
	quick := func(context.Context) { passes.Add(1) }
	c.deleted(key, 0, quick)
	c.wait()
	c.deleted(key, time.Hour, quick) // too soon after the last
	c.deleted(gcKey{"mem://", "other"}, time.Hour, quick)
	c.wait()
	if n := passes.Load(); n != 3 {
		t.Fatalf("%d passes; want 3 (one more for the run, none too soon, one for another run)", n)
	}

	var cancelled atomic.Bool
	c.deleted(gcKey{"mem://", "third"}, 0, func(ctx context.Context) {
		<-ctx.Done()
		cancelled.Store(true)
	})
	c.close()
	if !cancelled.Load() {
		t.Error("close returned before the running pass saw its cancellation")
	}
	c.deleted(key, 0, quick)
	c.wait()
	if n := passes.Load(); n != 3 {
		t.Errorf("a deletion after close started a pass (%d passes)", n)
	}
}
