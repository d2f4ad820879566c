package strategy

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Device is one accelerator. PeakTFLOPS is the dense peak for the training
// data type (FP16/BF16 on accelerators, FP32 on the CPU profile). The two
// efficiencies turn peaks into sustained rates: GEMMs run at
// PeakTFLOPS·GEMMEfficiency, memory-bound (elementwise) kernels stream at
// HBMGBps·MemoryEfficiency.
type Device struct {
	Name             string  `yaml:"name,omitempty" json:"name"`
	PeakTFLOPS       float64 `yaml:"peak_tflops" json:"peak_tflops"`
	MemoryGiB        float64 `yaml:"memory_gib" json:"memory_gib"`
	HBMGBps          float64 `yaml:"hbm_gbps" json:"hbm_gbps"`
	GEMMEfficiency   float64 `yaml:"gemm_efficiency,omitempty" json:"gemm_efficiency"`
	MemoryEfficiency float64 `yaml:"memory_efficiency,omitempty" json:"memory_efficiency"`
	// OpOverheadUs is the exposed fixed cost of one operator (kernel
	// launch, framework dispatch, inter-kernel gap) in µs; it makes many
	// small micro-batches slower than a few large ones.
	OpOverheadUs float64 `yaml:"op_overhead_us,omitempty" json:"op_overhead_us"`
}

// Default efficiencies: the compute and memory factors of Huawei's
// msmodeling device model (tensor_cast, "0.7 compute / 0.6 memory"), used
// for every profile that states nothing better.
const (
	defaultGEMMEfficiency   = 0.7
	defaultMemoryEfficiency = 0.6
	defaultOpOverheadUs     = 20
)

// Profile names. The three Atlas A2 (910B) variants are the msmodeling
// profiles A2_376T_64G, A2_313T_64G and A2_280T_64G; which of 910B1..B4 is
// which is not established, so report Ascend A2 predictions as a band over
// AscendA2Profiles.
const (
	ProfileAscend910A  = "ascend-910a"
	ProfileAtlasA2376T = "atlas-a2-376t"
	ProfileAtlasA2313T = "atlas-a2-313t"
	ProfileAtlasA2280T = "atlas-a2-280t"
	ProfileA100        = "a100-80gb"
	ProfileH100        = "h100-sxm"
	ProfileH200        = "h200-sxm"
	ProfileLocalCPU    = "local-cpu-core"
)

// AscendA2Profiles lists the three Atlas A2 / 910B variants, fastest first.
func AscendA2Profiles() []string {
	return []string{ProfileAtlasA2376T, ProfileAtlasA2313T, ProfileAtlasA2280T}
}

// profile returns a built-in device; ok is false for an unknown name.
// Sources: /work/shared/reference/strategy.md §4 and ascend_and_compute.md.
func profile(name string) (Device, bool) {
	switch canonicalProfile(name) {
	case ProfileAscend910A:
		// 256 TFLOPS FP16 (Huawei launch), 32 GB HBM (ModelArts "Ascend-910(32GB)");
		// HBM bandwidth is unverified: 4 HBM2 stacks, ~1.2 TB/s.
		return Device{Name: ProfileAscend910A, PeakTFLOPS: 256, MemoryGiB: 32, HBMGBps: 1200}, true
	case ProfileAtlasA2376T:
		// msmodeling A2_376T_64G: 376 TFLOPS FP16, 64 GiB at 1.6 TiB/s.
		return Device{Name: ProfileAtlasA2376T, PeakTFLOPS: 376, MemoryGiB: 64, HBMGBps: 1759}, true
	case ProfileAtlasA2313T:
		return Device{Name: ProfileAtlasA2313T, PeakTFLOPS: 313, MemoryGiB: 64, HBMGBps: 1759}, true
	case ProfileAtlasA2280T:
		return Device{Name: ProfileAtlasA2280T, PeakTFLOPS: 280, MemoryGiB: 64, HBMGBps: 1759}, true
	case ProfileA100:
		// 312 TFLOPS BF16 (Narayanan §5), 80 GiB HBM2e at 2039 GB/s. GEMM 0.72
		// and memory 0.8 are calibrated once on the 43 A100 runs of
		// calibration.csv (the same values for every A100 row).
		return Device{Name: ProfileA100, PeakTFLOPS: 312, MemoryGiB: 80, HBMGBps: 2039, GEMMEfficiency: 0.72, MemoryEfficiency: 0.8}, true
	case ProfileH100:
		// 989 TFLOPS dense BF16, 80 GB HBM3 at 3.35 TB/s.
		return Device{Name: ProfileH100, PeakTFLOPS: 989, MemoryGiB: 80, HBMGBps: 3350}, true
	case ProfileH200:
		// Same GH100 compute; "141 GB" HBM3e (nvidia-smi: 143771 MiB ≈ 140 GiB) at 4.8 TB/s.
		return Device{Name: ProfileH200, PeakTFLOPS: 989, MemoryGiB: 140, HBMGBps: 4800}, true
	case ProfileLocalCPU:
		// One core of the project's 2-vCPU AMD EPYC (Zen 5) box: 210 GFLOP/s
		// FP32 AVX-512 FMA peak, half of the 24 GiB RAM, ~14.5 GB/s memcpy.
		// Our Go engine reaches ~45% of peak in GEMMs (archsimd kernel).
		return Device{Name: ProfileLocalCPU, PeakTFLOPS: 0.21, MemoryGiB: 12, HBMGBps: 14.5, GEMMEfficiency: 0.45, MemoryEfficiency: 0.8}, true
	}
	return Device{}, false
}

// canonicalProfile lower-cases name, spells spaces and underscores as
// hyphens and resolves the short names people write for a device.
func canonicalProfile(name string) string {
	n := strings.NewReplacer(" ", "-", "_", "-").Replace(strings.ToLower(strings.TrimSpace(name)))
	// The 910B is missing on purpose: it is one of three profiles (see
	// AscendA2Profiles) and unknownDevice says so.
	switch n {
	case "a100", "a100-80g", "a100-sxm", "a100-sxm4-80gb":
		return ProfileA100
	case "h100", "h100-80gb", "h100-sxm5":
		return ProfileH100
	case "h200", "h200-141gb":
		return ProfileH200
	case "910a", "ascend910a", "ascend-910", "ascend910":
		return ProfileAscend910A
	case "cpu", "local-cpu":
		return ProfileLocalCPU
	}
	return n
}

// unknownDevice says why name is not a profile and which ones are.
func unknownDevice(name string) string {
	msg := fmt.Sprintf("unknown device %q (known: %s", name, strings.Join(Profiles(), ", "))
	if strings.Contains(strings.ToLower(name), "910b") {
		msg += fmt.Sprintf("; a 910B is one of %s: which of 910B1..B4 is which is not published, so pick one or evaluate all three",
			strings.Join(AscendA2Profiles(), ", "))
	}
	return msg
}

// Profiles lists the built-in device profile names, sorted.
func Profiles() []string {
	out := []string{ProfileAscend910A, ProfileAtlasA2376T, ProfileAtlasA2313T, ProfileAtlasA2280T,
		ProfileA100, ProfileH100, ProfileH200, ProfileLocalCPU}
	sort.Strings(out)
	return out
}

// DeviceProfile returns a built-in profile by name, efficiencies defaulted.
func DeviceProfile(name string) (Device, error) {
	d, ok := profile(name)
	if !ok {
		return Device{}, errors.New(unknownDevice(name) + ")")
	}
	return d.withDefaults(), nil
}

func (d Device) withDefaults() Device {
	if d.GEMMEfficiency == 0 {
		d.GEMMEfficiency = defaultGEMMEfficiency
	}
	if d.MemoryEfficiency == 0 {
		d.MemoryEfficiency = defaultMemoryEfficiency
	}
	if d.OpOverheadUs == 0 {
		d.OpOverheadUs = defaultOpOverheadUs
	}
	return d
}

// UnmarshalYAML accepts a profile name ("a100-80gb") or an inline mapping
// (peak_tflops, memory_gib, hbm_gbps, optional name and efficiencies). An
// inline mapping may also start from a profile with `profile: <name>` and
// override some fields.
func (d *Device) UnmarshalYAML(node ast.Node) error {
	line := 0
	if tok := node.GetToken(); tok != nil && tok.Position != nil {
		line = tok.Position.Line
	}
	switch n := node.(type) {
	case *ast.StringNode:
		p, ok := profile(n.Value)
		if !ok {
			return FieldError{Field: "device", Line: line,
				Msg: unknownDevice(n.Value) + "; or give peak_tflops, memory_gib, hbm_gbps inline)"}
		}
		*d = p
		return nil
	case *ast.MappingNode:
		var in struct {
			Profile          string   `yaml:"profile"`
			Name             string   `yaml:"name"`
			PeakTFLOPS       *float64 `yaml:"peak_tflops"`
			MemoryGiB        *float64 `yaml:"memory_gib"`
			HBMGBps          *float64 `yaml:"hbm_gbps"`
			GEMMEfficiency   *float64 `yaml:"gemm_efficiency"`
			MemoryEfficiency *float64 `yaml:"memory_efficiency"`
			OpOverheadUs     *float64 `yaml:"op_overhead_us"`
		}
		if err := yaml.NodeToValue(node, &in, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
			return err
		}
		var out Device
		if in.Profile != "" {
			p, ok := profile(in.Profile)
			if !ok {
				return FieldError{Field: "device.profile", Line: line,
					Msg: unknownDevice(in.Profile) + ")"}
			}
			out = p
		}
		if in.Name != "" {
			out.Name = in.Name
		}
		set := func(dst *float64, v *float64) {
			if v != nil {
				*dst = *v
			}
		}
		set(&out.PeakTFLOPS, in.PeakTFLOPS)
		set(&out.MemoryGiB, in.MemoryGiB)
		set(&out.HBMGBps, in.HBMGBps)
		set(&out.GEMMEfficiency, in.GEMMEfficiency)
		set(&out.MemoryEfficiency, in.MemoryEfficiency)
		set(&out.OpOverheadUs, in.OpOverheadUs)
		if out.Name == "" {
			out.Name = "custom"
		}
		*d = out
		return nil
	}
	return FieldError{Field: "device", Line: line, Msg: "want a profile name or a mapping with peak_tflops, memory_gib, hbm_gbps"}
}

// Cluster is a two-level machine: Nodes nodes of DevicesPerNode devices.
// Bandwidths are GB/s (1e9 B/s) per device, one direction, on the
// intra-node fabric (NVLink/HCCS) and on the scale-out network (IB/RoCE).
// Efficiencies scale them to what large collectives sustain; latencies are
// per ring step.
type Cluster struct {
	Name           string  `yaml:"name" json:"name"`
	Nodes          int     `yaml:"nodes" json:"nodes"`
	DevicesPerNode int     `yaml:"devices_per_node" json:"devices_per_node"`
	Device         Device  `yaml:"device" json:"device"`
	IntraNodeGBps  float64 `yaml:"intra_node_gbps" json:"intra_node_gbps"`
	InterNodeGBps  float64 `yaml:"inter_node_gbps" json:"inter_node_gbps"`
	// Per-step latencies in µs; defaults 2 (intra) and 5 (inter), the
	// order of NCCL's NVLink and network ring step latencies.
	IntraNodeLatencyUs float64 `yaml:"intra_node_latency_us,omitempty" json:"intra_node_latency_us"`
	InterNodeLatencyUs float64 `yaml:"inter_node_latency_us,omitempty" json:"inter_node_latency_us"`
	// Link efficiencies; default 0.7 (msmodeling's "comm" factor).
	IntraNodeEfficiency float64 `yaml:"intra_node_efficiency,omitempty" json:"intra_node_efficiency"`
	InterNodeEfficiency float64 `yaml:"inter_node_efficiency,omitempty" json:"inter_node_efficiency"`
	// ReservedGiB is device memory the planner never hands out (runtime
	// context, communication buffers, allocator fragmentation); default
	// 2 GiB + 5% of device memory.
	ReservedGiB float64 `yaml:"reserved_gib,omitempty" json:"reserved_gib"`
}

const (
	defaultIntraLatencyUs = 2
	defaultInterLatencyUs = 5
	defaultLinkEfficiency = 0.7
	maxNodes              = 1 << 20
	maxDevicesPerNode     = 1 << 10
)

// Devices is Nodes·DevicesPerNode.
func (c Cluster) Devices() int { return c.Nodes * c.DevicesPerNode }

// WithDefaults fills optional fields.
func (c Cluster) WithDefaults() Cluster {
	c.Device = c.Device.withDefaults()
	if c.IntraNodeLatencyUs == 0 {
		c.IntraNodeLatencyUs = defaultIntraLatencyUs
	}
	if c.InterNodeLatencyUs == 0 {
		c.InterNodeLatencyUs = defaultInterLatencyUs
	}
	if c.IntraNodeEfficiency == 0 {
		c.IntraNodeEfficiency = defaultLinkEfficiency
	}
	if c.InterNodeEfficiency == 0 {
		c.InterNodeEfficiency = defaultLinkEfficiency
	}
	if c.ReservedGiB == 0 {
		c.ReservedGiB = 2 + 0.05*c.Device.MemoryGiB
	}
	return c
}

// Validate checks a defaulted cluster and returns a *SpecError.
func (c Cluster) Validate() error {
	var p problems
	if c.Name == "" {
		p.add("name", "required: a cluster name such as a100-64")
	}
	if c.Nodes < 1 || c.Nodes > maxNodes {
		p.add("nodes", "%d out of range 1..%d", c.Nodes, maxNodes)
	}
	if c.DevicesPerNode < 1 || c.DevicesPerNode > maxDevicesPerNode {
		p.add("devices_per_node", "%d out of range 1..%d", c.DevicesPerNode, maxDevicesPerNode)
	}
	pos := func(field string, v, limit float64) {
		if !(v > 0 && v <= limit) {
			p.add(field, "%g out of range (0, %g]", v, limit)
		}
	}
	pos("device.peak_tflops", c.Device.PeakTFLOPS, 1e6)
	pos("device.memory_gib", c.Device.MemoryGiB, 1e6)
	pos("device.hbm_gbps", c.Device.HBMGBps, 1e6)
	pos("device.gemm_efficiency", c.Device.GEMMEfficiency, 1)
	pos("device.memory_efficiency", c.Device.MemoryEfficiency, 1)
	pos("device.op_overhead_us", c.Device.OpOverheadUs, 1e6)
	// One device per node has no intra-node link; a devices_per_node that
	// is itself wrong says nothing, and the link is checked too.
	if c.DevicesPerNode != 1 || c.IntraNodeGBps != 0 {
		pos("intra_node_gbps", c.IntraNodeGBps, 1e6)
	}
	if c.Nodes > 1 || c.InterNodeGBps != 0 {
		pos("inter_node_gbps", c.InterNodeGBps, 1e6)
	}
	pos("intra_node_latency_us", c.IntraNodeLatencyUs, 1e6)
	pos("inter_node_latency_us", c.InterNodeLatencyUs, 1e6)
	pos("intra_node_efficiency", c.IntraNodeEfficiency, 1)
	pos("inter_node_efficiency", c.InterNodeEfficiency, 1)
	if !(c.ReservedGiB > 0 && (c.ReservedGiB < c.Device.MemoryGiB || !(c.Device.MemoryGiB > 0))) { // a bad memory_gib is said above
		p.add("reserved_gib", "%g out of range (0, device.memory_gib)", c.ReservedGiB)
	}
	return p.err("cluster " + c.Name)
}

// LoadCluster reads, decodes strictly, defaults and validates a cluster file.
func LoadCluster(path string) (Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Cluster{}, fmt.Errorf("read cluster spec: %w", err)
	}
	return ParseCluster(path, data)
}

// What the link bandwidths mean, as the cost model uses them (see
// Cluster): GB/s that one device sends in one direction, not a node's
// total — on a DGX A100, 8 × 200 Gb/s HDR per node is 25 GB/s per GPU.
const (
	IntraNodeGBpsMeaning = "each device's bandwidth to the other devices of its node (NVLink/HCCS) in GB/s per device, one direction"
	InterNodeGBpsMeaning = "each device's scale-out network bandwidth (IB/RoCE) in GB/s per device, one direction: " +
		"a node's NIC total divided by its devices (8 × 200 Gb/s per 8-GPU node: 25)"
)

// clusterRequired names the fields a cluster file must give (the links
// only where it has them: Validate asks for them then).
var clusterRequired = map[string]string{
	"nodes": "the number of nodes", "devices_per_node": "devices (NPUs, GPUs) per node",
	"intra_node_gbps":    IntraNodeGBpsMeaning,
	"inter_node_gbps":    InterNodeGBpsMeaning,
	"device.peak_tflops": "the device's dense peak TFLOP/s at the training precision",
	"device.memory_gib":  "the device's memory in GiB", "device.hbm_gbps": "the device's memory bandwidth in GB/s",
}

// ParseCluster decodes a cluster spec; name is used in errors. The device is
// a profile name (see Profiles) or an inline mapping. A file that is not
// one YAML document (empty, or a second one after "---") is refused as
// such.
func ParseCluster(name string, data []byte) (Cluster, error) {
	if err := oneDocument(name, data, clusterWants); err != nil {
		return Cluster{}, err
	}
	return parseCluster(name, data, maxDecodePasses)
}

// clusterWants is what an empty cluster file is told to give.
const clusterWants = "a cluster spec gives at least name, nodes, devices_per_node, device and the link bandwidths " +
	"(`cann-train search --show-preset vtrain_a100_64` prints one to start from)"

func parseCluster(name string, data []byte, passes int) (Cluster, error) {
	file, perr := parser.ParseBytes(data, 0)
	if perr != nil {
		file = nil
	}
	var c Cluster
	strict, unknown := decodeAll(name, data, file, &c)
	if se := (*SpecError)(nil); strict != nil && !unknown && errors.As(strict, &se) {
		return Cluster{}, goOnPast(name, file, se, passes, func(b []byte, n int) error { _, err := parseCluster(name, b, n); return err })
	}
	if strict != nil && !unknown {
		return Cluster{}, strict
	}
	if lineOf(file, "device") == 0 && c.Device == (Device{}) {
		return Cluster{}, joinProblems(name, strict, &SpecError{File: name, Fields: []FieldError{{Field: "device", Msg: "required: a profile name or a mapping with peak_tflops, memory_gib, hbm_gbps"}}})
	}
	// A defaulted field written as 0 would take its default unseen: 0 is
	// out of its range, as Validate says of any other value there.
	var zeros problems
	for _, f := range []struct {
		field string
		v     float64
	}{
		{"reserved_gib", c.ReservedGiB}, {"intra_node_latency_us", c.IntraNodeLatencyUs}, {"inter_node_latency_us", c.InterNodeLatencyUs},
		{"intra_node_efficiency", c.IntraNodeEfficiency}, {"inter_node_efficiency", c.InterNodeEfficiency},
		{"device.gemm_efficiency", c.Device.GEMMEfficiency}, {"device.memory_efficiency", c.Device.MemoryEfficiency},
		{"device.op_overhead_us", c.Device.OpOverheadUs},
	} {
		if f.v == 0 && lineOf(file, f.field) > 0 && !isNull(file, f.field) {
			zeros.add(f.field, "0 is out of range: leave it out for the default")
		}
	}
	c = c.WithDefaults()
	if err := joinProblems(name, strict, withLines(zeros.err(name), name, file), withLines(nulls(absent(c.Validate(), file, clusterRequired, nil), file, clusterRequired), name, file)); err != nil {
		return Cluster{}, err
	}
	return c, nil
}
