package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestExternalNodeCutOffFromTheBucketIsReplaced: an external job trains
// on node-1 and node-3, whose worker has no route to the job's S3 bucket
// (its connections there are cut as they arrive). Nothing reads the
// bucket on node-3 until the world restores a checkpoint: paused and
// resumed, node-3 cannot read it. An external world's nodes restore
// alone, before the world forms, so the run asks node-1 to read it
// (ActivityProbeRead): node-1 does, and the run holds once, saying node-3
// is replaced if the next try fails so again; at the next try, cut short
// by a resume, it does, and the run replaces node-3 with the spare node-4
// and completes. Each try's world is stopped as soon as node-3 fails (its
// peer's processes would only wait for node-3's ranks). Before, the run
// held as for a storage down until an operator drained node-3. Its
// history is the replay test's trainingrun_external_unformed.json
// (trainingrun_external_cut_off.json: the same before the early stop).
func TestExternalNodeCutOffFromTheBucketIsReplaced(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job cut-off e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var cut cutOff
	bucket := cut.bucket(t)
	// The script's ranks wait for each other before they train, as a
	// real job's rendezvous does: node-1's do not train on alone while
	// node-3's read fails.
	rdv := "CANN_E2E_RENDEZVOUS=" + filepath.Join(dir, "rendezvous")
	c, l, srv := startScriptClusterWith(ctx, t, dir, []string{rdv}, nil, "node-1")
	start := func(id string, env ...string) {
		t.Helper()
		l.Env = append(env, rdv)
		defer func() { l.Env = []string{rdv} }()
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", srv.FrontendAddr(),
			"--checkpoint-url", bucket, "--work-dir", filepath.Join(dir, "work", id), "--log-level", "info"); err != nil {
			t.Fatal(err)
		}
	}
	// Each of node-3's requests tried once (25 s → 10 s; see
	// TestRankZeroCutOffFromTheBucketIsLeft).
	start("node-3", "AWS_SDK_UA_APP_ID=cut-off", "AWS_MAX_ATTEMPTS=1")
	waitRegistered(ctx, t, c, 2)

	s := spec.RunSpec{Name: "ext-cut-off", Nodes: 2, Steps: 200, CheckpointEvery: 50, HeartbeatTimeout: spec.Duration(2 * time.Second),
		CheckpointURL: bucket,
		External:      &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 1, Workdir: dir}}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a first checkpoint", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.LastCkpt != nil || st.Phase == spec.PhaseCompleted
	})
	cli := cliAt(ctx, t, srv.FrontendAddr(), l.LogDir)
	cli("pause", s.Name, "--wait", "60s")
	start("node-4")
	waitRegistered(ctx, t, c, 3)
	cli("resume", s.Name)
	held := untilStatus(ctx, t, c, run.GetID(), l.LogDir, "a hold for node-3's read", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseStorageWait || st.Phase == spec.PhaseCompleted || st.Phase == spec.PhaseFailed
	})
	for _, want := range []string{"node node-3 cannot read the checkpoint at step ", "(node node-1 read it)",
		"the run replaces node node-3 if the next try fails so again"} {
		if !strings.Contains(held.Detail, want) {
			dumpLogs(t, l.LogDir)
			t.Fatalf("held in %s: %q; want it to say %q", held.Phase, held.Detail, want)
		}
	}
	if cut.cut.Load() == 0 || !slices.Equal(held.Nodes, []string{"node-1", "node-3"}) {
		t.Fatalf("%d connections cut, nodes %v; want node-3's cut, node-1 and node-3 in the run", cut.cut.Load(), held.Nodes)
	}
	cli("resume", s.Name)
	end := awaitRun(ctx, t, run, l.LogDir)
	if end.Phase != spec.PhaseCompleted || end.Step != s.Steps || len(end.Recoveries) != 1 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("ended %s at step %d after recoveries %+v; want completed at %d after node-3's", end.Phase, end.Step, end.Recoveries, s.Steps)
	}
	rec := end.Recoveries[0]
	if !slices.Equal(rec.FailedNodes, []string{"node-3"}) || !slices.Equal(rec.Replacement, []string{"node-4"}) ||
		!strings.Contains(rec.Reason, "in two tries in a row while node node-1 read it: cut off from the bucket") ||
		!strings.Contains(rec.Reason, "(no restart counted: ") {
		t.Errorf("recovery %+v; want node-3 replaced by node-4, cut off from the bucket, no restart counted", rec)
	}
	if !slices.Equal(end.Nodes, []string{"node-1", "node-4"}) || !slices.Equal(end.CutOff, []string{"node-3"}) {
		t.Errorf("nodes %v, cut off %v; want node-1 and node-4, node-3 named cut off", end.Nodes, end.CutOff)
	}
	if r := registryRecord(ctx, t, c, "node-3"); !r.Failed || r.Misconfigured || !strings.Contains(r.FailReason, "cut off from the bucket") {
		t.Errorf("node-3 in the registry: %+v; want it failed (not misconfigured: its lease brings it back), saying why", r)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_external_unformed.json")
}
