package npusmi

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Info is the parsed output of `npu-smi info`.
type Info struct {
	SMIVersion string      `json:"smi_version"` // "23.0.rc2" from "npu-smi 23.0.rc2"
	Version    string      `json:"version"`     // the driver version after "Version:"
	Chips      []Chip      `json:"chips"`       // one per (NPU, chip), in table order
	Processes  []Process   `json:"processes,omitempty"`
	Columns    [2][]string `json:"-"` // header names of the NPU row and the chip row
}

// Chip is one record of the device table: an NPU row and its chip row. On
// A3 every die is its own record (same NPU id, chip 0 and 1).
type Chip struct {
	NPU    int    `json:"npu"`
	Chip   int    `json:"chip"`
	PhyID  int    `json:"phy_id"` // the Phy-ID column of driver 26.x; -1 when absent
	Name   string `json:"name"`   // model, e.g. "910B1", "Ascend910"
	Health Health `json:"health"`
	BusID  string `json:"bus_id,omitempty"` // PCIe address, "0000:C1:00.0"

	PowerW         float64 `json:"power_w"`
	TempC          float64 `json:"temp_c"`
	AICorePercent  float64 `json:"aicore_percent"`
	HugepagesUsed  int64   `json:"hugepages_used"`
	HugepagesTotal int64   `json:"hugepages_total"`
	MemoryUsedMB   int64   `json:"memory_used_mb"`
	MemoryTotalMB  int64   `json:"memory_total_mb"`
	HBMUsedMB      int64   `json:"hbm_used_mb"`
	HBMTotalMB     int64   `json:"hbm_total_mb"`

	// Unknown lists the columns npu-smi printed as "-" or "NA" (their
	// fields above are zero), e.g. "Power(W)" on the second die of an A3
	// NPU.
	Unknown []string `json:"unknown,omitempty"`
}

// Known reports whether column (a header name such as "Power(W)") had a value.
func (c *Chip) Known(column string) bool { return !slices.Contains(c.Unknown, column) }

// Health is npu-smi's health string: "OK", "Warning", "Alarm", "Critical".
type Health string

// OK reports whether the chip is healthy.
func (h Health) OK() bool { return h == "OK" }

// Process is one row of the process table that follows the device table.
type Process struct {
	NPU      int    `json:"npu"`
	Chip     int    `json:"chip"`
	PID      int    `json:"pid"`
	Name     string `json:"name"`
	MemoryMB int64  `json:"memory_mb"`
}

type srcLine struct {
	n    int
	text string
}

// ParseInfo parses the output of `npu-smi info`.
func ParseInfo(out []byte) (*Info, error) {
	// Cut the output into blocks of "|" lines separated by "+" lines.
	var blocks [][]srcLine
	var cur []srcLine
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, cur)
			cur = nil
		}
	}
	for i, l := range lines(out) {
		t := strings.TrimSpace(l)
		switch {
		case t == "":
			continue
		case strings.HasPrefix(t, "+"):
			flush()
		case strings.HasPrefix(t, "|"):
			cur = append(cur, srcLine{i + 1, t})
		default:
			return nil, lineErr(i+1, l, "not part of an npu-smi table")
		}
	}
	flush()
	if len(blocks) == 0 {
		return nil, &ParseError{Msg: "no npu-smi table in the output"}
	}

	info := &Info{}
	title := blocks[0]
	f := strings.Fields(strings.Join(cells(title[0].text), " "))
	if len(title) != 1 || len(f) < 2 || f[0] != "npu-smi" {
		return nil, lineErr(title[0].n, title[0].text, `expected the "npu-smi <version>" title`)
	}
	info.SMIVersion = f[1]
	if i := slices.Index(f, "Version:"); i >= 0 && i+1 < len(f) {
		info.Version = f[i+1]
	}
	if len(blocks) < 2 || len(blocks[1]) != 2 {
		return nil, lineErr(title[0].n, title[0].text, "expected two header lines after the title")
	}
	var hdr [2][][]string // per header line: per cell: column names
	for k, l := range blocks[1] {
		for _, c := range cells(l.text) {
			hdr[k] = append(hdr[k], strings.Fields(c))
			info.Columns[k] = append(info.Columns[k], strings.Fields(c)...)
		}
	}
	for k, want := range []string{"NPU", "Chip"} {
		if len(hdr[k]) == 0 || len(hdr[k][0]) == 0 || hdr[k][0][0] != want {
			return nil, lineErr(blocks[1][k].n, blocks[1][k].text, "header does not start with %q", want)
		}
	}
	if !slices.Contains(info.Columns[0], "Name") || !slices.Contains(info.Columns[0], "Health") {
		return nil, lineErr(blocks[1][0].n, blocks[1][0].text, "header lacks the Name or Health column")
	}

	procs := false
	for _, b := range blocks[2:] {
		if isProcessHeader(b[0].text) {
			if len(b) != 1 {
				return nil, lineErr(b[1].n, b[1].text, "unexpected line after the process table header")
			}
			procs = true
			continue
		}
		if procs {
			for _, l := range b {
				p, skip, err := parseProcess(l)
				if err != nil {
					return nil, err
				}
				if !skip {
					info.Processes = append(info.Processes, p)
				}
			}
			continue
		}
		// A record: the NPU row, then one row per chip.
		if len(b) < 2 {
			return nil, lineErr(b[0].n, b[0].text, "NPU row without a chip row")
		}
		npu := Chip{PhyID: -1}
		if err := fill(&npu, hdr[0], b[0]); err != nil {
			return nil, err
		}
		for _, l := range b[1:] {
			c := npu
			c.Unknown = slices.Clone(npu.Unknown)
			if err := fill(&c, hdr[1], l); err != nil {
				return nil, err
			}
			info.Chips = append(info.Chips, c)
		}
	}
	if len(info.Chips) == 0 {
		return nil, &ParseError{Msg: "the device table has no devices"}
	}
	return info, nil
}

// cells splits "| a | b |" into trimmed cells. A3 tables omit the closing
// "|" on some lines, so it is optional.
func cells(line string) []string {
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	cs := strings.Split(line, "|")
	for i := range cs {
		cs[i] = strings.TrimSpace(cs[i])
	}
	return cs
}

// values splits a cell into values, joining "a / b" into one "a/b" value.
func values(cell string) []string {
	var vs []string
	f := strings.Fields(cell)
	for i := 0; i < len(f); i++ {
		switch {
		case f[i] == "/" && len(vs) > 0 && i+1 < len(f):
			vs[len(vs)-1] += "/" + f[i+1]
			i++
		default:
			vs = append(vs, f[i])
		}
	}
	return vs
}

// fill assigns the values of one table row to c by the header's column names.
func fill(c *Chip, hdr [][]string, l srcLine) error {
	cs := cells(l.text)
	if len(cs) != len(hdr) {
		return lineErr(l.n, l.text, "%d cells, the header has %d", len(cs), len(hdr))
	}
	for i, names := range hdr {
		vs := values(cs[i])
		if len(vs) > len(names) && len(names) > 0 && names[len(names)-1] == "Name" {
			// A model name with spaces ("Ascend 910B3"): the rest of the cell.
			vs = append(vs[:len(names)-1], strings.Join(vs[len(names)-1:], " "))
		}
		if len(vs) != len(names) {
			return lineErr(l.n, l.text, "cell %d has %d values for columns %s", i+1, len(vs), strings.Join(names, " "))
		}
		for j, name := range names {
			if err := set(c, name, vs[j]); err != nil {
				return lineErr(l.n, l.text, "%s: %v", name, err)
			}
		}
	}
	return nil
}

type valueError string

func (e valueError) Error() string { return string(e) }

func set(c *Chip, name, v string) error {
	switch name {
	case "Name":
		c.Name = v
		return nil
	case "Health":
		c.Health = Health(v)
		return nil
	case "Bus-Id":
		c.BusID = v
		return nil
	}
	if unknown(v) {
		switch name {
		case "NPU", "Chip":
			return valueError(v + " is not an id")
		}
		c.Unknown = append(c.Unknown, name)
		return nil
	}
	var err error
	switch name {
	case "NPU":
		c.NPU, err = id(v)
	case "Chip":
		c.Chip, err = id(v)
	case "Phy-ID":
		c.PhyID, err = id(v)
	case "Power(W)":
		c.PowerW, err = number(v)
	case "Temp(C)":
		c.TempC, err = number(v)
	case "AICore(%)":
		c.AICorePercent, err = number(v)
	case "Hugepages-Usage(page)":
		c.HugepagesUsed, c.HugepagesTotal, err = pair(v)
	case "Memory-Usage(MB)":
		c.MemoryUsedMB, c.MemoryTotalMB, err = pair(v)
	case "HBM-Usage(MB)":
		c.HBMUsedMB, c.HBMTotalMB, err = pair(v)
	}
	// Other columns (future driver versions) are ignored.
	return err
}

func id(v string) (int, error) {
	n, ok := atoi(v)
	if !ok {
		return 0, valueError(strconv.Quote(v) + " is not an id")
	}
	return n, nil
}

func number(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, valueError(strconv.Quote(v) + " is not a number")
	}
	return x, nil
}

func pair(v string) (used, total int64, err error) {
	a, b, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, valueError(strconv.Quote(v) + " is not used / total")
	}
	used, err1 := strconv.ParseInt(a, 10, 64)
	total, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || used < 0 || total < 0 {
		return 0, 0, valueError(strconv.Quote(v) + " is not used / total")
	}
	return used, total, nil
}

func isProcessHeader(line string) bool {
	cs := cells(line)
	return len(cs) >= 2 && strings.HasPrefix(cs[0], "NPU") && strings.HasPrefix(cs[1], "Process id")
}

// parseProcess reads "| 0       0   | 2954741 | python3.8 | 3257 |" or the
// "No running processes found in NPU 0" placeholder (skip = true).
func parseProcess(l srcLine) (p Process, skip bool, err error) {
	cs := cells(l.text)
	if len(cs) == 1 && strings.HasPrefix(cs[0], "No running processes") {
		return Process{}, true, nil
	}
	if len(cs) != 4 {
		return Process{}, false, lineErr(l.n, l.text, "process row has %d cells, want 4", len(cs))
	}
	ids := strings.Fields(cs[0])
	var ok [4]bool
	if len(ids) == 2 {
		p.NPU, ok[0] = atoi(ids[0])
		p.Chip, ok[1] = atoi(ids[1])
	}
	p.PID, ok[2] = atoi(cs[1])
	p.Name = cs[2]
	mem, err := strconv.ParseInt(cs[3], 10, 64)
	p.MemoryMB, ok[3] = mem, err == nil && mem >= 0
	if ok != [4]bool{true, true, true, true} || p.Name == "" {
		return Process{}, false, lineErr(l.n, l.text, "malformed process row")
	}
	return p, false, nil
}
