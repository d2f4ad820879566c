package yamlpos

import (
	"errors"
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
