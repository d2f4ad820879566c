package launch

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/spec"
)

func twoNodes(l Launcher) World {
	return World{
		Launcher: l, RunID: "run/ddp",
		Nodes:        []Node{{ID: "node-1", Host: "10.0.0.1"}, {ID: "node-2", Host: "10.0.0.2", DeviceIPs: []string{"192.168.2.8", "192.168.2.9"}}},
		ProcsPerNode: 2, MasterPort: 29500, RestartCount: 1, MaxRestarts: 3,
		RankTableFile: "/work/rank_table.json",
		ErrorFile:     func(rank int) string { return "/logs/rank-" + itoa(rank) + ".error.json" },
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestTorchrunContract: the variables torch.distributed.run's local
// elastic agent exports (torch 1.13 local_elastic_agent._start_workers),
// for node 1 of 2 × 2: global ranks 2 and 3.
func TestTorchrunContract(t *testing.T) {
	procs, err := Procs(twoNodes(Torchrun), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 {
		t.Fatalf("%d processes", len(procs))
	}
	for i, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"rank-2", map[string]string{
			"LOCAL_RANK": "0", "RANK": "2", "GROUP_RANK": "1", "ROLE_RANK": "2", "ROLE_NAME": "default",
			"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
			"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "run/ddp",
			"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_ERROR_FILE": "/logs/rank-2.error.json",
		}},
		{"rank-3", map[string]string{
			"LOCAL_RANK": "1", "RANK": "3", "GROUP_RANK": "1", "ROLE_RANK": "3", "ROLE_NAME": "default",
			"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
			"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "run/ddp",
			"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_ERROR_FILE": "/logs/rank-3.error.json",
		}},
	} {
		p := procs[i]
		if p.Name != tc.name || p.Rank != 2+i || p.LocalRank != i {
			t.Errorf("process %d: %s rank %d local %d", i, p.Name, p.Rank, p.LocalRank)
		}
		if !maps.Equal(p.Env, tc.env) {
			t.Errorf("%s env\n got %v\nwant %v", tc.name, p.Env, tc.env)
		}
		want := map[string]string{"OMP_NUM_THREADS": "1", "NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
		if !maps.Equal(p.Defaults, want) {
			t.Errorf("%s defaults %v", tc.name, p.Defaults)
		}
	}
	// One process per node: torchrun leaves OMP_NUM_THREADS alone.
	w := twoNodes(Torchrun)
	w.ProcsPerNode = 1
	procs, _ = Procs(w, 0)
	if _, ok := procs[0].Defaults["OMP_NUM_THREADS"]; ok || procs[0].Env["WORLD_SIZE"] != "2" || procs[0].Env["RANK"] != "0" {
		t.Errorf("1 proc/node: %+v", procs[0])
	}
}

// TestAscendContract: RANK_TABLE_FILE, RANK_ID/RANK_SIZE, DEVICE_ID and
// ASCEND_DEVICE_ID per process, HCCL_CONNECT_TIMEOUT within [120, 7200],
// and the torch rendezvous variables torch_npu scripts read.
func TestAscendContract(t *testing.T) {
	procs, err := Procs(twoNodes(Ascend), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"RANK_TABLE_FILE": "/work/rank_table.json", "RANK_ID": "3", "RANK_SIZE": "4",
		"DEVICE_ID": "1", "ASCEND_DEVICE_ID": "1",
		"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
	}
	if !maps.Equal(procs[1].Env, want) {
		t.Errorf("rank-3 env\n got %v\nwant %v", procs[1].Env, want)
	}
	if to := procs[1].Defaults["HCCL_CONNECT_TIMEOUT"]; to != "600" {
		t.Errorf("HCCL_CONNECT_TIMEOUT %q", to)
	}
	// The rank table: one server per node, ranks contiguous per server,
	// device IPs from the node or its host address.
	tab, err := RankTable(twoNodes(Ascend))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tab.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ranktable.Parse(b)
	if err != nil {
		t.Fatalf("our table does not parse back: %v\n%s", err, b)
	}
	if back.RankSize() != 4 || len(back.Servers) != 2 || back.Servers[1].ServerID != "node-2" {
		t.Fatalf("table %+v", back)
	}
	for rank, want := range []struct {
		server   int
		deviceID int
		ip       string
	}{{0, 0, "10.0.0.1"}, {0, 1, "10.0.0.1"}, {1, 0, "192.168.2.8"}, {1, 1, "192.168.2.9"}} {
		s, d, ok := back.Lookup(rank)
		if !ok || s != want.server || d.DeviceID != want.deviceID || d.DeviceIP != want.ip {
			t.Errorf("rank %d → server %d device %+v, want %+v", rank, s, d, want)
		}
		// RANK_ID/DEVICE_ID of the process agree with the table.
		ps, _ := Procs(twoNodes(Ascend), s)
		p := ps[rank%2]
		if p.Env["RANK_ID"] != itoa(rank) || p.Env["DEVICE_ID"] != itoa(d.DeviceID) {
			t.Errorf("rank %d: RANK_ID %s DEVICE_ID %s vs table device %d", rank, p.Env["RANK_ID"], p.Env["DEVICE_ID"], d.DeviceID)
		}
	}
	if !strings.Contains(string(b), `"server_count": "2"`) || !strings.Contains(string(b), `"host_nic_ip": "reserve"`) {
		t.Errorf("table layout:\n%s", b)
	}
	// A multi-node table needs device addresses: a host name is refused.
	w := twoNodes(Ascend)
	w.Nodes[0].Host = "gpu-1.example"
	if _, err := RankTable(w); err == nil {
		t.Error("rank table with a host name and no device IPs accepted")
	}
}

// TestMSRunContract: msrun with --node_rank: a scheduler (MS_ROLE
// MS_SCHED, RANK_ID 0) on the master node, then MS_WORKER processes with
// MS_NODE_ID = RANK_ID = node_rank × local_worker_num + i.
func TestMSRunContract(t *testing.T) {
	p0, err := Procs(twoNodes(MSRun), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p0) != 3 || p0[0].Name != "scheduler" || p0[0].Rank != -1 {
		t.Fatalf("node 0 processes %+v", p0)
	}
	common := map[string]string{"MS_SCHED_HOST": "10.0.0.1", "MS_SCHED_PORT": "29500", "MS_WORKER_NUM": "4", "RANK_SIZE": "4"}
	sched := maps.Clone(common)
	sched["MS_ROLE"], sched["RANK_ID"] = "MS_SCHED", "0"
	if !maps.Equal(p0[0].Env, sched) {
		t.Errorf("scheduler env %v", p0[0].Env)
	}
	p1, _ := Procs(twoNodes(MSRun), 1)
	if len(p1) != 2 {
		t.Fatalf("node 1 runs %d processes (no scheduler there)", len(p1))
	}
	w3 := maps.Clone(common)
	w3["MS_ROLE"], w3["MS_NODE_ID"], w3["RANK_ID"] = "MS_WORKER", "3", "3"
	if !maps.Equal(p1[1].Env, w3) {
		t.Errorf("rank-3 env %v", p1[1].Env)
	}
	if p1[1].Defaults["MS_TOPO_TIMEOUT"] != "600" {
		t.Errorf("MS_TOPO_TIMEOUT %v", p1[1].Defaults)
	}
}

// TestContractsMatchSpec: the variables a job's env may not set (spec,
// checked at submit time with YAML lines) are exactly each launcher's
// contract.
func TestContractsMatchSpec(t *testing.T) {
	for _, l := range []Launcher{Torchrun, Ascend, MSRun} {
		keys := map[string]bool{}
		for nr := range 2 {
			ps, err := Procs(twoNodes(l), nr)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				for k := range p.Env {
					keys[k] = true
				}
			}
		}
		got := slices.Sorted(maps.Keys(keys))
		want := slices.Sorted(slices.Values(spec.LauncherEnv(string(l))))
		if !slices.Equal(got, want) {
			t.Errorf("%s: contract sets %v; spec.LauncherEnv reserves %v", l, got, want)
		}
	}
}

func TestEnvironLayers(t *testing.T) {
	p := Proc{Env: map[string]string{"RANK": "1"}, Defaults: map[string]string{"OMP_NUM_THREADS": "1", "X": "d"}}
	env := Environ([]string{"PATH=/bin", "RANK=9", "X=base"}, p, map[string]string{"OMP_NUM_THREADS": "4"},
		map[string]string{"CANN_TRAIN_RANK": "1"})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("duplicate %s", k)
		}
		got[k] = v
	}
	want := map[string]string{"PATH": "/bin", "RANK": "1", "X": "base", "OMP_NUM_THREADS": "4", "CANN_TRAIN_RANK": "1"}
	if !maps.Equal(got, want) {
		t.Errorf("environ %v, want %v", got, want)
	}
}

func TestWorldValidate(t *testing.T) {
	for _, mut := range []func(*World){
		func(w *World) { w.Launcher = "mpirun" },
		func(w *World) { w.Nodes = nil },
		func(w *World) { w.ProcsPerNode = 0 },
		func(w *World) { w.MasterPort = 0 },
		func(w *World) { w.Nodes[1].Host = "" },
		func(w *World) { w.RankTableFile = "" },
	} {
		w := twoNodes(Ascend)
		mut(&w)
		if _, err := Procs(w, 0); err == nil {
			t.Errorf("accepted %+v", w)
		}
	}
	if _, err := Procs(twoNodes(Torchrun), 2); err == nil {
		t.Error("node rank 2 of 2 accepted")
	}
}

// TestAscendDeviceIDs: a node that names its NPUs gives local rank i the
// i-th as DEVICE_ID, ASCEND_DEVICE_ID and rank-table device_id, with
// that id's device_ip; one that names none, 0..procs-1. A node naming too
// few, or one twice, cannot launch.
func TestAscendDeviceIDs(t *testing.T) {
	w := twoNodes(Ascend)
	// node-1 drives NPUs 4 and 6 (hccn.conf lists 0..7), node-2 none named.
	w.Nodes[0].DeviceIDs = []int{4, 6, 7}
	w.Nodes[0].DeviceIPs = []string{"192.168.1.0", "192.168.1.1", "192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6", "192.168.1.7"}
	tab, err := RankTable(w)
	if err != nil {
		t.Fatal(err)
	}
	for rank, want := range []struct {
		id int
		ip string
	}{{4, "192.168.1.4"}, {6, "192.168.1.6"}, {0, "192.168.2.8"}, {1, "192.168.2.9"}} {
		s, d, ok := tab.Lookup(rank)
		if !ok || d.DeviceID != want.id || d.DeviceIP != want.ip {
			t.Errorf("rank %d: device %+v, want id %d ip %s", rank, d, want.id, want.ip)
		}
		ps, err := Procs(w, s)
		if err != nil {
			t.Fatal(err)
		}
		p := ps[rank%2]
		if p.Env["DEVICE_ID"] != itoa(want.id) || p.Env["ASCEND_DEVICE_ID"] != itoa(want.id) || p.Env["LOCAL_RANK"] != itoa(rank%2) {
			t.Errorf("rank %d: DEVICE_ID %s ASCEND_DEVICE_ID %s LOCAL_RANK %s; want NPU %d", rank,
				p.Env["DEVICE_ID"], p.Env["ASCEND_DEVICE_ID"], p.Env["LOCAL_RANK"], want.id)
		}
	}
	for _, tc := range []struct {
		name string
		ids  []int
		want string
	}{
		{"too few", []int{3}, "node node-1 (node 0) drives 1 NPU(s) [3]"},
		{"twice", []int{3, 3}, "each must be a distinct id"},
		{"negative", []int{-1, 2}, "each must be a distinct id"},
	} {
		w := twoNodes(Ascend)
		w.Nodes[0].DeviceIDs = tc.ids
		if _, err := RankTable(w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: rank table: %v; want %q", tc.name, err, tc.want)
		}
		if _, err := Procs(w, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: procs: %v; want %q", tc.name, err, tc.want)
		}
		w.Launcher = Torchrun
		if _, err := Procs(w, 0); err != nil {
			t.Errorf("%s: torchrun takes no NPU ids: %v", tc.name, err)
		}
	}
}

// TestAscendVisibleDevices: where ASCEND_RT_VISIBLE_DEVICES renumbers the
// NPUs (a container given 4–7), a process addresses its NPU by the index
// there — DEVICE_ID and ASCEND_DEVICE_ID — while the rank table keeps the
// physical id; an NPU outside the list cannot launch, naming both.
func TestAscendVisibleDevices(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ids     []int
		visible string
		want    []string // DEVICE_ID of local ranks 0, 1
		err     string
	}{
		{name: "unset", ids: []int{4, 6}, want: []string{"4", "6"}},
		{name: "renumbered", ids: []int{4, 6}, visible: "4,5,6,7", want: []string{"0", "2"}},
		{name: "reordered", ids: []int{4, 6}, visible: " 6, 4 ", want: []string{"1", "0"}},
		{name: "unnamed NPUs", visible: "2,3", err: "NPU 0 (local rank 0) is not among ASCEND_RT_VISIBLE_DEVICES [2 3]"},
		{name: "outside", ids: []int{4, 6}, visible: "4,5", err: "NPU 6 (local rank 1) is not among ASCEND_RT_VISIBLE_DEVICES [4 5]"},
	} {
		w := twoNodes(Ascend)
		w.Nodes[1].DeviceIDs = tc.ids
		vis, err := VisibleDevices(tc.visible)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w.Nodes[1].Visible = vis
		ps, err := Procs(w, 1)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for lr, want := range tc.want {
			if got := ps[lr].Env; got["DEVICE_ID"] != want || got["ASCEND_DEVICE_ID"] != want {
				t.Errorf("%s: local rank %d: DEVICE_ID %s ASCEND_DEVICE_ID %s; want %s", tc.name, lr, got["DEVICE_ID"], got["ASCEND_DEVICE_ID"], want)
			}
		}
		tab, err := RankTable(w)
		if err != nil {
			t.Fatal(err)
		}
		if _, d, _ := tab.Lookup(3); d.DeviceID != tc.ids[1] {
			t.Errorf("%s: rank table device_id %d; want the physical %d", tc.name, d.DeviceID, tc.ids[1])
		}
	}
	for _, bad := range []string{"4,x", "4,4", "-1", "4,,5"} {
		if _, err := VisibleDevices(bad); err == nil || !strings.Contains(err.Error(), "want distinct NPU ids") {
			t.Errorf("VisibleDevices(%q): %v", bad, err)
		}
	}
}

// TestAscendHostNameDeviceIP: a node advertised by host name stands in
// its resolved address (HostIP) for the device_ip hccn.conf does not give;
// unresolved, the error says what to give.
func TestAscendHostNameDeviceIP(t *testing.T) {
	w := twoNodes(Ascend)
	w.Nodes[0].Host, w.Nodes[0].HostIP = "node-1.example", "10.9.0.1"
	tab, err := RankTable(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, d, _ := tab.Lookup(1); d.DeviceIP != "10.9.0.1" || tab.Servers[0].HostIP != "10.9.0.1" {
		t.Errorf("rank 1: %+v, host_ip %q; want the resolved address", d, tab.Servers[0].HostIP)
	}
	w.Nodes[0].HostIP = ""
	_, err = RankTable(w)
	for _, want := range []string{"node node-1 (node 0) has no device_ip for NPU(s) [0 1]", `advertises "node-1.example"`,
		"/etc/hccn.conf", "--comm-advertise IP:PORT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unresolved host name: %v; want it to say %q", err, want)
		}
	}
	// One server needs no device_ip.
	w.Nodes = w.Nodes[:1]
	if _, err := RankTable(w); err != nil {
		t.Errorf("one server by host name: %v", err)
	}
}
