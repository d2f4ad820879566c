package launch

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/engine/checkpoint"
)

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestPackUnpackRoundTrip: every file, its bytes, its mode bits and the
// empty directories come back.
func TestPackUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := map[string][]byte{
		"model.pt":           randBytes(300_000, 1),
		"optim/adam.pt":      randBytes(70_000, 2),
		"step.txt":           []byte("120\n"),
		"meta/config.json":   []byte(`{"lr":0.1}`),
		"empty.bin":          nil,
		"deep/a/b/c/tiny.md": []byte("x"),
	}
	for p, b := range files {
		writeFile(t, filepath.Join(src, p), b)
	}
	os.MkdirAll(filepath.Join(src, "logs/empty"), 0o755)
	os.Symlink("model.pt", filepath.Join(src, "latest.pt"))
	payload, st, err := PackDir(src, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != len(files) || len(st.Skipped) != 1 || st.Skipped[0] != "latest.pt" {
		t.Errorf("stats %+v", st)
	}
	if !IsPackedDir(payload) {
		t.Errorf("payload of %d bytes", len(payload))
	}
	dst := filepath.Join(t.TempDir(), "restore")
	if err := ResetDir(dst); err != nil {
		t.Fatal(err)
	}
	if _, err := UnpackDir(payload, dst); err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v", p, len(got), err)
		}
		if fi, _ := os.Stat(filepath.Join(dst, p)); fi.Mode().Perm() != 0o640 {
			t.Errorf("%s mode %v", p, fi.Mode())
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "logs/empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty dir: %v", err)
	}
	// ResetDir empties the directory it made (its marker stays).
	if err := ResetDir(dst); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(dst); len(es) != 1 || es[0].Name() != DirMarker {
		t.Errorf("ResetDir left %v; want only %s", es, DirMarker)
	}
	// A payload that is not ours, or that points outside, is refused.
	if _, err := UnpackDir([]byte("hello"), dst); err == nil {
		t.Error("garbage unpacked")
	}
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for _, bad := range []string{"../x", "/etc/x", "a/../../x", ".."} {
		if _, err := safeJoin("/d", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPackedDirIsIncremental saves a directory twice through the
// content-addressed store with one large file changed: only that file's
// chunks, the header's and the small files' are written again.
func TestPackedDirIsIncremental(t *testing.T) {
	ctx := context.Background()
	const chunk = 64 << 10
	store, err := checkpoint.OpenWithOptions(ctx, "mem://", checkpoint.Options{ChunkBytes: chunk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir := t.TempDir()
	big := map[string][]byte{
		"layer1.pt": randBytes(5*chunk+100, 1), // 6 chunks
		"layer2.pt": randBytes(3*chunk, 2),     // 3 chunks
		"head.pt":   randBytes(2*chunk+7, 3),   // 3 chunks
	}
	for p, b := range big {
		writeFile(t, filepath.Join(dir, p), b)
	}
	writeFile(t, filepath.Join(dir, "step.txt"), []byte("10"))
	p1, _, err := PackDir(dir, chunk)
	if err != nil {
		t.Fatal(err)
	}
	_, st1, err := store.SaveIncremental(ctx, "job", 10, p1)
	if err != nil {
		t.Fatal(err)
	}
	// Fine-tune the head only.
	head := big["head.pt"]
	head[chunk+5] ^= 0xff
	writeFile(t, filepath.Join(dir, "head.pt"), head)
	writeFile(t, filepath.Join(dir, "step.txt"), []byte("20"))
	p2, _, err := PackDir(dir, chunk)
	if err != nil {
		t.Fatal(err)
	}
	ref2, st2, err := store.SaveIncremental(ctx, "job", 20, p2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first save wrote %d/%d chunks, second %d/%d", st1.ChunksWritten, st1.Chunks, st2.ChunksWritten, st2.Chunks)
	// Header chunk, one changed chunk of head.pt, the small-files chunk.
	if st2.ChunksWritten > 3 || st2.Chunks != st1.Chunks {
		t.Errorf("second save wrote %d of %d chunks (first %d of %d); want ≤ 3", st2.ChunksWritten, st2.Chunks, st1.ChunksWritten, st1.Chunks)
	}
	// And it restores to the second state.
	payload, err := store.Load(ctx, ref2)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := UnpackDir(payload, out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "head.pt")); !bytes.Equal(got, head) {
		t.Error("head.pt differs after restore")
	}
	if got, _ := os.ReadFile(filepath.Join(out, "step.txt")); string(got) != "20" {
		t.Errorf("step.txt %q", got)
	}
}

// TestResetDirEmptiesOnlyWhatItOwns: ResetDir creates a missing
// directory and adopts an empty one (writing its marker), empties one that
// holds the marker, and refuses — touching nothing — one that holds files
// without it, naming the first few. The marker is never part of a
// checkpoint: PackDir leaves it out and UnpackDir does not write it.
func TestResetDirEmptiesOnlyWhatItOwns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		// found is what a refusal names (nil: ResetDir succeeds).
		found []string
		total int
	}{
		{name: "missing", setup: func(*testing.T, string) {}},
		{name: "empty", setup: func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "owned", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, DirMarker), nil)
			writeFile(t, filepath.Join(dir, "model.pt"), []byte("x"))
			writeFile(t, filepath.Join(dir, "sub/shard.pt"), []byte("y"))
		}},
		{name: "user files", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "pretrained.bin"), []byte("x"))
			writeFile(t, filepath.Join(dir, "sub/y"), []byte("y"))
		}, found: []string{"pretrained.bin", "sub/"}, total: 2},
		{name: "many files", setup: func(t *testing.T, dir string) {
			for _, f := range []string{"a", "b", "c", "d", "e", "f", "g"} {
				writeFile(t, filepath.Join(dir, f), []byte(f))
			}
		}, found: []string{"a", "b", "c", "d", "e"}, total: 7},
		{name: "marker is a directory", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, DirMarker, "x"), []byte("x"))
		}, found: []string{DirMarker + "/"}, total: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			tc.setup(t, dir)
			before, _ := os.ReadDir(dir)
			err := ResetDir(dir)
			if tc.found != nil {
				var ne *NotOwnedError
				if !errors.As(err, &ne) || ne.Dir != dir || ne.Total != tc.total || !slices.Equal(ne.Found, tc.found) {
					t.Fatalf("ResetDir: %v; want a NotOwnedError naming %v of %d", err, tc.found, tc.total)
				}
				if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tc.found[0]) {
					t.Errorf("message %q names neither the directory nor what it holds", err)
				}
				if after, _ := os.ReadDir(dir); len(after) != len(before) {
					t.Errorf("refused, yet it changed the directory: %v → %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if es, _ := os.ReadDir(dir); len(es) != 1 || es[0].Name() != DirMarker {
				t.Fatalf("after ResetDir: %v; want only %s", es, DirMarker)
			}
			// The marker is not a checkpoint file.
			writeFile(t, filepath.Join(dir, "model.pt"), []byte("w"))
			payload, st, err := PackDir(dir, 4096)
			if err != nil || st.Files != 1 {
				t.Fatalf("PackDir: %+v %v; want model.pt alone", st, err)
			}
			if h, _ := readHeader(payload); h == nil || len(h.Files) != 1 || h.Files[0].Path != "model.pt" {
				t.Errorf("packed %+v", h)
			}
			// Emptied again, the restore puts back the checkpoint alone.
			if err := ResetDir(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := UnpackDir(payload, dir); err != nil {
				t.Fatal(err)
			}
			if es, _ := os.ReadDir(dir); len(es) != 2 {
				t.Errorf("restored: %v; want model.pt and the marker", es)
			}
		})
	}
}

// TestUnpackSkipsTheMarker: a payload that lists the marker (not one
// PackDir makes) does not write it: a restore never makes a directory
// look owned.
func TestUnpackSkipsTheMarker(t *testing.T) {
	h := dirHeader{Align: 4096, Files: []fileEntry{
		{Path: DirMarker, Mode: 0o644, Size: 1, Offset: 1000},
		{Path: "model.pt", Mode: 0o644, Size: 1, Offset: 1001},
	}}
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1002)
	copy(payload, dirMagic)
	binary.LittleEndian.PutUint64(payload[len(dirMagic):], uint64(len(hb)))
	copy(payload[len(dirMagic)+8:], hb)
	payload[1000], payload[1001] = 'm', 'w'
	dst := t.TempDir()
	if _, err := UnpackDir(payload, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, DirMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the marker was written: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "model.pt")); err != nil || string(b) != "w" {
		t.Errorf("model.pt: %q %v", b, err)
	}
}

// TestResetOwnDirEmptiesWhateverItHolds: the node worker's own directory
// (which may predate the marker) is emptied whatever it holds, and marked.
func TestResetOwnDirEmptiesWhateverItHolds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFile(t, filepath.Join(dir, "old.pt"), []byte("x"))
	writeFile(t, filepath.Join(dir, "sub/shard.pt"), []byte("y"))
	if err := ResetOwnDir(dir); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 || es[0].Name() != DirMarker {
		t.Errorf("after ResetOwnDir: %v; want only %s", es, DirMarker)
	}
}
