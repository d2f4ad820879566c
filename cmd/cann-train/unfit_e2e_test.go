package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeWithoutDataIsReplaced: a node worker whose --mnist-dir holds no
// data set takes a rank (it is first in ID order); its chunk fails as
// NodeUnfit, the run replaces it in its words and completes, and the
// Cluster keeps it failed, saying why (`cann-train nodes`). Before, it
// failed the run. A workflow input with a misspelled field fails at once
// on the same server, naming the field.
func TestNodeWithoutDataIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	if _, err := l.Start("node-0", "worker", "node", "--id", "node-0", "--address", addr,
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--mnist-dir", filepath.Join(dir, "nowhere")); err != nil {
		t.Fatal(err)
	}
	waitRegistered(ctx, t, c, 4)

	typo, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "run/typo", TaskQueue: spec.ControlTaskQueue},
		spec.WorkflowTrainingRun, json.RawMessage(`{"spec": {"name": "typo", "nodse": 2, "steps": 100}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := typo.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), `unknown field "nodse"`) {
		t.Errorf("a misspelled input field: %v; want the run failed naming it", err)
	}
	recordHistory(t, fetchHistory(ctx, t, c, typo.GetID()), "trainingrun_unknown_input.json")

	s := spec.RunSpec{Name: "unfit", Nodes: 2, Steps: 300, ChunkSteps: 100}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	st := awaitRun(ctx, t, run, l.LogDir)
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || len(st.Recoveries) != 1 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d, recoveries %+v: want completed after one", st.Phase, st.Step, st.Recoveries)
	}
	rec := st.Recoveries[0]
	if len(rec.FailedNodes) != 1 || rec.FailedNodes[0] != "node-0" || !strings.Contains(rec.Reason, "node node-0 has no data set for mlp-mnist") ||
		!strings.Contains(rec.Reason, "--mnist-dir") || slices.Contains(st.Nodes, "node-0") {
		t.Errorf("recovery %+v, nodes %v: want node-0 replaced for its missing data set", rec, st.Nodes)
	}
	reg, err := readRegistry(ctx, c, spec.DefaultClusterID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reg.Nodes {
		if r.Node.ID == "node-0" && (!r.Failed || !r.Misconfigured || !strings.Contains(r.FailReason, "has no data set")) {
			t.Errorf("node-0 in the registry: %+v; want it failed as misconfigured, saying why", r)
		}
	}
	if got := cliAt(ctx, t, addr, l.LogDir)("nodes"); !regexp.MustCompile(`(?m)^node-0 +unfit: node node-0 has no data set`).MatchString(got) {
		t.Errorf("cann-train nodes:\n%s\nwant node-0 unfit, saying why", got)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_node_unfit.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_unfit.json")
}
