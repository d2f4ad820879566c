package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseExternal(t *testing.T) {
	s, err := Parse("job.yaml", []byte(`name: ddp
nodes: 2
steps: 120
checkpoint_every: 20
external:
  launcher: torchrun
  entrypoint: [python3, train.py, --lr, "0.05"]
  procs_per_node: 2
  env:
    GLOO_SOCKET_IFNAME: lo
    OMP_NUM_THREADS: "2"
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	x := s.External
	if !s.IsExternal() || x == nil || x.Launcher != LauncherTorchrun || x.ProcsPerNode != 2 ||
		len(x.Entrypoint) != 4 || x.Env["GLOO_SOCKET_IFNAME"] != "lo" || x.StopGrace.D() != 10*time.Second {
		t.Fatalf("external = %+v", x)
	}
	if s.Model.Kind != ModelExternal || s.Nodes != 2 || s.Steps != 120 || s.CheckpointEvery != 20 || s.MinNodes != 2 {
		t.Fatalf("spec = %+v", s)
	}
	// The built-in model's defaults are not filled in.
	if s.Model.Hidden != nil || s.BatchPerRank != 0 || s.LearningRate != 0 || s.ChunkSteps != 0 {
		t.Errorf("built-in defaults leaked into an external job: %+v", s)
	}
	if s.WorldSize(2) != 4 {
		t.Errorf("world size %d", s.WorldSize(2))
	}
	// Defaults: one node, steps unknown, checkpoint every 100.
	s, err = Parse("job.yaml", []byte("name: one\nexternal:\n  entrypoint: [python3, t.py]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Nodes != 1 || s.Steps != 0 || s.CheckpointEvery != 100 || s.External.ProcsPerNode != 1 || s.MaxRestarts != 5 {
		t.Errorf("defaults: %+v %+v", s, s.External)
	}
	// WithDefaults and Validate agree with Parse (the workflow re-applies them).
	if err := s.WithDefaults().Validate(); err != nil {
		t.Errorf("re-validate: %v", err)
	}
}

func TestParseExternalErrorsWithLines(t *testing.T) {
	_, err := Parse("job.yaml", []byte(`name: ddp
nodes: 2
batch_per_rank: 8
min_nodes: 1
external:
  launcher: torchrun
  entrypoint: []
  procs_per_node: 0
  checkpoint_dir: ../elsewhere
  master_port: 80
  env:
    RANK: "3"
    CANN_TRAIN_RANK: "1"
  meter_every: -5m
  request_lead: 2h
`))
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("want *SpecError, got %v", err)
	}
	want := map[string]int{
		"batch_per_rank":               3,
		"min_nodes":                    4,
		"external.entrypoint":          7,
		"external.procs_per_node":      8,
		"external.checkpoint_dir":      9,
		"external.master_port":         10,
		"external.env.RANK":            12,
		"external.env.CANN_TRAIN_RANK": 13,
		"external.meter_every":         14,
		"external.request_lead":        15,
	}
	got := map[string]int{}
	for _, f := range se.Fields {
		got[f.Field] = f.Line
	}
	for field, line := range want {
		if l, ok := got[field]; !ok || l != line {
			t.Errorf("%s: line %d (present %v), want line %d\n%v", field, l, ok, line, err)
		}
	}
	_, err = Parse("job.yaml", []byte("name: x\nexternal:\n  launcher: mpirun\n  entrypoint: [a]\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3: external.launcher: unknown launcher \"mpirun\"") {
		t.Errorf("message: %v", err)
	}
	// Unknown fields inside external: are caught by the strict decoder.
	_, err = Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: [a]\n  procs: 2\n"))
	if !errors.As(err, &se) || se.Fields[0].Line != 4 || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("unknown field: %v", err)
	}
	// RANK is free for msrun (it sets RANK_ID), not for ascend.
	if _, err := Parse("j", []byte("name: x\nexternal:\n  launcher: msrun\n  entrypoint: [a]\n  env: {RANK: '1'}\n")); err != nil {
		t.Errorf("msrun with RANK in env: %v", err)
	}
	if _, err := Parse("j", []byte("name: x\nexternal:\n  launcher: ascend\n  entrypoint: [a]\n  env: {DEVICE_ID: '1'}\n")); err == nil {
		t.Error("ascend with DEVICE_ID in env accepted")
	}
}

func TestWithJobDir(t *testing.T) {
	s, err := Parse("j", []byte("name: x\nexternal:\n  entrypoint: [a]\n  workdir: sub\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err = s.WithJobDir("/jobs/here")
	if err != nil || s.External.Workdir != filepath.Join("/jobs/here", "sub") {
		t.Fatalf("workdir %q %v", s.External.Workdir, err)
	}
	s.External.Workdir = ""
	if s, _ = s.WithJobDir("/jobs/here"); s.External.Workdir != "/jobs/here" {
		t.Errorf("empty workdir → %q", s.External.Workdir)
	}
	if got := s.External.JoinWorkdir("ckpt"); got != "/jobs/here/ckpt" {
		t.Errorf("JoinWorkdir %q", got)
	}
}

// TestWithJobDirTrace: a green trace relative to the job file is made
// absolute when the file is there; one that is not stays as written (the
// control worker reads it from its own directory).
func TestWithJobDirTrace(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "traces"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "traces", "es.csv"), []byte("time,ES\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ trace, want string }{
		{"traces/es.csv", filepath.Join(dir, "traces", "es.csv")},
		{"elsewhere/es.csv", "elsewhere/es.csv"},
		{"traces", "traces"}, // a directory is not a trace
		{"/abs/es.csv", "/abs/es.csv"},
	} {
		s, err := Parse("j", []byte("name: x\ngreen:\n  trace: "+tc.trace+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if s, err = s.WithJobDir(dir); err != nil || s.Green.Trace != tc.want {
			t.Errorf("trace %s → %q (%v), want %q", tc.trace, s.Green.Trace, err, tc.want)
		}
	}
}

func TestExampleExternalJobParses(t *testing.T) {
	for _, f := range []string{"../examples/torch-ddp/job.yaml", "../examples/torch-ddp/job-green.yaml"} {
		s, err := LoadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !s.IsExternal() || s.External.ProcsPerNode != 2 || s.Nodes != 2 || s.External.Launcher != LauncherTorchrun {
			t.Errorf("%s: %+v", f, s.External)
		}
		if strings.HasSuffix(f, "green.yaml") && (s.Green == nil || !s.Green.Interruptible || s.Green.Work.D() != 10*time.Minute) {
			t.Errorf("%s: green %+v", f, s.Green)
		}
	}
}

func TestExternalRejectsEngineGradientFields(t *testing.T) {
	// In a job file, and in a spec built in code.
	bad := RunSpec{Name: "x", External: &ExternalJob{Entrypoint: []string{"a"}}, Overlap: &OverlapPolicy{}}.WithDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "overlap: applies to the built-in model only") {
		t.Errorf("overlap in an external spec: %v", err)
	}
	for _, field := range []string{"optimizer: onebit-adam", "freeze_step: 3", "compression: {}", "overlap: {}",
		"data_sha256: " + strings.Repeat("ab", 32), "slow_node: drain", "slow_node_factor: 2", "slow_node_chunks: 5", "ranks_per_node: 2"} {
		_, err := Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: [python3, t.py]\n"+field+"\n"))
		name, _, _ := strings.Cut(field, ":")
		if err == nil || !strings.Contains(err.Error(), name+": applies to the built-in model only") {
			t.Errorf("%s in an external job: %v", field, err)
		}
	}
}

// An external job may follow a green policy: defaults applied, the
// policy validated with lines, and its length (steps or green.work)
// required for planning.
func TestParseExternalGreen(t *testing.T) {
	s, err := Parse("job.yaml", []byte(`name: ddp
steps: 300
external:
  entrypoint: [python3, train.py]
green:
  trace: es.csv
  interruptible: true
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if g := s.Green; g == nil || g.Forecast != ForecastPersistence || g.Deadline.D() != 48*time.Hour || g.NodeWatts != 300 || g.PUE != 1 {
		t.Fatalf("green = %+v", s.Green)
	}
	if err := s.WithDefaults().Validate(); err != nil {
		t.Errorf("re-validate: %v", err)
	}
	// Steps unknown: green.work gives the length.
	if _, err := Parse("job.yaml", []byte("name: a\nexternal:\n  entrypoint: [python3, t.py]\ngreen:\n  trace: es.csv\n  work: 2h\n")); err != nil {
		t.Errorf("steps unknown, work 2h: %v", err)
	}
	for _, tc := range []struct {
		name, yaml, field string
		line              int
		msg               string
	}{
		{"no length", "name: a\nexternal:\n  entrypoint: [python3, t.py]\ngreen:\n  trace: es.csv\n", "green", 4, "needs its length"},
		{"no source", "name: a\nsteps: 10\nexternal:\n  entrypoint: [python3, t.py]\ngreen:\n  deadline: 4h\n", "green", 5, "trace file"},
		{"bad forecast", "name: a\nsteps: 10\nexternal:\n  entrypoint: [python3, t.py]\ngreen:\n  trace: es.csv\n  forecast: magic\n",
			"green.forecast", 7, "unknown forecast"},
		{"batch controller", "name: a\nsteps: 10\nexternal:\n  entrypoint: [python3, t.py]\ngreen:\n  trace: es.csv\n  batch:\n    threshold_g: 200\n",
			"green.batch", 7, "built-in model only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(tc.yaml))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want *SpecError, got %v", err)
			}
			for _, f := range se.Fields {
				if f.Field == tc.field {
					if f.Line != tc.line || !strings.Contains(f.Msg, tc.msg) {
						t.Errorf("%s: line %d %q, want line %d containing %q", f.Field, f.Line, f.Msg, tc.line, tc.msg)
					}
					return
				}
			}
			t.Errorf("no error for %s in %v", tc.field, err)
		})
	}
}
