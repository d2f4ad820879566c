package topology

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

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
	// (CheckRankTable is not applied here: a run's own table
	// (activities.rankTable) stands in the host's address for an NPU
	// without one, which a local run on one host shares.)
	return tab, nil
}

// CheckRankTable finds what a table that ranktable.Parse accepts still
// gets wrong for HCCL, every problem at once (errors.Join of
// *ranktable.FieldErrors wrapping ranktable.ErrInvalid): a device_ip that
// two devices share, on one server or on two. device_ip is the address of
// the NPU's own RoCE NIC (/etc/hccn.conf address_<device_id>;
// ascend_and_compute.md §a.1), one per device, so HCCL's links between
// ranks would meet at one NIC. (device_id is the physical chip id in
// [0, n−1], n the server's chips, which the table does not state: not
// checked.)
func CheckRankTable(t *ranktable.Table) error {
	var errs []error
	first := map[string]string{} // device_ip → the path of its first device
	for i, s := range t.Servers {
		for j, d := range s.Devices {
			if d.DeviceIP == "" {
				continue
			}
			ip := d.DeviceIP
			if a, err := netip.ParseAddr(ip); err == nil {
				ip = a.Unmap().String() // (::ffff:10.0.0.1 is 10.0.0.1)
			}
			path := fmt.Sprintf("server_list[%d].device[%d].device_ip", i, j)
			if at, dup := first[ip]; dup {
				errs = append(errs, &ranktable.FieldError{Path: path, Kind: ranktable.ErrInvalid,
					Msg: fmt.Sprintf("%q already used by %s: every device has its own RoCE address (/etc/hccn.conf address_<device_id>)", d.DeviceIP, strings.TrimSuffix(at, ".device_ip"))})
				continue
			}
			first[ip] = path
		}
	}
	return errors.Join(errs...)
}
