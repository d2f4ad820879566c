package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	s, err := Parse("job.yaml", []byte("name: demo\nnodes: 2\nsteps: 40\nchunk_steps: 10\nnode_wait: 30s\nmodel:\n  hidden: [64, 32]\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.Nodes != 2 || s.Steps != 40 || s.ChunkSteps != 10 || s.NodeWait.D().Seconds() != 30 {
		t.Fatalf("decoded %+v", s)
	}
	if len(s.Model.Hidden) != 2 || s.Model.Hidden[0] != 64 || s.Model.Hidden[1] != 32 {
		t.Fatalf("hidden = %v", s.Model.Hidden)
	}
	if s.Model.Kind != ModelMLPMNIST || s.BatchPerRank != 32 || s.CheckpointEvery != 10 {
		t.Fatalf("defaults not applied: %+v", s)
	}
}

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		wantField string
		wantLine  int
		wantMsg   string
	}{
		{"unknown field", "name: a\nnodse: 3\n", "nodse", 2, "unknown field"},
		{"wrong type", "name: a\nsteps: many\n", "steps", 2, ""},
		{"impossible value", "name: a\nnodes: 3\nsteps: -5\n", "steps", 3, "must be positive"},
		{"nested impossible", "name: a\nmodel:\n  hidden: [64, 0]\n", "model.hidden[1]", 3, "out of range"},
		{"bad duration", "name: a\nnode_wait: soon\n", "node_wait", 2, ""},
		{"missing name", "nodes: 2\n", "name", 0, "required"},
		{"unknown model", "name: a\nmodel:\n  kind: gpt9\n", "model.kind", 3, "unknown model"},
		{"explicit zero", "name: a\nnodes: 0\n", "nodes", 2, "out of range"},
		{"explicit zero interval", "name: a\ncheckpoint_every: 0\n", "checkpoint_every", 2, "must be positive"},
		{"syntax", "name: [a\n", "", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(tc.yaml))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want *SpecError, got %T %v", err, err)
			}
			if !strings.Contains(err.Error(), "job.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
			if tc.wantField == "" {
				return
			}
			var hit *FieldError
			for i := range se.Fields {
				if se.Fields[i].Field == tc.wantField {
					hit = &se.Fields[i]
				}
			}
			if hit == nil {
				t.Fatalf("no error for field %q in %v", tc.wantField, err)
			}
			if hit.Line != tc.wantLine {
				t.Errorf("line = %d, want %d (%v)", hit.Line, tc.wantLine, err)
			}
			if !strings.Contains(hit.Msg, tc.wantMsg) {
				t.Errorf("msg %q lacks %q", hit.Msg, tc.wantMsg)
			}
		})
	}
}
