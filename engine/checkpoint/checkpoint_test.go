package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/cann-train/cann-train/internal/s3fake"
)

// backends runs f against a memblob, a temp-dir fileblob, an s3blob and a
// gcsblob store (S3 and Cloud Storage servers on loopback, see s3Bucket and
// gcsBucket), each with direct access to the underlying bucket for
// tampering.
func backends(t *testing.T, f func(t *testing.T, s *Store, b *blob.Bucket)) {
	t.Run("memblob", func(t *testing.T) {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { b.Close() })
		f(t, New(b), b)
	})
	t.Run("fileblob", func(t *testing.T) {
		b, err := fileblob.OpenBucket(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		f(t, New(b), b)
	})
	for _, srv := range []struct {
		name string
		open func(*testing.T) string
	}{{"s3blob", s3Bucket}, {"gcsblob", gcsBucket}} {
		t.Run(srv.name, func(t *testing.T) {
			b, err := blob.OpenBucket(t.Context(), srv.open(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			f(t, New(b), b)
		})
	}
}

func payload(step int64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("state-%d|", step)), 100+int(step))
}

func mustSave(t *testing.T, s *Store, run string, step int64) Ref {
	t.Helper()
	ref, err := s.Save(t.Context(), run, step, payload(step))
	if err != nil {
		t.Fatalf("Save(%s, %d): %v", run, step, err)
	}
	return ref
}

func steps(refs []Ref) []int64 {
	var out []int64
	for _, r := range refs {
		out = append(out, r.Step)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, _ *blob.Bucket) {
		ctx := t.Context()
		before := time.Now().UTC()
		saved := make(map[int64]Ref)
		for _, step := range []int64{100, 5, 20, 0} {
			saved[step] = mustSave(t, s, "run-1", step)
		}
		after := time.Now().UTC()
		refs, err := s.List(ctx, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		if got := steps(refs); !slices.Equal(got, []int64{0, 5, 20, 100}) {
			t.Fatalf("List steps = %v, want [0 5 20 100]", got)
		}
		latest, err := s.Latest(ctx, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		want := Ref{Run: "run-1", Step: 100, Key: "runs/run-1/ckpt/000000000100/manifest.json",
			SHA256: refs[3].SHA256, Bytes: int64(len(payload(100))), Created: saved[100].Created}
		if latest != want || refs[3] != want || saved[100] != want {
			t.Fatalf("Latest() = %+v, List()[3] = %+v, Save = %+v, want %+v", latest, refs[3], saved[100], want)
		}
		for _, r := range refs {
			if r.Created.Before(before) || r.Created.After(after) {
				t.Errorf("checkpoint %d created %v; want the time of its save, within [%v, %v]", r.Step, r.Created, before, after)
			}
		}
		for _, ref := range refs {
			got, err := s.Load(ctx, ref)
			if err != nil {
				t.Fatalf("Load(%d): %v", ref.Step, err)
			}
			if !bytes.Equal(got, payload(ref.Step)) {
				t.Fatalf("Load(%d) returned the wrong payload", ref.Step)
			}
		}
		// A Ref with only Run and Step is enough.
		if got, err := s.Load(ctx, Ref{Run: "run-1", Step: 20}); err != nil || !bytes.Equal(got, payload(20)) {
			t.Fatalf("Load(bare ref) = %v", err)
		}
		// An empty payload is a valid checkpoint.
		ref, err := s.Save(ctx, "run-1", 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(ctx, ref); err != nil || len(got) != 0 {
			t.Fatalf("Load(empty) = %q, %v", got, err)
		}
	})
}

func TestManifestLast(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		// A payload whose manifest was never written (crash between the
		// two writes) is invisible.
		if err := b.WriteAll(ctx, "runs/r/ckpt/000000000009/state.bin", []byte("orphan"), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Latest(ctx, "r"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Latest() with only a payload: %v, want ErrNotFound", err)
		}
		if _, err := s.Load(ctx, Ref{Run: "r", Step: 9}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Load() with only a payload: %v, want ErrNotFound", err)
		}
		// Observe the store between its writes (it reads the clock just
		// before writing the manifest): the payload is there, the manifest
		// is not, and the checkpoint is invisible.
		observed := false
		s.now = func() time.Time {
			observed = true
			if ok, _ := b.Exists(ctx, dataKey("r", 3)); !ok {
				t.Error("manifest about to be written before the payload exists")
			}
			if ok, _ := b.Exists(ctx, ManifestKey("r", 3)); ok {
				t.Error("manifest written before the payload")
			}
			if _, err := s.Latest(ctx, "r"); !errors.Is(err, ErrNotFound) {
				t.Errorf("checkpoint visible before its manifest: %v", err)
			}
			return time.Now()
		}
		mustSave(t, s, "r", 3)
		if !observed {
			t.Fatal("Save did not consult the clock; the ordering check did not run")
		}
		if ref, err := s.Latest(ctx, "r"); err != nil || ref.Step != 3 {
			t.Fatalf("Latest() = %+v, %v; want step 3", ref, err)
		}
		// Save writes the manifest after the payload: a canceled save
		// leaves no manifest behind.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Save(cctx, "r", 10, payload(10)); err == nil {
			t.Fatal("Save with a canceled context succeeded")
		}
		if ok, _ := b.Exists(ctx, ManifestKey("r", 10)); ok {
			t.Fatal("a failed Save left a manifest")
		}
	})
}

func TestCorruptionDetected(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref)
		wantKey string // "data" or "manifest"
		reason  string
	}{
		{"flipped byte", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			data, _ := b.ReadAll(ctx, dataKey(ref.Run, ref.Step))
			data[len(data)/2] ^= 0x01
			must(t, b.WriteAll(ctx, dataKey(ref.Run, ref.Step), data, nil))
		}, "data", "payload sha256"},
		{"truncated payload", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			data, _ := b.ReadAll(ctx, dataKey(ref.Run, ref.Step))
			must(t, b.WriteAll(ctx, dataKey(ref.Run, ref.Step), data[:len(data)-10], nil))
		}, "data", "truncated"},
		{"extended payload", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			data, _ := b.ReadAll(ctx, dataKey(ref.Run, ref.Step))
			must(t, b.WriteAll(ctx, dataKey(ref.Run, ref.Step), append(data, 'x'), nil))
		}, "data", "longer"},
		{"missing payload", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			must(t, b.Delete(ctx, dataKey(ref.Run, ref.Step)))
		}, "data", "missing"},
		{"garbage manifest", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			must(t, b.WriteAll(ctx, ref.Key, []byte("\x00\x01 not json"), nil))
		}, "manifest", "not valid JSON"},
		{"truncated manifest", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			m, _ := b.ReadAll(ctx, ref.Key)
			must(t, b.WriteAll(ctx, ref.Key, m[:len(m)/2], nil))
		}, "manifest", "not valid JSON"},
		{"future manifest version", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			editManifest(t, ctx, b, ref, func(m *manifest) { m.Version = 3 })
		}, "manifest", "unsupported manifest version 3"},
		{"manifest for another step", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			editManifest(t, ctx, b, ref, func(m *manifest) { m.Step = 999 })
		}, "manifest", "step 999"},
		{"manifest with bad hash", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			editManifest(t, ctx, b, ref, func(m *manifest) { m.SHA256 = "xyz" })
		}, "manifest", "not a hex SHA-256"},
		{"manifest replaced", func(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref) {
			// A consistent checkpoint, but not the one the Ref names.
			editManifest(t, ctx, b, ref, func(m *manifest) { m.SHA256 = strings.Repeat("ab", 32) })
		}, "manifest", "differs from the ref"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
				ctx := t.Context()
				ref := mustSave(t, s, "job", 42)
				tc.tamper(t, ctx, b, ref)
				_, err := s.Load(ctx, ref)
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Load() = %v, want a *CorruptError", err)
				}
				wantKey := ref.Key
				if tc.wantKey == "data" {
					wantKey = dataKey(ref.Run, ref.Step)
				}
				if ce.Key != wantKey || !strings.Contains(ce.Reason, tc.reason) || !strings.Contains(err.Error(), wantKey) {
					t.Fatalf("CorruptError{Key: %q, Reason: %q}, want key %q and a reason containing %q", ce.Key, ce.Reason, wantKey, tc.reason)
				}
				if errors.Is(err, ErrNotFound) {
					t.Error("corruption reported as ErrNotFound")
				}
			})
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func editManifest(t *testing.T, ctx context.Context, b *blob.Bucket, ref Ref, edit func(*manifest)) {
	t.Helper()
	raw, err := b.ReadAll(ctx, ref.Key)
	must(t, err)
	var m manifest
	must(t, json.Unmarshal(raw, &m))
	edit(&m)
	raw, err = json.Marshal(m)
	must(t, err)
	must(t, b.WriteAll(ctx, ref.Key, raw, nil))
}

func TestOtherRunsNotListed(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		mustSave(t, s, "a", 1)
		mustSave(t, s, "ab", 2)
		mustSave(t, s, "a-b", 3)
		mustSave(t, s, "A", 4)
		must(t, b.WriteAll(ctx, "runs/a/ckpt/junk/manifest.json", []byte("{}"), nil))
		must(t, b.WriteAll(ctx, "runs/a/ckpt/000000000005/other.json", []byte("{}"), nil))
		must(t, b.WriteAll(ctx, "runs/a/notes.txt", []byte("hi"), nil))
		refs, err := s.List(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got := steps(refs); !slices.Equal(got, []int64{1}) {
			t.Fatalf("List(a) steps = %v, want [1]", got)
		}
		if ref, err := s.Latest(ctx, "ab"); err != nil || ref.Step != 2 {
			t.Fatalf("Latest(ab) = %+v, %v", ref, err)
		}
		if _, err := s.Latest(ctx, "b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Latest(b) = %v, want ErrNotFound", err)
		}
	})
}

func TestLoadLatestValidFallsBack(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		for _, step := range []int64{10, 20, 30, 40} {
			mustSave(t, s, "r", step)
		}
		// Newest: flipped byte; next: garbage manifest; 20 is intact.
		data, _ := b.ReadAll(ctx, dataKey("r", 40))
		data[0] ^= 0xff
		must(t, b.WriteAll(ctx, dataKey("r", 40), data, nil))
		must(t, b.WriteAll(ctx, ManifestKey("r", 30), []byte("garbage"), nil))

		// List still shows the garbage-manifest checkpoint, without hash.
		refs, err := s.List(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if got := steps(refs); !slices.Equal(got, []int64{10, 20, 30, 40}) || refs[2].SHA256 != "" {
			t.Fatalf("List = %+v", refs)
		}

		got, ref, skipped, err := s.LoadLatestValid(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if ref.Step != 20 || !bytes.Equal(got, payload(20)) || ref.SHA256 == "" {
			t.Fatalf("LoadLatestValid() = step %d (%+v), want step 20", ref.Step, ref)
		}
		if len(skipped) != 2 || skipped[0].Ref.Step != 40 || skipped[1].Ref.Step != 30 ||
			!strings.Contains(skipped[0].Reason, "sha256") || !strings.Contains(skipped[1].Reason, "not valid JSON") {
			t.Fatalf("skipped = %+v", skipped)
		}

		// Once everything is corrupt: ErrNotFound, with the reasons.
		must(t, b.Delete(ctx, dataKey("r", 20)))
		must(t, b.WriteAll(ctx, dataKey("r", 10), []byte("short"), nil))
		_, _, skipped, err = s.LoadLatestValid(ctx, "r")
		if !errors.Is(err, ErrNotFound) || len(skipped) != 4 {
			t.Fatalf("LoadLatestValid() = %v with %d skipped, want ErrNotFound and 4", err, len(skipped))
		}
	})
}

func TestNoCheckpoints(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, _ *blob.Bucket) {
		ctx := t.Context()
		if _, err := s.Latest(ctx, "empty"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Latest() = %v, want ErrNotFound", err)
		}
		if refs, err := s.List(ctx, "empty"); err != nil || len(refs) != 0 {
			t.Errorf("List() = %v, %v; want empty", refs, err)
		}
		if _, _, skipped, err := s.LoadLatestValid(ctx, "empty"); !errors.Is(err, ErrNotFound) || skipped != nil {
			t.Errorf("LoadLatestValid() = %v, %v; want ErrNotFound", skipped, err)
		}
		if _, err := s.Load(ctx, Ref{Run: "empty", Step: 1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Load() = %v, want ErrNotFound", err)
		}
	})
}

func TestSaveIdempotentAndOverwrite(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s.now = func() time.Time { return clock }
		first := mustSave(t, s, "r", 5)
		clock = clock.Add(time.Hour)
		again := mustSave(t, s, "r", 5)
		if again != first {
			t.Fatalf("second Save = %+v, want %+v", again, first)
		}
		raw, _ := b.ReadAll(ctx, first.Key)
		if !strings.Contains(string(raw), "2026-01-02T03:04:05Z") {
			t.Fatalf("identical re-save rewrote the manifest: %s", raw)
		}
		// A different payload for the same step replaces the checkpoint.
		other, err := s.Save(ctx, "r", 5, []byte("different"))
		if err != nil {
			t.Fatal(err)
		}
		if other.SHA256 == first.SHA256 {
			t.Fatal("new payload has the old hash")
		}
		if got, err := s.Load(ctx, other); err != nil || string(got) != "different" {
			t.Fatalf("Load(new) = %q, %v", got, err)
		}
		var ce *CorruptError
		if _, err := s.Load(ctx, first); !errors.As(err, &ce) {
			t.Fatalf("Load(stale ref) = %v, want a *CorruptError", err)
		}
		// A re-save repairs a checkpoint whose payload went missing.
		must(t, b.Delete(ctx, dataKey("r", 5)))
		if _, err := s.Save(ctx, "r", 5, []byte("different")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, other); err != nil {
			t.Fatalf("Load after repair: %v", err)
		}
	})
}

func TestDelete(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		r1, r2 := mustSave(t, s, "r", 1), mustSave(t, s, "r", 2)
		must(t, s.Delete(ctx, r2))
		must(t, s.Delete(ctx, r2)) // Idempotent.
		if ref, err := s.Latest(ctx, "r"); err != nil || ref != r1 {
			t.Fatalf("Latest() after delete = %+v, %v", ref, err)
		}
		if ok, _ := b.Exists(ctx, dataKey("r", 2)); ok {
			t.Error("Delete left the payload behind")
		}
	})
}

func TestExists(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		r1 := mustSave(t, s, "r", 1)
		for _, c := range []struct {
			ref  Ref
			want bool
		}{
			{r1, true},
			{Ref{Run: "r", Step: 1}, true}, // run and step suffice
			{Ref{Run: "r", Step: 2}, false},
			{Ref{Run: "other", Step: 1}, false},
		} {
			if got, err := s.Exists(ctx, c.ref); err != nil || got != c.want {
				t.Errorf("Exists(%s@%d) = %v, %v; want %v", c.ref.Run, c.ref.Step, got, err, c.want)
			}
		}
		// The manifest is what makes a checkpoint: a payload alone is not one.
		must(t, b.Delete(ctx, r1.Key))
		if got, err := s.Exists(ctx, r1); err != nil || got {
			t.Errorf("Exists after its manifest was deleted = %v, %v; want false", got, err)
		}
		if _, err := s.Exists(ctx, Ref{Run: "", Step: 1}); err == nil {
			t.Error("Exists of a ref without a run: no error")
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	s := New(memblob.OpenBucket(nil))
	ctx := t.Context()
	for _, run := range []string{"", "..", ".", "a/b", "../x", "a..b", ".hidden", "-x", "sp ace", "ünï", strings.Repeat("x", 129), "a\x00b"} {
		if err := ValidateRun(run); err == nil {
			t.Errorf("ValidateRun(%q) = nil, want an error", run)
		}
		if _, err := s.Save(ctx, run, 1, nil); err == nil || !strings.Contains(err.Error(), "run name") {
			t.Errorf("Save(run %q) = %v, want a run name error", run, err)
		}
	}
	for _, run := range []string{"a", "run-2026.01.02_x", "A1", strings.Repeat("x", 128)} {
		if err := ValidateRun(run); err != nil {
			t.Errorf("ValidateRun(%q) = %v", run, err)
		}
	}
	for _, step := range []int64{-1, MaxStep + 1} {
		if _, err := s.Save(ctx, "r", step, nil); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("Save(step %d) = %v, want a range error", step, err)
		}
	}
	if _, err := s.Load(ctx, Ref{Run: "r", Step: 1, Key: "runs/r/ckpt/000000000002/manifest.json"}); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Load(inconsistent ref) = %v", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "not", "yet")
	s, err := Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	ref := mustSave(t, s, "r", 1)
	must(t, s.Close())
	if _, err := os.Stat(filepath.Join(dir, "runs", "r", "ckpt", "000000000001", "manifest.json")); err != nil {
		t.Fatalf("manifest not on disk: %v", err)
	}
	// Reopening sees the same checkpoint.
	s, err = Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Load(ctx, ref); err != nil || !bytes.Equal(got, payload(1)) {
		t.Fatalf("Load after reopen: %v", err)
	}

	m, err := Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	mustSave(t, m, "r", 1)
	must(t, m.Close())

	for _, bad := range []string{"nosuch://bucket", "::not a url"} {
		if _, err := Open(ctx, bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
}

// TestOpenWritesBesideTheObjects: a file:// bucket writes its temporary
// files next to the objects, so a bucket on another filesystem than the
// temporary directory works (renames across filesystems fail). Here the
// temporary directory does not exist at all; asking for os.TempDir
// (no_tmp_dir empty) fails the save.
func TestOpenWritesBesideTheObjects(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(dir, "no-such-tmp"))
	url := "file://" + filepath.ToSlash(filepath.Join(dir, "bucket"))
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	ref := mustSave(t, s, "r", 1)
	if got, err := s.Load(ctx, ref); err != nil || !bytes.Equal(got, payload(1)) {
		t.Fatalf("Load: %v", err)
	}
	must(t, s.Close())
	viaTmp, err := Open(ctx, url+"?no_tmp_dir=")
	if err != nil {
		t.Fatal(err)
	}
	defer viaTmp.Close()
	if _, err := viaTmp.Save(ctx, "r", 2, payload(2)); err == nil {
		t.Fatal("a save through a missing os.TempDir succeeded: the test does not test the option")
	}
}

func TestRefJSON(t *testing.T) {
	ref := Ref{Run: "r", Step: 3, Key: "k", SHA256: "ab", Bytes: 9}
	raw, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"run":"r","step":3,"key":"k","sha256":"ab","bytes":9}`; string(raw) != want {
		t.Fatalf("json = %s, want %s", raw, want)
	}
	var back Ref
	if err := json.Unmarshal(raw, &back); err != nil || back != ref {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
}

// TestBlobRoundTrip: ReadBlob returns what WriteBlob stored, ErrNotFound
// for a key never written, and refuses one larger than its limit.
func TestBlobRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, _ *blob.Bucket) {
		ctx := t.Context()
		if _, err := s.ReadBlob(ctx, "runs/a/job.json", 1024); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key: %v, want ErrNotFound", err)
		}
		want := []byte(`{"name":"a"}`)
		if err := s.WriteBlob(ctx, "runs/a/job.json", want, "application/json"); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadBlob(ctx, "runs/a/job.json", int64(len(want)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadBlob = %q, %v; want %q", got, err, want)
		}
		if _, err := s.ReadBlob(ctx, "runs/a/job.json", int64(len(want))-1); err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("over the limit: %v, want an error", err)
		}
	})
}

// TestAccessible: an S3 bucket that is there answers, also to
// credentials that may list only runs/ (where the store keeps
// everything); one that is not is said to be missing, a setting's fault
// (Misconfigured: a worker refuses to start on it); file:// and mem://
// answer at once.
func TestAccessible(t *testing.T) {
	u := s3Bucket(t)
	scoped := s3fake.Bucket(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Query().Has("list-type") && !strings.HasPrefix(r.URL.Query().Get("prefix"), "runs/") {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	for _, tc := range []struct {
		url     string
		present bool
	}{
		{u, true},
		{scoped, true},
		{strings.Replace(u, "s3://ckpt?", "s3://no-such-bucket?", 1), false},
		{"file://" + t.TempDir(), true},
		{"mem://", true},
	} {
		s, err := Open(t.Context(), tc.url)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = s.Accessible(t.Context())
		if (err == nil) != tc.present || !tc.present && (!Misconfigured(err) || !strings.Contains(err.Error(), "bucket does not exist (create it")) {
			t.Errorf("%s: Accessible = %v, want present %v", tc.url, err, tc.present)
		}
		if took := time.Since(start); !strings.HasPrefix(tc.url, "s3:") && took > time.Second {
			t.Errorf("%s: Accessible took %s", tc.url, took)
		}
		s.Close()
	}
}
