package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
)

// registry records the chunk keys that saves in flight rely on, so that GC
// never removes a chunk a save has found present but not yet committed in
// a manifest. GC takes its snapshot of the pins and starts watching under
// gate's Lock; while any GC watches, every key pinned is remembered in
// seen (released or not: its manifest may be one GC did not read), and GC
// deletes each key under Lock after checking seen, so a save either pins
// first (and GC spares the key) or finds the deletion done.
type registry struct {
	gate     sync.RWMutex // Pins are added under RLock; GC holds Lock to snapshot and to delete a key.
	mu       sync.Mutex   // Guards refs, every pin's keys, watchers and seen.
	refs     map[string]int
	watchers int             // GCs running
	seen     map[string]bool // keys pinned while watchers > 0
}

func newRegistry() *registry { return &registry{refs: map[string]int{}} }

// pin is one save's set of registered keys.
type pin struct {
	r    *registry
	keys []string
}

func (r *registry) newPin() *pin { return &pin{r: r} }

// add registers key. It waits while a GC is deciding, so once it returns,
// either GC has finished (and the caller's existence check sees its
// result) or any later GC sees the key.
func (p *pin) add(key string) {
	p.r.gate.RLock()
	p.r.mu.Lock()
	p.r.refs[key]++
	p.keys = append(p.keys, key)
	if p.r.watchers > 0 {
		p.r.seen[key] = true
	}
	p.r.mu.Unlock()
	p.r.gate.RUnlock()
}

// watch takes a GC's snapshot of the pinned keys and starts remembering
// every key pinned from now on, until unwatch.
func (r *registry) watch() map[string]bool {
	r.gate.Lock()
	defer r.gate.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers++; r.watchers == 1 {
		r.seen = map[string]bool{}
	}
	out := make(map[string]bool, len(r.refs))
	for k := range r.refs {
		out[k] = true
	}
	return out
}

// unwatch ends a GC's watch.
func (r *registry) unwatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers--; r.watchers == 0 {
		r.seen = nil
	}
}

// removeUnpinned deletes key with remove unless a save pinned it since the
// watch began, holding off new pins meanwhile; it says whether it did.
func (r *registry) removeUnpinned(key string, remove func() error) (bool, error) {
	r.gate.Lock()
	defer r.gate.Unlock()
	r.mu.Lock()
	pinned := r.seen[key] || r.refs[key] > 0
	r.mu.Unlock()
	if pinned {
		return false, nil
	}
	return true, remove()
}

// release drops the pin's keys, once its manifest is written or the save
// has failed.
func (p *pin) release() {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	for _, k := range p.keys {
		if p.r.refs[k]--; p.r.refs[k] <= 0 {
			delete(p.r.refs, k)
		}
	}
	p.keys = nil
}

// Retain deletes run's checkpoints except the newest keepLast and, if
// keepEvery > 0, those whose step is a multiple of keepEvery, and returns
// the deleted ones, oldest first. keepLast must be at least 1: Retain never
// deletes a run's newest checkpoint. Checkpoints whose manifest cannot be
// read are neither counted nor deleted (they are left for inspection).
// Retain verifies no payloads: a corrupt newest checkpoint counts like any
// other. Chunks the deleted checkpoints referenced stay until GC.
func (s *Store) Retain(ctx context.Context, run string, keepLast int, keepEvery int64) (deleted []Ref, err error) {
	return s.retain(ctx, run, math.MaxInt64, keepLast, keepEvery)
}

// RetainFrom is Retain for a run that has just saved its checkpoint at
// step newest: checkpoints above newest belong to another timeline — an
// earlier run of the name that went further, uploads a rewound run left
// behind — and are neither counted nor deleted. Retain alone would count
// them among the newest, keep them and delete the run's own. (Not
// deleted: a writer that lags, a node thawed after its replacement, must
// not take the newer checkpoints of the run that went on without it.)
func (s *Store) RetainFrom(ctx context.Context, run string, newest int64, keepLast int, keepEvery int64) (deleted []Ref, err error) {
	return s.retain(ctx, run, newest, keepLast, keepEvery)
}

func (s *Store) retain(ctx context.Context, run string, newest int64, keepLast int, keepEvery int64) (deleted []Ref, err error) {
	if keepLast < 1 {
		return nil, fmt.Errorf("checkpoint: Retain keepLast is %d, want >= 1", keepLast)
	}
	if keepEvery < 0 {
		return nil, fmt.Errorf("checkpoint: Retain keepEvery is %d, want >= 0", keepEvery)
	}
	refs, err := s.List(ctx, run)
	if err != nil {
		return nil, err
	}
	keep := make([]bool, len(refs))
	for i, kept := len(refs)-1, 0; i >= 0; i-- {
		switch r := refs[i]; {
		case r.SHA256 == "": // Unreadable manifest.
			keep[i] = true
		case r.Step > newest: // another timeline's
			keep[i] = true
		case kept < keepLast:
			keep[i] = true
			kept++
		case keepEvery > 0 && r.Step%keepEvery == 0:
			keep[i] = true
		}
	}
	for i, r := range refs {
		if keep[i] {
			continue
		}
		if err := s.Delete(ctx, r); err != nil {
			return deleted, err
		}
		deleted = append(deleted, r)
	}
	return deleted, nil
}

// GCStats describes one GC pass.
type GCStats struct {
	Manifests    int   // Manifests read.
	Chunks       int   // Chunk objects found.
	Referenced   int   // Chunk objects referenced by a manifest or a save in flight.
	Young        int   // Unreferenced objects kept because they are within the grace period.
	Deleted      int   // Chunk objects deleted.
	DeletedBytes int64 // Their stored size.
	Orphans      int   // Version 1 payloads without a manifest, deleted.
}

// GC deletes run's chunks that no manifest of run references, and version 1
// payload objects whose manifest is gone (a crashed or superseded Save).
// Objects modified within Options.GCGrace are kept.
//
// Safety:
//   - A chunk listed by any manifest of run that GC reads is never deleted.
//     Any error while reading manifests aborts GC before it deletes
//     anything, and so does a manifest that does not decode (not valid
//     JSON, or a document that is no manifest and names no chunk): which
//     chunks it named is unknown, and a manifest restored later (from the
//     sha256 a run's history records, say) would point at nothing. That
//     error is a *CorruptError naming the manifest's key; GC deletes
//     nothing of run until the manifest is restored or deleted.
//   - Saves through the same Store are safe at any time: each pins a chunk
//     key before checking whether the chunk exists and until its manifest is
//     written, and GC spares keys pinned when it began or since (a
//     manifest written after GC read the manifests names only such keys).
//     GC holds out new pins only while it deletes one key, so a save either
//     sees that deletion (and uploads the chunk again) or pins the chunk
//     first; saves never wait for a whole pass's deletions.
//   - A save by another process is protected by the grace period: the
//     chunks it uploads are young, and one it finds present but old and
//     not named by the manifest its Store last loaded or wrote it writes
//     again before relying on it, which GC, looking at a chunk's age
//     once more just before deleting it, sees. What remains is a save
//     whose rewrite falls between that look and the deletion (the chunk
//     is then missing, and a load of its checkpoint reports it corrupt),
//     or one that outlasts half the grace period. Without a grace period
//     run GC in the process that saves the run, or while nothing saves it.
func (s *Store) GC(ctx context.Context, run string) (GCStats, error) {
	var st GCStats
	if err := ValidateRun(run); err != nil {
		return st, err
	}
	cutoff := time.Now().Add(-s.opts.GCGrace)

	// Candidates: chunk objects old enough to go. Chunks written after
	// this listing are not candidates.
	type object struct {
		size int64
		mod  time.Time
	}
	candidates := map[string]object{}
	prefix := chunksPrefix(run)
	if err := s.list(ctx, prefix, func(o *blob.ListObject) error {
		if !isChunkHash(strings.TrimPrefix(o.Key, prefix)) {
			return nil // Not ours (a driver's temporary file, say).
		}
		st.Chunks++
		candidates[o.Key] = object{o.Size, o.ModTime}
		return nil
	}); err != nil {
		return st, err
	}

	referenced := s.reg.watch()
	defer s.reg.unwatch()

	// Every manifest of run, read after the pins were taken: a save that
	// committed before then is in one or the other.
	ckpt := runPrefix(run)
	var manifests []string
	payloads := map[int64]object{}
	hasManifest := map[int64]bool{}
	if err := s.list(ctx, ckpt, func(o *blob.ListObject) error {
		dir, name, ok := strings.Cut(strings.TrimPrefix(o.Key, ckpt), "/")
		if !ok || len(dir) != stepDigits {
			return nil
		}
		step, err := strconv.ParseInt(dir, 10, 64)
		if err != nil || step < 0 {
			return nil
		}
		switch name {
		case manifestName:
			manifests = append(manifests, o.Key)
			hasManifest[step] = true
		case dataName:
			payloads[step] = object{o.Size, o.ModTime}
		}
		return nil
	}); err != nil {
		return st, err
	}
	for _, key := range manifests {
		raw, err := s.readAll(ctx, key, 0)
		if isNotFound(err) {
			continue // Deleted since listing.
		}
		if err != nil {
			return st, fmt.Errorf("checkpoint: gc: read %s: %w", key, err)
		}
		st.Manifests++
		// Lenient: a manifest that fails validation still protects the
		// chunks it names. One that does not decode, or names no chunk
		// and is no valid manifest (a version 1 one names none), may have
		// named any: abort, as for a read error.
		var m manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return st, undecodable(&CorruptError{Key: key, Reason: "manifest is not valid JSON", Err: err})
		}
		if len(m.Chunks) == 0 {
			if _, err := decodeManifest(key, raw); err != nil {
				return st, undecodable(err)
			}
		}
		for _, c := range m.Chunks {
			if isChunkHash(c.Hash) {
				referenced[chunkKey(run, c.Hash)] = true
			}
		}
	}

	for key, o := range candidates {
		switch {
		case referenced[key]:
			st.Referenced++
			continue
		case s.opts.GCGrace > 0 && !o.mod.Before(cutoff):
			st.Young++
			continue
		case s.opts.GCGrace > 0:
			// Look again: a save in another process that reuses the chunk
			// writes it again first (putChunk), and its manifest may be
			// one this pass did not read.
			a, err := s.attributes(ctx, key)
			switch {
			case isNotFound(err):
				continue // Deleted since the listing.
			case err != nil:
				return st, fmt.Errorf("checkpoint: gc: stat %s: %w", key, err)
			case !a.ModTime.Before(cutoff):
				st.Young++
				continue
			}
		}
		deleted, err := s.reg.removeUnpinned(key, func() error { return s.remove(ctx, key) })
		if err != nil && !isNotFound(err) {
			return st, fmt.Errorf("checkpoint: gc: delete %s: %w", key, err)
		}
		if !deleted {
			st.Referenced++ // pinned by a save since the listing
			continue
		}
		st.Deleted++
		st.DeletedBytes += o.size
	}
	for step, o := range payloads {
		if hasManifest[step] || referenced[dataKey(run, step)] {
			continue
		}
		if s.opts.GCGrace > 0 && !o.mod.Before(cutoff) {
			st.Young++
			continue
		}
		key := dataKey(run, step)
		deleted, err := s.reg.removeUnpinned(key, func() error { return s.remove(ctx, key) })
		if err != nil && !isNotFound(err) {
			return st, fmt.Errorf("checkpoint: gc: delete %s: %w", key, err)
		}
		if deleted {
			st.Orphans++
		}
	}
	return st, nil
}

// undecodable is GC's error for a manifest that does not decode (err, a
// *CorruptError naming its key): GC deleted nothing.
func undecodable(err error) error {
	return fmt.Errorf("checkpoint: gc: %w (no chunk deleted: which ones it named is unknown)", err)
}

// list calls f for every object under prefix.
func (s *Store) list(ctx context.Context, prefix string, f func(*blob.ListObject) error) error {
	if err := s.readable(prefix); err != nil {
		return err
	}
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := s.next(ctx, it)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checkpoint: list %s: %w", prefix, err)
		}
		if err := f(o); err != nil {
			return err
		}
	}
}

// readable reports a directory under a file:// bucket's prefix that this
// process cannot read: gocloud's fileblob listing skips it without a
// word, so a listing would look complete without it — ls and verify
// would miss checkpoints and GC take an older one for the newest and
// delete the real newest's chunks. (Other drivers report their errors.)
func (s *Store) readable(prefix string) error {
	if s.dir == "" {
		return nil
	}
	// The prefix's directory: "runs/x/ckpt/" or "runs/x/chunks/".
	root := filepath.Join(s.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	walk := s.walk
	if walk == nil {
		walk = filepath.WalkDir
	}
	err := walk(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpoint: list %s: %w (a listing would leave it out)", prefix, err)
	}
	return nil
}
