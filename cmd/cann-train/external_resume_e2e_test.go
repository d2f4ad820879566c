package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// TestExternalResumeEndedRun: an external job terminated after a
// checkpoint upload (`temporal workflow terminate`: no code of it runs
// again) is continued by `cann-train run --resume`: the script is launched
// from that checkpoint (it checks the restored state) and completes, and
// the status says it continued a terminated run.
func TestExternalResumeEndedRun(t *testing.T) {
	t.Parallel() // (it mostly waits: see TestMain)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 in PATH: skipping the external-job resume e2e test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, srv := startScriptCluster(ctx, t, dir, "node-1", "node-2")
	const name, steps = "ext-resume", 300
	job := scriptJob(t, dir, name, steps)
	cli := cliSaidAt(ctx, t, srv.FrontendAddr(), l.LogDir)
	cli("run", "-f", job)
	id := spec.RunIDPrefix + name
	awaitCheckpoint(ctx, t, c, id, 100, l.LogDir)
	// Terminated: it runs no more code (its nodes are freed when the next
	// run needs them, its processes stop at their next heartbeat).
	if err := c.TerminateWorkflow(ctx, id, "", "by the test"); err != nil {
		t.Fatal(err)
	}
	ended, _, _, _ := readProgress(ctx, c, id)
	if ended.LastCkpt == nil || ended.LastCkpt.Step >= steps {
		t.Fatalf("the first run ended %s at step %d (checkpoint %+v); want a checkpoint before the end", ended.Phase, ended.Step, ended.LastCkpt)
	}
	from := ended.LastCkpt.Step
	_, said := cli("run", "-f", job, "--resume", "--wait")
	if !strings.Contains(said, fmt.Sprintf("resuming %s from its checkpoint at step %d", id, from)) {
		t.Errorf("run --resume said %q", said)
	}
	st, _, _, err := readProgress(ctx, c, id)
	if err != nil || st.Phase != spec.PhaseCompleted || st.Step != steps || len(st.Resumed) != 1 || st.Resumed[0].FromStep != from || st.Resumed[0].Phase != "terminated" {
		t.Fatalf("the resumed run: %s at %d, resumed %+v: %v", st.Phase, st.Step, st.Resumed, err)
	}
	// Rank 0's launches: the first from step 1, the last from the
	// checkpoint on, to the end.
	reps := worldReports(t, filepath.Join(dir, "work", "node-1"), name)
	if len(reps) < 2 || len(reps[0]) == 0 || len(reps[len(reps)-1]) == 0 {
		t.Fatalf("rank-0 report files: %d launches", len(reps))
	}
	last := reps[len(reps)-1]
	if reps[0][0].Step != 1 || last[0].Step != from+1 || last[len(last)-1].Step != steps {
		t.Errorf("first launch from step %d, last %d..%d; want 1, then %d..%d", reps[0][0].Step, last[0].Step, last[len(last)-1].Step, from+1, steps)
	}
}

// scriptJob writes a job file for pauseScript on two nodes — name, steps,
// a checkpoint every 50, CANN_E2E_MARK set to dir (awaitNoProcesses) —
// in dir and returns its path.
func scriptJob(t *testing.T, dir, name string, steps int) string {
	t.Helper()
	job := filepath.Join(dir, "job.yaml")
	y := fmt.Sprintf("name: %s\nnodes: 2\nsteps: %d\ncheckpoint_every: 50\nheartbeat_timeout: 2s\nexternal:\n  entrypoint: [python3, train.py]\n  workdir: %s\n  env:\n    CANN_E2E_MARK: %s\n",
		name, steps, dir, dir)
	if err := os.WriteFile(job, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return job
}
