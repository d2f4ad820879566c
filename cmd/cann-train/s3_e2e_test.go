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

	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestRunCheckpointsOnS3 keeps a run's checkpoints in an S3 bucket: a
// loopback S3 server (gofakes3, the S3 REST API over real HTTP) addressed
// as MinIO is in the README — endpoint, path-style URLs, keys from the
// node workers' environment. A node killed mid-run is replaced and its
// rank resumes from the checkpoint read back from the bucket, ending with
// the weights of a fault-free run. The bucket fails the first reads of
// the checkpoint's data (503, as an overloaded or restarting MinIO does): the
// run blames no node for it but holds in waiting-storage, saying so,
// until the bucket serves it again and a resume cuts the wait short.
func TestRunCheckpointsOnS3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	down := &unreadChunks{prefix: "/ckpt/runs/s3-killed/chunks/"}
	down.failing.Store(true)
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
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a hold for the checkpoint storage", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait
	})
	if !strings.Contains(held.Detail, "cannot read the checkpoint at step 100 from s3://ckpt") || len(held.Recoveries) != 1 || down.refused.Load() == 0 {
		t.Fatalf("held: %q after %d recovery(ies), %d read(s) refused; want the reason, the kill's recovery only, refusals",
			held.Detail, len(held.Recoveries), down.refused.Load())
	}
	down.failing.Store(false)
	cliAt(ctx, t, addr, l.LogDir)("resume", "s3-killed")
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
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_load_hold.json")

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

// unreadChunks fails, while failing, every read of an object under
// prefix — a run's checkpoint chunks, which only a restore reads — with
// 503 SlowDown; writes and existence checks pass.
type unreadChunks struct {
	prefix  string
	failing atomic.Bool
	refused atomic.Int64
}

func (u *unreadChunks) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, u.prefix) && u.failing.Load() {
			u.refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			return
		}
		next.ServeHTTP(w, r)
	})
}
