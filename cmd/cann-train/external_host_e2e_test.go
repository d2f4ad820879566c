package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalHostWithoutTheJobIsReplaced: an external job trains on
// node-1 and node-2 until node-2's worker is killed at step 80; the spare
// that takes its rank, node-3, cannot launch the job (its worker's PATH
// has no python3: a host without the job's environment) while node-1
// does. The job has trained and another node launched it, so the host is
// at fault, not the job: node-3 is replaced by node-4 and kept failed as
// misconfigured, and the run completes — where BadJob failed the run
// before. Its history is the replay test's
// trainingrun_host_cannot_launch.json.
func TestExternalHostWithoutTheJobIsReplaced(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job host e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	faults := []string{"--allow-fault-injection"}
	c, l, srv := startScriptClusterWith(ctx, t, dir, nil, faults, "node-1", "node-2")
	bare := newLauncher(dir, "PATH="+t.TempDir())
	t.Cleanup(func() { _ = bare.StopAll(5 * time.Second) })
	for _, n := range []struct {
		l  *dev.Launcher
		id string
	}{{bare, "node-3"}, {l, "node-4"}} {
		if _, err := n.l.Start(n.id, append([]string{"worker", "node", "--id", n.id, "--address", srv.FrontendAddr(),
			"--checkpoint-url", "file://" + filepath.Join(dir, "ckpt"), "--work-dir", filepath.Join(dir, "work", n.id),
			"--log-level", "info"}, faults...)...); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, 4)

	s := spec.RunSpec{Name: "ext-host", Nodes: 2, Steps: 400, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s, Faults: []spec.InjectFault{{NodeID: "node-2", AtStep: 80}}})
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 2 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d, recoveries %+v: want completed after two", st.Phase, st.Step, st.Recoveries)
	}
	if rec := st.Recoveries[0]; !slices.Equal(rec.FailedNodes, []string{"node-2"}) || !slices.Equal(rec.Replacement, []string{"node-3"}) {
		t.Errorf("first recovery %+v: want node-2 replaced by node-3", rec)
	}
	rec := st.Recoveries[1]
	if !slices.Equal(rec.FailedNodes, []string{"node-3"}) || !slices.Equal(rec.Replacement, []string{"node-4"}) ||
		!strings.Contains(rec.Reason, "node node-3") || !strings.Contains(rec.Reason, "python3") {
		t.Errorf("second recovery %+v: want node-3 replaced by node-4 for lacking python3", rec)
	}
	if !slices.Equal(st.Nodes, []string{"node-1", "node-4"}) {
		t.Errorf("nodes %v, want node-1 and node-4", st.Nodes)
	}
	if r := registryRecord(ctx, t, c, "node-3"); !r.Failed || !r.Misconfigured || !strings.Contains(r.FailReason, "python3") {
		t.Errorf("node-3 in the registry: %+v; want it failed as misconfigured, saying why", r)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_host_cannot_launch.json")
}
