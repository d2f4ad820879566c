package strategy

import (
	"errors"
	"math"
	"testing"
)

func seedPresets(f *testing.F, kind string) {
	for _, name := range Presets() {
		if k, _ := PresetKind(name); k == kind {
			b, err := Preset(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

// checkEstimate asserts an estimate is well formed whatever the input.
func checkEstimate(t *testing.T, e Estimate) {
	t.Helper()
	if !e.Feasible && e.Reason == "" {
		t.Fatalf("infeasible without a reason: %+v", e)
	}
	if e.Reason != "" && e.StepTimeS == 0 {
		return // rejected plan: no figures
	}
	for name, v := range map[string]float64{"step": e.StepTimeS, "tokens": e.TokensPerS, "mem": e.MemPerDeviceGiB, "mfu": e.MFU} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("%s = %g in %+v", name, v, e)
		}
	}
}

func FuzzModelSpec(f *testing.F) {
	seedPresets(f, KindModel)
	f.Add([]byte(goodModel))
	f.Add([]byte("name: x\nlayers: -1\nhidden: 3\nheads: 2\n"))
	f.Add([]byte("{name: [1, 2], layers: {a: b}}"))
	f.Add([]byte("name: x\nlayers: 1e400\n"))
	f.Add([]byte(""))
	f.Add([]byte("---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModel("fuzz.yaml", data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || len(se.Fields) == 0 {
				t.Fatalf("error is not a *SpecError with fields: %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed model does not validate: %v", err)
		}
		if p := m.Params(); math.IsNaN(p) || p <= 0 {
			t.Fatalf("params = %g", p)
		}
		c, err := PresetCluster("vtrain_a100_64")
		if err != nil {
			t.Fatal(err)
		}
		checkEstimate(t, Evaluate(m, c, Plan{TP: 1, PP: 1, DP: 64, CP: 1, EP: 1, MicroBatch: 1, VPP: 1, Recompute: RecomputeFull}))
	})
}

func FuzzClusterSpec(f *testing.F) {
	seedPresets(f, KindCluster)
	f.Add([]byte(goodCluster))
	f.Add([]byte("name: x\nnodes: 1\ndevices_per_node: 1\ndevice: {peak_tflops: 1, memory_gib: 1, hbm_gbps: 1}\nintra_node_gbps: 1\n"))
	f.Add([]byte("device: [a]\n"))
	f.Add([]byte("device:\n  profile: a100-80gb\n  nope: 1\n"))
	f.Add([]byte("# only a comment\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCluster("fuzz.yaml", data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || len(se.Fields) == 0 {
				t.Fatalf("error is not a *SpecError with fields: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed cluster does not validate: %v", err)
		}
		m, err := PresetModel("gpt3_3.6b")
		if err != nil {
			t.Fatal(err)
		}
		n := c.Devices()
		checkEstimate(t, Evaluate(m, c, Plan{TP: 1, PP: 1, DP: n, CP: 1, EP: 1, MicroBatch: 1, VPP: 1, Recompute: RecomputeFull}))
	})
}

func FuzzParsePlan(f *testing.F) {
	f.Add("tp=8,pp=12,dp=4,mb=1,recompute=full,zero=0,vpp=1,sp=true,ep=1,cp=1")
	f.Add("dp=64")
	f.Add("tp=,=,")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlan(s)
		if err != nil {
			return
		}
		q, err := ParsePlan(p.String())
		if err != nil || q != p {
			t.Fatalf("round trip of %q: %+v, %v", s, q, err)
		}
		m, c := mustModel(t, "gpt3_3.6b"), mustCluster(t, "vtrain_a100_64")
		checkEstimate(t, Evaluate(m, c, p))
	})
}
