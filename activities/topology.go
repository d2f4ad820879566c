package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ranktable"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/topology"
	"github.com/cann-train/cann-train/spec"
)

// ProbeLinks is this node's part of a link scan: it joins the run's ranks
// (a communicator of its own session) and measures every rank pair with
// real, time-bounded transfers (ascend.ProbeLinks). Every rank reports its
// host; rank 0 also the whole matrix.
func (n *Node) ProbeLinks(ctx context.Context, in spec.ProbeInput) (*spec.ProbeResult, error) {
	if in.Rank < 0 || in.Rank >= len(in.Membership.Nodes) || in.Membership.Nodes[in.Rank].ID != n.ID {
		err := fmt.Errorf("probe for rank %d is not meant for node %q", in.Rank, n.ID)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadProbeInput", err)
	}
	addrs := make([]string, len(in.Membership.Nodes))
	for i, m := range in.Membership.Nodes {
		addrs[i] = m.CommAddr
	}
	comm, err := tcp.Connect(ctx, n.Listener, tcp.Group{Session: in.Session, Rank: in.Rank, Addrs: addrs, Token: []byte(in.Token)},
		tcp.Options{ConnectTimeout: 30 * time.Second, OpTimeout: in.Timeout.D(), SkipCalibration: true, RefusedGrace: peerRefusedGrace})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, peerError(err, 0, 1, in.Membership.Nodes)
	}
	defer comm.Close()
	links, err := comm.ProbeLinks(ctx, ascend.ProbeOptions{Budget: in.Budget.D()})
	if err != nil {
		return nil, peerError(err, 0, 1, in.Membership.Nodes)
	}
	res := &spec.ProbeResult{NodeID: n.ID, Rank: in.Rank, Host: shm.HostName()}
	if in.Compute != nil {
		if res.Compute, err = n.probeCompute(ctx, comm, in); err != nil {
			return nil, peerError(err, 0, 1, in.Membership.Nodes)
		}
	}
	if in.Rank == 0 {
		for _, l := range links {
			res.Links = append(res.Links, spec.LinkSample{From: l.From, To: l.To, LatencyNS: l.Latency.Nanoseconds(), BytesPerSec: l.BytesPerSec})
		}
	}
	return res, nil
}

// Planner analyses link scans (control queue).
type Planner struct{}

// PlanTopology turns a scan into the run's hierarchy (engine/topology) and,
// with collective auto, picks the gradient allreduce's algorithm with the
// collective engine's cost model fed the measured α and β per level.
func (Planner) PlanTopology(_ context.Context, in spec.PlanTopologyInput) (*spec.TopologyPlan, error) {
	n := len(in.Results)
	if n == 0 {
		return nil, temporal.NewNonRetryableApplicationError("no probe results", "BadScan", nil)
	}
	hosts := make([]string, n)
	var samples []spec.LinkSample
	for r, res := range in.Results {
		if res.Rank != r {
			err := fmt.Errorf("probe result %d is rank %d's", r, res.Rank)
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
		}
		hosts[r] = res.Host
		samples = append(samples, res.Links...)
	}
	links := make([]topology.Link, len(samples))
	for i, s := range samples {
		links[i] = topology.Link{From: s.From, To: s.To, Latency: time.Duration(s.LatencyNS), BytesPerSec: s.BytesPerSec}
	}
	t, err := topology.Analyze(hosts, links, topology.Options{})
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	plan := &spec.TopologyPlan{Hosts: hosts, HostCount: len(t.Hosts), SlowLinks: len(t.Slow), GradientBytes: in.GradientBytes}
	for _, l := range t.Levels {
		plan.Levels = append(plan.Levels, spec.TopologyLevel{Name: string(l.Level), Links: l.Links, AlphaNS: l.Alpha.Nanoseconds(), BytesPerSec: l.BytesPerSec})
	}
	var text bytes.Buffer
	if err := t.WriteText(&text); err == nil {
		plan.Text = text.String()
	}
	k := max(in.RanksPerNode, 1) // each node's ranks, on its host
	if in.Nodes != nil && len(in.Nodes) == n {
		if rt, err := rankTable(t, in.Nodes, k); err == nil {
			plan.RankTable = rt
		}
	}
	for _, res := range in.Results {
		if res.Compute != nil {
			plan.Compute = append(plan.Compute, *res.Compute)
		}
	}
	model := planCostModel(*plan, n)
	model.PerHost *= k
	best, bestT := "", math.Inf(1)
	for _, a := range []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoRD, ascend.AlgoTree, ascend.AlgoHier} {
		d, ok := model.Predict(ascend.CollAllReduce, a, n*k, in.GradientBytes)
		if !ok || (a == ascend.AlgoHier && len(t.Hosts) < 2) {
			continue
		}
		plan.Predictions = append(plan.Predictions, spec.AlgorithmPrediction{Algorithm: a.String(), Seconds: d.Seconds()})
		if d.Seconds() < bestT {
			best, bestT = a.String(), d.Seconds()
		}
	}
	plan.Algorithm = in.Collective
	if in.Collective == "auto" || in.Collective == "" {
		plan.Algorithm = best
	}
	return plan, nil
}

// ResolveCheckpoint finds the committed checkpoint of want.Run at
// want.Step in the bucket want.URL: one whose upload was still in flight
// when its node was lost, or still uploading when its run held. It reads
// that step's manifest only. It fails with type NoSuchCheckpoint when
// there is none or its manifest is unreadable — retryable, so that a
// caller whose retry policy waits for an upload in flight retries; others
// list the type as non-retryable and fall back to an older checkpoint. A
// storage that does not answer is any other error: the checkpoint may be
// there.
func (Planner) ResolveCheckpoint(ctx context.Context, want spec.CheckpointRef) (*spec.CheckpointRef, error) {
	store, err := checkpoint.Open(ctx, want.URL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	r, err := store.At(ctx, want.Run, want.Step)
	switch {
	case err == nil && r.SHA256 != "":
		out := FromStoreRef(want.URL, r)
		return &out, nil
	case err == nil:
		err = fmt.Errorf("the checkpoint of run %q at step %d in %s has an unreadable manifest", want.Run, want.Step, want.URL)
	case errors.Is(err, checkpoint.ErrNotFound):
		err = fmt.Errorf("no committed checkpoint of run %q at step %d in %s", want.Run, want.Step, want.URL)
	default:
		return nil, fmt.Errorf("look up the checkpoint of run %q at step %d in %s: %w", want.Run, want.Step, want.URL, err)
	}
	return nil, temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeNoSuchCheckpoint, err)
}

// rankTable writes the scanned cluster's HCCL rank table: per host, perNode
// devices per node in rank order (node rank r holds ranks r·perNode …).
// The j-th device is the node's j-th NPU (spec.Node.NPUIDs, as an ascend
// launch gives its local rank j), else the host's next device id; its IP
// that NPU's device IP (DeviceIPs by device id), else — only where the
// table has several servers, which HCCL's v1.0 table must address — the
// host part of the node's communicator address, never another NPU's. One
// server needs no device_ip, and a stand-in shared by its devices is what
// `topo-scan --read-rank-table` refuses (topology.CheckRankTable).
func rankTable(t *topology.Topology, nodes []spec.Node, perNode int) (string, error) {
	devices := map[string][]ranktable.NodeDevice{}
	ranks := &topology.Topology{}
	several := len(t.Hosts) > 1
	for _, h := range t.Hosts {
		g := topology.HostGroup{Host: h.Host}
		for _, r := range h.Ranks {
			n := nodes[r]
			for j := range perNode {
				id, npu := len(g.Ranks), j
				if j < len(n.NPUIDs) {
					id, npu = n.NPUIDs[j], n.NPUIDs[j]
				}
				ip := ""
				if npu < len(n.DeviceIPs) && n.DeviceIPs[npu] != "" {
					ip = n.DeviceIPs[npu]
				} else if host, _, err := net.SplitHostPort(n.CommAddr); err == nil && several {
					ip = host
				}
				devices[h.Host] = append(devices[h.Host], ranktable.NodeDevice{ID: id, IP: ip})
				g.Ranks = append(g.Ranks, r*perNode+j)
			}
		}
		ranks.Hosts = append(ranks.Hosts, g)
	}
	tab, err := topology.RankTable(ranks, devices)
	if err != nil {
		return "", err
	}
	b, err := tab.Marshal()
	return string(b), err
}

// WriteReport stores a finished run's status, as indented JSON, under
// spec.ReportKey in the run's checkpoint bucket and returns "URL KEY".
func (Planner) WriteReport(ctx context.Context, in spec.ReportInput) (string, error) {
	if in.Run == "" || in.URL == "" {
		err := fmt.Errorf("report of run %q to bucket %q: both are needed", in.Run, in.URL)
		return "", temporal.NewNonRetryableApplicationError(err.Error(), "BadReport", err)
	}
	data, err := json.MarshalIndent(in.Status, "", "  ")
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), "BadReport", err)
	}
	store, err := checkpoint.Open(ctx, in.URL)
	if err != nil {
		return "", err
	}
	defer store.Close()
	key := spec.ReportKey(in.Run)
	if err := store.WriteBlob(ctx, key, append(data, '\n'), "application/json"); err != nil {
		return "", fmt.Errorf("write report %s: %w", key, err)
	}
	return in.URL + " " + key, nil
}
