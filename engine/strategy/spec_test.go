package strategy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const goodModel = `name: tiny
layers: 4
hidden: 256
heads: 8
vocab: 1000
seq_len: 128
global_batch: 64
`

const goodCluster = `name: box
nodes: 2
devices_per_node: 8
device: a100-80gb
intra_node_gbps: 300
inter_node_gbps: 25
`

func TestParseModel(t *testing.T) {
	m, err := ParseModel("tiny.yaml", []byte(goodModel))
	if err != nil {
		t.Fatal(err)
	}
	if m.FFNHidden != 1024 || m.KVHeads != 8 || m.Precision.PerParam() != 18 {
		t.Errorf("defaults not applied: %+v", m)
	}
	moe, err := ParseModel("moe.yaml", []byte(goodModel+"experts: 8\ntop_k: 2\ncapacity_factor: 1.25\ngated_mlp: true\nprecision:\n  grad_bytes: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !moe.moe() || moe.TopK != 2 || moe.Precision.PerParam() != 16 || !moe.GatedMLP {
		t.Errorf("moe fields: %+v", moe)
	}
}

// specErr asserts err is a *SpecError with a problem naming field at line
// (line 0: any line) whose message contains msg.
func specErr(t *testing.T, err error, field string, line int, msg string) {
	t.Helper()
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *SpecError", err, err)
	}
	for _, f := range se.Fields {
		if f.Field == field && (line == 0 || f.Line == line) && strings.Contains(f.Msg, msg) {
			return
		}
	}
	t.Errorf("no problem %s (line %d) containing %q in:\n%v", field, line, msg, err)
}

func TestParseModelErrors(t *testing.T) {
	tests := []struct {
		name, yaml, field string
		line              int
		msg               string
	}{
		{"negative layers", strings.Replace(goodModel, "layers: 4", "layers: -4", 1), "layers", 2, "out of range"},
		{"zero hidden", strings.Replace(goodModel, "hidden: 256", "hidden: 0", 1), "hidden", 3, "out of range"},
		{"heads do not divide hidden", strings.Replace(goodModel, "heads: 8", "heads: 7", 1), "heads", 4, "not divisible"},
		{"kv heads", goodModel + "kv_heads: 3\n", "kv_heads", 8, "must divide heads"},
		{"negative batch", strings.Replace(goodModel, "global_batch: 64", "global_batch: -1", 1), "global_batch", 7, "out of range"},
		{"top_k > experts", goodModel + "experts: 4\ntop_k: 5\n", "top_k", 9, "out of range"},
		{"top_k without experts", goodModel + "top_k: 2\n", "top_k", 8, "needs experts"},
		// As top_k: a capacity factor without experts pads nothing.
		{"capacity_factor without experts", goodModel + "capacity_factor: 1.25\n", "capacity_factor", 8, "1.25 needs experts > 1"},
		// Written 0 would take the default of 2 unseen.
		{"param_bytes written 0", goodModel + "precision: {param_bytes: 0, grad_bytes: 2}\n", "precision.param_bytes", 8, "0 is out of range (0, 64]: leave it out for the default"},
		{"optimizer_bytes written 0", goodModel + "precision:\n  optimizer_bytes: 0\n", "precision.optimizer_bytes", 9, "0 is out of range"},
		// A null is no value, not a 0 the file never wrote.
		{"seq_len null", strings.Replace(goodModel, "seq_len: 128", "seq_len: ~", 1), "seq_len", 6, "null (no value): required: the sequence length in tokens, 1..1048576"},
		{"hidden empty", strings.Replace(goodModel, "hidden: 256", "hidden:", 1), "hidden", 3, "null (no value): required: the model width"},
		// Five edits from flash_attention, but its abbreviation.
		{"flash_attn", goodModel + "flash_attn: true\n", "flash_attn", 8, "did you mean flash_attention?"},
		{"capacity", goodModel + "experts: 4\ncapacity_factor: -1\n", "capacity_factor", 9, "out of range"},
		{"bytes", goodModel + "precision:\n  param_bytes: -2\n", "precision.param_bytes", 9, "out of range"},
		{"unknown field", goodModel + "hiden: 3\n", "hiden", 8, "unknown field"},
		{"wrong type", strings.Replace(goodModel, "layers: 4", "layers: four", 1), "layers", 2, ""},
		{"fraction", strings.Replace(goodModel, "layers: 4", "layers: 4.5", 1), "layers", 2, "want a whole number, got 4.5"},
		{"missing name", strings.Replace(goodModel, "name: tiny\n", "", 1), "name", 0, "required"},
		{"missing vocab", strings.Replace(goodModel, "vocab: 1000\n", "", 1), "vocab", 0, "required: the vocabulary size, 1..4194304"},
		{"not a mapping", "- 1\n- 2\n", "(document)", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseModel("m.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			specErr(t, err, tc.field, tc.line, tc.msg)
			if !strings.Contains(err.Error(), "m.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
}

// TestParseMissingFields: a field left out is "required", once; the ones
// defaulted from it (kv_heads from heads, ffn_hidden from hidden) are not
// blamed as well, and a 1×1 cluster needs no link bandwidths.
func TestParseMissingFields(t *testing.T) {
	_, err := ParseModel("m.yaml", []byte("name: x\nlayers: 2\n"))
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want *SpecError", err)
	}
	var got []string
	for _, f := range se.Fields {
		if !strings.HasPrefix(f.Msg, "required: ") {
			t.Errorf("%s: %q, want required", f.Field, f.Msg)
		}
		got = append(got, f.Field)
	}
	if want := "hidden heads vocab seq_len global_batch"; strings.Join(got, " ") != want {
		t.Errorf("fields %v, want %s", got, want)
	}
	// Written out, a missing field's dependant is checked as before.
	_, err = ParseModel("m.yaml", []byte(strings.Replace(goodModel, "heads: 8\n", "kv_heads: 0\n", 1)))
	specErr(t, err, "heads", 0, "required")
	specErr(t, err, "kv_heads", 4, "out of range")

	one := "name: one\nnodes: 1\ndevices_per_node: 1\ndevice: h100\n"
	if _, err := ParseCluster("c.yaml", []byte(one)); err != nil {
		t.Errorf("1×1 cluster without links: %v", err)
	}
	_, err = ParseCluster("c.yaml", []byte(strings.Replace(one, "devices_per_node: 1", "devices_per_node: 2", 1)))
	specErr(t, err, "intra_node_gbps", 0, "required: each device's bandwidth to the other devices of its node (NVLink/HCCS) in GB/s per device, one direction")
	// Without memory_gib, reserved_gib's default is not blamed as well.
	_, err = ParseCluster("c.yaml", []byte("name: x\nnodes: 1\ndevices_per_node: 1\ndevice:\n  peak_tflops: 1\n  hbm_gbps: 1\n"))
	if !errors.As(err, &se) || len(se.Fields) != 1 || se.Fields[0].Field != "device.memory_gib" {
		t.Errorf("err = %v, want only device.memory_gib", err)
	}
}

// TestParseReportsEveryProblem: an unknown field does not hide the
// impossible values next to it (model and cluster alike).
func TestParseReportsEveryProblem(t *testing.T) {
	bad := strings.Replace(goodModel, "layers: 4", "layers: -4", 1) + "hiden: 3\n"
	_, err := ParseModel("m.yaml", []byte(bad))
	specErr(t, err, "hiden", 8, "unknown field; did you mean hidden?")
	specErr(t, err, "layers", 2, "out of range")
	// Every unknown field, not one of them at random.
	for range 10 {
		_, err = ParseModel("m.yaml", []byte(bad+"layer: 5\n"))
		specErr(t, err, "hiden", 8, "unknown field; did you mean hidden?")
		specErr(t, err, "layer", 9, "unknown field; did you mean layers?")
	}
	badC := goodCluster + "nodez: 2\n"
	badC = strings.Replace(badC, "devices_per_node: 8", "devices_per_node: 0", 1)
	_, err = ParseCluster("c.yaml", []byte(badC))
	specErr(t, err, "nodez", 0, "unknown field")
	specErr(t, err, "devices_per_node", 0, "out of range")
	// A wrong type stops the decoder; the file is read again without it,
	// so the problems below it are said too, in line order, and not the
	// defaults that followed from the field left out (ffn_hidden).
	_, err = ParseModel("m.yaml", []byte(strings.Replace(bad, "hidden: 256", "hidden: big", 1)))
	want := "m.yaml: 3 problem(s):\n" +
		"  line 2: layers: -4 out of range 1..1048576\n" +
		"  line 3: hidden: want a whole number, got big\n" +
		"  line 8: hiden: unknown field; did you mean hidden? (`cann-train search --help` lists the fields)"
	if err == nil || err.Error() != want {
		t.Errorf("type error: %v\nwant %s", err, want)
	}
	// A cluster's too; a required field missing is still said.
	_, err = ParseCluster("c.yaml", []byte(strings.Replace(strings.Replace(goodCluster, "nodes: 2", "nodes: two", 1), "name: ", "nme: ", 1)))
	specErr(t, err, "nodes", 2, "want a whole number")
	specErr(t, err, "nme", 1, "unknown field")
	specErr(t, err, "name", 0, "required")
}

func TestParseCluster(t *testing.T) {
	c, err := ParseCluster("box.yaml", []byte(goodCluster))
	if err != nil {
		t.Fatal(err)
	}
	if c.Devices() != 16 || c.Device.Name != ProfileA100 || c.Device.PeakTFLOPS != 312 || c.ReservedGiB != 6 {
		t.Errorf("cluster: %+v", c)
	}
	inline := strings.Replace(goodCluster, "device: a100-80gb", "device:\n  name: mine\n  peak_tflops: 100\n  memory_gib: 16\n  hbm_gbps: 900", 1)
	c, err = ParseCluster("inline.yaml", []byte(inline))
	if err != nil {
		t.Fatal(err)
	}
	if c.Device.Name != "mine" || c.Device.PeakTFLOPS != 100 || c.Device.GEMMEfficiency != defaultGEMMEfficiency {
		t.Errorf("inline device: %+v", c.Device)
	}
	based := strings.Replace(goodCluster, "device: a100-80gb", "device:\n  profile: h100-sxm\n  memory_gib: 94", 1)
	c, err = ParseCluster("based.yaml", []byte(based))
	if err != nil {
		t.Fatal(err)
	}
	if c.Device.PeakTFLOPS != 989 || c.Device.MemoryGiB != 94 {
		t.Errorf("profile + override: %+v", c.Device)
	}
	for _, name := range Profiles() {
		if _, err := DeviceProfile(name); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
}

func TestDeviceAliases(t *testing.T) {
	tests := []struct{ name, want string }{
		{"a100-80gb", ProfileA100},
		{"A100", ProfileA100},
		{"a100_sxm", ProfileA100},
		{"H100", ProfileH100},
		{" h100 SXM5 ", ProfileH100},
		{"H200", ProfileH200},
		{"Ascend 910", ProfileAscend910A},
		{"910a", ProfileAscend910A},
		{"Atlas_A2_313T", ProfileAtlasA2313T},
		{"cpu", ProfileLocalCPU},
	}
	for _, tc := range tests {
		d, err := DeviceProfile(tc.name)
		if err != nil || d.Name != tc.want {
			t.Errorf("DeviceProfile(%q) = %q, %v; want %q", tc.name, d.Name, err, tc.want)
		}
		c, err := ParseCluster("c.yaml", []byte(strings.Replace(goodCluster, "a100-80gb", strconv.Quote(tc.name), 1)))
		if err != nil || c.Device.Name != tc.want {
			t.Errorf("device: %q parsed as %q, %v; want %q", tc.name, c.Device.Name, err, tc.want)
		}
	}
	for _, name := range []string{"910b", "h100-pcie", "a10", ""} {
		if d, err := DeviceProfile(name); err == nil {
			t.Errorf("DeviceProfile(%q) = %q, want an error", name, d.Name)
		}
	}
}

func TestParseClusterErrors(t *testing.T) {
	inline := "name: x\nnodes: 1\ndevices_per_node: 8\nintra_node_gbps: 100\ndevice:\n  peak_tflops: 100\n  memory_gib: 16\n"
	tests := []struct {
		name, yaml, field string
		line              int
		msg               string
	}{
		{"unknown device", strings.Replace(goodCluster, "a100-80gb", "tpu-v9", 1), "device", 4, "unknown device"},
		{"zero nodes", strings.Replace(goodCluster, "nodes: 2", "nodes: 0", 1), "nodes", 2, "out of range"},
		{"negative devices", strings.Replace(goodCluster, "devices_per_node: 8", "devices_per_node: -8", 1), "devices_per_node", 3, "out of range"},
		{"negative bandwidth", strings.Replace(goodCluster, "inter_node_gbps: 25", "inter_node_gbps: -25", 1), "inter_node_gbps", 6, "out of range"},
		{"multi-node without inter", strings.Replace(goodCluster, "inter_node_gbps: 25\n", "", 1), "inter_node_gbps", 0, "required: each device's scale-out network bandwidth (IB/RoCE) in GB/s per device, one direction: a node's NIC total divided by its devices (8 × 200 Gb/s per 8-GPU node: 25), (0, 1e+06]"},
		{"inline missing hbm", inline, "device.hbm_gbps", 5, "required: the device's memory bandwidth"},
		{"inline unknown field", inline + "  flops: 3\n", "device.flops", 8, "unknown field (check the spelling"},
		{"inline misspelt field", inline + "  hbm_gbs: 3\n", "device.hbm_gbs", 8, "unknown field; did you mean hbm_gbps?"},
		{"910B names no variant", strings.Replace(goodCluster, "a100-80gb", "Ascend 910B", 1), "device", 4, "a 910B is one of atlas-a2-376t, atlas-a2-313t, atlas-a2-280t"},
		{"inline bad profile", strings.Replace(goodCluster, "device: a100-80gb", "device:\n  profile: nope", 1), "device.profile", 5, "unknown device"},
		{"device list", strings.Replace(goodCluster, "device: a100-80gb", "device: [1, 2]", 1), "device", 4, "profile name or a mapping"},
		{"missing device", strings.Replace(goodCluster, "device: a100-80gb\n", "", 1), "device", 0, "required"},
		{"efficiency > 1", goodCluster + "intra_node_efficiency: 1.5\n", "intra_node_efficiency", 7, "out of range"},
		{"reserved too big", goodCluster + "reserved_gib: 100\n", "reserved_gib", 7, "out of range"},
		// Written 0 would take the default unseen.
		{"reserved written 0", goodCluster + "reserved_gib: 0\n", "reserved_gib", 7, "0 is out of range: leave it out for the default"},
		{"inline efficiency written 0", inline + "  gemm_efficiency: 0\n", "device.gemm_efficiency", 8, "0 is out of range"},
		{"unknown field", goodCluster + "gpus: 8\n", "gpus", 7, "unknown field"},
		// A wrong devices_per_node does not hide a wrong intra-node link.
		{"negative devices, intra 0", strings.Replace(goodCluster, "devices_per_node: 8\n", "devices_per_node: -8\n", 1) + "", "devices_per_node", 3, "out of range"},
		{"intra 0 beside negative devices", strings.Replace(strings.Replace(goodCluster, "devices_per_node: 8", "devices_per_node: -8", 1), "intra_node_gbps: 300", "intra_node_gbps: 0", 1), "intra_node_gbps", 5, "0 out of range"},
		{"nodes null", strings.Replace(goodCluster, "nodes: 2", "nodes: null", 1), "nodes", 2, "null (no value): required: the number of nodes"},
		{"intra bandwidth is per device", strings.Replace(goodCluster, "intra_node_gbps: 300\n", "", 1), "intra_node_gbps", 0, "GB/s per device, one direction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCluster("c.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			specErr(t, err, tc.field, tc.line, tc.msg)
		})
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	mp, cp := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(mp, []byte(goodModel), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, []byte(goodCluster), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(mp); err != nil {
		t.Error(err)
	}
	if _, err := LoadCluster(cp); err != nil {
		t.Error(err)
	}
	if _, err := LoadModel(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing model: %v", err)
	}
	if _, err := LoadCluster(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing cluster: %v", err)
	}
	if err := os.WriteFile(mp, []byte(strings.Replace(goodModel, "heads: 8", "heads: 6", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadModel(mp)
	specErr(t, err, "heads", 4, "not divisible")
	if !strings.Contains(err.Error(), mp) {
		t.Errorf("error does not name %s: %v", mp, err)
	}
}

// TestParseOneDocument: a model or cluster file is one YAML document. An
// empty one (nothing, only comments, a bare "---") is said to be empty,
// not seven missing fields; a second document is refused at its "---"
// (the decoder would read the first and ignore the rest, its mistakes
// too), as the job-file reader refuses one.
func TestParseOneDocument(t *testing.T) {
	const second = "a second YAML document (---): one spec per file"
	tests := []struct {
		name, yaml string
		line       int
		msg        string // "" accepted
	}{
		{"empty", "", 0, "empty file (no YAML mapping)"},
		{"blank lines", "\n  \n\n", 0, "empty file (no YAML mapping)"},
		{"comments only", "# a model\n# to come\n", 0, "empty file (no YAML mapping)"},
		{"bare ---", "---\n", 0, "empty file (no YAML mapping)"},
		{"--- and a comment", "---\n# nothing\n...\n", 0, "empty file (no YAML mapping)"},
		{"second document", "{{.}}---\nlayers: -5\nbogus: 1\n", 8, second},
		{"second document, comment on the marker", "{{.}}--- # next\nname: b\n", 8, second},
		{"two markers, the parser drops the rest", "{{.}}---\n---\nname: b\n", 8, second},
		{"document end, then more", "{{.}}...\nname: b\n", 8, "a second YAML document (after the document end ...): one spec per file"},
		{"leading ---", "---\n{{.}}", 0, ""},
		{"trailing ---", "{{.}}---\n", 0, ""},
		{"trailing --- and a comment", "{{.}}---\n# end\n", 0, ""},
		{"directive", "%YAML 1.2\n---\n{{.}}", 0, ""},
		{"--- inside a block scalar", "{{.}}note: |\n  ---\n  x\n", 0, "unknown field"}, // one document: the field is what is wrong
	}
	for _, kind := range []struct {
		name, good string
		parse      func(string, []byte) error
	}{
		{"model", goodModel, func(n string, b []byte) error { _, err := ParseModel(n, b); return err }},
		{"cluster", goodCluster + "reserved_gib: 7\n", func(n string, b []byte) error { _, err := ParseCluster(n, b); return err }},
	} {
		for _, tc := range tests {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				doc := strings.ReplaceAll(tc.yaml, "{{.}}", kind.good)
				line := tc.line
				if line > 0 && strings.HasPrefix(tc.yaml, "{{.}}") {
					line = strings.Count(kind.good, "\n") + 1 // the marker after the good spec
				}
				err := kind.parse("x.yaml", []byte(doc))
				if tc.msg == "" {
					if err != nil {
						t.Fatalf("refused:\n%s\n%v", doc, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("accepted:\n%s", doc)
				}
				if strings.HasPrefix(tc.msg, "unknown") {
					specErr(t, err, "note", 0, tc.msg)
					return
				}
				var se *SpecError
				if !errors.As(err, &se) || len(se.Fields) != 1 {
					t.Fatalf("want one problem, got %v", err)
				}
				specErr(t, err, "(document)", line, tc.msg)
				if !strings.HasPrefix(err.Error(), "x.yaml: 1 problem(s):") {
					t.Errorf("error does not name the file first: %v", err)
				}
				if line > 0 && !strings.Contains(err.Error(), fmt.Sprintf("line %d: ", line)) {
					t.Errorf("error does not name line %d: %v", line, err)
				}
			})
		}
	}
	// From a file too: the path named.
	path := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(path); err == nil || !strings.Contains(err.Error(), path+": 1 problem(s):\n  (document): empty file (no YAML mapping)") {
		t.Errorf("empty model file: %v", err)
	}
	if _, err := LoadCluster(path); err == nil || !strings.Contains(err.Error(), path+": 1 problem(s):\n  (document): empty file (no YAML mapping)") {
		t.Errorf("empty cluster file: %v", err)
	}
}

// TestParseProblemsInLineOrder: a spec's problems come in line order,
// whichever check found them (strict decoding, a zero written for a
// default, validation), those without a line last.
func TestParseProblemsInLineOrder(t *testing.T) {
	tests := []struct {
		name, yaml string
		parse      func(string, []byte) error
		lines      []int
	}{
		{"cluster: validation vs written zeros", "name: c\nnodes: -2\ndevices_per_node: 0\ndevice: a100-80gb\nintra_node_gbps: -300\n" +
			"inter_node_gbps: 0\nintra_node_latency_us: -1\nreserved_gib: -5\nintra_node_efficiency: 1.5\n",
			func(n string, b []byte) error { _, err := ParseCluster(n, b); return err }, []int{2, 3, 5, 7, 8, 9}},
		{"cluster: a zero written above a range", "name: c\nnodes: 8\ndevices_per_node: 8\ndevice: a100-80gb\nintra_node_gbps: 300\n" +
			"inter_node_gbps: 0\nreserved_gib: 0\n",
			func(n string, b []byte) error { _, err := ParseCluster(n, b); return err }, []int{6, 7}},
		{"cluster: unknown field above a bad value, a missing field last", "nodez: 1\n" + strings.Replace(strings.Replace(goodCluster, "nodes: 2", "nodes: 0", 1), "name: box\n", "", 1),
			func(n string, b []byte) error { _, err := ParseCluster(n, b); return err }, []int{1, 2, 0}},
		{"model: unknown field above a bad value, a missing field last", "hiden: 3\nname: m\nlayers: -1\nhidden: 64\nheads: 8\nvocab: 10\nseq_len: 8\n",
			func(n string, b []byte) error { _, err := ParseModel(n, b); return err }, []int{1, 3, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse("x.yaml", []byte(tc.yaml))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SpecError", err)
			}
			var got []int
			for _, f := range se.Fields {
				got = append(got, f.Line)
			}
			if !slices.Equal(got, tc.lines) {
				t.Errorf("problems at lines %v, want %v:\n%v", got, tc.lines, err)
			}
		})
	}
}
