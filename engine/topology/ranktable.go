package topology

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/cann-train/cann-train/ascend/ranktable"
)

// RankTable produces the HCCL v1.0 rank table of the cluster: one server per
// host (server_id = host id) in hierarchy order, and for each host the
// devices its ranks use, devices[host][i] being the device of the host's
// i-th lowest rank. The table's rank ids equal the topology's ranks, so
// every host must hold one contiguous block of ranks ([ErrInterleaved]
// otherwise), and every host needs exactly one device per rank.
func RankTable(t *Topology, devices map[string][]ranktable.NodeDevice) (*ranktable.Table, error) {
	for _, h := range t.Hosts {
		if len(h.Ranks) == 0 {
			return nil, fmt.Errorf("%w: host %s has no ranks", ErrInvalid, h.Host)
		}
		if h.Ranks[len(h.Ranks)-1]-h.Ranks[0]+1 != len(h.Ranks) {
			return nil, fmt.Errorf("%w: host %s has ranks %s", ErrInterleaved, h.Host, ranges(h.Ranks))
		}
	}
	// Analyze orders hosts by lowest rank; sort anyway for a Topology
	// decoded from JSON, since FromNodes numbers ranks in node order.
	hosts := slices.SortedFunc(slices.Values(t.Hosts), func(a, b HostGroup) int { return cmp.Compare(a.Ranks[0], b.Ranks[0]) })
	nodes := make([]ranktable.Node, len(hosts))
	for i, h := range hosts {
		devs, ok := devices[h.Host]
		if !ok {
			return nil, fmt.Errorf("%w: no device list for host %s", ErrInvalid, h.Host)
		}
		if len(devs) != len(h.Ranks) {
			return nil, fmt.Errorf("%w: host %s has %d ranks but %d devices", ErrInvalid, h.Host, len(h.Ranks), len(devs))
		}
		nodes[i] = ranktable.Node{ID: h.Host, Devices: slices.Clone(devs)}
	}
	for _, host := range slices.Sorted(maps.Keys(devices)) {
		if !slices.ContainsFunc(hosts, func(h HostGroup) bool { return h.Host == host }) {
			return nil, fmt.Errorf("%w: device list for %s, which is not a host of the topology", ErrInvalid, host)
		}
	}
	tab, err := ranktable.FromNodes(nodes)
	if err != nil {
		return nil, fmt.Errorf("topology: rank table: %w", err)
	}
	return tab, nil
}
