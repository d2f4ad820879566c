//go:build !calibration

package strategy

// CI guards the level the planner reaches today. Issue 5's acceptance —
// Spearman ρ ≥ 0.8 in every vTrain group and the measured best within the
// planner's top 3 or 5 % of its best — is not met yet for GPT 18.4B
// (ρ 0.782; measured best #4, 5.05 % above): the model under-predicts
// tp=2/4 against tp=8. `make calibrate` runs the acceptance thresholds.
const (
	rhoFloor  = 0.75
	bestSlack = 1.06
)
