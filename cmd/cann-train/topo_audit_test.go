package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// refTable is the reference's two-server rank table
// (ascend_and_compute.md §a.1).
const refTable = `{"version":"1.0","status":"completed","server_count":"2","server_list":[
 {"server_id":"node_0","device":[{"device_id":"0","device_ip":"192.168.1.8","rank_id":"0"},{"device_id":"1","device_ip":"192.168.1.9","rank_id":"1"}],"host_nic_ip":"reserve"},
 {"server_id":"node_1","device":[{"device_id":"0","device_ip":"192.168.2.8","rank_id":"2"},{"device_id":"1","device_ip":"192.168.2.9","rank_id":"3"}],"host_nic_ip":"reserve"}]}`

// TestTopoReadRankTableAudit: what --read-rank-table refuses beyond
// ranktable.Parse, and how it words what Parse refuses.
func TestTopoReadRankTableAudit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, old, new string
		want           []string // "": valid
	}{
		{"reference", "", "", nil},
		{"device_ip on two servers", `"192.168.2.8"`, `"192.168.1.8"`,
			[]string{`server_list[1].device[0].device_ip: "192.168.1.8" already used by server_list[0].device[0]`}},
		{"device_ip twice on one server", `"192.168.1.9"`, `"192.168.1.8"`,
			[]string{`server_list[0].device[1].device_ip: "192.168.1.8" already used by server_list[0].device[0]`}},
		{"negative rank", `"rank_id":"0"`, `"rank_id":"-1"`,
			[]string{`server_list[0].device[0].rank_id: "-1" is negative: want a whole number, 0 or more`}},
		{"misspelt key", `"device_ip":"192.168.1.8"`, `"devcie_ip":"192.168.1.8"`,
			[]string{"server_list[0].device[0].devcie_ip: unknown key; did you mean device_ip"}},
		{"misspelt top key", `"server_count"`, `"server_cont"`,
			[]string{"server_cont: unknown key; did you mean server_count?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			if err := os.WriteFile(file, []byte(strings.Replace(refTable, tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _, err := runCLI(t, "topo-scan", "--read-rank-table", file)
			if tc.want == nil {
				if err != nil || !strings.Contains(out, "valid HCCL v1.0") {
					t.Fatalf("%v\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestTopoScanAudit: the device flags need a rank table, and the memory
// check prices the probe's --bytes.
func TestTopoScanAudit(t *testing.T) {
	for _, args := range [][]string{{"--virtual-devices"}, {"--devices-per-node", "8"}} {
		_, _, err := runCLI(t, append([]string{"topo-scan", "--ranks", "2"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]+" describes the devices of the rank table: it needs --rank-table FILE") {
			t.Errorf("%v without --rank-table: %v", args, err)
		}
	}
	o := topoBenchOptions(64, 4<<20, false, nil, nil)
	if o.MaxBytes != 4<<20 || o.MinBytes != 4<<20 || o.Ranks != 64 {
		t.Errorf("bench options %+v: want --bytes (4M) priced for 64 ranks", o)
	}
}
