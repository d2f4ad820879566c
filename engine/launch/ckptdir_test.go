package launch

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	// ResetDir empties.
	if err := ResetDir(dst); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(dst); len(es) != 0 {
		t.Errorf("ResetDir left %v", es)
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
