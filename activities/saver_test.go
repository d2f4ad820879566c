package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// TestSaveOnlyChunkStoredByAnotherNode: node-1 (rank 0) cannot write to
// the run's bucket (its path there is a file), so the chunk's checkpoint
// at 30 is refused and the nodes keep the state. A save-only chunk that
// names node-2 the saver stores it from node-2: the same checkpoint,
// byte for byte, as rank 0 stores once its bucket works again.
func TestSaveOnlyChunkStoredByAnotherNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bucket")
	url := "file://" + dir
	nodes, m := newNodes(t, 2, url)
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	bad, err := checkpoint.OpenWithOptions(t.Context(), "file://"+broken, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Close() })
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	good, err := nodes[0].store(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	useStore(nodes[0], url, bad)

	s := spec.RunSpec{Name: "saver", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/saver", Spec: s, Membership: m, Token: "secret", Checkpoint: true, ReportStorageFailure: true}
	epoch := 0
	chunk := func(from, to int64, saver int) []*spec.ChunkResult {
		t.Helper()
		epoch++
		in.Session, in.From, in.To, in.Saver = fmt.Sprintf("run/saver/g1/e%d", epoch), from, to, saver
		res, errs := runChunk(t, nodes, in)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("chunk %d–%d, saver %d: node-%d: %v", from, to, saver, i+1, err)
			}
		}
		return res
	}
	trained := chunk(0, 30, 0)
	if f := trained[0].CheckpointFailed; f == nil || f.Step != 30 || trained[0].Checkpoint != nil {
		t.Fatalf("rank 0 reports %+v; want the checkpoint at 30 refused", trained[0])
	}
	held := chunk(30, 30, 1)
	ck := held[1].Checkpoint
	if ck == nil || ck.Step != 30 || held[1].CheckpointFailed != nil || held[0].Checkpoint != nil || held[0].CheckpointFailed != nil {
		t.Fatalf("node-1 reports %+v, node-2 %+v; want node-2 to store the checkpoint at 30, node-1 nothing", held[0], held[1])
	}
	useStore(nodes[0], url, good)
	ref := chunk(30, 30, 0)[0].Checkpoint
	if ref == nil || ref.SHA256 != ck.SHA256 || ref.Bytes != ck.Bytes {
		t.Fatalf("rank 0 stores %+v; node-2 stored %+v: want the same checkpoint", ref, ck)
	}
	// A saver out of range, or in a chunk that trains, is rank 0.
	if r := chunk(30, 60, 1); r[0].Checkpoint == nil || r[1].Checkpoint != nil {
		t.Errorf("a training chunk naming node-2 the saver: node-1 stored %+v, node-2 %+v; want rank 0 to", r[0].Checkpoint, r[1].Checkpoint)
	}
}
