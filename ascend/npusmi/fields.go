package npusmi

import (
	"strconv"
	"strings"
)

// Field is one "Key : value" line of the `npu-smi info -t <type>` outputs.
type Field struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Line  int    `json:"-"` // 1-based line number in the output
}

// Fields is the ordered content of a "Key : value" output. A key can repeat
// (a second block describes the MCU); lookups return the first occurrence.
type Fields []Field

// ParseFields parses the "\tKey padded with spaces : value" layout shared by
// `npu-smi info -t board|usages|power|common|…`. Blank lines separate
// blocks and are skipped; any other line without a colon is an error.
func ParseFields(out []byte) (Fields, error) {
	var fs Fields
	for i, l := range lines(out) {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		k, v, ok := strings.Cut(t, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, lineErr(i+1, l, `expected "Key : value"`)
		}
		fs = append(fs, Field{Key: k, Value: v, Line: i + 1})
	}
	if len(fs) == 0 {
		return nil, &ParseError{Msg: "no Key : value lines in the output"}
	}
	return fs, nil
}

// Get returns the value of the first field named key.
func (fs Fields) Get(key string) (string, bool) {
	for _, f := range fs {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

func (fs Fields) field(key string) (Field, bool) {
	for _, f := range fs {
		if f.Key == key {
			return f, true
		}
	}
	return Field{}, false
}

// getters collects the first conversion error, so the typed parsers read
// like a list of assignments.
type getters struct {
	fs  Fields
	err error
}

func (g *getters) fail(f Field, what string) {
	if g.err == nil {
		g.err = lineErr(f.Line, f.Key+" : "+f.Value, "%s: %q is not %s", f.Key, f.Value, what)
	}
}

func (g *getters) str(key string) string {
	v, _ := g.fs.Get(key)
	return v
}

// int reads an optional non-negative integer; absent or "NA" gives def.
func (g *getters) int(key string, def int) int {
	f, ok := g.fs.field(key)
	if !ok || unknown(f.Value) {
		return def
	}
	n, ok := atoi(f.Value)
	if !ok {
		g.fail(f, "an integer")
	}
	return n
}

func (g *getters) float(key string) float64 {
	f, ok := g.fs.field(key)
	if !ok || unknown(f.Value) {
		return 0
	}
	x, err := number(f.Value)
	if err != nil {
		g.fail(f, "a number")
	}
	return x
}

func (g *getters) require(keys ...string) {
	for _, k := range keys {
		if _, ok := g.fs.Get(k); !ok && g.err == nil {
			g.err = &ParseError{Msg: strconv.Quote(k) + " missing from the output"}
		}
	}
}

// Board is `npu-smi info -t board -i <npu>` (NPU level; with -c <chip> the
// chip-level keys Chip Name etc. appear instead and are kept in Fields).
type Board struct {
	NPU               int    `json:"npu"` // -1 when absent (chip-level form)
	SoftwareVersion   string `json:"software_version,omitempty"`
	FirmwareVersion   string `json:"firmware_version,omitempty"`
	Compatibility     string `json:"compatibility,omitempty"`
	BoardID           string `json:"board_id,omitempty"` // hex, "0x02"
	BusID             string `json:"bus_id,omitempty"`   // "PCIe Bus Info"
	PCIVendorID       string `json:"pci_vendor_id,omitempty"`
	PCIDeviceID       string `json:"pci_device_id,omitempty"`
	SubsystemVendorID string `json:"subsystem_vendor_id,omitempty"`
	SubsystemDeviceID string `json:"subsystem_device_id,omitempty"`
	ChipCount         int    `json:"chip_count"`
	ChipName          string `json:"chip_name,omitempty"` // chip-level form: "910A", "910B3"
	Fields            Fields `json:"fields"`              // everything, in order
}

// SoC returns the SoC version build scripts derive from Chip Name
// ("Ascend" + "910B3"), or "" when the output has no chip name.
func (b *Board) SoC() string {
	if b.ChipName == "" {
		return ""
	}
	return "Ascend" + b.ChipName
}

// ParseBoard parses `npu-smi info -t board`.
func ParseBoard(out []byte) (*Board, error) {
	fs, err := ParseFields(out)
	if err != nil {
		return nil, err
	}
	g := &getters{fs: fs}
	b := &Board{
		NPU:               g.int("NPU ID", -1),
		SoftwareVersion:   g.str("Software Version"),
		FirmwareVersion:   g.str("Firmware Version"),
		Compatibility:     g.str("Compatibility"),
		BoardID:           g.str("Board ID"),
		BusID:             g.str("PCIe Bus Info"),
		PCIVendorID:       g.str("PCI Vendor ID"),
		PCIDeviceID:       g.str("PCI Device ID"),
		SubsystemVendorID: g.str("Subsystem Vendor ID"),
		SubsystemDeviceID: g.str("Subsystem Device ID"),
		ChipCount:         g.int("Chip Count", 0),
		ChipName:          g.str("Chip Name"),
		Fields:            fs,
	}
	if b.NPU < 0 && b.ChipName == "" && g.err == nil {
		g.err = &ParseError{Msg: `neither "NPU ID" nor "Chip Name" in the board output`}
	}
	if g.err != nil {
		return nil, g.err
	}
	return b, nil
}

// Usage is `npu-smi info -t usages -i <npu>`.
type Usage struct {
	NPU                      int     `json:"npu"`
	Chip                     int     `json:"chip"`
	ChipCount                int     `json:"chip_count"`
	HBMCapacityMB            int     `json:"hbm_capacity_mb"`
	HBMUsagePercent          float64 `json:"hbm_usage_percent"`
	HBMBandwidthUsagePercent float64 `json:"hbm_bandwidth_usage_percent"`
	DDRCapacityMB            int     `json:"ddr_capacity_mb"`
	DDRUsagePercent          float64 `json:"ddr_usage_percent"`
	AICorePercent            float64 `json:"aicore_percent"`
	AIVectorPercent          float64 `json:"aivector_percent"`
	AICPUPercent             float64 `json:"aicpu_percent"`
	CtrlCPUPercent           float64 `json:"ctrlcpu_percent"`
	Fields                   Fields  `json:"fields"`
}

// ParseUsage parses `npu-smi info -t usages`.
func ParseUsage(out []byte) (*Usage, error) {
	fs, err := ParseFields(out)
	if err != nil {
		return nil, err
	}
	g := &getters{fs: fs}
	g.require("NPU ID")
	u := &Usage{
		NPU:                      g.int("NPU ID", -1),
		Chip:                     g.int("Chip ID", 0),
		ChipCount:                g.int("Chip Count", 0),
		HBMCapacityMB:            g.int("HBM Capacity(MB)", 0),
		HBMUsagePercent:          g.float("HBM Usage Rate(%)"),
		HBMBandwidthUsagePercent: g.float("HBM Bandwidth Usage Rate(%)"),
		DDRCapacityMB:            g.int("DDR Capacity(MB)", 0),
		DDRUsagePercent:          g.float("DDR Usage Rate(%)"),
		AICorePercent:            g.float("Aicore Usage Rate(%)"),
		AIVectorPercent:          g.float("Aivector Usage Rate(%)"),
		AICPUPercent:             g.float("Aicpu Usage Rate(%)"),
		CtrlCPUPercent:           g.float("Ctrlcpu Usage Rate(%)"),
		Fields:                   fs,
	}
	if g.err != nil {
		return nil, g.err
	}
	return u, nil
}

// Power is `npu-smi info -t power -i <npu>`; the same key appears in
// `-t common`, which ParsePower also accepts.
type Power struct {
	NPU          int     `json:"npu"` // -1 when absent (-t common)
	Chip         int     `json:"chip"`
	PowerW       float64 `json:"power_w"`                 // "NPU Real-time Power(W)"
	DissipationW float64 `json:"dissipation_w,omitempty"` // "Power Dissipation(W)", when printed
	TempC        float64 `json:"temp_c,omitempty"`        // "Temperature(C)" (-t common)
	Fields       Fields  `json:"fields"`
}

// ParsePower parses `npu-smi info -t power` (or `-t common`).
func ParsePower(out []byte) (*Power, error) {
	fs, err := ParseFields(out)
	if err != nil {
		return nil, err
	}
	g := &getters{fs: fs}
	g.require("NPU Real-time Power(W)")
	p := &Power{
		NPU:          g.int("NPU ID", -1),
		Chip:         g.int("Chip ID", 0),
		PowerW:       g.float("NPU Real-time Power(W)"),
		DissipationW: g.float("Power Dissipation(W)"),
		TempC:        g.float("Temperature(C)"),
		Fields:       fs,
	}
	if g.err != nil {
		return nil, g.err
	}
	return p, nil
}
