package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
)

// wantBadJob checks err is a non-retryable BadJob whose message says each
// of want and not one of never.
func wantBadJob(t *testing.T, err error, want, never []string) {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeBadJob || !ae.NonRetryable() {
		t.Fatalf("want a non-retryable BadJob, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(ae.Message(), w) {
			t.Errorf("message lacks %q: %s", w, ae.Message())
		}
	}
	for _, w := range never {
		if strings.Contains(ae.Message(), w) {
			t.Errorf("message says %q: %s", w, ae.Message())
		}
	}
}

// TestRunExternalRefusesAForeignCheckpointDir: a checkpoint_dir that
// already holds files the node worker did not put there (no marker) is
// refused before any process starts — BadJob, naming the directory and
// what it holds, saying it is emptied before every launch — and nothing
// in it is deleted. The node worker's own directory (no checkpoint_dir)
// is emptied whatever it holds, as before the marker.
func TestRunExternalRefusesAForeignCheckpointDir(t *testing.T) {
	work := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	for _, f := range []string{"pretrained.bin", "sub/y"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(victim, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(victim, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hooks := externalHooks{progress: func(spec.ChunkProgress) {}}
	n := externalNode(t, "n1", "mem://")
	in := externalInput("foreign", work, 1, "sh", "-c", "touch started")
	in.Spec.External.CheckpointDir = victim
	_, err := n.runExternal(context.Background(), in, hooks)
	wantBadJob(t, err, []string{"node n1", victim, "pretrained.bin", "sub/", "empties checkpoint_dir before every launch", "new or empty directory"}, nil)
	for _, f := range []string{"pretrained.bin", "sub/y"} {
		if _, err := os.Stat(filepath.Join(victim, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job started (%v)", err)
	}

	// The node worker's own directory (left by a worker that wrote no
	// marker) is emptied.
	own := filepath.Join(n.WorkDir, "runs", "own", "checkpoint")
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "old.pt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.runExternal(context.Background(), externalInput("own", work, 1, "sh", "-c", "exit 0"), hooks); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(own, "old.pt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the worker's own checkpoint directory was not emptied: %v", err)
	}
}

// TestRunExternalAdoptsAnEmptyCheckpointDir: an existing empty
// checkpoint_dir is adopted (the marker written); the next launch empties
// what the script left there, even when the script deleted the marker;
// the marker is not uploaded with the checkpoint, and a restore on
// another node gives the script the checkpoint's files (and the marker, a
// dotfile) only.
func TestRunExternalAdoptsAnEmptyCheckpointDir(t *testing.T) {
	work := t.TempDir()
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.Join(t.TempDir(), "bucket")
	hooks := externalHooks{progress: func(spec.ChunkProgress) {}}
	n1 := externalNode(t, "n1", url)
	// Without the helper: what the directory holds at a clean exit is
	// uploaded. Only rank 0 writes (both processes run the script).
	script := `ls -A "$CANN_TRAIN_CHECKPOINT_DIR" > seen-$CANN_TRAIN_RANK; [ "$CANN_TRAIN_RANK" = 0 ] && echo w > "$CANN_TRAIN_CHECKPOINT_DIR/model.pt"; exit 0`
	in := externalInput("adopt", work, 1, "sh", "-c", script)
	in.Spec.External.CheckpointDir = ckpt
	res, err := n1.runExternal(context.Background(), in, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "seen-0")); string(b) != launch.DirMarker+"\n" {
		t.Errorf("the script saw %q in its fresh checkpoint directory; want the marker alone", b)
	}
	if res.Checkpoint == nil {
		t.Fatalf("no checkpoint uploaded: %+v", res)
	}
	store, err := n1.store(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := store.Load(context.Background(), toRef(*res.Checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := launch.CheckPacked(payload); err != nil || st.Files != 1 {
		t.Errorf("uploaded %+v (%v); want model.pt alone", st, err)
	}

	// Launched again on the same node: the directory is its own now, and
	// emptied.
	in.Session = "run/adopt/g2/e2"
	if _, err := n1.runExternal(context.Background(), in, hooks); err != nil {
		t.Fatalf("relaunch into the directory it adopted: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "seen-0")); string(b) != launch.DirMarker+"\n" {
		t.Errorf("relaunched, the script saw %q; want the marker alone", b)
	}

	// A script that empties the directory itself, the marker with the
	// rest, leaves it the worker's: the next launch empties it.
	in3 := externalInput("adopt", work, 1, "sh", "-c", `rm -f "$CANN_TRAIN_CHECKPOINT_DIR"/.c*; echo x > "$CANN_TRAIN_CHECKPOINT_DIR/own.pt"`)
	in3.Spec.External.CheckpointDir = ckpt
	in3.Session = "run/adopt/g2/e3"
	if _, err := n1.runExternal(context.Background(), in3, hooks); err != nil {
		t.Fatal(err)
	}
	in.Session = "run/adopt/g2/e4"
	if _, err := n1.runExternal(context.Background(), in, hooks); err != nil {
		t.Fatalf("relaunch after the script deleted the marker: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "seen-0")); string(b) != launch.DirMarker+"\n" {
		t.Errorf("relaunched, the script saw %q; want the marker alone", b)
	}

	// Restored on another node into a new directory.
	n2 := externalNode(t, "n2", url)
	in2 := externalInput("adopt", work, 1, "sh", "-c", `ls -A "$CANN_TRAIN_CHECKPOINT_DIR" > restored-$CANN_TRAIN_RANK`)
	in2.Membership.Nodes[0].ID = "n2"
	in2.Session = "run/adopt/g3/e3"
	in2.Spec.External.CheckpointDir = filepath.Join(t.TempDir(), "new", "ckpt")
	in2.Restore = res.Checkpoint
	if _, err := n2.runExternal(context.Background(), in2, hooks); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "restored-0")); string(b) != launch.DirMarker+"\nmodel.pt\n" {
		t.Errorf("restored directory %q; want the marker and model.pt", b)
	}
}

// TestRunExternalWorkdirNotADirectory: a workdir that is a file, or
// missing, fails as BadJob naming it (no "<nil>"), before the checkpoint
// directory under it is made.
func TestRunExternalWorkdirNotADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "train.py")
	if err := os.WriteFile(file, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, workdir string
		want          []string
	}{
		{"file", file, []string{"node n1: workdir " + file + " is a file, not a directory"}},
		{"missing", filepath.Join(dir, "nope"), []string{"node n1: workdir " + filepath.Join(dir, "nope"), "no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := externalNode(t, "n1", "mem://")
			in := externalInput("wd-"+tc.name, tc.workdir, 1, "sh", "-c", "exit 0")
			in.Spec.External.CheckpointDir = "ckpt"
			_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
			wantBadJob(t, err, tc.want, []string{"<nil>"})
			if tc.name == "missing" {
				if _, err := os.Stat(tc.workdir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the missing workdir was created: %v", err)
				}
			}
		})
	}
}
