// Package checkpoint stores full training-state snapshots (opaque byte
// payloads, in practice engine.State encodings) in any gocloud.dev/blob
// bucket: mem://, file://, s3://, gs://, azblob://.
//
// # Layout and contract
//
// A checkpoint of run R at global step S is two objects:
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
// # Non-goals
//
//   - One writer per run: concurrent Saves of the same run and step from
//     different processes are not coordinated.
//   - No incremental or asynchronous checkpoints yet. The manifest carries a
//     format version and names its payload object, so later versions can add
//     delta payloads or background upload without changing [Ref] or the
//     key layout.
//   - No retention policy beyond [Store.Delete]; pruning is the caller's call.
//   - The payload is opaque: this package never decodes it.
package checkpoint
