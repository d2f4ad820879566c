package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeWithoutDataIsReplaced: a node worker whose --mnist-dir holds no
// data set takes a rank (the last of a run that needs every node: nodes
// that registered none come after those holding a data set); its chunk
// fails as NodeUnfit, the run drops it in its words and completes, and the
// Cluster keeps it failed, saying why (`cann-train nodes`). Before, it
// failed the run. A workflow input with a misspelled field fails at once
// on the same server, naming the field. Then a node whose data set
// differs from its peers' in one label (node-00) takes the last rank of
// a 4-node run (its data set is the fewest's): at the first chunk the
// nodes compare their data sets' fingerprints, and it is removed in the
// same way — before, it trained on its own labels, unseen — but given
// back free: it registered its data set, and a run pinned to that set
// gets it, while a run pinned to the others', or unpinned, is handed a
// node holding theirs before it.
func TestNodeWithoutDataIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	startWith := func(id, data string) {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", addr,
			"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--mnist-dir", data); err != nil {
			t.Fatal(err)
		}
	}
	startWith("node-0", filepath.Join(dir, "nowhere"))
	waitRegistered(ctx, t, c, 4)

	typo, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "run/typo", TaskQueue: spec.ControlTaskQueue},
		spec.WorkflowTrainingRun, json.RawMessage(`{"spec": {"name": "typo", "nodse": 2, "steps": 100}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := typo.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), `unknown field "spec.nodse" (did you mean nodes?)`) {
		t.Errorf("a misspelled input field: %v; want the run failed naming it", err)
	}
	recordHistory(t, fetchHistory(ctx, t, c, typo.GetID()), "trainingrun_unknown_input.json")

	// Four nodes for three holding the data set and one that said none
	// (handed out last): it takes rank 3, and the run goes on with three.
	s := spec.RunSpec{Name: "unfit", Nodes: 4, MinNodes: 3, Steps: 300, ChunkSteps: 100}.WithDefaults()
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
	if r := registryRecord(ctx, t, c, "node-0"); !r.Failed || !r.Misconfigured || !strings.Contains(r.FailReason, "has no data set") {
		t.Errorf("node-0 in the registry: %+v; want it failed as misconfigured, saying why", r)
	}
	if got := cliAt(ctx, t, addr, l.LogDir)("nodes"); !regexp.MustCompile(`(?m)^node-0 +unfit: node node-0 has no data set`).MatchString(got) {
		t.Errorf("cann-train nodes:\n%s\nwant node-0 unfit, saying why", got)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_node_unfit.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_unfit.json")

	startWith("node-00", otherMNIST(t))
	waitRegistered(ctx, t, c, 5)
	s = spec.RunSpec{Name: "odd-data", Nodes: 4, MinNodes: 3, Steps: 200, ChunkSteps: 100}.WithDefaults()
	st = awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: s}), l.LogDir)
	if st.Phase != spec.PhaseCompleted || len(st.Recoveries) != 1 {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s at step %d, recoveries %+v: want completed after one", st.Phase, st.Step, st.Recoveries)
	}
	rec = st.Recoveries[0]
	if !slices.Equal(rec.FailedNodes, []string{"node-00"}) || !strings.Contains(rec.Reason, "node node-00's data set (") ||
		!strings.Contains(rec.Reason, "differs from its peers': sha256 ") || !strings.Contains(rec.Reason, "3 of 4 nodes hold") ||
		!slices.Equal(st.Nodes, []string{"node-1", "node-2", "node-3"}) {
		t.Errorf("recovery %+v, nodes %v: want node-00 (rank 3: its data set is the fewest's) removed for its data set", rec, st.Nodes)
	}
	// node-00 registered its data set: given back, fit for runs on it.
	theirs := registryRecord(ctx, t, c, "node-00")
	if got := cliAt(ctx, t, addr, l.LogDir)("nodes"); theirs.Failed || len(theirs.Node.DataSHA256) != 64 || theirs.Node.DataSHA256 == st.DataSHA256 ||
		!regexp.MustCompile(`(?m)^node-00 +free +- +- +`+theirs.Node.DataSHA256[:12]+` `).MatchString(got) ||
		len(st.DataSHA256) != 64 || !regexp.MustCompile(`(?m)^node-1 +free +- +- +`+st.DataSHA256[:12]+` `).MatchString(got) {
		t.Errorf("node-00 %+v; cann-train nodes:\n%s\nwant node-00 free with its data set, and node-1 with the run's", theirs, got)
	}
	recordHistory(t, fetchHistory(ctx, t, c, spec.RunIDPrefix+s.Name), "trainingrun_other_data.json")
	if got := cliAt(ctx, t, addr, l.LogDir)("status", s.Name); len(st.DataSHA256) != 64 || !strings.Contains(rec.Reason, st.DataSHA256[:12]) ||
		!strings.Contains(got, "data         sha256 "+st.DataSHA256) {
		t.Errorf("data set %q, recovery %q; cann-train status:\n%s\nwant the run's fingerprint, the one its nodes held", st.DataSHA256, rec.Reason, got)
	}

	// A job pinning a data set is handed the nodes holding it first
	// (node-00, first by ID, holds another), a run on node-00's data set
	// gets node-00, and an unpinned one a node of the set most hold.
	for _, want := range []struct{ name, pin, node, data string }{
		{"pinned-node-1", st.DataSHA256, "node-1", st.DataSHA256},
		{"pinned-node-00", theirs.Node.DataSHA256, "node-00", theirs.Node.DataSHA256},
		{"unpinned", "", "node-1", st.DataSHA256},
	} {
		s := spec.RunSpec{Name: want.name, Nodes: 1, Steps: 100, DataSHA256: want.pin}.WithDefaults()
		got := awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: s}), l.LogDir)
		if got.Phase != spec.PhaseCompleted || !slices.Equal(got.Nodes, []string{want.node}) || len(got.Recoveries) != 0 || got.DataSHA256 != want.data {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run %s: %s on %v, data %s, recoveries %+v; want it completed on %s, data %s…", want.name, got.Phase, got.Nodes,
				got.DataSHA256, got.Recoveries, want.node, want.data[:12])
		}
	}
	recordHistory(t, fetchHistory(ctx, t, c, spec.RunIDPrefix+"pinned-node-1"), "trainingrun_data_pinned.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_data.json")

	// An unpinned job needing more nodes than hold one data set is
	// warned of before it starts; it drops node-00 and goes on with three.
	job := filepath.Join(dir, "mixed.yaml")
	if err := os.WriteFile(job, []byte("name: mixed\nnodes: 4\nmin_nodes: 3\nsteps: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, said, err := cliRun(ctx, addr)("run", "-f", job)
	if err != nil || !strings.Contains(said, "warning: the node workers hold 2 data sets (") || !strings.Contains(said, st.DataSHA256[:12]+"… on 3") ||
		!strings.Contains(said, "none is on the 4 nodes the job needs") {
		t.Errorf("cann-train run: %v, said %q; want a warning naming the data sets", err, said)
	}
	if err := c.GetWorkflow(ctx, spec.RunIDPrefix+"mixed", "").Get(ctx, nil); err != nil {
		t.Errorf("the mixed run: %v; want it completed on three nodes", err)
	}

	// A job pinning a data set no node holds (a typo) fails at once and
	// marks no node: the nodes agree with each other, not with it.
	// `cann-train run` warns before it starts.
	job = filepath.Join(dir, "wrong-pin.yaml")
	if err := os.WriteFile(job, []byte("name: wrong-pin\nnodes: 2\nsteps: 100\ndata_sha256: \""+strings.Repeat("0", 64)+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, said, err = cliRun(ctx, addr)("run", "-f", job)
	if err != nil || !strings.Contains(said, "warning: no registered node worker holds the data set the job pins (data_sha256 000000000000…); they hold ") ||
		!strings.Contains(said, st.DataSHA256[:12]+"… on 3") || !strings.Contains(said, theirs.Node.DataSHA256[:12]+"… on 1") ||
		!strings.Contains(said, ": the run fails at its first chunk") {
		t.Errorf("cann-train run: %v, said %q; want a warning naming what the nodes hold", err, said)
	}
	err = c.GetWorkflow(ctx, spec.RunIDPrefix+"wrong-pin", "").Get(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "no node holds the data set the job pins (data_sha256 000000000000…): node-") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("a run pinning a data set nobody holds: %v; want it failed, saying so", err)
	}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		if r := registryRecord(ctx, t, c, id); r.Failed {
			t.Errorf("%s in the registry after the mistyped pin: %+v; want it free", id, r)
		}
	}

	// A node worker of an older build (registered as those did: no chunk
	// protocol, no data set; nothing polls its queue) takes a rank of a
	// 4-node run (after the three holding the common data set): the
	// others refuse it at once, and it is failed as misconfigured —
	// rather than every node waiting for it in the data allgather. The
	// run then drops node-00 for its data set and goes on with three.
	old := spec.Node{ID: "node-old", TaskQueue: spec.NodeTaskQueue("node-old"), CommAddr: "127.0.0.1:1", Host: "old", Devices: 1}
	if err := c.SignalWorkflow(ctx, spec.DefaultClusterID, "", spec.SignalRegister, old); err != nil {
		t.Fatal(err)
	}
	waitRegistered(ctx, t, c, 6)
	s = spec.RunSpec{Name: "older-build", Nodes: 4, MinNodes: 3, Steps: 100}.WithDefaults()
	st = awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: s}), l.LogDir)
	if st.Phase != spec.PhaseCompleted || len(st.Recoveries) < 1 || !slices.Equal(st.Recoveries[0].FailedNodes, []string{"node-old"}) ||
		!strings.Contains(st.Recoveries[0].Reason, "node node-old runs an older cann-train build (chunk protocol 0, not 1") ||
		!slices.Equal(st.Nodes, []string{"node-1", "node-2", "node-3"}) {
		dumpLogs(t, l.LogDir)
		t.Fatalf("%s on %v, recoveries %+v: want node-old refused for its build, completed on node-1..3", st.Phase, st.Nodes, st.Recoveries)
	}
	if r := registryRecord(ctx, t, c, "node-old"); !r.Failed || !r.Misconfigured || !strings.Contains(r.FailReason, "upgrade its worker") {
		t.Errorf("node-old in the registry: %+v; want it failed as misconfigured, saying why", r)
	}
}

// otherMNIST is a directory with MNIST as it is but for the label of
// the first training example (5, now 3).
func otherMNIST(t *testing.T) string {
	t.Helper()
	src, err := engine.MNISTDir()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, name := range []string{"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		if err := os.Symlink(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			t.Fatal(err)
		}
	}
	const labels = "train-labels-idx1-ubyte.gz"
	f, err := os.Open(filepath.Join(src, labels))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if raw[8] != 5 { // (after the magic and the count)
		t.Fatalf("first training label %d, want 5", raw[8])
	}
	raw[8] = 3
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, labels), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
