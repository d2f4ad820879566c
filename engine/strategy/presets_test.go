package strategy

import (
	"strings"
	"testing"
)

func TestPresets(t *testing.T) {
	names := Presets()
	for _, want := range []string{"moe_bert.yaml", "1024_ascend910b.yaml", "gpt3_3.6b.yaml", "gpt3_18.4b.yaml", "gpt3_174.6b.yaml",
		"bloom_176b.yaml", "gpt_1t.yaml", "vtrain_a100_64.yaml", "vtrain_a100_256.yaml", "selene_a100_384.yaml", "jeanzay_a100_384.yaml", "local_cpu.yaml"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("preset %s missing from %v", want, names)
		}
	}
	for _, n := range names {
		kind, err := PresetKind(n)
		if err != nil {
			t.Fatal(err)
		}
		switch kind {
		case KindModel:
			if _, err := PresetModel(n); err != nil {
				t.Errorf("%s: %v", n, err)
			}
			if _, err := PresetCluster(n); err == nil {
				t.Errorf("%s parsed as a cluster", n)
			}
		case KindCluster:
			if _, err := PresetCluster(strings.TrimSuffix(n, ".yaml")); err != nil {
				t.Errorf("%s: %v", n, err)
			}
		default:
			t.Errorf("%s: kind %q", n, kind)
		}
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "moe_bert, ") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := PresetModel("../models/gpt_1t.yaml"); err != nil {
		t.Errorf("path-like name: %v", err)
	}
}

// TestCalibrationPresets: the shipped model presets are the models of the
// calibration rows whose machines have cluster presets, and those presets
// have the rows' device counts. (Rows of other sources are read from
// their own columns and need no preset.)
func TestCalibrationPresets(t *testing.T) {
	rows := loadCalibration(t)
	models := map[string]string{"GPT 3.6B": "gpt3_3.6b", "GPT 18.4B": "gpt3_18.4b", "GPT 174.6B": "gpt3_174.6b", "BLOOM-176B": "bloom_176b"}
	for _, r := range rows {
		if clusterFor(r.Group) == "" {
			continue
		}
		name, ok := models[r.Model.Name]
		if !ok {
			t.Errorf("row %s: no preset for model %q", r.ID, r.Model.Name)
			continue
		}
		m := mustModel(t, name)
		m.Name, m.Precision = r.Model.Name, r.Model.Precision
		if m != r.Model {
			t.Errorf("row %s: preset %s = %+v, row = %+v", r.ID, name, m, r.Model)
		}
		if want := r.Cluster.Devices(); want != 64 && want != 256 && want != 384 && want != 768 && want != 1536 {
			t.Errorf("row %s: unexpected device count %d", r.ID, want)
		}
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"vtrain_a100_64", 64}, {"vtrain_a100_256", 256}, {"selene_a100_384", 384}, {"jeanzay_a100_384", 384}, {"1024_ascend910b", 1024}} {
		if got := mustCluster(t, c.name).Devices(); got != c.n {
			t.Errorf("%s: %d devices, want %d", c.name, got, c.n)
		}
	}
}

func TestWriteTable(t *testing.T) {
	m, c := mustModel(t, "gpt3_174.6b"), mustCluster(t, "selene_a100_384")
	good, _ := ParsePlan("tp=8,pp=12,dp=4,mb=1,recompute=full")
	bad, _ := ParsePlan("tp=8,pp=12,dp=4,mb=7,recompute=full")
	var b strings.Builder
	if err := WriteTable(&b, []Estimate{Evaluate(m, c, good), Evaluate(m, c, bad)}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header + 2 rows:\n%s", out)
	}
	for _, want := range []string{"step_s", "TFLOP/s/dev", "headroom_GiB", "comm%", "bubble%", "blast"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header lacks %q: %s", want, lines[0])
		}
	}
	if !strings.Contains(lines[2], "global_batch (1536) not divisible") {
		t.Errorf("infeasible row lacks its reason: %s", lines[2])
	}
	t.Log("\n" + out)
}
