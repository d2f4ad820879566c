package activities

import (
	"context"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainChunkEndsEarly: a node asked to end its chunks (a stopping
// worker) has every rank of the run end the chunk after the same step,
// before the step it was to reach, with rank 0's checkpoint there and the
// weights an uninterrupted chunk to that step reaches — named, in every
// result, by the stopping node. So does a chunk the run asks a node to
// end (EndChunk), named by none. A membership with a node of an older
// build (it would never join the vote) trains the whole chunk, and a
// request for another chunk does not end this one.
func TestTrainChunkEndsEarly(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes, perNode int
		stopper        int  // the node asked to end its chunks
		during         bool // asked once the chunk runs, else before
		oldPeer        bool // the last node speaks chunk protocol 1
		// asked: the run asks the stopper to end the chunk (EndChunk),
		// its worker is not stopping.
		asked bool
		// otherChunk: the run asks about another chunk than this one.
		otherChunk bool
	}{
		{name: "2 nodes, rank 1 stops during the chunk", nodes: 2, perNode: 1, stopper: 1, during: true},
		{name: "3 nodes, rank 0 stops before", nodes: 3, perNode: 1, stopper: 0},
		{name: "2 nodes of 2 ranks, node 1 stops during the chunk", nodes: 2, perNode: 2, stopper: 1, during: true},
		{name: "1 node stops during the chunk", nodes: 1, perNode: 1, stopper: 0, during: true},
		{name: "an older peer: no vote", nodes: 2, perNode: 1, stopper: 0, oldPeer: true},
		{name: "3 nodes, the run asks node 0 during the chunk", nodes: 3, perNode: 1, stopper: 0, during: true, asked: true},
		{name: "2 nodes of 2 ranks, the run asks node 1 before", nodes: 2, perNode: 2, stopper: 1, asked: true},
		{name: "1 node, the run asks during the chunk", nodes: 1, perNode: 1, stopper: 0, during: true, asked: true},
		{name: "the run asks about another chunk", nodes: 2, perNode: 1, stopper: 1, asked: true, otherChunk: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, m := newNodes(t, tc.nodes, "file://"+t.TempDir())
			to := int64(1_000_000)              // minutes of steps: only an early end ends it in time
			full := tc.oldPeer || tc.otherChunk // the chunk is to train to its end
			if full {
				to = 300
			}
			if tc.oldPeer {
				m.Nodes[tc.nodes-1].Protocol = spec.ChunkProtocolDataCheck
			}
			s := spec.RunSpec{Name: "early", Nodes: tc.nodes, RanksPerNode: tc.perNode, BatchPerRank: 8, Steps: 2 * to, ChunkSteps: to}.WithDefaults()
			in := spec.ChunkInput{RunID: "run/early", Spec: s, Membership: m, Session: "run/early/g1/e1", Token: "secret",
				From: 0, To: to, AsyncCheckpoint: true, GlobalBatch: s.GlobalBatch()}
			stopper := ns[tc.stopper]
			end := stopper.EndChunks
			if tc.asked {
				session := in.Session
				if tc.otherChunk {
					session = "run/early/g1/e0" // an earlier chunk's
				}
				end = func() {
					if err := stopper.EndChunk(context.Background(), spec.EndChunkInput{RunID: in.RunID, Session: session, Why: "a test"}); err != nil {
						t.Error(err)
					}
				}
			}
			if !tc.during {
				end()
			} else {
				go func() {
					for stopper.Running() == 0 {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(200 * time.Millisecond) // some steps in (or not: any step will do)
					end()
				}()
			}
			res, errs := runChunk(t, ns, in)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("node %d: %v", i, err)
				}
			}
			stopped, by := res[0].To, stopper.ID
			if tc.asked {
				by = ""
			}
			if full {
				if stopped != to || res[0].EndedBy != "" || res[0].Checkpoint != nil {
					t.Fatalf("the chunk ended at %d (by %q, checkpoint %+v); want %d, no early end", stopped, res[0].EndedBy, res[0].Checkpoint, to)
				}
				return
			}
			if stopped <= 0 || stopped >= to {
				t.Fatalf("chunk ended at step %d; want before %d", stopped, to)
			}
			for i, r := range res {
				if r.To != stopped || r.From != 0 || r.EndedBy != by || r.WeightsSHA256 != res[0].WeightsSHA256 {
					t.Errorf("node %d: steps %d–%d, ended by %q, weights %.8s; want 0–%d by %s, weights %.8s",
						i, r.From, r.To, r.EndedBy, r.WeightsSHA256, stopped, by, res[0].WeightsSHA256)
				}
				if (r.Checkpoint != nil) != (i == 0) || r.PendingCheckpoint != nil {
					t.Errorf("node %d: checkpoint %+v, pending %+v; want rank 0's, stored before it returned", i, r.Checkpoint, r.PendingCheckpoint)
				}
			}
			if ck := res[0].Checkpoint; ck == nil || ck.Step != stopped {
				t.Fatalf("checkpoint %+v; want one at step %d", ck, stopped)
			}
			// The same steps on nodes told nothing: the same weights.
			fresh, fm := newNodes(t, tc.nodes, "file://"+t.TempDir())
			straight := in
			straight.Membership, straight.Session, straight.To, straight.AsyncCheckpoint = fm, "run/early/g1/e2", stopped, false
			sres, serrs := runChunk(t, fresh, straight)
			for i, err := range serrs {
				if err != nil {
					t.Fatalf("uninterrupted chunk, node %d: %v", i, err)
				}
			}
			if sres[0].WeightsSHA256 != res[0].WeightsSHA256 || sres[0].LastLoss != res[0].LastLoss {
				t.Errorf("ended early at %d: weights %.8s, loss %v; an uninterrupted chunk to %d: %.8s, %v",
					stopped, res[0].WeightsSHA256, res[0].LastLoss, stopped, sres[0].WeightsSHA256, sres[0].LastLoss)
			}
			t.Logf("ended at step %d", stopped)
		})
	}
}
