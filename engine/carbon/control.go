package carbon

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidControl: a BatchPolicy, BatchState or Budget argument is out of
// range.
var ErrInvalidControl = errors.New("carbon: invalid controller input")

// Batch controller defaults (CarbonScaler-style elasticity applied to the
// global batch instead of the server count).
const (
	DefaultHighRatio  = 1.3  // shrink when intensity > 1.3 × threshold
	DefaultLowRatio   = 0.7  // grow when intensity < 0.7 × threshold
	DefaultShrinkStep = 0.75 // batch × 0.75 when shrinking
	DefaultGrowStep   = 1.25 // batch × 1.25 when growing
)

// BatchPolicy configures AdjustBatch. Zero ratio/step fields take the
// Default… values.
type BatchPolicy struct {
	Threshold          float64 // gCO2eq/kWh, > 0
	MinBatch, MaxBatch int     // 1 ≤ MinBatch ≤ MaxBatch
	HighRatio          float64 // > LowRatio
	LowRatio           float64 // > 0
	ShrinkStep         float64 // in (0, 1)
	GrowStep           float64 // > 1
	// Base, when its Batch is set, anchors the linear scaling rule: a new
	// batch B' gets Base.LR × B'/Base.Batch rather than the rate in force
	// scaled by B'/Batch, so a run whose batch returns to its start has its
	// learning rate back bit for bit however many changes lay between.
	Base BatchState
}

// BatchState is the global batch size and learning rate in force.
type BatchState struct {
	Batch int
	LR    float64
}

// BatchAction says what AdjustBatch did.
type BatchAction int

// The BatchAction values.
const (
	Hold   BatchAction = iota // intensity within [Low, High] × threshold, or clamped to no change
	Shrink                    // batch lowered
	Grow                      // batch raised
)

func (a BatchAction) String() string {
	switch a {
	case Shrink:
		return "shrink"
	case Grow:
		return "grow"
	}
	return "hold"
}

func (p BatchPolicy) withDefaults() BatchPolicy {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.HighRatio, DefaultHighRatio)
	def(&p.LowRatio, DefaultLowRatio)
	def(&p.ShrinkStep, DefaultShrinkStep)
	def(&p.GrowStep, DefaultGrowStep)
	return p
}

// AdjustBatch is the carbon-aware batch controller, a pure function. With
// intensity above HighRatio×Threshold the batch is multiplied by ShrinkStep
// and rounded down; below LowRatio×Threshold it is multiplied by GrowStep
// and rounded up (so a small batch still moves by at least one); in between
// it is kept. The result is clamped to [MinBatch, MaxBatch] (a current batch
// outside the range is clamped even when holding), and the learning rate is
// scaled linearly with the batch actually applied (the linear scaling rule):
// LR' = LR × Batch'/Batch.
func AdjustBatch(intensity float64, p BatchPolicy, cur BatchState) (BatchState, BatchAction, error) {
	p = p.withDefaults()
	switch {
	case math.IsNaN(intensity) || math.IsInf(intensity, 0) || intensity < 0:
		return cur, Hold, fmt.Errorf("%w: intensity %v", ErrInvalidControl, intensity)
	case !(p.Threshold > 0) || math.IsInf(p.Threshold, 0):
		return cur, Hold, fmt.Errorf("%w: threshold %v is not positive", ErrInvalidControl, p.Threshold)
	case p.MinBatch < 1 || p.MaxBatch < p.MinBatch:
		return cur, Hold, fmt.Errorf("%w: batch range [%d, %d]", ErrInvalidControl, p.MinBatch, p.MaxBatch)
	case !(p.LowRatio > 0 && p.LowRatio < p.HighRatio):
		return cur, Hold, fmt.Errorf("%w: ratios low %v, high %v", ErrInvalidControl, p.LowRatio, p.HighRatio)
	case !(p.ShrinkStep > 0 && p.ShrinkStep < 1) || !(p.GrowStep > 1) || math.IsInf(p.GrowStep, 0):
		return cur, Hold, fmt.Errorf("%w: steps shrink %v, grow %v", ErrInvalidControl, p.ShrinkStep, p.GrowStep)
	case cur.Batch < 1:
		return cur, Hold, fmt.Errorf("%w: batch %d", ErrInvalidControl, cur.Batch)
	case math.IsNaN(cur.LR) || math.IsInf(cur.LR, 0) || cur.LR < 0:
		return cur, Hold, fmt.Errorf("%w: learning rate %v", ErrInvalidControl, cur.LR)
	case p.Base.Batch < 0 || math.IsNaN(p.Base.LR) || math.IsInf(p.Base.LR, 0) || p.Base.LR < 0:
		return cur, Hold, fmt.Errorf("%w: base batch %d, learning rate %v", ErrInvalidControl, p.Base.Batch, p.Base.LR)
	}
	b := float64(cur.Batch)
	switch {
	case intensity > p.HighRatio*p.Threshold:
		b = math.Floor(b * p.ShrinkStep)
	case intensity < p.LowRatio*p.Threshold:
		b = math.Ceil(b * p.GrowStep)
	}
	nb := int(math.Max(float64(p.MinBatch), math.Min(float64(p.MaxBatch), b)))
	next := BatchState{Batch: nb, LR: cur.LR * float64(nb) / float64(cur.Batch)}
	if p.Base.Batch > 0 {
		next.LR = p.Base.LR * float64(nb) / float64(p.Base.Batch)
	}
	switch {
	case nb < cur.Batch:
		return next, Shrink, nil
	case nb > cur.Batch:
		return next, Grow, nil
	}
	return cur, Hold, nil // the same batch keeps its learning rate bit for bit
}

// BudgetEvent is what Budget.Add reports.
type BudgetEvent int

// The BudgetEvent values.
const (
	BudgetOK       BudgetEvent = iota // nothing new
	BudgetAlert                       // usage reached AlertFraction of the limit (reported once)
	BudgetExceeded                    // usage reached the limit (reported once)
)

func (e BudgetEvent) String() string {
	switch e {
	case BudgetAlert:
		return "alert"
	case BudgetExceeded:
		return "exceeded"
	}
	return "ok"
}

// DefaultAlertFraction is the Budget alert level when AlertFraction is 0.
const DefaultAlertFraction = 0.95

// Budget tracks emitted grams against a limit. Its fields are plain data so
// that it can live in (and be replayed from) workflow state; it is not safe
// for concurrent use.
type Budget struct {
	LimitG        float64 // gCO2eq, > 0
	AlertFraction float64 // 0 means DefaultAlertFraction
	UsedG         float64
	Alerted       bool // BudgetAlert has been reported
	Exceeded      bool // BudgetExceeded has been reported
}

// Add accumulates grams and reports a threshold crossed by this call:
// BudgetAlert once when usage first reaches AlertFraction×LimitG, and
// BudgetExceeded once when it first reaches LimitG. When one call crosses
// both, it reports BudgetExceeded (and the alert counts as reported).
func (b *Budget) Add(grams float64) (BudgetEvent, error) {
	af := b.AlertFraction
	if af == 0 {
		af = DefaultAlertFraction
	}
	switch {
	case !(b.LimitG > 0) || math.IsInf(b.LimitG, 0):
		return BudgetOK, fmt.Errorf("%w: budget limit %v g", ErrInvalidControl, b.LimitG)
	case !(af > 0 && af <= 1):
		return BudgetOK, fmt.Errorf("%w: alert fraction %v", ErrInvalidControl, af)
	case math.IsNaN(grams) || math.IsInf(grams, 0) || grams < 0:
		return BudgetOK, fmt.Errorf("%w: %v g", ErrInvalidControl, grams)
	}
	b.UsedG += grams
	switch {
	case !b.Exceeded && b.UsedG >= b.LimitG:
		b.Exceeded, b.Alerted = true, true
		return BudgetExceeded, nil
	case !b.Alerted && b.UsedG >= af*b.LimitG:
		b.Alerted = true
		return BudgetAlert, nil
	}
	return BudgetOK, nil
}

// Remaining is the grams left before the limit (negative once exceeded).
func (b *Budget) Remaining() float64 { return b.LimitG - b.UsedG }
