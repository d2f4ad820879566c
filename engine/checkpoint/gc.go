package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
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
// other (a caller that must keep one that loads plans with [RetentionPlan],
// loads the kept ones, and deletes the others itself). Chunks the deleted checkpoints referenced stay until GC.
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
	keep, err := RetentionPlan(refs, newest, keepLast, keepEvery)
	if err != nil {
		return nil, err
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

// RetentionPlan says which of refs — a run's checkpoints, oldest first, as
// [Store.List] returns them — [Store.RetainFrom] with these arguments keeps
// (keep[i] for refs[i]): the newest keepLast at or below step newest, those
// whose step is a multiple of keepEvery (if > 0), every one above newest
// (another timeline's) and every one whose manifest cannot be read. It
// deletes nothing: a caller can check the kept ones before deleting the
// others.
func RetentionPlan(refs []Ref, newest int64, keepLast int, keepEvery int64) (keep []bool, err error) {
	if keepLast < 1 {
		return nil, fmt.Errorf("checkpoint: Retain keepLast is %d, want >= 1", keepLast)
	}
	if keepEvery < 0 {
		return nil, fmt.Errorf("checkpoint: Retain keepEvery is %d, want >= 0", keepEvery)
	}
	keep = make([]bool, len(refs))
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
	return keep, nil
}

// ManifestError says why the manifest of ref's checkpoint (Run and Step)
// does not read: nil when it reads, a *CorruptError (its reason) when it
// does not decode or validate, an error wrapping ErrNotFound when it is
// gone, and any other error the storage's. [Store.List] lists an
// unreadable manifest as a Ref without SHA256; this says why.
func (s *Store) ManifestError(ctx context.Context, ref Ref) error {
	if err := ValidateRun(ref.Run); err != nil {
		return err
	}
	if err := validateStep(ref.Step); err != nil {
		return err
	}
	_, err := s.readManifest(ctx, ManifestKey(ref.Run, ref.Step))
	return err
}

// GCStats describes one GC pass.
type GCStats struct {
	Manifests    int   `json:"manifests"`     // Manifests read.
	Chunks       int   `json:"chunks"`        // Chunk objects found.
	Referenced   int   `json:"referenced"`    // Chunk objects referenced by a manifest or a save in flight.
	Young        int   `json:"young"`         // Unreferenced objects kept because they are within the grace period.
	Deleted      int   `json:"deleted"`       // Chunk objects deleted.
	DeletedBytes int64 `json:"deleted_bytes"` // Their stored size.
	Orphans      int   `json:"orphans"`       // Version 1 payloads without a manifest, deleted.
	// Leftovers deleted: what writers killed mid-write left behind — their
	// temporary files, a file:// bucket's metadata sidecars of objects
	// that are gone and its empty step directories —, once older than
	// the grace period and minLeftoverAge.
	Leftovers int `json:"leftovers"`
}

// minLeftoverAge is the least time since its last change that GC leaves a
// writer's temporary file (or a file:// bucket's empty step directory) for,
// whatever the grace period: a live write changes its file as it goes, and
// a write that stalls is given up within its request timeout (a minute by
// default, plus a second per MiB).
const minLeftoverAge = 10 * time.Minute

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
//   - What writers killed mid-write left — temporary files named after a
//     chunk, a manifest or a version 1 payload ("<name>.<hex>.tmp",
//     "<name>.tmp…"), and in a file:// bucket metadata sidecars whose
//     object is gone and empty step directories — goes once unchanged for
//     the grace period and for minLeftoverAge (10 minutes) both: a live
//     write changes its temporary file as it goes. (An empty step
//     directory that old is removed even as a writer that has just found
//     it is about to create its file there, which then fails: a window of
//     microseconds, for a step directory left empty that long.)
func (s *Store) GC(ctx context.Context, run string) (GCStats, error) {
	return s.gc(ctx, run, gcPass{})
}

// GCPreview is what GC would delete were run's checkpoints at the steps
// without deleted first (those a retention would delete), deleting
// nothing: the counts of Deleted, DeletedBytes, Orphans and Leftovers are
// what GC would delete now. It refuses what GC refuses, with the same
// errors. (A save in flight, or GC's own second look at a chunk's age,
// may make the real pass delete less.)
func (s *Store) GCPreview(ctx context.Context, run string, without []int64) (GCStats, error) {
	p := gcPass{dry: true, without: map[int64]bool{}}
	for _, step := range without {
		p.without[step] = true
	}
	return s.gc(ctx, run, p)
}

// CheckGC reads what GC reads — the listings of run's chunks and
// checkpoints, every manifest — and returns the error GC would return
// before it deletes anything (a *CorruptError naming a manifest that does
// not decode, a listing or read that fails), deleting nothing. A caller
// that deletes checkpoints before GC (retention) checks first, so that a
// GC that would refuse does not leave the work half done.
func (s *Store) CheckGC(ctx context.Context, run string) error {
	_, err := s.gc(ctx, run, gcPass{check: true})
	return err
}

// gcPass says how far a gc goes: check stops it once the manifests are
// read, before it deletes anything (CheckGC); dry counts what it would
// delete, taking the checkpoints at the steps without as deleted
// (GCPreview).
type gcPass struct {
	check, dry bool
	without    map[int64]bool
}

// gc is GC, CheckGC or GCPreview, as p says.
func (s *Store) gc(ctx context.Context, run string, p gcPass) (GCStats, error) {
	var st GCStats
	if err := ValidateRun(run); err != nil {
		return st, err
	}
	cutoff := time.Now().Add(-s.opts.GCGrace)

	// Candidates: chunk objects old enough to go. Chunks written after
	// this listing are not candidates.
	candidates := map[string]gcObject{}
	temps := map[string]gcObject{} // writers' temporary files
	prefix := chunksPrefix(run)
	if err := s.list(ctx, prefix, func(o *blob.ListObject) error {
		name := strings.TrimPrefix(o.Key, prefix)
		if isChunkHash(tempBase(name)) {
			temps[o.Key] = gcObject{o.Size, o.ModTime}
			return nil
		}
		if !isChunkHash(name) {
			return nil // Not ours.
		}
		st.Chunks++
		candidates[o.Key] = gcObject{o.Size, o.ModTime}
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
	payloads := map[int64]gcObject{}
	gone := func(step int64) bool { return p.without[step] } // deleted first, in a preview
	hasManifest := map[int64]bool{}
	if err := s.list(ctx, ckpt, func(o *blob.ListObject) error {
		dir, name, ok := strings.Cut(strings.TrimPrefix(o.Key, ckpt), "/")
		if !ok || len(dir) != stepDigits {
			return nil
		}
		step, err := strconv.ParseInt(dir, 10, 64)
		if err != nil || step < 0 || gone(step) {
			return nil
		}
		switch name {
		case manifestName:
			manifests = append(manifests, o.Key)
			hasManifest[step] = true
		case dataName:
			payloads[step] = gcObject{o.Size, o.ModTime}
		default:
			if b := tempBase(name); b == manifestName || b == dataName {
				temps[o.Key] = gcObject{o.Size, o.ModTime}
			}
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
	if p.check {
		return st, nil
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
		if p.dry {
			st.Deleted++
			st.DeletedBytes += o.size
			continue
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
		if p.dry {
			st.Orphans++
			continue
		}
		deleted, err := s.reg.removeUnpinned(key, func() error { return s.remove(ctx, key) })
		if err != nil && !isNotFound(err) {
			return st, fmt.Errorf("checkpoint: gc: delete %s: %w", key, err)
		}
		if deleted {
			st.Orphans++
		}
	}
	n, err := s.removeLeftovers(ctx, run, temps, cutoff, p.dry)
	st.Leftovers = n
	return st, err
}

// tempBase is the name of the object a writer's temporary file stands
// for — fileblob's "<name>.<hex>.tmp" next to the object, or any
// "<name>.tmp…" —, or "" when name is no temporary file's.
func tempBase(name string) string {
	i := strings.Index(name, ".tmp")
	if i <= 0 {
		return ""
	}
	base := name[:i]
	if j := strings.LastIndexByte(base, '.'); j >= 0 && name[i:] == ".tmp" && isHex(base[j+1:]) {
		base = base[:j]
	}
	return base
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// removeLeftovers deletes what writers killed mid-write left of run: the
// temporary files temps (listed by GC), and in a file:// bucket the
// metadata sidecars of objects that are gone and the step directories
// left empty. Only what has not changed since before cutoff, and for at
// least minLeftoverAge, goes: a live writer's temporary file changes as
// it is written, and the directory it is about to write in was created or
// changed when it started. It returns how many it deleted (dry: would
// delete, deleting none; a step directory only a preview's deletions
// would empty is not counted).
func (s *Store) removeLeftovers(ctx context.Context, run string, temps map[string]gcObject, cutoff time.Time, dry bool) (int, error) {
	remove := func(key string) error {
		if dry {
			return nil
		}
		return s.remove(ctx, key)
	}
	removeFile := os.Remove
	if dry {
		removeFile = func(path string) error {
			if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
				return err // (a sidecar whose object is gone)
			}
			if names, err := os.ReadDir(path); err != nil || len(names) > 0 {
				return errors.New("not empty")
			}
			return nil
		}
	}
	if floor := time.Now().Add(-minLeftoverAge); floor.Before(cutoff) {
		cutoff = floor
	}
	old := func(mod time.Time) bool { return mod.Before(cutoff) }
	n := 0
	for key, o := range temps {
		if !old(o.mod) {
			continue
		}
		// Look again: a live write has changed it since the listing.
		a, err := s.attributes(ctx, key)
		switch {
		case isNotFound(err):
			continue // Renamed into place, or removed, since the listing.
		case err != nil:
			return n, fmt.Errorf("checkpoint: gc: stat %s: %w", key, err)
		case !old(a.ModTime):
			continue
		}
		if err := remove(key); err != nil && !isNotFound(err) {
			return n, fmt.Errorf("checkpoint: gc: delete %s: %w", key, err)
		}
		n++
	}
	if s.dir == "" {
		return n, nil
	}
	for _, prefix := range []string{chunksPrefix(run), runPrefix(run)} {
		root := filepath.Join(s.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
		var dirs []string // step directories, to remove if empty
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil
			case err != nil:
				return err
			case d.IsDir():
				if path != root && prefix == runPrefix(run) && len(d.Name()) == stepDigits && isDigits(d.Name()) {
					dirs = append(dirs, path)
				}
				return nil
			}
			object, ok := strings.CutSuffix(path, attrsSuffix)
			if !ok {
				return nil
			}
			if _, err := os.Lstat(object); !errors.Is(err, fs.ErrNotExist) {
				return nil // Its object is there (or cannot be looked at).
			}
			if fi, err := d.Info(); err != nil || !old(fi.ModTime()) {
				return nil
			}
			if err := removeFile(path); err == nil {
				n++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("checkpoint: gc: walk %s: %w", root, err)
		}
		for _, dir := range dirs {
			fi, err := os.Stat(dir)
			if err != nil || !old(fi.ModTime()) {
				continue
			}
			// Only an empty directory goes.
			if err := removeFile(dir); err == nil {
				n++
			}
		}
	}
	return n, nil
}

// attrsSuffix ends the name of a file:// bucket's metadata sidecar
// (fileblob's "<object>.attrs").
const attrsSuffix = ".attrs"

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// gcObject is an object GC listed: its size and when it last changed.
type gcObject struct {
	size int64
	mod  time.Time
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
