package npusmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseInfo(t *testing.T) {
	for _, tc := range []struct {
		file           string
		smi, version   string
		chips          []Chip
		procs          []Process
		powerKnownChip []bool
	}{
		{
			file: "info_910b1.txt", smi: "23.0.rc2", version: "23.0.rc2",
			chips: []Chip{
				{NPU: 0, Chip: 0, PhyID: -1, Name: "910B1", Health: "OK", BusID: "0000:C1:00.0", PowerW: 88.4, TempC: 46, HBMUsedMB: 4175, HBMTotalMB: 65536},
				{NPU: 1, Chip: 0, PhyID: -1, Name: "910B1", Health: "OK", BusID: "0000:01:00.0", PowerW: 92.1, TempC: 47, HBMUsedMB: 4175, HBMTotalMB: 65536},
			},
		},
		{
			file: "info_a3.txt", smi: "26.0.rc2", version: "26.0.rc2",
			chips: []Chip{
				{NPU: 0, Chip: 0, PhyID: 0, Name: "Ascend910", Health: "OK", BusID: "0000:9D:00.0", PowerW: 162.6, TempC: 34, HBMUsedMB: 3419, HBMTotalMB: 65536},
				{NPU: 0, Chip: 1, PhyID: 1, Name: "Ascend910", Health: "OK", BusID: "0000:9F:00.0", TempC: 34, HBMUsedMB: 2874, HBMTotalMB: 65536, Unknown: []string{"Power(W)"}},
			},
		},
		{
			file: "info_910b1_procs.txt", smi: "23.0.rc2", version: "23.0.rc2",
			chips: []Chip{
				{NPU: 0, Chip: 0, PhyID: -1, Name: "910B1", Health: "OK", BusID: "0000:C1:00.0", PowerW: 88.4, TempC: 46, HBMUsedMB: 4175, HBMTotalMB: 65536},
				{NPU: 1, Chip: 0, PhyID: -1, Name: "910B1", Health: "OK", BusID: "0000:01:00.0", PowerW: 92.1, TempC: 47, HBMUsedMB: 4175, HBMTotalMB: 65536},
			},
			procs: []Process{{NPU: 0, Chip: 0, PID: 2954741, Name: "python3.8", MemoryMB: 3257}},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			info, err := ParseInfo(fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if info.SMIVersion != tc.smi || info.Version != tc.version {
				t.Errorf("versions %q %q", info.SMIVersion, info.Version)
			}
			if !reflect.DeepEqual(info.Chips, tc.chips) {
				t.Errorf("chips\n got %+v\nwant %+v", info.Chips, tc.chips)
			}
			if !reflect.DeepEqual(info.Processes, tc.procs) {
				t.Errorf("processes %+v, want %+v", info.Processes, tc.procs)
			}
			for _, c := range info.Chips {
				if !c.Health.OK() {
					t.Errorf("chip %d/%d not healthy", c.NPU, c.Chip)
				}
			}
			if _, err := json.Marshal(info); err != nil {
				t.Fatal(err)
			}
		})
	}
	info, _ := ParseInfo(fixture(t, "info_a3.txt"))
	if info.Chips[1].Known("Power(W)") || !info.Chips[0].Known("Power(W)") {
		t.Fatal("Known(Power(W)) wrong")
	}
}

// TestParseInfoVariants covers layouts the samples imply but do not show:
// CRLF line ends, a model name with a space, other health values, unknown
// extra columns, a 310P-like table without HBM.
func TestParseInfoVariants(t *testing.T) {
	base := string(fixture(t, "info_910b1.txt"))
	crlf := strings.ReplaceAll(base, "\n", "\r\n")
	if info, err := ParseInfo([]byte(crlf)); err != nil || len(info.Chips) != 2 {
		t.Fatalf("CRLF: %v", err)
	}
	spaced := strings.Replace(base, "| 0     910B1               | OK     ", "| 0     Ascend 910B1        | Alarm  ", 1)
	info, err := ParseInfo([]byte(spaced))
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Chips[0]; c.Name != "Ascend 910B1" || c.Health != "Alarm" || c.Health.OK() {
		t.Fatalf("got %+v", c)
	}
	noHBM := `+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                   Version: 23.0.0                                                      |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 8       310P3                 | OK              | NA           40                0     / 0             |
| 0       0                     | 0000:01:00.0    | 0            1416 / 44216                            |
+===============================+=================+======================================================+
`
	info, err = ParseInfo([]byte(noHBM))
	if err != nil {
		t.Fatal(err)
	}
	want := Chip{NPU: 8, PhyID: -1, Name: "310P3", Health: "OK", BusID: "0000:01:00.0", TempC: 40, MemoryUsedMB: 1416, MemoryTotalMB: 44216, Unknown: []string{"Power(W)"}}
	if !reflect.DeepEqual(info.Chips[0], want) {
		t.Fatalf("got %+v\nwant %+v", info.Chips[0], want)
	}
}

func TestParseInfoErrors(t *testing.T) {
	base := string(fixture(t, "info_910b1.txt"))
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "no npu-smi table"},
		{"driver error", "dcmi model initialized failed, because the device is used. ret is -8020\n", `line 1: not part of an npu-smi table`},
		{"command not found", "bash: npu-smi: command not found\n", "not part of an npu-smi table"},
		{"no title", strings.Replace(base, "npu-smi 23.0.rc2", "nvidia-smi 535", 1), `line 2: expected the "npu-smi <version>" title`},
		{"title only", strings.Join(strings.Split(base, "\n")[:3], "\n"), "expected two header lines"},
		{"bad header", strings.Replace(base, "| NPU   Name", "| GPU   Name", 1), `line 4: header does not start with "NPU"`},
		{"no health", strings.Replace(base, "| Health        |", "| Status        |", 1), "lacks the Name or Health"},
		{"bad power", strings.Replace(base, "88.4", "8x.4", 1), `line 7: Power(W): "8x.4" is not a number`},
		{"bad id", strings.Replace(base, "| 1     910B1", "| -     910B1", 1), `NPU: - is not an id`},
		{"bad pair", strings.Replace(base, "4175 / 65536", "4175 / 6553x", 1), `HBM-Usage(MB): "4175/6553x" is not used / total`},
		{"missing cell", strings.Replace(base, "| 0000:C1:00.0  |", "|", 1), "line 8: 2 cells, the header has 3"},
		{"extra value", strings.Replace(base, "| 88.4        46 ", "| 88.4   1    46 ", 1), "cell 3 has 4 values"},
		{"lone NPU row", strings.Replace(base, "| 0                         | 0000:01:00.0  | 0           0    / 0          4175 / 65536         |\n", "", 1), "line 10: NPU row without a chip row"},
		{"no devices", strings.Join(strings.Split(base, "\n")[:6], "\n"), "no devices"},
		{"bad process", base + "| NPU Chip | Process id | Process name | Process memory(MB) |\n+---+\n| 0 0 | x | python | 1 |\n", "malformed process row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseInfo([]byte(tc.in))
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseFieldOutputs(t *testing.T) {
	b, err := ParseBoard(fixture(t, "board_910a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if b.NPU != 0 || b.SoftwareVersion != "23.0.5" || b.FirmwareVersion != "7.1.0.7.220" || b.BusID != "0000:61:00.0" ||
		b.PCIDeviceID != "0xD801" || b.ChipCount != 1 || b.Compatibility != "OK" || len(b.Fields) != 15 || b.SoC() != "" {
		t.Fatalf("board %+v", b)
	}
	if v, _ := b.Fields.Get("Class ID"); v != "NA" {
		t.Fatalf("Class ID = %q", v)
	}
	chipBoard := "\tNPU ID                         : 0\n\tChip Type                      : Ascend\n\tChip Name                      : 910B3\n"
	if b, err := ParseBoard([]byte(chipBoard)); err != nil || b.SoC() != "Ascend910B3" {
		t.Fatalf("chip board: %+v %v", b, err)
	}

	u, err := ParseUsage(fixture(t, "usages_910b.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if u.NPU != 0 || u.Chip != 0 || u.ChipCount != 1 || u.HBMCapacityMB != 65536 || u.HBMUsagePercent != 4 || u.AICorePercent != 0 {
		t.Fatalf("usage %+v", u)
	}

	p, err := ParsePower(fixture(t, "power_200ia2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if p.NPU != 0 || p.Chip != 0 || p.PowerW != 9.1 || p.DissipationW != 16.9 {
		t.Fatalf("power %+v", p)
	}
	if v, _ := p.Fields.Get("Chip Name"); v != "MCU" {
		t.Fatalf("Chip Name = %q", v)
	}
	common := "\tChip ID                        : 0\n\tTemperature(C)                 : 41\n\tNPU Real-time Power(W)         : 96.5\n\n\tChip Name                      : mcu\n"
	if p, err := ParsePower([]byte(common)); err != nil || p.PowerW != 96.5 || p.TempC != 41 || p.NPU != -1 {
		t.Fatalf("common: %+v %v", p, err)
	}
}

func TestParseFieldErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func([]byte) error
		in    string
		want  string
	}{
		{"empty", func(b []byte) error { _, err := ParseFields(b); return err }, "\n  \n", "no Key : value lines"},
		{"no colon", func(b []byte) error { _, err := ParseFields(b); return err }, "\tNPU ID : 0\nThis device does not exist\n", `line 2: expected "Key : value"`},
		{"empty key", func(b []byte) error { _, err := ParseFields(b); return err }, " : 3\n", "line 1"},
		{"board neither", func(b []byte) error { _, err := ParseBoard(b); return err }, "Foo : 1\n", `neither "NPU ID" nor "Chip Name"`},
		{"board bad id", func(b []byte) error { _, err := ParseBoard(b); return err }, "NPU ID : x\n", `line 1: NPU ID: "x" is not an integer`},
		{"usage no npu", func(b []byte) error { _, err := ParseUsage(b); return err }, "HBM Capacity(MB) : 1\n", `"NPU ID" missing`},
		{"usage bad rate", func(b []byte) error { _, err := ParseUsage(b); return err }, "NPU ID : 0\nHBM Usage Rate(%) : high\n", `line 2: HBM Usage Rate(%): "high" is not a number`},
		{"power missing", func(b []byte) error { _, err := ParsePower(b); return err }, "NPU ID : 0\n", `"NPU Real-time Power(W)" missing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse([]byte(tc.in))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrFormat containing %q", err, tc.want)
			}
		})
	}
}

func TestParseMapping(t *testing.T) {
	ms, err := ParseMapping(fixture(t, "mapping_910b3.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{NPU: 0, Chip: 0, LogicID: 0, PhyID: -1, Name: "Ascend 910B3"},
		{NPU: 0, Chip: 1, LogicID: -1, PhyID: -1, Name: "Mcu"},
		{NPU: 1, Chip: 0, LogicID: 1, PhyID: -1, Name: "Ascend 910B3"},
		{NPU: 1, Chip: 1, LogicID: -1, PhyID: -1, Name: "Mcu"},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Fatalf("got %+v", ms)
	}
	if !ms[0].Compute() || ms[1].Compute() {
		t.Fatal("Compute")
	}
	phy := "NPU ID  Chip ID  Chip Logic ID  Chip Phy-ID Chip Name\n0 0 0 0 Ascend910\n0 1 1 1 Ascend910\n0 2 - - Mcu\n"
	ms, err = ParseMapping([]byte(phy))
	if err != nil {
		t.Fatal(err)
	}
	if ms[1] != (Mapping{NPU: 0, Chip: 1, LogicID: 1, PhyID: 1, Name: "Ascend910"}) || ms[2].PhyID != -1 || ms[2].Compute() {
		t.Fatalf("got %+v", ms)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty -m output"},
		{"NPU ID  Chip ID  Chip Logic ID  Chip Name\n", "no rows"},
		{"NPU ID  Chip ID  Bus Id\n", `unknown column in the -m header at "Bus Id"`},
		{"Chip ID  NPU ID  Chip Logic ID  Chip Name\n", "want header"},
		{"NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 0\n", "line 2: 2 values for 4 columns"},
		{"NPU ID  Chip ID  Chip Logic ID  Chip Name\n- 0 0 Ascend\n", `NPU ID: "-" is not an id`},
	} {
		if _, err := ParseMapping([]byte(tc.in)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseTopo(t *testing.T) {
	verbatim := string(fixture(t, "topo_910b.txt"))
	if _, err := ParseTopo([]byte(verbatim)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `line 4: row "..." does not name a device`) {
		t.Fatalf("elided sample: %v", err)
	}
	excerpt := strings.Replace(verbatim, "...\n", "", 1)
	if _, err := ParseTopo([]byte(excerpt)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "no row for NPU2") {
		t.Fatalf("excerpt: %v", err)
	}
	// The full 8-way mesh the excerpt stands for (the affinity of the elided
	// rows is invented).
	var full strings.Builder
	for _, l := range strings.SplitAfter(excerpt, "\n")[:3] {
		full.WriteString(l)
	}
	for i := 2; i < 8; i++ {
		fmt.Fprintf(&full, "NPU%d", i)
		for j := 0; j < 8; j++ {
			if i == j {
				full.WriteString("       X   ")
			} else {
				full.WriteString("       HCCS")
			}
		}
		fmt.Fprintf(&full, "       %d-%d\n", 24*i, 24*i+23)
	}
	full.WriteString(verbatim[strings.Index(verbatim, "Legend:"):])
	topo, err := ParseTopo([]byte(full.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Devices) != 8 || topo.Devices[7] != "NPU7" || topo.Link(0, 1) != "HCCS" || topo.Link(3, 3) != "X" ||
		topo.Affinity[0] != "144-167" || topo.Affinity[1] != "0-23" || !topo.FullMesh("HCCS") {
		t.Fatalf("topo %+v", topo)
	}
	topo.Links[2][5] = "PIX"
	if topo.FullMesh("HCCS") {
		t.Fatal("FullMesh with a PIX link")
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty topo output"},
		{"NPU0 NPU1\nNPU0 X HCCS\nNPU0 X HCCS\n", "line 3: second row for NPU0"},
		{"NPU0 NPU1\nNPU0 X\n", "line 2: 1 link types, want 2"},
		{"NPU0 NPU1\nNPU0 HCCS HCCS\n", `NPU0 to itself is "HCCS"`},
		{"NPU0 NPU0\n", "listed twice"},
		{"CPU Affinity\n", "names no devices"},
	} {
		if _, err := ParseTopo([]byte(tc.in)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	canned := func(out string, err error) Runner {
		return func(_ context.Context, name string, args ...string) ([]byte, error) {
			if name != "npu-smi" {
				t.Fatalf("ran %q", name)
			}
			return []byte(out), err
		}
	}
	info, err := Probe(ctx, canned(string(fixture(t, "info_a3.txt")), nil))
	if err != nil || len(info.Chips) != 2 {
		t.Fatalf("Probe: %v", err)
	}
	ms, err := ProbeMapping(ctx, canned(string(fixture(t, "mapping_910b3.txt")), nil))
	if err != nil || len(ms) != 4 {
		t.Fatalf("ProbeMapping: %v", err)
	}
	notFound := &exec.Error{Name: "npu-smi", Err: exec.ErrNotFound}
	if _, err := Probe(ctx, canned("", notFound)); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "npu-smi not found") {
		t.Fatalf("not found: %v", err)
	}
	if _, err := Probe(ctx, canned("", &os.PathError{Op: "fork/exec", Path: "/usr/local/sbin/npu-smi", Err: os.ErrNotExist})); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing path: %v", err)
	}
	boom := errors.New("exit status 255: dcmi init failed")
	if _, err := Probe(ctx, canned("", boom)); !errors.Is(err, boom) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "npu-smi info: exit status 255") {
		t.Fatalf("failure: %v", err)
	}
	if _, err := Probe(ctx, canned("garbage\n", nil)); !errors.Is(err, ErrFormat) {
		t.Fatalf("garbage: %v", err)
	}
}

// TestExecRunner runs the real os/exec path: npu-smi is absent here (and
// if it exists, the test only checks that the call works).
func TestExecRunner(t *testing.T) {
	_, lookErr := exec.LookPath(Command)
	info, err := Probe(context.Background(), nil)
	switch {
	case lookErr != nil && !errors.Is(err, ErrNotFound):
		t.Fatalf("no npu-smi on PATH, Probe = %v, want ErrNotFound", err)
	case lookErr == nil && err != nil:
		t.Logf("npu-smi present but Probe failed: %v", err)
	case lookErr == nil:
		t.Logf("npu-smi: %d chips", len(info.Chips))
	}
	out, err := ExecRunner(context.Background(), "sh", "-c", "echo oops >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3: oops") || len(out) != 0 {
		t.Fatalf("ExecRunner failure: %q %v", out, err)
	}
}

// FuzzParsers: no parser panics on any input, and every error is a
// *ParseError.
func FuzzParsers(f *testing.F) {
	for _, name := range []string{"info_910b1.txt", "info_a3.txt", "info_910b1_procs.txt", "topo_910b.txt", "usages_910b.txt", "board_910a.txt", "power_200ia2.txt", "mapping_910b3.txt"} {
		f.Add(fixture(f, name))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(err error) {
			var pe *ParseError
			if err != nil && !errors.As(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
		}
		info, err := ParseInfo(data)
		check(err)
		if err == nil {
			if _, err := json.Marshal(info); err != nil {
				t.Fatalf("marshal: %v", err)
			}
		}
		_, err = ParseMapping(data)
		check(err)
		_, err = ParseTopo(data)
		check(err)
		_, err = ParseBoard(data)
		check(err)
		_, err = ParseUsage(data)
		check(err)
		_, err = ParsePower(data)
		check(err)
	})
}
