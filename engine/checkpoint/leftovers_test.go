package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenMustExist: with MustExist a file:// bucket whose directory is
// missing is not created, and the error says the bucket does not exist;
// without it (writers) the directory is created, and the URL's own
// create_dir wins.
func TestOpenMustExist(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name      string
		mustExist bool
		query     string
		created   bool // the directory exists after Open
	}{
		{name: "read-only", mustExist: true},
		{name: "writer", created: true},
		{name: "read-only, create_dir in the URL", mustExist: true, query: "?create_dir=true", created: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "mistyped")
			url := "file://" + dir + tc.query
			s, err := OpenWithOptions(ctx, url, Options{MustExist: tc.mustExist})
			_, serr := os.Stat(dir)
			if got := serr == nil; got != tc.created {
				t.Fatalf("Open(%s, MustExist %v): directory created: %v, want %v", url, tc.mustExist, got, tc.created)
			}
			if !tc.created {
				if err == nil || !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), "bucket "+url+" does not exist (no directory "+dir+")") {
					t.Fatalf("Open of a missing bucket: %v; want ErrNoBucket naming the bucket and its directory", err)
				}
				return
			}
			must(t, err)
			s.Close()
		})
	}
	// An existing bucket opens with MustExist, and lists.
	dir := t.TempDir()
	s, err := OpenWithOptions(ctx, "file://"+dir, Options{MustExist: true})
	must(t, err)
	defer s.Close()
	if refs, err := s.List(ctx, "r"); err != nil || len(refs) != 0 {
		t.Fatalf("List = %v, %v", refs, err)
	}
}

// TestManifestError says why a manifest List lists as unreadable does
// not read, nil for a good one, ErrNotFound for none.
func TestManifestError(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := OpenWithOptions(ctx, "file://"+dir, testOpts)
	must(t, err)
	defer s.Close()
	good := mustSave(t, s, "r", 10)
	bad := mustSave(t, s, "r", 20)
	must(t, os.WriteFile(filepath.Join(dir, filepath.FromSlash(bad.Key)), []byte(`{"format":`), 0o644))
	var ce *CorruptError
	if err := s.ManifestError(ctx, good); err != nil {
		t.Errorf("good manifest: %v", err)
	}
	if err := s.ManifestError(ctx, bad); !errors.As(err, &ce) || ce.Key != bad.Key || ce.Reason != "manifest is not valid JSON" {
		t.Errorf("truncated manifest: %v; want a *CorruptError naming %s", err, bad.Key)
	}
	if err := s.ManifestError(ctx, Ref{Run: "r", Step: 30}); !errors.Is(err, ErrNotFound) {
		t.Errorf("no manifest: %v; want ErrNotFound", err)
	}
}

// TestGCRemovesLeftovers: GC deletes what killed writers left in a
// file:// bucket — temporary files next to chunks and manifests, metadata
// sidecars of objects that are gone, empty step directories — once older
// than the grace period and minLeftoverAge, and nothing a live writer
// could still be writing (younger), nor anything not named like a
// writer's.
func TestGCRemovesLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration // Options.GCGrace
		age   time.Duration // how old the leftovers are
		gone  bool          // GC deletes them
	}{
		{name: "old, no grace", grace: -1, age: 3 * time.Hour, gone: true},
		{name: "old, past the grace", grace: time.Hour, age: 3 * time.Hour, gone: true},
		{name: "within the grace", grace: time.Hour, age: 30 * time.Minute},
		// No grace, but a write may be in flight: minLeftoverAge.
		{name: "young, no grace", grace: -1, age: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			o := testOpts
			o.GCGrace = tc.grace
			s, err := OpenWithOptions(ctx, "file://"+dir, o)
			must(t, err)
			defer s.Close()
			ref, _, err := s.SaveIncremental(ctx, "r", 100, randBytes(7, 2*testChunk))
			must(t, err)
			run := filepath.Join(dir, "runs", "r")
			hash := strings.Repeat("ab", 16)
			path := func(rel string) string { return filepath.Join(run, filepath.FromSlash(rel)) }
			leftovers := []string{
				"chunks/" + hash + ".17e2b1c4d5a6f700.tmp",      // fileblob's temporary chunk
				"ckpt/000000000200/manifest.json.tmp123",        // a half-written manifest
				"ckpt/000000000300/state.bin.1a2b.tmp",          // a half-written v1 payload
				"ckpt/000000000400/manifest.json.attrs",         // a sidecar whose manifest is gone
				"chunks/" + strings.Repeat("cd", 16) + ".attrs", // a sidecar whose chunk is gone
			}
			kept := []string{
				"chunks/notes.tmp",                 // not named like a writer's
				"ckpt/000000000100/manifest.json",  // the checkpoint
				"ckpt/000000000100/report.tmp.txt", // not a writer's
			}
			emptyDir := "ckpt/000000000500"
			for _, rel := range append(leftovers, kept[0], kept[2]) {
				must(t, os.MkdirAll(filepath.Dir(path(rel)), 0o755))
				must(t, os.WriteFile(path(rel), []byte("x"), 0o644))
			}
			must(t, os.MkdirAll(path(emptyDir), 0o755))
			then := time.Now().Add(-tc.age)
			for _, rel := range append(append(leftovers, kept...), emptyDir, "ckpt/000000000200", "ckpt/000000000300", "ckpt/000000000400") {
				must(t, os.Chtimes(path(rel), then, then))
			}
			want := 0
			if tc.gone {
				want = len(leftovers) + 1
			}
			// A preview counts what GC deletes, and deletes nothing.
			pre, err := s.GCPreview(ctx, "r", nil)
			must(t, err)
			if pre.Leftovers != want {
				t.Errorf("GCPreview says %d leftovers; want %d", pre.Leftovers, want)
			}
			for _, rel := range append(leftovers, emptyDir) {
				if _, err := os.Stat(path(rel)); err != nil {
					t.Errorf("%s went in a preview: %v", rel, err)
				}
			}
			st, err := s.GC(ctx, "r")
			must(t, err)
			for _, rel := range append(leftovers, emptyDir) {
				_, err := os.Stat(path(rel))
				if gone := errors.Is(err, os.ErrNotExist); gone != tc.gone {
					t.Errorf("%s gone: %v, want %v (%v)", rel, gone, tc.gone, err)
				}
			}
			for _, rel := range kept {
				if _, err := os.Stat(path(rel)); err != nil {
					t.Errorf("%s, not a leftover, went: %v", rel, err)
				}
			}
			if st.Leftovers != want {
				t.Errorf("GC says %d leftovers deleted; want %d", st.Leftovers, want)
			}
			if _, err := s.Load(ctx, ref); err != nil {
				t.Errorf("the checkpoint after GC: %v", err)
			}
		})
	}
}
