//go:build !calibration

package strategy

// CI guards the level the planner reaches today. Issue 5's acceptance —
// Spearman ρ ≥ 0.8 in every vTrain group and the measured best within the
// planner's top 3 or 5 % of its best — is not met yet for GPT 18.4B
// (ρ 0.782; measured best #4, 5.05 % above). `make calibrate` runs the
// acceptance thresholds.
//
// Why (diagnosed, not fixed): 9 of the group's 17 discordant pairs involve
// one run, tp=4,pp=2,mb=4 (row 87), and 5 involve tp=8,pp=1,mb=16 (row 83).
// Row 87 is measured slower than tp=4,pp=2,mb=8 (row 86) although it has
// the same t, p, d and work and half the 1F1B bubble ((p−1)/m = 1/8 vs
// 1/4, about 0.9 s here), while the per-token cost of halving the
// micro-batch is about 3 % (tp=8 rows 82/84); row 83 is 9 % slower than
// mb=8 at p=1 where the 3.6B group's tp=8 runs get faster with larger
// micro-batches. No monotone, physical effect orders both. GEMM-shape
// efficiency (wave quantisation, K-loop fill; NVIDIA's "Matrix
// Multiplication Background" guide) was tried: it lowers the step-time
// error but favours tp=4 more and drops ρ to about 0.71. Exposed backward
// TP all-reduces, un-partitioned pipeline sends and launch-bound kernels
// were estimated to move the pair the wrong way or by under 1 %. The
// guard stays until a physical cause is found.
const (
	rhoFloor  = 0.75
	bestSlack = 1.06
)
