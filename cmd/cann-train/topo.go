package main

// `cann-train topo-scan`: discover the communication topology of a group
// of ranks by measuring every link (ascend.Communicator.ProbeLinks), group
// the ranks by host, derive α–β per level and flag slow links
// (engine/topology), and write the HCCL rank table of the group
// (ascend/ranktable). `--read-rank-table` validates an existing table.
//
// The ranks are local processes started like `bench collective` starts
// them (bench.Launch: listeners bound by the parent and inherited, a fresh
// session and token); the hidden `topo-scan topo-rank` subcommand is one
// of them. Rank 0 analyses the gathered matrix and prints the report.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/bench"
	"github.com/cann-train/cann-train/ascend/npusmi"
	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine/topology"
	"github.com/cann-train/cann-train/internal/suggest"
)

// topoRankCmd is the hidden subcommand of one rank of a scan.
const topoRankCmd = "topo-rank"

// hccnConf is where Ascend hosts keep the NPU NIC addresses
// (address_<device id>=<ip>), as hccl_tools reads them.
const hccnConf = "/etc/hccn.conf"

// topoScanConfig is what the parent passes every rank (--scan, as JSON).
type topoScanConfig struct {
	Probe          ascend.ProbeOptions `json:"probe"`
	Output         string              `json:"output"`
	RankTable      string              `json:"rank_table,omitempty"` // absolute path, written by rank 0
	DevicesPerNode int                 `json:"devices_per_node,omitempty"`
	SharedMemory   bool                `json:"shared_memory,omitempty"`
	// Virtual: virtual devices even where npu-smi is installed.
	Virtual bool `json:"virtual,omitempty"`
}

func newTopoScanCmd(e *env) *cobra.Command {
	var cfg topoScanConfig
	var ranks int
	var bytesArg, readTable string
	cmd := &cobra.Command{
		Use:   "topo-scan --ranks N",
		Short: "Measure every link between N local ranks; print the hierarchy and write an HCCL rank table",
		Long: `Starts N ranks as separate OS processes (loopback TCP, or shared memory with
--shm), measures the one-way latency (ping-pong of 4-byte messages, median / 2)
and bandwidth (--bytes transfers, one direction at a time) of every ordered
pair of ranks in a round-robin schedule bounded by --budget, and prints the
latency and bandwidth matrices, the hierarchy (ranks grouped by host: the
kernel boot id) with α and β per level, and the links far slower than their
level's median.

--rank-table FILE also writes the HCCL rank table (v1.0) of the group: one
server per host, one device per rank. Devices come from npu-smi when it is
installed: its healthy chips, device_ip from /etc/hccn.conf (left out where
it lists none: one server needs none; several servers fail, naming the
devices). An npu-smi that fails, or lists too few healthy chips, fails the
scan before it measures. Without npu-smi, or with --virtual-devices, every
node gets --devices-per-node virtual devices (default: one per rank) whose
device_ip is the host's address. The output says which.

--read-rank-table FILE validates an existing rank table and prints it; errors
name the offending field (e.g. server_list[0].device[1].rank_id), and a
device_ip that two devices share is refused.`,
		Example: `  cann-train topo-scan --ranks 4
  cann-train topo-scan --ranks 8 --shm --rank-table hccl.json -o json
  cann-train topo-scan --ranks 4 --devices-per-node 8 --rank-table hccl.json
  cann-train topo-scan --read-rank-table /user/serverid/devindex/config/hccl.json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cfg.Output, "text", "json"); err != nil {
				return err
			}
			if readTable != "" {
				if cmd.Flags().Changed("ranks") || cfg.RankTable != "" {
					return errors.New("--read-rank-table cannot be combined with --ranks or --rank-table")
				}
				return readRankTable(e.out, readTable, cfg.Output)
			}
			// The device flags shape the rank table only: without one they
			// would be ignored unseen.
			for _, name := range []string{"virtual-devices", "devices-per-node"} {
				if cmd.Flags().Changed(name) && cfg.RankTable == "" {
					return fmt.Errorf("--%s describes the devices of the rank table: it needs --rank-table FILE", name)
				}
			}
			if cfg.RankTable != "" {
				// The devices the table will name: fail before the scan.
				if err := checkDevices(cmd.Context(), nil, cfg, ranks); err != nil {
					return err
				}
			}
			b, err := bench.ParseSize(bytesArg)
			if err != nil || b < 4 || b > 1<<30 {
				return fmt.Errorf("--bytes %q: want a size from 4 to 1G", bytesArg)
			}
			cfg.Probe.Bytes = int(b)
			if cfg.RankTable != "" {
				if cfg.RankTable, err = filepath.Abs(cfg.RankTable); err != nil {
					return fmt.Errorf("--rank-table: %w", err)
				}
				// Writable? Say so before the scan, not after it.
				probe, err := os.CreateTemp(filepath.Dir(cfg.RankTable), ".rank-table-*")
				if err != nil {
					return fmt.Errorf("--rank-table %s: cannot write there: %w", cfg.RankTable, err)
				}
				probe.Close()
				os.Remove(probe.Name())
			}
			scan, err := json.Marshal(cfg)
			if err != nil {
				return err
			}
			opts := topoBenchOptions(ranks, b, cfg.SharedMemory, e.out, e.err)
			if err := opts.CheckHostMemory("topo-scan: --bytes", "lower --bytes or --ranks"); err != nil {
				return err
			}
			err = bench.Launch(cmd.Context(), opts, func(a ...string) *exec.Cmd {
				// a[0] is bench's child subcommand; ours takes its arguments.
				return e.command(append([]string{"topo-scan", topoRankCmd, "--scan", string(scan)}, a[1:]...)...)
			})
			if err != nil {
				return fmt.Errorf("topo-scan: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&ranks, "ranks", 2, "ranks (processes) to launch on this host")
	f.BoolVar(&cfg.SharedMemory, "shm", false, "link the ranks over shared memory instead of loopback TCP")
	f.DurationVar(&cfg.Probe.Budget, "budget", ascend.DefaultProbeBudget, "time budget of the measurements (the minimum samples are taken regardless)")
	f.StringVar(&bytesArg, "bytes", bench.FormatSize(ascend.DefaultProbeBytes), "size of one bandwidth transfer (K, M, G suffixes)")
	f.StringVar(&cfg.RankTable, "rank-table", "", "write the HCCL rank table (v1.0) of the group to this file")
	f.IntVar(&cfg.DevicesPerNode, "devices-per-node", 0, "virtual devices per node when npu-smi is absent (default: one per rank)")
	f.BoolVar(&cfg.Virtual, "virtual-devices", false, "virtual devices in the rank table even where npu-smi is installed")
	atLeast(f, "1", "ranks", "devices-per-node")
	atLeast(f, "1ns", "budget")
	f.StringVar(&readTable, "read-rank-table", "", "validate and print this rank table instead of scanning")
	f.StringVarP(&cfg.Output, "output", "o", "text", "text or json")
	cmd.AddCommand(&cobra.Command{
		Use:                topoRankCmd,
		Short:              "one rank of `topo-scan` (started by it)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTopoRank(cmd.Context(), e.out, args)
		},
	})
	return cmd
}

// topoBenchOptions are the options topo-scan launches its ranks with.
// The ranks move --bytes (size) at a time, a send and a receive buffer
// each: the memory check prices that, not bench's default 256 MiB sweep
// (which refused some 40 ranks on a 20 GiB host).
func topoBenchOptions(ranks int, size int64, shm bool, out, errw io.Writer) bench.Options {
	return bench.Options{Ranks: ranks, MinBytes: size, MaxBytes: size, SharedMemory: shm, SkipLimits: true, Stdout: out, Stderr: errw}
}

// runTopoRank is one rank of a scan: args are --scan JSON followed by
// bench's child arguments.
func runTopoRank(ctx context.Context, out io.Writer, args []string) error {
	if len(args) < 2 || args[0] != "--scan" {
		return errors.New("topo-rank: want --scan JSON before the rank arguments")
	}
	var cfg topoScanConfig
	if err := json.Unmarshal([]byte(args[1]), &cfg); err != nil {
		return fmt.Errorf("topo-rank: --scan: %w", err)
	}
	a, err := bench.ParseChildArgs(args[2:])
	if err != nil {
		return err
	}
	l, err := childListener(a)
	if err != nil {
		return err
	}
	defer l.Close()
	comm, err := tcp.Connect(ctx, l, tcp.Group{Session: a.Session, Rank: a.Rank, Addrs: a.Addrs, Token: a.Token},
		tcp.Options{OpTimeout: 2 * time.Minute, SharedMemory: cfg.SharedMemory, SkipCalibration: true})
	if err != nil {
		return err
	}
	defer comm.Close()
	start := time.Now()
	probed, err := comm.ProbeLinks(ctx, cfg.Probe)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	hostname, _ := os.Hostname()
	hosts, err := gatherStrings(ctx, comm, shm.HostName())
	if err != nil {
		return fmt.Errorf("topo-rank: gathering host ids: %w", err)
	}
	names, err := gatherStrings(ctx, comm, hostname)
	if err != nil {
		return fmt.Errorf("topo-rank: gathering host names: %w", err)
	}
	if comm.Rank() != 0 {
		return nil
	}
	rep, err := analyzeScan(ctx, cfg, a.Addrs, hosts, names, probed, elapsed)
	if err != nil {
		return err
	}
	return writeScan(out, rep, cfg.Output)
}

// childListener takes over the listener bench.Launch passed down (or opens
// one on the rank's address).
func childListener(a bench.ChildArgs) (*tcp.Listener, error) {
	if a.ListenFD <= 0 {
		return tcp.Listen(a.Addrs[a.Rank])
	}
	f := os.NewFile(uintptr(a.ListenFD), "topo-listener")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("topo-rank: inherited listener: %w", err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("topo-rank: inherited listener is %T, not TCP", ln)
	}
	return tcp.ListenConfig{}.Serve(tl), nil
}

// maxHostString bounds gathered strings: a server_id has at most 64
// characters.
const maxHostString = 64

// gatherStrings gathers one short string per rank, one byte per float32.
func gatherStrings(ctx context.Context, comm *ascend.Communicator, s string) ([]string, error) {
	if len(s) > maxHostString {
		s = s[:maxHostString]
	}
	mine := make([]float32, maxHostString+1)
	mine[0] = float32(len(s))
	for i := range len(s) {
		mine[i+1] = float32(s[i])
	}
	all := make([]float32, comm.Size()*len(mine))
	if err := comm.AllGatherInto(ctx, all, mine); err != nil {
		return nil, err
	}
	out := make([]string, comm.Size())
	for r := range out {
		seg := all[r*len(mine):]
		b := make([]byte, int(seg[0]))
		for i := range b {
			b[i] = byte(seg[i+1])
		}
		out[r] = string(b)
	}
	return out, nil
}

// ScanReport is topo-scan's result (-o json).
type ScanReport struct {
	Ranks     int     `json:"ranks"`
	Transport string  `json:"transport"` // "tcp" or "shm"
	BudgetS   float64 `json:"budget_s"`
	Bytes     int     `json:"bandwidth_bytes"`
	ElapsedS  float64 `json:"elapsed_s"`
	// LatencyNS and BytesPerSec are the measured matrices, row = from,
	// column = to; the diagonal is 0.
	LatencyNS   [][]int64   `json:"latency_ns"`
	BytesPerSec [][]float64 `json:"bytes_per_sec"`
	// Samples[i][j] is {ping-pongs, transfers} behind the i→j entry.
	Samples   [][][2]int         `json:"samples"`
	HostInfo  []ScanHost         `json:"host_info"`
	Topology  *topology.Topology `json:"topology"`
	RankTable *ScanRankTable     `json:"rank_table,omitempty"`
}

// ScanHost describes one host of the scan.
type ScanHost struct {
	Host     string `json:"host"` // topology host id (boot id)
	Hostname string `json:"hostname"`
	Address  string `json:"address"` // the address its ranks listened on
}

// ScanRankTable says where the rank table went and where its devices came
// from.
type ScanRankTable struct {
	File    string           `json:"file"`
	Devices string           `json:"devices"` // "npu-smi" or "virtual"
	Note    string           `json:"note"`
	Table   *ranktable.Table `json:"table"`
}

// probedToTopology converts the measurements for engine/topology.
func probedToTopology(ps []ascend.ProbedLink) []topology.Link {
	ls := make([]topology.Link, len(ps))
	for i, p := range ps {
		ls[i] = topology.Link{From: p.From, To: p.To, Latency: p.Latency, BytesPerSec: p.BytesPerSec}
	}
	return ls
}

func analyzeScan(ctx context.Context, cfg topoScanConfig, addrs, hosts, names []string, probed []ascend.ProbedLink, elapsed time.Duration) (*ScanReport, error) {
	n := len(hosts)
	topo, err := topology.Analyze(hosts, probedToTopology(probed), topology.DefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("topo-scan: %w", err)
	}
	rep := &ScanReport{Ranks: n, Transport: "tcp", BudgetS: cfg.Probe.Budget.Seconds(), Bytes: cfg.Probe.Bytes, ElapsedS: elapsed.Seconds(),
		LatencyNS: make([][]int64, n), BytesPerSec: make([][]float64, n), Samples: make([][][2]int, n), Topology: topo}
	if cfg.SharedMemory {
		rep.Transport = "shm"
	}
	for i := range n {
		rep.LatencyNS[i], rep.BytesPerSec[i], rep.Samples[i] = make([]int64, n), make([]float64, n), make([][2]int, n)
	}
	for _, p := range probed {
		rep.LatencyNS[p.From][p.To] = int64(p.Latency)
		rep.BytesPerSec[p.From][p.To] = p.BytesPerSec
		rep.Samples[p.From][p.To] = [2]int{p.LatencySamples, p.BandwidthSamples}
	}
	for _, h := range topo.Hosts {
		r := h.Ranks[0]
		addr, _, err := net.SplitHostPort(addrs[r])
		if err != nil {
			addr = addrs[r]
		}
		rep.HostInfo = append(rep.HostInfo, ScanHost{Host: h.Host, Hostname: names[r], Address: addr})
	}
	if cfg.RankTable == "" {
		return rep, nil
	}
	// npu-smi describes the host this rank runs on: all of a local scan.
	info, smiErr := probeNPUs(ctx, nil, cfg.Virtual)
	if smiErr != nil && !errors.Is(smiErr, npusmi.ErrNotFound) && !errors.Is(smiErr, errVirtualAsked) {
		return nil, fmt.Errorf("topo-scan: rank table: %w", smiErr)
	}
	var hccn map[int]string
	hccnRead := false
	if b, err := os.ReadFile(hccnConf); err == nil {
		hccn, hccnRead = parseHCCNConf(b), true
	}
	devices := map[string][]ranktable.NodeDevice{}
	rt := &ScanRankTable{File: cfg.RankTable, Devices: "virtual"}
	var npus npuChoice
	for _, h := range topo.Hosts {
		if h.Host == hosts[0] && smiErr == nil {
			if npus, err = npuDevices(info, hccn, len(h.Ranks), len(topo.Hosts) > 1); err != nil {
				return nil, fmt.Errorf("topo-scan: rank table: host %s: %w", h.Host, err)
			}
			devices[h.Host] = npus.devices
			rt.Devices = "npu-smi"
			continue
		}
		if devices[h.Host], err = virtualDevices(cfg.DevicesPerNode, len(h.Ranks), len(topo.Hosts) > 1); err != nil {
			return nil, fmt.Errorf("topo-scan: rank table: host %s: %w", h.Host, err)
		}
	}
	switch {
	case rt.Devices == "npu-smi":
		rt.Note = npus.note(len(info.Chips), hccnRead)
	case errors.Is(smiErr, errVirtualAsked):
		rt.Note = "virtual devices (--virtual-devices)"
	default:
		rt.Note = "virtual devices: npu-smi not found on this host"
	}
	if rt.Devices == "virtual" {
		per := "one per rank"
		if cfg.DevicesPerNode > 0 {
			per = strconv.Itoa(cfg.DevicesPerNode) + " per node, the first ones used"
		}
		rt.Note += "; device ids 0.., " + per + "; no device_ip (one server needs none)"
	}
	if rt.Table, err = topology.RankTable(topo, devices); err != nil {
		return nil, fmt.Errorf("topo-scan: %w", err)
	}
	data, err := rt.Table.Marshal()
	if err != nil {
		return nil, fmt.Errorf("topo-scan: rank table: %w", err)
	}
	if err := os.WriteFile(cfg.RankTable, data, 0o644); err != nil {
		return nil, fmt.Errorf("topo-scan: %w", err)
	}
	rep.RankTable = rt
	return rep, nil
}

// virtualDevices gives a node's ranks devices 0..ranks-1 of perNode (0:
// exactly one per rank), without a device_ip: a virtual device has no
// RoCE NIC, and one server needs none. (The host's address for every
// device, as before, made a table HCCL and --read-rank-table refuse: a
// device_ip is one device's own.) A table of several servers needs each
// device's address, which virtual devices cannot give.
func virtualDevices(perNode, ranks int, multiHost bool) ([]ranktable.NodeDevice, error) {
	if perNode > 0 && perNode < ranks {
		return nil, fmt.Errorf("%d ranks but --devices-per-node %d: every rank needs its own device", ranks, perNode)
	}
	if multiHost {
		return nil, errors.New("virtual devices have no device_ip, which HCCL across servers needs for every device " +
			"(run where npu-smi and /etc/hccn.conf name the NPUs)")
	}
	devs := make([]ranktable.NodeDevice, ranks)
	for i := range devs {
		devs[i] = ranktable.NodeDevice{ID: i}
	}
	return devs, nil
}

// errVirtualAsked: --virtual-devices; npu-smi was not asked.
var errVirtualAsked = errors.New("virtual devices asked for")

// probeNPUs asks npu-smi for this host's chips (bounded: a wedged driver
// does not hang the scan); errVirtualAsked when virtual is set. An
// npu-smi that is installed but fails is an error saying what a rank
// table of made-up devices would do.
func probeNPUs(ctx context.Context, run npusmi.Runner, virtual bool) (*npusmi.Info, error) {
	if virtual {
		return nil, errVirtualAsked
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := npusmi.Probe(pctx, run)
	if err != nil && !errors.Is(err, npusmi.ErrNotFound) {
		return nil, fmt.Errorf("npu-smi is installed but failed, so the rank table cannot name this host's devices: %w "+
			"(fix the driver or npu-smi; --virtual-devices writes made-up devices anyway)", err)
	}
	return info, err
}

// checkDevices fails a scan whose rank table could not name a device
// for each of its ranks, before the scan measures: npu-smi failing, too
// few healthy chips, or --devices-per-node below the ranks.
func checkDevices(ctx context.Context, run npusmi.Runner, cfg topoScanConfig, ranks int) error {
	info, err := probeNPUs(ctx, run, cfg.Virtual)
	switch {
	case err == nil:
		_, err := npuDevices(info, nil, ranks, false)
		return err
	case !errors.Is(err, npusmi.ErrNotFound) && !errors.Is(err, errVirtualAsked):
		return err
	case cfg.DevicesPerNode > 0 && cfg.DevicesPerNode < ranks:
		return fmt.Errorf("--devices-per-node %d: every rank needs its own device, and all %d ranks run on this host", cfg.DevicesPerNode, ranks)
	}
	return nil
}

// npuChoice is the chips a host's ranks got and what the table's note
// says of them.
type npuChoice struct {
	devices   []ranktable.NodeDevice
	unhealthy []string // chips left out: "NPU 3 chip 0 (Critical)"
	noIP      []int    // devices hccn.conf lists no address for
	a3        bool     // two dies per NPU with Phy-IDs: an A3 server
}

// note says where the devices came from and what the table lacks.
func (n npuChoice) note(chips int, hccnRead bool) string {
	note := fmt.Sprintf("devices from npu-smi (%d chips on this host", chips)
	if len(n.unhealthy) > 0 {
		note += fmt.Sprintf("; left out, not healthy: %s", strings.Join(n.unhealthy, ", "))
	}
	note += ")"
	switch {
	case len(n.noIP) == 0:
		note += "; device_ip from " + hccnConf
	case !hccnRead:
		note += fmt.Sprintf("; no device_ip: %s is not readable here (one server needs none)", hccnConf)
	default:
		note += fmt.Sprintf("; no device_ip for device(s) %v: %s lists none (one server needs none)", n.noIP, hccnConf)
	}
	if n.a3 {
		note += "; an A3 layout (two dies per NPU): HCCL on an A3 SuperPoD reads rank table v1.2 " +
			"(super_pod_list, super_device_id), which topo-scan does not write; this v1.0 table suits one server"
	}
	return note
}

// npuDevices gives a node's ranks its first healthy chips by device id.
// The device id is npu-smi's Phy-ID where printed, else the NPU id (one
// chip per NPU) or NPU·chips+chip. device_ip comes from hccn
// (address_<id>); a device without one has none, which only a table of
// several servers (multiHost) cannot do without.
func npuDevices(info *npusmi.Info, hccn map[int]string, ranks int, multiHost bool) (npuChoice, error) {
	var out npuChoice
	chipsPer := 1
	for _, c := range info.Chips {
		chipsPer = max(chipsPer, c.Chip+1)
		out.a3 = out.a3 || (c.PhyID >= 0 && c.Chip > 0)
	}
	var devs []ranktable.NodeDevice
	for _, c := range info.Chips {
		if !c.Health.OK() {
			out.unhealthy = append(out.unhealthy, fmt.Sprintf("NPU %d chip %d (%s)", c.NPU, c.Chip, cmp.Or(string(c.Health), "no health")))
			continue
		}
		id := c.NPU*chipsPer + c.Chip
		if c.PhyID >= 0 {
			id = c.PhyID
		}
		devs = append(devs, ranktable.NodeDevice{ID: id, IP: hccn[id]})
	}
	slices.SortFunc(devs, func(a, b ranktable.NodeDevice) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; i < len(devs); i++ {
		if devs[i].ID == devs[i-1].ID {
			return out, fmt.Errorf("npu-smi lists device id %d twice: its output is not one this scan can map to devices", devs[i].ID)
		}
	}
	if len(devs) < ranks {
		what := fmt.Sprintf("%d chip(s)", len(devs))
		if len(out.unhealthy) > 0 {
			what = fmt.Sprintf("%d healthy chip(s) (not: %s)", len(devs), strings.Join(out.unhealthy, ", "))
		}
		return out, fmt.Errorf("%d ranks but npu-smi lists %s: every rank needs its own device", ranks, what)
	}
	out.devices = devs[:ranks]
	for _, d := range out.devices {
		if d.IP == "" {
			out.noIP = append(out.noIP, d.ID)
		}
	}
	if multiHost && len(out.noIP) > 0 {
		return out, fmt.Errorf("device(s) %v have no address in %s: HCCL across servers needs each NPU's RoCE address (hccn_tool -i N -ip -g shows it)", out.noIP, hccnConf)
	}
	return out, nil
}

// parseHCCNConf reads the address_<id>=<ip> lines of /etc/hccn.conf.
func parseHCCNConf(b []byte) map[int]string {
	m := map[int]string{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || !strings.HasPrefix(k, "address_") {
			continue
		}
		id, err := strconv.Atoi(strings.TrimPrefix(k, "address_"))
		if err != nil || id < 0 {
			continue
		}
		if _, err := netip.ParseAddr(strings.TrimSpace(v)); err == nil {
			m[id] = strings.TrimSpace(v)
		}
	}
	return m
}

func writeScan(w io.Writer, rep *ScanReport, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	var b bytes.Buffer
	size := bench.FormatSize(int64(rep.Bytes))
	if strings.TrimRight(size, "0123456789") != "" {
		size += "iB"
	} else {
		size += " B"
	}
	fmt.Fprintf(&b, "topo-scan: %d ranks over %s, %s transfers, measured in %.2f s (budget %v)\n",
		rep.Ranks, map[string]string{"tcp": "loopback TCP", "shm": "shared memory"}[rep.Transport],
		size, rep.ElapsedS, time.Duration(rep.BudgetS*float64(time.Second)))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, h := range rep.HostInfo {
		fmt.Fprintf(tw, "host %s\t%s\t%s\n", h.Host, h.Hostname, h.Address)
	}
	tw.Flush()
	b.WriteString("\n")
	if err := rep.Topology.WriteText(&b); err != nil {
		return err
	}
	if rt := rep.RankTable; rt != nil {
		fmt.Fprintf(&b, "\nrank table: wrote %s (HCCL v%s, %d server(s), %d device(s))\n  %s\n",
			rt.File, rt.Table.Version, len(rt.Table.Servers), rt.Table.RankSize(), rt.Note)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// rankTableKeys are the keys of a v1.0 rank table at each level (as
// ranktable.Parse allows them), for "did you mean".
var rankTableKeys = struct{ top, server, device []string }{
	top:    []string{"version", "status", "server_count", "server_list"},
	server: []string{"server_id", "device", "host_nic_ip", "host_ip", "container_ip", "hardware_type"},
	device: []string{"device_id", "device_ip", "device_port", "rank_id"},
}

// negativeNumber is ranktable's `"-1" is not a number`: it is one, and
// negative.
var negativeNumber = regexp.MustCompile(`^"-[0-9]+" is not a number$`)

// explainRankTableError adds to a ranktable.Parse error what the reader
// knows besides: the key an unknown one most likely meant, and that a
// "-1" is a negative number, not "not a number".
func explainRankTableError(err error) error {
	var fe *ranktable.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	switch {
	case fe.Msg == "unknown key":
		key, level := fe.Path, rankTableKeys.top
		if i := strings.LastIndexByte(key, '.'); i >= 0 {
			key = key[i+1:]
		}
		switch {
		case strings.Contains(fe.Path, ".device["):
			level = rankTableKeys.device
		case strings.HasPrefix(fe.Path, "server_list["):
			level = rankTableKeys.server
		}
		if guess := suggest.DidYouMean(suggest.Nearest(key, level)); guess != "" {
			out.Msg += "; " + guess
		}
	case negativeNumber.MatchString(fe.Msg):
		n, _, _ := strings.Cut(fe.Msg, " is not")
		out.Msg = n + " is negative: want a whole number, 0 or more"
	default:
		return err
	}
	return &out
}

// problemList writes a joined error one problem a line ("2 problem(s):
// …"), as the spec readers list theirs.
func problemList(err error) string {
	lines := strings.Split(err.Error(), "\n")
	return fmt.Sprintf("%d problem(s):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// readRankTable validates the rank table in file and prints it.
func readRankTable(w io.Writer, file, output string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--read-rank-table: %w", err)
	}
	t, err := ranktable.Parse(data)
	if err != nil {
		return fmt.Errorf("rank table %s: %w", file, explainRankTableError(err))
	}
	if err := topology.CheckRankTable(t); err != nil {
		return fmt.Errorf("rank table %s: %s", file, problemList(err))
	}
	if output == "json" {
		canon, err := t.Marshal()
		if err != nil {
			return err
		}
		_, err = w.Write(canon)
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "rank table %s: valid HCCL v%s, status %s, %d server(s), %d rank(s)\n", file, t.Version, t.Status, len(t.Servers), t.RankSize())
	if !t.Ready() {
		fmt.Fprintf(&b, "warning: status %q: HCCL will not use the table until it is %q\n", t.Status, ranktable.StatusCompleted)
	}
	for _, s := range t.Servers {
		extra := ""
		for _, kv := range [][2]string{{"host_ip", s.HostIP}, {"container_ip", s.ContainerIP}, {"hardware_type", s.HardwareType}, {"host_nic_ip", s.HostNICIP}} {
			if kv[1] != "" {
				extra += " " + kv[0] + "=" + kv[1]
			}
		}
		fmt.Fprintf(&b, "\nserver %s%s\n", s.ServerID, extra)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  rank_id\tdevice_id\tdevice_ip\tdevice_port\n")
		for _, d := range s.Devices {
			port := "-"
			if d.DevicePort != 0 {
				port = strconv.Itoa(d.DevicePort)
			}
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\n", d.RankID, d.DeviceID, cmp.Or(d.DeviceIP, "-"), port)
		}
		tw.Flush()
	}
	_, err = w.Write(b.Bytes())
	return err
}
