package activities

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/internal/s3fake"
	"github.com/cann-train/cann-train/spec"
)

// TestResolveCheckpoint: a committed checkpoint is found from its
// manifest; one never written, or whose manifest is unreadable, is
// NoSuchCheckpoint (the run falls back to an older one); a storage that
// refuses the lookup is not — the checkpoint may be there, and the run
// holds for its storage rather than rewind past it.
func TestResolveCheckpoint(t *testing.T) {
	ctx := context.Background()
	var refuse atomic.Bool
	bucket := s3fake.Bucket(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if refuse.Load() {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	dir := t.TempDir()
	file := "file://" + dir
	for _, url := range []string{file, bucket} {
		store, err := checkpoint.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []int64{10, 20} {
			if _, err := store.Save(ctx, "r", step, []byte("state at "+strings.Repeat("x", int(step)))); err != nil {
				t.Fatal(err)
			}
		}
		_ = store.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(checkpoint.ManifestKey("r", 20))), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		url     string
		step    int64
		refuse  bool
		missing bool   // NoSuchCheckpoint
		err     string // in the error
	}{
		{name: "found", url: file, step: 10},
		{name: "found on S3", url: bucket, step: 20},
		{name: "never written", url: file, step: 15, missing: true, err: `no committed checkpoint of run "r" at step 15`},
		{name: "unreadable manifest", url: file, step: 20, missing: true, err: `the checkpoint of run "r" at step 20 in ` + file + " has an unreadable manifest"},
		{name: "storage refuses", url: bucket, step: 20, refuse: true, err: `look up the checkpoint of run "r" at step 20 in s3://ckpt`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refuse.Store(tc.refuse)
			defer refuse.Store(false)
			got, err := Planner{}.ResolveCheckpoint(ctx, spec.CheckpointRef{URL: tc.url, Run: "r", Step: tc.step})
			var app *temporal.ApplicationError
			isMissing := errors.As(err, &app) && app.Type() == spec.ErrTypeNoSuchCheckpoint
			switch {
			case tc.err == "" && (err != nil || got.Step != tc.step || got.SHA256 == "" || got.Key != checkpoint.ManifestKey("r", tc.step) || got.URL != tc.url):
				t.Fatalf("ResolveCheckpoint = %+v, %v; want the checkpoint at %d", got, err, tc.step)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("ResolveCheckpoint = %+v, %v; want an error with %q", got, err, tc.err)
			case isMissing != tc.missing:
				t.Fatalf("error %v: NoSuchCheckpoint %v, want %v", err, isMissing, tc.missing)
			}
		})
	}
}
