package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

func TestRetain(t *testing.T) {
	all := []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	tests := []struct {
		name      string
		keepLast  int
		keepEvery int64
		garbage   int64 // Step whose manifest is made unreadable, if not 0.
		newest    int64 // RetainFrom's step, if not 0 (else Retain).
		want      []int64
		wantErr   string
	}{
		{name: "last 3", keepLast: 3, want: []int64{80, 90, 100}},
		{name: "last 1", keepLast: 1, want: []int64{100}},
		{name: "more than there are", keepLast: 20, want: all},
		{name: "last 2 and every 40", keepLast: 2, keepEvery: 40, want: []int64{40, 80, 90, 100}},
		{name: "every 30 overlapping the last", keepLast: 1, keepEvery: 30, want: []int64{30, 60, 90, 100}},
		{name: "unreadable manifest neither counted nor deleted", keepLast: 2, garbage: 90, want: []int64{80, 90, 100}},
		{name: "unreadable old manifest kept", keepLast: 1, garbage: 20, want: []int64{20, 100}},
		{name: "keepLast 0", keepLast: 0, wantErr: "keepLast"},
		{name: "negative keepEvery", keepLast: 1, keepEvery: -1, wantErr: "keepEvery"},
		// RetainFrom: the run just saved step 40 over a longer run's
		// checkpoints; those above 40 are left alone, and the run's own
		// newest 3 kept.
		{name: "from 40, last 3", newest: 40, keepLast: 3, want: []int64{20, 30, 40, 50, 60, 70, 80, 90, 100}},
		{name: "from 100 is Retain", newest: 100, keepLast: 3, want: []int64{80, 90, 100}},
		{name: "from 40, last 1, every 20", newest: 40, keepLast: 1, keepEvery: 20, want: []int64{20, 40, 50, 60, 70, 80, 90, 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := memblob.OpenBucket(nil)
			defer b.Close()
			s, err := NewWithOptions(b, testOpts)
			must(t, err)
			ctx := t.Context()
			for i, step := range all {
				if i%2 == 0 { // Mixed formats.
					mustSave(t, s, "r", step)
				} else if _, _, err := s.SaveIncremental(ctx, "r", step, randBytes(uint64(step), 2*testChunk)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.garbage != 0 {
				must(t, b.WriteAll(ctx, ManifestKey("r", tc.garbage), []byte("garbage"), nil))
			}
			var deleted []Ref
			if tc.newest != 0 {
				deleted, err = s.RetainFrom(ctx, "r", tc.newest, tc.keepLast, tc.keepEvery)
			} else {
				deleted, err = s.Retain(ctx, "r", tc.keepLast, tc.keepEvery)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || deleted != nil {
					t.Fatalf("Retain() = %v, %v; want an error about %s", deleted, err, tc.wantErr)
				}
				return
			}
			must(t, err)
			refs, err := s.List(ctx, "r")
			must(t, err)
			if got := steps(refs); !slices.Equal(got, tc.want) {
				t.Fatalf("after Retain: steps %v, want %v", got, tc.want)
			}
			var wantDeleted []int64
			for _, step := range all {
				if !slices.Contains(tc.want, step) {
					wantDeleted = append(wantDeleted, step)
				}
			}
			if got := steps(deleted); !slices.Equal(got, wantDeleted) {
				t.Fatalf("Retain deleted %v, want %v", got, wantDeleted)
			}
			for _, r := range deleted {
				if ok, _ := b.Exists(ctx, dataKey("r", r.Step)); ok {
					t.Fatalf("step %d's v1 payload survived", r.Step)
				}
			}
		})
	}
}

// TestRetainRemovesEmptyDirectories: in a file:// bucket, a deleted
// checkpoint's step directory goes with it (listings walk every
// directory), the kept ones and anything not emptied stay.
func TestRetainRemovesEmptyDirectories(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s, err := OpenWithOptions(ctx, "file://"+dir, testOpts)
	must(t, err)
	defer s.Close()
	for _, step := range []int64{10, 20, 30, 40} {
		if _, _, err := s.SaveIncremental(ctx, "r", step, randBytes(uint64(step), 2*testChunk)); err != nil {
			t.Fatal(err)
		}
	}
	// Something that is not a checkpoint's, in step 10's directory.
	stray := filepath.Join(dir, filepath.FromSlash(ckptPrefix("r", 10)), "notes.txt")
	must(t, os.WriteFile(stray, []byte("mine"), 0o644))
	deleted, err := s.Retain(ctx, "r", 2, 0)
	must(t, err)
	if len(deleted) != 2 {
		t.Fatalf("deleted %v; want steps 10 and 20", deleted)
	}
	for step, want := range map[int64]bool{10: true, 20: false, 30: true, 40: true} {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ckptPrefix("r", step))))
		if got := err == nil; got != want {
			t.Errorf("step %d's directory exists: %v, want %v (%v)", step, got, want, err)
		}
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("a file that is not the checkpoint's went with it: %v", err)
	}
}

func TestGC(t *testing.T) {
	hooked(t, testOpts, func(t *testing.T, s *Store, _ *hookBucket, raw *blob.Bucket) {
		ctx := t.Context()
		// Four checkpoints, each changing two more chunks of 8.
		p := randBytes(100, 8*testChunk)
		var payloads [][]byte
		for step := range int64(4) {
			if step > 0 {
				p = slices.Clone(p)
				p[int(2*step)*testChunk] ^= 1
				p[int(2*step+1)*testChunk] ^= 1
			}
			payloads = append(payloads, p)
			saveAsync(t, s, "r", step+1, p)
		}
		orphan := dataKey("r", 99) // A v1 payload whose manifest never came.
		must(t, raw.WriteAll(ctx, orphan, []byte("orphan"), nil))
		junk := chunksPrefix("r") + "not-a-chunk"
		must(t, raw.WriteAll(ctx, junk, []byte("junk"), nil))

		// With the default grace period, nothing recent goes.
		if _, err := s.Retain(ctx, "r", 1, 0); err != nil {
			t.Fatal(err)
		}
		s.opts.GCGrace = DefaultGCGrace
		st, err := s.GC(ctx, "r")
		s.opts.GCGrace = 0
		must(t, err)
		if st.Deleted != 0 || st.Orphans != 0 || st.Chunks != 8+2*3 || st.Young != 6+1 || st.Referenced != 8 || st.Manifests != 1 {
			t.Fatalf("GC within the grace period = %+v", st)
		}

		// Without: the 6 chunks only steps 1-3 used, and the orphan.
		st, err = s.GC(ctx, "r")
		must(t, err)
		if st.Deleted != 6 || st.Orphans != 1 || st.Referenced != 8 || st.DeletedBytes <= 0 {
			t.Fatalf("GC = %+v, want 6 chunks and 1 orphan deleted, 8 kept", st)
		}
		for _, k := range []string{orphan, junk} {
			if ok, _ := raw.Exists(ctx, k); ok != (k == junk) {
				t.Fatalf("after GC, %s exists = %v", k, ok)
			}
		}
		mustLoad(t, s, Ref{Run: "r", Step: 4}, payloads[3])
		if st, err := s.GC(ctx, "r"); err != nil || st.Deleted+st.Orphans != 0 {
			t.Fatalf("second GC = %+v, %v; want nothing to do", st, err)
		}

		// A manifest that fails validation still protects its chunks; one
		// that is not JSON stops GC (TestGCAbortsOnUndecodableManifest);
		// once it is deleted, its chunks go.
		editManifest(t, ctx, raw, Ref{Run: "r", Step: 4, Key: ManifestKey("r", 4)}, func(m *manifest) { m.Compression = "??" })
		if st, err := s.GC(ctx, "r"); err != nil || st.Deleted != 0 || st.Referenced != 8 {
			t.Fatalf("GC with an invalid manifest = %+v, %v", st, err)
		}
		must(t, raw.WriteAll(ctx, ManifestKey("r", 4), []byte("garbage"), nil))
		if st, err := s.GC(ctx, "r"); err == nil || st.Deleted != 0 {
			t.Fatalf("GC with a garbage manifest = %+v, %v; want an error, nothing deleted", st, err)
		}
		must(t, raw.Delete(ctx, ManifestKey("r", 4)))
		if st, err := s.GC(ctx, "r"); err != nil || st.Deleted != 8 {
			t.Fatalf("GC once the garbage manifest is gone = %+v, %v", st, err)
		}
		if _, err := s.GC(ctx, "../x"); err == nil {
			t.Fatal("GC accepted a bad run name")
		}
	})
}

// orphanedChunks is a Store over a hook bucket (over a memblob) whose run
// "r" holds the n chunks of a payload p drawn from seed, which no
// checkpoint references any more.
func orphanedChunks(t *testing.T, o Options, seed uint64, n int) (*Store, *hookBucket, []byte) {
	t.Helper()
	inner := memblob.OpenBucket(nil)
	t.Cleanup(func() { inner.Close() })
	h, b := newHookBucket(t, inner)
	s, err := NewWithOptions(b, o)
	must(t, err)
	p := randBytes(seed, n*testChunk)
	r1, _, err := s.SaveIncremental(t.Context(), "r", 1, p)
	must(t, err)
	must(t, s.Delete(t.Context(), r1))
	return s, h, p
}

// TestGCSparesPinnedChunk stops a save right after it found a chunk present
// and runs GC then: the chunk has no manifest yet, and must survive.
func TestGCSparesPinnedChunk(t *testing.T) {
	o := testOpts
	o.Concurrency = 1 // Chunks in order: the save stops at chunk 0.
	const n = 6
	s, h, p := orphanedChunks(t, o, 110, n)
	ctx := t.Context()
	// A new save of the same content reuses them.
	first := chunkKey("r", chunkHash(p[:testChunk]))
	reached, resume := make(chan struct{}), make(chan struct{})
	var once, resumed sync.Once
	h.setAfterAttributes(func(key string, err error) {
		if key == first && err == nil {
			once.Do(func() { close(reached); <-resume })
		}
	})
	// Runs before the bucket is closed, even if the test fails early.
	t.Cleanup(func() { resumed.Do(func() { close(resume) }) })
	pending, err := s.SaveAsync(ctx, "r", 2, p)
	must(t, err)
	<-reached
	st, err := s.GC(ctx, "r")
	must(t, err)
	if st.Deleted != n-1 || st.Referenced != 1 {
		t.Fatalf("GC during the save = %+v, want %d deleted and the pinned chunk kept", st, n-1)
	}
	resumed.Do(func() { close(resume) })
	ref, err := pending.Wait(ctx)
	must(t, err)
	if got := pending.Stats().ChunksWritten; got != n-1 {
		t.Fatalf("the save wrote %d chunks, want the %d GC took", got, n-1)
	}
	mustLoad(t, s, ref, p)
}

// TestGCWatchesPinsWithoutHoldingThemOff: once GC has its snapshot, saves
// pin keys freely (before, GC held new pins off for its whole pass, and a
// save waited for every deletion); a key pinned since the snapshot is
// spared even once released (its manifest may be one GC did not read),
// others go; the watch ends with the pass.
func TestGCWatchesPinsWithoutHoldingThemOff(t *testing.T) {
	r := newRegistry()
	old := r.newPin()
	old.add("held")
	snap := r.watch()
	if !snap["held"] || len(snap) != 1 {
		t.Fatalf("snapshot %v; want the key pinned before it", snap)
	}
	added := make(chan struct{})
	p := r.newPin()
	go func() { p.add("k"); close(added) }()
	<-added // (with the gate held for the pass, this would wait for unwatch)
	p.release()
	var removed []string
	remove := func(key string) func() error {
		return func() error { removed = append(removed, key); return nil }
	}
	for _, tc := range []struct {
		key  string
		want bool
	}{{"k", false}, {"held", false}, {"j", true}} {
		if ok, err := r.removeUnpinned(tc.key, remove(tc.key)); ok != tc.want || err != nil {
			t.Errorf("removeUnpinned(%q) = %v, %v; want %v", tc.key, ok, err, tc.want)
		}
	}
	if !slices.Equal(removed, []string{"j"}) {
		t.Errorf("removed %v; want only j", removed)
	}
	r.unwatch()
	old.release()
	if ok, _ := r.removeUnpinned("k", remove("k")); !ok {
		t.Error("k is still spared after the pass that saw it pinned ended")
	}
}

// TestGCAlongsideASave: a save that reuses the content GC is collecting,
// started while GC deletes, loads; every candidate chunk is either
// deleted or spared for the save.
func TestGCAlongsideASave(t *testing.T) {
	const n = 6
	s, h, p := orphanedChunks(t, testOpts, 111, n)
	ctx := t.Context()

	first, saved := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.mu.Lock()
	h.beforeDelete = func(string) { once.Do(func() { close(first) }) }
	h.mu.Unlock()
	var ref Ref
	var saveErr error
	go func() {
		defer close(saved)
		<-first
		ref, _, saveErr = s.SaveIncremental(ctx, "r", 2, p)
	}()
	st, err := s.GC(ctx, "r")
	must(t, err)
	<-saved
	must(t, saveErr)
	if st.Deleted+st.Referenced != n || st.Deleted < 1 {
		t.Errorf("GC = %+v; want %d chunks deleted or spared for the save, at least one deleted", st, n)
	}
	mustLoad(t, s, ref, p)
}

// TestConcurrentSaveAsyncAndGC saves while another goroutine keeps pruning
// and collecting; every checkpoint that survives must load.
func TestConcurrentSaveAsyncAndGC(t *testing.T) {
	hooked(t, Options{ChunkBytes: testChunk, GCGrace: -1, MaxPending: 2}, func(t *testing.T, s *Store, _ *hookBucket, _ *blob.Bucket) {
		ctx := t.Context()
		const saves = 12
		base := randBytes(120, 16*testChunk)
		payloads := make(map[int64][]byte)
		stop := make(chan struct{})
		gcErr := make(chan error, 1)
		var gcs int
		go func() {
			defer close(gcErr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Retain(ctx, "r", 2, 5); err != nil {
					gcErr <- err
					return
				}
				if _, err := s.GC(ctx, "r"); err != nil {
					gcErr <- err
					return
				}
				gcs++
				time.Sleep(time.Millisecond)
			}
		}()
		var pend []*Pending
		for step := int64(1); step <= saves; step++ {
			p := slices.Clone(base)
			// Each save changes a few chunks and reverts others, so saves
			// keep reusing chunks that pruning just orphaned.
			for c := range 16 {
				if (int64(c)+step)%4 == 0 {
					p[c*testChunk] ^= byte(step)
				}
			}
			payloads[step] = p
			pd, err := s.SaveAsync(ctx, "r", step, p)
			must(t, err)
			pend = append(pend, pd)
			time.Sleep(time.Millisecond)
		}
		for _, pd := range pend {
			if _, err := pd.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		if err := <-gcErr; err != nil {
			t.Fatal(err)
		}
		refs, err := s.List(ctx, "r")
		must(t, err)
		if len(refs) == 0 || refs[len(refs)-1].Step != saves {
			t.Fatalf("List() = %v", steps(refs))
		}
		for _, r := range refs {
			mustLoad(t, s, r, payloads[r.Step])
		}
		t.Logf("%d GC passes alongside %d saves; %d checkpoints left", gcs, saves, len(refs))
	})
}

func TestGCAbortsOnReadError(t *testing.T) {
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	h, b := newHookBucket(t, inner)
	s, err := NewWithOptions(b, testOpts)
	must(t, err)
	ctx := t.Context()
	for step := int64(1); step <= 2; step++ {
		_, _, err := s.SaveIncremental(ctx, "r", step, randBytes(uint64(130+step), 2*testChunk))
		must(t, err)
	}
	must(t, s.Delete(ctx, Ref{Run: "r", Step: 1}))
	// A manifest that cannot be read (a transient error, not absence) must
	// stop GC before it deletes anything.
	h.setFailRead(func(key string) error {
		if key == ManifestKey("r", 2) {
			return errors.New("injected read failure")
		}
		return nil
	})
	if _, err := s.GC(ctx, "r"); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("GC with an unreadable manifest = %v", err)
	}
	h.setFailRead(nil)
	if st, err := s.GC(ctx, "r"); err != nil || st.Deleted != 2 {
		t.Fatalf("GC = %+v, %v; want step 1's 2 chunks deleted", st, err)
	}
}

// TestGCAbortsOnUndecodableManifest: a manifest of the run that does not
// decode (truncated, garbage, or a JSON document that is no manifest and
// names no chunk) stops GC before it deletes anything, with a
// *CorruptError naming the manifest; the chunks of the checkpoint it was
// and of the deleted ones stay. A manifest that decodes but fails
// validation still protects the chunks it names, and a valid version 1
// manifest (which names none) is no reason to stop.
func TestGCAbortsOnUndecodableManifest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		raw    func(good []byte) []byte // the step 3 manifest, from the good one
		abort  string                   // the reason GC stops with; "": it runs
		remain int                      // chunks left when it runs
	}{
		{name: "truncated", raw: func(g []byte) []byte { return g[:len(g)/2] }, abort: "manifest is not valid JSON"},
		{name: "garbage", raw: func([]byte) []byte { return []byte("\x00garbage") }, abort: "manifest is not valid JSON"},
		{name: "empty", raw: func([]byte) []byte { return nil }, abort: "manifest is not valid JSON"},
		{name: "empty object", raw: func([]byte) []byte { return []byte("{}") }, abort: "manifest format"},
		{name: "null", raw: func([]byte) []byte { return []byte("null") }, abort: "manifest format"},
		{name: "chunk list cut", raw: func(g []byte) []byte {
			var m map[string]any
			if err := json.Unmarshal(g, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "chunks")
			b, _ := json.Marshal(m)
			return b
		}, abort: "chunk"},
		// Decodes, fails validation, names its chunks: they stay, the
		// deleted checkpoints' go.
		{name: "invalid but names its chunks", raw: func(g []byte) []byte {
			return bytes.Replace(g, []byte(`"version":2`), []byte(`"version":99`), 1)
		}, remain: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := memblob.OpenBucket(nil)
			defer inner.Close()
			s, err := NewWithOptions(inner, testOpts)
			must(t, err)
			ctx := t.Context()
			// Steps 1 and 2 (deleted) and 3, 4 chunks each, none shared.
			for step := int64(1); step <= 3; step++ {
				_, _, err := s.SaveIncremental(ctx, "r", step, randBytes(uint64(140+step), 4*testChunk))
				must(t, err)
			}
			_, err = s.Retain(ctx, "r", 1, 0)
			must(t, err)
			key := ManifestKey("r", 3)
			good, err := inner.ReadAll(ctx, key)
			must(t, err)
			must(t, inner.WriteAll(ctx, key, tc.raw(good), nil))
			chunks := func() int {
				n := 0
				it := inner.List(&blob.ListOptions{Prefix: chunksPrefix("r")})
				for {
					if _, err := it.Next(ctx); err != nil {
						return n
					}
					n++
				}
			}
			// CheckGC gives GC's verdict first, deleting nothing.
			cerr := s.CheckGC(ctx, "r")
			var cce *CorruptError
			switch {
			case tc.abort == "" && cerr != nil:
				t.Fatalf("CheckGC = %v; want nil, as GC runs", cerr)
			case tc.abort != "" && (!errors.As(cerr, &cce) || cce.Key != key || !strings.Contains(cce.Reason, tc.abort)):
				t.Fatalf("CheckGC = %v; want a *CorruptError naming %s (%s)", cerr, key, tc.abort)
			}
			if n := chunks(); n != 12 {
				t.Fatalf("%d chunks left after CheckGC; want all 12", n)
			}
			st, err := s.GC(ctx, "r")
			if tc.abort == "" {
				if err != nil || st.Deleted != 8 || chunks() != tc.remain {
					t.Fatalf("GC = %+v, %v, %d chunks left; want 8 deleted, %d left", st, err, chunks(), tc.remain)
				}
				return
			}
			var ce *CorruptError
			if err == nil || !errors.As(err, &ce) || ce.Key != key || !strings.Contains(ce.Reason, tc.abort) || st.Deleted+st.Orphans != 0 {
				t.Fatalf("GC = %+v, %v; want a *CorruptError naming %s (%s), nothing deleted", st, err, key, tc.abort)
			}
			if n := chunks(); n != 12 {
				t.Fatalf("%d chunks left after the aborted GC; want all 12", n)
			}
		})
	}
}

// sharedBucket is a hook bucket over a memblob and a constructor of
// Stores on it, each standing for a process of its own: no pins, no
// manifest held in common.
func sharedBucket(t *testing.T, o Options) (*hookBucket, func() *Store) {
	t.Helper()
	inner := memblob.OpenBucket(nil)
	t.Cleanup(func() { inner.Close() })
	h, b := newHookBucket(t, inner)
	return h, func() *Store {
		s, err := NewWithOptions(b, o)
		must(t, err)
		return s
	}
}

// TestGCInAnotherProcessSparesChunksASaveReuses: a save in one process
// reuses old chunks no manifest names (a rewound run saving the same
// state again after its checkpoints were deleted) while a GC pass in
// another process, which has already read the manifests, is about to
// delete them. The save writes them again and the pass, looking again
// before each deletion, spares them. (Before, the pass deleted them and
// the new checkpoint could not be loaded.)
func TestGCInAnotherProcessSparesChunksASaveReuses(t *testing.T) {
	o := testOpts
	o.GCGrace = time.Hour
	h, open := sharedBucket(t, o)
	ctx := t.Context()
	const n = 6
	p, other := randBytes(112, n*testChunk), randBytes(113, n*testChunk)
	first := open()
	_, _, err := first.SaveIncremental(ctx, "r", 0, other) // a manifest for GC to read
	must(t, err)
	r1, _, err := first.SaveIncremental(ctx, "r", 1, p)
	must(t, err)
	must(t, first.Delete(ctx, r1)) // retention: p's chunks are unreferenced
	h.age(t, chunksPrefix("r"), 2*o.GCGrace)

	gc, saver := open(), open()
	var (
		ref     Ref
		stats   SaveStats
		saveErr error
		once    sync.Once
	)
	h.setFailRead(func(key string) error {
		if key == ManifestKey("r", 0) { // GC has listed the manifests and reads them
			once.Do(func() { ref, stats, saveErr = saver.SaveIncremental(ctx, "r", 2, p) })
		}
		return nil
	})
	st, err := gc.GC(ctx, "r")
	must(t, err)
	h.setFailRead(nil)
	must(t, saveErr)
	if stats.ChunksRefreshed != n || stats.ChunksWritten != n {
		t.Errorf("the save wrote %d chunks (%d refreshed); want all %d written again", stats.ChunksWritten, stats.ChunksRefreshed, n)
	}
	if st.Deleted != 0 || st.Young != n || st.Referenced != n {
		t.Errorf("GC = %+v; want step 0's %d chunks referenced, the %d the save wrote again young, none deleted", st, n, n)
	}
	mustLoad(t, open(), ref, p)
}

// TestSaveRefreshesOnlyUnprotectedOldChunks: a save writes an existing
// chunk again only when it is older than half the grace period and the
// manifest its Store last loaded or wrote does not name it.
func TestSaveRefreshesOnlyUnprotectedOldChunks(t *testing.T) {
	const n = 4
	for _, tc := range []struct {
		name  string
		grace time.Duration
		age   time.Duration
		saver func(t *testing.T, first *Store, open func() *Store, r1 Ref) *Store
		want  int // chunks written again
	}{
		{"another process, old chunks", time.Hour, 40 * time.Minute, another, n},
		{"another process, young chunks", time.Hour, 20 * time.Minute, another, 0},
		{"another process, no grace period", -1, 40 * time.Minute, another, 0},
		{"the process that wrote them", time.Hour, 2 * time.Hour, func(_ *testing.T, first *Store, _ func() *Store, _ Ref) *Store { return first }, 0},
		{"a process that loaded them", time.Hour, 2 * time.Hour, func(t *testing.T, _ *Store, open func() *Store, r1 Ref) *Store {
			s := open()
			_, err := s.Load(t.Context(), r1)
			must(t, err)
			return s
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts
			o.GCGrace = tc.grace
			h, open := sharedBucket(t, o)
			p := randBytes(114, n*testChunk)
			first := open()
			r1, _, err := first.SaveIncremental(t.Context(), "r", 1, p)
			must(t, err)
			h.age(t, chunksPrefix("r"), tc.age)
			s := tc.saver(t, first, open, r1)
			h.reset()
			ref, stats, err := s.SaveIncremental(t.Context(), "r", 2, p)
			must(t, err)
			if chunks, _, _ := h.counts(); stats.ChunksRefreshed != tc.want || stats.ChunksWritten != tc.want || chunks != tc.want {
				t.Errorf("save wrote %d chunk objects, stats %d written, %d refreshed; want %d", chunks, stats.ChunksWritten, stats.ChunksRefreshed, tc.want)
			}
			mustLoad(t, open(), ref, p)
		})
	}
}

func another(_ *testing.T, _ *Store, open func() *Store, _ Ref) *Store { return open() }

// TestFileBucketUnreadableDirectory: a directory of a file:// bucket this
// process cannot read (another user's, mode 700) fails List and GC,
// named, where gocloud's listing skips it without a word: ls and verify
// said "no checkpoints" or "all ok", and GC took an older checkpoint for
// the newest and deleted the chunks of the real newest. (As root every
// directory reads: the walk stands for a non-root user's here.)
func TestFileBucketUnreadableDirectory(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s, err := OpenWithOptions(ctx, "file://"+dir, testOpts)
	must(t, err)
	defer s.Close()
	for _, step := range []int64{10, 20} {
		if _, _, err := s.SaveIncremental(ctx, "r", step, randBytes(uint64(step), 2*testChunk)); err != nil {
			t.Fatal(err)
		}
	}
	hidden := filepath.Join(dir, filepath.FromSlash(ckptPrefix("r", 20)))
	s.walk = func(root string, fn fs.WalkDirFunc) error {
		return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if path == strings.TrimSuffix(hidden, "/") {
				return fn(path, d, &fs.PathError{Op: "open", Path: path, Err: fs.ErrPermission})
			}
			return fn(path, d, err)
		})
	}
	if refs, err := s.List(ctx, "r"); !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "a listing would leave it out") {
		t.Errorf("List = %v, %v; want the unreadable directory named", refs, err)
	}
	if st, err := s.GC(ctx, "r"); !errors.Is(err, fs.ErrPermission) || st.Deleted != 0 {
		t.Errorf("GC = %+v, %v; want it refused before deleting anything", st, err)
	}
	s.walk = nil
	if refs, err := s.List(ctx, "r"); err != nil || len(refs) != 2 {
		t.Errorf("readable again: %v, %v", refs, err)
	}
}
