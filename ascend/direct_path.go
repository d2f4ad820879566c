package ascend

import (
	"math/bits"
	"time"
)

// How a two-rank direct AllReduce of pathMinBytes up to directNT runs.
// By blocks, each rank folds its half block by block, publishes every
// block and copies the peer's blocks as they come: the fastest way while
// the two cores share a cache, since a block moves between them through
// it. By push, each rank folds its half straight into both ranks' outputs
// around the caches (addFloatsNT2, as from directNT on): no line moves
// from one core's cache to the other's, so it keeps its speed when moving
// lines between cores is slow. On this VM the two vCPUs alternate,
// minutes at a time, between the two conditions (2 ranks, -R 1, 1–4 MiB,
// out of place: blocks 22–26 GB/s against push 13 in the first, 3.6–4.3
// against 24–25 in the second; three builds alternated enter and leave it
// together); choosing per call ran 22.7–23.5 in both.
const (
	pathBlocks uint32 = 0
	pathPush   uint32 = 1
	// pathMinBytes is the smallest vector whose path is chosen: below,
	// blocks (a call is too short for a rate to mean much).
	pathMinBytes = 1 << 20
	// pathClasses: the rates are kept per power-of-two size class from
	// pathMinBytes up to directNT (1–2, 2–4, 4–8 MiB).
	pathClasses = 3
	// pathProbeEvery: every this many calls of a class, the slower path
	// runs once, so that a change of condition shows in its rate.
	pathProbeEvery = 32
	// pathAlpha weighs a new measurement into a path's rate.
	pathAlpha = 0.5
)

// pathChooser is rank 0's record of each path's recent rate (bytes per
// second of the whole call, as rank 0 sees it) per size class; rank 0
// posts the path it chose with the call and rank 1 follows, so the ranks
// always agree. Both paths give the ring's bits.
type pathChooser struct {
	classes [pathClasses]pathClass
}

type pathClass struct {
	rate  [2]float64 // by path; 0: not measured yet
	calls int
}

// pathClassOf is the size class of a vector of bytes (≥ pathMinBytes).
func pathClassOf(bytes int) int {
	return min(max(bits.Len(uint(bytes/pathMinBytes))-1, 0), pathClasses-1)
}

// choose returns the path for the next call of bytes: each path once
// first, then the faster, and the slower every pathProbeEvery calls.
func (p *pathChooser) choose(bytes int) uint32 {
	c := &p.classes[pathClassOf(bytes)]
	c.calls++
	switch {
	case c.rate[pathBlocks] == 0:
		return pathBlocks
	case c.rate[pathPush] == 0:
		return pathPush
	}
	best, other := pathBlocks, pathPush
	if c.rate[pathPush] > c.rate[pathBlocks] {
		best, other = pathPush, pathBlocks
	}
	if c.calls%pathProbeEvery == 0 {
		return other
	}
	return best
}

// record weighs in a call of bytes that ran path in d.
func (p *pathChooser) record(bytes int, path uint32, d time.Duration) {
	if d <= 0 || path > pathPush {
		return
	}
	c := &p.classes[pathClassOf(bytes)]
	r := float64(bytes) / d.Seconds()
	if c.rate[path] == 0 {
		c.rate[path] = r
		return
	}
	c.rate[path] += pathAlpha * (r - c.rate[path])
}
