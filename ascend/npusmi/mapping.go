package npusmi

import (
	"fmt"
	"slices"
	"strings"
)

// Mapping is one row of `npu-smi info -m`: how a chip of an NPU card maps to
// the logical device id runtimes use (ASCEND_RT_VISIBLE_DEVICES, torch.npu).
type Mapping struct {
	NPU     int    `json:"npu"`
	Chip    int    `json:"chip"`
	LogicID int    `json:"logic_id"` // -1 for "-" (the MCU, not a compute device)
	PhyID   int    `json:"phy_id"`   // "Chip Phy-ID" on newer drivers; -1 when absent or "-"
	Name    string `json:"name"`     // "Ascend 910B3", "Mcu"
}

// Compute reports whether the chip is a compute device (has a logic id).
func (m Mapping) Compute() bool { return m.LogicID >= 0 }

// ParseMapping parses `npu-smi info -m`. Header: NPU ID, Chip ID, Chip
// Logic ID, [Chip Phy-ID,] Chip Name; the name is the rest of the row and
// may contain spaces.
func ParseMapping(out []byte) ([]Mapping, error) {
	// The column names contain spaces, so the header is matched against
	// this list instead of split.
	mappingColumns := []string{"NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name"}
	var cols []string
	var ms []Mapping
	for i, l := range lines(out) {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		if cols == nil {
			for rest := t; rest != ""; rest = strings.TrimSpace(rest) {
				j := slices.IndexFunc(mappingColumns, func(c string) bool { return strings.HasPrefix(rest, c) })
				if j < 0 {
					return nil, lineErr(i+1, l, "unknown column in the -m header at %q", rest)
				}
				cols = append(cols, mappingColumns[j])
				rest = rest[len(mappingColumns[j]):]
			}
			if len(cols) < 4 || cols[0] != "NPU ID" || cols[1] != "Chip ID" || cols[len(cols)-1] != "Chip Name" || !slices.Contains(cols, "Chip Logic ID") {
				return nil, lineErr(i+1, l, "want header NPU ID, Chip ID, Chip Logic ID, …, Chip Name")
			}
			continue
		}
		f := strings.Fields(t)
		if len(f) < len(cols) {
			return nil, lineErr(i+1, l, "%d values for %d columns", len(f), len(cols))
		}
		m := Mapping{LogicID: -1, PhyID: -1, Name: strings.Join(f[len(cols)-1:], " ")}
		for k, c := range cols[:len(cols)-1] {
			v := f[k]
			n, ok := atoi(v)
			optional := c == "Chip Logic ID" || c == "Chip Phy-ID"
			if !ok && !(optional && unknown(v)) {
				return nil, lineErr(i+1, l, "%s: %q is not an id", c, v)
			}
			if !ok {
				continue
			}
			switch c {
			case "NPU ID":
				m.NPU = n
			case "Chip ID":
				m.Chip = n
			case "Chip Logic ID":
				m.LogicID = n
			case "Chip Phy-ID":
				m.PhyID = n
			}
		}
		ms = append(ms, m)
	}
	if cols == nil {
		return nil, &ParseError{Msg: "empty -m output"}
	}
	if len(ms) == 0 {
		return nil, &ParseError{Msg: "the -m table has no rows"}
	}
	return ms, nil
}

// Topo is `npu-smi info -t topo`: the link type between every pair of NPUs
// ("X" on the diagonal; HCCS, PIX, PXB, PHB, SYS, … elsewhere) and each
// NPU's CPU affinity.
type Topo struct {
	Devices  []string   `json:"devices"`  // "NPU0", "NPU1", … in header order
	Links    [][]string `json:"links"`    // Links[i][j]: type between Devices[i] and Devices[j]
	Affinity []string   `json:"affinity"` // CPU list per device, e.g. "144-167"; "" when not printed
}

// Link returns the link type between devices i and j.
func (t *Topo) Link(i, j int) string { return t.Links[i][j] }

// FullMesh reports whether every pair of distinct devices is joined by typ
// (e.g. "HCCS" on an 8×910B server).
func (t *Topo) FullMesh(typ string) bool {
	for i := range t.Links {
		for j, l := range t.Links[i] {
			if i != j && l != typ {
				return false
			}
		}
	}
	return true
}

// ParseTopo parses `npu-smi info -t topo`. The table ends at "Legend:" or
// the end of the output; every device of the header must have its row.
func ParseTopo(out []byte) (*Topo, error) {
	t := &Topo{}
	affinity := false
	rowOf := map[string]int{}
	seen := map[int]bool{}
	lastLine := 0
	for i, l := range lines(out) {
		s := strings.TrimSpace(l)
		if s == "" {
			continue
		}
		if strings.HasPrefix(s, "Legend") {
			break
		}
		lastLine = i + 1
		f := strings.Fields(s)
		if t.Devices == nil {
			if n := len(f); n >= 2 && f[n-2] == "CPU" && f[n-1] == "Affinity" {
				f, affinity = f[:n-2], true
			}
			if len(f) == 0 {
				return nil, lineErr(i+1, l, "topo header names no devices")
			}
			for k, d := range f {
				if _, dup := rowOf[d]; dup {
					return nil, lineErr(i+1, l, "device %s listed twice", d)
				}
				rowOf[d] = k
			}
			t.Devices = f
			t.Links = make([][]string, len(f))
			t.Affinity = make([]string, len(f))
			continue
		}
		k, ok := rowOf[f[0]]
		if !ok {
			return nil, lineErr(i+1, l, "row %q does not name a device of the header", f[0])
		}
		if seen[k] {
			return nil, lineErr(i+1, l, "second row for %s", f[0])
		}
		n := len(t.Devices)
		switch {
		case len(f) == 1+n:
		case affinity && len(f) == 2+n:
			t.Affinity[k] = f[n+1]
		default:
			return nil, lineErr(i+1, l, "%d link types, want %d", len(f)-1, n)
		}
		if f[1+k] != "X" {
			return nil, lineErr(i+1, l, "%s to itself is %q, want X", f[0], f[1+k])
		}
		seen[k] = true
		t.Links[k] = f[1 : 1+n]
	}
	if t.Devices == nil {
		return nil, &ParseError{Msg: "empty topo output"}
	}
	for k, d := range t.Devices {
		if !seen[k] {
			return nil, &ParseError{Msg: fmt.Sprintf("no row for %s (the table ends at line %d)", d, lastLine)}
		}
	}
	return t, nil
}
