// Package checkpoint stores full training-state snapshots (opaque byte
// payloads, in practice engine.State encodings) in any gocloud.dev/blob
// bucket: mem://, file://, s3://, gs://, azblob://.
//
// # Layout and contract
//
// A checkpoint of run R at global step S written by [Store.Save] (format
// version 1) is two objects:
//
//	runs/R/ckpt/SSSSSSSSSSSS/state.bin      the payload
//	runs/R/ckpt/SSSSSSSSSSSS/manifest.json  run, step, size, SHA-256, time, format version
//
// where SSSSSSSSSSSS is S zero-padded to 12 digits, so keys sort by step.
// [Store.Save] writes the payload first and the manifest last, and a
// checkpoint exists only once its manifest exists: a crash or a failed write
// in between leaves an invisible orphan payload, never a visible half
// checkpoint. [Store.Load] verifies the payload's size and SHA-256 against
// the manifest (and against the [Ref], if it carries them) and reports any
// mismatch, truncation, missing payload or unreadable manifest as a
// [*CorruptError] naming the offending key. Transient I/O errors are
// returned as they are, never disguised as corruption, so callers can retry.
// [Store.LoadLatestValid] walks from the newest checkpoint to the oldest,
// skipping (and reporting) corrupt ones.
//
// A [Ref] is small, JSON-serialisable and self-sufficient, so it can cross a
// Temporal activity boundary and be handed to another process.
//
// Save is idempotent: saving the same payload for the same run and step
// again (an activity retry) is a no-op that returns the same Ref. Saving a
// different payload for an existing step first removes the old manifest, so
// readers never see a manifest paired with the wrong payload.
//
// Run names are restricted to [A-Za-z0-9._-], starting with a letter or a
// digit, at most 128 bytes and without "..": see [ValidateRun]. They are
// rejected, not rewritten, so two runs can never collide on one prefix.
//
// # Format version 2: incremental, content-addressed chunks
//
// [Store.SaveAsync] and [Store.SaveIncremental] write version 2: the payload
// is cut into fixed-size chunks ([Options].ChunkBytes, 1 MiB by default, a
// multiple of 4 so that chunk boundaries fall on float32 boundaries of an
// engine.State), and each chunk is stored, zstd-compressed (SpeedFastest),
// under the xxh3-128 hash of its uncompressed bytes:
//
//	runs/R/chunks/HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHH   one chunk (32 hex digits)
//	runs/R/ckpt/SSSSSSSSSSSS/manifest.json          as above, plus chunk size,
//	                                                hash and compression names and
//	                                                the chunk list (hash, size)
//
// Chunks are per run, not shared between runs: GC of a run needs only that
// run's manifests, and a manifest can only ever reference its own run's
// chunks. A chunk is uploaded only if its key does not exist yet (an
// existence check, then a write with WriterOptions.IfNotExist; drivers
// without conditional writes fall back to the check alone, harmless for
// content-addressed objects), so chunks that did not change since an
// earlier checkpoint (frozen layers, untouched optimizer slices, repeated
// content) are not written again. The manifest is written last, with
// IfNotExist, and is the commit point; the Ref and its whole-payload SHA-256
// mean the same as in version 1. Load verifies every chunk's size and
// xxh3-128 and then the SHA-256; a missing, undecodable or mismatching chunk
// is a [*CorruptError] naming the chunk's key. A chunk Load found corrupt is
// rewritten, not reused, by the Store's next save of that content. Save keeps
// writing version 1 (one object); Load, List, Latest, LoadLatestValid,
// Delete, Retain and GC handle both versions.
//
// Dense optimizer steps change every chunk, so they gain nothing from
// deduplication; what makes checkpoints cheap for training is the
// asynchronous save. [Store.SaveAsync] only copies the payload into a staging
// buffer (reused across saves of the same size; at most [Options].MaxPending
// exist) and returns a [Pending]. Hashing, compression and upload run in the
// background with [Options].Concurrency workers, overlapped with the
// payload's SHA-256; [Pending.Wait] returns the Ref once the manifest is
// written. Until then the checkpoint does not exist.
//
// # Retention and garbage collection
//
// [Store.Retain] deletes all but the newest keepLast checkpoints and those
// whose step is a multiple of keepEvery. Deleting a version 2 checkpoint
// removes only its manifest (and, in a file:// bucket opened by [Open], the
// step directory it leaves empty); [Store.GC] then deletes the run's chunks that no
// manifest references, version 1 payloads left without a manifest, and what
// writers killed mid-write left (temporary files, and in a file:// bucket
// metadata sidecars of objects that are gone and empty step directories). GC
// never deletes a chunk named by a manifest it reads, aborts on any read
// error or manifest that does not decode ([Store.CheckGC] finds those first,
// deleting nothing), and keeps objects younger than [Options].GCGrace (1 h by
// default). [RetentionPlan] says what Retain would keep, so that a caller can
// check the kept checkpoints load before deleting the others. A file:// bucket
// opened with [Options].MustExist is not created when missing ([ErrNoBucket]).
// Saves in flight through the same Store pin the chunks they rely on before
// checking that they exist, and GC spares chunks pinned when it began or
// since, holding off new pins only while it deletes one chunk, so GC may run
// at any time alongside the Store's own saves without stalling them. A save in
// another process is protected by the grace period: it writes again an
// existing chunk it reuses that is older than half the grace and not named
// by the manifest its Store last loaded or wrote, and GC looks at a chunk's
// age once more just before deleting it (see [Store.GC] for the narrow race
// that is left). With no grace period, run GC in the process that saves the
// run, or while nothing saves it.
//
// # Non-goals
//
//   - One writer per run: concurrent saves of the same run and step from
//     different processes are not coordinated (the manifest's conditional
//     write turns the race into an error on most drivers; fileblob's check is
//     not atomic).
//   - No delta encoding inside chunks and no cross-run deduplication.
//   - The payload is opaque: this package never decodes it. Chunk alignment
//     relies only on engine.State's 4-byte granularity.
package checkpoint
