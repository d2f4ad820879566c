package engine

import (
	"math"
	"testing"
)

// TestGradientCheck compares the analytic gradient with central finite
// differences of the loss on tiny networks, for every parameter.
func TestGradientCheck(t *testing.T) {
	tests := []struct {
		name    string
		hidden  []int
		dim     int
		classes int
	}{
		{"softmax regression", nil, 5, 3},
		{"one hidden layer", []int{6}, 5, 4},
		{"two hidden layers", []int{5, 4}, 6, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := synthDataset(3, 32, tc.dim, tc.classes)
			cfg := Config{Seed: 11, Hidden: tc.hidden, LearningRate: 1e-3, BatchPerRank: 8, World: 1}
			tr, err := NewTrainer(cfg, ds)
			if err != nil {
				t.Fatal(err)
			}
			tr.loadBatch(0)
			tr.computeGrad()
			analytic := append([]float32(nil), tr.grad[:tr.nParams]...)

			base := reluPattern(tr)

			// Central differences with a step large enough to dwarf float32
			// rounding; a perturbation that flips any ReLU (a kink, where the
			// loss is not differentiable) is skipped and counted.
			const h = 1e-2
			var maxErr float64
			worst, skipped := -1, 0
			for i := range tr.params {
				orig := tr.params[i]
				tr.params[i] = orig + h
				lp := float64(tr.computeGrad())
				kink := reluPattern(tr) != base
				tr.params[i] = orig - h
				lm := float64(tr.computeGrad())
				kink = kink || reluPattern(tr) != base
				tr.params[i] = orig
				if kink {
					skipped++
					continue
				}
				numeric := (lp - lm) / (2 * h)
				a := float64(analytic[i])
				e := math.Abs(a-numeric) / math.Max(1e-2, math.Abs(a)+math.Abs(numeric))
				if e > maxErr {
					maxErr, worst = e, i
				}
			}
			t.Logf("%d params (%d skipped at ReLU kinks), max relative error %.2e at %d", tr.nParams, skipped, maxErr, worst)
			if skipped > tr.nParams/10 {
				t.Errorf("%d of %d parameters skipped at ReLU kinks; the check is not meaningful", skipped, tr.nParams)
			}
			if maxErr > 2e-3 {
				t.Errorf("gradient check failed: param %d analytic %v, relative error %.3g > 2e-3", worst, analytic[worst], maxErr)
			}
			nonzero := 0
			for _, g := range analytic {
				if math.Abs(float64(g)) > 1e-3 {
					nonzero++
				}
			}
			if nonzero < tr.nParams/2 {
				t.Errorf("only %d of %d gradients are > 1e-3; the check is not meaningful", nonzero, tr.nParams)
			}
		})
	}
}

// reluPattern encodes which hidden units are active for the current batch.
func reluPattern(tr *Trainer) string {
	var b []byte
	for l := 1; l < len(tr.acts)-1; l++ {
		for _, a := range tr.acts[l] {
			if a > 0 {
				b = append(b, '1')
			} else {
				b = append(b, '0')
			}
		}
	}
	return string(b)
}
