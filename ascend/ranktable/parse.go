package ranktable

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxInputBytes bounds what Parse and Read accept; real tables for the
// largest documented clusters (1152 servers × 8 devices) are about 1 MiB.
const maxInputBytes = 16 << 20

// Read parses a rank table from r (see [Parse]).
func Read(r io.Reader) (*Table, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ranktable: read: %w", err)
	}
	return Parse(b)
}

// Parse decodes and validates a v1.0 rank table. Errors are [*FieldError]s
// wrapping ErrMalformed, ErrInvalid or ErrUnsupportedVersion.
func Parse(data []byte) (*Table, error) {
	if len(data) > maxInputBytes {
		return nil, fieldErr("", ErrMalformed, "input larger than %d bytes", maxInputBytes)
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fieldErr("", ErrMalformed, "invalid JSON at byte %d: %v", se.Offset, err)
		}
		return nil, fieldErr("", ErrMalformed, "invalid JSON: %v", err)
	}
	top, err := object(data, "") // any keys: a 1.2/2.0 table must fail on its version, not on its extra keys
	if err != nil {
		return nil, err
	}
	t := &Table{}
	if t.Version, err = str(top, "", "version"); err != nil {
		return nil, err
	}
	if t.Version != Version1 {
		return nil, fieldErr("version", ErrUnsupportedVersion, "%q (only %q is supported)", t.Version, Version1)
	}
	if err := onlyKeys(top, "", "version", "status", "server_count", "server_list"); err != nil {
		return nil, err
	}
	if t.Status, err = str(top, "", "status"); err != nil {
		return nil, err
	}
	count, err := num(top, "", "server_count")
	if err != nil {
		return nil, err
	}
	list, err := array(top, "", "server_list")
	if err != nil {
		return nil, err
	}
	if count != len(list) {
		return nil, fieldErr("server_count", ErrInvalid, "%d, but server_list has %d entries", count, len(list))
	}
	t.Servers = make([]Server, len(list))
	var errs []error // (every server's problems, not the first's alone)
	for i, raw := range list {
		if t.Servers[i], err = parseServer(raw, fmt.Sprintf("server_list[%d]", i)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := joinProblems(errs); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func parseServer(raw json.RawMessage, path string) (Server, error) {
	m, err := object(raw, path, "server_id", "device", "host_nic_ip", "host_ip", "container_ip", "hardware_type")
	if err != nil {
		return Server{}, err
	}
	var s Server
	if s.ServerID, err = str(m, path, "server_id"); err != nil {
		return Server{}, err
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"host_nic_ip", &s.HostNICIP}, {"host_ip", &s.HostIP}, {"container_ip", &s.ContainerIP}, {"hardware_type", &s.HardwareType}} {
		if *f.dst, err = optStr(m, path, f.key); err != nil {
			return Server{}, err
		}
	}
	devs, err := array(m, path, "device")
	if err != nil {
		return Server{}, err
	}
	s.Devices = make([]Device, len(devs))
	var errs []error // (every device's first problem)
	for j, raw := range devs {
		if err := parseDevice(raw, fmt.Sprintf("%s.device[%d]", path, j), &s.Devices[j]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := joinProblems(errs); err != nil {
		return Server{}, err
	}
	return s, nil
}

// parseDevice decodes one device of a server's list (path names it) into d.
func parseDevice(raw json.RawMessage, dp string, d *Device) error {
	dm, err := object(raw, dp, "device_id", "device_ip", "device_port", "rank_id")
	if err != nil {
		return err
	}
	if d.DeviceID, err = num(dm, dp, "device_id"); err != nil {
		return err
	}
	if d.DeviceIP, err = optStr(dm, dp, "device_ip"); err != nil {
		return err
	}
	if _, ok := dm["device_port"]; ok {
		if d.DevicePort, err = num(dm, dp, "device_port"); err != nil {
			return err
		}
		if d.DevicePort == 0 {
			return fieldErr(join(dp, "device_port"), ErrInvalid, "0 out of range 1..65535")
		}
	}
	if d.RankID, err = num(dm, dp, "rank_id"); err != nil {
		return err
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// object decodes a JSON object whose keys must be among allowed (any key
// when allowed is empty), rejecting duplicate keys (encoding/json would
// silently keep the last one).
func object(raw json.RawMessage, path string, allowed ...string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fieldErr(path, ErrMalformed, "%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fieldErr(path, ErrMalformed, "expected an object, got %s", show(raw))
	}
	m := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fieldErr(path, ErrMalformed, "%v", err)
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fieldErr(join(path, key), ErrMalformed, "%v", err)
		}
		if len(allowed) > 0 && !slices.Contains(allowed, key) {
			return nil, fieldErr(join(path, key), ErrMalformed, "unknown key")
		}
		if _, dup := m[key]; dup {
			return nil, fieldErr(join(path, key), ErrMalformed, "duplicate key")
		}
		m[key] = v
	}
	return m, nil
}

// onlyKeys rejects keys outside allowed, reporting the first in sorted order.
func onlyKeys(m map[string]json.RawMessage, path string, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			return fieldErr(join(path, k), ErrMalformed, "unknown key")
		}
	}
	return nil
}

func array(m map[string]json.RawMessage, path, key string) ([]json.RawMessage, error) {
	raw, ok := m[key]
	if !ok {
		return nil, fieldErr(join(path, key), ErrMalformed, "missing")
	}
	var a []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fieldErr(join(path, key), ErrMalformed, "expected an array, got %s", show(raw))
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fieldErr(join(path, key), ErrMalformed, "%v", err)
	}
	return a, nil
}

func str(m map[string]json.RawMessage, path, key string) (string, error) {
	if _, ok := m[key]; !ok {
		return "", fieldErr(join(path, key), ErrMalformed, "missing")
	}
	return optStr(m, path, key)
}

func optStr(m map[string]json.RawMessage, path, key string) (string, error) {
	raw, ok := m[key]
	if !ok {
		return "", nil
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' {
		return "", fieldErr(join(path, key), ErrMalformed, "expected a JSON string, got %s (v1.0 writes every value as a string)", show(raw))
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fieldErr(join(path, key), ErrMalformed, "%v", err)
	}
	return s, nil
}

// num reads a string-encoded non-negative decimal integer.
func num(m map[string]json.RawMessage, path, key string) (int, error) {
	s, err := str(m, path, key)
	if err != nil {
		return 0, err
	}
	if s == "" {
		return 0, fieldErr(join(path, key), ErrMalformed, "empty, want a number")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fieldErr(join(path, key), ErrMalformed, "%q is not a number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 1<<30 {
		return 0, fieldErr(join(path, key), ErrMalformed, "%q is out of range", s)
	}
	return n, nil
}

// show renders a raw JSON value for an error message, shortened.
func show(raw json.RawMessage) string {
	const limit = 40
	s := string(bytes.TrimSpace(raw))
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
