package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeCutOffFromTheBucketIsReplaced: node-3's worker has no route to
// the S3 bucket the others use (every connection it opens there is cut
// as it arrives, as a broken NAT or a firewall would). It replaces node-2,
// killed at step 130, and cannot read the checkpoint at step 100 that
// node-1 reads: the run holds once (a bucket that fails some requests
// looks the same once), saying node-3 is replaced if the next try fails
// so again; at the next try, cut short by a resume, it does, and the run
// replaces node-3 with node-4 and completes — max_restarts 1, spent on
// node-2: the cut-off node's replacement counts no restart. Before, the run held as for
// a storage down — doubling its waits up to ten minutes — until an
// operator drained node-3.
func TestNodeCutOffFromTheBucketIsReplaced(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var cut cutOff
	bucket := cut.bucket(t)
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{checkpointURL: bucket}, "node-1", "node-2")
	// node-3 is cut off; node-4 is a healthy spare.
	startCutOffWorker(t, l, addr, bucket, "node-3")
	startNodeWorkerAt(t, l, addr, bucket, "node-4", "node-4")
	waitRegistered(ctx, t, c, 4)

	// max_restarts 1: node-2's loss spends it, node-3's replacement costs
	// none (it trained nothing, and the run takes it no more).
	s := spec.RunSpec{Name: "cut-off", Nodes: 2, Steps: 200, ChunkSteps: 50, MaxRestarts: 1, HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	faultKill(ctx, t, addr, s.Name, "node-2", 130)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a hold for node-3's read", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait || st.Phase == spec.PhaseCompleted || st.Phase == spec.PhaseFailed
	})
	for _, want := range []string{"node node-3 cannot read the checkpoint at step 100 from s3://ckpt", "(node node-1 read it)",
		"the run replaces node node-3 if the next try fails so again"} {
		if !strings.Contains(held.Detail, want) {
			t.Fatalf("held in %s: %q; want it to say %q", held.Phase, held.Detail, want)
		}
	}
	if cut.cut.Load() == 0 || !slices.Equal(held.Nodes, []string{"node-1", "node-3"}) {
		t.Fatalf("%d connections cut, nodes %v; want node-3's cut, node-3 in node-2's rank", cut.cut.Load(), held.Nodes)
	}
	cliAt(ctx, t, addr, l.LogDir)("resume", s.Name)
	end := awaitRun(ctx, t, run, l.LogDir)
	if end.Phase != spec.PhaseCompleted || end.Step != s.Steps || len(end.Recoveries) != 2 {
		t.Fatalf("ended %s at step %d after %d recoveries %+v; want completed at %d after node-2's and node-3's", end.Phase, end.Step,
			len(end.Recoveries), end.Recoveries, s.Steps)
	}
	rec := end.Recoveries[1]
	if !slices.Equal(rec.FailedNodes, []string{"node-3"}) || !slices.Equal(rec.Replacement, []string{"node-4"}) || rec.ResumeStep != 100 ||
		!strings.Contains(rec.Reason, "node node-3 could not read the checkpoint at step 100 in two tries in a row while node node-1 read it: cut off from the bucket") ||
		!strings.Contains(rec.Reason, "(no restart counted: ") {
		t.Errorf("second recovery %+v; want node-3 replaced by node-4 from step 100, cut off from the bucket, no restart counted", rec)
	}
	if !slices.Equal(end.CutOff, []string{"node-3"}) {
		t.Errorf("the status names %v cut off; want node-3", end.CutOff)
	}
	if r := registryRecord(ctx, t, c, "node-3"); !r.Failed || r.Misconfigured || !strings.Contains(r.FailReason, "cut off from the bucket") {
		t.Errorf("node-3 in the registry: %+v; want it failed (not misconfigured: its lease brings it back), saying why", r)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_cut_off_free.json")
}

// cutOff is an S3 bucket (bucket) that cuts every connection whose
// requests come from a worker started by startCutOffWorker (its
// User-Agent says so: the AWS SDK adds AWS_SDK_UA_APP_ID to it) as it
// arrives, counting them in cut — a node with no route to the bucket —
// until mended.
type cutOff struct {
	cut    atomic.Int64
	mended atomic.Bool
}

func (c *cutOff) bucket(t *testing.T) string {
	return s3fake.BucketOn(t, s3mem.New(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.mended.Load() || !strings.Contains(r.UserAgent(), "app/cut-off") {
				next.ServeHTTP(w, r)
				return
			}
			c.cut.Add(1)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		})
	})
}

// startCutOffWorker starts node id's worker, its requests to the bucket
// marked for cutOff.bucket, with env added to its environment.
func startCutOffWorker(t *testing.T, l *dev.Launcher, addr, bucket, id string, env ...string) {
	t.Helper()
	was := l.Env
	l.Env = append(append(slices.Clip(l.Env), "AWS_SDK_UA_APP_ID=cut-off"), env...)
	defer func() { l.Env = was }()
	startNodeWorkerAt(t, l, addr, bucket, id, id)
}

// TestRankZeroCutOffFromTheBucketIsLeft: node-1, rank 0, cannot write to
// the S3 bucket its peer writes to. Its checkpoint uploads are refused;
// two in a row hold the run, and the hold's save-only chunk has node-2
// store the state the nodes kept (chunk protocol 5: every rank holds it)
// — stored at once, the run trains on. When that happens again, the run
// moves off node-1 at that checkpoint: node-3 takes rank 0, nothing is
// retrained, no restart counted, and the run ends with the weights of a
// run whose bucket never failed. Before, rank 0 alone tried every save
// and the run held until an operator drained node-1.
func TestRankZeroCutOffFromTheBucketIsLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var cut cutOff
	bucket := cut.bucket(t)
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{checkpointURL: bucket})
	// Each request of node-1's tried once (the SDK's default, three
	// tries with backoff, takes ~3–7 s to give up on each and made the
	// test 32 s long; TestNodeCutOffFromTheBucketIsReplaced keeps it).
	startCutOffWorker(t, l, addr, bucket, "node-1", "AWS_MAX_ATTEMPTS=1")
	startNodeWorkerAt(t, l, addr, bucket, "node-2", "node-2")
	startNodeWorkerAt(t, l, addr, bucket, "node-3", "node-3")
	waitRegistered(ctx, t, c, 3)

	s := spec.RunSpec{Name: "rank0-cut-off", Nodes: 2, Steps: 400, ChunkSteps: 50}.WithDefaults()
	end := awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: s}), l.LogDir)
	if end.Phase != spec.PhaseCompleted || end.Step != s.Steps || len(end.Recoveries) != 0 || end.LastCkpt == nil || end.LastCkpt.Step != s.Steps {
		t.Fatalf("ended %s at step %d, recoveries %+v, last checkpoint %+v; want completed at %d with its checkpoint, no recovery",
			end.Phase, end.Step, end.Recoveries, end.LastCkpt, s.Steps)
	}
	if !slices.Equal(end.Nodes, []string{"node-3", "node-2"}) || len(end.Rescalings) == 0 || cut.cut.Load() == 0 {
		t.Fatalf("nodes %v, rescalings %+v, %d connections cut; want node-3 in node-1's rank", end.Nodes, end.Rescalings, cut.cut.Load())
	}
	rec := end.Rescalings[len(end.Rescalings)-1]
	if !strings.Contains(rec.Reason, "node-1 replaced: cut off from the bucket: could not store the run's checkpoint in two holds in a row while node node-2 stored it") ||
		!slices.Equal(end.CutOff, []string{"node-1"}) {
		t.Errorf("the move: %+v, cut off %v; want it to say node-1 is cut off from the bucket", rec, end.CutOff)
	}
	h := fetchHistory(ctx, t, c, spec.RunIDPrefix+s.Name)
	recordHistory(t, h, "trainingrun_rank0_cut_off.json")

	// The same job once node-1 reaches the bucket again (the first run
	// shunned it; this one takes it).
	cut.mended.Store(true)
	s.Name = "rank0-fault-free"
	clean := awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: s}), l.LogDir)
	if clean.Phase != spec.PhaseCompleted || clean.WeightsSHA256 == "" || clean.WeightsSHA256 != end.WeightsSHA256 {
		t.Errorf("weights %q after the move, %q fault-free (%s on %v); want the same", end.WeightsSHA256, clean.WeightsSHA256, clean.Phase, clean.Nodes)
	}
}
