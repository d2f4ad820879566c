package activities

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cann-train/cann-train/spec"
)

// setQuiet sets the times after which a rank 0 without checkpoints is
// warned about, for the test.
func setQuiet(t *testing.T, floor, noSteps time.Duration) {
	f, s := quietFloor, quietNoSteps
	quietFloor, quietNoSteps = floor, noSteps
	t.Cleanup(func() { quietFloor, quietNoSteps = f, s })
}

// warningOf is the warning line the tail of process's log ends with ("":
// none).
func warningOf(l spec.NodeLogs, process string) string {
	for _, p := range l.Procs {
		if p.Process == process && len(p.Lines) > 0 {
			if w, ok := strings.CutPrefix(p.Lines[len(p.Lines)-1], quietWarningPrefix); ok {
				return w
			}
		}
	}
	return ""
}

// TestRunExternalWarnsWithoutCheckpoints: a rank 0 that goes on without
// committing a checkpoint — reporting steps twice the job's
// checkpoint_every (2) past the launch's start, or reporting none for
// quietNoSteps — is warned about in the node's log (once) and at the end
// of its log tail in the heartbeat, naming it, how long and how many
// steps it went without one, and saved(); once it says saved, the stretch
// starts anew. A rank 0 still within its checkpoint_every gets no
// warning, nor does any other rank.
func TestRunExternalWarnsWithoutCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   int
		noSteps time.Duration
		want    []string // in the warning ("" : none wanted)
		after   string   // in the warning once it said saved ("": none)
	}{
		{"steps past checkpoint_every", 5, time.Hour, []string{"rank 0 (rank-0 on node n1) has gone ",
			"it reported step 5, 5 steps since the launch began (at step 0) (the job's checkpoint_every is 2), and has not called cann_train.saved()",
			"call cann_train.saved(step) on rank 0"}, ""},
		{"no steps", 0, 0, []string{"rank 0 (rank-0 on node n1) has gone ",
			"it has neither reported a step (cann_train.report) nor called cann_train.saved() since the launch began (at step 0)",
			"call cann_train.saved(step) on rank 0"}, "since its last checkpoint, at step 5"},
		{"within checkpoint_every", 3, time.Hour, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setQuiet(t, 0, tc.noSteps)
			work := t.TempDir()
			script := `if [ "$RANK" = 0 ]; then
  i=1; while [ $i -le ` + strconv.Itoa(tc.steps) + ` ]; do echo "{\"event\":\"report\",\"step\":$i}" >> "$CANN_TRAIN_REPORT_FILE"; i=$((i+1)); done
fi
touch ready-$RANK
while [ ! -e go ]; do sleep 0.02; done
if [ "$RANK" = 0 ]; then
  echo w > "$CANN_TRAIN_CHECKPOINT_DIR/w"
  echo '{"event":"saved","step":5}' >> "$CANN_TRAIN_REPORT_FILE"
fi
while [ ! -e end ]; do sleep 0.02; done`
			n := externalNode(t, "n1", "file://"+filepath.Join(t.TempDir(), "bucket"))
			core, logged := observer.New(zap.WarnLevel)
			n.Logger = zap.New(core)
			in := externalInput("quiet", work, 1, "sh", "-c", script)
			var mu sync.Mutex
			var step int64
			tails := make(chan func() spec.NodeLogs, 1)
			done := make(chan error, 1)
			go func() {
				_, err := n.runExternal(context.Background(), in, externalHooks{
					progress: func(p spec.ChunkProgress) { mu.Lock(); step = p.Step; mu.Unlock() },
					saved:    func(spec.CheckpointSaved) error { return nil },
					logs:     func(f func() spec.NodeLogs) { tails <- f }})
				done <- err
			}()
			var tail func() spec.NodeLogs
			select {
			case tail = <-tails:
			case err := <-done:
				t.Fatalf("runExternal returned before handing over the log tail: %v", err)
			}
			waitFor(t, "the ranks' start", func() bool {
				_, e0 := os.Stat(filepath.Join(work, "ready-0"))
				_, e1 := os.Stat(filepath.Join(work, "ready-1"))
				return e0 == nil && e1 == nil
			})
			// Its reports read (the warning is set in the same poll).
			waitFor(t, "rank 0's steps", func() bool { mu.Lock(); defer mu.Unlock(); return step == int64(tc.steps) })
			if tc.want == nil {
				if w := warningOf(tail(), "rank-0"); w != "" {
					t.Errorf("warned %q; want no warning within checkpoint_every", w)
				}
			} else {
				waitFor(t, "the warning", func() bool { return warningOf(tail(), "rank-0") != "" })
				w := warningOf(tail(), "rank-0")
				for _, want := range tc.want {
					if !strings.Contains(w, want) {
						t.Errorf("warning %q; want %q in it", w, want)
					}
				}
				if w := warningOf(tail(), "rank-1"); w != "" {
					t.Errorf("rank 1's tail warns %q", w)
				}
				if got := logged.FilterMessageSnippet("no checkpoint committed").All(); len(got) != 1 ||
					!strings.Contains(got[0].Message, "rank 0 (rank-0 on node n1) has gone ") {
					t.Errorf("logged %+v; want one warning", got)
				}
			}
			if err := os.WriteFile(filepath.Join(work, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.after == "" {
				waitFor(t, "the warning to clear once rank 0 said saved", func() bool {
					_, err := os.Stat(filepath.Join(n.WorkDir, "runs", "quiet", "checkpoint", "w"))
					return err == nil && warningOf(tail(), "rank-0") == ""
				})
			} else {
				waitFor(t, "the warning of a new stretch", func() bool { return strings.Contains(warningOf(tail(), "rank-0"), tc.after) })
				if got := logged.FilterMessageSnippet("no checkpoint committed").Len(); got != 2 {
					t.Errorf("logged %d warnings; want one per stretch, 2", got)
				}
			}
			if err := os.WriteFile(filepath.Join(work, "end"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRunExternalStartFailureHint: a rank that fails before any step is
// told by how far it got. On a fresh launch it failed while starting
// (the program it ran is named: an import error's usual cause). A launch
// that restored a checkpoint runs a program that ran before: it says so
// and names the checkpoint, and, when the process read the restored step
// (cann_train.restored_step(), through the helper), that it got past its
// start to loading the checkpoint — not its imports.
func TestRunExternalStartFailureHint(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	bucket := "file://" + filepath.Join(t.TempDir(), "bucket")
	work := t.TempDir()
	// A first launch leaves a checkpoint of step 4 (its final upload).
	os.WriteFile(filepath.Join(work, "ok.sh"), []byte(`echo '{"event":"report","step":4}' >> "$CANN_TRAIN_REPORT_FILE"
echo w > "$CANN_TRAIN_CHECKPOINT_DIR/w"
`), 0o644)
	os.WriteFile(filepath.Join(work, "dies.py"), []byte(`
import sys
`+"import cann_train as ct\nif len(sys.argv) > 1:\n    ct.restored_step()\n"+`sys.exit("cannot load " + ct.checkpoint_dir())
`), 0o644)
	n := externalNode(t, "n1", bucket)
	res, err := n.runExternal(context.Background(), externalInput("hint", work, 1, "sh", "ok.sh"), externalHooks{progress: func(spec.ChunkProgress) {}})
	if err != nil || res.Checkpoint == nil || res.Checkpoint.Step != 4 {
		t.Fatalf("first launch: %+v, %v", res, err)
	}
	ckpt := filepath.Join(n.WorkDir, "runs", "hint", "checkpoint")
	for i, tc := range []struct {
		name    string
		restore bool
		argv    []string
		want    string
		notWant string
	}{
		{"a fresh launch", false, []string{py, "dies.py"}, ", before any step (it ran " + py + ")", "restored"},
		{"a restore, the step not read", true, []string{py, "dies.py"},
			", before any step, in a launch that restored the checkpoint of step 4 into " + ckpt + ": the run's earlier launches ran " +
				"this job up to that checkpoint; this process failed before it read the restored step (cann_train.restored_step()) — " +
				"while starting on this node (it ran " + py + ") or loading the checkpoint", "after it read"},
		{"a restore, the step read", true, []string{py, "dies.py", "read"},
			", before any step, after it read the restored step 4 (cann_train.restored_step()): it got past its start and failed " +
				"loading the checkpoint restored into " + ckpt + ", or on the way to its first step — not at its imports (it ran " + py + ")", "before it read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := externalInput("hint", work, 1, tc.argv...)
			in.Session = "run/hint/g2/e" + strconv.Itoa(i+2)
			if tc.restore {
				in.Restore = res.Checkpoint
			}
			_, err := n.runExternal(context.Background(), in, externalHooks{progress: func(spec.ChunkProgress) {}})
			var ae *temporal.ApplicationError
			var d spec.RankExit
			if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeRankExited || ae.Details(&d) != nil {
				t.Fatalf("runExternal: %v; want RankExited", err)
			}
			if !d.NoStep || !strings.Contains(ae.Message(), tc.want) || strings.Contains(ae.Message(), tc.notWant) ||
				!strings.Contains(ae.Message(), "cannot load") {
				t.Errorf("message %q (no step %v); want %q in it, not %q", ae.Message(), d.NoStep, tc.want, tc.notWant)
			}
		})
	}
}
