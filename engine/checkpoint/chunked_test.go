package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// Small chunks keep the tests fast; GC has no grace period unless a test
// asks for one.
const testChunk = 4 << 10

var testOpts = Options{ChunkBytes: testChunk, GCGrace: -1}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// saveAsync is SaveAsync followed by Wait.
func saveAsync(t *testing.T, s *Store, run string, step int64, payload []byte) (Ref, SaveStats) {
	t.Helper()
	p, err := s.SaveAsync(t.Context(), run, step, payload)
	if err != nil {
		t.Fatalf("SaveAsync(%s, %d): %v", run, step, err)
	}
	ref, err := p.Wait(t.Context())
	if err != nil {
		t.Fatalf("SaveAsync(%s, %d).Wait: %v", run, step, err)
	}
	return ref, p.Stats()
}

func mustLoad(t *testing.T, s *Store, ref Ref, want []byte) {
	t.Helper()
	got, err := s.Load(t.Context(), ref)
	if err != nil {
		t.Fatalf("Load(%s step %d): %v", ref.Run, ref.Step, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Load(%s step %d) returned %d bytes, not the %d saved", ref.Run, ref.Step, len(got), len(want))
	}
}

func readManifestRaw(t *testing.T, b *blob.Bucket, key string) manifest {
	t.Helper()
	raw, err := b.ReadAll(t.Context(), key)
	must(t, err)
	var m manifest
	must(t, json.Unmarshal(raw, &m))
	return m
}

func TestChunkedRoundTrip(t *testing.T) {
	zeros := make([]byte, 5*testChunk)
	tests := []struct {
		name    string
		payload []byte
		chunks  int
		written int // Chunk objects the first save writes.
	}{
		{"empty", nil, 0, 0},
		{"one byte", []byte{7}, 1, 1},
		{"odd size", randBytes(1, 4095), 1, 1},
		{"exactly one chunk", randBytes(2, testChunk), 1, 1},
		{"one chunk and a byte", randBytes(3, testChunk+1), 2, 2},
		{"many chunks, short tail", randBytes(4, 10*testChunk+3), 11, 11},
		{"repeated content stored once", zeros, 5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hooked(t, testOpts, func(t *testing.T, s *Store, h *hookBucket, raw *blob.Bucket) {
				ctx := t.Context()
				sum := sha256.Sum256(tc.payload)
				want := Ref{Run: "r", Key: ManifestKey("r", 1), Step: 1, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(tc.payload))}

				before := time.Now().UTC()
				ref, st := saveAsync(t, s, "r", 1, tc.payload)
				if ref.Created.Before(before) || ref.Created.After(time.Now()) {
					t.Errorf("SaveAsync ref created %v; want the time of the save (after %v)", ref.Created, before)
				}
				want.Created = ref.Created
				if ref != want {
					t.Fatalf("SaveAsync ref = %+v, want %+v", ref, want)
				}
				if st.Chunks != tc.chunks || st.ChunksWritten != tc.written || st.Bytes != want.Bytes || st.ManifestBytes == 0 || st.Reused {
					t.Fatalf("stats = %+v, want %d chunks, %d written", st, tc.chunks, tc.written)
				}
				if chunks, manifests, _ := h.counts(); chunks != tc.written || manifests != 1 {
					t.Fatalf("bucket saw %d chunk and %d manifest writes, want %d and 1", chunks, manifests, tc.written)
				}
				m := readManifestRaw(t, raw, ref.Key)
				if m.Version != 2 || len(m.Chunks) != tc.chunks || m.ChunkBytes != testChunk || m.Data != "" {
					t.Fatalf("manifest = %+v", m)
				}
				mustLoad(t, s, ref, tc.payload)
				mustLoad(t, s, Ref{Run: "r", Step: 1}, tc.payload)

				// The synchronous path writes the same checkpoint.
				ref2, st2, err := s.SaveIncremental(ctx, "r", 2, tc.payload)
				must(t, err)
				if ref2.SHA256 != want.SHA256 || ref2.Bytes != want.Bytes || st2.ChunksWritten != 0 {
					t.Fatalf("SaveIncremental = %+v, %+v; want the same payload, nothing new written", ref2, st2)
				}
				mustLoad(t, s, ref2, tc.payload)
				if latest, err := s.Latest(ctx, "r"); err != nil || latest != ref2 {
					t.Fatalf("Latest() = %+v, %v; want %+v", latest, err, ref2)
				}
				if refs, err := s.List(ctx, "r"); err != nil || !slices.Equal(steps(refs), []int64{1, 2}) {
					t.Fatalf("List() = %+v, %v", refs, err)
				}
			})
		})
	}
}

func TestIncrementalWritesOnlyChangedChunks(t *testing.T) {
	const n = 33 // 32 full chunks and a 100-byte tail.
	base := randBytes(10, 32*testChunk+100)
	at := func(chunk, off int) int { return chunk*testChunk + off }
	tests := []struct {
		name   string
		mutate func(p []byte)
		want   int // Chunk objects the second save writes.
	}{
		{"unchanged", func([]byte) {}, 0},
		{"one byte", func(p []byte) { p[at(5, 17)] ^= 1 }, 1},
		{"one float at a chunk's end", func(p []byte) { p[at(6, testChunk-1)]++ }, 1},
		{"region across chunks 10-12", func(p []byte) {
			for i := at(10, testChunk-8); i < at(12, 8); i++ {
				p[i] = 0
			}
		}, 3},
		{"tail", func(p []byte) { p[len(p)-1] ^= 0xff }, 1},
		{"header and checksum", func(p []byte) { p[0]++; p[len(p)-4]++ }, 2},
		{"copy of another chunk", func(p []byte) { copy(p[at(7, 0):at(8, 0)], p[at(3, 0):]) }, 0},
		{"two chunks made identical and new", func(p []byte) {
			copy(p[at(20, 0):at(21, 0)], bytes.Repeat([]byte{9}, testChunk))
			copy(p[at(21, 0):at(22, 0)], bytes.Repeat([]byte{9}, testChunk))
		}, 1},
		{"every chunk", func(p []byte) {
			for c := range n {
				p[at(c, 0)] ^= 0x80
			}
		}, n},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hooked(t, testOpts, func(t *testing.T, s *Store, h *hookBucket, _ *blob.Bucket) {
				first, _ := saveAsync(t, s, "r", 1, base)
				h.reset()
				next := slices.Clone(base)
				tc.mutate(next)
				ref, st := saveAsync(t, s, "r", 2, next)
				chunks, manifests, stored := h.counts()
				if chunks != tc.want || manifests != 1 {
					t.Fatalf("second save wrote %d chunks and %d manifests, want %d and 1", chunks, manifests, tc.want)
				}
				if st.ChunksWritten != tc.want || st.BytesWritten != stored || st.Chunks != n {
					t.Fatalf("stats = %+v, bucket saw %d chunk writes of %d bytes", st, chunks, stored)
				}
				mustLoad(t, s, ref, next)
				mustLoad(t, s, first, base)
			})
		})
	}
}

func TestChunkCorruptionDetected(t *testing.T) {
	const changed = 5 // The chunk step 2 does not share with step 1.
	tests := []struct {
		name   string
		tamper func(t *testing.T, b *blob.Bucket, key string, raw []byte)
		reason string
	}{
		{"flipped byte", func(t *testing.T, b *blob.Bucket, key string, _ []byte) {
			z, err := b.ReadAll(t.Context(), key)
			must(t, err)
			z[len(z)/2] ^= 0x10
			must(t, b.WriteAll(t.Context(), key, z, nil))
		}, "does not decompress"},
		{"truncated object", func(t *testing.T, b *blob.Bucket, key string, _ []byte) {
			z, err := b.ReadAll(t.Context(), key)
			must(t, err)
			must(t, b.WriteAll(t.Context(), key, z[:len(z)/2], nil))
		}, "does not decompress"},
		{"empty object", func(t *testing.T, b *blob.Bucket, key string, _ []byte) {
			must(t, b.WriteAll(t.Context(), key, nil, nil))
		}, "0 bytes uncompressed"},
		{"valid frame, other content", func(t *testing.T, b *blob.Bucket, key string, raw []byte) {
			other := slices.Clone(raw)
			other[3]++
			must(t, b.WriteAll(t.Context(), key, zenc().EncodeAll(other, nil), nil))
		}, "chunk xxh3-128"},
		{"valid frame, short", func(t *testing.T, b *blob.Bucket, key string, raw []byte) {
			must(t, b.WriteAll(t.Context(), key, zenc().EncodeAll(raw[:len(raw)-4], nil), nil))
		}, "uncompressed, manifest says"},
		{"valid frame, long", func(t *testing.T, b *blob.Bucket, key string, raw []byte) {
			must(t, b.WriteAll(t.Context(), key, zenc().EncodeAll(append(slices.Clone(raw), 1, 2, 3, 4), nil), nil))
		}, "uncompressed, manifest says"},
		{"missing", func(t *testing.T, b *blob.Bucket, key string, _ []byte) {
			must(t, b.Delete(t.Context(), key))
		}, "chunk is missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hooked(t, testOpts, func(t *testing.T, s *Store, _ *hookBucket, raw *blob.Bucket) {
				ctx := t.Context()
				p1 := randBytes(20, 8*testChunk)
				p2 := slices.Clone(p1)
				p2[changed*testChunk+9] ^= 1
				r1, _ := saveAsync(t, s, "r", 10, p1)
				r2, _ := saveAsync(t, s, "r", 20, p2)
				h := chunkHash(p2[changed*testChunk : (changed+1)*testChunk])
				key := chunkKey("r", h)
				tc.tamper(t, raw, key, p2[changed*testChunk:(changed+1)*testChunk])

				_, err := s.Load(ctx, r2)
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Load() = %v, want a *CorruptError", err)
				}
				if ce.Key != key || !strings.Contains(ce.Reason, tc.reason) || !strings.Contains(err.Error(), key) {
					t.Fatalf("CorruptError{Key: %q, Reason: %q}, want key %q and a reason containing %q", ce.Key, ce.Reason, key, tc.reason)
				}
				if errors.Is(err, ErrNotFound) {
					t.Fatal("corruption reported as ErrNotFound")
				}
				// The previous checkpoint does not use the chunk.
				got, ref, skipped, err := s.LoadLatestValid(ctx, "r")
				if err != nil || ref != r1 || !bytes.Equal(got, p1) {
					t.Fatalf("LoadLatestValid() = step %d, %v; want step 10", ref.Step, err)
				}
				if len(skipped) != 1 || skipped[0].Ref != r2 || !strings.Contains(skipped[0].Reason, key) {
					t.Fatalf("skipped = %+v, want step 20 naming %s", skipped, key)
				}

				// A later save of the same content rewrites the bad chunk
				// instead of reusing it, which repairs step 20 as well.
				r3, st, err := s.SaveIncremental(ctx, "r", 30, p2)
				must(t, err)
				if st.ChunksWritten != 1 {
					t.Fatalf("re-save wrote %d chunks, want the 1 found corrupt", st.ChunksWritten)
				}
				mustLoad(t, s, r3, p2)
				mustLoad(t, s, r2, p2)
			})
		})
	}
}

func TestChunkedManifestCorruption(t *testing.T) {
	type edit = func(m *manifest)
	tests := []struct {
		name     string
		raw      []byte // Replaces the manifest if set, else edit applies.
		edit     edit
		chunkKey bool // The error names a chunk, not the manifest.
		reason   string
	}{
		{name: "garbage", raw: []byte("\x00garbage"), reason: "not valid JSON"},
		{name: "truncated", raw: []byte(`{"format":"cann-train/checkpoint","version":2,"run":"r","st`), reason: "not valid JSON"},
		{name: "future version", edit: func(m *manifest) { m.Version = 3 }, reason: "unsupported manifest version 3"},
		{name: "chunks swapped", edit: func(m *manifest) { m.Chunks[0], m.Chunks[1] = m.Chunks[1], m.Chunks[0] }, reason: "payload sha256"},
		{name: "sha256 edited", edit: func(m *manifest) { m.SHA256 = strings.Repeat("0", 64) }, reason: "payload sha256"},
		{name: "chunk hash of absent content", edit: func(m *manifest) { m.Chunks[2].Hash = strings.Repeat("ab", 16) }, chunkKey: true, reason: "chunk is missing"},
		{name: "chunk hash upper case", edit: func(m *manifest) { m.Chunks[2].Hash = strings.ToUpper(m.Chunks[2].Hash) }, reason: "lower-case hex"},
		{name: "chunk dropped", edit: func(m *manifest) { m.Chunks = m.Chunks[1:] }, reason: "need 4"},
		{name: "size grown", edit: func(m *manifest) { m.Bytes += 4 }, reason: "chunk 3 is"},
		{name: "chunk size edited", edit: func(m *manifest) { m.Chunks[1].Bytes-- }, reason: "chunk 1 is"},
		{name: "chunk_bytes not a multiple of 4", edit: func(m *manifest) { m.ChunkBytes = testChunk + 2 }, reason: "multiple of 4"},
		{name: "other compression", edit: func(m *manifest) { m.Compression = "lz4" }, reason: "compression"},
		{name: "other hash", edit: func(m *manifest) { m.ChunkHash = "sha1" }, reason: "chunk hash"},
		{name: "payload object named", edit: func(m *manifest) { m.Data = dataName }, reason: "names a payload object"},
		{name: "v1 fields", edit: func(m *manifest) { m.Version = 1 }, reason: "want \"state.bin\""},
		{name: "other step", edit: func(m *manifest) { m.Step = 3 }, reason: "step 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := memblob.OpenBucket(nil)
			defer b.Close()
			s, err := NewWithOptions(b, testOpts)
			must(t, err)
			ctx := t.Context()
			p1 := randBytes(30, 4*testChunk-8)
			r1, _, err := s.SaveIncremental(ctx, "r", 1, p1)
			must(t, err)
			r2, _, err := s.SaveIncremental(ctx, "r", 2, randBytes(31, 4*testChunk-8))
			must(t, err)
			if tc.raw != nil {
				must(t, b.WriteAll(ctx, r2.Key, tc.raw, nil))
			} else {
				editManifest(t, ctx, b, r2, tc.edit)
			}
			_, err = s.Load(ctx, Ref{Run: "r", Step: 2})
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("Load() = %v, want a *CorruptError with %q", err, tc.reason)
			}
			if isChunk := strings.Contains(ce.Key, "/chunks/"); isChunk != tc.chunkKey || (!isChunk && ce.Key != r2.Key) {
				t.Fatalf("CorruptError names %q", ce.Key)
			}
			if _, ref, skipped, err := s.LoadLatestValid(ctx, "r"); err != nil || ref != r1 || len(skipped) != 1 {
				t.Fatalf("LoadLatestValid() = %+v, %d skipped, %v; want step 1", ref, len(skipped), err)
			}
		})
	}
	// A version 1 manifest rewritten to claim version 2 lacks chunks.
	b := memblob.OpenBucket(nil)
	defer b.Close()
	s := New(b)
	ref := mustSave(t, s, "r", 1)
	editManifest(t, t.Context(), b, ref, func(m *manifest) { m.Version = 2 })
	var ce *CorruptError
	if _, err := s.Load(t.Context(), ref); !errors.As(err, &ce) || ce.Key != ref.Key {
		t.Fatalf("Load(v1 manifest claiming v2) = %v, want a *CorruptError for the manifest", err)
	}
}

func TestOtherRunsCheckpointRejected(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	s, err := NewWithOptions(b, testOpts)
	must(t, err)
	ctx := t.Context()
	pa := randBytes(40, 3*testChunk)
	ra, _, err := s.SaveIncremental(ctx, "a", 1, pa)
	must(t, err)
	raw, err := b.ReadAll(ctx, ra.Key)
	must(t, err)

	// Copied verbatim: it names run a, so it does not belong at b's key.
	must(t, b.WriteAll(ctx, ManifestKey("b", 1), raw, nil))
	var ce *CorruptError
	if _, err := s.Load(ctx, Ref{Run: "b", Step: 1}); !errors.As(err, &ce) || !strings.Contains(ce.Reason, `run "a"`) {
		t.Fatalf("Load(copied manifest) = %v, want a *CorruptError naming run a", err)
	}
	// Rewritten to name run b: its chunks are looked up among b's, and
	// a's chunks do not count.
	var m manifest
	must(t, json.Unmarshal(raw, &m))
	m.Run = "b"
	forged, _ := json.Marshal(m)
	must(t, b.WriteAll(ctx, ManifestKey("b", 1), forged, nil))
	if _, err := s.Load(ctx, Ref{Run: "b", Step: 1}); !errors.As(err, &ce) || !strings.HasPrefix(ce.Key, "runs/b/chunks/") || !strings.Contains(ce.Reason, "missing") {
		t.Fatalf("Load(forged manifest) = %v, want a missing chunk of run b", err)
	}
	if _, _, skipped, err := s.LoadLatestValid(ctx, "b"); !errors.Is(err, ErrNotFound) || len(skipped) != 1 {
		t.Fatalf("LoadLatestValid(b) = %v with %d skipped, want ErrNotFound and 1", err, len(skipped))
	}
	// GC of b neither needs nor touches a's chunks.
	st, err := s.GC(ctx, "b")
	must(t, err)
	if st.Chunks != 0 || st.Deleted != 0 {
		t.Fatalf("GC(b) = %+v", st)
	}
	mustLoad(t, s, ra, pa)
}

func TestChunkedManifestLast(t *testing.T) {
	hooked(t, testOpts, func(t *testing.T, s *Store, h *hookBucket, raw *blob.Bucket) {
		ctx := t.Context()
		p1 := randBytes(50, 6*testChunk)
		r1, _ := saveAsync(t, s, "r", 1, p1)
		p2 := randBytes(51, 6*testChunk)
		chunkKeys := func(p []byte) []string {
			var keys []string
			for off := 0; off < len(p); off += testChunk {
				keys = append(keys, chunkKey("r", chunkHash(p[off:min(off+testChunk, len(p))])))
			}
			return keys
		}
		invisible := func(t *testing.T, step int64) {
			t.Helper()
			if ok, _ := raw.Exists(ctx, ManifestKey("r", step)); ok {
				t.Fatal("a manifest was written")
			}
			if ref, err := s.Latest(ctx, "r"); err != nil || ref != r1 {
				t.Fatalf("Latest() = %+v, %v; want step 1", ref, err)
			}
			if _, err := s.Load(ctx, Ref{Run: "r", Step: step}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Load(step %d) = %v, want ErrNotFound", step, err)
			}
			if _, ref, skipped, err := s.LoadLatestValid(ctx, "r"); err != nil || ref != r1 || len(skipped) != 0 {
				t.Fatalf("LoadLatestValid() = %+v, %v, %v", ref, skipped, err)
			}
		}

		t.Run("order", func(t *testing.T) {
			// The clock is read just before the manifest is written: every
			// chunk is there by then, and the checkpoint is not visible yet.
			observed := false
			s.now = func() time.Time {
				observed = true
				for _, k := range chunkKeys(p2) {
					if ok, _ := raw.Exists(ctx, k); !ok {
						t.Errorf("manifest about to be written before chunk %s exists", k)
					}
				}
				invisible(t, 2)
				return time.Now()
			}
			defer func() { s.now = time.Now }()
			// Synchronous, so the hook runs on the test goroutine.
			if _, _, err := s.SaveIncremental(ctx, "r", 2, p2); err != nil {
				t.Fatal(err)
			}
			if !observed {
				t.Fatal("the save did not read the clock; the ordering check did not run")
			}
		})

		t.Run("killed before the manifest", func(t *testing.T) {
			h.setBeforeCommit(func(key string) error {
				if strings.HasSuffix(key, manifestName) {
					return errors.New("injected crash")
				}
				return nil
			})
			defer h.setBeforeCommit(nil)
			must(t, s.Delete(ctx, Ref{Run: "r", Step: 2}))
			p, err := s.SaveAsync(ctx, "r", 3, randBytes(52, 6*testChunk))
			must(t, err)
			if _, err := p.Wait(ctx); err == nil || !strings.Contains(err.Error(), "injected crash") {
				t.Fatalf("Wait() = %v, want the injected failure", err)
			}
			invisible(t, 3)
		})

		t.Run("killed between chunks", func(t *testing.T) {
			var n atomic.Int32
			h.setBeforeCommit(func(key string) error {
				if strings.Contains(key, "/chunks/") && n.Add(1) == 3 {
					return errors.New("injected crash")
				}
				return nil
			})
			defer h.setBeforeCommit(nil)
			p, err := s.SaveAsync(ctx, "r", 4, randBytes(53, 6*testChunk))
			must(t, err)
			if _, err := p.Wait(ctx); err == nil {
				t.Fatal("Wait() succeeded despite a failed chunk write")
			}
			invisible(t, 4)
		})

		t.Run("context cancelled before the manifest", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			s.now = func() time.Time { cancel(); return time.Now() }
			defer func() { s.now = time.Now }()
			p, err := s.SaveAsync(cctx, "r", 5, randBytes(54, 6*testChunk))
			must(t, err)
			if _, err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait() = %v, want context.Canceled", err)
			}
			invisible(t, 5)
		})
	})
}

func TestSaveAsyncStaging(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	s, err := NewWithOptions(b, Options{ChunkBytes: testChunk, MaxPending: 1})
	must(t, err)
	ctx := t.Context()

	// The caller may reuse its payload as soon as SaveAsync returns.
	payload := randBytes(60, 5*testChunk)
	want := slices.Clone(payload)
	p, err := s.SaveAsync(ctx, "r", 1, payload)
	must(t, err)
	clear(payload)
	ref, err := p.Wait(ctx)
	must(t, err)
	mustLoad(t, s, ref, want)

	sizes := []struct {
		n      int
		allocs int64 // Staging buffers allocated so far.
	}{
		{5 * testChunk, 1},     // Same size: reused.
		{5*testChunk - 100, 1}, // Smaller: reused.
		{8 * testChunk, 2},     // Larger: replaced.
		{8 * testChunk, 2},
	}
	for i, sz := range sizes {
		saveAsync(t, s, "r", int64(i+2), randBytes(uint64(61+i), sz.n))
		if got := s.pool.allocs.Load(); got != sz.allocs {
			t.Fatalf("after a save of %d bytes: %d staging buffers allocated, want %d", sz.n, got, sz.allocs)
		}
	}
	// Copying into a reused buffer allocates nothing payload-sized.
	warm := randBytes(70, 8*testChunk)
	var stats SaveStats
	allocated := testing.AllocsPerRun(5, func() {
		p, err := s.SaveAsync(ctx, "r", 99, warm)
		must(t, err)
		_, err = p.Wait(ctx)
		must(t, err)
		stats = p.Stats()
	})
	if s.pool.allocs.Load() != 2 {
		t.Fatalf("repeated saves allocated staging buffers: %d", s.pool.allocs.Load())
	}
	if stats.Stall <= 0 || stats.Duration < stats.Stall || !stats.Reused {
		t.Fatalf("stats = %+v", stats)
	}
	t.Logf("%.0f allocations per save+wait of %d bytes (none payload-sized)", allocated, len(warm))
}

func TestSaveAsyncBackpressureAndClose(t *testing.T) {
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	h, b := newHookBucket(t, inner)
	s, err := NewWithOptions(b, Options{ChunkBytes: testChunk, MaxPending: 1})
	must(t, err)
	ctx := t.Context()

	release := make(chan struct{})
	h.setBeforeCommit(func(key string) error {
		if strings.HasSuffix(key, manifestName) {
			<-release
		}
		return nil
	})
	p1, err := s.SaveAsync(ctx, "r", 1, randBytes(80, 3*testChunk))
	must(t, err)

	// The only staging buffer is busy: the next SaveAsync waits.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.SaveAsync(short, "r", 2, randBytes(81, 3*testChunk)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SaveAsync with MaxPending in flight = %v, want DeadlineExceeded", err)
	}
	// Waiting can be given up without affecting the save.
	if _, err := p1.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait(expired) = %v", err)
	}
	if st := p1.Stats(); st != (SaveStats{}) {
		t.Fatalf("Stats() before Done = %+v", st)
	}

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a save was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	must(t, <-closed)
	select {
	case <-p1.Done():
	default:
		t.Fatal("Close returned before the save finished")
	}
	if _, err := p1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveAsync(ctx, "r", 3, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("SaveAsync after Close = %v", err)
	}
	for _, bad := range []struct {
		run  string
		step int64
	}{{"", 1}, {"a/b", 1}, {"r", -1}} {
		if _, err := New(b).SaveAsync(ctx, bad.run, bad.step, nil); err == nil {
			t.Errorf("SaveAsync(%q, %d) succeeded", bad.run, bad.step)
		}
		if _, _, err := New(b).SaveIncremental(ctx, bad.run, bad.step, nil); err == nil {
			t.Errorf("SaveIncremental(%q, %d) succeeded", bad.run, bad.step)
		}
	}
}

func TestChunkedSaveIdempotentAndOverwrite(t *testing.T) {
	hooked(t, testOpts, func(t *testing.T, s *Store, h *hookBucket, raw *blob.Bucket) {
		ctx := t.Context()
		clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s.now = func() time.Time { return clock }
		p := randBytes(90, 3*testChunk+8)
		first, _, err := s.SaveIncremental(ctx, "r", 5, p)
		must(t, err)
		h.reset()
		clock = clock.Add(time.Hour)
		again, st := saveAsync(t, s, "r", 5, p)
		if again != first || !st.Reused {
			t.Fatalf("retry = %+v (%+v), want %+v reused", again, st, first)
		}
		if chunks, manifests, _ := h.counts(); chunks+manifests != 0 {
			t.Fatalf("an identical re-save wrote %d chunks and %d manifests", chunks, manifests)
		}
		if m := readManifestRaw(t, raw, first.Key); !m.Created.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Fatalf("identical re-save rewrote the manifest (created %v)", m.Created)
		}
		// A different payload for the same step replaces the checkpoint.
		other, _, err := s.SaveIncremental(ctx, "r", 5, []byte("different"))
		must(t, err)
		mustLoad(t, s, other, []byte("different"))
		var ce *CorruptError
		if _, err := s.Load(ctx, first); !errors.As(err, &ce) {
			t.Fatalf("Load(stale ref) = %v, want a *CorruptError", err)
		}
		// Version 1 and 2 saves of one step: an intact v1 checkpoint of the
		// same payload is kept; a v1 Save replaces a v2 checkpoint.
		v1 := mustSave(t, s, "r", 6)
		h.reset()
		if ref, st, err := s.SaveIncremental(ctx, "r", 6, payload(6)); err != nil || ref != v1 || !st.Reused {
			t.Fatalf("SaveIncremental over identical v1 = %+v, %+v, %v", ref, st, err)
		}
		if _, manifests, _ := h.counts(); manifests != 0 {
			t.Fatal("the v1 manifest was rewritten")
		}
		if m := readManifestRaw(t, raw, v1.Key); m.Version != 1 {
			t.Fatalf("manifest version %d, want 1", m.Version)
		}
		if ref := mustSave(t, s, "r", 5); ref.SHA256 == other.SHA256 {
			t.Fatal("v1 Save over v2 kept the old payload")
		}
		if m := readManifestRaw(t, raw, ManifestKey("r", 5)); m.Version != 1 {
			t.Fatalf("manifest version %d after a v1 Save, want 1", m.Version)
		}
		mustLoad(t, s, Ref{Run: "r", Step: 5}, payload(5))
	})
}

func TestNoConditionalWrites(t *testing.T) {
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	h, b := newHookBucket(t, inner)
	h.noIfNotExist = true
	s, err := NewWithOptions(b, testOpts)
	must(t, err)
	ctx := t.Context()
	p := randBytes(95, 4*testChunk)
	ref, st := saveAsync(t, s, "r", 1, p)
	if !s.noIfNotExist.Load() || st.ChunksWritten != 4 {
		t.Fatalf("fallback not taken: %v, %+v", s.noIfNotExist.Load(), st)
	}
	mustLoad(t, s, ref, p)
	p[0]++
	if _, st := saveAsync(t, s, "r", 2, p); st.ChunksWritten != 1 {
		t.Fatalf("incremental save without IfNotExist wrote %d chunks, want 1", st.ChunksWritten)
	}
	// A manifest appearing under the save (another writer) is a conflict.
	s.now = func() time.Time {
		must(t, inner.WriteAll(ctx, ManifestKey("r", 3), []byte("{}"), nil))
		return time.Now()
	}
	if _, _, err := s.SaveIncremental(ctx, "r", 3, p); err == nil || !strings.Contains(err.Error(), "another writer") {
		t.Fatalf("SaveIncremental racing a manifest = %v, want a conflict", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	for _, o := range []Options{
		{ChunkBytes: MinChunkBytes - 4}, {ChunkBytes: MaxChunkBytes + 4}, {ChunkBytes: 4098},
		{Concurrency: -1}, {MaxPending: -1},
	} {
		if _, err := NewWithOptions(b, o); err == nil {
			t.Errorf("NewWithOptions(%+v) succeeded", o)
		}
		if _, err := OpenWithOptions(t.Context(), "mem://", o); err == nil {
			t.Errorf("OpenWithOptions(%+v) succeeded", o)
		}
	}
	s, err := NewWithOptions(b, Options{GCGrace: -time.Second})
	must(t, err)
	if s.opts.ChunkBytes != DefaultChunkBytes || s.opts.GCGrace != 0 || s.opts.MaxPending != 2 || s.opts.Concurrency < 1 {
		t.Fatalf("defaults = %+v", s.opts)
	}
	if New(b).opts.GCGrace != DefaultGCGrace {
		t.Fatal("New does not use the default grace period")
	}
}

// TestV1StillLoads pins the version 1 layout as earlier builds wrote it.
func TestV1StillLoads(t *testing.T) {
	backends(t, func(t *testing.T, s *Store, b *blob.Bucket) {
		ctx := t.Context()
		p := []byte("a payload written by an earlier build")
		sum := sha256.Sum256(p)
		m := fmt.Sprintf(`{
  "format": "cann-train/checkpoint",
  "version": 1,
  "run": "old",
  "step": 7,
  "data": "state.bin",
  "bytes": %d,
  "sha256": "%x",
  "created": "2026-01-02T03:04:05Z"
}
`, len(p), sum)
		must(t, b.WriteAll(ctx, "runs/old/ckpt/000000000007/state.bin", p, nil))
		must(t, b.WriteAll(ctx, "runs/old/ckpt/000000000007/manifest.json", []byte(m), nil))
		got, ref, skipped, err := s.LoadLatestValid(ctx, "old")
		if err != nil || !bytes.Equal(got, p) || ref.Step != 7 || len(skipped) != 0 {
			t.Fatalf("LoadLatestValid() = %q, %+v, %v, %v", got, ref, skipped, err)
		}
		// A newer v2 checkpoint that turns out corrupt falls back to v1.
		s.opts.ChunkBytes = testChunk
		r2, _, err := s.SaveIncremental(ctx, "old", 8, randBytes(99, 2*testChunk))
		must(t, err)
		for _, c := range readManifestRaw(t, b, r2.Key).Chunks {
			must(t, b.Delete(ctx, chunkKey("old", c.Hash)))
		}
		got, ref, skipped, err = s.LoadLatestValid(ctx, "old")
		if err != nil || !bytes.Equal(got, p) || ref.Step != 7 || len(skipped) != 1 || skipped[0].Ref.Step != 8 {
			t.Fatalf("LoadLatestValid() = %+v, %+v, %v", ref, skipped, err)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	s, err := NewWithOptions(b, testOpts)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	key := ManifestKey("r", 1)
	for _, p := range [][]byte{nil, {1}, randBytes(1, 3*testChunk+5)} {
		if _, _, err := s.SaveIncremental(ctx, "r", 1, p); err != nil {
			f.Fatal(err)
		}
		raw, _ := b.ReadAll(ctx, key)
		f.Add(raw)
	}
	if _, err := s.Save(ctx, "r", 1, []byte("v1")); err != nil {
		f.Fatal(err)
	}
	raw, _ := b.ReadAll(ctx, key)
	f.Add(raw)
	f.Add([]byte(`{"format":"cann-train/checkpoint","version":2,"run":"r","step":1,"bytes":4,"sha256":"` + strings.Repeat("0", 64) +
		`","chunk_bytes":1024,"chunk_hash":"xxh3-128","compression":"zstd","chunks":[{"hash":"` + strings.Repeat("0", 32) + `","bytes":4}]}`))
	f.Add([]byte("{}"))
	f.Add([]byte("null"))

	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := decodeManifest(key, raw)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Key != key {
				t.Fatalf("error %v is not a *CorruptError for the key", err)
			}
			return
		}
		// Accepted: safe to act on.
		if m.Run != "r" || m.Step != 1 || m.Bytes < 0 {
			t.Fatalf("accepted %+v", m)
		}
		switch m.Version {
		case 1:
			if m.Data != dataName || len(m.Chunks) != 0 {
				t.Fatalf("accepted v1 %+v", m)
			}
		case 2:
			var total int64
			for i, c := range m.Chunks {
				if !isChunkHash(c.Hash) || c.Bytes <= 0 || c.Bytes > m.ChunkBytes || (i < len(m.Chunks)-1 && c.Bytes != m.ChunkBytes) {
					t.Fatalf("accepted chunk %d %+v of %+v", i, c, m)
				}
				total += int64(c.Bytes)
			}
			if total != m.Bytes || m.ChunkBytes%4 != 0 {
				t.Fatalf("accepted %+v: chunks hold %d bytes", m, total)
			}
		default:
			t.Fatalf("accepted version %d", m.Version)
		}
		// What we accept, we can write back and accept again.
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeManifest(key, again)
		if err != nil {
			t.Fatalf("re-encoded manifest rejected: %v", err)
		}
		if m2.SHA256 != m.SHA256 || m2.Bytes != m.Bytes || !slices.Equal(m2.Chunks, m.Chunks) {
			t.Fatalf("round trip changed the manifest: %+v vs %+v", m2, m)
		}
	})
}
