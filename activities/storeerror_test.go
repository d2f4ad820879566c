package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
)

// TestStoreErrorsNameTheNodeAndBucket: every way a checkpoint write of a
// chunk fails — a synchronous save the run is told of (the run's hold
// shows it), the retry's log line, a background upload the next chunk
// reports, a synchronous save that fails the chunk — names the node that
// could not store it and the bucket, whether the bucket refuses (a
// file:// bucket whose runs/ is a file) or does not answer (an
// S3 endpoint that takes requests and never answers). Before, the run's
// status said "the checkpoint at step 30 could not be stored (none
// since): save checkpoint: checkpoint: save runs/…: …", and a user with
// several nodes and buckets could not tell where.
func TestStoreErrorsNameTheNodeAndBucket(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket func(t *testing.T) string // a bucket that fails every write
		want   string                    // and says so
	}{
		{"refused", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "runs"), []byte("not a directory"), 0o644); err != nil {
				t.Fatal(err)
			}
			return "file://" + dir
		}, "not a directory"},
		{"stalled", func(t *testing.T) string {
			hang := &s3fake.Hang{}
			hang.On.Store(true)
			return s3fake.Bucket(t, hang.Wrap)
		}, "the bucket did not answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.bucket(t)
			nodes, m := newNodes(t, 2, url)
			logs, seen := observer.New(zapcore.WarnLevel)
			nodes[0].Logger = zap.New(logs)
			for _, n := range nodes {
				n.CheckpointRequestTimeout = 300 * time.Millisecond
			}
			s := spec.RunSpec{Name: "named", Nodes: 2, Steps: 120, ChunkSteps: 30}.WithDefaults()
			in := spec.ChunkInput{RunID: "run/named", Spec: s, Membership: m, Token: "secret", Checkpoint: true}
			epoch := 0
			chunk := func(from, to int64, tweak func(*spec.ChunkInput)) ([]*spec.ChunkResult, []error) {
				epoch++
				c := in
				c.Session, c.From, c.To = fmt.Sprintf("run/named/g1/e%d", epoch), from, to
				tweak(&c)
				return runChunk(t, nodes, c)
			}
			says := func(step int64) string {
				return fmt.Sprintf("node node-1 cannot store the checkpoint at step %d in %s: ", step, url)
			}
			check := func(what, msg string, step int64) {
				t.Helper()
				if !strings.Contains(msg, says(step)) || !strings.Contains(msg, tc.want) {
					t.Errorf("%s: %q; want it to say %q … %q", what, msg, says(step), tc.want)
				}
			}

			res, errs := chunk(0, 30, func(c *spec.ChunkInput) { c.ReportStorageFailure = true })
			if errs[0] != nil || errs[1] != nil || res[0].CheckpointFailed == nil {
				t.Fatalf("a save the run is told of: %v, %+v", errs, res[0])
			}
			check("the refusal the run holds for", res[0].CheckpointFailed.Error, 30)
			retries := seen.FilterMessage("checkpoint save failed; retrying").All()
			if len(retries) == 0 {
				t.Fatal("no retry logged")
			}
			check("the retry's log line", fmt.Sprint(retries[0].ContextMap()["error"]), 30)

			if _, errs := chunk(30, 60, func(c *spec.ChunkInput) { c.AsyncCheckpoint = true }); errs[0] != nil || errs[1] != nil {
				t.Fatalf("the chunk that starts the upload: %v", errs)
			}
			res, errs = chunk(60, 90, func(c *spec.ChunkInput) { c.Checkpoint = false })
			if errs[0] != nil || errs[1] != nil || res[0].CheckpointFailed == nil {
				t.Fatalf("the chunk after the upload: %v, %+v", errs, res[0])
			}
			check("the background upload the next chunk reports", res[0].CheckpointFailed.Error, 60)

			_, errs = chunk(90, 120, func(*spec.ChunkInput) {})
			var ae *temporal.ApplicationError
			if !errors.As(errs[0], &ae) || ae.Type() != spec.ErrTypeCheckpointStorage {
				t.Fatalf("a synchronous save that fails the chunk: %v; want %s", errs[0], spec.ErrTypeCheckpointStorage)
			}
			check("the chunk's failure", ae.Message(), 120)
		})
	}
}

// TestWaitErrorSaysTheUploadWentOn: a wait for an upload cut by its
// context (a stop's grace over) says the upload was still going, not that
// the bucket refused it; a failed upload names node and bucket.
func TestWaitErrorSaysTheUploadWentOn(t *testing.T) {
	n := &Node{ID: "n1"}
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	url := "s3://ckpt?endpoint=http://u:secret@minio:9000"
	for _, tc := range []struct {
		ctx        context.Context
		want, not  string
		underlying error
	}{
		{cut, "node n1: the upload of the checkpoint at step 400 to s3://ckpt", "cannot store", context.Canceled},
		{context.Background(), "node n1 cannot store the checkpoint at step 400 in s3://ckpt", "still going", errors.New("refused")},
	} {
		err := n.waitError(tc.ctx, url, 400, tc.underlying)
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.not) || strings.Contains(err.Error(), "secret") ||
			!errors.Is(err, tc.underlying) {
			t.Errorf("%v; want %q, not %q, no password, wrapping %v", err, tc.want, tc.not, tc.underlying)
		}
	}
}
