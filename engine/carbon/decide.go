package carbon

import "math"

// Deciding "run now?" without the whole plan.
//
// An online decision with a minimum slot of several steps asks only
// whether the plan of the remaining work starts now: runsDP's choice at its
// first state. [EvaluateOnline] decides at every step, and each decision's
// program has (slack+1)·work states, so a job costs O(steps² × work).
// firstMove computes the same program's values — the same operations on
// the same numbers, so the same bits and the same tie-breaks — but keeps
// no decision bits (runsDP sets two per state to walk the plan back), has
// the tie tolerance inlined, and runs position by position, so that the
// states of a position, independent of each other, overlap in the CPU
// instead of waiting for each other along a layer.
// TestFirstMoveMatchesRunsDP checks it against runsDP on random and tied
// prices, and BenchmarkOnlineMinSlot measures the two side by side.

// dpScratch holds firstMove's rows, reused across decisions.
type dpScratch struct {
	prefix []float64
	// on and off hold the values of the states at the last mm+1
	// positions, row i%(mm+1) for position i, n+1 values each (k chosen).
	on, off []float64
}

// firstMove reports whether runsDP(v, n, mm, on) takes position 0: with
// on, whether the run in progress goes on; without, whether a run starts
// now. The caller guarantees what runsDP's caller does (on, or n ≥ mm,
// and len(v) ≥ n ≥ 1).
func (sc *dpScratch) firstMove(v []float64, n, mm int, on bool) bool {
	W := len(v)
	D := W - n
	rows := mm + 1
	if cap(sc.prefix) < W+1 {
		sc.prefix = make([]float64, W+1)
	}
	p := sc.prefix[:W+1]
	p[0] = 0
	for i, x := range v {
		p[i+1] = p[i] + x
	}
	if cap(sc.on) < rows*(n+1) {
		sc.on, sc.off = make([]float64, rows*(n+1)), make([]float64, rows*(n+1))
	}
	gOn, gOff := sc.on[:rows*(n+1)], sc.off[:rows*(n+1)]
	inf := math.Inf(1)
	row := func(i int) int { return (i % rows) * (n + 1) }
	// Position W: only states with nothing left (k = n) are read there.
	r := row(W)
	gOn[r+n], gOff[r+n] = 0, 0
	for i := W - 1; i >= 0; i-- {
		cur, nxt := row(i), row(i+1)
		// Read only where k+mm ≤ n: then i+mm = d+k+mm ≤ D+n = W.
		far := row(i + mm)
		// runsDP's states (d = i−k, k), 0 ≤ d ≤ D and 0 ≤ k < n; every
		// state read below at a later position is one of them, or has
		// k = n (nothing left: 0).
		kLo, kHi := max(0, i-D), min(n-1, i)
		gOn[cur+n], gOff[cur+n] = 0, 0
		// k = i−D (the last layer, d = D) cannot skip; k ≤ n−mm may
		// start a run (runsDP's st, with p[i+mm]−p[i] the same sum).
		vi := v[i]
		runSum := inf
		if i+mm <= W {
			runSum = p[i+mm] - p[i]
		}
		for k := kLo; k <= kHi; k++ {
			skip := inf
			if i-k < D {
				skip = gOff[nxt+k]
			}
			tol := math.Abs(skip)
			if tol < 1 {
				tol = 1
			}
			lim := skip + 1e-12*tol
			t := vi + gOn[nxt+k+1]
			if t > lim {
				t = skip
			}
			gOn[cur+k] = t
			st := inf
			if k+mm <= n {
				st = runSum + gOn[far+k+mm]
			}
			if st > lim {
				st = skip
			}
			gOff[cur+k] = st
		}
		if i == 0 {
			skip := inf
			if D > 0 {
				skip = gOff[nxt]
			}
			tol := math.Abs(skip)
			if tol < 1 {
				tol = 1
			}
			lim := skip + 1e-12*tol
			if on {
				return v[0]+gOn[nxt+1] <= lim
			}
			return n >= mm && p[mm]-p[0]+gOn[row(mm)+mm] <= lim
		}
	}
	return false
}
