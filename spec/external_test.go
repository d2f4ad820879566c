package spec

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
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

// TestParseExternalEmptyBlock: `external:` with nothing under it (YAML
// null: a mis-indented or commented-out block) is refused with its line
// rather than silently training the built-in model.
func TestParseExternalEmptyBlock(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
	}{
		{"nothing", "name: x\nexternal:\n", 2},
		{"null", "name: x\nexternal: null\n", 2},
		{"tilde", "name: x\nsteps: 10\nexternal: ~\n", 3},
		{"commented out", "name: x\nexternal:\n#  entrypoint: [python3, t.py]\nnodes: 2\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("job.yaml", []byte(tc.yaml))
			var se *SpecError
			if !errors.As(err, &se) || len(se.Fields) != 1 {
				t.Fatalf("Parse: %v (model %q); want one problem", err, s.Model.Kind)
			}
			want := "line " + strconv.Itoa(tc.line) + ": external: empty (want launcher, entrypoint"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q; want it to say %q", err, want)
			}
		})
	}
	// Without the key, the built-in model as before.
	if s, err := Parse("job.yaml", []byte("name: x\n")); err != nil || s.IsExternal() {
		t.Errorf("no external key: %v, external %v", err, s.IsExternal())
	}
}

// TestParseExternalEnvKeepsLiteralText: a plain scalar in external.env is
// the text written (the decoder would respell 1.10 as 1.1, 0x10 as 16); a
// null value is refused with its line.
func TestParseExternalEnvKeepsLiteralText(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		want      map[string]string // key → value (nil: refused)
		errs      []string          // with line 5 onwards as written
	}{
		{"version", "    CUDA_VER: 1.10\n", map[string]string{"CUDA_VER": "1.10"}, nil},
		{"hex", "    A: 0x10\n", map[string]string{"A": "0x10"}, nil},
		{"octal", "    A: 0o17\n", map[string]string{"A": "0o17"}, nil},
		{"bool", "    T: true\n    F: False\n", map[string]string{"T": "true", "F": "False"}, nil},
		{"float", "    A: 1.50\n    D: 1e3\n    I: .inf\n    N: .NaN\n", map[string]string{"A": "1.50", "D": "1e3", "I": ".inf", "N": ".NaN"}, nil},
		{"int", "    OMP_NUM_THREADS: 04\n", map[string]string{"OMP_NUM_THREADS": "04"}, nil},
		{"anchor", "    A: &v 1.20\n", map[string]string{"A": "1.20"}, nil},
		{"strings as decoded", "    Q: \"1.10\"\n    S: 'a b'\n    P: plain text\n    E: \"\"\n",
			map[string]string{"Q": "1.10", "S": "a b", "P": "plain text", "E": ""}, nil},
		{"flow", "    {A: 1.50, C: 0x10, S: x}\n", map[string]string{"A": "1.50", "C": "0x10", "S": "x"}, nil},
		{"null", "    A: x\n    B: null\n", nil, []string{`line 7: external.env.B: want a string (write B: "" for an empty value)`}},
		{"tilde and empty", "    B: ~\n    C:\n", nil, []string{
			`line 6: external.env.B: want a string (write B: "" for an empty value)`,
			`line 7: external.env.C: want a string (write C: "" for an empty value)`}},
		{"flow null", "    {A: 1.50, B: null}\n", nil, []string{`line 6: external.env.B: want a string`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := "name: x\nexternal:\n  entrypoint: [python3, t.py]\n  procs_per_node: 1\n  env:\n" + tc.env
			s, err := Parse("job.yaml", []byte(yaml))
			if tc.errs != nil {
				if err == nil {
					t.Fatalf("accepted: env %v", s.External.Env)
				}
				for _, w := range tc.errs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q; want it to say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(s.External.Env, tc.want) {
				t.Errorf("env %q, want %q", s.External.Env, tc.want)
			}
		})
	}
	// A nested mapping is still refused by the decoder, with its line.
	_, err := Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: [a]\n  env:\n    A: {B: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 5: external.env.A: want a string") {
		t.Errorf("nested mapping: %v", err)
	}
}

// TestCheckpointDirMustNotHoldTheWorkdir: a checkpoint_dir (emptied
// before every launch) that is the workdir or contains it is refused,
// naming both — in Validate once the workdir is absolute, and in
// WithJobDir when the workdir is resolved there; one inside the workdir,
// or beside it, is fine.
func TestCheckpointDirMustNotHoldTheWorkdir(t *testing.T) {
	for _, tc := range []struct {
		name, workdir, ckpt string
		want                string // "" : accepted
	}{
		{"relative inside", "/jobs/a", "ckpt", ""},
		{"relative nested", "/jobs/a", "out/ckpt", ""},
		{"absolute inside", "/jobs/a", "/jobs/a/ckpt", ""},
		{"sibling with a common prefix", "/jobs/a", "/jobs/ab", ""},
		{"sibling", "/jobs/a", "/jobs/b/ckpt", ""},
		{"the workdir", "/jobs/a", "/jobs/a", `"/jobs/a" is the workdir /jobs/a`},
		{"the workdir, unclean", "/jobs/a/", "/jobs//a/.", `is the workdir /jobs/a`},
		{"a parent", "/jobs/a/b", "/jobs/a", `"/jobs/a" contains the workdir /jobs/a/b`},
		{"a grandparent", "/jobs/a/b/c", "/jobs", `"/jobs" contains the workdir /jobs/a/b/c`},
		{"relative dot", "/jobs/a", "./", `name a directory of its own`},
		{"relative up", "/jobs/a", "../a", `without '..'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := RunSpec{Name: "x", External: &ExternalJob{Entrypoint: []string{"a"}, Workdir: tc.workdir, CheckpointDir: tc.ckpt}}.WithDefaults()
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), "external.checkpoint_dir: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v; want it to say %q", err, tc.want)
			}
		})
	}
	// In a job file: with the workdir relative (resolved by WithJobDir),
	// and with it absolute (Validate, with the line).
	dir := t.TempDir()
	s, err := Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: [a]\n  checkpoint_dir: "+dir+"\n"))
	if err != nil {
		t.Fatalf("Parse (workdir not resolved yet): %v", err)
	}
	if _, err := s.WithJobDir(filepath.Join(dir, "job")); err == nil || !strings.Contains(err.Error(), "contains the workdir "+filepath.Join(dir, "job")) {
		t.Errorf("WithJobDir: %v; want checkpoint_dir refused", err)
	}
	if _, err := s.WithJobDir(dir); err == nil || !strings.Contains(err.Error(), "is the workdir "+dir) {
		t.Errorf("WithJobDir: %v; want checkpoint_dir refused", err)
	}
	if _, err := s.WithJobDir(filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Errorf("WithJobDir elsewhere: %v", err)
	}
	_, err = Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: [a]\n  workdir: "+dir+"\n  checkpoint_dir: "+dir+"\n"))
	if err == nil || !strings.Contains(err.Error(), "line 5: external.checkpoint_dir: ") || !strings.Contains(err.Error(), "is the workdir") {
		t.Errorf("Parse: %v", err)
	}
}

// TestEntrypointWrappingALauncherIsRefused: an entrypoint that runs a
// distributed launcher itself (torchrun, python -m torch.distributed.run,
// msrun, mpirun) is refused at submit time, saying the node workers are
// the launcher; a script that merely names one in its arguments is not.
func TestEntrypointWrappingALauncherIsRefused(t *testing.T) {
	for _, tc := range []struct {
		entrypoint string
		launcher   string // "" for none
	}{
		{"[torchrun, --nproc_per_node=1, train.py]", "torchrun"},
		{"[/usr/local/bin/torchrun, train.py]", "torchrun"},
		{"[python3, -m, torch.distributed.run, --nproc_per_node=2, train.py]", "python -m torch.distributed.run"},
		{"[python3, -m, torch.distributed.launch, train.py]", "python -m torch.distributed.launch"},
		{"[mpirun, -n, 2, python3, train.py]", "mpirun"},
		{"[python3, train.py]", ""},
		{"[python3, train.py, --note, torchrun]", ""},
		{"[python3, -m, mypkg.train]", ""},
	} {
		_, err := Parse("job.yaml", []byte("name: x\nexternal:\n  entrypoint: "+tc.entrypoint+"\n"))
		switch {
		case tc.launcher == "" && err != nil:
			t.Errorf("%s: %v; want it taken", tc.entrypoint, err)
		case tc.launcher != "" && (err == nil || !strings.Contains(err.Error(), "line 3: external.entrypoint: runs the launcher "+tc.launcher+": the node workers are the launcher")):
			t.Errorf("%s: %v; want it refused, naming %s", tc.entrypoint, err, tc.launcher)
		}
	}
}
