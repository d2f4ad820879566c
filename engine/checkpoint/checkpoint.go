package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets.
	_ "gocloud.dev/blob/memblob"  // mem:// buckets.
	"gocloud.dev/gcerrors"
)

// Object names and format identifiers.
const (
	dataName      = "state.bin"
	manifestName  = "manifest.json"
	manifestKind  = "cann-train/checkpoint"
	formatVersion = 1 // Written by Save: one payload object.
	formatChunked = 2 // Written by SaveAsync and SaveIncremental: content-addressed chunks.
	stepDigits    = 12
	maxRunLen     = 128

	// MaxStep is the largest step a checkpoint key can hold.
	MaxStep = 999_999_999_999
)

// ErrNotFound reports that a run has no checkpoint, or that a referenced
// checkpoint's manifest does not exist. Match it with errors.Is.
var ErrNotFound = errors.New("checkpoint not found")

// ErrNoBucket reports a bucket that does not exist (a file:// bucket's
// directory, opened with Options.MustExist). Match it with errors.Is.
var ErrNoBucket = errors.New("bucket does not exist")

// noBucketError is Open's error for a file:// bucket with
// Options.MustExist whose directory is missing.
type noBucketError struct{ url, dir string }

func (e *noBucketError) Error() string {
	return fmt.Sprintf("checkpoint: bucket %s does not exist (no directory %s)", e.url, e.dir)
}

func (e *noBucketError) Is(target error) bool { return target == ErrNoBucket }

// Ref identifies one checkpoint. It is what crosses process and Temporal
// boundaries; Store.Load needs nothing else.
type Ref struct {
	Run  string `json:"run"`
	Step int64  `json:"step"`
	// Key is the manifest's object key.
	Key string `json:"key"`
	// SHA256 (hex) and Bytes describe the payload. Both are empty (zero)
	// in a Ref listed for a checkpoint whose manifest cannot be parsed.
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Created is when the manifest was written, by the writer's clock
	// (UTC); zero where SHA256 is empty.
	Created time.Time `json:"created,omitzero"`
}

// Skipped is a checkpoint that [Store.LoadLatestValid] passed over.
type Skipped struct {
	Ref    Ref    `json:"ref"`
	Reason string `json:"reason"`
}

// CorruptError reports a checkpoint that exists but cannot be trusted: an
// unreadable manifest, a missing payload, a payload whose size or SHA-256
// does not match, or (format 2) a chunk that is missing, does not decompress
// or does not match its size or hash. Match it with errors.As.
type CorruptError struct {
	Key    string // The object at fault (manifest, payload or chunk key).
	Reason string
	Err    error // Underlying cause, if any.
}

func (e *CorruptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("checkpoint: corrupt %s: %s: %v", e.Key, e.Reason, e.Err)
	}
	return fmt.Sprintf("checkpoint: corrupt %s: %s", e.Key, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// manifest is the JSON document that makes a checkpoint visible. Version 1
// names one payload object (Data); version 2 lists content-addressed chunks.
type manifest struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Run     string    `json:"run"`
	Step    int64     `json:"step"`
	Data    string    `json:"data,omitempty"` // v1: payload object name, relative to the checkpoint's prefix.
	Bytes   int64     `json:"bytes"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`

	// Version 2 only.
	ChunkBytes  int        `json:"chunk_bytes,omitempty"` // Every chunk but the last has exactly this size.
	ChunkHash   string     `json:"chunk_hash,omitempty"`  // chunkHashName
	Compression string     `json:"compression,omitempty"` // chunkCompression
	Chunks      []chunkRef `json:"chunks,omitempty"`      // In payload order.
}

// Store is a checkpoint store on one bucket. Its methods are safe for
// concurrent use (subject to the one-writer-per-run rule).
type Store struct {
	bucket    *blob.Bucket
	ownBucket bool
	now       func() time.Time // Read once per save, just before the manifest is written.
	opts      Options          // Defaults filled in.

	pool *bufPool  // SaveAsync's staging buffers.
	reg  *registry // Chunk keys in-flight saves rely on; GC spares them.

	mu       sync.Mutex // Guards closed and the Add side of inflight.
	closed   bool
	inflight sync.WaitGroup // Background saves.

	noIfNotExist atomic.Bool // The driver rejected WriterOptions.IfNotExist.
	// walk walks a file:// bucket's directories (readable; nil:
	// filepath.WalkDir — tests give one that fails as a non-root user's).
	walk      func(root string, fn fs.WalkDirFunc) error
	badChunks sync.Map // Chunk keys a Load found corrupt: the next save rewrites them.
	// held maps a run to the chunk hashes (map[string]bool, never changed
	// once stored) of the version 2 manifest this Store last loaded or
	// wrote for it: a save that finds one of them in the bucket knows a
	// manifest GC reads protects it (see putChunk).
	held sync.Map

	// where is the URL the store was opened at (Open; nil: New), for
	// what its errors say to check (hint).
	where *url.URL

	// dir is a file:// bucket's directory (Open), where Delete removes
	// the step directory it emptied: fileblob leaves directories behind,
	// and every listing of the run walks them all (a long run's thousands
	// of deleted checkpoints made each retention's listing seconds long
	// on NFS).
	dir string
}

// Open opens the bucket at bucketURL (any scheme registered with
// gocloud.dev/blob; mem://, file:// and s3:// are linked in). For file:// URLs the
// directory is created if missing (not with Options.MustExist), and objects are written through
// temporary files next to them rather than in os.TempDir (renamed into
// place: a bucket on another filesystem than /tmp — a mounted volume, an
// NFS share — would fail every write with "invalid cross-device link");
// the URL's own create_dir and no_tmp_dir win. mem:// gives a fresh,
// private bucket. s3:// takes gocloud's URL parameters and max_attempts
// (see [MaxAttemptsParam]), and honours AWS_MAX_ATTEMPTS.
func Open(ctx context.Context, bucketURL string) (*Store, error) {
	return OpenWithOptions(ctx, bucketURL, Options{})
}

// OpenWithOptions is [Open] with options for chunked saves and GC.
func OpenWithOptions(ctx context.Context, bucketURL string, o Options) (*Store, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(bucketURL)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: bad bucket URL %q: %w", bucketURL, err)
	}
	where := *u
	var dir string // a file:// bucket's directory, as fileblob reads it
	if u.Scheme == "file" {
		dir = u.Path
		if u.Host == "." {
			dir = strings.TrimPrefix(dir, "/")
		}
		q := u.Query()
		opts := []string{"create_dir", "no_tmp_dir"}
		if o.MustExist {
			if !q.Has("create_dir") {
				if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
					return nil, &noBucketError{url: bucketURL, dir: dir}
				}
			}
			opts = opts[1:]
		}
		for _, opt := range opts {
			if !q.Has(opt) {
				q.Set(opt, "true")
			}
		}
		u.RawQuery = q.Encode()
		// A prefix (gocloud's URL parameter) names a directory below
		// it when it ends in a slash; another leaves the files' names
		// to fileblob alone: no listing of our own then.
		if p := q.Get("prefix"); strings.HasSuffix(p, "/") {
			dir = filepath.Join(dir, filepath.FromSlash(p))
		} else if p != "" {
			dir = ""
		}
	}
	b, err := openBucket(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open bucket %q: %w", Redact(bucketURL), err)
	}
	s := newStore(b, o)
	s.ownBucket = true
	s.dir, s.where = dir, &where
	return s, nil
}

// New returns a Store on an already open bucket. Close does not close b.
func New(b *blob.Bucket) *Store {
	o, _ := Options{}.withDefaults() // The defaults are valid.
	return newStore(b, o)
}

// NewWithOptions is [New] with options for chunked saves and GC.
func NewWithOptions(b *blob.Bucket, o Options) (*Store, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return newStore(b, o), nil
}

func newStore(b *blob.Bucket, o Options) *Store {
	return &Store{bucket: b, now: time.Now, opts: o, pool: newBufPool(o.MaxPending), reg: newRegistry()}
}

// URL is the bucket URL the store was opened at, as messages may show it
// (Redact); "" for a store on a bucket opened elsewhere (New).
func (s *Store) URL() string {
	if s.where == nil {
		return ""
	}
	return Redact(s.where.String())
}

// GCGrace is the grace period GC keeps young objects for (Options.GCGrace
// with its default filled in; 0: none).
func (s *Store) GCGrace() time.Duration { return s.opts.GCGrace }

// Close waits for the saves SaveAsync started, then releases the bucket if
// Open opened it. SaveAsync fails once Close has been called.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	if !s.ownBucket {
		return nil
	}
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("checkpoint: close bucket: %w", err)
	}
	return nil
}

// Accessible checks that the bucket exists and these credentials may list
// it where the store keeps everything, under runs/ (a cheap request, one
// listed object at most: a policy that lets them list only that prefix
// passes), so that a worker can say so at its start rather than at a
// run's first checkpoint. An error says what to check; [Misconfigured]
// tells a setting's fault from a store that is down or does not answer.
func (s *Store) Accessible(ctx context.Context) error {
	var err error
	for try := 0; ; try++ {
		err = s.within(ctx, 0, func(ctx context.Context) error {
			_, _, err := s.bucket.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: "runs/"})
			return err
		})
		if err == nil || !isNotFound(err) || s.dir == "" {
			break
		}
		// fileblob's walk fails, NotFound, on a file deleted while it
		// lists (a checkpoint's temporary file renamed, another worker's
		// write probe): not a missing bucket where its directory is there.
		if try >= 2 {
			if st, serr := os.Stat(s.dir); serr == nil && st.IsDir() {
				return nil
			}
			break
		}
	}
	switch {
	case isNotFound(err):
		return fmt.Errorf("checkpoint: %w (create it, or name one that does in the checkpoint URL): %w", ErrNoBucket, err)
	case err != nil:
		return fmt.Errorf("checkpoint: bucket: %w", err)
	}
	return nil
}

// Writable checks that these credentials may write and delete under runs/,
// as every checkpoint and its retention do: it writes a small object,
// runs/.write-probe-<who>-<time> (no run's name starts with a dot: no
// run's listing sees it), and deletes it. Credentials that may list but not
// write (a read-only key, a policy without PutObject or DeleteObject) pass
// Accessible and fail here, at a worker's start rather than at a run's
// first checkpoint; [Misconfigured] tells them from a store that is down.
func (s *Store) Writable(ctx context.Context, who string) error {
	key := fmt.Sprintf("runs/.write-probe-%s-%d", who, time.Now().UnixNano())
	if err := s.write(ctx, key, []byte("cann-train write probe: deleted at once; safe to delete\n"), nil); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", key, err)
	}
	if err := s.remove(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("checkpoint: delete %s (written; old checkpoints are deleted so too): %w", key, err)
	}
	return nil
}

// ValidateRun reports whether run can name a run's checkpoints.
func ValidateRun(run string) error {
	switch {
	case run == "":
		return errors.New("checkpoint: run name is empty")
	case len(run) > maxRunLen:
		return fmt.Errorf("checkpoint: run name is %d bytes, at most %d allowed", len(run), maxRunLen)
	case strings.Contains(run, ".."):
		return fmt.Errorf("checkpoint: run name %q contains \"..\"", run)
	case !isAlnum(run[0]):
		return fmt.Errorf("checkpoint: run name %q must start with a letter or digit", run)
	}
	for i := 0; i < len(run); i++ {
		if c := run[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("checkpoint: run name %q has %q at byte %d; allowed are A-Z a-z 0-9 . _ -", run, c, i)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func validateStep(step int64) error {
	if step < 0 || step > MaxStep {
		return fmt.Errorf("checkpoint: step %d out of range 0..%d", step, MaxStep)
	}
	return nil
}

func runPrefix(run string) string { return "runs/" + run + "/ckpt/" }

func ckptPrefix(run string, step int64) string {
	return fmt.Sprintf("%s%0*d/", runPrefix(run), stepDigits, step)
}

// ManifestKey returns the manifest key of run's checkpoint at step.
func ManifestKey(run string, step int64) string { return ckptPrefix(run, step) + manifestName }

func dataKey(run string, step int64) string { return ckptPrefix(run, step) + dataName }

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

// Save stores payload as run's checkpoint for step in format version 1 (one
// payload object): payload first, manifest last. Saving an identical payload
// again returns the existing Ref. See SaveAsync and SaveIncremental for the
// incremental format 2.
func (s *Store) Save(ctx context.Context, run string, step int64, payload []byte) (Ref, error) {
	if err := ValidateRun(run); err != nil {
		return Ref{}, err
	}
	if err := validateStep(step); err != nil {
		return Ref{}, err
	}
	sum := sha256.Sum256(payload)
	ref := Ref{Run: run, Step: step, Key: ManifestKey(run, step), SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(payload))}
	dkey := dataKey(run, step)
	// Pinned, GC leaves the payload alone while the manifest is missing.
	pin := s.reg.newPin()
	pin.add(dkey)
	defer pin.release()

	// An existing checkpoint at this step: keep it if it is this payload,
	// otherwise hide it before touching its payload.
	old, err := s.readManifest(ctx, ref.Key)
	var corrupt *CorruptError
	switch {
	case err == nil && old.Version == formatVersion && old.SHA256 == ref.SHA256 && old.Bytes == ref.Bytes:
		if attrs, aerr := s.attributes(ctx, dkey); aerr == nil && attrs.Size == ref.Bytes {
			ref.Created = old.Created
			return ref, nil
		}
		fallthrough
	case err == nil || errors.As(err, &corrupt):
		if derr := s.remove(ctx, ref.Key); derr != nil && !isNotFound(derr) {
			return Ref{}, fmt.Errorf("checkpoint: save %s: remove stale manifest: %w", ref.Key, derr)
		}
	case errors.Is(err, ErrNotFound):
	default:
		return Ref{}, fmt.Errorf("checkpoint: save %s: %w", ref.Key, err)
	}

	if err := s.write(ctx, dkey, payload, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		return Ref{}, fmt.Errorf("checkpoint: save %s: write payload: %w", dkey, err)
	}
	ref.Created = s.now().UTC()
	m := manifest{
		Format: manifestKind, Version: formatVersion, Run: run, Step: step,
		Data: dataName, Bytes: ref.Bytes, SHA256: ref.SHA256, Created: ref.Created,
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Ref{}, fmt.Errorf("checkpoint: save %s: encode manifest: %w", ref.Key, err)
	}
	if err := s.write(ctx, ref.Key, append(mb, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return Ref{}, fmt.Errorf("checkpoint: save %s: write manifest: %w", ref.Key, err)
	}
	return ref, nil
}

// readManifest fetches and validates the manifest at key. A missing manifest
// wraps ErrNotFound; an unusable one is a *CorruptError.
func (s *Store) readManifest(ctx context.Context, key string) (*manifest, error) {
	b, err := s.readAll(ctx, key, 0)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("checkpoint: %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("checkpoint: read %s: %w", key, err)
	}
	return decodeManifest(key, b)
}

// decodeManifest parses and validates the manifest stored at key. Anything
// unusable is a *CorruptError naming key. A manifest it accepts is safe to
// act on: run and step match key, and for version 2 the chunk list tiles
// exactly Bytes bytes in chunks of ChunkBytes (the last may be shorter).
func decodeManifest(key string, b []byte) (*manifest, error) {
	corrupt := func(reason string, err error) error { return &CorruptError{Key: key, Reason: reason, Err: err} }
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, corrupt("manifest is not valid JSON", err)
	}
	if m.Format != manifestKind {
		return nil, corrupt(fmt.Sprintf("manifest format is %q, want %q", m.Format, manifestKind), nil)
	}
	if m.Version != formatVersion && m.Version != formatChunked {
		return nil, corrupt(fmt.Sprintf("unsupported manifest version %d (this build reads %d and %d)", m.Version, formatVersion, formatChunked), nil)
	}
	if ValidateRun(m.Run) != nil || validateStep(m.Step) != nil || ManifestKey(m.Run, m.Step) != key {
		return nil, corrupt(fmt.Sprintf("manifest names run %q step %d, which does not live at this key", m.Run, m.Step), nil)
	}
	if m.Bytes < 0 {
		return nil, corrupt(fmt.Sprintf("manifest size is %d", m.Bytes), nil)
	}
	if h, err := hex.DecodeString(m.SHA256); err != nil || len(h) != sha256.Size {
		return nil, corrupt(fmt.Sprintf("manifest sha256 %q is not a hex SHA-256", m.SHA256), nil)
	}
	if m.Version == formatVersion {
		if m.Data != dataName {
			return nil, corrupt(fmt.Sprintf("manifest names payload %q, want %q", m.Data, dataName), nil)
		}
		if m.ChunkBytes != 0 || m.ChunkHash != "" || m.Compression != "" || m.Chunks != nil {
			return nil, corrupt("version 1 manifest has version 2 chunk fields", nil)
		}
		return &m, nil
	}
	if reason := checkChunkList(&m); reason != "" {
		return nil, corrupt(reason, nil)
	}
	return &m, nil
}

// Exists reports whether the manifest of ref's checkpoint is in the bucket
// (Run and Step name it; the payload is not read). A node that was not the
// one to save a run's checkpoint asks it to learn whether it reaches the
// same bucket.
func (s *Store) Exists(ctx context.Context, ref Ref) (bool, error) {
	if err := ValidateRun(ref.Run); err != nil {
		return false, err
	}
	if err := validateStep(ref.Step); err != nil {
		return false, err
	}
	key := ManifestKey(ref.Run, ref.Step)
	ok, err := s.exists(ctx, key)
	if err != nil {
		return false, fmt.Errorf("checkpoint: %s: %w", key, err)
	}
	return ok, nil
}

// Load reads and verifies the checkpoint ref points to. A missing manifest
// gives an error wrapping ErrNotFound; anything untrustworthy a *CorruptError.
// Only Run and Step are required; Key, SHA256 and Bytes are checked if set.
func (s *Store) Load(ctx context.Context, ref Ref) ([]byte, error) {
	data, _, err := s.load(ctx, ref)
	return data, err
}

// load is Load that also returns the manifest when it could be read.
func (s *Store) load(ctx context.Context, ref Ref) ([]byte, *manifest, error) {
	if err := ValidateRun(ref.Run); err != nil {
		return nil, nil, err
	}
	if err := validateStep(ref.Step); err != nil {
		return nil, nil, err
	}
	key := ManifestKey(ref.Run, ref.Step)
	if ref.Key != "" && ref.Key != key {
		return nil, nil, fmt.Errorf("checkpoint: ref key %q does not match run %q step %d (want %q)", ref.Key, ref.Run, ref.Step, key)
	}
	m, err := s.readManifest(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if ref.SHA256 != "" && ref.SHA256 != m.SHA256 {
		return nil, m, &CorruptError{Key: key, Reason: fmt.Sprintf("manifest sha256 %s differs from the ref's %s", m.SHA256, ref.SHA256)}
	}
	if ref.Bytes != 0 && ref.Bytes != m.Bytes {
		return nil, m, &CorruptError{Key: key, Reason: fmt.Sprintf("manifest size %d differs from the ref's %d", m.Bytes, ref.Bytes)}
	}
	if m.Version == formatChunked {
		data, err := s.loadChunked(ctx, key, m)
		if err == nil {
			s.hold(ref.Run, m.Chunks)
		}
		return data, m, err
	}
	dkey := dataKey(ref.Run, ref.Step)
	var data []byte
	err = s.within(ctx, m.Bytes, func(ctx context.Context) error {
		r, err := s.bucket.NewReader(ctx, dkey, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		data, err = io.ReadAll(io.LimitReader(r, m.Bytes+1))
		return err
	})
	if isNotFound(err) {
		return nil, m, &CorruptError{Key: dkey, Reason: "payload is missing", Err: err}
	}
	if err != nil {
		return nil, m, fmt.Errorf("checkpoint: read %s: %w", dkey, err)
	}
	switch n := int64(len(data)); {
	case n < m.Bytes:
		return nil, m, &CorruptError{Key: dkey, Reason: fmt.Sprintf("payload truncated: %d bytes, manifest says %d", n, m.Bytes)}
	case n > m.Bytes:
		return nil, m, &CorruptError{Key: dkey, Reason: fmt.Sprintf("payload is longer than the %d bytes the manifest says", m.Bytes)}
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.SHA256 {
		return nil, m, &CorruptError{Key: dkey, Reason: fmt.Sprintf("payload sha256 %x, manifest says %s", sum, m.SHA256)}
	}
	return data, m, nil
}

// steps lists, ascending, the steps of run that have a manifest. A
// file:// bucket's are read from its directory (fileSteps).
func (s *Store) steps(ctx context.Context, run string) ([]int64, error) {
	if err := ValidateRun(run); err != nil {
		return nil, err
	}
	prefix := runPrefix(run)
	if err := s.readable(prefix); err != nil {
		return nil, err
	}
	if s.dir != "" {
		return s.fileSteps(prefix)
	}
	return s.steps1(ctx, prefix)
}

// fileSteps is steps1 for a file:// bucket: its step directories whose
// manifest is a file. fileblob's own listing walks every file under the
// prefix and fails, NotFound, on one deleted while it walks — an upload's
// temporary file renamed into place, as every save does —, so that a
// listing beside a save failed now and then however often it was tried.
func (s *Store) fileSteps(prefix string) ([]int64, error) {
	root := filepath.Join(s.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	entries, err := os.ReadDir(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil // (as fileblob lists a missing directory)
	case err != nil:
		return nil, fmt.Errorf("checkpoint: list %s: %w", prefix, err)
	}
	var steps []int64
	for _, e := range entries {
		if len(e.Name()) != stepDigits || !e.IsDir() {
			continue
		}
		step, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || step < 0 {
			continue
		}
		st, err := os.Stat(filepath.Join(root, e.Name(), manifestName))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A save that has not committed, or a step being deleted.
		case err != nil:
			return nil, fmt.Errorf("checkpoint: list %s: %w", prefix, err)
		case st.Mode().IsRegular():
			steps = append(steps, step)
		}
	}
	slices.Sort(steps)
	return slices.Compact(steps), nil
}

func (s *Store) steps1(ctx context.Context, prefix string) ([]int64, error) {
	var steps []int64
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := s.next(ctx, it)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list %s: %w", prefix, err)
		}
		rest, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, prefix), "/"+manifestName)
		if !ok || len(rest) != stepDigits {
			continue
		}
		step, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || step < 0 {
			continue
		}
		steps = append(steps, step)
	}
	slices.Sort(steps)
	return slices.Compact(steps), nil
}

// ref builds the Ref for run's checkpoint at step from its manifest; an
// unreadable manifest yields a Ref without SHA256 and Bytes, a vanished one
// an error wrapping ErrNotFound.
func (s *Store) ref(ctx context.Context, run string, step int64) (Ref, error) {
	ref := Ref{Run: run, Step: step, Key: ManifestKey(run, step)}
	m, err := s.readManifest(ctx, ref.Key)
	var corrupt *CorruptError
	switch {
	case err == nil:
		ref.SHA256, ref.Bytes, ref.Created = m.SHA256, m.Bytes, m.Created
	case errors.As(err, &corrupt):
	default:
		return Ref{}, err
	}
	return ref, nil
}

// At returns run's checkpoint at step from its manifest alone (one read,
// where List reads every manifest of the run): an error wrapping
// ErrNotFound when it has none, a Ref without SHA256 and Bytes when the
// manifest is unreadable; any other error is the storage's.
func (s *Store) At(ctx context.Context, run string, step int64) (Ref, error) {
	if err := ValidateRun(run); err != nil {
		return Ref{}, err
	}
	if step < 0 {
		return Ref{}, fmt.Errorf("checkpoint: run %q: step %d is negative", run, step)
	}
	return s.ref(ctx, run, step)
}

// List returns run's checkpoints (those with a manifest), oldest first.
func (s *Store) List(ctx context.Context, run string) ([]Ref, error) {
	steps, err := s.steps(ctx, run)
	if err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, len(steps))
	for _, step := range steps {
		ref, err := s.ref(ctx, run, step)
		if errors.Is(err, ErrNotFound) {
			continue // Deleted since listing.
		}
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// Latest returns run's newest checkpoint, or an error wrapping ErrNotFound.
// It does not verify the payload; use Load or LoadLatestValid for that.
func (s *Store) Latest(ctx context.Context, run string) (Ref, error) {
	steps, err := s.steps(ctx, run)
	if err != nil {
		return Ref{}, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		ref, err := s.ref(ctx, run, steps[i])
		if errors.Is(err, ErrNotFound) {
			continue
		}
		return ref, err
	}
	return Ref{}, fmt.Errorf("checkpoint: run %q: %w", run, ErrNotFound)
}

// LoadLatestValid loads run's newest checkpoint that verifies, trying newer
// ones first and reporting each one skipped as corrupt. Other errors (I/O,
// cancellation) stop the search and are returned, so a transient failure
// never silently falls back to an older checkpoint. If no checkpoint
// verifies, the error wraps ErrNotFound and skipped says why.
func (s *Store) LoadLatestValid(ctx context.Context, run string) (payload []byte, ref Ref, skipped []Skipped, err error) {
	steps, err := s.steps(ctx, run)
	if err != nil {
		return nil, Ref{}, nil, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		ref := Ref{Run: run, Step: steps[i], Key: ManifestKey(run, steps[i])}
		payload, m, err := s.load(ctx, ref)
		if m != nil {
			ref.SHA256, ref.Bytes, ref.Created = m.SHA256, m.Bytes, m.Created
		}
		var corrupt *CorruptError
		switch {
		case err == nil:
			return payload, ref, skipped, nil
		case errors.As(err, &corrupt):
			skipped = append(skipped, Skipped{Ref: ref, Reason: corrupt.Error()})
		case errors.Is(err, ErrNotFound):
			// Deleted since listing: not a candidate any more.
		default:
			return nil, Ref{}, skipped, err
		}
	}
	return nil, Ref{}, skipped, fmt.Errorf("checkpoint: run %q: no valid checkpoint (%d skipped as corrupt): %w", run, len(skipped), ErrNotFound)
}

// Delete removes the checkpoint ref points to: manifest first (so it
// disappears atomically), then the payload (version 1). A version 2
// checkpoint's chunks may be shared with other checkpoints and stay until
// [Store.GC] finds them unreferenced. Deleting a missing checkpoint is not
// an error.
func (s *Store) Delete(ctx context.Context, ref Ref) error {
	if err := ValidateRun(ref.Run); err != nil {
		return err
	}
	if err := validateStep(ref.Step); err != nil {
		return err
	}
	for _, key := range []string{ManifestKey(ref.Run, ref.Step), dataKey(ref.Run, ref.Step)} {
		if err := s.remove(ctx, key); err != nil && !isNotFound(err) {
			return fmt.Errorf("checkpoint: delete %s: %w", key, err)
		}
	}
	if s.dir != "" {
		// Only an empty directory goes (anything else is not ours to
		// delete); one that does not is no error.
		_ = os.Remove(filepath.Join(s.dir, filepath.FromSlash(ckptPrefix(ref.Run, ref.Step))))
	}
	return nil
}
