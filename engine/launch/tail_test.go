package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLastLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, "step %d loss 0.%03d\n", i, i)
	}
	long := write("long.log", b.String())

	for _, tc := range []struct {
		name     string
		path     string
		n, bytes int
		want     []string
	}{
		{"last n lines", long, 3, 4096, []string{"step 998 loss 0.998", "step 999 loss 0.999", "step 1000 loss 0.1000"}},
		// 45 bytes hold the last two lines and part of the one before: the
		// cut line is dropped, not shown as a fragment.
		{"byte budget wins", long, 20, 45, []string{"step 999 loss 0.999", "step 1000 loss 0.1000"}},
		{"short log", write("short.log", "hello\nworld"), 20, 4096, []string{"hello", "world"}},
		{"progress bar", write("bar.log", "epoch 1\n 10%\r 50%\r100%\r\nepoch 2\r\n"), 20, 4096, []string{"epoch 1", "100%", "epoch 2"}},
		{"one huge line", write("huge.log", strings.Repeat("x", 10000)+"END\n"), 20, 100, []string{strings.Repeat("x", 96) + "END"}},
		{"invalid utf-8", write("bin.log", "ok\n\xff\xfebad\n"), 20, 4096, []string{"ok", "\uFFFDbad"}},
		{"empty", write("empty.log", ""), 20, 4096, nil},
		{"missing", filepath.Join(dir, "nope.log"), 20, 4096, nil},
		{"no lines asked", long, 0, 4096, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LastLines(tc.path, tc.n, tc.bytes)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("LastLines(%d, %d) = %q, want %q", tc.n, tc.bytes, got, tc.want)
			}
			size := 0
			for _, l := range got {
				size += len(l) + 1
			}
			if len(got) > tc.n || size > tc.bytes+len("\uFFFD") {
				t.Errorf("%d lines, %d bytes: over the bounds %d, %d", len(got), size, tc.n, tc.bytes)
			}
		})
	}
}
