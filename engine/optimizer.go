package engine

import (
	"fmt"
	"math"
)

// Optimizer is an update rule; see Config.Optimizer.
type Optimizer uint8

const (
	// Adam (beta1 0.9, beta2 0.999, eps 1e-8, with bias correction): the
	// reducer averages the gradient every step.
	Adam Optimizer = iota
	// OneBitAdam is the 1-bit Adam recipe (Tang et al., ICML 2021;
	// DeepSpeed OneBitAdam): Adam on the averaged gradient for
	// Config.FreezeStep updates, then the second moment v is frozen and
	// every step
	//
	//	m_local = beta1·m + (1−beta1)·g      (g: this rank's gradient)
	//	m       = reduce(m_local)            (the average over ranks)
	//	p      −= lr/(1−beta1^t) · m / (sqrt(v̂) + eps)
	//
	// where v̂ is v as it was after FreezeStep updates, bias-corrected, and
	// floored and scaled as below.
	//
	// The reducer therefore averages the momentum, which is smooth and,
	// with v fixed, enters the update linearly: its sign with one scale per
	// bucket, error feedback on what that drops, is enough (1 bit per
	// value) where compressing the gradient fed into Adam's variance is
	// not.
	//
	// Two refinements keep the frozen v̂ close to the one Adam would have
	// (both deterministic, the same on every rank, and cheap):
	//
	//   - Scale. Gradients shrink as training proceeds, and Adam's v̂ with
	//     them; a v̂ frozen after a short warm-up would slow training more
	//     and more. So the step buffer carries, after the loss, one more
	//     value per tensor of [Trainer.Tensors]: the sum of squares of this
	//     rank's gradient over the tensor (which a rank has without
	//     communicating). The reducer averages them with the loss, dense
	//     (2 values per layer); the trainer keeps their beta2 moving
	//     average, like v, and scales each tensor's frozen v̂ by the ratio
	//     of that average now to its value at the freeze. The shape of v̂
	//     within a tensor stays frozen; its scale follows Adam's. (Finer
	//     statistics, Adafactor's per row and per column, did worse here.)
	//   - Floor. A weight whose gradient was (nearly) zero throughout the
	//     warm-up, such as that of an MNIST pixel that is almost always
	//     blank, has a (nearly) zero frozen v, and its first real gradient
	//     would move it by m/eps. Each frozen v is therefore at least
	//     OneBitVarianceFloor times its tensor's mean v. (1-bit Adam
	//     instead masks exactly-zero momenta, which freezes such weights
	//     for good.)
	OneBitAdam
)

// OneBitVarianceFloor is the least frozen variance of a OneBitAdam
// parameter, as a fraction of its tensor's mean (see [OneBitAdam]). On the
// built-in MNIST task 0.03 did best among 0.01, 0.03, 0.1 and 0.3.
const OneBitVarianceFloor = 0.03

// String returns the optimizer's flag name.
func (o Optimizer) String() string {
	switch o {
	case Adam:
		return "adam"
	case OneBitAdam:
		return "onebit-adam"
	}
	return fmt.Sprintf("Optimizer(%d)", uint8(o))
}

// ParseOptimizer parses "adam" or "onebit-adam" (also "1bit-adam").
func ParseOptimizer(s string) (Optimizer, error) {
	switch s {
	case "adam", "":
		return Adam, nil
	case "onebit-adam", "1bit-adam", "onebitadam":
		return OneBitAdam, nil
	}
	return 0, fmt.Errorf("engine: unknown optimizer %q (want adam or onebit-adam)", s)
}

// Payload is what a step hands its reducer in the first NumParams values
// of the buffer. (After them come the loss and, with OneBitAdam, one
// statistic per tensor; see [Trainer.BufferLen].)
type Payload uint8

const (
	// Gradient: this rank's gradient (Adam, and OneBitAdam before
	// FreezeStep).
	Gradient Payload = iota
	// Momentum: this rank's momentum beta1·m + (1−beta1)·g (OneBitAdam
	// from FreezeStep on).
	Momentum
)

// String returns "gradient" or "momentum".
func (p Payload) String() string {
	switch p {
	case Gradient:
		return "gradient"
	case Momentum:
		return "momentum"
	}
	return fmt.Sprintf("Payload(%d)", uint8(p))
}

// Payload says what the next Step (or StepOverlap) hands its reducer. It
// is the same on every rank, so a reducer may switch its encoding on it:
// uncompressed while it is Gradient, compressed once it is Momentum.
func (t *Trainer) Payload() Payload {
	if t.cfg.Optimizer == OneBitAdam && t.adamT >= t.cfg.FreezeStep {
		return Momentum
	}
	return Gradient
}

// BufferLen returns the length of the buffer a step hands its reducer:
// NumParams payload values, then the loss, then (OneBitAdam) one gradient
// statistic per tensor. A compressing reducer compresses the payload and
// averages the rest as it is.
func (t *Trainer) BufferLen() int { return len(t.grad) }

// tensorRange returns tensor j's range in the flat vector (j = 2l: layer
// l's weights, 2l+1: its biases).
func (t *Trainer) tensorRange(j int) (lo, hi int) {
	ly, off := t.layers[j/2], t.offsets[j/2]
	if j%2 == 0 {
		return off, off + ly.in*ly.out
	}
	return off + ly.in*ly.out, off + ly.in*ly.out + ly.out
}

// addStats adds the squares of t.grad[lo:hi] (a gradient) to the
// per-tensor sums in t.statAcc.
func (t *Trainer) addStats(lo, hi int) {
	for j := range t.statAcc {
		a, b := t.tensorRange(j)
		a, b = max(a, lo), min(b, hi)
		var s float64
		for _, g := range t.grad[a:max(a, b)] {
			s += float64(g) * float64(g)
		}
		t.statAcc[j] += s
	}
}

// writeStats stores the per-tensor sums after the loss and clears them.
func (t *Trainer) writeStats() {
	for j, s := range t.statAcc {
		t.grad[t.nParams+1+j] = float32(s)
	}
	clear(t.statAcc)
}

// toMomentum replaces t.grad[lo:hi] (a gradient) by the local momentum
// beta1·m + (1−beta1)·g, rounded exactly as adam rounds it.
func (t *Trainer) toMomentum(lo, hi int) {
	const b1, omb1 = float32(adamBeta1), float32(1 - adamBeta1)
	g, m := t.grad[lo:hi], t.m[lo:hi]
	m = m[:len(g)]
	for i, gi := range g {
		g[i] = float32(b1*m[i]) + float32(omb1*gi)
	}
}

// trackSq folds this step's averaged per-tensor statistics into their
// moving average, and keeps its bias-corrected value at the freeze.
func (t *Trainer) trackSq() {
	for j := range t.sq {
		t.sq[j] = adamBeta2*t.sq[j] + (1-adamBeta2)*float64(t.grad[t.nParams+1+j])
	}
	if t.adamT+1 == t.cfg.FreezeStep {
		bc := 1 - powInt(adamBeta2, t.cfg.FreezeStep)
		for j, s := range t.sq {
			t.sqFrozen[j] = s / bc
		}
	}
}

// frozenAdam applies one OneBitAdam step after the freeze: the averaged
// momentum in t.grad becomes m, and v stays as it was after FreezeStep
// updates, floored and scaled per tensor (see OneBitAdam).
func (t *Trainer) frozenAdam() {
	if !t.floorValid {
		t.setVarianceFloor()
		t.floorValid = true
	}
	t.adamT++
	bc1 := 1 - powInt(adamBeta1, t.adamT)
	bcNow := 1 - powInt(adamBeta2, t.adamT)
	stepSize := float32(t.lr / bc1)
	invSqrtBC2 := 1 / math.Sqrt(1-powInt(adamBeta2, t.cfg.FreezeStep))
	const eps = float32(adamEps)
	for j := range t.sq {
		scale := 1.0
		if t.sqFrozen[j] > 0 {
			scale = t.sq[j] / bcNow / t.sqFrozen[j]
		}
		f := float32(math.Sqrt(scale) * invSqrtBC2)
		fl := t.floor[j]
		lo, hi := t.tensorRange(j)
		p, m, v, avg := t.params[lo:hi], t.m[lo:hi], t.v[lo:hi], t.grad[lo:hi]
		m, v, avg = m[:len(p)], v[:len(p)], avg[:len(p)]
		for i := range p {
			mi := avg[i]
			m[i] = mi
			vi := max(v[i], fl)
			if vi == 0 {
				continue // no variance at all: nothing sensible to divide by
			}
			denom := float32(float32(math.Sqrt(float64(vi)))*f) + eps
			p[i] -= float32(stepSize*mi) / denom
		}
	}
}

// setVarianceFloor sets t.floor to OneBitVarianceFloor times each
// tensor's mean v (a function of the frozen v alone, so a restored trainer
// recomputes the same bits).
func (t *Trainer) setVarianceFloor() {
	for j := range t.floor {
		lo, hi := t.tensorRange(j)
		var s float64
		for _, v := range t.v[lo:hi] {
			s += float64(v)
		}
		t.floor[j] = float32(OneBitVarianceFloor * s / float64(hi-lo))
	}
}
