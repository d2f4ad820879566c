//go:build calibration

package strategy

// Issue 5's acceptance thresholds (make calibrate).
const (
	rhoFloor  = 0.8
	bestSlack = 1.05
)
