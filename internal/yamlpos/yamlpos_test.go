package yamlpos

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

func TestLineOf(t *testing.T) {
	tests := []struct {
		name, doc, field string
		want             int
	}{
		{"top-level key", "name: a\nnodes: 3\n", "nodes", 2},
		{"nested mapping reported where it starts", "name: a\ngreen:\n  trace: x.csv\n", "green", 2},
		{"nested key", "name: a\ngreen:\n  trace: x.csv\n", "green.trace", 3},
		{"list element", "model:\n  hidden:\n    - 64\n    - 0\n", "model.hidden[1]", 4},
		{"absent", "name: a\n", "nodes", 0},
		{"empty file", "", "name", 0},
		{"only a comment", "# nothing yet\n", "name", 0},
		{"bare document marker", "---\n", "name", 0},
		{"empty second document", "0\n---", "name", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file, err := parser.ParseBytes([]byte(tc.doc), 0)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := LineOf(file, tc.field); got != tc.want {
				t.Fatalf("LineOf(%q) = %d, want %d", tc.field, got, tc.want)
			}
		})
	}
}

func TestPathOfToken(t *testing.T) {
	type doc struct {
		Model struct {
			Hidden []int `yaml:"hidden"`
		} `yaml:"model"`
	}
	tests := []struct {
		name, doc, want string
	}{
		{"list element of the wrong type", "model:\n  hidden: [64, x]\n", "model.hidden[1]"},
		{"empty second document", "0\n---", "def"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file, perr := parser.ParseBytes([]byte(tc.doc), 0)
			if perr != nil {
				t.Fatalf("parse: %v", perr)
			}
			var v doc
			err := Unmarshal([]byte(tc.doc), &v, yaml.Strict())
			if err == nil {
				t.Fatal("decoded without an error")
			}
			if got := PathOfToken(file, err, "def"); got != tc.want {
				t.Fatalf("PathOfToken = %q, want %q (%v)", got, tc.want, err)
			}
		})
	}
}

// TestUnmarshalDecoderPanic: input on which goccy/go-yaml v1.19.2
// dereferences nil (found by fuzzing the job-file reader) comes back as
// ErrDecoderPanic instead of crashing the caller.
func TestUnmarshalDecoderPanic(t *testing.T) {
	var v struct {
		External struct {
			Entrypoint []string `yaml:"entrypoint"`
		} `yaml:"external"`
	}
	err := Unmarshal([]byte("name: 0\nexternal:\n  entrypoint: !00\n00000:000000"), &v)
	if !errors.Is(err, ErrDecoderPanic) {
		t.Fatalf("err = %v, want ErrDecoderPanic", err)
	}
	if err := Unmarshal([]byte("external:\n  entrypoint: [a, b]\n"), &v); err != nil || len(v.External.Entrypoint) != 2 {
		t.Fatalf("good document: err %v, decoded %+v", err, v)
	}
}

// selfDecoding decodes itself: fractions within it are its business.
type selfDecoding struct{ n int }

func (s *selfDecoding) UnmarshalYAML(b []byte) error { s.n = len(b); return nil }

func TestUnmarshalRefusesFractionsInIntegers(t *testing.T) {
	type inner struct {
		Widths []int          `yaml:"widths"`
		Ratio  float64        `yaml:"ratio"`
		ByName map[string]int `yaml:"by_name"`
	}
	type doc struct {
		Count  int64        `yaml:"count"`
		Seed   uint64       `yaml:"seed"`
		Scale  float32      `yaml:"scale"`
		In     *inner       `yaml:"in"`
		Custom selfDecoding `yaml:"custom"`
		Any    any          `yaml:"any"`
		Plain  int
	}
	for _, tc := range []struct {
		yaml, path string // path "": no error
		line       int
	}{
		{"count: 3\nscale: 0.5\n", "", 0},
		{"count: 2.0\n", "", 0}, // integral: fine
		{"count: 2.7\n", "count", 1},
		{"scale: 1.5\nseed: 1e-3\n", "seed", 2},
		{"in:\n  ratio: 0.25\n  widths: [64, 32.5]\n", "in.widths[1]", 3},
		{"in:\n  by_name: {a: 1, b: 0.5}\n", "in.by_name.b", 2},
		{"custom: 1.5\nany: 2.5\n", "", 0},
		{"plain: 0.1\n", "plain", 1},
		{"count: \"2.5\"\n", "count", 1}, // a string the decoder would read as 2
		{"count: \"7\"\n", "", 0},
	} {
		var v doc
		err := Unmarshal([]byte(tc.yaml), &v)
		var fe *FractionError
		switch {
		case tc.path == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.path == "":
		case !errors.As(err, &fe) || fe.Path != tc.path || fe.Line != tc.line:
			t.Errorf("%q: got %v, want a FractionError at %s, line %d", tc.yaml, err, tc.path, tc.line)
		default:
			if field, line, msg, _ := DecodeError(err); field != tc.path || line != tc.line || !strings.HasPrefix(msg, "want a whole number, got ") {
				t.Errorf("%q: DecodeError = %s, %d, %q", tc.yaml, field, line, msg)
			}
		}
	}
}

func TestDecodeErrorSaysTypesPlainly(t *testing.T) {
	type doc struct {
		N int             `yaml:"n"`
		U uint64          `yaml:"u"`
		F float64         `yaml:"f"`
		B bool            `yaml:"b"`
		S string          `yaml:"s"`
		L []string        `yaml:"l"`
		M struct{ K int } `yaml:"m"`
	}
	for _, tc := range []struct{ yaml, want string }{
		{"n: three\n", "want a whole number, got three"},
		{"u: -5\n", "-5: out of range for a whole number, 0 or more"},
		{"n: 1e40\n", "1e40: out of range for a whole number"},
		{"f: fast\n", "want a number, got fast"},
		{"b: maybe\n", "want true or false, got maybe"},
		{"s: [a, b]\n", "want a string, got a list"},
		{"n: {a: 1}\n", "want a whole number, got a mapping"},
		{"l: python t.py\n", "want a list, e.g. [python, t.py]"},
		{"m: 3\n", "want a mapping"},
	} {
		var v doc
		err := Unmarshal([]byte(tc.yaml), &v, yaml.Strict())
		if err == nil {
			t.Errorf("%q: accepted", tc.yaml)
			continue
		}
		if _, _, msg, _ := DecodeError(err); msg != tc.want && !strings.HasPrefix(msg, tc.want) {
			t.Errorf("%q: %q, want %q", tc.yaml, msg, tc.want)
		}
	}
}

// suggestDoc is a type to decode into for TestSuggest and
// TestUnknownFields.
type suggestDoc struct {
	Name            string  `yaml:"name"`
	Nodes           int     `yaml:"nodes"`
	Model           string  `yaml:"model"`
	CheckpointURL   string  `yaml:"checkpoint_url"`
	CheckpointEvery int     `yaml:"checkpoint_every"`
	IntraNodeGBps   float64 `yaml:"intra_node_gbps"`
	InterNodeGBps   float64 `yaml:"inter_node_gbps"`
	Skipped         string  `yaml:"-"`
	Green           *struct {
		Deadline string `yaml:"deadline"`
		Batch    struct {
			High float64 `yaml:"high"`
		} `yaml:"batch"`
	} `yaml:"green"`
	Layers []struct {
		Width int `yaml:"width"`
	} `yaml:"layers"`
	Env  map[string]string `yaml:"env"`
	Self selfDecoding      `yaml:"self"`
	Any  any               `yaml:"any"`
}

func TestSuggest(t *testing.T) {
	tests := []struct {
		path string
		want []string
	}{
		{"nodse", []string{"nodes"}},
		{"Nodes", []string{"nodes"}}, // case alone: only the exact match, not model (two edits)
		{"nodez", []string{"nodes"}},
		{"intra_node_gbs", []string{"intra_node_gbps"}},                // one edit beats inter_node_gbps's two
		{"checkpoint", []string{"checkpoint_url", "checkpoint_every"}}, // fields it begins, closest first
		{"green.deadlin", []string{"deadline"}},
		{"green.batch.hihg", []string{"high"}},
		{"layers[0].widht", []string{"width"}},
		{"zzz", nil},
		{"skipped", nil},        // a field the decoder skips is no suggestion
		{"env.HOEM", nil},       // a map's keys are free
		{"self.x", nil},         // a type that decodes itself, without exported fields
		{"nosuch.deadlin", nil}, // a parent that is not there
		{"", nil},
	}
	for _, tc := range tests {
		if got := Suggest(reflect.TypeFor[suggestDoc](), tc.path); !slices.Equal(got, tc.want) {
			t.Errorf("Suggest(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestPaths: every key, nested ones as section.key, a struct behind a
// pointer opened, an inline struct's keys its parent's, and none for a
// skipped field, a list's or map's elements, or a type that decodes
// itself.
func TestPaths(t *testing.T) {
	type inner struct {
		Zone string `yaml:"zone"`
	}
	type doc struct {
		Base     suggestDoc `yaml:",inline"`
		Inline   inner      `yaml:",inline"`
		JSONOnly int        `json:"json_only"`
		Plain    int
		_        int
	}
	want := []string{"name", "nodes", "model", "checkpoint_url", "checkpoint_every", "intra_node_gbps", "inter_node_gbps",
		"green", "green.deadline", "green.batch", "green.batch.high", "layers", "env", "self", "any",
		"zone", "json_only", "plain"}
	if got := Paths(reflect.TypeFor[*doc]()); !slices.Equal(got, want) {
		t.Errorf("Paths = %q\nwant    %q", got, want)
	}
	if got := Paths(reflect.TypeFor[int]()); got != nil {
		t.Errorf("Paths(int) = %q, want none", got)
	}
}

// TestUnknownFields: every unknown key, in document order, where the
// strict decoder names one of them at random.
func TestUnknownFields(t *testing.T) {
	doc := `name: a
nodse: 3
green:
  deadlin: 2h
  batch: {high: 1, low: 2}
layers:
  - width: 3
  - widht: 4
env: {ANY_KEY: x}
self: {whatever: 1}
any: {whatever: 1}
base: &b {nodes: 1}
top: !!map {x: 1}
`
	file, err := parser.ParseBytes([]byte(doc), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := UnknownFields(file, reflect.TypeFor[suggestDoc]())
	want := []Unknown{{"nodse", 2}, {"green.deadlin", 4}, {"green.batch.low", 5}, {"layers[1].widht", 8}, {"base", 12}, {"top", 13}}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownFields = %+v\nwant %+v", got, want)
	}
	if got := UnknownFields(file, reflect.TypeFor[*suggestDoc]()); len(got) != len(want) {
		t.Errorf("UnknownFields through a pointer type found %d, want %d", len(got), len(want))
	}
	// The strict decoder agrees that the file has unknown fields.
	var v suggestDoc
	if err := Unmarshal([]byte(doc), &v, yaml.Strict(), yaml.DisallowUnknownField()); err == nil {
		t.Error("the strict decoder accepted the document")
	}
	if got := UnknownFields(nil, reflect.TypeFor[suggestDoc]()); got != nil {
		t.Errorf("UnknownFields(nil) = %v", got)
	}
}

// TestDrop: Drop removes a field's entry (a list whole), and a mapping it
// leaves empty; what is left serialises as the rest of the document.
func TestDrop(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, want string
		ok                    bool
	}{
		{"top-level key", "name: a\nnodes: three\nsteps: 5\n", "nodes", "name: a\nsteps: 5\n", true},
		{"nested key", "name: a\nmodel:\n  hidden: x\n  kind: y\n", "model.hidden", "name: a\nmodel:\n  kind: y\n", true},
		{"list element: the list goes", "model:\n  hidden: [1, x]\n  kind: y\n", "model.hidden[1]", "model:\n  kind: y\n", true},
		{"the only key of a mapping: the mapping goes", "name: a\nmodel:\n  hidden: x\n", "model.hidden", "name: a\n", true},
		{"flow mapping", "name: a\nmodel: {hidden: x, kind: y}\n", "model.hidden", "name: a\nmodel: {kind: y}\n", true},
		{"the document's only key", "nodes: x\n", "nodes", "", true},
		{"absent", "name: a\n", "nodes", "name: a\n", false},
		{"not a field", "name: a\n", "(document)", "name: a\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, err := parser.ParseBytes([]byte(tc.doc), 0)
			if err != nil {
				t.Fatal(err)
			}
			if ok := Drop(file, tc.path); ok != tc.ok {
				t.Fatalf("Drop(%q) = %v; want %v", tc.path, ok, tc.ok)
			}
			if got := strings.TrimSpace(file.String()); got != strings.TrimSpace(tc.want) {
				t.Fatalf("left %q; want %q", got, tc.want)
			}
		})
	}
}

func TestSortByLine(t *testing.T) {
	type p struct {
		name string
		line int
	}
	ps := []p{{"a", 7}, {"none1", 0}, {"b", 2}, {"c", 7}, {"none2", 0}, {"d", 5}}
	SortByLine(ps, func(x p) int { return x.line })
	var got []string
	for _, x := range ps {
		got = append(got, x.name)
	}
	if want := "b d a c none1 none2"; strings.Join(got, " ") != want {
		t.Errorf("sorted %v; want %s (line order, ties as found, no line last)", got, want)
	}
}
