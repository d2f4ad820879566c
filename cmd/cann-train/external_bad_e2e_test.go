package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// TestExternalBadJobsFailClearly (issue 8, acceptance 3): a script that
// crashes on start, an entrypoint that does not exist and a missing
// workdir each end the run with an error that says what was wrong (the
// crash: the program that ran, and where its whole log is), within
// seconds, without retrying more than the job allows — a crash on start
// that repeats itself once is not retried again —, and leave no process
// behind. Plain shell scripts: no torch needed.
func TestExternalBadJobsFailClearly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		external string
		want     []string // in the run's error
		maxWall  time.Duration
	}{
		{"crash-on-start", `  entrypoint: [sh, -c, "echo cann-e2e-boom >&2; exit 3"]
  workdir: .`, []string{"exited with status 3", "cann-e2e-boom", "before any step (it ran sh = /",
			"the job failed the same way on two launches in a row, before any rank reported a step", "whole log: "}, 60 * time.Second},
		{"wrong-entrypoint", `  entrypoint: [/nonexistent/cann-e2e-trainer]
  workdir: .`, []string{"/nonexistent/cann-e2e-trainer"}, 30 * time.Second},
		{"missing-workdir", `  entrypoint: [sh, -c, "exit 0"]
  workdir: /nonexistent/cann-e2e-dir`, []string{"/nonexistent/cann-e2e-dir"}, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := filepath.Join(dir, "job.yaml")
			yaml := "name: bad-" + tc.name + "\nnodes: 2\nsteps: 10\nmax_restarts: 1\nheartbeat_timeout: 5s\nexternal:\n  launcher: torchrun\n  procs_per_node: 1\n" + tc.external + "\n"
			if err := os.WriteFile(job, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
			root.SetArgs([]string{"quickstart", "--port", "0", "--ui-port", "-1", "-o", "json", "--data-dir", filepath.Join(dir, "data"),
				"--log-level", "warn", "-f", job})
			start := time.Now()
			err := root.ExecuteContext(ctx)
			wall := time.Since(start)
			var sum Summary
			jerr := json.Unmarshal(out.Bytes(), &sum)
			if err == nil {
				t.Fatalf("the run succeeded:\n%s", out.String())
			}
			msg := err.Error() + " " + sum.Error
			if jerr == nil && sum.Status != spec.PhaseFailed {
				t.Errorf("status %s, want failed", sum.Status)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s\nstderr:\n%s", w, msg, errb.String())
				}
			}
			if wall > tc.maxWall {
				t.Errorf("took %v to fail, want under %v", wall, tc.maxWall)
			}
			if n := len(sum.Recoveries); n > 1 {
				t.Errorf("%d restarts, the job allows 1", n)
			}
			// No process of the job outlives the run.
			if o, _ := exec.Command("pgrep", "-f", "cann-e2e-").Output(); len(bytes.TrimSpace(o)) > 0 {
				t.Errorf("processes left behind: %s", o)
			}
		})
	}
}
