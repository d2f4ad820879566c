package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestNodeIDServedByOneWorker: a second worker started under a node ID
// whose worker is alive exits with an error naming it (two workers on one
// node's task queue would split its chunks); once that worker is
// SIGKILLed, a new one under the same ID takes over at once, as after a
// machine restart.
func TestNodeIDServedByOneWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir) // node-1 is started below
	node := func() []string {
		return []string{"worker", "node", "--id", "node-1", "--address", addr, "--checkpoint-url", "file://" + filepath.Join(dir, "ckpt")}
	}
	first, err := l.Start("node-1", node()...)
	if err != nil {
		t.Fatal(err)
	}
	firstAddr := commAddr(ctx, t, c, "")

	dup, err := l.Start("node-1-dup", node()...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-dup.Done():
	case <-time.After(30 * time.Second): // it exits before it polls, within seconds
		t.Fatal("a second worker for a live node ID kept running")
	}
	logText, _ := os.ReadFile(filepath.Join(l.LogDir, "node-1-dup.log"))
	if dup.Err() == nil || !strings.Contains(string(logText), "another worker serves this node ID") || !strings.Contains(string(logText), firstAddr) {
		t.Fatalf("second worker: exit %v, log:\n%s", dup.Err(), logText)
	}
	if got := commAddr(ctx, t, c, ""); got != firstAddr {
		t.Fatalf("the refused worker changed the registration: %s, was %s", got, firstAddr)
	}

	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	again, err := l.Start("node-1-again", node()...)
	if err != nil {
		t.Fatal(err)
	}
	newAddr := commAddr(ctx, t, c, firstAddr)
	select {
	case <-again.Done():
		logText, _ := os.ReadFile(filepath.Join(l.LogDir, "node-1-again.log"))
		t.Fatalf("the worker restarted after a kill exited: %v\n%s", again.Err(), logText)
	default:
	}
	t.Logf("node-1 served at %s, a duplicate refused, after the kill at %s", firstAddr, newAddr)
}

// commAddr waits until the Cluster lists node-1 as live with a collective
// address other than not, and returns it.
func commAddr(ctx context.Context, t *testing.T, c client.Client, not string) string {
	t.Helper()
	for {
		var nodes []workflows.NodeRecord
		q, err := c.QueryWorkflow(ctx, spec.DefaultClusterID, "", spec.QueryNodes)
		if err == nil && q.Get(&nodes) == nil {
			for _, n := range nodes {
				if n.Node.ID == "node-1" && !n.Failed && n.Node.CommAddr != "" && n.Node.CommAddr != not {
					return n.Node.CommAddr
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node-1 never registered (other than at %q): %v %+v", not, err, nodes)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestNodeWorkerRefusesBadBucket: a node worker whose default checkpoint
// bucket cannot be opened stops at start, naming it, instead of failing
// every chunk of every run that names no bucket.
func TestNodeWorkerRefusesBadBucket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, addr := startInProcessControl(ctx, t, t.TempDir())
	for _, tc := range []struct{ url, want string }{
		{"s4://ckpt", `no storage driver for "s4"`},
		{"/tmp/ckpt", "is not a bucket URL"},
		{"file://ckpt/x", `names host "ckpt"`},
		{"file://" + t.TempDir() + "?colour=blue", `invalid query parameter "colour"`},
	} {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs([]string{"worker", "node", "--id", "node-x", "--address", addr, "--checkpoint-url", tc.url})
		err := root.ExecuteContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "node node-x") || !strings.Contains(err.Error(), tc.url) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--checkpoint-url %s: %v; want it refused, saying %q", tc.url, err, tc.want)
		}
	}
}

// TestRegistryResetTakesEveryNodeBack: the node registry (the Cluster
// workflow) terminated while three node workers serve — as when Temporal
// loses its state — is started anew by the first node whose lease
// renewal finds it gone, and the others' renewals, reaching the new one,
// register them too (versionRenewalRegisters): all three are listed again
// within a few lease periods, their workers never restarted. Before, the
// new registry knew only the first. The new registry's history is the
// replay test's cluster_renewal_registers.json
// (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata).
func TestRegistryResetTakesEveryNodeBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir)
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		if _, err := l.Start(id, "worker", "node", "--id", id, "--address", addr,
			"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"), "--lease-every", "1s"); err != nil {
			t.Fatal(err)
		}
	}
	waitRegistered(ctx, t, c, 3)
	desc, err := c.DescribeWorkflowExecution(ctx, spec.DefaultClusterID, "")
	if err != nil {
		t.Fatal(err)
	}
	old := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if err := c.TerminateWorkflow(ctx, spec.DefaultClusterID, old, "the test resets the registry"); err != nil {
		t.Fatal(err)
	}
	for { // (a query of the terminated one would still answer)
		d, err := c.DescribeWorkflowExecution(ctx, spec.DefaultClusterID, "")
		if err == nil && d.GetWorkflowExecutionInfo().GetExecution().GetRunId() != old {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no node worker started a new registry: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	back, cancelBack := context.WithTimeout(ctx, 15*time.Second) // (renewals every second)
	defer cancelBack()
	if err := awaitNodes(back, c, spec.DefaultClusterID, 3); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("after the registry was reset: %v", err)
	}
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_renewal_registers.json")
}
