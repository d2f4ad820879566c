package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// TestResumeEndedRun: a run cancelled mid-way is continued by `cann-train
// run --resume` from its last checkpoint, on the real server with node
// processes, and ends bit-identical to a run never interrupted; its status
// says what it continued. Without a flag, a job named like the ended run
// is refused (its checkpoints are not silently trained over), and one that
// changes the model is refused naming the field. A run the server has
// forgotten (history deleted) is resumed from the newest checkpoint in the
// job's bucket (the node workers' default, as they registered it, for a
// job that names none), bit-identical too, the job checked against the one stored
// with the checkpoints.
func TestResumeEndedRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	const steps = 600
	// named: the job names the nodes' bucket; else the nodes' default
	// (the same bucket), which `run` learns from the registry — not this
	// host's default, where the CLI used to look.
	jobAt := func(name string, steps int64, hidden string, named bool) string {
		p := filepath.Join(dir, name+"-"+hidden+".yaml")
		y := fmt.Sprintf("name: %s\nmodel:\n  kind: mlp-mnist\n  hidden: [%s]\nnodes: 3\nsteps: %d\nchunk_steps: 50\nseed: 7\n",
			name, hidden, steps)
		if named {
			y += "checkpoint_url: file://" + filepath.Join(dir, "ckpt") + "\n"
		}
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	job := func(name string, steps int64, hidden string) string { return jobAt(name, steps, hidden, true) }
	cli := cliRun(ctx, addr)

	// The reference: the same job file under another name (run --name),
	// never interrupted.
	first := job("resume-me", steps, "128")
	if _, said, err := cli("run", "-f", first, "--name", "uninterrupted", "--wait"); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --name uninterrupted: %v\n%s", err, said)
	}
	clean, _, _, err := readProgress(ctx, c, spec.RunIDPrefix+"uninterrupted")
	if err != nil || clean.Phase != spec.PhaseCompleted || clean.Step != steps {
		t.Fatalf("run/uninterrupted (the job file's resume-me under --name): %s at %d: %v", clean.Phase, clean.Step, err)
	}

	// Started with more steps than it will train before the cancel: the
	// first run ends cancelled after its checkpoint at 200 or later.
	if out, said, err := cli("run", "-f", first); err != nil {
		t.Fatal(err)
	} else if out != "run/resume-me\n" || !strings.Contains(said, "follow it with `cann-train watch resume-me`") {
		// (stdout the ID alone, for scripts; stderr where to follow it)
		t.Errorf("run without --wait: stdout %q, stderr %q", out, said)
	}
	id := spec.RunIDPrefix + "resume-me"
	awaitCheckpoint(ctx, t, c, id, 200, l.LogDir)
	out, _, err := cli("cancel", "resume-me", "--wait", "60s")
	if err != nil {
		t.Fatal(err)
	}
	ended, _, _, _ := readProgress(ctx, c, id)
	if ended.LastCkpt != nil && !strings.Contains(out, fmt.Sprintf("%s: cann-train run -f JOB --name resume-me --resume continues it from step %d\n", id, ended.LastCkpt.Step)) {
		t.Errorf("cancel said %q; want how to continue the run", out)
	}
	if ended.Phase != spec.PhaseCancelled || ended.LastCkpt == nil || ended.LastCkpt.Step >= steps {
		t.Fatalf("the first run ended %s at step %d (checkpoint %+v); want cancelled with a checkpoint before the end", ended.Phase, ended.Step, ended.LastCkpt)
	}

	if _, _, err := cli("run", "-f", first); err == nil || !strings.Contains(err.Error(), "--resume continues from that checkpoint, --fresh deletes its checkpoints and starts over") {
		t.Errorf("the same job again without a flag: %v; want it refused, naming --resume and --fresh", err)
	}
	if _, _, err := cli("run", "-f", job("resume-me", steps, "64"), "--resume"); err == nil || !strings.Contains(err.Error(), "model.hidden [64] (the earlier run's: [128])") {
		t.Errorf("--resume with another model: %v; want it refused naming model.hidden", err)
	}
	// An upload that finished as the run ended, which its history never
	// recorded: the checkpoint this job reaches at a later step (the
	// uninterrupted run's, bit for bit), stored under the run's name
	// after it started. --resume continues from it, not from the
	// history's last.
	bucket := "file://" + filepath.Join(dir, "ckpt")
	late := lateUpload(ctx, t, bucket, "uninterrupted", "resume-me", ended.Step, steps)
	t.Logf("the run ended at step %d, its last checkpoint at %d; a later upload at %d", ended.Step, ended.LastCkpt.Step, late)
	_, said, err := cli("run", "-f", first, "--resume", "--wait")
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --resume: %v\n%s", err, said)
	}
	if strings.Contains(said, "knows only the checkpoint") {
		t.Errorf("run --resume could not list the earlier checkpoints: %q", said)
	}
	if want := fmt.Sprintf("resuming %s from its checkpoint at step %d (the earlier run ended cancelled at step %d)\n(%s holds it, written after the run started, past the last checkpoint its history records (step %d)",
		id, late, late, bucket, ended.LastCkpt.Step); !strings.Contains(said, want) {
		t.Errorf("run --resume said %q; want %q", said, want)
	}
	st, _, _, err := readProgress(ctx, c, id)
	if err != nil || st.Phase != spec.PhaseCompleted || st.Step != steps {
		t.Fatalf("the resumed run: %s at %d: %v", st.Phase, st.Step, err)
	}
	if len(st.Resumed) != 1 || st.Resumed[0].Phase != spec.PhaseCancelled || st.Resumed[0].FromStep != late || st.Resumed[0].Step != late {
		t.Errorf("resumed %+v; want the cancelled run continued from the later upload at %d", st.Resumed, late)
	}
	if st.Generation <= ended.Generation {
		t.Errorf("generation %d after the earlier run's %d: want the generations to go on", st.Generation, ended.Generation)
	}
	if st.WeightsSHA256 != clean.WeightsSHA256 {
		t.Errorf("resumed run's weights %s differ from the uninterrupted run's %s", st.WeightsSHA256, clean.WeightsSHA256)
	}
	text, _, err := cli("status", "resume-me")
	if err != nil || !strings.Contains(text, "resumed      from step "+fmt.Sprint(late)) {
		t.Errorf("status: %v\n%s", err, text)
	}
	recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_resumed.json")

	// A run the server has forgotten (its history deleted, as retention
	// does): --resume continues from the newest checkpoint in the job's
	// bucket, bit-identical too. Its job names no bucket: the nodes'
	// default, as they registered it, is the one looked in.
	lost := jobAt("forgotten", steps, "128", false)
	if _, _, err := cli("run", "-f", lost); err != nil {
		t.Fatal(err)
	}
	lid := spec.RunIDPrefix + "forgotten"
	awaitCheckpoint(ctx, t, c, lid, 200, l.LogDir)
	if _, _, err := cli("cancel", "forgotten", "--wait", "60s"); err != nil {
		t.Fatal(err)
	}
	lastAt := int64(0)
	if st, _, _, _ := readProgress(ctx, c, lid); st.LastCkpt != nil {
		lastAt = st.LastCkpt.Step
	}
	if _, err := c.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: lid}}); err != nil {
		t.Fatal(err)
	}
	for { // deletion is asynchronous (a second or two on the dev server)
		_, err := c.DescribeWorkflowExecution(ctx, lid, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s never deleted: %v", lid, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Its bucket still remembers it: a plain run of the name is refused.
	if _, _, err := cli("run", "-f", lost); err == nil || !strings.Contains(err.Error(), "the server knows no run named forgotten, but") ||
		!strings.Contains(err.Error(), "--resume continues from them, --fresh deletes them and starts over") {
		t.Errorf("a plain run over a forgotten run's checkpoints: %v; want it refused, naming --resume and --fresh", err)
	}
	// The job the run stored next to its checkpoints still speaks for it.
	if _, _, err := cli("run", "-f", jobAt("forgotten", steps, "64", false), "--resume"); err == nil || !strings.Contains(err.Error(), "model.hidden [64] (the earlier run's: [128])") {
		t.Errorf("--resume of a forgotten run with another model: %v; want it refused naming model.hidden", err)
	}
	_, said, err = cli("run", "-f", lost, "--resume", "--wait")
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --resume of a forgotten run: %v\n%s", err, said)
	}
	// (The newest may be later than the status' last: an upload that
	// finished as the cancel struck, never committed by the run.)
	fst, _, _, err := readProgress(ctx, c, lid)
	if err != nil || fst.Phase != spec.PhaseCompleted || len(fst.Resumed) != 1 || fst.Resumed[0].FromStep < lastAt || fst.WeightsSHA256 != clean.WeightsSHA256 {
		t.Fatalf("the forgotten run resumed: %s, resumed %+v (last committed checkpoint %d), weights %.12s (want %.12s): %v", fst.Phase, fst.Resumed, lastAt, fst.WeightsSHA256, clean.WeightsSHA256, err)
	}
	if want := fmt.Sprintf("resuming %s from the newest of its", lid); !strings.Contains(said, want) || !strings.Contains(said, fmt.Sprintf("at step %d", fst.Resumed[0].FromStep)) ||
		!strings.Contains(said, "the job stored with them agrees with this one") {
		t.Errorf("run --resume said %q; want %q, at step %d, the stored job checked", said, want, fst.Resumed[0].FromStep)
	}

	// --fresh over the completed run's checkpoints (up to 600) with a
	// shorter job: they are deleted first, and the new run's are its own.
	// (Which are kept depends on the step the cancel above ended at.)
	kept, err := earlierCheckpoints(ctx, bucket, "resume-me", math.MaxInt64)
	if err != nil || len(kept) == 0 || kept[len(kept)-1].Step != steps {
		t.Fatalf("checkpoints of the completed run: %v (%v); want some, the last at %d", stepsOf(kept), err, steps)
	}
	_, said, err = cli("run", "-f", job("resume-me", 200, "128"), "--fresh", "--wait")
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --fresh: %v\n%s", err, said)
	}
	if want := fmt.Sprintf("--fresh: deleted the %d checkpoint(s) of the earlier run of resume-me (steps %d–%d)", len(kept), kept[0].Step, steps); !strings.Contains(said, want) {
		t.Errorf("run --fresh said %q; want %q", said, want)
	}
	refs, err := earlierCheckpoints(ctx, bucket, "resume-me", math.MaxInt64)
	if got := stepsOf(refs); err != nil || !slices.Equal(got, []int64{50, 100, 150, 200}) {
		t.Errorf("checkpoints after run --fresh with 200 steps: %v (%v); want the new run's 50–200 only", got, err)
	}

	// The last checkpoint the history records, damaged in the bucket (its
	// manifest no longer JSON): --resume goes on from the newest readable
	// one before it, saying so. (Before, it resumed from the damaged one
	// and failed at once, or with a missing manifest blamed every node
	// for not reaching the bucket until its restarts ran out.)
	manifest := filepath.Join(dir, "ckpt", "runs", "resume-me", "ckpt", "000000000200", "manifest.json")
	if err := os.WriteFile(manifest, []byte(`{"format":`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, said, err = cli("run", "-f", job("resume-me", 250, "128"), "--resume", "--wait")
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --resume past a damaged last checkpoint: %v\n%s", err, said)
	}
	if want := fmt.Sprintf("resuming %s from its checkpoint at step 150 (the earlier run ended completed at step 200)\n"+
		"(its last checkpoint, at step 200, is not readable in %s: its manifest is missing or damaged", id, bucket); !strings.Contains(said, want) {
		t.Errorf("run --resume said %q; want %q", said, want)
	}
	if st, _, _, err := readProgress(ctx, c, id); err != nil || st.Phase != spec.PhaseCompleted || st.Step != 250 ||
		len(st.Resumed) == 0 || st.Resumed[len(st.Resumed)-1].FromStep != 150 {
		t.Errorf("resumed past the damaged checkpoint: %s at %d, resumed %+v: %v", st.Phase, st.Step, st.Resumed, err)
	}

	// A run that fails under run --wait -o json still prints its status
	// as JSON (a script reads why), then fails: 4 nodes asked of 3.
	four := filepath.Join(dir, "four.yaml")
	if err := os.WriteFile(four, []byte("name: four\nnodes: 4\nsteps: 100\nnode_wait: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js, _, err := cli("run", "-f", four, "--wait", "-o", "json")
	var sum Summary
	if err == nil || json.Unmarshal([]byte(js), &sum) != nil || sum.Status != spec.PhaseFailed || sum.Error == "" {
		t.Errorf("run --wait -o json of a failing run: %v; want its status as JSON, failed with its error\n%s", err, js)
	}
}

// lateUpload stores under run the checkpoint of ref, a run of the same
// job, at its first step past reached and before steps, as a node's
// upload that finished after the run's history ended would, and returns
// its step.
func lateUpload(ctx context.Context, t *testing.T, url, ref, run string, reached, steps int64) int64 {
	t.Helper()
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	refs, err := store.List(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(refs, func(r checkpoint.Ref) bool { return r.Step > reached && r.Step < steps })
	if i < 0 {
		t.Fatalf("run %s reached step %d: %s kept no checkpoint between it and %d (%v)", run, reached, ref, steps, refs)
	}
	payload, err := store.Load(ctx, refs[i])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.SaveIncremental(ctx, run, refs[i].Step, payload); err != nil {
		t.Fatal(err)
	}
	return refs[i].Step
}

func stepsOf(refs []spec.CheckpointRef) []int64 {
	out := make([]int64, len(refs))
	for i, r := range refs {
		out[i] = r.Step
	}
	return out
}
