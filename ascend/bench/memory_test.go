package bench

import (
	"strings"
	"testing"
)

// TestMemoryFitsWording: a command that launches ranks with flags of its
// own (topo-scan) is told in them, and a probe's few MiB read as MiB.
func TestMemoryFitsWording(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		o         Options
		available uint64
		want      string // "": fits
	}{
		// 64 ranks × (4M send + 4M receive) = 512 MiB.
		{"probe fits", Options{MinBytes: 4 * mib, MaxBytes: 4 * mib, Ranks: 64}, 512*mib + 1, ""},
		{"probe does not", Options{MinBytes: 4 * mib, MaxBytes: 4 * mib, Ranks: 64}, 512*mib - 1,
			"topo-scan: --bytes 4M needs 8.0 MiB of buffers per rank (send, receive) × 64 ranks = 512.0 MiB; this host has 512.0 MiB available (MemAvailable): lower --bytes or --ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Defaults().memoryFits(tc.available, "topo-scan: --bytes", "lower --bytes or --ranks")
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
	// Bench's own check still names -e.
	err := Options{MaxBytes: 1 << 30, Ranks: 2}.Defaults().checkMemory(1 << 30)
	if err == nil || !strings.HasPrefix(err.Error(), "bench: -e 1G needs") || !strings.HasSuffix(err.Error(), "lower -e or the ranks") {
		t.Errorf("bench: %v", err)
	}
}
