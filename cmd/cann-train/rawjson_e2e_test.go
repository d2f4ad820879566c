package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
)

// TestRunSteeredWithHandWrittenJSON drives a run the way the `temporal` CLI
// does, with none of our Go types on the wire: the workflow input, the
// rescale payload and the query's answer are JSON written or read by hand
// (the CLI sends `--input` as a json/plain payload, as json.RawMessage does
// here), signals are named by string, pause and resume carry no payload.
// These are the README's commands:
//
//	temporal workflow start --type TrainingRun --task-queue cann-train --workflow-id run/raw-json \
//	  --input '{"spec": {"name": "raw-json", "nodes": 2, "min_nodes": 1, "steps": 3000, "chunk_steps": 100}}'
//	temporal workflow signal --workflow-id run/raw-json --name pause
//	temporal workflow query --workflow-id run/raw-json --type status
//	temporal workflow signal --workflow-id run/raw-json --name pasue   (named by status, nothing else)
//	temporal workflow signal --workflow-id run/raw-json --name rescale --input '{"nodes": 1}'
//	temporal workflow signal --workflow-id run/raw-json --name resume
//
// A spec written this way gets the same defaults and validation as a job
// file: the workflow applies them itself.
func TestRunSteeredWithHandWrittenJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2")
	const id = "run/raw-json"
	input := json.RawMessage(`{"spec": {"name": "raw-json", "nodes": 2, "min_nodes": 1, "steps": 3000, "chunk_steps": 100,
		"heartbeat_timeout": "5s"}}`)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "cann-train"}, "TrainingRun", input)
	if err != nil {
		t.Fatal(err)
	}
	// status queries the run and decodes its answer into plain JSON.
	status := func() map[string]any {
		t.Helper()
		v, err := c.QueryWorkflow(ctx, id, "", "status")
		if err != nil {
			t.Fatalf("query status: %v", err)
		}
		var raw json.RawMessage
		if err := v.Get(&raw); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("status is not a JSON object: %v: %s", err, raw)
		}
		return m
	}
	until := func(what string, ok func(m map[string]any) bool) map[string]any {
		t.Helper()
		for {
			if m := status(); ok(m) {
				return m
			}
			select {
			case <-ctx.Done():
				dumpLogs(t, l.LogDir)
				t.Fatalf("no %s: %v", what, status())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	step := func(m map[string]any) float64 { f, _ := m["step"].(float64); return f }
	until("training under way", func(m map[string]any) bool { return step(m) >= 100 })

	if err := c.SignalWorkflow(ctx, id, "", "pause", nil); err != nil {
		t.Fatal(err)
	}
	held := until("a pause", func(m map[string]any) bool { return m["status"] == "paused" })
	// (At the end of the chunk in flight, or where its nodes, asked to,
	// ended it early.)
	if s := step(held); s >= 3000 {
		t.Fatalf("paused at step %v: want a step before the end", s)
	}
	// A payload with a field its type lacks is refused, not read without
	// it (a misspelt "clear" would turn the override on).
	if err := c.SignalWorkflow(ctx, id, "", "rescale", json.RawMessage(`{"nodes": 1, "force": true}`)); err != nil {
		t.Fatal(err)
	}
	until("the stray field refused", func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["refused_rescale"]), `json: unknown field "force"`)
	})
	// A signal under a name the run does not know changes nothing (Temporal
	// keeps it unread); the status names it.
	if err := c.SignalWorkflow(ctx, id, "", "pasue", nil); err != nil {
		t.Fatal(err)
	}
	until("the unknown signal named", func(m map[string]any) bool {
		return fmt.Sprint(m["ignored_signals"]) == `["pasue" (did you mean pause?)]`
	})
	if err := c.SignalWorkflow(ctx, id, "", "rescale", json.RawMessage(`{"nodes": 1}`)); err != nil {
		t.Fatal(err)
	}
	until("the rescale noted", func(m map[string]any) bool { return m["pending_nodes"] == 1.0 })
	if err := c.SignalWorkflow(ctx, id, "", "resume", nil); err != nil {
		t.Fatal(err)
	}
	var raw json.RawMessage
	if err := run.Get(ctx, &raw); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run: %v", err)
	}
	var done map[string]any
	if err := json.Unmarshal(raw, &done); err != nil {
		t.Fatal(err)
	}
	recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_strict_signals.json")
	nodes, _ := done["nodes"].([]any)
	if done["status"] != string(spec.PhaseCompleted) || step(done) != 3000 || len(nodes) != 1 {
		t.Fatalf("result: status %v at step %v on nodes %v; want completed at 3000 on one node\n%s", done["status"], done["step"], done["nodes"], raw)
	}
	// A spec the workflow cannot accept fails the run at once, naming the
	// field, instead of training on zero values.
	bad, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "run/raw-bad", TaskQueue: "cann-train"}, "TrainingRun",
		json.RawMessage(`{"spec": {"name": "raw-bad", "nodes": 2, "steps": -5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), "steps") {
		t.Fatalf("a negative steps: %v", err)
	}
	// A value of the wrong type and a name other than the ID's are refused
	// the same way (the first failed the workflow task in the decoder's
	// words; the second trained and checkpointed under the other name).
	for id, tc := range map[string]struct{ input, want string }{
		"run/raw-type":  {`{"spec": {"name": "raw-type", "nodes": "two", "steps": 100}}`, "spec.nodes: a string where a whole number belongs"},
		"run/raw-wait":  {`{"spec": {"name": "raw-wait", "nodes": 1, "node_wait": 120}}`, `spec.node_wait: a number where a duration string ("90s", "2m", "1h30m") belongs`},
		"run/raw-other": {`{"spec": {"name": "raw-else", "nodes": 1, "steps": 100}}`, `workflow ID "run/raw-other" with spec name "raw-else"`},
	} {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "cann-train"}, "TrainingRun", json.RawMessage(tc.input))
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want the run failed saying %q", id, err, tc.want)
		}
		if id == "run/raw-other" {
			recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_run_id_name.json")
		}
	}
	// A run started by hand without the run/ prefix, which cann-train
	// finds runs by: `status NAME` says so rather than "no run".
	bare, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "raw-bare", TaskQueue: "cann-train"}, "TrainingRun",
		json.RawMessage(`{"spec": {"name": "raw-bare", "nodes": 1, "steps": -1}}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = bare.Get(ctx, nil) // (refused: steps)
	if _, _, err := cliRun(ctx, addr)("status", "raw-bare"); err == nil || !strings.Contains(err.Error(), "no run run/raw-bare in namespace default at "+addr+`, but a TrainingRun workflow has the ID "raw-bare"`) {
		t.Errorf("status of a run started without the run/ prefix: %v", err)
	}
}
