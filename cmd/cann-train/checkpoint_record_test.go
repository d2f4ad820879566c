package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// The checkpoint commands ask Temporal what a run's history records — its
// last checkpoint, its bucket — and act on it: gc never deletes the run's
// last checkpoint, nor counts those above it; verify reports the recorded
// last when it is missing or another; ls, verify and gc read the run's
// bucket even before its first checkpoint commits, and say on stderr when
// Temporal could not tell. These tests run the CLI in-process against a
// Temporal dev server whose TrainingRun is a stand-in answering the status
// query with what each test sets (no nodes, no training), or against no
// Temporal at all.

// fakeRuns is a Temporal dev server with a worker on the control task
// queue whose TrainingRun workflow answers the status query with the
// status its test gave the run's name, and ends at once (ended runs) or
// never (live ones).
type fakeRuns struct {
	addr   string
	c      client.Client
	mu     sync.Mutex
	status map[string]fakeRun
}

type fakeRun struct {
	st   spec.RunStatus
	live bool
}

func startFakeRuns(ctx context.Context, t *testing.T) *fakeRuns {
	t.Helper()
	srv, c := startServerClient(ctx, t)
	f := &fakeRuns{addr: srv.FrontendAddr(), c: c, status: map[string]fakeRun{}}
	w := worker.New(c, spec.ControlTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in workflows.RunInput) (spec.RunStatus, error) {
		f.mu.Lock()
		r := f.status[in.Spec.Name]
		f.mu.Unlock()
		if err := workflow.SetQueryHandler(ctx, spec.QueryStatus, func() (spec.RunStatus, error) { return r.st, nil }); err != nil {
			return r.st, err
		}
		if r.live {
			workflow.GetSignalChannel(ctx, "end").Receive(ctx, nil)
		}
		return r.st, nil
	}, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return f
}

// start starts run in.Spec.Name, whose status query answers st (RunID and
// Phase filled in), and waits until it has ended unless live.
func (f *fakeRuns) start(ctx context.Context, t *testing.T, in workflows.RunInput, st spec.RunStatus, live bool) {
	t.Helper()
	id := spec.RunIDPrefix + in.Spec.Name
	st.RunID = id
	if st.Phase == "" {
		st.Phase = spec.PhaseCompleted
		if live {
			st.Phase = spec.PhaseTraining
		}
	}
	f.mu.Lock()
	f.status[in.Spec.Name] = fakeRun{st: st, live: live}
	f.mu.Unlock()
	run, err := f.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: spec.ControlTaskQueue}, spec.WorkflowTrainingRun, in)
	if err != nil {
		t.Fatal(err)
	}
	if live {
		t.Cleanup(func() { _ = f.c.TerminateWorkflow(context.Background(), id, "", "test over") })
		return
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// saveSteps saves run's checkpoints at steps into the bucket at url, each
// an external job's checkpoint directory (which verify unpacks), and
// returns them by step.
func saveSteps(t *testing.T, url, run string, steps ...int64) map[int64]spec.CheckpointRef {
	t.Helper()
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	out := map[int64]spec.CheckpointRef{}
	for _, step := range steps {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model.pt"), fmt.Appendf(nil, "%s at %d", run, step), 0o644); err != nil {
			t.Fatal(err)
		}
		packed, _, err := launch.PackDir(dir, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		ref, _, err := store.SaveIncremental(ctx, run, step, packed)
		if err != nil {
			t.Fatal(err)
		}
		out[step] = activities.FromStoreRef(url, ref)
	}
	return out
}

// bucketSteps are the steps of run's checkpoints in the bucket at url.
func bucketSteps(t *testing.T, url, run string) []int64 {
	t.Helper()
	store, err := checkpoint.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	refs, err := store.List(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, r := range refs {
		out = append(out, r.Step)
	}
	return out
}

// newBucket is the URL of a file:// bucket in a directory of its own, and
// the directory.
func newBucket(t *testing.T) (string, string) {
	dir := t.TempDir()
	return "file://" + dir, dir
}

// offline is the CLI with a Temporal that cannot be reached (nothing
// listens on port 1).
func offline(ctx context.Context) func(args ...string) (string, string, error) {
	return cliRun(ctx, "127.0.0.1:1")
}

// TestCheckpointCommandsAskTemporal: with a Temporal that records the
// run, gc counts from the run's last checkpoint and keeps it, verify
// checks it is there and the same, ls/verify/gc find the bucket of a run
// with no committed checkpoint yet from its job, and gc refuses a short
// grace only while the run is live.
func TestCheckpointCommandsAskTemporal(t *testing.T) {
	t.Setenv("CANN_TRAIN_HOME", t.TempDir()) // (the default bucket: empty)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := startFakeRuns(ctx, t)
	cli := cliRun(ctx, f.addr)
	job := func(name, url string) workflows.RunInput {
		return workflows.RunInput{Spec: spec.RunSpec{Name: name, Nodes: 1, Steps: 10000, CheckpointURL: url}}
	}
	ended := func(name, url string, last *spec.CheckpointRef) {
		f.start(ctx, t, job(name, url), spec.RunStatus{LastCkpt: last}, false)
	}

	// gc: the run's last is at 4000; 5000 and 6000 are another
	// timeline's (a run of the name that went further, a stale upload).
	t.Run("gc counts from the run's last", func(t *testing.T) {
		for i, tc := range []struct {
			name      string
			args      []string
			dropLast  bool    // the last's manifest is gone
			want      []int64 // left in the bucket
			left      bool    // says it left 5000 and 6000 alone
			stderr    string
			noRecord  bool // Temporal knows no run of the name
			elsewhere bool // the history records its last in another bucket
			badAbove  bool // 6000's manifest does not validate (it still names its chunks)
			out       []string
		}{
			{name: "keep-last 1", args: []string{"--keep-last", "1"}, want: []int64{4000, 5000, 6000}, left: true},
			{name: "keep-last 2 every 2000", args: []string{"--keep-last", "2", "--keep-every", "2000"}, want: []int64{2000, 3000, 4000, 5000, 6000}, left: true},
			// Its chunks stay: a manifest restored later names them.
			{name: "last's manifest missing", args: []string{"--keep-last", "1"}, dropLast: true, want: []int64{3000, 5000, 6000}, left: true,
				stderr: "last checkpoint (step 4000) is not in",
				out:    []string{"chunks: none deleted: run/gc-2's last checkpoint (step 4000), as its history records it, has no manifest in "}},
			// Without the run's record retention counts every one (it
			// says so): what it did before.
			{name: "run unknown", args: []string{"--keep-last", "1"}, noRecord: true, want: []int64{6000},
				stderr: "could not check which checkpoint is run/gc-3's last (Temporal knows no run/gc-3): retention counts every checkpoint"},
			{name: "last in another bucket", args: []string{"--keep-last", "1"}, elsewhere: true, want: []int64{6000},
				stderr: "could not check which checkpoint is run/gc-4's last (its history records it at step 4000 in file:///elsewhere, not in file://"},
			// An unreadable manifest above the last is said to be one,
			// not another timeline's.
			{name: "unreadable above the last", args: []string{"--keep-last", "1"}, badAbove: true, want: []int64{4000, 5000, 6000},
				out: []string{"left     step 5000", "left     step 6000  runs/gc-5/ckpt/000000006000/manifest.json: unreadable: unsupported manifest version 99",
					"left the 1 checkpoint(s) above run/gc-5's last (step 4000", "another timeline's",
					"left the 1 checkpoint(s) whose manifest does not read alone, neither counted nor deleted: `cann-train checkpoint verify gc-5` names them"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := fmt.Sprintf("gc-%d", i)
				url, dir := newBucket(t)
				refs := saveSteps(t, url, name, 1000, 2000, 3000, 4000, 5000, 6000)
				chunks := ageChunks(t, dir, name) // (old enough to go)
				if tc.badAbove {
					path := filepath.Join(dir, filepath.FromSlash(refs[6000].Key))
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"version": 2`, `"version": 99`, 1)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				last := refs[4000]
				if tc.elsewhere {
					last.URL = "file:///elsewhere"
				}
				if !tc.noRecord {
					ended(name, "", &last)
				}
				if tc.dropLast {
					if err := os.Remove(strings.TrimPrefix(url, "file://") + "/" + last.Key); err != nil {
						t.Fatal(err)
					}
				}
				args := append([]string{"checkpoint", "gc", name, "--url", url}, tc.args...)
				out, errOut, err := cli(args...)
				t.Logf("gc:\n%s%s", out, errOut)
				if err != nil {
					t.Fatalf("gc: %v\n%s%s", err, out, errOut)
				}
				if got := bucketSteps(t, url, name); !slices.Equal(got, tc.want) {
					t.Errorf("after gc the bucket holds %v; want %v\n%s%s", got, tc.want, out, errOut)
				}
				saidLeft := strings.Contains(out, "left     step 5000") && strings.Contains(out, "left     step 6000") &&
					strings.Contains(out, fmt.Sprintf("left the 2 checkpoint(s) above run/%s's last (step 4000", name))
				if saidLeft != tc.left {
					t.Errorf("gc says it left 5000 and 6000 alone: %v, want %v\n%s", saidLeft, tc.left, out)
				}
				if !strings.Contains(errOut, tc.stderr) {
					t.Errorf("gc's stderr lacks %q:\n%s", tc.stderr, errOut)
				}
				for _, want := range tc.out {
					if !strings.Contains(out, want) {
						t.Errorf("gc's stdout lacks %q:\n%s", want, out)
					}
				}
				if n := countChunks(t, dir, name); tc.dropLast != (n == chunks) {
					t.Errorf("%d chunk files before gc, %d after; want them all kept: %v", chunks, n, tc.dropLast)
				}
			})
		}
		// -o json names the recorded last and those left above it.
		url, _ := newBucket(t)
		refs := saveSteps(t, url, "gc-json", 1000, 2000, 3000)
		last := refs[2000]
		ended("gc-json", url, &last)
		js, errOut, err := cli("checkpoint", "gc", "gc-json", "--keep-last", "1", "-o", "json")
		var res struct {
			Deleted   []checkpoint.Ref `json:"deleted_checkpoints"`
			Kept      int              `json:"kept_checkpoints"`
			LastStep  int64            `json:"recorded_last_step"`
			AboveLast []checkpoint.Ref `json:"left_above_last"`
		}
		if err != nil || json.Unmarshal([]byte(js), &res) != nil || len(res.Deleted) != 1 || res.Deleted[0].Step != 1000 || res.Kept != 2 ||
			res.LastStep != 2000 || len(res.AboveLast) != 1 || res.AboveLast[0].Step != 3000 {
			t.Errorf("gc -o json: %v\n%s%s", err, js, errOut)
		}
	})

	t.Run("verify checks the recorded last", func(t *testing.T) {
		for i, tc := range []struct {
			name   string
			saved  []int64
			last   int64  // the recorded last's step
			sha    string // its recorded sha256, if not the saved one's
			bad    string // the line verify reports it with; "": all ok
			failed string // the error; "": none
		}{
			{name: "there", saved: []int64{1000, 2000, 3000}, last: 3000},
			{name: "manifest missing", saved: []int64{1000, 2000, 3000}, last: 4000,
				bad: "MISSING  step 4000  runs/vr-1/ckpt/000000004000/manifest.json: run/vr-1's last checkpoint as its history records it", failed: "1 of 4 checkpoint(s) bad"},
			{name: "none at all", last: 4000,
				bad: "MISSING  step 4000  runs/vr-2/ckpt/000000004000/manifest.json", failed: "1 of 1 checkpoint(s) bad"},
			{name: "another", saved: []int64{1000, 2000, 3000}, last: 3000, sha: strings.Repeat("ab", 32),
				bad: "MISMATCH step 3000  runs/vr-3/ckpt/000000003000/manifest.json: sha256 ", failed: "1 of 3 checkpoint(s) bad"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := fmt.Sprintf("vr-%d", i)
				url, _ := newBucket(t)
				refs := saveSteps(t, url, name, tc.saved...)
				last, ok := refs[tc.last]
				if !ok { // (the one its history records, gone)
					last = saveSteps(t, "file://"+t.TempDir(), name, tc.last)[tc.last]
					last.URL = url
				}
				if tc.sha != "" {
					last.SHA256 = tc.sha
				}
				ended(name, url, &last)
				out, errOut, err := cli("checkpoint", "verify", name)
				t.Logf("verify: %v\n%s%s", err, out, errOut)
				if tc.failed == "" {
					if err != nil || strings.Count(out, "ok ") != len(tc.saved) {
						t.Fatalf("verify: %v\n%s%s", err, out, errOut)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.failed) || !strings.Contains(out, tc.bad) {
					t.Fatalf("verify: %v\n%s%s; want %q reported, %q", err, out, errOut, tc.bad, tc.failed)
				}
			})
		}
	})

	// A run that has committed no checkpoint yet: its status names no
	// bucket, its job does (or the run it resumed did).
	t.Run("bucket of a run with no committed checkpoint", func(t *testing.T) {
		url, _ := newBucket(t)
		saveSteps(t, url, "b-job", 3000)     // an upload not committed yet
		saveSteps(t, url, "b-resumed", 3000) // the resumed run's last
		f.start(ctx, t, job("b-job", url), spec.RunStatus{}, true)
		in := job("b-resumed", "")
		in.Resume = &spec.RunStatus{LastCkpt: &spec.CheckpointRef{URL: url, Run: "b-resumed", Step: 3000}}
		f.start(ctx, t, in, spec.RunStatus{}, true)
		f.start(ctx, t, job("b-nodes", ""), spec.RunStatus{}, true)
		def := "file://" + filepath.Join(os.Getenv("CANN_TRAIN_HOME"), "checkpoints")
		for _, tc := range []struct {
			run, stderr string
			listed      bool // ls lists step 3000
		}{
			{"b-job", "bucket " + url + " (run/b-job's job: it has committed no checkpoint yet; --url overrides)", true},
			{"b-resumed", "bucket " + url + " (run/b-resumed's job: it has committed no checkpoint yet", true},
			{"b-nodes", "run/b-nodes has committed no checkpoint yet, and its job names no checkpoint_url: its nodes write to their workers' --checkpoint-url, " +
				"which Temporal does not know; reading " + def + " (--url names the bucket; a quickstart's nodes write to " +
				"file://" + filepath.Join(os.Getenv("CANN_TRAIN_HOME"), "quickstart", "checkpoints") + ")", false},
			{"b-unknown", "Temporal knows no run/b-unknown; reading " + def, false},
		} {
			// (The default bucket does not exist: ls says so.)
			out, errOut, err := cli("checkpoint", "ls", tc.run)
			failed := err != nil && strings.Contains(err.Error(), "bucket "+def+" does not exist (no directory ")
			if failed == tc.listed || strings.Contains(out, "3000 ") != tc.listed || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("ls %s: %v\n%s%s\nwant step 3000 listed: %v, stderr saying %q", tc.run, err, out, errOut, tc.listed, tc.stderr)
			}
		}
		if _, err := os.Stat(strings.TrimPrefix(def, "file://")); !os.IsNotExist(err) {
			t.Errorf("ls created the default bucket %s: %v", def, err)
		}
	})

	t.Run("grace while live", func(t *testing.T) {
		url, _ := newBucket(t)
		saveSteps(t, url, "g-live", 1000, 2000)
		saveSteps(t, url, "g-ended", 1000, 2000)
		f.start(ctx, t, job("g-live", url), spec.RunStatus{}, true)
		ended("g-ended", url, nil)
		for _, tc := range []struct {
			run, grace, refused string
		}{
			{"g-live", "0", "--grace 0: run/g-live is still running"},
			{"g-live", "1ns", "--grace 1ns: run/g-live is still running"},
			{"g-live", "1s", "--grace 1s: run/g-live is still running, and a checkpoint it is saving may rely on chunks no manifest names yet for up to half the grace; " +
				"keep --grace 2m0s or more"},
			{"g-live", "1m59s", "--grace 1m59s: run/g-live is still running"},
			{"g-live", "2m", ""},
			{"g-ended", "0", ""},
			{"g-ended", "1ns", ""},
		} {
			out, errOut, err := cli("checkpoint", "gc", tc.run, "--grace", tc.grace, "--keep-last", "2")
			if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
				t.Errorf("gc %s --grace %s: %v\n%s%s; want refused: %q", tc.run, tc.grace, err, out, errOut, tc.refused)
			}
		}
	})
}

// TestCheckpointCommandsWithoutTemporal: a Temporal that cannot be
// reached is said, on stderr, by ls (which bucket it reads instead),
// verify (the recorded last checkpoint is not checked) and gc (retention
// counts every checkpoint); gc refuses every grace under minLiveGrace,
// suggesting no shorter one.
func TestCheckpointCommandsWithoutTemporal(t *testing.T) {
	t.Setenv("CANN_TRAIN_HOME", t.TempDir())
	ctx := context.Background()
	cli := offline(ctx)
	url, _ := newBucket(t)
	saveSteps(t, url, "off", 1000, 2000, 3000)
	def := "file://" + filepath.Join(os.Getenv("CANN_TRAIN_HOME"), "checkpoints")

	// (The default bucket does not exist here: ls says so, and does not
	// create it.)
	_, errOut, err := cli("checkpoint", "ls", "off")
	if err == nil || !strings.Contains(err.Error(), "bucket "+def+" does not exist") ||
		!strings.Contains(errOut, "could not ask Temporal for run off's bucket: ") || !strings.Contains(errOut, "; reading "+def+" (--url names the bucket)") {
		t.Errorf("ls without Temporal: %v\n%s", err, errOut)
	}
	if _, err := os.Stat(strings.TrimPrefix(def, "file://")); !os.IsNotExist(err) {
		t.Errorf("ls created the default bucket %s: %v", def, err)
	}
	out, errOut, err := cli("checkpoint", "verify", "off", "--url", url)
	if err != nil || strings.Count(out, "ok ") != 3 || !strings.Contains(errOut, "run/off's recorded last checkpoint was not checked (Temporal could not be asked: ") {
		t.Errorf("verify without Temporal: %v\n%s%s", err, out, errOut)
	}
	for _, grace := range []string{"0", "1ns", "1s", "1m0s"} {
		_, _, err := cli("checkpoint", "gc", "off", "--url", url, "--grace", grace)
		if err == nil || !strings.Contains(err.Error(), "--grace "+grace+": could not ask Temporal whether run/off still runs") ||
			!strings.Contains(err.Error(), "keep --grace 2m0s or more") || strings.Contains(err.Error(), "1s spares") {
			t.Errorf("gc --grace %s without Temporal: %v; want it refused, asking for 2m0s or more", grace, err)
		}
	}
	if got := bucketSteps(t, url, "off"); len(got) != 3 {
		t.Fatalf("refused gcs left %v", got)
	}
	out, errOut, err = cli("checkpoint", "gc", "off", "--url", url, "--grace", "2m", "--keep-last", "1")
	if err != nil || !strings.Contains(errOut, "could not check which checkpoint is run/off's last (Temporal could not be asked: ") ||
		!strings.Contains(errOut, "retention counts every checkpoint in "+url) || !slices.Equal(bucketSteps(t, url, "off"), []int64{3000}) {
		t.Errorf("gc --grace 2m without Temporal: %v\n%s%s", err, out, errOut)
	}
}

// TestCheckpointGCUndecodableManifest: a manifest of the run that does not
// decode stops gc before it deletes a chunk, naming the manifest and what
// to do; the chunks of the checkpoint it was stay.
func TestCheckpointGCUndecodableManifest(t *testing.T) {
	ctx := context.Background()
	url, dir := newBucket(t)
	refs := saveSteps(t, url, "gm", 1000, 2000, 3000)
	chunks := filepath.Join(dir, "runs", "gm", "chunks")
	ago := time.Now().Add(-3 * time.Hour) // (old enough to go)
	if err := filepath.WalkDir(chunks, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, ago, ago)
	}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(chunks)
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, filepath.FromSlash(refs[3000].Key))
	good, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := offline(ctx)("checkpoint", "gc", "gm", "--url", url, "--keep-last", "1")
	if err == nil || !strings.Contains(err.Error(), "corrupt "+refs[3000].Key+": manifest is not valid JSON") ||
		!strings.Contains(err.Error(), "no chunk deleted") || !strings.Contains(err.Error(), "`cann-train checkpoint verify gm` names that manifest: restore it, or delete it") {
		t.Fatalf("gc with a truncated manifest: %v\n%s%s", err, out, errOut)
	}
	gcErr := err
	after, err := os.ReadDir(chunks)
	if err != nil || len(after) != len(before) {
		t.Fatalf("%d chunk files before gc, %d after (%v)", len(before), len(after), err)
	}
	// Refused before retention: no checkpoint deleted either (gc used to
	// delete 1000 and 2000, then stop at the manifest).
	if got := bucketSteps(t, url, "gm"); !slices.Equal(got, []int64{1000, 2000, 3000}) || !strings.Contains(gcErr.Error(), "; nothing deleted") || out != "" {
		t.Fatalf("the refused gc left checkpoints %v and said %q (%v); want all three, nothing deleted", got, out, gcErr)
	}
	// Restored, gc collects what the deleted checkpoints left.
	if err := os.WriteFile(manifest, good, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = offline(ctx)("checkpoint", "gc", "gm", "--url", url, "--keep-last", "1")
	if err != nil || strings.Contains(out, " 0 deleted (") {
		t.Fatalf("gc with the manifest restored: %v\n%s%s", err, out, errOut)
	}
	if out, _, err := offline(ctx)("checkpoint", "verify", "gm", "--url", url); err != nil {
		t.Fatalf("verify after gc: %v\n%s", err, out)
	}
}

// TestResumeFromBucketNamesUnreadable: --resume of a run the server knows
// none of continues from the newest readable checkpoint in its bucket and
// names the newer ones it skipped for an unreadable manifest; with none
// readable it says which do not read.
func TestResumeFromBucketNamesUnreadable(t *testing.T) {
	ctx := context.Background()
	url, dir := newBucket(t)
	refs := saveSteps(t, url, "rb", 1000, 2000, 3000, 4000, 5000)
	for _, step := range []int64{1000, 4000, 5000} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(refs[step].Key)), []byte(`{"format":`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := workflows.RunInput{Spec: spec.RunSpec{Name: "rb", Nodes: 1, Steps: 10000, CheckpointURL: url}}
	var say strings.Builder
	got, err := runOptions{resume: true}.resumeFromBucket(ctx, in, &say)
	if err != nil || got.Resume == nil || got.Resume.LastCkpt.Step != 3000 || len(got.ResumeCheckpoints) != 2 {
		t.Fatalf("resume from the bucket: %+v, %v\n%s", got.Resume, err, say.String())
	}
	if want := "(its newer checkpoint(s) at step(s) 4000, 5000 are not readable in " + url +
		": the manifest is damaged — `cann-train checkpoint verify rb` says which; the newest readable one is at step 3000)"; !strings.Contains(say.String(), want) {
		t.Errorf("resume said:\n%s\nwant %q", say.String(), want)
	}
	if strings.Contains(say.String(), "step(s) 1000") {
		t.Errorf("resume names step 1000, older than where it resumes:\n%s", say.String())
	}
	// None readable.
	for _, step := range []int64{2000, 3000} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(refs[step].Key)), []byte(`{"format":`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	say.Reset()
	if _, err := (runOptions{resume: true}).resumeFromBucket(ctx, in, &say); err == nil ||
		!strings.Contains(err.Error(), "holds no readable checkpoint of it: the manifest at step(s) 1000, 2000, 3000, 4000, 5000 does not read") {
		t.Errorf("resume with no readable checkpoint: %v", err)
	}
}

// ageChunks makes run's chunks in the file:// bucket in dir three hours
// old (old enough for gc to collect) and returns how many there are.
func ageChunks(t *testing.T, dir, run string) int {
	t.Helper()
	ago := time.Now().Add(-3 * time.Hour)
	if err := filepath.WalkDir(filepath.Join(dir, "runs", run, "chunks"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, ago, ago)
	}); err != nil {
		t.Fatal(err)
	}
	return countChunks(t, dir, run)
}

// countChunks is how many chunk files run has in the file:// bucket in dir.
func countChunks(t *testing.T, dir, run string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "runs", run, "chunks"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".attrs") {
			n++
		}
	}
	return n
}

// TestResumeFromBucketMasksThePassword: `run --resume`'s messages name
// the bucket with the password in its URL masked.
func TestResumeFromBucketMasksThePassword(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	url := "s3://ckpt?endpoint=http://u:secret@" + closed + "&region=us-east-1&use_path_style=true&max_attempts=1"
	in := workflows.RunInput{Spec: spec.RunSpec{Name: "masked", Nodes: 1, Steps: 100, CheckpointURL: url}}
	var say strings.Builder
	_, err = runOptions{resume: true}.resumeFromBucket(t.Context(), in, &say)
	if err == nil || strings.Contains(err.Error()+say.String(), "secret") || !strings.Contains(err.Error(), "xxxxx") {
		t.Errorf("--resume from an unreachable bucket: %v\n%s\nwant it named, its password masked", err, say.String())
	}
}
