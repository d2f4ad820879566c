package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseInjections(t *testing.T) {
	tests := []struct {
		specs   []string
		want    map[string]int64
		wantErr string
	}{
		{nil, map[string]int64{}, ""},
		{[]string{"kill:node-2@130", "kill:node-4@10"}, map[string]int64{"node-2": 130, "node-4": 10}, ""},
		{[]string{"kill:node-5@10"}, nil, "no such node"},
		{[]string{"kill:node-2@0"}, nil, "step must be"},
		{[]string{"kill:node-2@600"}, nil, "step must be"},
		{[]string{"stop:node-2@10"}, nil, "want kill:"},
		{[]string{"kill:node-2"}, nil, "want kill:"},
		{[]string{"kill:node-2@5", "kill:node-2@6"}, nil, "already killed"},
	}
	for _, tc := range tests {
		got, err := parseInjections(tc.specs, 4, 600)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.specs, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%v: got %v, %v", tc.specs, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %s = %d, want %d", tc.specs, k, got[k], v)
			}
		}
	}
}

// TestQuickstartSpecFromFile: -f loads the job file (an external job's
// workdir becomes the file's directory); only flags given override it.
func TestQuickstartSpecFromFile(t *testing.T) {
	o := quickstartOptions{file: "../../examples/torch-ddp/job.yaml", nodes: 3, steps: 1000, hbTimeout: 10 * time.Second}
	s, err := quickstartSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	if !s.IsExternal() || s.Nodes != 2 || s.Steps != 300 || !filepath.IsAbs(s.External.Workdir) ||
		!strings.HasSuffix(s.External.Workdir, filepath.Join("examples", "torch-ddp")) {
		t.Fatalf("from file: nodes %d steps %d workdir %q", s.Nodes, s.Steps, s.External.Workdir)
	}
	o.changed = func(f string) bool { return f == "nodes" || f == "steps" }
	o.name = "renamed"
	if s, err = quickstartSpec(o); err != nil || s.Nodes != 3 || s.MinNodes != 3 || s.Steps != 1000 || s.Name != "renamed" ||
		s.HeartbeatTimeout.D() != 5*time.Second {
		t.Fatalf("overridden: %+v %v", s, err)
	}
	o.file = "../../examples/mnist.yaml"
	if s, err = quickstartSpec(o); err != nil || s.IsExternal() || s.Nodes != 3 {
		t.Fatalf("built-in file: %+v %v", s, err)
	}
}
