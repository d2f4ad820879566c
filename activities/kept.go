package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
)

// An external job's checkpoints are directories its rank 0 writes and
// this node uploads (supervision.upload). When the bucket refuses one, the
// script has gone on: the directory will be overwritten by its next
// checkpoint, and the steps since the run's last stored checkpoint live
// only in the processes. Asked to (spec.ExternalInput.KeepRefused), the
// node keeps the refused directory's packed bytes on its disk — the last
// refused one per run — so that the run can stop the world and hold,
// losing nothing, until the bucket takes it (StoreKept).
//
// A kept checkpoint is one file, <work dir>/kept/<run>/step-<step>-<sha256
// of the bytes>.pack, written to a temporary name and renamed: a crash
// leaves the previous one or the new one, and a file whose bytes no
// longer match its name is refused rather than stored.

// keptDir is where the node keeps run's refused checkpoint.
func (n *Node) keptDir(run string) string {
	return filepath.Join(n.workDir(), "kept", safeName(run))
}

// keepRefused keeps payload, run's checkpoint directory at step that the
// bucket refused, in place of any it kept before.
func (n *Node) keepRefused(run string, step int64, payload []byte) error {
	dir := n.keptDir(run)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("keep the refused checkpoint: %w", err)
	}
	sum := sha256.Sum256(payload)
	name := fmt.Sprintf("step-%012d-%x.pack", step, sum)
	tmp, err := os.CreateTemp(dir, ".keeping-*")
	if err != nil {
		return fmt.Errorf("keep the refused checkpoint: %w", err)
	}
	_, err = tmp.Write(payload)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("keep the refused checkpoint at step %d in %s: %w", step, dir, err)
	}
	n.dropKept(run, func(s int64, file string) bool { return file != name })
	return nil
}

// keptFile is a kept checkpoint's file name parsed: its step and the
// SHA-256 of its bytes (ok false: not one).
func keptFile(name string) (step int64, sum string, ok bool) {
	rest, ok := strings.CutPrefix(name, "step-")
	if !ok {
		return 0, "", false
	}
	rest, ok = strings.CutSuffix(rest, ".pack")
	if !ok {
		return 0, "", false
	}
	at, sum, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, "", false
	}
	step, err := strconv.ParseInt(at, 10, 64)
	return step, sum, err == nil
}

// dropKept removes run's kept checkpoints that drop says to (by step and
// file name), and temporary files left by a crash.
func (n *Node) dropKept(run string, drop func(step int64, file string) bool) {
	dir := n.keptDir(run)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		step, _, ok := keptFile(e.Name())
		if !ok || drop(step, e.Name()) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// keptBefore drops run's kept checkpoints before step: a world that
// restores a checkpoint at step has no use for them.
func (n *Node) keptBefore(run string, step int64) {
	n.dropKept(run, func(s int64, _ string) bool { return s < step })
}

// loadKept reads run's newest kept checkpoint at step or later and
// checks its bytes against the hash in its name; path is its file.
// (Later: the world's rank 0 may have committed another, refused too,
// before its node saw the run stop it.)
func (n *Node) loadKept(run string, step int64) (payload []byte, at int64, path string, err error) {
	dir := n.keptDir(run)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, "", err
	}
	best, name, sum, older := int64(-1), "", "", int64(-1)
	for _, e := range entries {
		s, h, ok := keptFile(e.Name())
		switch {
		case !ok:
		case s >= step && s > best:
			best, name, sum = s, e.Name(), h
		case s < step:
			older = max(older, s)
		}
	}
	if name == "" {
		if older >= 0 {
			return nil, 0, "", fmt.Errorf("none at step %d or later in %s (it keeps the one at step %d)", step, dir, older)
		}
		return nil, 0, "", fmt.Errorf("none in %s", dir)
	}
	path = filepath.Join(dir, name)
	payload, err = readKeptFile(path, sum)
	return payload, best, path, err
}

// ReadKeptFile reads a checkpoint a node kept when the bucket refused it
// (<work dir>/kept/<run>/step-<step>-<sha256>.pack, a file StoreKept
// leaves when the bucket refuses it again) and checks its bytes against
// the hash in its name: its step and its payload, as the node would store
// them (`cann-train checkpoint store-kept`).
func ReadKeptFile(path string) (step int64, payload []byte, err error) {
	step, sum, ok := keptFile(filepath.Base(path))
	if !ok || step <= 0 {
		return 0, nil, fmt.Errorf("%s: not a kept checkpoint (a node names one step-<step>-<sha256>.pack)", path)
	}
	if payload, err = readKeptFile(path, sum); err != nil {
		return 0, nil, err
	}
	if _, err := launch.CheckPacked(payload); err != nil {
		return 0, nil, fmt.Errorf("%s: not an external job's checkpoint directory: %w", path, err)
	}
	return step, payload, nil
}

// readKeptFile reads a kept checkpoint's file and checks its bytes against
// sum, the SHA-256 its name carries.
func readKeptFile(path, sum string) ([]byte, error) {
	payload, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if got := sha256.Sum256(payload); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%s: its bytes do not match their hash (sha256 %x, named %s)", path, got, sum)
	}
	return payload, nil
}

// StoreKept is ActivityStoreKept: it stores the checkpoint directory at
// in.Step (or the newest it kept since) that this node kept for run in.RunID when the bucket refused its
// upload (keepRefused), then drops it. A bucket that refuses it again is
// the result's Failed (the node keeps it); no such checkpoint kept — a
// wiped disk, another host behind the node's name — is a NothingKept
// error. It heartbeats while it stores.
func (n *Node) StoreKept(ctx context.Context, in spec.StoreKeptInput) (spec.StoreKeptResult, error) {
	if in.RunID == "" || in.Spec.Name == "" || in.Step <= 0 {
		err := fmt.Errorf("store kept: want a run, its spec and a step (run %q, name %q, step %d)", in.RunID, in.Spec.Name, in.Step)
		return spec.StoreKeptResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "BadStoreKeptInput", err)
	}
	hb := startHeartbeater(ctx, spec.ChunkProgress{Step: in.Step}, activity.GetInfo(ctx).HeartbeatTimeout, false)
	defer hb.stop()
	payload, step, path, err := n.loadKept(in.RunID, in.Step)
	if err != nil {
		msg := fmt.Sprintf("node %s keeps no checkpoint of run %s at step %d to store: %v", n.ID, in.RunID, in.Step, err)
		return spec.StoreKeptResult{}, temporal.NewNonRetryableApplicationError(msg, spec.ErrTypeNothingKept, err)
	}
	log := n.Logger.With(zap.String("run", in.RunID), zap.Int64("step", step))
	url := n.bucketURL(in.Spec)
	refused := func(err error) spec.StoreKeptResult {
		log.Warn("the bucket refused the kept checkpoint again; the node keeps it", zap.String("bucket", checkpoint.Redact(url)), zap.Error(err))
		return spec.StoreKeptResult{Failed: &spec.CheckpointFailure{Step: step, Error: err.Error()}, Kept: path}
	}
	store, err := n.store(ctx, url)
	if err != nil {
		return refused(err), nil
	}
	ref, stats, err := store.SaveIncremental(ctx, in.Spec.Name, step, payload)
	if err != nil {
		if ctx.Err() != nil {
			return spec.StoreKeptResult{}, err
		}
		return refused(n.storeError(url, step, err)), nil
	}
	n.recordJob(ctx, store, in.Spec, in.Session)
	n.retain(ctx, store, url, in.Spec, ref.Step, log)
	n.dropKept(in.RunID, func(s int64, _ string) bool { return s <= step })
	out := FromStoreRef(url, ref)
	log.Info("kept checkpoint stored", zap.String("key", out.Key), zap.Int("chunks", stats.Chunks),
		zap.Int("chunks_written", stats.ChunksWritten))
	return spec.StoreKeptResult{Checkpoint: &out}, nil
}
