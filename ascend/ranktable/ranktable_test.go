package ranktable

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// canonical decodes JSON into generic values so documents can be compared
// regardless of key order and whitespace.
func canonical(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return v
}

func TestParseReferenceSample(t *testing.T) {
	tab, err := Parse(readFixture(t, "hccl_2s2p.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Table{Version: "1.0", Status: "completed", Servers: []Server{
		{ServerID: "node_0", HostNICIP: "reserve", Devices: []Device{
			{DeviceID: 0, DeviceIP: "192.168.1.8", RankID: 0},
			{DeviceID: 1, DeviceIP: "192.168.1.9", RankID: 1},
		}},
		{ServerID: "node_1", HostNICIP: "reserve", Devices: []Device{
			{DeviceID: 0, DeviceIP: "192.168.2.8", RankID: 2},
			{DeviceID: 1, DeviceIP: "192.168.2.9", RankID: 3},
		}},
	}}
	if !reflect.DeepEqual(tab, want) {
		t.Fatalf("got %+v\nwant %+v", tab, want)
	}
	if !tab.Ready() || tab.RankSize() != 4 {
		t.Fatalf("Ready=%v RankSize=%d", tab.Ready(), tab.RankSize())
	}
	if s, d, ok := tab.Lookup(2); !ok || s != 1 || d.DeviceIP != "192.168.2.8" {
		t.Fatalf("Lookup(2) = %d %+v %v", s, d, ok)
	}
	if _, _, ok := tab.Lookup(4); ok {
		t.Fatal("Lookup(4) found a rank")
	}
}

// TestRoundTrip checks that Parse followed by Marshal reproduces each fixture
// as a JSON document, and that the verbatim reference sample is reproduced
// byte for byte once both are compacted (same key order).
func TestRoundTrip(t *testing.T) {
	for _, name := range []string{"hccl_2s2p.json", "hccl_tools_1s8p.json", "mindcluster_2s4p.json"} {
		t.Run(name, func(t *testing.T) {
			in := readFixture(t, name)
			tab, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tab.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(canonical(t, in), canonical(t, out)) {
				t.Fatalf("round trip changed the document:\nin  %s\nout %s", in, out)
			}
			again, err := Parse(out)
			if err != nil || !reflect.DeepEqual(again, tab) {
				t.Fatalf("reparse: %v\n%+v\n%+v", err, again, tab)
			}
		})
	}
	var want, got bytes.Buffer
	in := readFixture(t, "hccl_2s2p.json")
	tab, _ := Parse(in)
	out, _ := tab.Marshal()
	if err := json.Compact(&want, in); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&got, out); err != nil {
		t.Fatal(err)
	}
	if want.String() != got.String() {
		t.Fatalf("key order differs from the reference:\nwant %s\ngot  %s", want.String(), got.String())
	}
}

func TestJSONEmbedding(t *testing.T) {
	tab, err := Parse(readFixture(t, "hccl_2s2p.json"))
	if err != nil {
		t.Fatal(err)
	}
	type envelope struct {
		Table Table `json:"rank_table"`
	}
	b, err := json.Marshal(envelope{*tab})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"rank_table":{"version":"1.0","status":"completed","server_count":"2"`) {
		t.Fatalf("embedded form: %s", b)
	}
	var back envelope
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back.Table, tab) {
		t.Fatalf("embedded round trip: %+v", back.Table)
	}
}

func TestFromNodes(t *testing.T) {
	nodes := []Node{
		{ID: "node_0", Devices: []NodeDevice{{ID: 0, IP: "192.168.1.8"}, {ID: 1, IP: "192.168.1.9"}}},
		{ID: "node_1", Devices: []NodeDevice{{ID: 0, IP: "192.168.2.8"}, {ID: 1, IP: "192.168.2.9"}}},
	}
	tab, err := FromNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tab.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(canonical(t, out), canonical(t, readFixture(t, "hccl_2s2p.json"))) {
		t.Fatalf("FromNodes output differs from the reference sample:\n%s", out)
	}

	// Host IP as server id, device ports, a single server without device IPs.
	tab, err = FromNodes([]Node{{HostIP: "10.0.0.7", Devices: []NodeDevice{{ID: 4, Port: 16667}, {ID: 5, Port: 16667}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ = tab.Marshal()
	want := `{"version":"1.0","status":"completed","server_count":"1","server_list":[{"server_id":"10.0.0.7","host_ip":"10.0.0.7","device":[{"device_id":"4","device_port":"16667","rank_id":"0"},{"device_id":"5","device_port":"16667","rank_id":"1"}],"host_nic_ip":"reserve"}]}`
	var got bytes.Buffer
	_ = json.Compact(&got, out)
	if got.String() != want {
		t.Fatalf("got  %s\nwant %s", got.String(), want)
	}
}

func TestFromNodesErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"no nodes", nil, "server_list: no servers"},
		{"no id", []Node{{Devices: []NodeDevice{{ID: 0}}}}, "server_list[0].server_id: empty"},
		{"no devices", []Node{{ID: "a"}}, "server_list[0].device: no devices"},
		{"duplicate server", []Node{{ID: "a", Devices: []NodeDevice{{ID: 0, IP: "1.1.1.1"}}}, {ID: "a", Devices: []NodeDevice{{ID: 0, IP: "1.1.1.2"}}}},
			`server_list[1].server_id: "a" already used by server_list[0]`},
		{"duplicate device", []Node{{ID: "a", Devices: []NodeDevice{{ID: 3}, {ID: 3}}}}, "server_list[0].device[1].device_id: 3 already used by server_list[0].device[0]"},
		{"missing ip multi-server", []Node{{ID: "a", Devices: []NodeDevice{{ID: 0, IP: "1.1.1.1"}}}, {ID: "b", Devices: []NodeDevice{{ID: 0}}}},
			"server_list[1].device[0].device_ip: required when there is more than one server"},
		{"bad ip", []Node{{ID: "a", Devices: []NodeDevice{{ID: 0, IP: "1.1.1"}}}}, `server_list[0].device[0].device_ip: "1.1.1" is not an IP address`},
		{"zoned ip", []Node{{ID: "a", Devices: []NodeDevice{{ID: 0, IP: "fe80::1%eth0"}}}}, `server_list[0].device[0].device_ip: "fe80::1%eth0" has an IPv6 zone`},
		{"bad port", []Node{{ID: "a", Devices: []NodeDevice{{ID: 0, Port: 70000}}}}, "device_port: 70000 out of range"},
		{"negative device", []Node{{ID: "a", Devices: []NodeDevice{{ID: -1}}}}, "device_id: -1 is negative"},
		{"long id", []Node{{ID: strings.Repeat("x", 65), Devices: []NodeDevice{{ID: 0}}}}, "65 characters (at most 64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromNodes(tc.nodes)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidateRanks(t *testing.T) {
	mk := func(ranks ...[]int) *Table {
		tab := &Table{Version: Version1, Status: StatusCompleted}
		for i, rs := range ranks {
			s := Server{ServerID: string(rune('a' + i))}
			for j, r := range rs {
				s.Devices = append(s.Devices, Device{DeviceID: j, DeviceIP: "10.0.0.1", RankID: r})
			}
			tab.Servers = append(tab.Servers, s)
		}
		return tab
	}
	for _, tc := range []struct {
		name string
		tab  *Table
		want string // "" = valid
	}{
		{"blocks in order", mk([]int{0, 1, 2, 3}, []int{4, 5, 6, 7}), ""},
		{"blocks reversed", mk([]int{4, 5, 6, 7}, []int{0, 1, 2, 3}), ""},
		{"unordered inside a block", mk([]int{1, 0}, []int{3, 2}), ""},
		{"interleaved", mk([]int{0, 1, 2, 7}, []int{3, 4, 5, 6}), "server_list[0].device: rank ids 0..7 are not one contiguous block of 4"},
		{"duplicate", mk([]int{0, 1}, []int{1, 2}), "server_list[1].device[0].rank_id: 1 already used by server_list[0].device[1]"},
		{"gap", mk([]int{0, 1}, []int{2, 4}), "server_list[1].device[1].rank_id: 4 out of range 0..3"},
		{"initializing is valid", func() *Table { t := mk([]int{0}); t.Status = StatusInitializing; return t }(), ""},
		{"bad status", func() *Table { t := mk([]int{0}); t.Status = "done"; return t }(), `status: "done"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tab.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want FieldError containing %q", err, tc.want)
			}
		})
	}
	tab := mk([]int{0})
	tab.Version = "1.2"
	if err := tab.Validate(); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version 1.2: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	valid := string(readFixture(t, "hccl_2s2p.json"))
	// edit returns the reference sample with one substring replaced.
	edit := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(valid, old, new, 1)
	}
	const dev13 = `{"device_id": "1", "device_ip": "192.168.2.9", "rank_id": "3"}`
	for _, tc := range []struct {
		name, in string
		kind     error
		want     string
	}{
		{"empty", "", ErrMalformed, "invalid JSON"},
		{"garbage", "npu-smi: command not found", ErrMalformed, "invalid JSON at byte 2"},
		{"truncated", valid[:100], ErrMalformed, "invalid JSON"},
		{"array", "[]", ErrMalformed, "expected an object, got []"},
		{"rank not a number", edit(dev13, `{"device_id": "1", "device_ip": "192.168.2.9", "rank_id": "x"}`), ErrMalformed,
			`ranktable: server_list[1].device[1].rank_id: "x" is not a number`},
		{"negative rank", edit(`"rank_id": "3"`, `"rank_id": "-3"`), ErrMalformed, `rank_id: "-3" is not a number`},
		{"empty rank", edit(`"rank_id": "3"`, `"rank_id": ""`), ErrMalformed, `rank_id: empty`},
		{"huge rank", edit(`"rank_id": "3"`, `"rank_id": "99999999999999999999"`), ErrMalformed, `is out of range`},
		{"json number", edit(`"server_count": "2"`, `"server_count": 2`), ErrMalformed,
			"server_count: expected a JSON string, got 2 (v1.0 writes every value as a string)"},
		{"missing rank", edit(`, "rank_id": "3"`, ``), ErrMalformed, "server_list[1].device[1].rank_id: missing"},
		{"missing version", edit(`"version": "1.0",`, ``), ErrMalformed, "version: missing"},
		{"unknown key", edit(`"host_nic_ip": "reserve"}`, `"host_nic_ip": "reserve", "nic": "x"}`), ErrMalformed, "server_list[0].nic: unknown key"},
		{"unknown top key", edit(`"status"`, `"extra": 1, "status"`), ErrMalformed, "extra: unknown key"},
		{"duplicate key", edit(`"status": "completed",`, `"status": "completed", "status": "initializing",`), ErrMalformed, "status: duplicate key"},
		{"device not object", edit(dev13, `"3"`), ErrMalformed, `server_list[1].device[1]: expected an object, got "3"`},
		{"device not array", `{"version":"1.0","status":"completed","server_count":"1","server_list":[{"server_id":"a","device":{"device_id":"0"}}]}`,
			ErrMalformed, `server_list[0].device: expected an array, got {"device_id":"0"}`},
		{"zero port", edit(`"device_ip": "192.168.2.9", `, `"device_ip": "192.168.2.9", "device_port": "0", `), ErrInvalid, "device_port: 0 out of range"},
		{"count mismatch", edit(`"server_count": "2"`, `"server_count": "3"`), ErrInvalid, "server_count: 3, but server_list has 2 entries"},
		{"duplicate rank", edit(`"rank_id": "3"`, `"rank_id": "2"`), ErrInvalid, "server_list[1].device[1].rank_id: 2 already used by server_list[1].device[0]"},
		{"duplicate device", edit(dev13, `{"device_id": "0", "device_ip": "192.168.2.9", "rank_id": "3"}`), ErrInvalid, "server_list[1].device[1].device_id: 0 already used"},
		{"version 1.2", edit(`"version": "1.0"`, `"version": "1.2", "super_pod_list": []`), ErrUnsupportedVersion, `version: "1.2" (only "1.0" is supported)`},
		{"zoned ipv6", edit(`"device_ip": "192.168.2.9"`, `"device_ip": "fe80::1%eth0"`), ErrInvalid,
			`server_list[1].device[1].device_ip: "fe80::1%eth0" has an IPv6 zone (%eth0)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestReadLimit(t *testing.T) {
	tab, err := Read(bytes.NewReader(readFixture(t, "hccl_2s2p.json")))
	if err != nil || tab.RankSize() != 4 {
		t.Fatalf("Read: %v", err)
	}
	big := bytes.Repeat([]byte(" "), maxInputBytes+1)
	if _, err := Read(bytes.NewReader(big)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized input: %v", err)
	}
}

// FuzzParse: Parse never panics, and whatever it accepts survives a
// Marshal/Parse round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"hccl_2s2p.json", "hccl_tools_1s8p.json", "mindcluster_2s4p.json"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte(`{"version":"1.0","status":"initializing","server_count":"1","server_list":[{"server_id":"a","device":[{"device_id":"0","rank_id":"0","device_port":"1"}]}]}`))
	f.Add([]byte(`{"version":"1.0","server_count":"0","server_list":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := Parse(data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FieldError: %v", err)
			}
			return
		}
		out, err := tab.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed table: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("reparse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, tab) {
			t.Fatalf("round trip changed the table:\n%+v\n%+v", tab, again)
		}
	})
}

// TestPlainIPv6DeviceIP: an IPv6 device_ip without a zone is taken.
func TestPlainIPv6DeviceIP(t *testing.T) {
	if _, err := FromNodes([]Node{{ID: "a", Devices: []NodeDevice{{ID: 0, IP: "fe80::1"}}}, {ID: "b", Devices: []NodeDevice{{ID: 0, IP: "2001:db8::2"}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestParseNamesEveryProblem: a table with several problems names each
// (a device that does not parse in two servers; rank ids clashing and a
// bad device IP), not the first alone, each still a *FieldError.
func TestParseNamesEveryProblem(t *testing.T) {
	valid := string(readFixture(t, "hccl_2s2p.json"))
	for _, tc := range []struct {
		name  string
		edits [][2]string
		want  []string
	}{
		{"parse", [][2]string{{`"rank_id": "0"`, `"rank_id": "x"`}, {`"rank_id": "3"`, `"rank_id": "y"`}},
			[]string{`server_list[0].device[0].rank_id: "x" is not a number`, `server_list[1].device[1].rank_id: "y" is not a number`}},
		{"validate", [][2]string{{`"rank_id": "3"`, `"rank_id": "0"`}, {`"device_ip": "192.168.2.9"`, `"device_ip": "not-an-ip"`}},
			[]string{`server_list[1].device[1].rank_id`, `0 already used by server_list[0].device[0]`, `"not-an-ip" is not an IP address`}},
	} {
		in := valid
		for _, e := range tc.edits {
			if !strings.Contains(in, e[0]) {
				t.Fatalf("%s: fixture lacks %q", tc.name, e[0])
			}
			in = strings.Replace(in, e[0], e[1], 1)
		}
		_, err := Parse([]byte(in))
		var fe *FieldError
		if err == nil || !errors.As(err, &fe) {
			t.Fatalf("%s: %v; want field errors", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to name %q", tc.name, err, w)
			}
		}
	}
}

// TestJoinProblemsCaps: at most maxProblems problems are named, then how
// many more.
func TestJoinProblemsCaps(t *testing.T) {
	var errs []error
	for i := range maxProblems + 5 {
		errs = append(errs, fmt.Errorf("problem %d", i))
	}
	err := joinProblems(errs)
	if got := strings.Count(err.Error(), "\n") + 1; got != maxProblems+1 || !strings.HasSuffix(err.Error(), "… and 5 more problem(s)") {
		t.Errorf("%d lines, ending %q", got, err.Error()[max(0, len(err.Error())-40):])
	}
	if joinProblems(errs[:1]) != errs[0] || joinProblems(nil) != nil {
		t.Error("one problem is itself, none is nil")
	}
}
