package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestAccessibleWhileFilesComeAndGo: a file:// bucket listed while other
// processes write and delete under runs/ (checkpoints' temporary files
// renamed, other workers' write probes) is accessible. fileblob's walk
// fails on a file deleted between reading its directory and its details,
// with NotFound, which read as a bucket that does not exist and stopped a
// worker starting beside four others (TestNodeKilledMidRunIsReplaced: "5
// nodes never registered").
func TestAccessibleWhileFilesComeAndGo(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer churn(runs, ".probe")()
	for i := range 300 {
		if err := st.Accessible(context.Background()); err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
	}
}

// TestListWhileAnUploadGoesOn: a file:// run's checkpoints list while
// files come and go in its ckpt/ directory (a save's manifest written
// through a temporary file renamed into place) — `checkpoint ls` during a
// run, a node looking for the latest — and no listing fails for it.
func TestListWhileAnUploadGoesOn(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Save(ctx, "r", 100, []byte("weights")); err != nil {
		t.Fatal(err)
	}
	saving := filepath.Join(dir, "runs", "r", "ckpt", "000000000200") // (a manifest being written)
	if err := os.MkdirAll(saving, 0o755); err != nil {
		t.Fatal(err)
	}
	defer churn(saving, "manifest.json.")()
	for i := range 300 {
		refs, err := st.List(ctx, "r")
		if err != nil || len(refs) != 1 || refs[0].Step != 100 {
			t.Fatalf("listing %d: %+v, %v; want the checkpoint at step 100", i, refs, err)
		}
	}
}

// TestListUnderAPrefix: a file:// bucket opened with gocloud's prefix
// parameter lists the checkpoints saved through it — read from the
// prefix's directory when it ends in a slash, by fileblob otherwise.
func TestListUnderAPrefix(t *testing.T) {
	for _, tc := range []struct{ prefix, file string }{
		{"sub/", "sub/runs/r/ckpt/000000000100/manifest.json"},
		{"a/b/", "a/b/runs/r/ckpt/000000000100/manifest.json"},
		{"p-", "p-runs/r/ckpt/000000000100/manifest.json"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			st, err := Open(ctx, "file://"+dir+"?prefix="+tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Save(ctx, "r", 100, []byte("weights")); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(tc.file))); err != nil {
				t.Fatalf("the manifest is not where the prefix puts it: %v", err)
			}
			refs, err := st.List(ctx, "r")
			if err != nil || len(refs) != 1 || refs[0].Step != 100 {
				t.Fatalf("list: %+v, %v; want the checkpoint at step 100", refs, err)
			}
		})
	}
}

// churn writes and deletes files named prefix… in dir, from two
// goroutines, until the function it returns is called.
func churn(dir, prefix string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				p := filepath.Join(dir, fmt.Sprintf("%s%d-%d", prefix, w, i))
				if os.WriteFile(p, []byte("x"), 0o644) == nil {
					_ = os.Remove(p)
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
