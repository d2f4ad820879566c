package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
)

// TestCheckpointGC: gc keeps the newest checkpoints and the multiples of
// --keep-every, deletes the rest and exactly the chunks only they used;
// what is left still verifies.
func TestCheckpointGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + dir
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	// Six checkpoints of 1 MiB; each changes one quarter of the previous,
	// so consecutive ones share most chunks.
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	for step := int64(100); step <= 600; step += 100 {
		q := int(step/100) % 4 * len(payload) / 4
		for i := q; i < q+len(payload)/4; i++ {
			payload[i] = byte(rng.Uint32())
		}
		if _, _, err := store.SaveIncremental(ctx, "gc-run", step, payload); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	chunks := func() int {
		ents, err := os.ReadDir(filepath.Join(dir, "runs", "gc-run", "chunks"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".attrs") { // fileblob's metadata sidecars
				n++
			}
		}
		return n
	}
	before := chunks()
	// The chunks were written three hours ago, as far as GC can tell.
	ago := time.Now().Add(-3 * time.Hour)
	if err := filepath.WalkDir(filepath.Join(dir, "runs", "gc-run", "chunks"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, ago, ago)
	}); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		cmd.SetArgs(append(args, "--url", url, "--address", "127.0.0.1:1"))
		err := cmd.Execute()
		return out.String(), err
	}
	if _, err := run("checkpoint", "gc", "gc-run", "--keep-last", "0"); err == nil {
		t.Error("--keep-last 0 accepted")
	}
	// No Temporal here: --grace 0 is refused (it cannot be told whether
	// the run still saves), and so is any grace under minLiveGrace; the
	// default grace collects the old chunks.
	if _, err := run("checkpoint", "gc", "gc-run", "--grace", "0"); err == nil || !strings.Contains(err.Error(), "--grace 0: could not ask Temporal") {
		t.Errorf("--grace 0 without Temporal: %v; want it refused", err)
	}
	type result struct {
		Deleted []checkpoint.Ref   `json:"deleted_checkpoints"`
		Kept    int                `json:"kept_checkpoints"`
		Chunks  checkpoint.GCStats `json:"chunks"`
		DryRun  bool               `json:"dry_run"`
	}
	// --dry-run says what the pass below deletes, and deletes nothing.
	text, err := run("checkpoint", "gc", "gc-run", "--keep-last", "2", "--keep-every", "200", "--dry-run")
	if err != nil || !strings.Contains(text, "would delete  step 100  ") || !strings.Contains(text, "would delete  step 300  ") ||
		!strings.Contains(text, "dry run, nothing deleted: would keep 4 checkpoint(s), delete 2;") {
		t.Errorf("gc --dry-run: %v\n%s", err, text)
	}
	out, err := run("checkpoint", "gc", "gc-run", "--keep-last", "2", "--keep-every", "200", "--dry-run", "-o", "json")
	var dry result
	if err != nil || json.Unmarshal([]byte(out), &dry) != nil || !dry.DryRun {
		t.Fatalf("gc --dry-run -o json: %v\n%s", err, out)
	}
	if n, ls := chunks(), mustRun(t, run, "checkpoint", "ls", "gc-run"); n != before || strings.Count(ls, "\n") != 7 { // header + 6
		t.Fatalf("gc --dry-run deleted: %d chunks of %d left, ls:\n%s", n, before, ls)
	}
	out, err = run("checkpoint", "gc", "gc-run", "--keep-last", "2", "--keep-every", "200", "-o", "json")
	if err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	var res result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.DryRun || fmt.Sprint(res.Deleted) != fmt.Sprint(dry.Deleted) || res.Chunks != dry.Chunks {
		t.Errorf("gc deleted %v, chunks %+v; its --dry-run said %v, %+v", res.Deleted, res.Chunks, dry.Deleted, dry.Chunks)
	}
	var steps []int64
	for _, r := range res.Deleted {
		steps = append(steps, r.Step)
	}
	// Kept: 500, 600 (newest two), 200 and 400 (multiples of 200).
	if len(steps) != 2 || steps[0] != 100 || steps[1] != 300 || res.Kept != 4 {
		t.Fatalf("deleted steps %v, kept %d; want [100 300], 4", steps, res.Kept)
	}
	if res.Chunks.Deleted == 0 || chunks() != before-res.Chunks.Deleted {
		t.Errorf("chunks: %d before, %d after, GC says %+v", before, chunks(), res.Chunks)
	}
	ls, err := run("checkpoint", "ls", "gc-run")
	if err != nil || strings.Count(ls, "\n") != 5 { // header + 4
		t.Errorf("ls after gc: %v\n%s", err, ls)
	}
	// The survivors load (their chunks are all there) and hash right.
	store, err = checkpoint.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	refs, err := store.List(ctx, "gc-run")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if _, err := store.Load(ctx, r); err != nil {
			t.Errorf("step %d after gc: %v", r.Step, err)
		}
		if r.Created.IsZero() || !strings.Contains(ls, r.Created.UTC().Format(time.DateTime)) {
			t.Errorf("ls does not say when step %d was written (%v):\n%s", r.Step, r.Created, ls)
		}
	}
	// A second pass finds nothing more to delete.
	out, err = run("checkpoint", "gc", "gc-run", "--keep-last", "2", "--keep-every", "200")
	if err != nil || !strings.Contains(out, "deleted 0;") || !strings.Contains(out, " 0 deleted") {
		t.Errorf("second gc: %v\n%s", err, out)
	}
}

// mustRun is run(args...)'s output, failing t on its error.
func mustRun(t *testing.T, run func(...string) (string, error), args ...string) string {
	t.Helper()
	out, err := run(args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// TestCheckpointGCAsksTemporalOnce: `checkpoint gc RUN --grace 0` without
// --url asks Temporal twice — where the run's bucket is, whether the run
// still runs — over one connection: a Temporal that accepts but never
// answers costs one wait of a few seconds, not one per question, and
// --grace 0 is then refused.
func TestCheckpointGCAsksTemporalOnce(t *testing.T) {
	t.Setenv("CANN_TRAIN_HOME", t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		var held []net.Conn // open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held = append(held, c)
		}
	}()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	cmd.SetArgs([]string{"checkpoint", "gc", "gone-run", "--grace", "0", "--address", ln.Addr().String()})
	start := time.Now()
	err = cmd.Execute()
	took := time.Since(start)
	// Unanswered, --grace 0 is refused (fail closed: a live run's save in
	// flight would lose chunks), saying Temporal did not answer.
	if err == nil || !strings.Contains(err.Error(), "--grace 0: could not ask Temporal whether run/gone-run still runs") {
		t.Fatalf("gc: %v, want --grace 0 refused as Temporal did not answer\n%s", err, errb.String())
	}
	if took > askTimeout+askTimeout/2 {
		t.Errorf("gc took %v with a Temporal that never answers: one wait is %v", took, askTimeout)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to Temporal; want one for both questions", n)
	}
	t.Logf("%v, %d connection(s)", took.Round(time.Millisecond), conns.Load())
}

// fileStore is a checkpoint store in a directory of its own, closed when
// the test ends, and its URL.
func fileStore(t *testing.T) (string, *checkpoint.Store) {
	t.Helper()
	url := "file://" + t.TempDir()
	store, err := checkpoint.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return url, store
}

// TestCheckpointVerifyExternal: verify checks an external job's
// checkpoints as checkpoint directories (their files inside the payload),
// not as states of the built-in engine (which called every one corrupt),
// and still names one that does not unpack.
func TestCheckpointVerifyExternal(t *testing.T) {
	ctx := context.Background()
	url, store := fileStore(t)
	packed := packedDir(t)
	if _, _, err := store.SaveIncremental(ctx, "ext", 25, packed); err != nil {
		t.Fatal(err)
	}
	verify := func() (string, error) {
		var out, errb bytes.Buffer
		cmd := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		cmd.SetArgs([]string{"checkpoint", "verify", "ext", "--url", url, "--address", "127.0.0.1:1"})
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := verify(); err != nil || !strings.HasPrefix(out, "ok       step 25 ") {
		t.Fatalf("verify of an external job's checkpoint: %v\n%s", err, out)
	}
	// A header whose file would land outside the directory.
	bad := bytes.Replace(packed, []byte(`"model.pt"`), []byte(`"../el.pt"`), 1)
	if bytes.Equal(bad, packed) {
		t.Fatal("the pack's header does not name the file as expected")
	}
	if _, _, err := store.SaveIncremental(ctx, "ext", 50, bad); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(); err == nil || !strings.Contains(out, "CORRUPT  step 50 ") || !strings.Contains(out, `checkpoint directory does not unpack: launch: packed checkpoint directory: bad path "../el.pt"`) {
		t.Errorf("verify of a bad checkpoint directory: %v\n%s", err, out)
	}
}

// TestCheckpointStoreKept: store-kept stores a file a node kept when the
// bucket refused it as the run's checkpoint at its step, the bytes the
// node kept; a file whose bytes do not match its name, a file not named as
// a node names them, and a step the bucket already holds (or passed) are
// refused, naming what is wrong, and store nothing.
func TestCheckpointStoreKept(t *testing.T) {
	ctx := context.Background()
	url, store := fileStore(t)
	if _, _, err := store.SaveIncremental(ctx, "kept-run", 100, []byte("state at 100")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keep := func(step int64, payload []byte, named []byte) string {
		sum := sha256.Sum256(named)
		path := filepath.Join(dir, fmt.Sprintf("step-%012d-%x.pack", step, sum))
		if err := os.WriteFile(path, payload, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// What a node keeps: an external job's checkpoint directory, packed.
	job := t.TempDir()
	if err := os.WriteFile(filepath.Join(job, "model.pt"), bytes.Repeat([]byte("state at 150 "), 10_000), 0o644); err != nil {
		t.Fatal(err)
	}
	payload, _, err := launch.PackDir(job, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	good := keep(150, payload, payload)
	garbage := []byte("hello\n")
	notPacked := keep(155, garbage, garbage)
	altered := keep(160, append([]byte("X"), payload[1:]...), payload)
	misnamed := filepath.Join(dir, "checkpoint-150.pack")
	if err := os.WriteFile(misnamed, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	old := keep(90, payload, payload)
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		cmd.SetArgs(append(args, "--url", url, "--address", "127.0.0.1:1"))
		err := cmd.Execute()
		return out.String(), err
	}
	steps := func() []int64 { return bucketSteps(t, url, "kept-run") }
	for _, tc := range []struct {
		name, file, want string
	}{
		{"altered bytes", altered, "do not match their hash"},
		{"not a checkpoint directory", notPacked, "not an external job's checkpoint directory: launch: not a packed checkpoint directory"},
		{"not a kept checkpoint", misnamed, "not a kept checkpoint (a node names one step-<step>-<sha256>.pack)"},
		{"older than the bucket's", old, "already holds run kept-run's checkpoint at step 100, not older than the kept one at step 90"},
		{"missing", filepath.Join(dir, "step-000000000170-ab.pack"), "no such file"},
	} {
		if _, err := run("checkpoint", "store-kept", "kept-run", tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
	if got := steps(); len(got) != 1 {
		t.Fatalf("after refusals the bucket holds steps %v; want [100]", got)
	}
	out, err := run("checkpoint", "store-kept", "run/kept-run", good, "-o", "json")
	if err != nil {
		t.Fatalf("store-kept: %v\n%s", err, out)
	}
	var ref spec.CheckpointRef
	if err := json.Unmarshal([]byte(out), &ref); err != nil || ref.Step != 150 || ref.URL != url || ref.Run != "kept-run" {
		t.Fatalf("store-kept said %s (%v); want the checkpoint at 150 in %s", out, err, url)
	}
	refs, err := store.List(ctx, "kept-run")
	if err != nil || len(refs) != 2 || refs[1].Step != 150 {
		t.Fatalf("bucket holds %+v (%v); want 100 and 150", refs, err)
	}
	got, err := store.Load(ctx, refs[1])
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the stored checkpoint at 150 loads %d bytes (%v); want the %d the node kept", len(got), err, len(payload))
	}
	if _, err := run("checkpoint", "store-kept", "kept-run", good); err == nil || !strings.Contains(err.Error(), "already holds run kept-run's checkpoint at step 150") {
		t.Errorf("stored twice: %v", err)
	}
}

// An external job's checkpoint directory is not a checkpoint of a run of
// the built-in model: store-kept refuses to store one for such a run (its
// job, stored with its checkpoints, says which model it trains), and
// verify names one found there as corrupt — before, it was stored, said
// ok, and the resumed run failed on it, counting steps never trained.
func TestCheckpointPackedDirInABuiltInRun(t *testing.T) {
	ctx := context.Background()
	url, store := fileStore(t)
	job := spec.RunSpec{Name: "mnist", Nodes: 1, Steps: 400}.WithDefaults()
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteBlob(ctx, spec.JobKey("mnist"), data, "application/json"); err != nil {
		t.Fatal(err)
	}
	packed := packedDir(t)
	kept := keptFile(t, 300, packed)
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		cmd.SetArgs(append(args, "--url", url, "--address", "127.0.0.1:1"))
		err := cmd.Execute()
		return out.String() + errb.String(), err
	}
	if _, err := run("checkpoint", "store-kept", "mnist", kept); err == nil || !strings.Contains(err.Error(), "run mnist trains the built-in model (mlp-mnist)") {
		t.Errorf("store-kept for a built-in run: %v; want a refusal naming its model", err)
	}
	if got := bucketSteps(t, url, "mnist"); len(got) != 0 {
		t.Fatalf("the refused store-kept left steps %v in the bucket", got)
	}
	if _, _, err := store.SaveIncremental(ctx, "mnist", 300, packed); err != nil {
		t.Fatal(err)
	}
	out, err := run("checkpoint", "verify", "mnist")
	if err == nil || !strings.Contains(out, "CORRUPT  step 300") || !strings.Contains(out, "an external job's checkpoint directory, in a run of the built-in model (mlp-mnist)") {
		t.Errorf("verify of a packed directory in a built-in run: %v\n%s", err, out)
	}
}

// packedDir is an external job's checkpoint directory, packed: one file.
func packedDir(t *testing.T) []byte {
	t.Helper()
	job := t.TempDir()
	if err := os.WriteFile(filepath.Join(job, "model.pt"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	packed, _, err := launch.PackDir(job, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return packed
}

// keptFile writes packed where a node keeps a checkpoint the bucket
// refused, named as it names one (step and SHA-256), and returns its path.
func keptFile(t *testing.T, step int64, packed []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("step-%012d-%x.pack", step, sha256.Sum256(packed)))
	if err := os.WriteFile(path, packed, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
