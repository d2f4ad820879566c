package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend/ranktable"
)

const (
	gb        = 1e9
	intraLat  = 2 * time.Microsecond
	intraBW   = 20 * gb
	interLat  = 10 * time.Microsecond
	interBW   = 10 * gb
	slowBW    = 1 * gb
	slowLat   = 50 * time.Microsecond
	aliceHost = "node-a"
	bobHost   = "node-b"
)

// mesh measures every ordered pair of ranks: intraLat/intraBW on the same
// host, interLat/interBW across hosts, then applies the overrides.
func mesh(hosts []string, override map[[2]int]Link) []Link {
	var ls []Link
	for i := range hosts {
		for j := range hosts {
			if i == j {
				continue
			}
			l := Link{From: i, To: j, Latency: interLat, BytesPerSec: interBW}
			if hosts[i] == hosts[j] {
				l.Latency, l.BytesPerSec = intraLat, intraBW
			}
			if o, ok := override[[2]int{i, j}]; ok {
				l = o
			}
			ls = append(ls, l)
		}
	}
	return ls
}

func twoByFour() []string {
	return []string{aliceHost, aliceHost, aliceHost, aliceHost, bobHost, bobHost, bobHost, bobHost}
}

func TestAnalyze(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hosts    []string
		links    []Link
		opts     Options
		groups   []HostGroup
		levels   []LevelStats
		slow     [][2]int // flagged (from, to) pairs, in order
		slowKind []string // "bw", "lat" or "bw+lat" per flagged pair
	}{
		{
			name:  "uniform 2x4",
			hosts: twoByFour(),
			links: mesh(twoByFour(), nil),
			groups: []HostGroup{
				{Host: aliceHost, Ranks: []int{0, 1, 2, 3}},
				{Host: bobHost, Ranks: []int{4, 5, 6, 7}},
			},
			levels: []LevelStats{
				{Level: IntraHost, Links: 24, Alpha: intraLat, BytesPerSec: intraBW, Beta: 1 / intraBW},
				{Level: InterHost, Links: 32, Alpha: interLat, BytesPerSec: interBW, Beta: 1 / interBW},
			},
		},
		{
			name:  "2x4 with one degraded inter-host link and one slow intra-host link",
			hosts: twoByFour(),
			links: mesh(twoByFour(), map[[2]int]Link{
				{2, 6}: {From: 2, To: 6, Latency: interLat, BytesPerSec: slowBW},
				{1, 3}: {From: 1, To: 3, Latency: slowLat, BytesPerSec: intraBW},
			}),
			groups: []HostGroup{
				{Host: aliceHost, Ranks: []int{0, 1, 2, 3}},
				{Host: bobHost, Ranks: []int{4, 5, 6, 7}},
			},
			// One outlier among 24 (32) links leaves the medians unchanged.
			levels: []LevelStats{
				{Level: IntraHost, Links: 24, Alpha: intraLat, BytesPerSec: intraBW, Beta: 1 / intraBW},
				{Level: InterHost, Links: 32, Alpha: interLat, BytesPerSec: interBW, Beta: 1 / interBW},
			},
			slow:     [][2]int{{1, 3}, {2, 6}},
			slowKind: []string{"lat", "bw"},
		},
		{
			name:  "stricter thresholds flag a mildly slow link",
			hosts: twoByFour(),
			links: mesh(twoByFour(), map[[2]int]Link{
				{5, 0}: {From: 5, To: 0, Latency: 3 * interLat, BytesPerSec: 0.7 * interBW},
			}),
			opts: Options{SlowBandwidthFactor: 0.8, SlowLatencyFactor: 2},
			groups: []HostGroup{
				{Host: aliceHost, Ranks: []int{0, 1, 2, 3}},
				{Host: bobHost, Ranks: []int{4, 5, 6, 7}},
			},
			levels: []LevelStats{
				{Level: IntraHost, Links: 24, Alpha: intraLat, BytesPerSec: intraBW, Beta: 1 / intraBW},
				{Level: InterHost, Links: 32, Alpha: interLat, BytesPerSec: interBW, Beta: 1 / interBW},
			},
			slow:     [][2]int{{5, 0}},
			slowKind: []string{"bw+lat"},
		},
		{
			name:   "single rank",
			hosts:  []string{aliceHost},
			groups: []HostGroup{{Host: aliceHost, Ranks: []int{0}}},
			levels: []LevelStats{},
		},
		{
			name:   "one rank per host: inter-host level only",
			hosts:  []string{"h0", "h1", "h2"},
			links:  mesh([]string{"h0", "h1", "h2"}, nil),
			groups: []HostGroup{{Host: "h0", Ranks: []int{0}}, {Host: "h1", Ranks: []int{1}}, {Host: "h2", Ranks: []int{2}}},
			levels: []LevelStats{{Level: InterHost, Links: 6, Alpha: interLat, BytesPerSec: interBW, Beta: 1 / interBW}},
		},
		{
			name:  "one direction per pair, even count: median of the middle two",
			hosts: []string{"h", "h", "h"},
			links: []Link{
				{From: 0, To: 1, Latency: 1 * time.Microsecond, BytesPerSec: 10 * gb},
				{From: 0, To: 2, Latency: 2 * time.Microsecond, BytesPerSec: 20 * gb},
				{From: 2, To: 1, Latency: 3 * time.Microsecond, BytesPerSec: 30 * gb},
				{From: 1, To: 2, Latency: 4 * time.Microsecond, BytesPerSec: 40 * gb},
			},
			groups:   []HostGroup{{Host: "h", Ranks: []int{0, 1, 2}}},
			levels:   []LevelStats{{Level: IntraHost, Links: 4, Alpha: 2500 * time.Nanosecond, BytesPerSec: 25 * gb, Beta: 1 / (25 * gb)}},
			slow:     [][2]int{{0, 1}}, // 10 GB/s < 0.5 × 25 GB/s
			slowKind: []string{"bw"},
		},
		{
			name:   "interleaved hosts are grouped, ordered by lowest rank",
			hosts:  []string{bobHost, aliceHost, bobHost, aliceHost},
			links:  mesh([]string{bobHost, aliceHost, bobHost, aliceHost}, nil),
			groups: []HostGroup{{Host: bobHost, Ranks: []int{0, 2}}, {Host: aliceHost, Ranks: []int{1, 3}}},
			levels: []LevelStats{
				{Level: IntraHost, Links: 4, Alpha: intraLat, BytesPerSec: intraBW, Beta: 1 / intraBW},
				{Level: InterHost, Links: 8, Alpha: interLat, BytesPerSec: interBW, Beta: 1 / interBW},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := Analyze(tc.hosts, tc.links, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if top.Ranks() != len(tc.hosts) {
				t.Errorf("Ranks = %d", top.Ranks())
			}
			if !reflect.DeepEqual(top.Hosts, tc.groups) {
				t.Errorf("hosts %+v, want %+v", top.Hosts, tc.groups)
			}
			if !reflect.DeepEqual(top.Levels, tc.levels) {
				t.Errorf("levels\n got %+v\nwant %+v", top.Levels, tc.levels)
			}
			var got [][2]int
			var kinds []string
			for _, s := range top.Slow {
				got = append(got, [2]int{s.From, s.To})
				k := map[[2]bool]string{{true, false}: "bw", {false, true}: "lat", {true, true}: "bw+lat"}[[2]bool{s.SlowBandwidth, s.SlowLatency}]
				kinds = append(kinds, k)
				if s.Level != top.LevelOf(s.From, s.To) {
					t.Errorf("slow %d->%d level %s", s.From, s.To, s.Level)
				}
			}
			if !reflect.DeepEqual(got, tc.slow) || !reflect.DeepEqual(kinds, tc.slowKind) {
				t.Errorf("slow %v %v, want %v %v", got, kinds, tc.slow, tc.slowKind)
			}
		})
	}
}

func TestSlowRatios(t *testing.T) {
	top, err := Analyze(twoByFour(), mesh(twoByFour(), map[[2]int]Link{{2, 6}: {From: 2, To: 6, Latency: interLat, BytesPerSec: slowBW}}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if top.Options != DefaultOptions() {
		t.Fatalf("options %+v", top.Options)
	}
	s := top.Slow[0]
	if s.BandwidthRatio != 0.1 || s.LatencyRatio != 1 || s.Level != InterHost || !s.SlowBandwidth || s.SlowLatency {
		t.Fatalf("slow %+v", s)
	}
	if l, ok := top.Measurement(6, 2); !ok || l.BytesPerSec != interBW {
		t.Fatalf("Measurement(6,2) = %+v %v", l, ok)
	}
	if _, ok := top.Stats(InterHost); !ok {
		t.Fatal("no inter-host stats")
	}
}

func TestAnalyzeErrors(t *testing.T) {
	hosts := []string{"a", "a", "b"}
	full := mesh(hosts, nil)
	without := func(from, to int) []Link {
		var ls []Link
		for _, l := range full {
			if (l.From != from || l.To != to) && (l.From != to || l.To != from) {
				ls = append(ls, l)
			}
		}
		return ls
	}
	with := func(extra ...Link) []Link { return append(append([]Link{}, full...), extra...) }
	for _, tc := range []struct {
		name     string
		hosts    []string
		links    []Link
		opts     Options
		kind     error
		from, to int // for *LinkError; -1 when not a LinkError
		want     string
	}{
		{"no ranks", nil, nil, Options{}, ErrInvalid, -1, -1, "no ranks"},
		{"empty host", []string{"a", ""}, nil, Options{}, ErrInvalid, -1, -1, "rank 1 has an empty host id"},
		{"missing pair", hosts, without(1, 2), Options{}, ErrMissingLink, 1, 2, "topology: link 1->2: no measurement in either direction (ranks on a and b)"},
		{"duplicate pair", hosts, with(Link{From: 2, To: 0, Latency: 1, BytesPerSec: 1}), Options{}, ErrDuplicateLink, 2, 0, "link 2->0: measured twice"},
		{"self link", hosts, with(Link{From: 1, To: 1, BytesPerSec: 1}), Options{}, ErrInvalid, 1, 1, "a rank linked to itself"},
		{"out of range", hosts, with(Link{From: 0, To: 3, BytesPerSec: 1}), Options{}, ErrInvalid, 0, 3, "rank out of range 0..2"},
		{"negative rank", hosts, with(Link{From: -1, To: 0, BytesPerSec: 1}), Options{}, ErrInvalid, -1, 0, "rank out of range"},
		{"zero bandwidth", hosts, []Link{{From: 0, To: 1}}, Options{}, ErrInvalid, 0, 1, "bandwidth 0 B/s is not a positive finite number"},
		{"NaN bandwidth", hosts, []Link{{From: 0, To: 1, BytesPerSec: math.NaN()}}, Options{}, ErrInvalid, 0, 1, "NaN"},
		{"Inf bandwidth", hosts, []Link{{From: 0, To: 1, BytesPerSec: math.Inf(1)}}, Options{}, ErrInvalid, 0, 1, "+Inf"},
		{"negative latency", hosts, []Link{{From: 0, To: 1, Latency: -1, BytesPerSec: 1}}, Options{}, ErrInvalid, 0, 1, "negative latency"},
		{"bad bw factor", hosts, full, Options{SlowBandwidthFactor: 1.5}, ErrInvalid, -1, -1, "SlowBandwidthFactor 1.5 not in (0, 1]"},
		{"bad latency factor", hosts, full, Options{SlowLatencyFactor: 0.5}, ErrInvalid, -1, -1, "SlowLatencyFactor 0.5"},
		{"links for one rank", []string{"a"}, []Link{{From: 0, To: 1, BytesPerSec: 1}}, Options{}, ErrInvalid, 0, 1, "rank out of range 0..0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Analyze(tc.hosts, tc.links, tc.opts)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.kind, tc.want)
			}
			var le *LinkError
			if isLink := errors.As(err, &le); isLink != (tc.from != -1 || tc.to != -1) {
				t.Fatalf("LinkError = %v for %v", isLink, err)
			} else if isLink && (le.From != tc.from || le.To != tc.to) {
				t.Fatalf("pair %d->%d, want %d->%d", le.From, le.To, tc.from, tc.to)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, hosts := range [][]string{twoByFour(), {"solo"}} {
		top, err := Analyze(hosts, mesh(hosts, map[[2]int]Link{{2, 6}: {From: 2, To: 6, Latency: interLat, BytesPerSec: slowBW}}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(top)
		if err != nil {
			t.Fatal(err)
		}
		var back Topology
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&back, top) {
			t.Fatalf("round trip differs:\n%s", b)
		}
		if len(hosts) == 1 && !strings.Contains(string(b), `"levels":[],"links":[]`) {
			t.Fatalf("single rank JSON: %s", b)
		}
	}
}

func TestWriteText(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	top, err := Analyze(hosts, mesh(hosts, map[[2]int]Link{{0, 3}: {From: 0, To: 3, Latency: slowLat, BytesPerSec: slowBW}}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := top.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	want := `topology: 4 ranks on 2 host(s)

hierarchy:
  a  ranks 0-1  (2)
  b  ranks 2-3  (2)

levels:
  level       links  alpha    bandwidth   beta
  intra-host  4      2.0 µs   20.00 GB/s  5e-11 s/B
  inter-host  8      10.0 µs  10.00 GB/s  1e-10 s/B

slow links (bandwidth < 0.5× or latency > 3× the level median): 1
  0 -> 3  inter-host  50.0 µs  1.00 GB/s  bandwidth 0.10× median, latency 5.0× median

latency (µs), row = from, column = to:
      0    1    2    3
 0    -  2.0 10.0 50.0
 1  2.0    - 10.0 10.0
 2 10.0 10.0    -  2.0
 3 10.0 10.0  2.0    -

bandwidth (GB/s), row = from, column = to:
       0     1     2     3
 0     - 20.00 10.00  1.00
 1 20.00     - 10.00 10.00
 2 10.00 10.00     - 20.00
 3 10.00 10.00 20.00     -
`
	if got := buf.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}

	one, _ := Analyze([]string{"solo"}, nil, Options{})
	buf.Reset()
	if err := one.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "(none: a single rank has no links)") {
		t.Fatalf("single rank:\n%s %v", buf.String(), err)
	}
	if got := ranges([]int{0, 1, 2, 5, 7, 8}); got != "0-2,5,7-8" {
		t.Fatalf("ranges = %q", got)
	}
}

func TestRankTable(t *testing.T) {
	top, err := Analyze(twoByFour(), mesh(twoByFour(), nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	devs := func(subnet string) []ranktable.NodeDevice {
		var ds []ranktable.NodeDevice
		for i := range 4 {
			ds = append(ds, ranktable.NodeDevice{ID: i + 4, IP: subnet + string(rune('1'+i))})
		}
		return ds
	}
	devices := map[string][]ranktable.NodeDevice{aliceHost: devs("192.168.1."), bobHost: devs("192.168.2.")}
	tab, err := RankTable(top, devices)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Servers) != 2 || tab.Servers[1].ServerID != bobHost || tab.RankSize() != 8 {
		t.Fatalf("table %+v", tab)
	}
	for r := range 8 {
		s, d, ok := tab.Lookup(r)
		if !ok || tab.Servers[s].ServerID != top.RankHost[r] || d.DeviceID != r%4+4 {
			t.Fatalf("rank %d -> server %d device %+v", r, s, d)
		}
	}
	if _, err := tab.Marshal(); err != nil {
		t.Fatal(err)
	}

	inter, _ := Analyze([]string{"b", "a", "b", "a"}, mesh([]string{"b", "a", "b", "a"}, nil), Options{})
	for _, tc := range []struct {
		name    string
		top     *Topology
		devices map[string][]ranktable.NodeDevice
		kind    error
		want    string
	}{
		{"interleaved", inter, nil, ErrInterleaved, "host b has ranks 0,2"},
		{"missing host", top, map[string][]ranktable.NodeDevice{aliceHost: devs("10.0.0.")}, ErrInvalid, "no device list for host node-b"},
		{"count mismatch", top, map[string][]ranktable.NodeDevice{aliceHost: devs("10.0.0."), bobHost: devs("10.0.1.")[:3]}, ErrInvalid, "host node-b has 4 ranks but 3 devices"},
		{"extra host", top, map[string][]ranktable.NodeDevice{aliceHost: devs("10.0.0."), bobHost: devs("10.0.1."), "node-c": nil}, ErrInvalid, "device list for node-c, which is not a host"},
		{"no device ip", top, map[string][]ranktable.NodeDevice{aliceHost: devs("10.0.0."), bobHost: {{ID: 0}, {ID: 1}, {ID: 2}, {ID: 3}}}, ranktable.ErrInvalid,
			"topology: rank table: ranktable: server_list[1].device[0].device_ip: required when there is more than one server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RankTable(tc.top, tc.devices)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.kind, tc.want)
			}
		})
	}
}

// TestCheckRankTable: every device_ip two devices share is named, on one
// server or across servers (an IPv4-mapped IPv6 spelling too); a table
// whose devices have their own addresses, or none, passes.
func TestCheckRankTable(t *testing.T) {
	table := func(ips ...[]string) *ranktable.Table {
		tab := &ranktable.Table{Version: ranktable.Version1, Status: ranktable.StatusCompleted}
		rank := 0
		for i, server := range ips {
			s := ranktable.Server{ServerID: string(rune('a' + i))}
			for j, ip := range server {
				s.Devices = append(s.Devices, ranktable.Device{DeviceID: j, DeviceIP: ip, RankID: rank})
				rank++
			}
			tab.Servers = append(tab.Servers, s)
		}
		return tab
	}
	for _, tc := range []struct {
		name string
		tab  *ranktable.Table
		want []string // "": valid
	}{
		{"own addresses", table([]string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.1.1", "10.0.1.2"}), nil},
		{"one server, no addresses", table([]string{"", "", ""}), nil},
		{"shared on one server", table([]string{"10.0.0.1", "10.0.0.1"}),
			[]string{`server_list[0].device[1].device_ip: "10.0.0.1" already used by server_list[0].device[0]`}},
		{"shared across servers, twice", table([]string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.0.2", "::ffff:10.0.0.1"}),
			[]string{`server_list[1].device[0].device_ip: "10.0.0.2" already used by server_list[0].device[1]`,
				`server_list[1].device[1].device_ip: "::ffff:10.0.0.1" already used by server_list[0].device[0]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRankTable(tc.tab)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ranktable.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if got := len(strings.Split(err.Error(), "\n")); got != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%v", got, len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
