package strategy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A published run from a source without a cluster preset (a group that
// clusterFor does not know) is read from the row's own columns: the
// device text picks a profile, the stated peak and memory override it,
// and the link texts give the bandwidths. Only physical facts enter; an
// unknown device is an error, not a guess.

// rowDevice picks the profile the device text names; peak (TFLOP/s, 16-bit)
// and memGB (GB) override the profile when stated (> 0).
func rowDevice(text string, peak, memGB float64) (Device, error) {
	l := strings.ToLower(text)
	var name string
	switch {
	case strings.Contains(l, "h200"):
		name = ProfileH200
	case strings.Contains(l, "h100"), strings.Contains(l, "h800"):
		name = ProfileH100 // H800: the H100's compute, less NVLink (rowIntraGBps)
	case strings.Contains(l, "a100"), strings.Contains(l, "a800"):
		name = ProfileA100
	case strings.Contains(l, "910b"), strings.Contains(l, "atlas a2"), strings.Contains(l, "atlas 800t a2"):
		name = ProfileAtlasA2313T // the middle of the A2 band (AscendA2Profiles)
	case strings.Contains(l, "910"):
		name = ProfileAscend910A
	default:
		return Device{}, fmt.Errorf("device %q matches no profile (%s)", text, strings.Join(Profiles(), ", "))
	}
	d, err := DeviceProfile(name)
	if err != nil {
		return Device{}, err
	}
	if peak > 0 {
		d.PeakTFLOPS = peak
	}
	switch {
	case memGB > 0:
		d.MemoryGiB = memGB
	case name == ProfileA100 && gb40.MatchString(l):
		d.MemoryGiB = 40
	}
	return d, nil
}

var (
	nvlinkGen = regexp.MustCompile(`nvlink\s*([2-5])`)
	gbytesPS  = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*(?:GB/s|GBps)`)        // bytes
	gbitsPS   = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*(?:Gb/s|Gbps|Gbit/s)`) // bits
	countX    = regexp.MustCompile(`(\d+)\s*[x×]`)                           // "8x HDR", "8 × 400"
	countW    = regexp.MustCompile(`(?:^|\s)(\d+)\s+[A-Za-z]`)               // "4 Omni-Path"
	zeroStage = regexp.MustCompile(`zero[-_ ]?(?:stage[-_ ]?)?([0-3])`)
	gb40      = regexp.MustCompile(`\b40\s*gb`)
)

// rowIntraGBps is the one-way bandwidth per device inside a node the link
// text describes (NVLink generation, HCCS, or a stated GB/s), else the
// device's usual fabric; eff is the efficiency of that kind of link.
func rowIntraGBps(text, device string) (gbps, eff float64) {
	l, dev := strings.ToLower(text), strings.ToLower(device)
	eff = 0.77 // NVLink: nccl-tests on 8×A100 (cluster presets)
	switch {
	case strings.Contains(dev, "h800"), strings.Contains(dev, "a800"):
		return 200, eff // export parts: 400 GB/s both ways
	case strings.Contains(l, "hccs") || strings.Contains(dev, "910"):
		return 196, 0.7 // Atlas A2 HCCS full mesh (msmodeling)
	}
	if m := nvlinkGen.FindStringSubmatch(l); m != nil {
		return map[string]float64{"2": 150, "3": 300, "4": 450, "5": 900}[m[1]], eff
	}
	if m := gbytesPS.FindStringSubmatch(text); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		return v, eff
	}
	switch {
	case strings.Contains(dev, "h100"), strings.Contains(dev, "h200"):
		return 450, eff
	}
	return 300, eff
}

// rowInterGBps is the one-way network bandwidth per device the link text
// describes: "… 200 Gb/s per GPU", "8x HDR 200 Gb/s" or "800 Gb/s per node"
// (shared by perNode devices), an InfiniBand generation, else HDR per
// device. eff is 0.9 for InfiniBand (Calculon), 0.7 for RoCE (msmodeling).
func rowInterGBps(text string, perNode int) (gbps, eff float64) {
	l := strings.ToLower(text)
	eff = 0.9
	if strings.Contains(l, "roce") {
		eff = 0.7
	}
	bits := func(s string) float64 {
		m := gbitsPS.FindStringSubmatch(s)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if i := strings.Index(l, "per gpu"); i >= 0 {
		if v := bits(text[max(0, strings.LastIndex(text[:i], "(")):i]); v > 0 {
			return v / 8, eff
		}
		if v := bits(text[:i]); v > 0 {
			return v / 8, eff
		}
	}
	if loc := gbitsPS.FindStringSubmatchIndex(text); loc != nil {
		v, _ := strconv.ParseFloat(text[loc[2]:loc[3]], 64)
		n := 1.0 // links per node: a count before the rate ("8x HDR 200 Gb/s", "4 Omni-Path 100 Gb/s links")
		if m := countX.FindStringSubmatch(text[:loc[0]]); m != nil {
			n, _ = strconv.ParseFloat(m[1], 64)
		} else if m := countW.FindStringSubmatch(text[:loc[0]]); m != nil {
			n, _ = strconv.ParseFloat(m[1], 64)
		}
		if strings.Contains(l, "per node") || n > 1 {
			return n * v / 8 / float64(max(perNode, 1)), eff
		}
		return v / 8, eff
	}
	switch {
	case strings.Contains(l, "ndr"):
		return 50, eff
	case strings.Contains(l, "edr"):
		return 12.5, eff
	}
	return 25, eff // HDR 200 Gb/s per device
}

// rowZeRO reads the optimizer-sharding text: "ZeRO-3 (DeepSpeed)", "zero
// stage 1", "distributed optimizer" (Megatron's ZeRO-1), "FSDP" (full
// shard: 3; SHARD_GRAD_OP: 2), else 0.
func rowZeRO(text string) int {
	l := strings.ToLower(text)
	if m := zeroStage.FindStringSubmatch(l); m != nil {
		return int(m[1][0] - '0')
	}
	switch {
	case strings.Contains(l, "distributed optimizer"), strings.Contains(l, "distributed-optimizer"):
		return 1
	case strings.Contains(l, "shard_grad_op"):
		return 2
	case strings.Contains(l, "fsdp"):
		return 3
	}
	return 0
}

// gatedFamilies are model families trained with a gated MLP (SwiGLU or
// GeGLU) and FlashAttention-style attention kernels.
var gatedFamilies = []string{"llama", "mistral", "mixtral", "qwen", "deepseek", "gemma", "internlm", "baichuan", "yi-", "palm"}

// rowModelKind says whether a row's model has a gated MLP, runs
// FlashAttention and trains without dropout: by its family (the Llama-
// style ones do all three), or by what the row's texts say.
func rowModelKind(name, texts string) (gated, flash, noDropout bool) {
	l := strings.ToLower(name)
	for _, f := range gatedFamilies {
		if strings.Contains(l, f) {
			gated, flash, noDropout = true, true, true
		}
	}
	t := strings.ToLower(texts)
	if strings.Contains(t, "swiglu") || strings.Contains(t, "geglu") {
		gated = true
	}
	if strings.Contains(t, "flash") {
		flash = true
	}
	return gated, flash, noDropout
}

func TestCalibrationRowReaders(t *testing.T) {
	dev := []struct {
		text      string
		peak, mem float64
		want      string
		wantPeak  float64
		wantMem   float64
	}{
		{"NVIDIA A100-SXM 80GB (DGX A100, Selene)", 312, 80, ProfileA100, 312, 80},
		{"NVIDIA A100 40GB", 0, 0, ProfileA100, 312, 40},
		{"NVIDIA H800", 0, 0, ProfileH100, 989, 80},
		{"H200 SXM", 0, 0, ProfileH200, 989, 140},
		{"Ascend 910B", 0, 64, ProfileAtlasA2313T, 313, 64},
	}
	for _, d := range dev {
		got, err := rowDevice(d.text, d.peak, d.mem)
		if err != nil || got.Name != d.want || got.PeakTFLOPS != d.wantPeak || got.MemoryGiB != d.wantMem {
			t.Errorf("rowDevice(%q) = %s %g TFLOP/s %g GiB, %v; want %s %g %g", d.text, got.Name, got.PeakTFLOPS, got.MemoryGiB, err, d.want, d.wantPeak, d.wantMem)
		}
	}
	if _, err := rowDevice("TPU v4", 275, 32); err == nil {
		t.Error("an unknown device must be an error")
	}
	intra := []struct {
		text, device string
		want         float64
	}{
		{"NVLink3 + NVSwitch", "A100", 300},
		{"NVLink4", "H100", 450},
		{"vTrain config: 150 GB/s intra-node", "A100", 150},
		{"", "H100 SXM", 450},
		{"NVLink", "NVIDIA H800", 200},
		{"HCCS", "Ascend 910B", 196},
	}
	for _, c := range intra {
		if got, _ := rowIntraGBps(c.text, c.device); got != c.want {
			t.Errorf("rowIntraGBps(%q, %q) = %g, want %g", c.text, c.device, got, c.want)
		}
	}
	inter := []struct {
		text string
		want float64
	}{
		{"8x HDR InfiniBand 200 Gb/s per node (=200 Gb/s per GPU), 3-level fat tree", 25},
		{"vTrain config: 800 Gb/s per node", 12.5},
		{"8 × 400 Gb/s NDR", 50},
		{"4 Omni-Path 100 Gb/s links per node", 6.25},
		{"NDR InfiniBand", 50},
		{"RoCE 200 Gb/s per GPU", 25},
		{"", 25},
	}
	for _, c := range inter {
		if got, _ := rowInterGBps(c.text, 8); got != c.want {
			t.Errorf("rowInterGBps(%q) = %g, want %g", c.text, got, c.want)
		}
	}
	zero := map[string]int{"none (assumed)": 0, "ZeRO-3 (DeepSpeed), no model parallelism": 3, "ZeRO stage 1": 1,
		"Megatron distributed optimizer": 1, "FSDP": 3, "FSDP SHARD_GRAD_OP": 2, "": 0}
	for text, want := range zero {
		if got := rowZeRO(text); got != want {
			t.Errorf("rowZeRO(%q) = %d, want %d", text, got, want)
		}
	}
	if g, f, d := rowModelKind("Llama 3 405B", ""); !g || !f || !d {
		t.Error("Llama: want a gated MLP, FlashAttention and no dropout")
	}
	if g, f, d := rowModelKind("GPT 18.4B", "fp16, Megatron-DeepSpeed"); g || f || d {
		t.Error("GPT: want none")
	}
}

// TestCalibrationRowWithoutPreset reads a run from a source the presets do
// not cover (Llama 3 405B's published configuration) from its own columns.
func TestCalibrationRowWithoutPreset(t *testing.T) {
	header := "row_id,group,model,params_B,n_layers,hidden,ffn_hidden,n_heads,n_kv_heads,vocab,seq_len,moe_experts,moe_topk," +
		"global_batch_seqs,micro_batch,n_microbatches,tp,pp,dp,cp,ep,vpp,seq_parallel,recompute,optimizer_sharding,n_devices," +
		"devices_per_node,device,device_peak_tflops_16bit,device_mem_GB,intra_node_link,inter_node_link,measured_step_time_s," +
		"measured_tflops_per_device,measured_util_pct,util_kind,measured_tokens_per_s_per_device,measured_mem_params_opt_GiB," +
		"measured_mem_act_GiB,derived_step_time_s,derived_tokens_per_s_per_device,verified,source,notes\n"
	row := `1,llama3_table4,Llama 3 405B,405,126,16384,53248,128,8,128256,8192,,,2048,1,,8,16,128,1,1,4,yes,none,` +
		`Megatron distributed optimizer,16384,8,NVIDIA H100 80GB HBM3,989,80,NVLink4 + NVSwitch,"8x 400 Gb/s NDR InfiniBand per node",,` +
		`400,41,MFU,,,,,,test,test,` + "\n"
	rows := readCalibration(t, strings.NewReader(header+row), "inline")
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	c, m, p := r.Cluster, r.Model, r.Plan
	if c.Device.Name != ProfileH100 || c.IntraNodeGBps != 450 || c.InterNodeGBps != 50 || c.Devices() != 16384 {
		t.Errorf("cluster %s %g/%g GB/s, %d devices; want h100-sxm 450/50, 16384", c.Device.Name, c.IntraNodeGBps, c.InterNodeGBps, c.Devices())
	}
	if !m.GatedMLP || !m.FlashAttention || !m.NoDropout || m.KVHeads != 8 || p.ZeRO != 1 || p.VPP != 4 || !p.SP {
		t.Errorf("model gated=%v flash=%v kv=%d, plan %s", m.GatedMLP, m.FlashAttention, m.KVHeads, p)
	}
	if e := Evaluate(m, c, p); !(e.StepTimeS > 0) || e.Reason != "" && e.Feasible {
		t.Errorf("evaluate: %+v", e)
	}
}
