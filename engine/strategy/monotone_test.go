package strategy

import (
	"context"
	"math"
	"math/rand"
	"testing"
)

// presetSpecs loads every preset model and cluster.
func presetSpecs(t *testing.T) (models []Model, clusters []Cluster) {
	t.Helper()
	for _, name := range Presets() {
		if m, err := PresetModel(name); err == nil {
			models = append(models, m)
		} else if c, err := PresetCluster(name); err == nil {
			clusters = append(clusters, c)
		} else {
			t.Fatalf("preset %s: %v", name, err)
		}
	}
	if len(models) < 2 || len(clusters) < 2 {
		t.Fatalf("presets: %d models, %d clusters", len(models), len(clusters))
	}
	return models, clusters
}

// randomPlan is a plan for a model on a cluster.
type randomPlan struct {
	m Model
	c Cluster
	p Plan
}

// randomPlans returns up to n plans that pass Check, drawn with a fixed
// seed over the preset models and clusters: every degree, micro-batch,
// recompute mode, ZeRO stage, interleaving, SP and overlap.
func randomPlans(t *testing.T, n int) (out []randomPlan) {
	t.Helper()
	models, clusters := presetSpecs(t)
	rng := rand.New(rand.NewSource(1))
	pow := []int{1, 2, 4, 8, 16, 32, 64}
	modes := []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
	for try := 0; len(out) < n && try < 200*n; try++ {
		m, c := models[rng.Intn(len(models))], clusters[rng.Intn(len(clusters))]
		p := Plan{TP: pow[rng.Intn(4)], PP: 1 + rng.Intn(64), CP: pow[rng.Intn(3)], EP: pow[rng.Intn(4)],
			MicroBatch: 1 + rng.Intn(8), Recompute: modes[rng.Intn(3)], ZeRO: rng.Intn(4), VPP: pow[rng.Intn(4)],
			SP: rng.Intn(2) == 0, Overlap: rng.Intn(2) == 0}
		if d := c.Devices(); d%(p.TP*p.PP*p.CP) == 0 {
			p.DP = d / (p.TP * p.PP * p.CP)
			if Check(m, c, p) == nil {
				out = append(out, randomPlan{m, c, p})
			}
		}
	}
	if len(out) < n {
		t.Fatalf("only %d of %d random plans pass Check", len(out), n)
	}
	return out
}

// TestCostModelIsPhysical scores random valid plans and checks what any
// physical model must satisfy: no plan computes faster than the devices'
// peak; the time and memory breakdowns add up to the totals; more
// recompute or a smaller micro-batch never stores more activations; twice
// the global batch is never faster, lower in throughput or smaller in
// memory; and a device
// with twice the FLOP/s or memory bandwidth, links with twice the
// bandwidth, or overlapping what can be overlapped never make a step
// slower (each overlapped transfer hides behind time no other one uses).
func TestCostModelIsPhysical(t *testing.T) {
	faster := []struct {
		name string
		mod  func(*Cluster)
	}{
		{"inter-node links ×2", func(c *Cluster) { c.InterNodeGBps *= 2 }},
		{"intra-node links ×2", func(c *Cluster) { c.IntraNodeGBps *= 2 }},
		{"peak FLOP/s ×2", func(c *Cluster) { c.Device.PeakTFLOPS *= 2 }},
		{"HBM bandwidth ×2", func(c *Cluster) { c.Device.HBMGBps *= 2 }},
	}
	for _, x := range randomPlans(t, 3000) {
		m, c, p := x.m, x.c, x.p
		e := Evaluate(m, c, p)
		where := m.Name + " on " + c.Name + ": " + p.String()
		if !(e.HFU > 0 && e.HFU < 1) || !(e.MFU > 0 && e.MFU <= e.HFU) {
			t.Errorf("%s: HFU %.3f, MFU %.3f", where, e.HFU, e.MFU)
		}
		tb := e.Time
		sum := tb.ComputeS + tb.TPCommS + tb.CPCommS + tb.EPCommS + tb.PPCommS + tb.DPCommS + tb.BubbleS + tb.OptimizerS
		if math.Abs(sum-e.StepTimeS) > 1e-6*e.StepTimeS {
			t.Errorf("%s: time breakdown sums to %g s, step %g s", where, sum, e.StepTimeS)
		}
		mb := e.Mem
		if got := mb.ParamsGiB + mb.GradsGiB + mb.OptimizerGiB + mb.ActivationsGiB; math.Abs(got-e.MemPerDeviceGiB) > 1e-6*e.MemPerDeviceGiB {
			t.Errorf("%s: memory breakdown sums to %g GiB, total %g", where, got, e.MemPerDeviceGiB)
		}
		if e.CommShare < 0 || e.CommShare > 1 || e.BubbleShare < 0 || e.BubbleShare > 1 {
			t.Errorf("%s: comm share %g, bubble share %g", where, e.CommShare, e.BubbleShare)
		}
		for _, f := range faster {
			c2 := c
			f.mod(&c2)
			if e2 := Evaluate(m, c2, p); e2.StepTimeS > e.StepTimeS*(1+1e-9) {
				t.Errorf("%s: %s makes the step slower, %.6g s → %.6g s\n  %+v\n  %+v", where, f.name, e.StepTimeS, e2.StepTimeS, e.Time, e2.Time)
			}
		}
		var act [3]float64 // none, selective, full
		for i, r := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
			q := p
			q.Recompute = r
			act[i] = Evaluate(m, c, q).Mem.ActivationsGiB
		}
		if act[0] < act[1]*(1-1e-9) || act[1] < act[2]*(1-1e-9) {
			t.Errorf("%s: activations without, with selective and with full recompute %.3f, %.3f, %.3f GiB: want non-increasing", where, act[0], act[1], act[2])
		}
		m2 := m
		m2.GlobalBatch *= 2
		if Check(m2, c, p) == nil {
			if e2 := Evaluate(m2, c, p); e2.StepTimeS < e.StepTimeS || e2.TokensPerS < e.TokensPerS*(1-1e-9) || e2.MemPerDeviceGiB < e.MemPerDeviceGiB*(1-1e-9) {
				t.Errorf("%s: twice the batch takes %.6g s (%.6g), %.6g tokens/s (%.6g), %.4g GiB (%.4g): want no less of each",
					where, e2.StepTimeS, e.StepTimeS, e2.TokensPerS, e.TokensPerS, e2.MemPerDeviceGiB, e.MemPerDeviceGiB)
			}
		}
		if p.MicroBatch > 1 {
			q := p
			q.MicroBatch--
			if Check(m, c, q) == nil {
				if e2 := Evaluate(m, c, q); e2.Mem.ActivationsGiB > e.Mem.ActivationsGiB*(1+1e-9) {
					t.Errorf("%s: a smaller micro-batch stores more activations, %.4g GiB against %.4g", where, e2.Mem.ActivationsGiB, e.Mem.ActivationsGiB)
				}
			}
		}
		if !p.Overlap {
			q := p
			q.Overlap = true
			if e2 := Evaluate(m, c, q); e2.StepTimeS > e.StepTimeS*(1+1e-9) {
				t.Errorf("%s: overlap makes the step slower, %.6g s → %.6g s", where, e.StepTimeS, e2.StepTimeS)
			}
		}
	}
}

// TestSearchMissesNothing: no random valid plan inside the default search
// space may beat the search's best for its model and cluster (the search
// enumerates the space itself, without Check).
func TestSearchMissesNothing(t *testing.T) {
	best := map[string]Estimate{}
	checked := 0
	for _, x := range randomPlans(t, 3000) {
		m, c, p := x.m, x.c, x.p
		d := SearchOptions{}.withDefaults(m, c)
		if p.TP > d.MaxTP || p.CP > d.MaxCP || p.EP > d.MaxEP || p.MicroBatch > d.MaxMicroBatch || p.VPP > d.MaxVPP ||
			p.Overlap || (p.SP && p.TP == 1) {
			continue
		}
		e := Evaluate(m, c, p)
		if !e.Feasible {
			continue
		}
		key := m.Name + " on " + c.Name
		b, ok := best[key]
		if !ok {
			res, err := Search(context.Background(), m, c, SearchOptions{TopK: 1})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			b = res[0]
			best[key] = b
		}
		checked++
		if e.TokensPerS > b.TokensPerS*(1+1e-12) {
			t.Errorf("%s: %s (%.0f tokens/s) beats the search's best %s (%.0f)", key, p, e.TokensPerS, b.Config, b.TokensPerS)
		}
	}
	if checked < 100 {
		t.Errorf("only %d feasible random plans inside the search space", checked)
	}
	t.Logf("%d feasible random plans, %d model/cluster pairs", checked, len(best))
}
