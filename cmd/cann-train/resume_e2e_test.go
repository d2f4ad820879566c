package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestResumeEndedRun: a run cancelled mid-way is continued by `cann-train
// run --resume` from its last checkpoint, on the real server with node
// processes, and ends bit-identical to a run never interrupted; its status
// says what it continued. Without a flag, a job named like the ended run
// is refused (its checkpoints are not silently trained over), and one that
// changes the model is refused naming the field.
func TestResumeEndedRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir, "node-1", "node-2", "node-3")
	const steps = 600
	job := func(name string, steps int64, hidden string) string {
		p := filepath.Join(dir, name+"-"+hidden+".yaml")
		y := fmt.Sprintf("name: %s\nmodel:\n  kind: mlp-mnist\n  hidden: [%s]\nnodes: 3\nsteps: %d\nchunk_steps: 50\nseed: 7\n", name, hidden, steps)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cli := cliRun(ctx, addr)

	// The reference: the same job, never interrupted.
	ref, _ := spec.LoadFile(job("uninterrupted", steps, "128"))
	clean := awaitRun(ctx, t, startRun(ctx, t, c, workflows.RunInput{Spec: ref}), l.LogDir)

	// Started with more steps than it will train before the cancel: the
	// first run ends cancelled after its checkpoint at 200 or later.
	first := job("resume-me", steps, "128")
	if _, _, err := cli("run", "-f", first); err != nil {
		t.Fatal(err)
	}
	id := spec.RunIDPrefix + "resume-me"
	awaitCheckpoint(ctx, t, c, id, 200, l.LogDir)
	out, _, err := cli("cancel", "resume-me", "--wait", "60s")
	if err != nil {
		t.Fatal(err)
	}
	ended, _, _, _ := readProgress(ctx, c, id)
	if ended.LastCkpt != nil && !strings.Contains(out, fmt.Sprintf("%s: cann-train run -f JOB --resume continues it from step %d\n", id, ended.LastCkpt.Step)) {
		t.Errorf("cancel said %q; want how to continue the run", out)
	}
	if ended.Phase != spec.PhaseCancelled || ended.LastCkpt == nil || ended.LastCkpt.Step >= steps {
		t.Fatalf("the first run ended %s at step %d (checkpoint %+v); want cancelled with a checkpoint before the end", ended.Phase, ended.Step, ended.LastCkpt)
	}

	if _, _, err := cli("run", "-f", first); err == nil || !strings.Contains(err.Error(), "--resume continues from that checkpoint, --fresh starts over") {
		t.Errorf("the same job again without a flag: %v; want it refused, naming --resume and --fresh", err)
	}
	if _, _, err := cli("run", "-f", job("resume-me", steps, "64"), "--resume"); err == nil || !strings.Contains(err.Error(), "model.hidden [64] (the earlier run's: [128])") {
		t.Errorf("--resume with another model: %v; want it refused naming model.hidden", err)
	}
	_, said, err := cli("run", "-f", first, "--resume", "--wait")
	if err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("run --resume: %v\n%s", err, said)
	}
	if strings.Contains(said, "cannot be listed") {
		t.Errorf("run --resume could not list the earlier checkpoints: %q", said)
	}
	if want := "resuming " + id + " from its checkpoint at step " + fmt.Sprint(ended.LastCkpt.Step) + " (the earlier run ended cancelled"; !strings.Contains(said, want) {
		t.Errorf("run --resume said %q; want %q", said, want)
	}
	st, _, _, err := readProgress(ctx, c, id)
	if err != nil || st.Phase != spec.PhaseCompleted || st.Step != steps {
		t.Fatalf("the resumed run: %s at %d: %v", st.Phase, st.Step, err)
	}
	if len(st.Resumed) != 1 || st.Resumed[0].Phase != spec.PhaseCancelled || st.Resumed[0].FromStep != ended.LastCkpt.Step || st.Resumed[0].Step != ended.Step {
		t.Errorf("resumed %+v; want the cancelled run at %d continued from %d", st.Resumed, ended.Step, ended.LastCkpt.Step)
	}
	if st.Generation <= ended.Generation {
		t.Errorf("generation %d after the earlier run's %d: want the generations to go on", st.Generation, ended.Generation)
	}
	if st.WeightsSHA256 != clean.WeightsSHA256 {
		t.Errorf("resumed run's weights %s differ from the uninterrupted run's %s", st.WeightsSHA256, clean.WeightsSHA256)
	}
	text, _, err := cli("status", "resume-me")
	if err != nil || !strings.Contains(text, "resumed      from step "+fmt.Sprint(ended.LastCkpt.Step)) {
		t.Errorf("status: %v\n%s", err, text)
	}
	recordHistory(t, fetchHistory(ctx, t, c, id), "trainingrun_resumed.json")
}
