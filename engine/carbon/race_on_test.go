//go:build race

package carbon

// raceEnabled: the race detector slows the savings report ~10×.
const raceEnabled = true
