// Package launch starts a user's training script the way its launcher
// would, with no Temporal in sight: the environment contract of torchrun,
// of an Ascend HCCL rank-table launch and of MindSpore's msrun (Procs,
// RankTable); a process-group supervisor that streams each process's output
// to a file, stops the group with SIGTERM then SIGKILL and leaves no
// orphans (Start, Group); the file protocol of the Python helper
// python/cann_train.py (ReportReader, WriteAck); and the packing of a
// checkpoint directory into one payload whose unchanged files become
// unchanged chunks of engine/checkpoint's content-addressed store (PackDir,
// UnpackDir).
package launch

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cann-train/cann-train/ascend/ranktable"
)

// Launcher names an environment contract.
type Launcher string

// The contracts Procs knows.
const (
	Torchrun Launcher = "torchrun"
	Ascend   Launcher = "ascend"
	MSRun    Launcher = "msrun"
)

// Defaults the contracts use.
const (
	// RoleName is torchrun's --role default.
	RoleName = "default"
	// HCCLConnectTimeoutSeconds is the HCCL_CONNECT_TIMEOUT an ascend
	// launch suggests: HCCL's own default (120 s) is short for a world in
	// which a replacement node still starts up; the range is [120, 7200].
	HCCLConnectTimeoutSeconds = 600
	// MSTopoTimeoutSeconds is msrun's --cluster_time_out default.
	MSTopoTimeoutSeconds = 600
)

// Node is one node of the world, in node-rank order.
type Node struct {
	// ID becomes the rank table's server_id.
	ID string
	// Host is the node's address as its peers reach it (an IP for a
	// multi-node ascend launch).
	Host string
	// HostIP is Host's address when Host is a name (resolved by the
	// caller): the stand-in device_ip of an ascend rank table. Empty: Host
	// itself when it is an IP address.
	HostIP string
	// DeviceIPs are the node's NPU NIC addresses by device id (optional;
	// the host address stands in).
	DeviceIPs []string
	// DeviceIDs are the physical NPU ids the node drives, in local-rank
	// order: local rank i of an ascend launch gets DeviceIDs[i] as its
	// DEVICE_ID, ASCEND_DEVICE_ID and rank-table device_id (and
	// DeviceIPs[DeviceIDs[i]] as its device_ip). Empty: 0..ProcsPerNode-1.
	DeviceIDs []int
	// Visible are the physical NPU ids the node's runtime sees, in the
	// order it numbers them (ASCEND_RT_VISIBLE_DEVICES, as VisibleDevices
	// parses it: a container that renumbers its NPUs): a process then
	// addresses its NPU by the index there, its logical id, as DEVICE_ID
	// and ASCEND_DEVICE_ID; the rank table keeps the physical id. Empty:
	// the runtime numbers the NPUs by their physical ids.
	Visible []int
}

// Logical is the id local rank lr's process addresses its NPU by: the
// NPU's index in Visible, or its physical id when Visible is empty; an
// error when Visible does not hold it.
func (n Node) Logical(lr int) (int, error) {
	phys := n.Device(lr)
	if len(n.Visible) == 0 {
		return phys, nil
	}
	if i := slices.Index(n.Visible, phys); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("launch: node %s: NPU %d (local rank %d) is not among ASCEND_RT_VISIBLE_DEVICES %v, the NPUs its runtime sees: "+
		"name the node's NPUs with `worker node --npu-ids` from that list, or leave ASCEND_RT_VISIBLE_DEVICES unset", n.ID, phys, lr, n.Visible)
}

// VisibleDevices parses an ASCEND_RT_VISIBLE_DEVICES value ("4,5,6,7"):
// distinct physical ids ≥ 0; nil for "" (unset).
func VisibleDevices(v string) ([]int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var ids []int
	for f := range strings.SplitSeq(v, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 || slices.Contains(ids, id) {
			return nil, fmt.Errorf("ASCEND_RT_VISIBLE_DEVICES=%q: want distinct NPU ids ≥ 0 separated by commas (\"4,5,6,7\"); %q is not one", v, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Device is the physical NPU id of the node's local rank lr: DeviceIDs[lr],
// or lr when the node names none.
func (n Node) Device(lr int) int {
	if lr < len(n.DeviceIDs) {
		return n.DeviceIDs[lr]
	}
	return lr
}

// World is one launch of a job: every node runs ProcsPerNode processes.
type World struct {
	Launcher Launcher
	// RunID is torchrun's TORCHELASTIC_RUN_ID (the run's workflow ID).
	RunID        string
	Nodes        []Node
	ProcsPerNode int
	// MasterPort is the rendezvous port on the first node: torch's
	// TCPStore (MASTER_PORT) or msrun's scheduler (MS_SCHED_PORT).
	MasterPort int
	// RestartCount is how many times the world was restarted before this
	// launch; MaxRestarts bounds it (TORCHELASTIC_*).
	RestartCount, MaxRestarts int
	// RankTableFile is where this node writes the ascend rank table.
	RankTableFile string
	// ErrorFile, when set, names torchrun's per-process error file
	// (TORCHELASTIC_ERROR_FILE) for a rank: the @record decorator of
	// torch.distributed.elastic writes an uncaught exception there.
	ErrorFile func(rank int) string
}

// Proc is one process to start on a node.
type Proc struct {
	// Name is "rank-<global rank>", or "scheduler" for msrun's.
	Name string
	// Rank is the global rank; -1 for a process that is not a rank.
	Rank int
	// LocalRank is the rank on the node; -1 for a process that is not a rank.
	LocalRank int
	// Env is the launcher's contract: these values win over everything.
	Env map[string]string
	// Defaults are what the launcher suggests; the job's env and the
	// node's environment override them.
	Defaults map[string]string
}

// WorldSize is the number of ranks.
func (w World) WorldSize() int { return len(w.Nodes) * w.ProcsPerNode }

// MasterAddr is the first node's host.
func (w World) MasterAddr() string {
	if len(w.Nodes) == 0 {
		return ""
	}
	return w.Nodes[0].Host
}

// Validate reports a world that no launcher could start.
func (w World) Validate() error {
	switch w.Launcher {
	case Torchrun, Ascend, MSRun:
	default:
		return fmt.Errorf("launch: unknown launcher %q", w.Launcher)
	}
	if len(w.Nodes) == 0 {
		return errors.New("launch: no nodes")
	}
	if w.ProcsPerNode < 1 {
		return fmt.Errorf("launch: %d processes per node", w.ProcsPerNode)
	}
	if w.MasterPort < 1 || w.MasterPort > 65535 {
		return fmt.Errorf("launch: master port %d out of range 1..65535", w.MasterPort)
	}
	for i, n := range w.Nodes {
		if n.Host == "" {
			return fmt.Errorf("launch: node %d (%s) has no host address", i, n.ID)
		}
	}
	if w.Launcher == Ascend {
		if w.RankTableFile == "" {
			return errors.New("launch: an ascend launch needs a rank table file path")
		}
		for i, n := range w.Nodes {
			if err := n.checkDevices(i, w.ProcsPerNode); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkDevices refuses a node (index i) that names fewer NPUs than its
// processes, or one twice.
func (n Node) checkDevices(i, procs int) error {
	if len(n.DeviceIDs) == 0 {
		return nil
	}
	if len(n.DeviceIDs) < procs {
		return fmt.Errorf("launch: node %s (node %d) drives %d NPU(s) %v (its worker's --npu-ids, or npu-smi's healthy chips), "+
			"but the job runs %d process(es) per node, one per NPU: lower external.procs_per_node, or give the node worker more NPUs",
			n.ID, i, len(n.DeviceIDs), n.DeviceIDs, procs)
	}
	seen := map[int]bool{}
	for _, d := range n.DeviceIDs[:procs] {
		if d < 0 || seen[d] {
			return fmt.Errorf("launch: node %s (node %d): NPU ids %v: each must be a distinct id ≥ 0", n.ID, i, n.DeviceIDs)
		}
		seen[d] = true
	}
	return nil
}

// Procs lists the processes node nodeRank starts, in order, each with its
// environment: torchrun's agent environment for every worker, an HCCL
// rank-table launch's, or msrun's (a scheduler first on node 0).
func Procs(w World, nodeRank int) ([]Proc, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if nodeRank < 0 || nodeRank >= len(w.Nodes) {
		return nil, fmt.Errorf("launch: node rank %d outside 0..%d", nodeRank, len(w.Nodes)-1)
	}
	itoa := strconv.Itoa
	world, local := w.WorldSize(), w.ProcsPerNode
	var out []Proc
	if w.Launcher == MSRun && nodeRank == 0 {
		// msrun starts the scheduler on the master node; it runs the same
		// script, with RANK_ID 0 ("for Scheduler, 'RANK_ID' is always 0").
		out = append(out, Proc{Name: "scheduler", Rank: -1, LocalRank: -1,
			Env: map[string]string{
				"MS_ROLE": "MS_SCHED", "MS_SCHED_HOST": w.MasterAddr(), "MS_SCHED_PORT": itoa(w.MasterPort),
				"MS_WORKER_NUM": itoa(world), "RANK_SIZE": itoa(world), "RANK_ID": "0",
			},
			Defaults: map[string]string{"MS_TOPO_TIMEOUT": itoa(MSTopoTimeoutSeconds)},
		})
	}
	for lr := range local {
		rank := nodeRank*local + lr
		p := Proc{Name: "rank-" + itoa(rank), Rank: rank, LocalRank: lr, Env: map[string]string{}, Defaults: map[string]string{}}
		switch w.Launcher {
		case Torchrun:
			// torch.distributed.elastic.agent.server.local_elastic_agent:
			// one role ("default"), so role ranks are global ranks. There
			// is no agent store: rank 0 hosts the TCPStore itself.
			for k, v := range map[string]string{
				"LOCAL_RANK": itoa(lr), "RANK": itoa(rank), "GROUP_RANK": itoa(nodeRank),
				"ROLE_RANK": itoa(rank), "ROLE_NAME": RoleName,
				"LOCAL_WORLD_SIZE": itoa(local), "WORLD_SIZE": itoa(world),
				"GROUP_WORLD_SIZE": itoa(len(w.Nodes)), "ROLE_WORLD_SIZE": itoa(world),
				"MASTER_ADDR": w.MasterAddr(), "MASTER_PORT": itoa(w.MasterPort),
				"TORCHELASTIC_RESTART_COUNT": itoa(w.RestartCount), "TORCHELASTIC_MAX_RESTARTS": itoa(w.MaxRestarts),
				"TORCHELASTIC_RUN_ID": w.RunID, "TORCHELASTIC_USE_AGENT_STORE": "False",
			} {
				p.Env[k] = v
			}
			if w.ErrorFile != nil {
				p.Env["TORCHELASTIC_ERROR_FILE"] = w.ErrorFile(rank)
			}
			p.Defaults["NCCL_ASYNC_ERROR_HANDLING"] = "1"
			p.Defaults["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
			if local > 1 {
				// torch.distributed.run: one thread each unless set, so
				// that the ranks do not oversubscribe the cores.
				p.Defaults["OMP_NUM_THREADS"] = "1"
			}
		case Ascend:
			// One process per device: the node's lr-th NPU. The rank
			// table maps RANK_ID to (server, device_id), the physical id;
			// DEVICE_ID and ASCEND_DEVICE_ID are the id the runtime
			// addresses it by: the physical one, or its index in
			// ASCEND_RT_VISIBLE_DEVICES where that renumbers the NPUs.
			logical, err := w.Nodes[nodeRank].Logical(lr)
			if err != nil {
				return nil, err
			}
			dev := itoa(logical)
			for k, v := range map[string]string{
				"RANK_TABLE_FILE": w.RankTableFile, "RANK_ID": itoa(rank), "RANK_SIZE": itoa(world),
				"DEVICE_ID": dev, "ASCEND_DEVICE_ID": dev,
				// torch_npu scripts rendezvous through torch.distributed.
				"RANK": itoa(rank), "LOCAL_RANK": itoa(lr), "WORLD_SIZE": itoa(world), "LOCAL_WORLD_SIZE": itoa(local),
				"MASTER_ADDR": w.MasterAddr(), "MASTER_PORT": itoa(w.MasterPort),
			} {
				p.Env[k] = v
			}
			p.Defaults["HCCL_CONNECT_TIMEOUT"] = itoa(HCCLConnectTimeoutSeconds)
		case MSRun:
			// mindspore/parallel/cluster/process_entity/_api.py with
			// --node_rank given: MS_NODE_ID = RANK_ID = node_rank ×
			// local_worker_num + i.
			for k, v := range map[string]string{
				"MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": w.MasterAddr(), "MS_SCHED_PORT": itoa(w.MasterPort),
				"MS_WORKER_NUM": itoa(world), "MS_NODE_ID": itoa(rank), "RANK_ID": itoa(rank), "RANK_SIZE": itoa(world),
			} {
				p.Env[k] = v
			}
			p.Defaults["MS_TOPO_TIMEOUT"] = itoa(MSTopoTimeoutSeconds)
		}
		out = append(out, p)
	}
	return out, nil
}

// RankTable is the HCCL rank table (v1.0) of an ascend world: one server
// per node in node-rank order, the node's NPU Device(i) for its local rank
// i, ranks numbered through the nodes. A device's IP is the node's
// DeviceIPs[id] when known, else the node's host address (HostIP, or Host
// when it is an IP address): HCCL requires one per device on a
// multi-server table, so a node with neither is an error saying what to
// give.
func RankTable(w World) (*ranktable.Table, error) {
	if w.ProcsPerNode < 1 || len(w.Nodes) == 0 {
		return nil, fmt.Errorf("launch: rank table for %d node(s) × %d process(es)", len(w.Nodes), w.ProcsPerNode)
	}
	nodes := make([]ranktable.Node, len(w.Nodes))
	for i, n := range w.Nodes {
		if err := n.checkDevices(i, w.ProcsPerNode); err != nil {
			return nil, err
		}
		rn := ranktable.Node{ID: n.ID, HostIP: n.hostIP(), Devices: make([]ranktable.NodeDevice, w.ProcsPerNode)}
		var noIP []int
		for lr := range rn.Devices {
			id := n.Device(lr)
			ip := rn.HostIP
			if id < len(n.DeviceIPs) && n.DeviceIPs[id] != "" {
				ip = n.DeviceIPs[id]
			}
			if ip == "" {
				noIP = append(noIP, id)
			}
			rn.Devices[lr] = ranktable.NodeDevice{ID: id, IP: ip}
		}
		if len(noIP) > 0 && len(w.Nodes) > 1 {
			return nil, fmt.Errorf("launch: rank table: node %s (node %d) has no device_ip for NPU(s) %v, which HCCL needs on a table of "+
				"several servers: its /etc/hccn.conf lists no address_<id> for them (hccn_tool -i <id> -ip -g shows an NPU's address), "+
				"and its node worker advertises %q, a host name that did not resolve to an IP address to stand in for them; "+
				"give that host an /etc/hccn.conf (on NPUs), or start its node worker with --comm-advertise IP:PORT",
				n.ID, i, noIP, n.Host)
		}
		nodes[i] = rn
	}
	t, err := ranktable.FromNodes(nodes)
	if err != nil {
		return nil, fmt.Errorf("launch: rank table: %w", err)
	}
	return t, nil
}

// hostIP is the node's address for the rank table: HostIP, else Host when
// it is an IP address ("" otherwise).
func (n Node) hostIP() string {
	if n.HostIP != "" {
		return n.HostIP
	}
	if isIP(n.Host) {
		return n.Host
	}
	return ""
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// Environ merges a process's environment: base (the node worker's own, as
// KEY=VALUE) with p.Defaults for the keys base lacks, then extra (the
// job's env, then the helper variables), then p.Env; a later layer wins.
// The result has one entry per key, in first-seen order.
func Environ(base []string, p Proc, extra ...map[string]string) []string {
	val := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := val[k]; !ok {
			order = append(order, k)
		}
		val[k] = v
	}
	for _, kv := range base {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				set(kv[:i], kv[i+1:])
				break
			}
		}
	}
	for _, k := range sortedKeys(p.Defaults) {
		if _, ok := val[k]; !ok {
			set(k, p.Defaults[k])
		}
	}
	for _, m := range extra {
		for _, k := range sortedKeys(m) {
			set(k, m[k])
		}
	}
	for _, k := range sortedKeys(p.Env) {
		set(k, p.Env[k])
	}
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = k + "=" + val[k]
	}
	return out
}
