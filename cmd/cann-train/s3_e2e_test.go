package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestRunCheckpointsOnS3 keeps a run's checkpoints in an S3 bucket: a
// loopback S3 server (gofakes3, the S3 REST API over real HTTP) addressed
// as MinIO is in the README — endpoint, path-style URLs, keys from the
// node workers' environment. A node killed mid-run is replaced and its
// rank resumes from the checkpoint read back from the bucket, ending with
// the weights of a fault-free run. The checkpoint it resumes from was
// still uploading when the node died, and the bucket fails (503, as an
// overloaded or restarting MinIO does) first the lookup of that
// checkpoint's manifest, then the reads of its data: for each the run
// blames no node and does not rewind past it, but holds in
// waiting-storage, saying so, until the bucket serves it again and a
// resume cuts the wait short.
func TestRunCheckpointsOnS3(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	down := &unreadChunks{prefix: "/ckpt/runs/s3-killed/chunks/",
		manifest: "/ckpt/" + checkpoint.ManifestKey("s3-killed", 100)}
	down.failing.Store(true)
	down.lookups.Store(true)
	// The node workers (children) and the control worker (this process),
	// which finds checkpoints and writes the run's report, read the keys
	// from the environment (s3fake sets them).
	backend := s3mem.New()
	bucket := s3fake.BucketOn(t, backend, down.wrap)
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{checkpointURL: bucket},
		"node-1", "node-2", "node-3")

	base := spec.RunSpec{Nodes: 2, Steps: 200, ChunkSteps: 50, HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
	start := func(name string) client.WorkflowRun {
		s := base
		s.Name = name
		return startRun(ctx, t, c, workflows.RunInput{Spec: s})
	}
	run := start("s3-killed")
	faultKill(ctx, t, addr, "s3-killed", "node-2", 130)
	cli := cliAt(ctx, t, addr, l.LogDir)
	lookup := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a hold for the checkpoint's lookup", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait
	})
	if !strings.Contains(lookup.Detail, "the checkpoint storage did not say whether the checkpoint at step 100, uploading when the node was lost, is stored") ||
		!strings.Contains(lookup.Detail, "SlowDown") || down.lookupsRefused.Load() == 0 || down.refused.Load() != 0 {
		t.Fatalf("held: %q, %d lookup(s) and %d read(s) refused; want the reason, refused lookups, no read yet",
			lookup.Detail, down.lookupsRefused.Load(), down.refused.Load())
	}
	down.lookups.Store(false)
	cli("resume", "s3-killed")
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a hold for the checkpoint's data", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait && strings.Contains(st.Detail, "cannot read")
	})
	if !strings.Contains(held.Detail, "cannot read the checkpoint at step 100 from s3://ckpt") || len(held.Recoveries) != 1 || down.refused.Load() == 0 {
		t.Fatalf("held: %q after %d recovery(ies), %d read(s) refused; want the reason, the kill's recovery only, refusals",
			held.Detail, len(held.Recoveries), down.refused.Load())
	}
	down.failing.Store(false)
	cli("resume", "s3-killed")
	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run did not survive the kill: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != base.Steps || len(st.Recoveries) != 1 {
		t.Fatalf("status %s at step %d, recoveries %+v; want completed at %d after one recovery", st.Phase, st.Step, st.Recoveries, base.Steps)
	}
	if rec := st.Recoveries[0]; rec.FailedAtStep != 130 || rec.ResumeStep != 100 || rec.LostSteps != 30 {
		t.Errorf("recovery %+v: want failure at 130 and a resume from the checkpoint at 100", rec)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_resolve_hold.json")

	list, err := backend.ListBucket("ckpt", nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var chunks, manifests, report int
	for _, o := range list.Contents {
		switch k := o.Key; {
		case !strings.HasPrefix(k, "runs/s3-killed/"):
		case strings.Contains(k, "/chunks/"):
			chunks++
		case strings.HasSuffix(k, "report.json"):
			report++
		default:
			manifests++
		}
	}
	t.Logf("the run's objects in the bucket: %d chunks, %d others, %d report", chunks, manifests, report)
	if chunks == 0 || manifests == 0 || report != 1 {
		t.Fatalf("want checkpoint chunks, manifests and the report in the S3 bucket: %d, %d, %d (%d objects in all)", chunks, manifests, report, len(list.Contents))
	}

	var clean spec.RunStatus
	if err := start("s3-fault-free").Get(ctx, &clean); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatal(err)
	}
	if st.WeightsSHA256 != clean.WeightsSHA256 {
		t.Errorf("recovered run's weights %s differ from the fault-free run's %s", st.WeightsSHA256, clean.WeightsSHA256)
	}
}

// TestRunSkipsDeletedCheckpoints: a run's checkpoints at 100, 150 and
// 200 are gone from its S3 bucket (deleted by hand, or by a lifecycle
// rule: here the bucket answers 404 for their manifests). A node is killed
// at 230, while 200 — its rank 0's upload, committed but gone — was
// pending: the recovery finds it gone and restores 150, which its nodes
// find gone too. The second recovery looks the older ones up in the
// bucket and resumes from 50 at once (versionSkipGone); before, each
// missing checkpoint took a restart of its own, and the third ran past
// max_restarts (2) and failed the run.
func TestRunSkipsDeletedCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	gone := map[string]bool{}
	for _, step := range []int64{100, 150, 200} {
		gone["/ckpt/"+checkpoint.ManifestKey("skip-gone", step)] = true
	}
	var hidden atomic.Int64
	bucket := s3fake.Bucket(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if (r.Method == http.MethodGet || r.Method == http.MethodHead) && gone[r.URL.Path] {
				hidden.Add(1)
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusNotFound)
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>`))
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{checkpointURL: bucket}, "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "skip-gone", Nodes: 2, Steps: 300, ChunkSteps: 50, MaxRestarts: 2,
		HeartbeatTimeout: spec.Duration(3 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	faultKill(ctx, t, addr, s.Name, "node-2", 230)
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 2 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d, recoveries %+v: want completed after two", st.Phase, st.Step, st.Recoveries)
	}
	first, second := st.Recoveries[0], st.Recoveries[1]
	if first.ResumeStep != 150 || second.ResumeStep != 50 || len(second.FailedNodes) != 0 ||
		!strings.Contains(second.Reason, "does not find the run's checkpoint at step 150") || !strings.Contains(second.Reason, "it was deleted") {
		t.Errorf("recoveries %+v; want the kill's back to 150, then back to 50 blaming nobody", st.Recoveries)
	}
	if hidden.Load() == 0 {
		t.Error("no request for a deleted manifest")
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_skip_gone_norestart.json")
}

// unreadChunks fails, while failing, every read of an object under
// prefix — a run's checkpoint chunks, which only a restore reads — and,
// while lookups, every read of the manifest once it is written — which
// only a lookup of the checkpoint or its restore reads — with 503
// SlowDown; writes and existence checks pass.
type unreadChunks struct {
	prefix, manifest string
	failing, lookups atomic.Bool
	written          atomic.Bool // the manifest
	refused          atomic.Int64
	lookupsRefused   atomic.Int64
}

func (u *unreadChunks) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n *atomic.Int64
		switch {
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, u.prefix) && u.failing.Load():
			n = &u.refused
		case r.Method == http.MethodGet && r.URL.Path == u.manifest && u.written.Load() && u.lookups.Load():
			n = &u.lookupsRefused
		}
		if n == nil {
			next.ServeHTTP(w, r)
			if r.Method == http.MethodPut && r.URL.Path == u.manifest {
				u.written.Store(true)
			}
			return
		}
		n.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
	})
}
