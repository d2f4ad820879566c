package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestPauseResumeRealRun pauses a run training on node-worker processes
// with `cann-train pause`, checks that `cann-train status` says paused and
// that the step stands still, rescales it while paused (`cann-train scale`:
// 2 → 3 nodes), resumes it with `cann-train resume`, moves it off a
// drained node (3 → 2), rescales it while it trains (`scale --wait`:
// 2 → 1) and waits for it to complete. Its history is the replay test's
// trainingrun_scale_grows.json (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata).
func TestPauseResumeRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3")
	s := spec.RunSpec{Name: "pause-me", Nodes: 2, MinNodes: 1, Steps: 2000, ChunkSteps: 100,
		HeartbeatTimeout: spec.Duration(5 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	cli := cliAt(ctx, t, addr, l.LogDir)
	status := func() Summary {
		t.Helper()
		var sum Summary
		if err := json.Unmarshal([]byte(cli("status", "pause-me", "-o", "json")), &sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	until := func(what string, ok func(st spec.RunStatus, live *spec.ChunkProgress) bool) {
		t.Helper()
		untilStatus(ctx, t, c, run.GetID(), l.LogDir, what, ok)
	}
	until("training under way", func(st spec.RunStatus, live *spec.ChunkProgress) bool { return st.Step >= 100 && live != nil })

	out := cli("pause", "pause-me", "--wait", "60s")
	if !strings.Contains(out, "paused at step") {
		t.Fatalf("pause: %q", out)
	}
	held := status()
	if held.Status != spec.PhasePaused || held.Steps >= s.Steps {
		// (At the chunk's planned end, or where its nodes ended it early.)
		t.Fatalf("after pause: status %s at step %d; want paused before the end", held.Status, held.Steps)
	}
	// `nodes` says why its nodes are held (the search attribute CannStatus
	// is upserted with the phase).
	for text := cli("nodes", "-o", "json"); !strings.Contains(text, `"reason":"run/pause-me is paused, holding it: `+"`cann-train resume pause-me`"+`"`); text = cli("nodes", "-o", "json") {
		select {
		case <-ctx.Done():
			t.Fatalf("nodes of a paused run:\n%s", text)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The checkpoint the last chunk was uploading settles while it holds.
	for st := held; st.Checkpoints.LastStep != held.Steps; st = status() {
		select {
		case <-ctx.Done():
			t.Fatalf("paused at step %d with its last checkpoint at step %d; want the one it holds at (uploading when the chunk ended)", held.Steps, st.Checkpoints.LastStep)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if text := cli("status", "pause-me"); !strings.Contains(text, fmt.Sprintf("status       paused at step %d (cann-train resume pause-me continues)\n", held.Steps)) {
		t.Errorf("status text does not say paused, once, and how to resume:\n%s", text)
	}
	// The paused run holds its nodes: `nodes` shows them busy at their
	// ranks and the third free.
	var nodes []nodeRow
	if err := json.Unmarshal([]byte(cli("nodes", "-o", "json")), &nodes); err != nil {
		t.Fatal(err)
	}
	busy, free := 0, 0
	for _, n := range nodes {
		switch {
		case n.State == "busy" && n.Run == run.GetID() && n.Rank >= 0 && n.Rank < 2:
			busy++
		case n.State == "free":
			free++
		}
	}
	if busy != 2 || free != 1 {
		t.Errorf("nodes while paused: %+v; want 2 busy in %s and 1 free", nodes, run.GetID())
	}
	// Drain the free node and put it back (the rescale below needs it).
	state := func(id string) string {
		t.Helper()
		var ns []nodeRow
		if err := json.Unmarshal([]byte(cli("nodes", "-o", "json")), &ns); err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.ID == id {
				return n.State + " " + n.Reason
			}
		}
		return "missing"
	}
	if out := cli("nodes", "drain", "node-3", "--reason", "swap the disk"); !strings.Contains(out, "node-3 drained") {
		t.Errorf("drain: %q", out)
	}
	for st := state("node-3"); st != "drained swap the disk"; st = state("node-3") {
		select { // the signal lands with the Cluster's next workflow task
		case <-ctx.Done():
			t.Fatalf("node-3 never showed drained: %s", st)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if out := cli("nodes", "undrain", "node-3"); out != "node-3 is back in the pool\n" {
		t.Errorf("undrain: %q", out)
	}
	for st := state("node-3"); st != "free "; st = state("node-3") {
		select {
		case <-ctx.Done():
			t.Fatalf("node-3 never came back: %s", st)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if out := cli("nodes", "undrain", "node-3"); out != "node-3 is not drained: nothing to undo\n" {
		t.Errorf("undrain of a node not drained: %q", out)
	}
	var errb bytes.Buffer
	unknown := newRootCmd(&env{out: &bytes.Buffer{}, err: &errb, command: childCommand})
	unknown.SetArgs([]string{"nodes", "drain", "node-9", "--address", addr})
	if err := unknown.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), `no node "node-9"`) {
		t.Errorf("drain of an unknown node: %v", err)
	}
	// nodes forget refuses a node a run holds, one whose worker lives,
	// and one never registered, each saying why.
	for node, want := range map[string]string{"node-1": "is held by run/pause-me", "node-3": "renewed its lease", "node-9": "node node-9 is not registered"} {
		root := newRootCmd(&env{out: &bytes.Buffer{}, err: &bytes.Buffer{}, command: childCommand})
		root.SetArgs([]string{"nodes", "forget", node, "--address", addr})
		if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("nodes forget %s: %v, want %q", node, err, want)
		}
	}
	// The paused run is still going: starting its name again is refused,
	// not answered with the running run as if it had started.
	if _, err := startRunWith(ctx, c, s, spec.DefaultClusterID); err == nil || !strings.Contains(err.Error(), "a run of that name is still going") {
		t.Errorf("a second start of a running run: %v, want it refused", err)
	}
	// run --fresh of it too, and its checkpoints stay.
	before := cli("checkpoint", "ls", "pause-me")
	job := filepath.Join(t.TempDir(), "pause-me.yaml")
	bucket := ""
	if st, _, _, err := readProgress(ctx, c, run.GetID()); err == nil && st.LastCkpt != nil {
		bucket = st.LastCkpt.URL
	}
	if bucket == "" {
		t.Fatal("the paused run names no checkpoint bucket")
	}
	if err := os.WriteFile(job, []byte("name: pause-me\nnodes: 2\nsteps: 2000\ncheckpoint_url: "+bucket+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := newRootCmd(&env{out: &bytes.Buffer{}, err: &bytes.Buffer{}, command: childCommand})
	fresh.SetArgs([]string{"run", "-f", job, "--fresh", "--address", addr})
	if err := fresh.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "a run of that name is still going") {
		t.Errorf("run --fresh of a running run: %v, want it refused", err)
	}
	// A plain run of it is refused without a note on the nodes it would
	// have waited for (it asks for 3; the paused run holds 2 or 3).
	var note bytes.Buffer
	plain := newRootCmd(&env{out: &bytes.Buffer{}, err: &note, command: childCommand})
	job3 := filepath.Join(t.TempDir(), "pause-me.yaml")
	if err := os.WriteFile(job3, []byte("name: pause-me\nnodes: 3\nsteps: 2000\ncheckpoint_url: "+bucket+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain.SetArgs([]string{"run", "-f", job3, "--address", addr})
	if err := plain.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "a run of that name is still going") ||
		strings.Contains(note.String(), "note:") {
		t.Errorf("run of a running run: %v, said %q; want it refused, no note on free nodes", err, note.String())
	}
	resume := newRootCmd(&env{out: &bytes.Buffer{}, err: &bytes.Buffer{}, command: childCommand})
	resume.SetArgs([]string{"run", "-f", job, "--resume", "--address", addr})
	if err := resume.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "--resume: run run/pause-me has not ended") {
		t.Errorf("run --resume of a running run: %v, want it refused as not ended (not taken for a forgotten run)", err)
	}
	// And a chunk GC without a grace period, which could take chunks a
	// save of the run relies on.
	gc0 := newRootCmd(&env{out: &bytes.Buffer{}, err: &bytes.Buffer{}, command: childCommand})
	gc0.SetArgs([]string{"checkpoint", "gc", "pause-me", "--keep-last", "1", "--grace", "0", "--address", addr})
	if err := gc0.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "run/pause-me is still running") {
		t.Errorf("checkpoint gc --grace 0 of a running run: %v, want it refused", err)
	}
	if after := cli("checkpoint", "ls", "pause-me"); after != before {
		t.Errorf("run --fresh or gc --grace 0 of a running run touched its checkpoints:\n%s\nthen\n%s", before, after)
	}
	// The dashboard lists the run (the visibility store indexes it) with
	// what its status query says.
	dashboard := func(what string, ok func(r dashboardRow) bool, args ...string) dashboardRow {
		t.Helper()
		for {
			var rows []dashboardRow
			if err := json.Unmarshal([]byte(cli(append([]string{"dashboard", "-o", "json"}, args...)...)), &rows); err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.WorkflowID == run.GetID() && ok(r) {
					return r
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("dashboard never showed %s: %+v", what, rows)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if r := dashboard("the paused run", func(r dashboardRow) bool { return r.Status == spec.PhasePaused }); r.Execution != "running" ||
		r.Step != held.Steps || r.Steps != s.Steps || r.Nodes != 2 || r.Model != held.Model || r.RunID != run.GetRunID() {
		t.Errorf("dashboard row of the paused run: %+v", r)
	}
	// More nodes than are free: said, and asked all the same (the
	// rescale to 3 below replaces it: the run is paused).
	if _, said, err := cliRun(ctx, addr)("scale", "pause-me", "--nodes", "5"); err != nil ||
		!strings.Contains(said, "run/pause-me: note: 3 more node(s) asked for, 1 free now (3 registered: 2 busy;") {
		t.Errorf("scale beyond the free nodes: %v %q", err, said)
	}
	if out := cli("scale", "pause-me", "2"); out != "run/pause-me: stays on 2 node(s) (replaces the pending rescale to 5)\n" {
		t.Errorf("scale to its size with a rescale pending: %q", out)
	}
	cli("scale", "pause-me", "--nodes", "3")
	time.Sleep(2 * time.Second)
	again := status()
	if again.Status != spec.PhasePaused || again.Steps != held.Steps || again.Chunks != held.Chunks {
		t.Fatalf("while paused the run moved: %s step %d (chunks %d) → %s step %d (chunks %d)",
			held.Status, held.Steps, held.Chunks, again.Status, again.Steps, again.Chunks)
	}
	if again.PendingNodes != 3 || len(again.Nodes) != 2 {
		t.Errorf("while paused: nodes %v, pending %d; want the rescale to 3 pending", again.Nodes, again.PendingNodes)
	}
	if _, live, _, _ := readProgress(ctx, c, run.GetID()); live != nil {
		t.Errorf("a chunk is training while paused: %+v", live)
	}
	t.Logf("paused at step %d of %d; resuming on 3 nodes", held.Steps, s.Steps)
	if _, _, err := cliRun(ctx, addr)("green", "override", "pause-me", "--for", "1h"); err == nil || !strings.Contains(err.Error(), "has no green policy") {
		t.Errorf("green override of a run without a policy: %v", err)
	}
	if out := cli("pause", "pause-me"); out != fmt.Sprintf("run/pause-me: already paused at step %d (`cann-train resume pause-me` ends the pause)\n", held.Steps) {
		t.Errorf("pause of the paused run: %q", out)
	}
	if out := cli("resume", "pause-me"); out != fmt.Sprintf("run/pause-me: resumed (was paused at step %d)\n", held.Steps) {
		t.Errorf("resume: %q", out)
	}
	until("a chunk on 3 nodes", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Rescalings) == 1 && st.Step > held.Steps
	})
	if out := cli("resume", "pause-me"); !strings.HasPrefix(out, "run/pause-me: nothing to resume: ") {
		t.Errorf("resume of the training run: %q", out)
	}
	// Drain a node the run holds: the run is told and moves off it at its
	// next chunk boundary; no node is free and min_nodes is 1, so it goes
	// on with the other two.
	cli("pause", "pause-me", "--wait", "60s")
	if out := cli("nodes", "drain", "node-2", "--reason", "swap the disk"); !strings.Contains(out, "pause-me moves off it at its next chunk boundary") {
		t.Errorf("drain of a held node: %q", out)
	}
	until("the run told of the drain", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return slices.Equal(st.Evicting, []string{"node-2"})
	})
	if st := state("node-2"); !strings.HasPrefix(st, "draining swap the disk") {
		t.Errorf("node-2 while its run holds it: %q", st)
	}
	if text := cli("status", "pause-me"); !strings.Contains(text, "drained [node-2] still held") {
		t.Errorf("status text does not name the drained node:\n%s", text)
	}
	cli("resume", "pause-me")
	until("the run off node-2", func(st spec.RunStatus, _ *spec.ChunkProgress) bool { return len(st.Rescalings) == 2 })
	if off := status(); !slices.Equal(off.Nodes, []string{"node-1", "node-3"}) || len(off.Evicting) != 0 ||
		off.Rescalings[1].Reason != "node-2 drained: swap the disk" || !slices.Equal(off.Rescalings[1].Removed, []string{"node-2"}) {
		t.Errorf("after the drain: nodes %v, evicting %v, change %+v; want node-2 left out", off.Nodes, off.Evicting, off.Rescalings[1])
	}
	if st := state("node-2"); st != "drained swap the disk" {
		t.Errorf("node-2 after its run left it: %q", st)
	}
	// A rescale while it trains: at the boundary after the signal, whose
	// checkpoint is still uploading (every chunk checkpoints in the
	// background), the run waits for the upload and changes there — not
	// one more chunk later.
	was := status()
	out = cli("scale", "pause-me", "--nodes", "1", "--wait", "60s")
	scaled := status()
	if len(scaled.Rescalings) != 3 || !strings.Contains(out, "rescale gen ") || !strings.Contains(out, ": 2 → 1 nodes") ||
		!strings.Contains(out, "on 1 node(s) [node-1]") {
		t.Fatalf("scale --wait: %q; rescalings %+v", out, scaled.Rescalings)
	}
	if at := scaled.Rescalings[2].AtStep; at > was.Steps+2*s.ChunkSteps || scaled.Rescalings[2].ResumeStep != at {
		t.Errorf("scaled at step %d (resuming at %d) after a signal at step %d: want the boundary after it (its chunk in flight may have ended first)",
			at, scaled.Rescalings[2].ResumeStep, was.Steps)
	}

	var st spec.RunStatus
	if err := run.Get(ctx, &st); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run after resume: %v", err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != s.Steps || st.PauseRequested || st.EvalValue < 0.85 {
		t.Fatalf("final status %s at step %d (pause requested %v, accuracy %.3f)", st.Phase, st.Step, st.PauseRequested, st.EvalValue)
	}
	if len(st.Rescalings) != 3 || st.Rescalings[0].ToNodes != 3 || st.Rescalings[1].ToNodes != 2 || st.Rescalings[2].ToNodes != 1 ||
		len(st.Nodes) != 1 {
		t.Errorf("rescalings %+v, nodes %v: want 2 → 3 → 2 (node-2 drained) → 1", st.Rescalings, st.Nodes)
	}
	if r := dashboard("the completed run", func(r dashboardRow) bool { return r.Execution == "completed" },
		"--query", "CannStatus = 'completed'"); r.Status != spec.PhaseCompleted || r.Step != s.Steps || r.Loss != st.Loss || r.Nodes != 1 {
		t.Errorf("dashboard row of the completed run: %+v", r)
	}
	text := cli("dashboard")
	if !strings.Contains(text, "pause-me") || !strings.Contains(text, fmt.Sprintf("%d/%d", s.Steps, s.Steps)) {
		t.Errorf("dashboard table:\n%s", text)
	}
	t.Logf("cann-train dashboard:\n%s", text)
	// Without --url the checkpoint commands find the run's bucket from its
	// status (here the nodes' file:// bucket, not the default one).
	var refs []checkpoint.Ref
	if err := json.Unmarshal([]byte(cli("checkpoint", "ls", "pause-me", "-o", "json")), &refs); err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 || refs[len(refs)-1].Step != s.Steps || refs[len(refs)-1].SHA256 != st.LastCkpt.SHA256 {
		t.Errorf("checkpoint ls without --url: %+v; want the run's checkpoints up to step %d (%s)", refs, s.Steps, st.LastCkpt.SHA256)
	}
	js, _, err := cliRun(ctx, addr)("watch", "pause-me", "-o", "jsonl")
	if end := lastJSONLine(t, js); err != nil || end["status"] != string(spec.PhaseCompleted) || end["step"] != float64(s.Steps) || end["error"] != nil {
		t.Errorf("watch -o jsonl of the completed run: %v\n%s", err, js)
	}
	// watch of the ended run says each change of its node count in a line.
	_, said, err := cliRun(ctx, addr)("watch", "pause-me")
	for _, want := range []string{fmt.Sprintf("%-*s gen ", kindWidth, "rescale"), ": 2 → 3 nodes +[node-3]", fmt.Sprintf("%-*s gen ", kindWidth, "replace"), "−[node-2] (node-2 drained: swap the disk)", ": 2 → 1 nodes"} {
		if err != nil || !strings.Contains(said, want) {
			t.Errorf("watch of the ended run: %v; lacks %q:\n%s", err, want, said)
		}
	}
	// trainingrun_pause.json: before drains evicted; trainingrun_pause_drain.json: before a pause settled its checkpoint;
	// trainingrun_pause_settled.json: when it settled it before saying paused;
	// trainingrun_pause_background.json: before a rescale awaited an upload
	// trainingrun_scale_settled.json: before scale-up-grows
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_scale_grows.json")
	// cluster_drain.json: before resweep-waiting
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_resweep.json")
}

// TestCancelRealRun cancels a run training on node-worker processes with
// `cann-train cancel --wait`: the run ends cancelled, its nodes are free
// again at once, and `status` and `checkpoint ls` still find where it
// stopped and its checkpoints (its history is the replay test's
// trainingrun_cancel.json). Then it terminates another: its nodes show
// orphaned until `cann-train nodes release`.
func TestCancelRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "cancel-me", Nodes: 2, Steps: 1_000_000, ChunkSteps: 100}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	run3 := cliRun(ctx, addr)
	cli := func(args ...string) (string, error) {
		out, _, err := run3(args...)
		return out, err
	}
	awaitCheckpoint(ctx, t, c, run.GetID(), 1, l.LogDir)
	out, err := cli("cancel", "cancel-me", "--wait", "60s")
	if err != nil || !strings.Contains(out, "run/cancel-me: cancelled at step ") || !strings.Contains(out, "its nodes are free again") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("cancel: %v %q", err, out)
	}
	var ce *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &ce) {
		t.Errorf("the workflow ended with %v, want Canceled", err)
	}
	js, err := cli("nodes", "-o", "json")
	var nodes []nodeRow
	if err != nil || json.Unmarshal([]byte(js), &nodes) != nil || len(nodes) != 2 {
		t.Fatalf("nodes: %v %q", err, js)
	}
	for _, n := range nodes {
		if n.State != "free" {
			t.Errorf("after the cancel %s is %s (%s)", n.ID, n.State, n.Run)
		}
	}
	text, err := cli("status", "cancel-me")
	if err == nil || !strings.Contains(err.Error(), "run/cancel-me cancelled") ||
		!strings.Contains(text, "cancelled") || !strings.Contains(text, "cancelled at step") {
		t.Errorf("status of the cancelled run: %v\n%s", err, text)
	}
	// watch -o jsonl ends with a line saying how the run ended (of an
	// ended run it wrote nothing).
	js, err = cli("watch", "cancel-me", "-o", "jsonl")
	if end := lastJSONLine(t, js); err == nil || end["status"] != string(spec.PhaseCancelled) || !strings.Contains(fmt.Sprint(end["error"]), "cancelled") ||
		end["step"].(float64) == 0 {
		t.Errorf("watch -o jsonl of the cancelled run: %v\n%s", err, js)
	}
	js, err = cli("checkpoint", "ls", "cancel-me", "-o", "json")
	var refs []checkpoint.Ref
	if err != nil || json.Unmarshal([]byte(js), &refs) != nil || len(refs) == 0 {
		t.Errorf("checkpoint ls of the cancelled run: %v %q", err, js)
	}
	// The dashboard row says where the cancelled run stopped (its status
	// query), not Temporal's bare "canceled".
	for {
		js, err := cli("dashboard", "-o", "json")
		var rows []dashboardRow
		if err != nil || json.Unmarshal([]byte(js), &rows) != nil {
			t.Fatalf("dashboard: %v %q", err, js)
		}
		i := slices.IndexFunc(rows, func(r dashboardRow) bool { return r.WorkflowID == run.GetID() && r.Execution == "canceled" })
		if i >= 0 {
			if r := rows[i]; r.Status != spec.PhaseCancelled || !strings.HasPrefix(r.Detail, "cancelled at step ") || r.Step == 0 {
				t.Errorf("dashboard row of the cancelled run: %+v", r)
			}
			break
		}
		select { // the visibility store indexes the close shortly after
		case <-ctx.Done():
			t.Fatalf("the dashboard never listed the cancelled run: %s", js)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, cmd := range []string{"status", "cancel", "pause"} {
		if _, err := cli(cmd, "never-ran"); err == nil || !strings.Contains(err.Error(), "no run run/never-ran in namespace default at "+addr+" (cann-train dashboard lists the runs") {
			t.Errorf("%s of a run that never was: %v; want it named as unknown", cmd, err)
		}
	}
	// A typo is answered with the name meant; the run/ prefix typed
	// twice too.
	for _, typo := range []string{"cancle-me", "run/run/cancel-me"} {
		if _, err := cli("status", typo); err == nil || !strings.Contains(err.Error(), "(did you mean cancel-me? cann-train dashboard lists the runs") {
			t.Errorf("status %s: %v; want cancel-me suggested", typo, err)
		}
	}
	// watch -o json of the cancelled run prints its final status, as
	// status does, and then fails.
	js, err = cli("watch", "cancel-me", "-o", "json")
	var sum Summary
	if err == nil || !strings.Contains(err.Error(), "run/cancel-me cancelled") || json.Unmarshal([]byte(js), &sum) != nil || sum.Status != spec.PhaseCancelled {
		t.Errorf("watch -o json of the cancelled run: %v\n%s", err, js)
	}
	if _, err := cli("cancel", "cancel-me"); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("a second cancel: %v, want it refused (the run has ended)", err)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_cancel.json")

	// A terminated run runs no code: its nodes stay held, shown orphaned,
	// until `nodes release` gives them back.
	s.Name = "terminate-me"
	run = startRun(ctx, t, c, workflows.RunInput{Spec: s})
	state := func() map[string]string {
		t.Helper()
		js, err := cli("nodes", "-o", "json")
		var nodes []nodeRow
		if err != nil || json.Unmarshal([]byte(js), &nodes) != nil {
			t.Fatalf("nodes: %v %q", err, js)
		}
		m := map[string]string{}
		for _, n := range nodes {
			m[n.ID] = n.State
		}
		return m
	}
	for st := state(); st["node-1"] != "busy" || st["node-2"] != "busy"; st = state() {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := cli("nodes", "release", "terminate-me"); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Errorf("release of a running run: %v, want it refused", err)
	}
	if err := c.TerminateWorkflow(ctx, run.GetID(), "", "test"); err != nil {
		t.Fatal(err)
	}
	if st := state(); st["node-1"] != "orphaned" || st["node-2"] != "orphaned" {
		t.Errorf("nodes of the terminated run: %v, want orphaned", st)
	}
	// Its status says how it ended, not the phase it was in.
	if out, err := cli("status", "terminate-me"); err == nil || !strings.Contains(out, "status       terminated") {
		t.Errorf("status of the terminated run: %v\n%s", err, out)
	}
	if out, err := cli("nodes", "release", "terminate-me"); err != nil || !strings.Contains(out, "released 2 node(s) held by run/terminate-me (terminated)") {
		t.Errorf("release: %v %q", err, out)
	}
	// "released" is said once the Cluster has applied it.
	if st := state(); st["node-1"] != "free" || st["node-2"] != "free" {
		t.Errorf("after `nodes release` said released: %v", st)
	}
	if out, err := cli("nodes", "release", "cancel-me"); err != nil || !strings.Contains(out, "no node is held by run/cancel-me (canceled)") {
		t.Errorf("release of a run that gave its nodes back: %v %q", err, out)
	}

	// A run cancelled while it waits for nodes: a node that registers
	// afterwards stays free (the Cluster's acquire ended with the run).
	s.Name, s.Nodes, s.MinNodes, s.NodeWait = "wait-me", 3, 3, spec.Duration(time.Minute)
	run = startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for {
		st, _, closed, _ := readProgress(ctx, c, run.GetID())
		if closed || ctx.Err() != nil {
			t.Fatalf("wait-me closed or timed out before waiting for nodes: %+v", st)
		}
		if strings.Contains(st.Detail, "waiting for 3 free node(s)") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := cli("cancel", "wait-me", "--wait", "60s"); err != nil || !strings.Contains(out, "cancelled at step 0") {
		t.Fatalf("cancel while waiting: %v %q", err, out)
	}
	if _, err := l.Start("node-3", "worker", "node", "--id", "node-3", "--address", addr,
		"--checkpoint-url", "file://"+filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	for st := state(); st["node-3"] == ""; st = state() {
		select {
		case <-ctx.Done():
			t.Fatal("node-3 never registered")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if st := state(); st["node-1"] != "free" || st["node-2"] != "free" || st["node-3"] != "free" {
		t.Errorf("after the cancelled run's wait: %v, want all free", st)
	}

	// Nobody releases a terminated run's nodes by hand this time: the next
	// run that needs them finds it ended (the Cluster asks the server),
	// frees all its nodes and takes what it needs.
	s.Name, s.Nodes, s.MinNodes, s.NodeWait = "terminate-me-too", 3, 0, spec.Duration(time.Minute)
	run = startRun(ctx, t, c, workflows.RunInput{Spec: s})
	for st := state(); st["node-1"] != "busy" || st["node-2"] != "busy" || st["node-3"] != "busy"; st = state() {
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.TerminateWorkflow(ctx, run.GetID(), "", "test"); err != nil {
		t.Fatal(err)
	}
	next := spec.RunSpec{Name: "after-terminate", Nodes: 2, Steps: 200, ChunkSteps: 100, NodeWait: spec.Duration(30 * time.Second)}.WithDefaults()
	run = startRun(ctx, t, c, workflows.RunInput{Spec: next})
	if err := run.Get(ctx, nil); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("a run after a terminated one that held every node: %v", err)
	}
	// All three freed with the ended run, the third too.
	if st := state(); st["node-1"] != "free" || st["node-2"] != "free" || st["node-3"] != "free" {
		t.Errorf("after the run that followed the terminated one: %v, want all free", st)
	}
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_sweep.json")
}

// cliAt runs `cann-train args… --address addr` in this process and
// returns its standard output; an error fails the test, with the node
// logs in logDir.
func cliAt(ctx context.Context, t *testing.T, addr, logDir string) func(args ...string) string {
	run := cliSaidAt(ctx, t, addr, logDir)
	return func(args ...string) string {
		t.Helper()
		out, _ := run(args...)
		return out
	}
}

// cliSaidAt is cliAt returning the command's standard error too.
func cliSaidAt(ctx context.Context, t *testing.T, addr, logDir string) func(args ...string) (stdout, stderr string) {
	run := cliRun(ctx, addr)
	return func(args ...string) (string, string) {
		t.Helper()
		out, said, err := run(args...)
		if err != nil {
			dumpLogs(t, logDir)
			t.Fatalf("cann-train %v: %v\n%s", args, err, said)
		}
		return out, said
	}
}

// cliRun runs `cann-train args… --address addr` in this process and
// returns its standard output, its standard error and its error.
// lastJSONLine decodes the last line of out, JSON lines (none: an empty
// object).
func lastJSONLine(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	m := map[string]any{}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil && out != "" {
		t.Errorf("not JSON lines: %v\n%s", err, out)
	}
	return m
}

func cliRun(ctx context.Context, addr string) func(args ...string) (string, string, error) {
	return func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append(args, "--address", addr))
		err := root.ExecuteContext(ctx)
		return out.String(), errb.String(), err
	}
}

// awaitCheckpoint waits until run id has a checkpoint at step at least
// at; the run closing first fails the test, with the node logs in logDir.
func awaitCheckpoint(ctx context.Context, t *testing.T, c client.Client, id string, at int64, logDir string) {
	t.Helper()
	for {
		st, _, closed, err := readProgress(ctx, c, id)
		if closed || ctx.Err() != nil {
			dumpLogs(t, logDir)
			t.Fatalf("run %s closed (or the test timed out) before a checkpoint at step %d: %v", id, at, err)
		}
		if st.LastCkpt != nil && st.LastCkpt.Step >= at {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestCancelStopsTheChunkInFlight: a cancelled run's chunk stops on its
// nodes within seconds, not at the SDK's throttled heartbeat (0.8 × a 30 s
// heartbeat timeout here: 24 s), which is when an activity hears of its
// cancellation: the run asks rank 0's node to end it (EndChunk), its
// ranks end it at their next vote with a checkpoint there, and the run
// ends cancelled at that step. Neither node's chunk is cancelled.
func TestCancelStopsTheChunkInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, _ := startInProcessControl(ctx, t, dir, "node-1", "node-2")
	s := spec.RunSpec{Name: "cancel-chunk", Nodes: 2, Steps: 10_000_000, ChunkSteps: 10_000_000, CheckpointEvery: 10_000_000,
		HeartbeatTimeout: spec.Duration(30 * time.Second)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the chunk training", func(_ spec.RunStatus, live *spec.ChunkProgress) bool {
		return live != nil && live.Step > 0
	})
	if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	var canceled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Fatalf("the cancelled run ended with %v", err)
	}
	took := time.Since(asked)
	if took > 5*time.Second {
		dumpLogs(t, l.LogDir)
		t.Fatalf("the run ended %s after the cancel", took.Round(time.Millisecond))
	}
	st := queryRun(ctx, t, c, run.GetID())
	if st.Phase != spec.PhaseCancelled || st.Step == 0 || st.LastCkpt == nil || st.LastCkpt.Step != st.Step {
		t.Fatalf("the cancelled run: %s at step %d, last checkpoint %+v; want cancelled at a checkpoint in the chunk", st.Phase, st.Step, st.LastCkpt)
	}
	for _, node := range []string{"node-1", "node-2"} {
		b, _ := os.ReadFile(filepath.Join(l.LogDir, node+".log"))
		if !bytes.Contains(b, []byte("ending the chunk early, as the run asked")) || bytes.Contains(b, []byte("chunk cancelled")) {
			dumpLogs(t, l.LogDir)
			t.Fatalf("%s's log does not say the chunk ended early, or says it was cancelled", node)
		}
	}
	t.Logf("the run ended cancelled %s after the cancel, at step %d, its checkpoint there", took.Round(time.Millisecond), st.Step)
}

// TestControlsWhileARunWaitsForNodes: a run that waits for its first
// nodes (another run, paused, holds the only one) is paused by `cann-train
// pause --wait`, and holds at once without nodes (before, the pause waited
// for the nodes, up to node_wait); resumed, it waits again; rescaled to
// one node, it asks for one; when the other run is cancelled it takes
// the node — before a run that started waiting after it, which takes it
// once the waiter is cancelled in turn (a waiter that completed at once
// raced the check: the later run could have its node by then). Its
// history is the replay test's trainingrun_controls_while_acquiring.json,
// the Cluster's cluster_reserve.json (earlier: cluster_withdraw.json)
// (CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata).
func TestControlsWhileARunWaitsForNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, l, addr := startInProcessControl(ctx, t, t.TempDir(), "node-1")
	cli := cliAt(ctx, t, addr, l.LogDir)
	holder := startRun(ctx, t, c, workflows.RunInput{Spec: spec.RunSpec{Name: "holder", Nodes: 1, Steps: 1_000_000, ChunkSteps: 100}.WithDefaults()})
	untilStatus(ctx, t, c, holder.GetID(), l.LogDir, "the holder trains", func(st spec.RunStatus, live *spec.ChunkProgress) bool { return live != nil })
	if out := cli("pause", "holder", "--wait", "60s"); !strings.Contains(out, "paused at step") {
		t.Fatalf("pause holder: %q", out)
	}
	s := spec.RunSpec{Name: "waiter", Nodes: 2, MinNodes: 1, Steps: 1_000_000, ChunkSteps: 100, NodeWait: spec.Duration(10 * time.Minute)}.WithDefaults()
	run := startRun(ctx, t, c, workflows.RunInput{Spec: s})
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "waiting for nodes", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.HasPrefix(st.Detail, "waiting for 2 free node(s), or at least 1 until")
	})
	out := cli("pause", "waiter", "--wait", "30s")
	if !strings.Contains(out, "run/waiter: paused at step 0/1000000") {
		t.Fatalf("pause of a run waiting for nodes: %q", out)
	}
	if st := queryRun(ctx, t, c, run.GetID()); len(st.Nodes) != 0 || st.Detail != "paused at step 0 (cann-train resume waiter continues)" {
		t.Fatalf("paused while waiting: nodes %v, detail %q", st.Nodes, st.Detail)
	}
	cli("resume", "waiter")
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "waiting again", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.HasPrefix(st.Detail, "waiting for 2 free node(s)")
	})
	if out := cli("scale", "waiter", "1"); !strings.Contains(out, "0 → 1 node(s) now: it waits for its first nodes and asks for these instead") {
		t.Fatalf("scale of a run waiting for nodes: %q", out)
	}
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "waiting for 1", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.HasPrefix(st.Detail, "waiting for 1 free node(s) until")
	})
	// A second run waits behind it for the same node: first come, first
	// served (the SDK alone would wake the newest first).
	s2 := spec.RunSpec{Name: "later", Nodes: 1, Steps: 100, ChunkSteps: 100, NodeWait: spec.Duration(10 * time.Minute)}.WithDefaults()
	later := startRun(ctx, t, c, workflows.RunInput{Spec: s2})
	untilStatus(ctx, t, c, later.GetID(), l.LogDir, "the later run waits", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return st.Phase == spec.PhaseAcquiring && strings.HasPrefix(st.Detail, "waiting for 1 free node(s) until")
	})
	// Its status says why, as `cann-train nodes` does: who holds the node.
	// (The run says it acquires before the registry lists its acquire as
	// waiting: asked again until it does.)
	for out := cli("status", "later"); !strings.Contains(out, "\nwaiting      run/later waits for 1 node(s) since ") ||
		!strings.Contains(out, ": 1 held by run/holder (paused: `cann-train resume holder` or `cancel holder` frees them)\n"); out = cli("status", "later") {
		select {
		case <-ctx.Done():
			t.Fatalf("status of a run waiting for a node a paused run holds: want a waiting line naming the holder:\n%s", out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cli("cancel", "holder", "--wait", "60s")
	untilStatus(ctx, t, c, run.GetID(), l.LogDir, "the waiter takes the node", func(st spec.RunStatus, _ *spec.ChunkProgress) bool {
		return len(st.Nodes) > 0
	})
	if st := queryRun(ctx, t, c, later.GetID()); len(st.Nodes) != 0 || st.Phase != spec.PhaseAcquiring {
		t.Errorf("the later run is %s on %v when the earlier waiter took the node; want it still waiting", st.Phase, st.Nodes)
	}
	if out := cli("cancel", "waiter", "--wait", "60s"); !strings.Contains(out, "run/waiter: cancelled at step") {
		t.Fatalf("cancel waiter: %q", out)
	}
	if st := queryRun(ctx, t, c, run.GetID()); st.Phase != spec.PhaseCancelled || !slices.Equal(st.Nodes, []string{"node-1"}) {
		t.Errorf("the waiter ended %s on %v; want cancelled, having trained on node-1", st.Phase, st.Nodes)
	}
	if st := awaitRun(ctx, t, later, l.LogDir); st.Phase != spec.PhaseCompleted || !slices.Equal(st.Nodes, []string{"node-1"}) {
		t.Errorf("the later run ended %s on %v: %s", st.Phase, st.Nodes, st.Error)
	}
	recordHistory(t, fetchHistory(ctx, t, c, run.GetID()), "trainingrun_controls_while_acquiring.json")
	recordHistory(t, fetchHistory(ctx, t, c, spec.DefaultClusterID), "cluster_reserve.json")
}
