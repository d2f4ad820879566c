package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Chunk size limits and defaults for format version 2.
const (
	// DefaultChunkBytes is the chunk size used when Options.ChunkBytes is 0.
	DefaultChunkBytes = 1 << 20
	// MinChunkBytes and MaxChunkBytes bound Options.ChunkBytes.
	MinChunkBytes = 1 << 10
	MaxChunkBytes = 256 << 20
	// DefaultGCGrace is the grace period used when Options.GCGrace is 0.
	DefaultGCGrace = time.Hour

	chunkHashName    = "xxh3-128"
	chunkCompression = "zstd"
	chunkHexLen      = 32 // Hex digits of an xxh3-128 sum.
	chunksDir        = "chunks/"
)

// Options tunes a Store. The zero value selects every default.
type Options struct {
	// ChunkBytes is the chunk size of version 2 checkpoints: a multiple of
	// 4 (so chunk boundaries fall on float32 boundaries of an engine.State,
	// whose header is a multiple of 4 bytes long) between MinChunkBytes and
	// MaxChunkBytes. 0 means DefaultChunkBytes (1 MiB). Smaller chunks
	// deduplicate sparse updates better and cost more objects and requests.
	ChunkBytes int
	// Concurrency bounds how many chunks one save or load hashes,
	// compresses and transfers at once. 0 means min(4, GOMAXPROCS).
	Concurrency int
	// MaxPending bounds the SaveAsync saves in flight, and so the staging
	// buffers (each as large as its payload) the Store keeps. SaveAsync
	// blocks while MaxPending saves are in flight. 0 means 2.
	MaxPending int
	// GCGrace protects young objects: GC never deletes a chunk, or an
	// orphaned version 1 payload, modified less than GCGrace ago. 0 means
	// DefaultGCGrace (1 h); a negative value disables the grace period.
	GCGrace time.Duration
	// RequestTimeout bounds each request a Store makes to the bucket (a
	// stat, the upload or download of one object, a page of a listing,
	// a delete), plus a second per MiB the request moves; one that takes
	// longer fails with ErrStalled. 0 means DefaultRequestTimeout (1 min);
	// a negative value sets no limit.
	RequestTimeout time.Duration
	// MustExist, for a file:// bucket, opens only a directory that exists:
	// Open does not create it (what read-only users want: a mistyped path
	// must not turn into an empty bucket that lists no checkpoints) and
	// fails with an error wrapping ErrNoBucket when it is missing. The
	// URL's own create_dir wins. Other schemes ignore it.
	MustExist bool
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.ChunkBytes == 0:
		o.ChunkBytes = DefaultChunkBytes
	case o.ChunkBytes < MinChunkBytes || o.ChunkBytes > MaxChunkBytes || o.ChunkBytes%4 != 0:
		return o, fmt.Errorf("checkpoint: ChunkBytes %d must be a multiple of 4 in %d..%d", o.ChunkBytes, MinChunkBytes, MaxChunkBytes)
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = min(4, runtime.GOMAXPROCS(0))
	case o.Concurrency < 0:
		return o, fmt.Errorf("checkpoint: Concurrency %d is negative", o.Concurrency)
	}
	switch {
	case o.MaxPending == 0:
		o.MaxPending = 2
	case o.MaxPending < 0:
		return o, fmt.Errorf("checkpoint: MaxPending %d is negative", o.MaxPending)
	}
	switch {
	case o.GCGrace == 0:
		o.GCGrace = DefaultGCGrace
	case o.GCGrace < 0:
		o.GCGrace = 0
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return o, nil
}

// chunkRef is one entry of a version 2 manifest's chunk list.
type chunkRef struct {
	Hash  string `json:"hash"` // xxh3-128 of the uncompressed chunk, 32 lower-case hex digits.
	Bytes int    `json:"bytes"`
}

func chunksPrefix(run string) string { return "runs/" + run + "/" + chunksDir }

// chunkKey is where run's chunk with the given hash lives. Chunks are per
// run, so GC(run) only needs run's manifests and one run's manifest can
// never make another run's chunks look referenced.
func chunkKey(run, hash string) string { return chunksPrefix(run) + hash }

func chunkHash(b []byte) string {
	sum := xxh3.Hash128(b).Bytes()
	return hex.EncodeToString(sum[:])
}

func isChunkHash(h string) bool {
	if len(h) != chunkHexLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkChunkList validates a version 2 manifest's chunk fields and returns
// why they are unusable, or "" if they are fine.
func checkChunkList(m *manifest) string {
	switch {
	case m.Data != "":
		return fmt.Sprintf("version 2 manifest names a payload object %q", m.Data)
	case m.ChunkHash != chunkHashName:
		return fmt.Sprintf("manifest chunk hash is %q, want %q", m.ChunkHash, chunkHashName)
	case m.Compression != chunkCompression:
		return fmt.Sprintf("manifest chunk compression is %q, want %q", m.Compression, chunkCompression)
	case m.ChunkBytes < MinChunkBytes || m.ChunkBytes > MaxChunkBytes || m.ChunkBytes%4 != 0:
		return fmt.Sprintf("manifest chunk size %d is not a multiple of 4 in %d..%d", m.ChunkBytes, MinChunkBytes, MaxChunkBytes)
	}
	n := len(m.Chunks)
	if want := (m.Bytes + int64(m.ChunkBytes) - 1) / int64(m.ChunkBytes); int64(n) != want {
		return fmt.Sprintf("manifest lists %d chunks, %d bytes in chunks of %d need %d", n, m.Bytes, m.ChunkBytes, want)
	}
	for i, c := range m.Chunks {
		if !isChunkHash(c.Hash) {
			return fmt.Sprintf("manifest chunk %d hash %q is not %d lower-case hex digits", i, c.Hash, chunkHexLen)
		}
		want := m.ChunkBytes
		if i == n-1 {
			want = int(m.Bytes - int64(n-1)*int64(m.ChunkBytes))
		}
		if c.Bytes != want {
			return fmt.Sprintf("manifest chunk %d is %d bytes, want %d", i, c.Bytes, want)
		}
	}
	return ""
}

// zstd codecs, shared: EncodeAll and DecodeAll are safe for concurrent use.
var (
	zenc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // Only on invalid options.
		}
		return e
	})
	zdec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxChunkBytes))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// SaveStats describes one version 2 save.
type SaveStats struct {
	Bytes           int64 // Payload size.
	Chunks          int   // Chunks in the manifest.
	ChunksWritten   int   // Chunk objects this save uploaded; the rest already existed.
	ChunksRefreshed int   // Of those, chunks that existed but were written again: old enough for another process's GC (see putChunk).
	RawBytesWritten int64 // Uncompressed size of the chunks written.
	BytesWritten    int64 // Stored (compressed) size of the chunks written.
	ManifestBytes   int   // Size of the manifest written; 0 if Reused.
	// Reused: an identical, intact checkpoint already existed at this step
	// and was kept (an idempotent retry); no manifest was written.
	Reused bool
	// Stall is the time SaveAsync took to return (validation, waiting for
	// a free staging buffer, the copy). Zero for SaveIncremental.
	Stall time.Duration
	// Duration runs from the call to the end of the save.
	Duration time.Duration
}

// Pending is a save started by [Store.SaveAsync]. The checkpoint exists once
// its manifest is written, which happens last; Wait reports when.
type Pending struct {
	run  string
	step int64
	done chan struct{}

	// Set before done is closed.
	ref   Ref
	stats SaveStats
	err   error
}

// Wait blocks until the save ends or ctx is done, and returns the
// checkpoint's Ref or why the save failed. A ctx that ends first only stops
// the waiting: the save goes on (its own context is the one SaveAsync got).
func (p *Pending) Wait(ctx context.Context) (Ref, error) {
	select {
	case <-p.done:
		return p.ref, p.err
	case <-ctx.Done():
		return Ref{}, fmt.Errorf("checkpoint: waiting for run %q step %d: %w", p.run, p.step, context.Cause(ctx))
	}
}

// Done is closed when the save has ended, successfully or not.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Stats describes the save; it is the zero value until Done is closed.
func (p *Pending) Stats() SaveStats {
	select {
	case <-p.done:
		return p.stats
	default:
		return SaveStats{}
	}
}

// SaveAsync starts saving payload as run's checkpoint for step in format
// version 2, and returns as soon as payload has been copied into a staging
// buffer: the caller may modify payload right away. Hashing, compression
// and upload happen in the background (see Options.Concurrency); the
// checkpoint exists, and Wait returns its Ref, once the manifest is written.
//
// Staging buffers are reused: a save of the same size as an earlier,
// finished one allocates nothing payload-sized. If Options.MaxPending saves
// are in flight, SaveAsync waits for one to finish (or for ctx).
//
// ctx governs the whole save, background included: cancelling it aborts an
// unfinished save, which then leaves no checkpoint. Close waits for saves in
// flight. Only validation, ctx and Close errors are returned here; upload
// errors come from Wait.
func (s *Store) SaveAsync(ctx context.Context, run string, step int64, payload []byte) (*Pending, error) {
	start := time.Now()
	if err := ValidateRun(run); err != nil {
		return nil, err
	}
	if err := validateStep(step); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("checkpoint: SaveAsync on a closed Store")
	}
	s.inflight.Add(1)
	s.mu.Unlock()

	buf, err := s.pool.get(ctx, len(payload))
	if err != nil {
		s.inflight.Done()
		return nil, fmt.Errorf("checkpoint: save run %q step %d: waiting for a staging buffer: %w", run, step, err)
	}
	stage(buf, payload)
	p := &Pending{run: run, step: step, done: make(chan struct{})}
	stall := time.Since(start)
	go func() {
		defer s.inflight.Done()
		ref, stats, err := s.saveChunked(ctx, run, step, buf)
		s.pool.put(buf) // saveChunked no longer touches buf.
		stats.Stall, stats.Duration = stall, time.Since(start)
		p.ref, p.stats, p.err = ref, stats, err
		close(p.done)
	}()
	return p, nil
}

// SaveIncremental saves payload as run's checkpoint for step in format
// version 2, synchronously: chunks are hashed, and those not yet in the
// bucket compressed and uploaded, then the manifest is written. payload must
// not change until it returns. Like Save, saving an identical payload again
// is a no-op that returns the same Ref, and a different payload replaces the
// checkpoint at that step.
func (s *Store) SaveIncremental(ctx context.Context, run string, step int64, payload []byte) (Ref, SaveStats, error) {
	start := time.Now()
	if err := ValidateRun(run); err != nil {
		return Ref{}, SaveStats{}, err
	}
	if err := validateStep(step); err != nil {
		return Ref{}, SaveStats{}, err
	}
	ref, stats, err := s.saveChunked(ctx, run, step, payload)
	stats.Duration = time.Since(start)
	return ref, stats, err
}

// saveChunked is the version 2 save. It reads data until it returns.
func (s *Store) saveChunked(ctx context.Context, run string, step int64, data []byte) (Ref, SaveStats, error) {
	key := ManifestKey(run, step)
	cs := s.opts.ChunkBytes
	n := (len(data) + cs - 1) / cs
	stats := SaveStats{Bytes: int64(len(data)), Chunks: n}

	// The whole-payload SHA-256 is the slowest pass; overlap it with the
	// chunk pipeline. It must finish before data is released.
	shaDone := make(chan [sha256.Size]byte, 1)
	go func() { shaDone <- sha256.Sum256(data) }()

	chunks := make([]chunkRef, n)
	held, _ := s.held.Load(run)
	heldChunks, _ := held.(map[string]bool)
	pin := s.reg.newPin()
	defer pin.release()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next     atomic.Int64
		mu       sync.Mutex // Guards claimed and stats' write counters.
		claimed  = make(map[string]bool, n)
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel(err) })
	}
	for range min(s.opts.Concurrency, n) {
		wg.Go(func() {
			var zbuf []byte
			for wctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				lo := i * cs
				raw := data[lo:min(lo+cs, len(data))]
				h := chunkHash(raw)
				chunks[i] = chunkRef{Hash: h, Bytes: len(raw)}
				mu.Lock()
				dup := claimed[h]
				claimed[h] = true
				mu.Unlock()
				if dup {
					continue // Another worker stores this content.
				}
				put, stored, err := s.putChunk(wctx, run, h, raw, pin, heldChunks[h], &zbuf)
				if err != nil {
					fail(err)
					return
				}
				if put != chunkPresent {
					mu.Lock()
					stats.ChunksWritten++
					if put == chunkRefreshed {
						stats.ChunksRefreshed++
					}
					stats.RawBytesWritten += int64(len(raw))
					stats.BytesWritten += stored
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sum := <-shaDone
	if firstErr != nil {
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: %w", key, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: %w", key, err)
	}
	ref := Ref{Run: run, Step: step, Key: key, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data))}

	// An existing checkpoint at this step: keep it if it is this payload
	// and intact, otherwise hide it. Chunks are immutable, so nothing the
	// old manifest references was touched above.
	old, err := s.readManifest(ctx, key)
	var corrupt *CorruptError
	switch {
	case err == nil && old.SHA256 == ref.SHA256 && old.Bytes == ref.Bytes && s.intact(ctx, run, step, old, chunks):
		stats.Reused = true
		ref.Created = old.Created
		s.hold(run, chunks)
		return ref, stats, nil
	case err == nil || errors.As(err, &corrupt):
		if derr := s.remove(ctx, key); derr != nil && !isNotFound(derr) {
			return Ref{}, stats, fmt.Errorf("checkpoint: save %s: remove stale manifest: %w", key, derr)
		}
	case errors.Is(err, ErrNotFound):
	default:
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: %w", key, err)
	}

	ref.Created = s.now().UTC()
	m := manifest{
		Format: manifestKind, Version: formatChunked, Run: run, Step: step,
		Bytes: ref.Bytes, SHA256: ref.SHA256, Created: ref.Created,
		ChunkBytes: cs, ChunkHash: chunkHashName, Compression: chunkCompression, Chunks: chunks,
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: encode manifest: %w", key, err)
	}
	mb = append(mb, '\n')
	// The commit point. IfNotExist: a concurrent writer of the same step
	// (outside the one-writer rule) makes this fail instead of silently
	// replacing a manifest someone may already have read.
	err = s.writeObject(ctx, key, mb, "application/json", true)
	if isPrecondition(err) {
		if other, rerr := s.readManifest(ctx, key); rerr == nil && other.SHA256 == ref.SHA256 && other.Bytes == ref.Bytes {
			stats.Reused = true
			ref.Created = other.Created
			s.hold(run, chunks)
			return ref, stats, nil
		}
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: another writer committed a different checkpoint at this step: %w", key, err)
	}
	if err != nil {
		return Ref{}, stats, fmt.Errorf("checkpoint: save %s: write manifest: %w", key, err)
	}
	stats.ManifestBytes = len(mb)
	s.hold(run, chunks)
	return ref, stats, nil
}

// hold records chunks as those of the manifest this Store last loaded or
// wrote for run.
func (s *Store) hold(run string, chunks []chunkRef) {
	set := make(map[string]bool, len(chunks))
	for _, c := range chunks {
		set[c.Hash] = true
	}
	s.held.Store(run, set)
}

// intact reports whether old, a manifest with the payload just saved, can
// stay: a version 1 payload object of the right size, or the very chunks
// this save just made sure exist.
func (s *Store) intact(ctx context.Context, run string, step int64, old *manifest, chunks []chunkRef) bool {
	if old.Version == formatChunked {
		return slices.Equal(old.Chunks, chunks)
	}
	attrs, err := s.attributes(ctx, dataKey(run, step))
	return err == nil && attrs.Size == old.Bytes
}

// putOutcome is what putChunk did.
type putOutcome int

const (
	chunkPresent   putOutcome = iota // Found in the bucket and left as it was.
	chunkUploaded                    // Not there (or known corrupt): uploaded.
	chunkRefreshed                   // There but old and unprotected: written again.
)

// putChunk makes sure run's chunk hash exists, uploading raw (compressed)
// if it does not. It pins the key first, so a concurrent GC through this
// Store cannot delete an existing chunk between this check and the
// manifest write.
//
// A GC in another process does not see the pin. It spares what the
// manifests it reads reference and what is younger than the grace
// period, and looks at a chunk's age again just before deleting it. So a
// chunk found present is written again (its modification time renewed)
// when it is old enough for such a GC to delete — older than half the
// grace, which leaves the save the other half to write its manifest — and
// held is false: the manifest this Store last loaded or wrote for the run
// does not name it. A chunk that manifest names is protected by it (the
// run's retention keeps its newest checkpoints); one it does not is
// content seen again after the checkpoints that had it were deleted (a
// rewound run retraining the same steps), or any chunk in a process that
// has read no manifest of the run.
func (s *Store) putChunk(ctx context.Context, run, hash string, raw []byte, pin *pin, held bool, zbuf *[]byte) (put putOutcome, stored int64, err error) {
	key := chunkKey(run, hash)
	pin.add(key)
	_, bad := s.badChunks.Load(key)
	put = chunkUploaded
	if !bad {
		a, err := s.attributes(ctx, key)
		switch {
		case isNotFound(err):
		case err != nil:
			return 0, 0, fmt.Errorf("stat %s: %w", key, err)
		case held || !s.mayBeCollected(a.ModTime):
			return chunkPresent, 0, nil
		default:
			put = chunkRefreshed
		}
	}
	*zbuf = zenc().EncodeAll(raw, (*zbuf)[:0])
	// A chunk known to be corrupt is overwritten, and so is one refreshed
	// (the same content); otherwise IfNotExist, and losing the race to
	// another writer of this content is fine.
	err = s.writeObject(ctx, key, *zbuf, "application/zstd", put == chunkUploaded && !bad)
	if isPrecondition(err) {
		return chunkPresent, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("write %s: %w", key, err)
	}
	if bad {
		s.badChunks.Delete(key)
	}
	return put, int64(len(*zbuf)), nil
}

// mayBeCollected says whether an object last modified at mod is old
// enough that a GC pass, in this process or another, may delete it
// before a save that starts now has written its manifest: older than
// half the grace period. Without a grace period GC is only safe where
// nothing saves the run, and nothing is refreshed.
func (s *Store) mayBeCollected(mod time.Time) bool {
	return s.opts.GCGrace > 0 && mod.Before(time.Now().Add(-s.opts.GCGrace/2))
}

// WriteBlob stores data under key in the store's bucket, replacing what
// was there: a run's side files, such as its processes' logs or its
// report, next to its checkpoints.
func (s *Store) WriteBlob(ctx context.Context, key string, data []byte, contentType string) error {
	return s.writeObject(ctx, key, data, contentType, false)
}

// ReadBlob reads back what WriteBlob stored under key, at most limit
// bytes; a key that is not there is ErrNotFound, one larger than limit
// an error.
func (s *Store) ReadBlob(ctx context.Context, key string, limit int64) (data []byte, err error) {
	err = s.within(ctx, limit, func(ctx context.Context) error {
		r, err := s.bucket.NewReader(ctx, key, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		data, err = io.ReadAll(io.LimitReader(r, limit+1))
		return err
	})
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", key, limit)
	}
	return data, nil
}

// writeObject writes data to key, conditionally if ifNotExist (a
// FailedPrecondition error then means key exists). On drivers without
// conditional writes it falls back to an existence check, which is not
// atomic; for content-addressed chunks that race is harmless.
func (s *Store) writeObject(ctx context.Context, key string, data []byte, contentType string, ifNotExist bool) error {
	if ifNotExist && s.noIfNotExist.Load() {
		ok, err := s.exists(ctx, key)
		if err != nil {
			return err
		}
		if ok {
			return fmt.Errorf("checkpoint: %s exists: %w", key, errExists)
		}
		ifNotExist = false
	}
	err := s.write(ctx, key, data, &blob.WriterOptions{ContentType: contentType, IfNotExist: ifNotExist})
	if ifNotExist && gcerrors.Code(err) == gcerrors.Unimplemented {
		s.noIfNotExist.Store(true)
		return s.writeObject(ctx, key, data, contentType, true)
	}
	return err
}

// errExists stands in for the driver's precondition error when the
// existence check replaces IfNotExist.
var errExists = errors.New("object exists")

// isPrecondition reports a conditional write that found its key taken.
func isPrecondition(err error) bool {
	return gcerrors.Code(err) == gcerrors.FailedPrecondition || errors.Is(err, errExists)
}

// write is one upload, a request; a failed Write aborts it (ctx cancelled
// before Close) rather than committing a partial object. A bucket not
// found is one that does not exist (hint).
func (s *Store) write(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	return s.hint(s.write1(ctx, key, data, opts), true)
}

func (s *Store) write1(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	return s.within(ctx, int64(len(data)), func(ctx context.Context) error {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := s.bucket.NewWriter(wctx, key, opts)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			cancel()
			_ = w.Close()
			return err
		}
		return w.Close()
	})
}

// loadChunked reads and verifies the chunks of m, a validated version 2
// manifest at key: each chunk's size and xxh3-128, then the payload's
// SHA-256. Chunks are fetched concurrently; content repeated in the payload
// is fetched once.
func (s *Store) loadChunked(ctx context.Context, key string, m *manifest) ([]byte, error) {
	data := make([]byte, m.Bytes)
	type use struct{ off, size int }
	uses := make(map[string][]use, len(m.Chunks))
	var order []string
	off := 0
	for _, c := range m.Chunks {
		if uses[c.Hash] == nil {
			order = append(order, c.Hash)
		}
		uses[c.Hash] = append(uses[c.Hash], use{off, c.Bytes})
		off += c.Bytes
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	for range min(s.opts.Concurrency, len(order)) {
		wg.Go(func() {
			for fctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(order) {
					return
				}
				h := order[i]
				u := uses[h]
				end := u[0].off + u[0].size
				if err := s.fetchChunk(fctx, m.Run, h, data[u[0].off:end:end]); err != nil {
					fail(err)
					return
				}
				for _, o := range u[1:] {
					copy(data[o.off:o.off+o.size], data[u[0].off:])
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", key, err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.SHA256 {
		return nil, &CorruptError{Key: key, Reason: fmt.Sprintf("payload sha256 %x (chunks verified), manifest says %s", sum, m.SHA256)}
	}
	return data, nil
}

// fetchChunk reads run's chunk hash into dst, which has the size the
// manifest gives, and verifies it.
func (s *Store) fetchChunk(ctx context.Context, run, hash string, dst []byte) error {
	key := chunkKey(run, hash)
	z, err := s.readAll(ctx, key, int64(len(dst)))
	if err != nil {
		if isNotFound(err) {
			return &CorruptError{Key: key, Reason: "chunk is missing", Err: err}
		}
		return fmt.Errorf("checkpoint: read %s: %w", key, err)
	}
	bad := func(reason string, err error) error {
		s.badChunks.Store(key, struct{}{})
		return &CorruptError{Key: key, Reason: reason, Err: err}
	}
	// Capped at dst's length: a chunk that decodes longer must not spill
	// into its neighbour's slot (another worker's).
	out, err := zdec().DecodeAll(z, dst[:0:len(dst)])
	switch {
	case err != nil:
		return bad("chunk does not decompress", err)
	case len(out) != len(dst):
		return bad(fmt.Sprintf("chunk is %d bytes uncompressed, manifest says %d", len(out), len(dst)), nil)
	}
	if len(out) > 0 && &out[0] != &dst[0] {
		copy(dst, out) // The decoder reallocated; keep the bytes where they belong.
	}
	if got := chunkHash(dst); got != hash {
		return bad(fmt.Sprintf("chunk %s is %s, manifest says %s", chunkHashName, got, hash), nil)
	}
	return nil
}

// stage copies src to dst, which have the same length. Large payloads are
// copied by up to min(4, GOMAXPROCS) goroutines: one core rarely saturates
// memory bandwidth, and the caller is stalled until the copy is done anyway.
func stage(dst, src []byte) {
	const minPart = 8 << 20
	parts := min(4, runtime.GOMAXPROCS(0), len(src)/minPart)
	if parts < 2 {
		copy(dst, src)
		return
	}
	var wg sync.WaitGroup
	step := (len(src)/parts + 63) &^ 63 // Cache-line aligned parts.
	for lo := step; lo < len(src); lo += step {
		hi := min(lo+step, len(src))
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	copy(dst[:step], src[:step])
	wg.Wait()
}

// bufPool holds SaveAsync's staging buffers: at most cap(slots) exist, one
// per save in flight plus free ones kept for reuse.
type bufPool struct {
	slots  chan struct{}
	mu     sync.Mutex
	free   [][]byte
	allocs atomic.Int64 // Buffers allocated, for tests.
}

func newBufPool(n int) *bufPool { return &bufPool{slots: make(chan struct{}, n)} }

// get returns a buffer of length n, waiting for a free slot.
func (p *bufPool) get(ctx context.Context, n int) ([]byte, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = slices.Delete(p.free, best, best+1)
		return b[:n], nil
	}
	if len(p.free) > 0 {
		// None is large enough: drop one, so buffers never outnumber slots.
		p.free = p.free[1:]
	}
	p.allocs.Add(1)
	return make([]byte, n), nil
}

func (p *bufPool) put(b []byte) {
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
	<-p.slots
}
