package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/ascend/npusmi"
	"github.com/cann-train/cann-train/ascend/ranktable"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errb.String(), err
}

// TestTopoScanProcesses scans three rank processes over loopback TCP: the
// JSON matrix is complete and positive, and the rank table it writes reads
// back valid, then prints through --read-rank-table.
func TestTopoScanProcesses(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "hccl.json")
	out, errs, err := runCLI(t, "topo-scan", "--ranks", "3", "--budget", "300ms", "--bytes", "256K", "--rank-table", table, "-o", "json")
	if err != nil {
		t.Fatalf("topo-scan: %v\n%s", err, errs)
	}
	var rep ScanReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Ranks != 3 || len(rep.LatencyNS) != 3 || len(rep.BytesPerSec) != 3 {
		t.Fatalf("ranks %d, matrices %d×, %d×", rep.Ranks, len(rep.LatencyNS), len(rep.BytesPerSec))
	}
	for i := range 3 {
		if len(rep.LatencyNS[i]) != 3 || len(rep.BytesPerSec[i]) != 3 {
			t.Fatalf("row %d: %d latencies, %d bandwidths", i, len(rep.LatencyNS[i]), len(rep.BytesPerSec[i]))
		}
		for j := range 3 {
			lat, bw := rep.LatencyNS[i][j], rep.BytesPerSec[i][j]
			if i == j {
				if lat != 0 || bw != 0 {
					t.Errorf("diagonal %d: %d ns, %g B/s", i, lat, bw)
				}
				continue
			}
			if lat <= 0 || !(bw > 0) || math.IsInf(bw, 0) {
				t.Errorf("%d->%d: %d ns, %g B/s", i, j, lat, bw)
			}
		}
	}
	if rep.Topology == nil || len(rep.Topology.Hosts) != 1 || len(rep.Topology.Links) != 6 {
		t.Fatalf("topology: %+v", rep.Topology)
	}
	if rep.RankTable == nil || rep.RankTable.File != table || rep.RankTable.Devices == "" || rep.RankTable.Note == "" {
		t.Fatalf("rank table report: %+v", rep.RankTable)
	}
	data, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := ranktable.Parse(data)
	if err != nil {
		t.Fatalf("written rank table does not validate: %v\n%s", err, data)
	}
	if len(tab.Servers) != 1 || tab.RankSize() != 3 || !tab.Ready() || tab.Servers[0].ServerID != rep.Topology.Hosts[0].Host {
		t.Errorf("rank table: %d servers, %d ranks, status %s, server %q", len(tab.Servers), tab.RankSize(), tab.Status, tab.Servers[0].ServerID)
	}

	out, errs, err = runCLI(t, "topo-scan", "--read-rank-table", table)
	if err != nil {
		t.Fatalf("--read-rank-table: %v\n%s", err, errs)
	}
	if !strings.Contains(out, "valid HCCL v1.0") || !strings.Contains(out, "3 rank(s)") {
		t.Errorf("--read-rank-table output:\n%s", out)
	}
}

// TestTopoScanText checks the text report of two-rank scans over both
// transports.
func TestTopoScanText(t *testing.T) {
	for _, tc := range []struct {
		name, transport string
		args            []string
	}{
		{"tcp", "loopback TCP", nil},
		{"shm", "shared memory", []string{"--shm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, err := runCLI(t, append([]string{"topo-scan", "--ranks", "2", "--budget", "200ms", "--bytes", "64K"}, tc.args...)...)
			if err != nil {
				t.Fatalf("topo-scan: %v\n%s", err, errs)
			}
			for _, want := range []string{"topo-scan: 2 ranks over " + tc.transport, "64KiB transfers", "hierarchy:", "intra-host", "latency (µs)", "bandwidth (GB/s)"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestTopoScanReadRankTableErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          []string // substrings of the error
	}{
		{"rank_id not a number", `{"version":"1.0","status":"completed","server_count":"1","server_list":[
			{"server_id":"node_0","device":[{"device_id":"0","device_ip":"10.0.0.1","rank_id":"x"}]}]}`,
			[]string{"server_list[0].device[0].rank_id", `"x" is not a number`}},
		{"duplicate rank", `{"version":"1.0","status":"completed","server_count":"1","server_list":[
			{"server_id":"node_0","device":[{"device_id":"0","rank_id":"0"},{"device_id":"1","rank_id":"0"}]}]}`,
			[]string{"server_list[0].device[1].rank_id", "already used"}},
		{"server_count", `{"version":"1.0","status":"completed","server_count":"2","server_list":[
			{"server_id":"node_0","device":[{"device_id":"0","rank_id":"0"}]}]}`,
			[]string{"server_count", "server_list has 1"}},
		{"version", `{"version":"2.0","status":"completed","rank_count":1,"rank_list":[]}`,
			[]string{"version", `only "1.0" is supported`}},
		{"not JSON", `{"version":"1.0",`, []string{"invalid JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := runCLI(t, "topo-scan", "--read-rank-table", file)
			if err == nil {
				t.Fatal("broken rank table accepted")
			}
			for _, w := range append(tc.want, file) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, _, err := runCLI(t, "topo-scan", "--read-rank-table", filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestTopoScanFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ranks", "0"}, "--ranks"},
		{[]string{"--ranks", "4", "--devices-per-node", "2", "--rank-table", "t.json"}, "--devices-per-node"},
		{[]string{"--devices-per-node", "-1"}, "--devices-per-node"},
		{[]string{"--bytes", "2"}, "--bytes"},
		{[]string{"--budget", "0s"}, "--budget"},
		{[]string{"-o", "yaml"}, "yaml"},
		{[]string{"--read-rank-table", "x.json", "--rank-table", "y.json"}, "cannot be combined"},
		// (Before the scan, not after it.)
		{[]string{"--rank-table", "/nonexistent-dir/t.json"}, "--rank-table /nonexistent-dir/t.json: cannot write there"},
	} {
		_, _, err := runCLI(t, append([]string{"topo-scan"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %s", tc.args, err, tc.want)
		}
	}
}

// npuSmiSamples are the verbatim `npu-smi info` outputs of an Atlas A2
// (910B1) and an A3 host.
func npuSmiSamples(t *testing.T) (info910b, infoA3 []byte) {
	t.Helper()
	var err error
	if info910b, err = os.ReadFile("../../ascend/npusmi/testdata/info_910b1.txt"); err != nil {
		t.Fatal(err)
	}
	if infoA3, err = os.ReadFile("../../ascend/npusmi/testdata/info_a3.txt"); err != nil {
		t.Fatal(err)
	}
	return info910b, infoA3
}

func TestRankTableDevices(t *testing.T) {
	info910b, infoA3 := npuSmiSamples(t)
	parse := func(b []byte) *npusmi.Info {
		info, err := npusmi.ParseInfo(b)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	npus := func(info *npusmi.Info, hccn map[int]string, ranks int, multiHost bool) func() ([]ranktable.NodeDevice, error) {
		return func() ([]ranktable.NodeDevice, error) {
			c, err := npuDevices(info, hccn, ranks, multiHost)
			return c.devices, err
		}
	}
	sick := []byte(strings.Replace(string(info910b), "| OK ", "| Critical ", 1))
	twice := []byte(strings.Replace(string(info910b), "| 1     910B1", "| 0     910B1", 1))
	hccn := parseHCCNConf([]byte("# comment\naddress_0=192.168.100.101\nnetmask_0=255.255.255.0\naddress_1=192.168.101.101\naddress_x=1.2.3.4\naddress_2=bad\n"))
	if len(hccn) != 2 || hccn[0] != "192.168.100.101" || hccn[1] != "192.168.101.101" {
		t.Fatalf("hccn.conf: %v", hccn)
	}
	for _, tc := range []struct {
		name    string
		devs    func() ([]ranktable.NodeDevice, error)
		wantIDs []int
		wantIPs []string
		wantErr string
	}{
		// Virtual devices have no RoCE NIC: no device_ip (the host's address
		// on every device was one device_ip shared, which HCCL and
		// --read-rank-table refuse).
		{"virtual one per rank", func() ([]ranktable.NodeDevice, error) { return virtualDevices(0, 3, false) },
			[]int{0, 1, 2}, []string{"", "", ""}, ""},
		{"virtual 8 per node", func() ([]ranktable.NodeDevice, error) { return virtualDevices(8, 2, false) },
			[]int{0, 1}, []string{"", ""}, ""},
		{"virtual too few", func() ([]ranktable.NodeDevice, error) { return virtualDevices(2, 3, false) },
			nil, nil, "--devices-per-node 2"},
		{"virtual on several servers", func() ([]ranktable.NodeDevice, error) { return virtualDevices(0, 1, true) },
			nil, nil, "HCCL across servers needs"},
		{"910B with hccn.conf", npus(parse(info910b), hccn, 2, true),
			[]int{0, 1}, []string{"192.168.100.101", "192.168.101.101"}, ""},
		// Without hccn.conf: no device_ip (not the host's address, which is
		// not the NPU's RoCE NIC); one server needs none, several do.
		{"A3 phy ids", npus(parse(infoA3), nil, 2, false), []int{0, 1}, []string{"", ""}, ""},
		{"several servers without hccn.conf", npus(parse(infoA3), nil, 2, true), nil, nil, "device(s) [0 1] have no address in /etc/hccn.conf"},
		{"npu-smi too few chips", npus(parse(info910b), nil, 64, false), nil, nil, "64 ranks"},
		{"unhealthy chip left out", npus(parse(sick), nil, 1, false), []int{1}, []string{""}, ""},
		{"too few healthy chips", npus(parse(sick), nil, 2, false), nil, nil, "2 ranks but npu-smi lists 1 healthy chip(s) (not: NPU 0 chip 0 (Critical))"},
		{"npu-smi lists an id twice", npus(parse(twice), nil, 2, false), nil, nil, "npu-smi lists device id 0 twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := tc.devs()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != len(tc.wantIDs) {
				t.Fatalf("%d devices, want %d", len(devs), len(tc.wantIDs))
			}
			for i, d := range devs {
				if d.ID != tc.wantIDs[i] || d.IP != tc.wantIPs[i] {
					t.Errorf("device %d: %+v, want id %d ip %s", i, d, tc.wantIDs[i], tc.wantIPs[i])
				}
			}
		})
	}
}

// TestTopoScanChecksDevicesFirst: a rank table whose devices could not be
// named fails the scan before it measures — an npu-smi that is installed
// but fails (it wrote a "completed" table of made-up devices), too few
// healthy chips, too few virtual devices —; --virtual-devices asks no
// npu-smi.
func TestTopoScanChecksDevicesFirst(t *testing.T) {
	info910b, err := os.ReadFile("../../ascend/npusmi/testdata/info_910b1.txt")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(out string, err error) npusmi.Runner {
		return func(context.Context, string, ...string) ([]byte, error) { return []byte(out), err }
	}
	missing := answer("", exec.ErrNotFound)
	failing := answer("", errors.New("exit status 1: dcmi module initialize failed. ret is -8005"))
	for _, tc := range []struct {
		name  string
		run   npusmi.Runner
		cfg   topoScanConfig
		ranks int
		want  string // "": no error
	}{
		{"no npu-smi", missing, topoScanConfig{}, 4, ""},
		{"no npu-smi, too few virtual devices", missing, topoScanConfig{DevicesPerNode: 2}, 4, "--devices-per-node 2"},
		{"npu-smi fails", failing, topoScanConfig{}, 2, "npu-smi is installed but failed, so the rank table cannot name this host's devices"},
		{"npu-smi prints nothing", answer("", nil), topoScanConfig{}, 2, "npu-smi is installed but failed"},
		{"npu-smi fails, virtual asked", failing, topoScanConfig{Virtual: true}, 2, ""},
		{"910B, 2 chips", answer(string(info910b), nil), topoScanConfig{}, 2, ""},
		{"910B, 3 ranks", answer(string(info910b), nil), topoScanConfig{}, 3, "3 ranks but npu-smi lists 2 chip(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDevices(context.Background(), tc.run, tc.cfg, tc.ranks)
			if tc.want == "" && err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want an error saying %q", err, tc.want)
			}
		})
	}
}
