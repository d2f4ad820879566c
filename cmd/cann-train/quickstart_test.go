package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

func TestParseInjections(t *testing.T) {
	kill := func(node string, at int64) spec.InjectFault {
		return spec.InjectFault{NodeID: node, AtStep: at, Kind: spec.FaultKill}
	}
	tests := []struct {
		specs   []string
		want    map[string]spec.InjectFault
		wantErr string
	}{
		{nil, map[string]spec.InjectFault{}, ""},
		{[]string{"kill:node-2@130", "kill:node-4@10"}, map[string]spec.InjectFault{"node-2": kill("node-2", 130), "node-4": kill("node-4", 10)}, ""},
		{[]string{"freeze:node-1@99", "kill:node-3@5"}, map[string]spec.InjectFault{
			"node-1": {NodeID: "node-1", AtStep: 99, Kind: spec.FaultFreeze}, "node-3": kill("node-3", 5)}, ""},
		{[]string{"kill:node-5@10"}, nil, "no such node"},
		{[]string{"kill:node-2@0"}, nil, "step must be"},
		{[]string{"kill:node-2@600"}, nil, "step must be"},
		{[]string{"stop:node-2@10"}, nil, "want kill:"},
		{[]string{"kill:node-2"}, nil, "want kill:"},
		{[]string{"kill:node-2@5", "kill:node-2@6"}, nil, "already has a fault"},
		{[]string{"freeze:node-2@5", "kill:node-2@6"}, nil, "already has a fault"},
	}
	for _, tc := range tests {
		got, err := parseInjections(tc.specs, 4, 600)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.specs, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%v: got %v, %v; want %v", tc.specs, got, err, tc.want)
		}
	}
}

// TestQuickstartSpecFromFile: -f loads the job file (an external job's
// workdir becomes the file's directory); only flags given override it.
// TestInjectNote: more strikes than spares and min_nodes allow are told
// before the run; enough spares, or a min_nodes that lets the run go on,
// are not.
func TestInjectNote(t *testing.T) {
	run := spec.RunSpec{Name: "q", Nodes: 3, NodeWait: spec.Duration(time.Minute)}.WithDefaults()
	shrinks := run
	shrinks.MinNodes = 2
	ext := run
	ext.External = &spec.ExternalJob{Launcher: "torchrun", Entrypoint: []string{"python3", "t.py"}}
	for _, tc := range []struct {
		name           string
		strikes, spare int
		s              spec.RunSpec
		want           string
	}{
		{"no fault", 0, 0, run, ""},
		{"a spare each", 2, 2, run, ""},
		{"min_nodes lets it go on", 1, 0, shrinks, ""},
		{"no spare", 1, 0, run, "note: --inject strikes 1 node(s) and --spares gives 0: the run waits node_wait (1m0s) for a free node, then fails (--spares 1, or a job file (-f) with min_nodes 2 to go on without it)"},
		{"too few for min_nodes", 3, 1, shrinks, "strikes 3 node(s) and --spares gives 1: the run waits node_wait (1m0s) for a free node, then fails (--spares 3, or a job file (-f) with min_nodes 1 to go on without it)"},
		{"external keeps its world", 1, 0, ext, "then fails (--spares 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := injectNote(tc.strikes, tc.spare, tc.s)
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasSuffix(got, tc.want) {
				t.Errorf("injectNote = %q, want %q", got, tc.want)
			}
		})
	}
}

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
	o.changed = func(f string) bool { return f == "ranks-per-node" }
	o.perNode = 2
	if s, err = quickstartSpec(o); err != nil || s.LocalRanks() != 2 || s.GlobalBatch() != 2*s.Nodes*s.BatchPerRank {
		t.Fatalf("built-in file, 2 ranks per node: %+v %v", s, err)
	}
	o.file = "../../examples/torch-ddp/job.yaml"
	if _, err = quickstartSpec(o); err == nil || !strings.Contains(err.Error(), "external.procs_per_node") {
		t.Fatalf("external job with --ranks-per-node: %v, want an error pointing at external.procs_per_node", err)
	}
}

// The demo's spec takes --ranks-per-node (1 leaves the spec as before).
func TestQuickstartSpecRanksPerNode(t *testing.T) {
	for _, tc := range []struct{ perNode, want, field int }{{1, 1, 0}, {2, 2, 2}, {4, 4, 4}} {
		s, err := quickstartSpec(quickstartOptions{nodes: 2, perNode: tc.perNode, steps: 100, chunkSteps: 50, hbTimeout: time.Second, collective: "ring"})
		if err != nil || s.LocalRanks() != tc.want || s.RanksPerNode != tc.field || s.GlobalBatch() != 2*tc.want*s.BatchPerRank {
			t.Errorf("--ranks-per-node %d: %+v, %v", tc.perNode, s, err)
		}
	}
	if _, err := quickstartSpec(quickstartOptions{nodes: 2, perNode: 65, steps: 100, chunkSteps: 50, hbTimeout: time.Second, collective: "ring"}); err == nil ||
		!strings.Contains(err.Error(), "ranks_per_node") {
		t.Errorf("--ranks-per-node 65: %v, want an error naming ranks_per_node", err)
	}
}

// TestStartLocalPortTaken: the quickstart's default port held by another
// server (a `temporal server start-dev`, say) moves it to free ports and
// says so; a port given by flag is an error naming it.
func TestStartLocalPortTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	var errb bytes.Buffer
	e := &env{out: &bytes.Buffer{}, err: &errb, command: childCommand, logLevel: "warn"}
	lc, err := startLocal(t.Context(), e, localOptions{port: port, uiPort: 0, dataDir: t.TempDir(), anyPorts: true})
	if err != nil {
		t.Fatalf("with anyPorts: %v", err)
	}
	addr := lc.srv.FrontendAddr()
	lc.stop()
	if addr == held.Addr().String() || !strings.Contains(errb.String(), fmt.Sprintf("frontend port %d", port)) ||
		!strings.Contains(errb.String(), "using free ports instead") {
		t.Errorf("server at %s; stderr:\n%s", addr, errb.String())
	}
	_, err = startLocal(t.Context(), e, localOptions{port: port, uiPort: 0, dataDir: t.TempDir()})
	if !errors.Is(err, dev.ErrPortInUse) || !strings.Contains(err.Error(), "--port 0") {
		t.Errorf("port given by flag: %v", err)
	}
}

// A quickstart of a name whose checkpoints its data dir keeps starts
// afresh, deleting them and saying so (training over them mixed two
// timelines in one bucket for a later --resume); in a bucket the job file
// names it is refused instead.
func TestQuickstartStartsAfresh(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	own, shared := "file://"+filepath.Join(dir, "own"), "file://"+filepath.Join(dir, "shared")
	for _, url := range []string{own, shared} {
		store, err := checkpoint.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []int64{100, 200} {
			if _, _, err := store.SaveIncremental(ctx, "qs", step, []byte("state")); err != nil {
				t.Fatal(err)
			}
		}
		store.Close()
	}
	var errb bytes.Buffer
	e := &env{out: &bytes.Buffer{}, err: &errb}
	if err := quickstartFresh(ctx, e, spec.RunSpec{Name: "qs"}, own); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errb.String(), "deleted the 2 checkpoint(s) of an earlier quickstart of qs (steps 100–200)") {
		t.Errorf("said %q", errb.String())
	}
	if refs, err := earlierCheckpoints(ctx, own, "qs", math.MaxInt64); err != nil || len(refs) != 0 {
		t.Errorf("left %v (%v)", refs, err)
	}
	err := quickstartFresh(ctx, e, spec.RunSpec{Name: "qs", CheckpointURL: shared}, own)
	if err == nil || !strings.Contains(err.Error(), shared+" holds checkpoints of a run named qs (up to step 200)") {
		t.Errorf("a job's own bucket: %v; want it refused", err)
	}
	if err := quickstartFresh(ctx, e, spec.RunSpec{Name: "other", CheckpointURL: shared}, own); err != nil {
		t.Errorf("another name: %v", err)
	}
}

// TestQuickstartSaysAnUnstruckFault: --inject on a spare no failure calls
// on never strikes; the summary said nothing of it (no recovery, no
// note), as if the fault had been survived.
func TestQuickstartSaysAnUnstruckFault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"quickstart", "--port", "0", "--ui-port", "-1", "-o", "json", "--data-dir", dir, "--log-level", "warn",
		"--nodes", "1", "--spares", "1", "--steps", "100", "--inject", "kill:node-2@50"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("quickstart: %v\n%s", err, errb.String())
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Status != spec.PhaseCompleted || len(sum.Recoveries) != 0 {
		t.Fatalf("summary %+v (%v)", sum, err)
	}
	if want := "note: --inject kill:node-2@50 never struck: node-2 did not train past step 50 in this run"; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errb.String())
	}
}
