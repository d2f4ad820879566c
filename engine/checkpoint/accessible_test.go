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
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := filepath.Join(runs, fmt.Sprintf(".probe-%d-%d", w, i))
				if os.WriteFile(p, []byte("x"), 0o644) == nil {
					_ = os.Remove(p)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for i := range 300 {
		if err := st.Accessible(context.Background()); err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
	}
}
