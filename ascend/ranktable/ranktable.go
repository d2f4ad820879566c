// Package ranktable reads and writes the HCCL rank table, version "1.0": the
// JSON file named by RANK_TABLE_FILE that tells HCCL (and the frameworks on
// top of it) which servers, devices, device NIC addresses and global ranks
// form a job. Version 1.0 is the schema of Atlas training (910) and A2
// (910B) clusters; 1.2 (A3 SuperPoD) and 2.0 (950) are refused with
// [ErrUnsupportedVersion].
//
// The on-disk form keeps every scalar a JSON string, as HCCL writes it:
//
//	{"version": "1.0", "status": "completed", "server_count": "2",
//	 "server_list": [{"server_id": "node_0",
//	                  "device": [{"device_id": "0", "device_ip": "192.168.1.8", "rank_id": "0"}, …],
//	                  "host_nic_ip": "reserve"}, …]}
//
// [Parse] is strict: unknown or duplicate keys, numbers written as JSON
// numbers, and inconsistent tables are errors, reported as a [*FieldError]
// naming the offending field (for example
// `server_list[1].device[3].rank_id: "x" is not a number`). [Table.Validate]
// enforces HCCL's rules: unique server ids, unique device ids per server,
// rank ids unique and contiguous 0..n-1 with each server holding one
// contiguous block, server_count equal to the number of servers, and device
// IPs present on multi-server tables (plain addresses: an IPv6 zone such as
// fe80::1%eth0 is refused). [FromNodes] builds a table from hosts
// and their devices, numbering ranks in order; [Table.Marshal] writes it.
package ranktable

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Schema constants of the v1.0 rank table.
const (
	Version1           = "1.0"
	StatusCompleted    = "completed"    // the table is usable
	StatusInitializing = "initializing" // written first by MindCluster, not yet usable
	HostNICReserve     = "reserve"      // host_nic_ip value written by hccl_tools and the HCCL docs
	maxServerIDLen     = 64
)

var (
	// ErrMalformed reports input that is not a v1.0 rank table: bad JSON, a
	// wrong JSON type, a missing, unknown or duplicate key, or an unparsable
	// value.
	ErrMalformed = errors.New("ranktable: malformed")
	// ErrInvalid reports a well-formed table that breaks an HCCL rule
	// (duplicate or non-contiguous rank ids, server_count mismatch, …).
	ErrInvalid = errors.New("ranktable: invalid")
	// ErrUnsupportedVersion reports a version other than "1.0".
	ErrUnsupportedVersion = errors.New("ranktable: unsupported version")
)

// FieldError locates a problem in a rank table. Path uses the JSON key names
// with indices, e.g. "server_list[1].device[3].rank_id"; it is empty for
// problems with the document as a whole. Kind is one of the package's
// sentinel errors, so errors.Is(err, ErrInvalid) works.
type FieldError struct {
	Path string
	Kind error
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "ranktable: " + e.Msg
	}
	return "ranktable: " + e.Path + ": " + e.Msg
}

// Unwrap returns the sentinel the error belongs to.
func (e *FieldError) Unwrap() error { return e.Kind }

func fieldErr(path string, kind error, format string, args ...any) error {
	return &FieldError{Path: path, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Table is a decoded v1.0 rank table.
type Table struct {
	Version string   // always Version1 for a parsed table
	Status  string   // StatusCompleted or StatusInitializing
	Servers []Server // in file order
}

// Server is one entry of server_list.
type Server struct {
	ServerID string
	Devices  []Device
	// Optional per-server keys: host_nic_ip ("reserve" in hccl_tools and
	// the HCCL examples) and the MindCluster additions host_ip,
	// container_ip and hardware_type. Empty means absent.
	HostNICIP    string
	HostIP       string
	ContainerIP  string
	HardwareType string
}

// Device is one NPU (one rank) of a server.
type Device struct {
	DeviceID   int    // physical chip id, as in /dev/davinci<N>
	DeviceIP   string // the NPU's RoCE NIC address (/etc/hccn.conf address_<N>); may be empty on a single server
	DevicePort int    // 0 means absent; otherwise 1..65535
	RankID     int    // global rank
}

// Ready reports whether HCCL may use the table (status "completed").
func (t *Table) Ready() bool { return t.Status == StatusCompleted }

// RankSize is the number of ranks (devices) in the table.
func (t *Table) RankSize() int {
	n := 0
	for _, s := range t.Servers {
		n += len(s.Devices)
	}
	return n
}

// Lookup returns the server index and device of a global rank.
func (t *Table) Lookup(rank int) (server int, dev Device, ok bool) {
	for i, s := range t.Servers {
		for _, d := range s.Devices {
			if d.RankID == rank {
				return i, d, true
			}
		}
	}
	return 0, Device{}, false
}

// Node describes one host for [FromNodes].
type Node struct {
	// ID becomes server_id; when empty, HostIP is used (the older
	// MindSpore convention).
	ID string
	// HostIP, when set, is also written as host_ip (a MindCluster key that
	// HCCL ignores).
	HostIP string
	// Devices in local rank order: the node's first device gets the
	// lowest of its ranks.
	Devices []NodeDevice
}

// NodeDevice is one device of a [Node].
type NodeDevice struct {
	ID   int    // physical device id
	IP   string // device NIC address
	Port int    // optional device_port; 0 = absent
}

// FromNodes builds a completed table from nodes in order. Ranks are numbered
// 0..n-1 through the nodes and their devices, so each server holds one
// contiguous block as HCCL requires. Every server gets host_nic_ip
// "reserve", as hccl_tools writes it. The result is validated.
func FromNodes(nodes []Node) (*Table, error) {
	t := &Table{Version: Version1, Status: StatusCompleted, Servers: make([]Server, len(nodes))}
	rank := 0
	for i, n := range nodes {
		id := n.ID
		if id == "" {
			id = n.HostIP
		}
		s := Server{ServerID: id, HostIP: n.HostIP, HostNICIP: HostNICReserve, Devices: make([]Device, len(n.Devices))}
		for j, d := range n.Devices {
			s.Devices[j] = Device{DeviceID: d.ID, DeviceIP: d.IP, DevicePort: d.Port, RankID: rank}
			rank++
		}
		t.Servers[i] = s
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Validate checks the table against the v1.0 rules; the error is a
// [*FieldError] wrapping ErrInvalid or ErrUnsupportedVersion.
func (t *Table) Validate() error {
	if t.Version != Version1 {
		return fieldErr("version", ErrUnsupportedVersion, "%q (only %q is supported)", t.Version, Version1)
	}
	// Every problem, not the first alone (a table written by hand, or by
	// a script gone wrong, has several): at most maxProblems of them.
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if t.Status != StatusCompleted && t.Status != StatusInitializing {
		add(fieldErr("status", ErrInvalid, "%q (want %q or %q)", t.Status, StatusCompleted, StatusInitializing))
	}
	if len(t.Servers) == 0 {
		add(fieldErr("server_list", ErrInvalid, "no servers"))
		return joinProblems(errs)
	}
	total := t.RankSize()
	type pos struct{ s, d int }
	rankAt := make(map[int]pos, total)
	serverAt := make(map[string]int, len(t.Servers))
	for i, s := range t.Servers {
		sp := fmt.Sprintf("server_list[%d]", i)
		switch {
		case s.ServerID == "":
			add(fieldErr(sp+".server_id", ErrInvalid, "empty"))
		case len(s.ServerID) > maxServerIDLen:
			add(fieldErr(sp+".server_id", ErrInvalid, "%d characters (at most %d)", len(s.ServerID), maxServerIDLen))
		}
		if j, dup := serverAt[s.ServerID]; dup && s.ServerID != "" {
			add(fieldErr(sp+".server_id", ErrInvalid, "%q already used by server_list[%d]", s.ServerID, j))
		} else {
			serverAt[s.ServerID] = i
		}
		if len(s.Devices) == 0 {
			add(fieldErr(sp+".device", ErrInvalid, "no devices"))
			continue
		}
		devAt := make(map[int]int, len(s.Devices))
		lo, hi, ranked := s.Devices[0].RankID, s.Devices[0].RankID, 0
		for j, d := range s.Devices {
			dp := fmt.Sprintf("%s.device[%d]", sp, j)
			if d.DeviceID < 0 {
				add(fieldErr(dp+".device_id", ErrInvalid, "%d is negative", d.DeviceID))
			} else if k, dup := devAt[d.DeviceID]; dup {
				add(fieldErr(dp+".device_id", ErrInvalid, "%d already used by %s.device[%d]", d.DeviceID, sp, k))
			} else {
				devAt[d.DeviceID] = j
			}
			if d.DeviceIP == "" {
				if len(t.Servers) > 1 {
					add(fieldErr(dp+".device_ip", ErrInvalid, "required when there is more than one server"))
				}
			} else if a, err := netip.ParseAddr(d.DeviceIP); err != nil {
				add(fieldErr(dp+".device_ip", ErrInvalid, "%q is not an IP address", d.DeviceIP))
			} else if a.Zone() != "" {
				add(fieldErr(dp+".device_ip", ErrInvalid, "%q has an IPv6 zone (%%%s): HCCL takes a plain address, give it without the zone", d.DeviceIP, a.Zone()))
			}
			if d.DevicePort != 0 && (d.DevicePort < 1 || d.DevicePort > 65535) {
				add(fieldErr(dp+".device_port", ErrInvalid, "%d out of range 1..65535", d.DevicePort))
			}
			switch p, dup := rankAt[d.RankID]; {
			case d.RankID < 0 || d.RankID >= total:
				add(fieldErr(dp+".rank_id", ErrInvalid, "%d out of range 0..%d (ranks must be contiguous from 0)", d.RankID, total-1))
			case dup:
				add(fieldErr(dp+".rank_id", ErrInvalid, "%d already used by server_list[%d].device[%d]", d.RankID, p.s, p.d))
			default:
				rankAt[d.RankID] = pos{i, j}
				lo, hi = min(lo, d.RankID), max(hi, d.RankID)
				ranked++
			}
		}
		if ranked == len(s.Devices) && hi-lo+1 != len(s.Devices) {
			add(fieldErr(sp+".device", ErrInvalid, "rank ids %d..%d are not one contiguous block of %d (ranks may not interleave across servers)", lo, hi, len(s.Devices)))
		}
	}
	return joinProblems(errs)
}

// maxProblems is how many of a table's problems an error names.
const maxProblems = 20

// joinProblems is errs as one error (nil for none; the error itself for
// one), naming at most maxProblems and how many more there are.
func joinProblems(errs []error) error {
	switch {
	case len(errs) == 0:
		return nil
	case len(errs) == 1:
		return errs[0]
	case len(errs) > maxProblems:
		more := len(errs) - maxProblems
		errs = append(errs[:maxProblems:maxProblems], fmt.Errorf("… and %d more problem(s)", more))
	}
	return errors.Join(errs...)
}

// wire types: the JSON layout, key order as in the HCCL documentation.
type wireTable struct {
	Version     string       `json:"version"`
	Status      string       `json:"status"`
	ServerCount string       `json:"server_count"`
	ServerList  []wireServer `json:"server_list"`
}

type wireServer struct {
	ServerID     string       `json:"server_id"`
	HostIP       string       `json:"host_ip,omitempty"`
	ContainerIP  string       `json:"container_ip,omitempty"`
	HardwareType string       `json:"hardware_type,omitempty"`
	Device       []wireDevice `json:"device"`
	HostNICIP    string       `json:"host_nic_ip,omitempty"`
}

type wireDevice struct {
	DeviceID   string `json:"device_id"`
	DeviceIP   string `json:"device_ip,omitempty"`
	DevicePort string `json:"device_port,omitempty"`
	RankID     string `json:"rank_id"`
}

func (t *Table) wire() wireTable {
	w := wireTable{Version: t.Version, Status: t.Status, ServerCount: strconv.Itoa(len(t.Servers)), ServerList: make([]wireServer, len(t.Servers))}
	for i, s := range t.Servers {
		ws := wireServer{ServerID: s.ServerID, HostIP: s.HostIP, ContainerIP: s.ContainerIP, HardwareType: s.HardwareType, HostNICIP: s.HostNICIP, Device: make([]wireDevice, len(s.Devices))}
		for j, d := range s.Devices {
			wd := wireDevice{DeviceID: strconv.Itoa(d.DeviceID), DeviceIP: d.DeviceIP, RankID: strconv.Itoa(d.RankID)}
			if d.DevicePort != 0 {
				wd.DevicePort = strconv.Itoa(d.DevicePort)
			}
			ws.Device[j] = wd
		}
		w.ServerList[i] = ws
	}
	return w
}

// Marshal validates the table and returns it as indented JSON (two spaces,
// trailing newline), ready to be written to RANK_TABLE_FILE.
func (t *Table) Marshal() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(t.wire(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("ranktable: encode: %w", err)
	}
	return append(b, '\n'), nil
}

// MarshalJSON writes the compact on-disk form, so a Table embedded in other
// JSON documents keeps the HCCL layout.
func (t Table) MarshalJSON() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(t.wire())
}

// UnmarshalJSON reads the on-disk form with the same rules as [Parse].
func (t *Table) UnmarshalJSON(b []byte) error {
	p, err := Parse(b)
	if err != nil {
		return err
	}
	*t = *p
	return nil
}
