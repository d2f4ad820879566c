package ascend

import (
	"testing"
	"time"
)

func TestPathClassOf(t *testing.T) {
	for _, tc := range []struct{ bytes, want int }{
		{1 << 20, 0}, {2<<20 - 4, 0}, {2 << 20, 1}, {4<<20 - 4, 1}, {4 << 20, 2}, {8<<20 - 4, 2}, {64 << 20, 2},
	} {
		if got := pathClassOf(tc.bytes); got != tc.want {
			t.Errorf("pathClassOf(%d) = %d, want %d", tc.bytes, got, tc.want)
		}
	}
}

// The chooser tries each path once, then runs the faster and probes the
// slower every pathProbeEvery calls, and follows a change of condition:
// when blocks slow down it moves to push, and back when a probe finds
// blocks fast again.
func TestPathChooser(t *testing.T) {
	const mib = 1 << 20
	var p pathChooser
	run := func(blocks, push time.Duration, calls int) (counts [2]int) {
		for range calls {
			path := p.choose(2 * mib)
			counts[path]++
			d := blocks
			if path == pathPush {
				d = push
			}
			p.record(2*mib, path, d)
		}
		return counts
	}
	if got := p.choose(2 * mib); got != pathBlocks {
		t.Fatalf("first call: %d, want blocks", got)
	}
	p.record(2*mib, pathBlocks, 100*time.Microsecond)
	if got := p.choose(2 * mib); got != pathPush {
		t.Fatalf("second call: %d, want push", got)
	}
	p.record(2*mib, pathPush, 200*time.Microsecond)
	// Blocks twice as fast: blocks, with one probe of push per 32 calls.
	if c := run(100*time.Microsecond, 200*time.Microsecond, 320); c[pathPush] != 10 || c[pathBlocks] != 310 {
		t.Errorf("blocks faster: %v calls (blocks, push), want 310 and 10", c)
	}
	// Blocks become 6× slower than before: within a few calls, push.
	run(600*time.Microsecond, 200*time.Microsecond, 8)
	if c := run(600*time.Microsecond, 200*time.Microsecond, 64); c[pathBlocks] != 2 {
		t.Errorf("blocks slow: %v calls (blocks, push), want 2 probes of blocks", c)
	}
	// Blocks fast again: the probes see it and blocks takes over.
	run(100*time.Microsecond, 200*time.Microsecond, 96)
	if c := run(100*time.Microsecond, 200*time.Microsecond, 64); c[pathPush] != 2 {
		t.Errorf("blocks fast again: %v calls (blocks, push), want 2 probes of push", c)
	}
	// Classes are independent; nonsense durations are ignored.
	if got := p.choose(5 * mib); got != pathBlocks {
		t.Errorf("a new class starts with blocks: %d", got)
	}
	p.record(5*mib, pathBlocks, 0)
	if p.classes[2].rate[pathBlocks] != 0 {
		t.Error("a zero duration was recorded")
	}
}
