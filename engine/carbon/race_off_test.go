//go:build !race

package carbon

const raceEnabled = false
