package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs, as the node workers register them

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// newNodes starts n node activity hosts, each with its own listener, as n
// node workers would.
func newNodes(t *testing.T, n int, ckptURL string) ([]*Node, spec.Membership) {
	t.Helper()
	nodes := make([]*Node, n)
	m := spec.Membership{Generation: 1}
	for i := range nodes {
		l, err := tcp.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		id := fmt.Sprintf("node-%d", i+1)
		nodes[i] = &Node{ID: id, Listener: l, Logger: zap.NewNop(), DefaultCheckpointURL: ckptURL}
		nodes[i].train, nodes[i].test = mnist(t)
		nodes[i].dataSum, nodes[i].dataAt = mnistSum, "the test's MNIST"
		t.Cleanup(func() { nodes[i].Close() })
		m.Nodes = append(m.Nodes, spec.Node{ID: id, TaskQueue: spec.NodeTaskQueue(id), CommAddr: l.Addr(), Protocol: spec.ChunkProtocolVersion})
	}
	return nodes, m
}

var (
	mnistOnce             sync.Once
	mnistTrain, mnistTest *engine.Dataset
	mnistSum              string // their dataFingerprint
	mnistErr              error
)

// mnist loads the data set once for all tests (slow under -race).
func mnist(t *testing.T) (train, test *engine.Dataset) {
	t.Helper()
	mnistOnce.Do(func() {
		var dir string
		if dir, mnistErr = engine.MNISTDir(); mnistErr == nil {
			mnistTrain, mnistTest, mnistErr = engine.LoadMNIST(dir)
		}
		if mnistErr == nil {
			mnistSum = dataFingerprint(mnistTrain, mnistTest)
		}
	})
	if mnistErr != nil {
		t.Fatal(mnistErr)
	}
	return mnistTrain, mnistTest
}

// useStore has n use s for the bucket at url, as if it had opened it
// there (a test's way to give one node another route to a bucket).
func useStore(n *Node, url string, s *checkpoint.Store) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stores == nil {
		n.stores = map[string]*checkpoint.Store{}
	}
	n.stores[url] = s
}

// runChunk runs TrainChunk on every node concurrently, as the workflow does.
func runChunk(t *testing.T, nodes []*Node, in spec.ChunkInput, tweak ...func(rank int, in *spec.ChunkInput)) ([]*spec.ChunkResult, []error) {
	t.Helper()
	res, errs, _ := runChunkTimed(t, nodes, in, tweak...)
	return res, errs
}

// runChunkTimed is runChunk that also says when each node's activity
// ended.
func runChunkTimed(t *testing.T, nodes []*Node, in spec.ChunkInput, tweak ...func(rank int, in *spec.ChunkInput)) ([]*spec.ChunkResult, []error, []time.Time) {
	t.Helper()
	res := make([]*spec.ChunkResult, len(nodes))
	errs := make([]error, len(nodes))
	ends := make([]time.Time, len(nodes))
	var wg sync.WaitGroup
	for rank, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.RegisterActivityWithOptions(n.TrainChunk, activity.RegisterOptions{Name: spec.ActivityTrainChunk})
			rin := in
			rin.Rank = rank
			for _, f := range tweak {
				f(rank, &rin)
			}
			v, err := env.ExecuteActivity(spec.ActivityTrainChunk, rin)
			if err == nil {
				err = v.Get(&res[rank])
			}
			errs[rank], ends[rank] = err, time.Now()
		}()
	}
	wg.Wait()
	return res, errs, ends
}

func TestTrainChunkAcrossTwoNodes(t *testing.T) {
	nodes, m := newNodes(t, 2, "file://"+t.TempDir())
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "secret", From: 0, To: 30, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	if res[0].WeightsSHA256 != res[1].WeightsSHA256 {
		t.Fatal("ranks diverged: data-parallel replicas must hold identical weights")
	}
	if !(res[0].LastLoss < res[0].FirstLoss) || res[0].FirstLoss != res[1].FirstLoss {
		t.Fatalf("losses %v → %v (rank 1 %v)", res[0].FirstLoss, res[0].LastLoss, res[1].FirstLoss)
	}
	ck := res[0].Checkpoint
	if ck == nil || ck.Step != 30 || res[1].Checkpoint != nil {
		t.Fatalf("want one checkpoint at 30 from rank 0, got %+v / %+v", ck, res[1].Checkpoint)
	}

	// Next chunk, same generation: continues in memory.
	in2 := in
	in2.Session, in2.From, in2.To, in2.Checkpoint, in2.Evaluate = "run/act/g1/e2", 30, 60, false, true
	warm, errs := runChunk(t, nodes, in2)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("warm rank %d: %v", i, err)
		}
	}
	if warm[0].EvalMetric != "test_accuracy" || warm[0].EvalValue < 0.5 {
		t.Errorf("eval %s = %v", warm[0].EvalMetric, warm[0].EvalValue)
	}

	// The same chunk in a new generation on fresh nodes restores the
	// checkpoint and ends bit-identical to the warm path.
	fresh, m2 := newNodes(t, 2, "file://unused")
	in3 := in2
	in3.Membership, in3.Session, in3.Restore = spec.Membership{Generation: 2, Nodes: m2.Nodes}, "run/act/g2/e3", ck
	in3.Membership.Generation = 2
	cold, errs := runChunk(t, fresh, in3)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restored rank %d: %v", i, err)
		}
	}
	if cold[0].WeightsSHA256 != warm[0].WeightsSHA256 {
		t.Errorf("restored run diverged from the uninterrupted one: %s vs %s", cold[0].WeightsSHA256, warm[0].WeightsSHA256)
	}
}

// TestTrainChunkRestoreOfAnotherJobsCheckpoint: a sound checkpoint
// restored by a run whose job changed the learning rate is refused as
// another job's (CheckpointUnfit, not retryable), not as corrupt — the
// run would otherwise fall back past every good checkpoint in turn.
func TestTrainChunkRestoreOfAnotherJobsCheckpoint(t *testing.T) {
	nodes, m := newNodes(t, 1, "file://"+t.TempDir())
	s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "secret", From: 0, To: 30, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	if errs[0] != nil || res[0].Checkpoint == nil {
		t.Fatalf("first chunk: %v, checkpoint %v", errs[0], res[0].Checkpoint)
	}
	fresh, m2 := newNodes(t, 1, "file://unused")
	again := in
	again.Spec.LearningRate = 0.005
	again.Membership, again.Session, again.From, again.To, again.Checkpoint = spec.Membership{Generation: 2, Nodes: m2.Nodes}, "run/act/g2/e1", 30, 60, false
	again.Restore = res[0].Checkpoint
	_, errs = runChunk(t, fresh, again)
	var ae *temporal.ApplicationError
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypeCheckpointUnfit || !ae.NonRetryable() ||
		!strings.Contains(ae.Message(), "the checkpoint at step 30") || !strings.Contains(ae.Message(), "LearningRate: state has 0.002, trainer has 0.005") {
		t.Fatalf("restore into another learning rate: %v; want a non-retryable CheckpointUnfit naming the step and the field", errs[0])
	}
}

// TestTrainChunkSeveralRanksPerNode: 2 nodes of 2 ranks train exactly
// what 4 nodes of one rank do (the same world, global batch and rank
// order), in a chunk that checkpoints, in the next one that continues in
// memory, and from that checkpoint on fresh nodes; the node reports its
// ranks' examples together.
func TestTrainChunkSeveralRanksPerNode(t *testing.T) {
	chunks := func(t *testing.T, nodes, perNode int) (first, warm, cold []*spec.ChunkResult) {
		t.Helper()
		ns, m := newNodes(t, nodes, "file://"+t.TempDir())
		s := spec.RunSpec{Name: "act", Nodes: nodes, RanksPerNode: perNode, BatchPerRank: 8, Steps: 40, ChunkSteps: 20}.WithDefaults()
		in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "secret",
			From: 0, To: 20, Checkpoint: true, GlobalBatch: s.GlobalBatch()}
		run := func(ns []*Node, in spec.ChunkInput) []*spec.ChunkResult {
			res, errs := runChunk(t, ns, in)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%d×%d, chunk %d–%d, node %d: %v", nodes, perNode, in.From, in.To, i, err)
				}
			}
			return res
		}
		first = run(ns, in)
		in2 := in
		in2.Session, in2.From, in2.To, in2.Checkpoint = "run/act/g1/e2", 20, 40, false
		warm = run(ns, in2)
		fresh, m2 := newNodes(t, nodes, "file://unused")
		in3 := in2
		in3.Membership, in3.Session, in3.Restore = spec.Membership{Generation: 2, Nodes: m2.Nodes}, "run/act/g2/e3", first[0].Checkpoint
		cold = run(fresh, in3)
		return first, warm, cold
	}
	one1, one2, one3 := chunks(t, 4, 1)
	two1, two2, two3 := chunks(t, 2, 2)
	for i, r := range two1 {
		if r.WeightsSHA256 != one1[0].WeightsSHA256 || two2[i].WeightsSHA256 != one2[0].WeightsSHA256 || two3[i].WeightsSHA256 != one2[0].WeightsSHA256 {
			t.Errorf("node %d of 2×2: weights %.8s / %.8s / %.8s, want 4×1's %.8s / %.8s (and the restored chunk the same)",
				i, r.WeightsSHA256, two2[i].WeightsSHA256, two3[i].WeightsSHA256, one1[0].WeightsSHA256, one2[0].WeightsSHA256)
		}
		if r.Rank != i || r.NodeID != fmt.Sprintf("node-%d", i+1) || !(r.SamplesPerSec > 0) || r.Cores < 1 {
			t.Errorf("node %d's result %+v", i, r)
		}
	}
	if one3[0].WeightsSHA256 != one2[0].WeightsSHA256 {
		t.Errorf("4×1 restored %.8s, warm %.8s", one3[0].WeightsSHA256, one2[0].WeightsSHA256)
	}
	if two1[0].Checkpoint == nil || two1[0].Checkpoint.Step != 20 || two1[1].Checkpoint != nil {
		t.Errorf("checkpoints %+v / %+v: want one at 20 from global rank 0", two1[0].Checkpoint, two1[1].Checkpoint)
	}
	if two1[0].FirstLoss != one1[0].FirstLoss || two1[0].LastLoss != one1[0].LastLoss {
		t.Errorf("global rank 0's losses %v → %v, 4×1's %v → %v", two1[0].FirstLoss, two1[0].LastLoss, one1[0].FirstLoss, one1[0].LastLoss)
	}
}

// TestTrainChunkNamesALostNodeOfSeveralRanks: node-2's worker is gone
// (its address refuses connections); node-1's two ranks, dialling its
// ranks 2 and 3, fail with PeerFailed naming node rank 1, not a rank.
func TestTrainChunkNamesALostNodeOfSeveralRanks(t *testing.T) {
	ns, m := newNodes(t, 2, "mem://")
	ns[1].Listener.Close()
	s := spec.RunSpec{Name: "act", Nodes: 2, RanksPerNode: 2, Steps: 20, ChunkSteps: 20}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "secret", From: 0, To: 20}
	_, errs := runChunk(t, ns[:1], in)
	var ae *temporal.ApplicationError
	var pf spec.PeerFailure
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypePeerFailed || ae.Details(&pf) != nil || pf.Rank != 1 {
		t.Fatalf("node-1: %v (detail %+v), want PeerFailed naming node rank 1", errs[0], pf)
	}
}

func TestTrainChunkRejectsBadInput(t *testing.T) {
	nodes, m := newNodes(t, 1, "mem://")
	s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 10}.WithDefaults()
	// This worker is process "p2" of node-1; a chunk planned while the run
	// knew process "p1" (and its address) is refused as NoState.
	nodes[0].Incarnation = "p2"
	earlier := spec.Membership{Generation: m.Generation, Nodes: slices.Clone(m.Nodes)}
	earlier.Nodes[0].Incarnation = "p1"
	badBucket := s
	badBucket.CheckpointURL = "file://" + t.TempDir() + "?colour=blue"
	tests := []struct {
		name string
		in   spec.ChunkInput
		typ  string
	}{
		{"wrong node", spec.ChunkInput{RunID: "r", Spec: s, Membership: spec.Membership{Nodes: []spec.Node{{ID: "other"}}}, From: 0, To: 5}, "BadChunkInput"},
		{"empty range", spec.ChunkInput{RunID: "r", Spec: s, Membership: m, From: 5, To: 5}, "BadChunkInput"},
		{"no state", spec.ChunkInput{RunID: "r", Spec: s, Membership: m, Session: "x", From: 5, To: 10}, spec.ErrTypeNoState},
		{"earlier process", spec.ChunkInput{RunID: "r", Spec: s, Membership: earlier, Session: "y", From: 0, To: 5}, spec.ErrTypeNoState},
		// Refused before training, not once rank 0 saves.
		{"bucket its driver refuses", spec.ChunkInput{RunID: "r", Spec: badBucket, Membership: m, Session: "z", From: 0, To: 5}, "BadCheckpointURL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := runChunk(t, nodes, tc.in)
			var ae *temporal.ApplicationError
			if !errors.As(errs[0], &ae) || ae.Type() != tc.typ || !ae.NonRetryable() {
				t.Fatalf("want non-retryable %s, got %v", tc.typ, errs[0])
			}
		})
	}
}

func TestTrainChunkBlamesLostPeer(t *testing.T) {
	nodes, m := newNodes(t, 2, "mem://")
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 1000, ChunkSteps: 1000, HeartbeatTimeout: spec.Duration(5 * time.Second)}.WithDefaults()
	in := spec.ChunkInput{RunID: "r", Spec: s, Membership: m, Session: "s", Token: "t", From: 0, To: 1000}
	// Rank 1 stops after 5 steps and closes its links, as a dying process
	// does; rank 0 must fail fast and name it.
	res, errs := runChunk(t, nodes, in, func(rank int, in *spec.ChunkInput) {
		if rank == 1 {
			in.To = 5
		}
	})
	if errs[1] != nil {
		t.Fatalf("rank 1: %v", errs[1])
	}
	var ae *temporal.ApplicationError
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypePeerFailed {
		t.Fatalf("rank 0: want PeerFailed, got %v", errs[0])
	}
	var pf spec.PeerFailure
	if err := ae.Details(&pf); err != nil || pf.Rank != 1 || pf.Step != 5 || pf.NoticedAt.IsZero() {
		t.Fatalf("rank 0 reports %+v (%v), want rank 1 lost at step 5", pf, err)
	}
	if el := time.Since(res[1].EndedAt); el > 4*time.Second {
		t.Errorf("detection took %s; a closed peer must be seen at once, not by timeout", el)
	}
}

// TestTrainChunkSeesTheRunsBucket: nodes that save into buckets of their
// own (mem:// is each process's; here each Node's) train on, warning,
// while a node misses the run's committed checkpoint for less than
// BucketGrace; then its chunk fails at once as BucketNotShared, naming the
// node, the step and the bucket. Nodes sharing a bucket never fail so.
func TestTrainChunkSeesTheRunsBucket(t *testing.T) {
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		shared bool
	}{
		{"own buckets", func(*testing.T) string { return "mem://" }, false},
		{"one bucket", func(t *testing.T) string { return "file://" + t.TempDir() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, m := newNodes(t, 2, tc.url(t))
			for _, n := range nodes {
				n.BucketGrace = time.Millisecond
			}
			s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 90, ChunkSteps: 30}.WithDefaults()
			in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 30, Checkpoint: true}
			res, errs := runChunk(t, nodes, in)
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			ck := res[0].Checkpoint
			if ck == nil {
				t.Fatal("rank 0 saved no checkpoint")
			}
			// The workflow names the committed checkpoint in every chunk
			// after it (Restore; not restored by a warm node).
			in.Session, in.From, in.To, in.Checkpoint, in.Restore = "run/act/g1/e2", 30, 60, false, ck
			if _, errs = runChunk(t, nodes, in); errors.Join(errs...) != nil {
				t.Fatalf("first miss, within the grace: %v", errors.Join(errs...))
			}
			time.Sleep(2 * time.Millisecond) // past the grace
			in.Session, in.From, in.To = "run/act/g1/e3", 60, 90
			if tc.shared {
				if _, errs = runChunk(t, nodes, in); errors.Join(errs...) != nil {
					t.Fatalf("nodes sharing the bucket, past the grace: %v", errors.Join(errs...))
				}
				return
			}
			// Rank 1 alone: it fails before it would wait for rank 0.
			_, errs = runChunk(t, nodes[1:], in, func(_ int, in *spec.ChunkInput) { in.Rank = 1 })
			var ae *temporal.ApplicationError
			if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypeBucketNotShared || !ae.NonRetryable() {
				t.Fatalf("want a non-retryable BucketNotShared, got %v", errs[0])
			}
			for _, want := range []string{"node-2", "step 30", "mem://", "same bucket"} {
				if !strings.Contains(ae.Message(), want) {
					t.Errorf("message lacks %q: %s", want, ae.Message())
				}
			}
		})
	}
}

// TestTrainChunkRestoreFindsNoCheckpoint: a node told to restore a
// checkpoint its bucket does not hold fails the chunk, retryably, saying
// where it looked and what follows: CheckpointNotHere when it has found
// none of the run's checkpoints in that bucket (it does not reach the
// bucket: the run replaces it), CheckpointGone when it found them there
// before (deleted: the run falls back to the one before).
func TestTrainChunkRestoreFindsNoCheckpoint(t *testing.T) {
	// firstChunk trains steps 0–30 of a 90-step run on one node whose
	// bucket is dir, with a checkpoint at 30.
	firstChunk := func(t *testing.T, dir string) ([]*Node, spec.ChunkInput, *spec.CheckpointRef) {
		t.Helper()
		nodes, m := newNodes(t, 1, "file://"+dir)
		s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 90, ChunkSteps: 30}.WithDefaults()
		in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 30, Checkpoint: true}
		res, errs := runChunk(t, nodes, in)
		if err := errors.Join(errs...); err != nil || res[0].Checkpoint == nil {
			t.Fatalf("first chunk: %v, checkpoint %v", err, res[0].Checkpoint)
		}
		return nodes, in, res[0].Checkpoint
	}
	t.Run("never seen", func(t *testing.T) {
		nodes, m := newNodes(t, 1, "mem://")
		s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 60, ChunkSteps: 30}.WithDefaults()
		ref := &spec.CheckpointRef{URL: "mem://", Run: "act", Step: 30, Key: "runs/act/ckpt/000000000030/manifest.json"}
		in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g2/e1", Token: "tok", From: 30, To: 60, Restore: ref}
		_, errs := runChunk(t, nodes, in)
		wantLoadError(t, errs[0], spec.ErrTypeCheckpointNotHere,
			"node node-1 does not find the run's checkpoint at step 30", "in mem://", "has found none of the run's checkpoints there", "does not reach the bucket")
	})
	t.Run("deleted", func(t *testing.T) {
		dir := t.TempDir()
		nodes, in, ck := firstChunk(t, dir)
		// The next chunk names it (the node sees it there), then it is
		// deleted, and a new generation must restore it.
		in.Session, in.From, in.To, in.Checkpoint, in.Restore = "run/act/g1/e2", 30, 60, false, ck
		if _, errs := runChunk(t, nodes, in); errors.Join(errs...) != nil {
			t.Fatal(errors.Join(errs...))
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(ck.Key))); err != nil {
			t.Fatal(err)
		}
		in.Membership.Generation++
		in.Session, in.From, in.To = "run/act/g2/e1", 30, 60
		_, errs := runChunk(t, nodes, in)
		wantLoadError(t, errs[0], spec.ErrTypeCheckpointGone,
			"node node-1 does not find the run's checkpoint at step 30", "where it found the run's checkpoints before", "was deleted")
	})
	// A node new to the run (a spare) that finds the run's other
	// checkpoints in the bucket reaches it: the missing one was deleted,
	// not out of its reach (the run falls back instead of replacing it).
	t.Run("deleted, a new node", func(t *testing.T) {
		dir := t.TempDir()
		nodes, in, first := firstChunk(t, dir)
		in.Session, in.From, in.To, in.Restore = "run/act/g1/e2", 30, 60, first
		res, errs := runChunk(t, nodes, in)
		if err := errors.Join(errs...); err != nil || res[0].Checkpoint == nil {
			t.Fatalf("second chunk: %v, checkpoint %v", err, res[0].Checkpoint)
		}
		ck := res[0].Checkpoint
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(ck.Key))); err != nil {
			t.Fatal(err)
		}
		spare, m2 := newNodes(t, 1, "file://"+dir) // (it never saw the run)
		in.Membership, in.Session, in.From, in.To, in.Restore, in.Checkpoint = m2, "run/act/g2/e1", 60, 90, ck, false
		in.Membership.Generation = 2
		_, errs = runChunk(t, spare, in)
		wantLoadError(t, errs[0], spec.ErrTypeCheckpointGone,
			"does not find the run's checkpoint at step 60", "where the run's other checkpoints are", "was deleted")
	})
}

// TestTrainChunkRestoreStorageDown: a node whose storage does not serve
// the checkpoint to restore (here an S3 endpoint nothing listens on)
// fails the chunk as CheckpointUnreachable, retryable, naming itself, the
// step and the bucket, with the step as detail: the run holds for the
// storage instead of replacing the node.
func TestTrainChunkRestoreStorageDown(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	nodes, m := newNodes(t, 1, "mem://")
	s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 60, ChunkSteps: 30}.WithDefaults()
	url := "s3://ckpt?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1"
	ref := &spec.CheckpointRef{URL: url, Run: "act", Step: 30, Key: "runs/act/ckpt/000000000030/manifest.json"}
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g2/e1", Token: "tok", From: 30, To: 60, Restore: ref}
	_, errs := runChunk(t, nodes, in)
	wantLoadError(t, errs[0], spec.ErrTypeCheckpointUnreachable,
		"node node-1 cannot read the checkpoint at step 30 from s3://ckpt", "127.0.0.1:1")
	var ae *temporal.ApplicationError
	var f spec.CheckpointFailure
	if !errors.As(errs[0], &ae) || ae.Details(&f) != nil || f.Step != 30 || f.Error != ae.Message() {
		t.Fatalf("detail %+v, want the step and the message", f)
	}
}

// TestSharedBucketCheckDoesNotWaitForASilentBucket: the check that a
// node reaches the run's bucket, made before its ranks join the group,
// gives up on a bucket that does not answer within sharedCheckTimeout —
// well inside the peers' connect timeout, which would otherwise blame
// this node — and asks again at the next chunk.
func TestSharedBucketCheckDoesNotWaitForASilentBucket(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		<-r.Context().Done() // silent
	}))
	defer srv.Close()
	n := &Node{ID: "node-2", Logger: zap.NewNop()}
	defer n.Close()
	ref := &spec.CheckpointRef{URL: "s3://ckpt?endpoint=" + srv.URL + "&use_path_style=true&region=us-east-1",
		Run: "act", Step: 30, Key: "runs/act/ckpt/000000000030/manifest.json"}
	start := time.Now()
	if err := n.checkSharedBucket(t.Context(), "tok", ref, zap.NewNop()); err != nil {
		t.Fatalf("check against a silent bucket: %v; want it given up, not the chunk failed", err)
	}
	if took := time.Since(start); took > sharedCheckTimeout+5*time.Second {
		t.Fatalf("the check took %s; want about %s", took, sharedCheckTimeout)
	}
	if asked.Load() == 0 {
		t.Fatal("the bucket was not asked")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.sights[sightKey("tok", ref.URL)]; s != nil && (s.seen || !s.missSince.IsZero()) {
		t.Fatalf("sight %+v after no answer; want nothing known (asked again at the next chunk)", s)
	}
}

// TestTrainChunkWithoutData: a node whose worker finds no data set for the
// built-in model fails the chunk as NodeUnfit (retryable: the run replaces
// the node), naming the node and how to give it the data.
func TestTrainChunkWithoutData(t *testing.T) {
	nodes, m := newNodes(t, 1, "mem://")
	nodes[0].train, nodes[0].test, nodes[0].MNISTDir = nil, nil, filepath.Join(t.TempDir(), "nowhere")
	s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 10}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 10}
	_, errs := runChunk(t, nodes, in)
	wantLoadError(t, errs[0], spec.ErrTypeNodeUnfit, "node node-1 has no data set for mlp-mnist", "nowhere", "--mnist-dir")
}

// TestTrainChunkWaitsForAWorldToStop: a built-in chunk on a node where an
// external job's world still runs (its processes stopping after a
// cancellation the workflow did not wait for) starts training once the
// world is gone; a world that outlasts worldGoneWait no longer holds it
// back.
func TestTrainChunkWaitsForAWorldToStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wait    time.Duration
		release bool // the world ends while the chunk waits
	}{
		{"starts once the world is gone", time.Minute, true},
		{"goes ahead past the wait", 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, m := newNodes(t, 1, "mem://")
			n := nodes[0]
			n.worldWait = tc.wait
			admitted, err := n.admit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			world := sync.OnceFunc(admitted)
			defer world()
			waiting := make(chan struct{})
			n.onChunkWaits = func() { close(waiting) }
			s := spec.RunSpec{Name: "act", Nodes: 1, Steps: 10}.WithDefaults()
			in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 10}
			type ended struct {
				res  []*spec.ChunkResult
				errs []error
			}
			done := make(chan ended, 1)
			go func() {
				res, errs, _ := runChunkTimed(t, nodes, in)
				done <- ended{res, errs}
			}()
			var end ended
			select {
			case <-waiting:
			case end = <-done:
				t.Fatalf("the chunk trained beside the world: %v", end.errs)
			}
			released := time.Now()
			if tc.release {
				world()
			}
			end = <-done
			if end.errs[0] != nil {
				t.Fatal(end.errs[0])
			}
			if first := end.res[0].FirstStepAt; first.Before(released) {
				t.Errorf("first step at %s, before the wait ended (%s)", first.Format(time.StampMicro), released.Format(time.StampMicro))
			}
			if end.res[0].To != 10 {
				t.Errorf("trained to %d, want 10", end.res[0].To)
			}
		})
	}
}

// wantLoadError checks a retryable ApplicationError of type typ whose
// message holds every one of want (a load, or a node unfit for the run).
func wantLoadError(t *testing.T, err error, typ string, want ...string) {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != typ || ae.NonRetryable() {
		t.Fatalf("want a retryable %s, got %v", typ, err)
	}
	for _, w := range want {
		if !strings.Contains(ae.Message(), w) {
			t.Errorf("message lacks %q: %s", w, ae.Message())
		}
	}
}

// TestTrainChunkShrinkKeepsGlobalBatch shrinks a 3-node run to 2 nodes at a
// checkpoint, keeping the global batch (3×32): the 2-node chunk restores the
// 3-node checkpoint (made before the run carried a global batch) and must
// train like the 3 nodes would have, up to float32 summation order.
func TestTrainChunkShrinkKeepsGlobalBatch(t *testing.T) {
	nodes, m := newNodes(t, 3, "file://"+t.TempDir())
	s := spec.RunSpec{Name: "shrink", Nodes: 3, Steps: 40, ChunkSteps: 20}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/shrink", Spec: s, Membership: m, Session: "run/shrink/g1/e1", Token: "secret", From: 0, To: 20, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	ck := res[0].Checkpoint
	if ck == nil {
		t.Fatal("no checkpoint")
	}
	// Reference: the 3 nodes go on (in memory) with the global batch set,
	// which for the same world trains exactly as before.
	ref := in
	ref.Session, ref.From, ref.To, ref.Checkpoint, ref.Evaluate, ref.GlobalBatch = "run/shrink/g1/e2", 20, 40, false, true, s.BatchPerRank*3
	want, errs := runChunk(t, nodes, ref)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reference rank %d: %v", i, err)
		}
	}
	// Shrunk: generation 2 on the first two nodes, restored from the
	// checkpoint.
	shrunk := ref
	shrunk.Membership = spec.Membership{Generation: 2, Nodes: m.Nodes[:2]}
	shrunk.Session, shrunk.Restore = "run/shrink/g2/e3", ck
	got, errs := runChunk(t, nodes[:2], shrunk)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shrunk rank %d: %v", i, err)
		}
	}
	if got[0].WeightsSHA256 != got[1].WeightsSHA256 {
		t.Fatal("shrunk ranks diverged")
	}
	rel := func(a, b float32) float64 { return math.Abs(float64(a)-float64(b)) / math.Abs(float64(b)) }
	dFirst, dLast, dAcc := rel(got[0].FirstLoss, want[0].FirstLoss), rel(got[0].LastLoss, want[0].LastLoss), math.Abs(got[0].EvalValue-want[0].EvalValue)
	t.Logf("2 nodes vs 3: loss rel. diff %.3g (step 21), %.3g (step 40); test accuracy %.4f vs %.4f", dFirst, dLast, got[0].EvalValue, want[0].EvalValue)
	if dFirst > 1e-5 || dLast > 1e-5 || dAcc > 0.005 {
		t.Errorf("shrunk run drifts from the 3-node run: loss rel. diff %.3g / %.3g (tol 1e-5), |Δacc| %.4f (tol 0.005)", dFirst, dLast, dAcc)
	}
}

// TestTrainChunkAsyncCheckpoint: rank 0 returns with its checkpoint still
// uploading (pending), the next chunk reports it committed, the planner
// finds it in the bucket, and restoring it gives the same state as the
// synchronous path.
func TestTrainChunkAsyncCheckpoint(t *testing.T) {
	url := "file://" + t.TempDir()
	nodes, m := newNodes(t, 2, url)
	s := spec.RunSpec{Name: "async", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/async", Spec: s, Membership: m, Session: "run/async/g1/e1", Token: "secret",
		From: 0, To: 30, Checkpoint: true, AsyncCheckpoint: true}
	res, errs := runChunk(t, nodes, in)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	p := res[0].PendingCheckpoint
	if res[0].Checkpoint != nil || p == nil || p.Step != 30 || p.Key != "" || p.URL != url {
		t.Fatalf("want a pending checkpoint at 30, got committed %+v, pending %+v", res[0].Checkpoint, p)
	}
	in2 := in
	in2.Session, in2.From, in2.To, in2.Checkpoint, in2.AsyncCheckpoint = "run/async/g1/e2", 30, 60, false, false
	res2, errs := runChunk(t, nodes, in2)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("chunk 2 rank %d: %v", i, err)
		}
	}
	ck := res2[0].EarlierCheckpoint
	if ck == nil || ck.Step != 30 || ck.Key == "" || res2[1].EarlierCheckpoint != nil {
		t.Fatalf("chunk 2 should report the checkpoint at 30 committed: %+v", ck)
	}
	found, err := Planner{}.ResolveCheckpoint(context.Background(), *p)
	if err != nil || found.Key != ck.Key || found.SHA256 != ck.SHA256 {
		t.Fatalf("ResolveCheckpoint = %+v, %v; want %+v", found, err, ck)
	}
	missing := *p
	missing.Step = 45
	var app *temporal.ApplicationError
	if _, err := (Planner{}).ResolveCheckpoint(context.Background(), missing); !errors.As(err, &app) ||
		app.Type() != spec.ErrTypeNoSuchCheckpoint || app.NonRetryable() {
		t.Errorf("a checkpoint that was never written: %v; want a retryable NoSuchCheckpoint (a patient caller waits for its upload)", err)
	}
	// Fresh nodes restoring the async checkpoint end where the warm ones did.
	fresh, m2 := newNodes(t, 2, "file://unused")
	in3 := in2
	in3.Membership, in3.Session, in3.Restore = spec.Membership{Generation: 2, Nodes: m2.Nodes}, "run/async/g2/e3", ck
	cold, errs := runChunk(t, fresh, in3)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restored rank %d: %v", i, err)
		}
	}
	if cold[0].WeightsSHA256 != res2[0].WeightsSHA256 {
		t.Errorf("restored from the async checkpoint: %s, uninterrupted %s", cold[0].WeightsSHA256, res2[0].WeightsSHA256)
	}
}

// TestTrainChunkCheckpointStorageFails: once the bucket refuses writes,
// a background upload's failure is reported by rank 0's next chunk
// (CheckpointFailed, naming its step) and a synchronous save fails the
// chunk with ErrTypeCheckpointStorage, not as a lost peer.
func TestTrainChunkCheckpointStorageFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bucket")
	url := "file://" + dir
	nodes, m := newNodes(t, 2, url)
	s := spec.RunSpec{Name: "full", Nodes: 2, Steps: 120, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/full", Spec: s, Membership: m, Session: "run/full/g1/e1", Token: "secret",
		From: 0, To: 30, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	if errs[0] != nil || errs[1] != nil || res[0].Checkpoint == nil {
		t.Fatalf("first chunk: %v %v", errs, res[0])
	}
	// The bucket's directory becomes a file: every write fails.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	chunk := func(e, from, to int64, ckpt, async bool) ([]*spec.ChunkResult, []error) {
		c := in
		c.Session, c.From, c.To, c.Checkpoint, c.AsyncCheckpoint = fmt.Sprintf("run/full/g1/e%d", e), from, to, ckpt, async
		return runChunk(t, nodes, c)
	}
	if _, errs := chunk(2, 30, 60, true, true); errs[0] != nil || errs[1] != nil {
		t.Fatalf("the chunk that starts the upload: %v", errs)
	}
	res, errs = chunk(3, 60, 90, false, false)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the chunk after it: %v", errs)
	}
	if f := res[0].CheckpointFailed; f == nil || f.Step != 60 || f.Error == "" || res[0].EarlierCheckpoint != nil || res[1].CheckpointFailed != nil {
		t.Fatalf("rank 0 reports %+v (earlier %+v); want the upload at 60 failed", f, res[0].EarlierCheckpoint)
	}
	_, errs = chunk(4, 90, 120, true, false)
	var ae *temporal.ApplicationError
	if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypeCheckpointStorage {
		t.Fatalf("a synchronous save into a broken bucket: %v; want %s", errs[0], spec.ErrTypeCheckpointStorage)
	}
}

// TestTrainChunkKeepsStateTheBucketRefuses: with ReportStorageFailure a
// synchronous save the bucket refuses is reported (CheckpointFailed at
// the chunk's end), not an error, and the ranks keep their state:
// save-only chunks (From == To) store it once the bucket takes it again,
// and nodes restoring that checkpoint train on bit-identical to the ones
// that kept it. A save-only chunk tries once (the run's hold is its
// retry) and must save synchronously.
func TestTrainChunkKeepsStateTheBucketRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bucket")
	url := "file://" + dir
	nodes, m := newNodes(t, 2, url)
	var retries atomic.Int32
	nodes[0].Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.DebugLevel),
		zap.Hooks(func(e zapcore.Entry) error {
			if e.Message == "checkpoint save failed; retrying" {
				retries.Add(1)
			}
			return nil
		}))
	s := spec.RunSpec{Name: "held", Nodes: 2, Steps: 90, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/held", Spec: s, Membership: m, Token: "secret", Checkpoint: true, ReportStorageFailure: true}
	epoch := 0
	chunk := func(nodes []*Node, in spec.ChunkInput, from, to int64) ([]*spec.ChunkResult, []error) {
		epoch++
		in.Session, in.From, in.To = fmt.Sprintf("run/held/g%d/e%d", in.Membership.Generation, epoch), from, to
		return runChunk(t, nodes, in)
	}
	if _, errs := chunk(nodes, in, 0, 30); errs[0] != nil || errs[1] != nil {
		t.Fatalf("first chunk: %v", errs)
	}
	broken := func(on bool) {
		t.Helper()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		var err error
		if on {
			err = os.WriteFile(dir, []byte("not a directory"), 0o644)
		} else {
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	broken(true)
	trained, errs := chunk(nodes, in, 30, 60)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("a chunk whose checkpoint the bucket refuses: %v; want it reported", errs)
	}
	if f := trained[0].CheckpointFailed; f == nil || f.Step != 60 || trained[0].Checkpoint != nil {
		t.Fatalf("rank 0 reports %+v, checkpoint %+v; want the one at 60 refused", f, trained[0].Checkpoint)
	}
	if n := retries.Load(); n != saveTries-1 {
		t.Fatalf("the chunk's save was retried %d times, want %d", n, saveTries-1)
	}
	res, errs := chunk(nodes, in, 60, 60)
	if errs[0] != nil || errs[1] != nil || res[0].CheckpointFailed == nil || res[0].CheckpointFailed.Step != 60 {
		t.Fatalf("a save-only chunk into the broken bucket: %v, %+v", errs, res[0])
	}
	if n := retries.Load(); n != saveTries-1 {
		t.Fatalf("the save-only chunk's save was retried %d times, want none", n-(saveTries-1))
	}
	broken(false)
	res, errs = chunk(nodes, in, 60, 60)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("a save-only chunk once the bucket works: %v", errs)
	}
	ck := res[0].Checkpoint
	if ck == nil || ck.Step != 60 || res[0].CheckpointFailed != nil || res[0].WeightsSHA256 != trained[0].WeightsSHA256 {
		t.Fatalf("stored %+v (failed %+v, weights %s); want the kept state at 60 (%s)", ck, res[0].CheckpointFailed, res[0].WeightsSHA256, trained[0].WeightsSHA256)
	}
	in.Checkpoint = false
	warm, errs := chunk(nodes, in, 60, 90)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("training on: %v", errs)
	}
	fresh, m2 := newNodes(t, 2, "file://unused")
	in2 := in
	in2.Membership, in2.Restore = spec.Membership{Generation: 2, Nodes: m2.Nodes}, ck
	cold, errs := chunk(fresh, in2, 60, 90)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("restored: %v", errs)
	}
	if cold[0].WeightsSHA256 != warm[0].WeightsSHA256 {
		t.Errorf("restored from the held state's checkpoint: %s, kept: %s", cold[0].WeightsSHA256, warm[0].WeightsSHA256)
	}
	in.Checkpoint, in.AsyncCheckpoint = true, true
	_, errs = chunk(nodes, in, 90, 90)
	var ae *temporal.ApplicationError
	if !errors.As(errs[0], &ae) || ae.Type() != "BadChunkInput" || !strings.Contains(ae.Error(), "synchronously") {
		t.Errorf("an asynchronous save-only chunk: %v; want BadChunkInput", errs[0])
	}
}

// TestTrainChunkSaveRetries: a synchronous save that fails once (the
// bucket's directory briefly a file) is tried again and the chunk ends
// with its checkpoint, instead of failing.
func TestTrainChunkSaveRetries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bucket")
	url := "file://" + dir
	nodes, m := newNodes(t, 2, url)
	var retries atomic.Int32
	// The retry's log line repairs the bucket.
	nodes[0].Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.DebugLevel),
		zap.Hooks(func(e zapcore.Entry) error {
			if e.Message == "checkpoint save failed; retrying" && retries.Add(1) == 1 {
				if err := os.Remove(dir); err != nil {
					return err
				}
				return os.MkdirAll(dir, 0o755)
			}
			return nil
		}))
	s := spec.RunSpec{Name: "retry", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/retry", Spec: s, Membership: m, Session: "run/retry/g1/e1", Token: "secret",
		From: 0, To: 30, Checkpoint: true}
	if _, errs := runChunk(t, nodes, in); errs[0] != nil || errs[1] != nil {
		t.Fatalf("first chunk: %v", errs)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	in.Session, in.From, in.To = "run/retry/g1/e2", 30, 60
	res, errs := runChunk(t, nodes, in)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the chunk whose save failed once: %v", errs)
	}
	if ck := res[0].Checkpoint; ck == nil || ck.Step != 60 || retries.Load() != 1 {
		t.Fatalf("checkpoint %+v after %d retries; want the one at 60 after one", ck, retries.Load())
	}
}

// TestPeerErrorBlames: a lost peer becomes PeerFailed naming its node (a
// rank of a node with several names the node), a peer that left the
// forming group alive PeerFailed naming nobody (-1), and anything else
// stays as it is.
func TestPeerErrorBlames(t *testing.T) {
	lost := fmt.Errorf("tcp: connect: %w", &ascend.PeerError{Rank: 5, Op: "barrier", Err: errors.New("EOF")})
	for _, tc := range []struct {
		name    string
		err     error
		perNode int
		rank    int // -2: not PeerFailed
	}{
		{"lost peer", lost, 1, 5},
		{"lost peer, 2 ranks per node", lost, 2, 2},
		{"lost peer, 3 ranks per node", lost, 3, 1},
		{"peer left alive", fmt.Errorf("tcp: connect: %w: link to rank 1: EOF", tcp.ErrPeerLeft), 2, -1},
		{"other", errors.New("disk full"), 1, -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []spec.Node{{ID: "n0"}, {ID: "n1"}, {ID: "n2"}, {ID: "n3"}, {ID: "n4"}, {ID: "n5"}}
			got := peerError(tc.err, 40, tc.perNode, nodes)
			var ae *temporal.ApplicationError
			if !errors.As(got, &ae) || ae.Type() != spec.ErrTypePeerFailed {
				if tc.rank != -2 {
					t.Fatalf("peerError = %v, want PeerFailed", got)
				}
				if got != tc.err {
					t.Fatalf("peerError = %v, want the error unchanged", got)
				}
				return
			}
			var pf spec.PeerFailure
			if err := ae.Details(&pf); err != nil || pf.Rank != tc.rank || pf.Step != 40 {
				t.Fatalf("detail %+v (%v), want rank %d at step 40", pf, err, tc.rank)
			}
			// A survivor's failure names the node it lost (the Web UI
			// shows it), and still says what the engine saw.
			if want := "peer node " + nodes[max(tc.rank, 0)].ID + " failed: "; (tc.rank >= 0) != strings.HasPrefix(ae.Message(), want) ||
				!strings.HasSuffix(ae.Message(), tc.err.Error()) {
				t.Errorf("message %q; want it to name node %d (%q …) and end with the engine's %q", ae.Message(), tc.rank, want, tc.err)
			}
		})
	}
}

// TestForgetKeepsOtherState: a failed chunk drops its run's warm state of
// its generation or an earlier one, never another run's, a later
// generation's or one a chunk begun after it kept (a chunk cancelled late
// must not wipe what the node trains now).
func TestForgetKeepsOtherState(t *testing.T) {
	chunk := func(run string, gen int64) spec.ChunkInput {
		return spec.ChunkInput{RunID: run, Membership: spec.Membership{Generation: gen}}
	}
	for _, tc := range []struct {
		name   string
		kept   spec.ChunkInput // whose state local rank 0 holds
		failed spec.ChunkInput
		later  bool // the state was kept by a chunk begun after the failed one
		stays  bool
	}{
		{"same run and generation", chunk("run/a", 2), chunk("run/a", 2), false, false},
		{"an earlier generation's", chunk("run/a", 1), chunk("run/a", 2), false, false},
		{"a later generation's", chunk("run/a", 3), chunk("run/a", 2), false, true},
		{"another run's", chunk("run/b", 1), chunk("run/a", 1), false, true},
		{"a later chunk's, same generation", chunk("run/a", 2), chunk("run/a", 2), true, true},
	} {
		n := &Node{}
		failedSeq, keptSeq := uint64(5), uint64(4)
		if tc.later {
			keptSeq = 6
		}
		n.keep(tc.kept, keptSeq, 0, nil)
		n.keep(tc.kept, keptSeq, 1, nil)
		n.forget(tc.failed, failedSeq)
		for local, w := range n.warm {
			if (w != nil) != tc.stays {
				t.Errorf("%s: local rank %d's state kept %v, want %v", tc.name, local, w != nil, tc.stays)
			}
		}
	}
}

// TestWarmStateIsTheRunsOwn: a chunk of a later run of the same name
// (another token: `run --resume`, `run --fresh`), though in the same
// generation and at the step the nodes' warm trainers reached, does not
// take their state: without a checkpoint to restore it has none.
func TestWarmStateIsTheRunsOwn(t *testing.T) {
	nodes, m := newNodes(t, 2, "file://"+t.TempDir())
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "first", From: 0, To: 30}
	if _, errs := runChunk(t, nodes, in); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	later := in
	later.Session, later.Token, later.From, later.To = "run/act/g1/e2", "later", 30, 60
	_, errs := runChunk(t, nodes, later)
	for rank, err := range errs {
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeNoState {
			t.Errorf("rank %d of the later run: %v; want %s (the earlier run's warm state is not its own)", rank, err, spec.ErrTypeNoState)
		}
	}
}

// TestRetrySave: a save is tried saveTries times at least, and more while
// the patience (the chunk's training time) lasts; a cancelled chunk stops
// trying.
func TestRetrySave(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int
		patience  time.Duration
		cancel    bool
		wantCalls int
		wantErr   bool
	}{
		{"a hiccup", 2, 0, false, 3, false},
		{"three failures, a short chunk", 3, 0, false, 3, true},
		{"a longer outage in a long chunk", 6, time.Minute, false, 7, false},
		{"cancelled", 6, time.Minute, true, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls, retries := 0, 0
			ref, err := retrySave(ctx, 3, time.Millisecond, 4*time.Millisecond, tc.patience, func() (*spec.CheckpointRef, error) {
				calls++
				if tc.cancel {
					cancel()
				}
				if calls <= tc.failures {
					return nil, errors.New("bucket refuses")
				}
				return &spec.CheckpointRef{Step: 60}, nil
			}, func(int, time.Duration, error) { retries++ })
			if calls != tc.wantCalls || (err != nil) != tc.wantErr || (err == nil) != (ref != nil) || retries != calls-1 && !tc.cancel {
				t.Errorf("%d calls, %d retries, ref %v, err %v; want %d calls, error %v", calls, retries, ref, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
