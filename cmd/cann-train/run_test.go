package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

func TestRunRejectsBadJobFile(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // all must appear in the error
	}{
		{"unknown field", "name: a\nnodes: 2\nlearnig_rate: 0.1\n", []string{"line 3", "learnig_rate", "unknown field"}},
		{"wrong type", "name: a\nnodes: three\n", []string{"line 2", "nodes"}},
		{"impossible value", "name: a\nnodes: 0\nsteps: 10\nbatch_per_rank: -1\n", []string{"line 2", "nodes", "line 4", "batch_per_rank"}},
		{"bad checkpoint url", "name: a\ncheckpoint_url: /tmp/x\n", []string{"line 2", "checkpoint_url", "not a bucket URL"}},
		{"unknown storage scheme", "name: a\nnodes: 2\ncheckpoint_url: s4://ckpt\n", []string{"line 3", "checkpoint_url", `no storage driver for "s4"`}},
		{"file URL with two slashes", "name: a\ncheckpoint_url: file://ckpt/a\n", []string{"line 2", "checkpoint_url", `names host "ckpt"`, "file:///data/ckpt"}},
		{"memory bucket", "name: a\nnodes: 2\ncheckpoint_url: mem://\n", []string{"line 3", "checkpoint_url", "one process's memory"}},
		{"not yaml", "name: [\n", []string{"bad.yaml"}},
		{"bad --name", "name: a\nnodes: 2\n", []string{"--name", "name", `"run 2": use letters, digits`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
			// An address nothing listens on: validation must fail before
			// any connection, so no workflow can start.
			args := []string{"run", "-f", path, "--address", "127.0.0.1:1"}
			if tc.name == "bad --name" {
				args = append(args, "--name", "run 2")
			}
			root.SetArgs(args)
			err := root.Execute()
			if err == nil {
				t.Fatal("bad job file accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "dial") {
				t.Errorf("validation should fail before dialling Temporal: %v", err)
			}
		})
	}
}

func TestUnknownOutputFormatListsAllowed(t *testing.T) {
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"status", "x", "-o", "yaml"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "text") || !strings.Contains(err.Error(), "json") {
		t.Fatalf("want an error listing the formats, got %v", err)
	}
}

// TestStoredJob: the job a run stored next to its checkpoints is read
// back; none is checkpoint.ErrNotFound (resumed unchecked); a garbled or
// another run's job is an error naming the key.
func TestStoredJob(t *testing.T) {
	dir := t.TempDir()
	url := "file://" + dir
	ctx := t.Context()
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	good, _ := json.Marshal(spec.RunSpec{Name: "a", Nodes: 3, Seed: 7}.WithDefaults())
	for _, tc := range []struct {
		name, run, body, want string
	}{
		{"stored", "a", string(good), ""},
		{"none", "none", "", "checkpoint not found"},
		{"garbled", "b", "{\"name\": \"b\", \"nodes\": ", "runs/b/job.json: unexpected end of JSON input"},
		{"another run's", "c", string(good), `runs/c/job.json names run "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.body != "" {
				if err := store.WriteBlob(ctx, spec.JobKey(tc.run), []byte(tc.body), "application/json"); err != nil {
					t.Fatal(err)
				}
			}
			s, err := storedJob(ctx, url, tc.run)
			switch {
			case tc.want == "" && (err != nil || s.Seed != 7 || s.Nodes != 3):
				t.Errorf("storedJob = %+v, %v; want the stored job", s, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("storedJob: %v; want %q", err, tc.want)
			}
		})
	}
	if _, err := storedJob(ctx, url, "none"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("no job: %v; want checkpoint.ErrNotFound", err)
	}
}

// TestMixedWarning: a job without a pin is warned of before it starts
// when the usable node workers hold several data sets and none is on as
// many nodes as it needs (counting those that have not said).
// TestFewNote: a job asking for more nodes than are free is told before
// it starts; busy, failed and silent nodes are not free; with enough free,
// or none registered yet, nothing is said.
func TestFewNote(t *testing.T) {
	now := time.Now()
	rec := func(id, run string, failed bool, seen time.Duration) workflows.NodeRecord {
		return workflows.NodeRecord{Node: spec.Node{ID: id}, Run: run, Failed: failed, LastSeen: now.Add(-seen)}
	}
	reg := workflows.Registry{LeaseTTL: 20 * time.Second, Nodes: []workflows.NodeRecord{
		rec("a", "", false, time.Second), rec("b", "run/other", false, time.Second), rec("c", "", true, time.Second),
		rec("d", "", false, time.Minute), rec("e", "", false, 0),
	}}
	for _, tc := range []struct {
		name  string
		reg   workflows.Registry
		nodes int
		want  string
	}{
		{"enough free", reg, 2, ""},
		{"too few", reg, 3, "note: the job asks for 3 node(s) and 2 are free now (5 registered; 'cann-train nodes' lists them): " +
			"the run waits up to its node_wait (2m0s) for the others, then fails"},
		{"one free", workflows.Registry{LeaseTTL: reg.LeaseTTL, Nodes: reg.Nodes[:4]}, 2,
			"note: the job asks for 2 node(s) and 1 is free now (4 registered; 'cann-train nodes' lists them): " +
				"the run waits up to its node_wait (2m0s) for the others, then fails"},
		{"none registered", workflows.Registry{}, 3, ""},
	} {
		if got := fewNote(tc.reg, now, tc.nodes, 2*time.Minute); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestMixedWarning(t *testing.T) {
	x, y := strings.Repeat("a", 64), strings.Repeat("b", 64)
	rec := func(sum string, failed, drained bool) workflows.NodeRecord {
		return workflows.NodeRecord{Node: spec.Node{ID: "n", DataSHA256: sum}, Failed: failed, Drained: drained}
	}
	for _, tc := range []struct {
		name  string
		nodes []workflows.NodeRecord
		need  int
		want  string
	}{
		{"none registered", nil, 2, ""},
		{"one data set", []workflows.NodeRecord{rec(x, false, false), rec(x, false, false)}, 3, ""},
		{"one set fills it", []workflows.NodeRecord{rec(x, false, false), rec(y, false, false), rec(x, false, false)}, 2, ""},
		{"with one that has not said", []workflows.NodeRecord{rec(x, false, false), rec(y, false, false), rec("", false, false)}, 2, ""},
		{"none fills it", []workflows.NodeRecord{rec(x, false, false), rec(y, false, false), rec(x, false, false)}, 3,
			"warning: the node workers hold 2 data sets (aaaaaaaaaaaa… on 2, bbbbbbbbbbbb… on 1) and none is on the 3 nodes the job needs: its first chunk replaces"},
		{"failed and drained nodes do not count", []workflows.NodeRecord{rec(x, false, false), rec(y, false, false), rec(x, true, false), rec(x, false, true)}, 2,
			"warning: the node workers hold 2 data sets (aaaaaaaaaaaa… on 1, bbbbbbbbbbbb… on 1) and none is on the 2 nodes"},
	} {
		got := mixedWarning(workflows.Registry{Nodes: tc.nodes}, tc.need)
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPinWarning: a job pinning a data set no usable registered node
// holds is warned of before it starts, naming what they hold; a node
// holding it, or one that has not said, or none registered, warns of
// nothing. Failed and drained nodes do not count.
func TestPinWarning(t *testing.T) {
	pin, other, third := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	rec := func(sum string, failed bool) workflows.NodeRecord {
		return workflows.NodeRecord{Node: spec.Node{ID: "n", DataSHA256: sum}, Failed: failed}
	}
	drained := rec(pin, false)
	drained.Drained = true
	for _, tc := range []struct {
		name  string
		nodes []workflows.NodeRecord
		want  string
	}{
		{"none registered", nil, ""},
		{"one holds it", []workflows.NodeRecord{rec(other, false), rec(pin, false)}, ""},
		{"one has not said", []workflows.NodeRecord{rec(other, false), rec("", false)}, ""},
		{"only a failed or drained node holds it", []workflows.NodeRecord{rec(third, false), rec(pin, true), rec(other, false), drained, rec(third, false)},
			"warning: no registered node worker holds the data set the job pins (data_sha256 aaaaaaaaaaaa…); they hold bbbbbbbbbbbb… on 1, cccccccccccc… on 2: the run fails"},
	} {
		got := pinWarning(workflows.Registry{Nodes: tc.nodes}, pin)
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestOwnLater: --resume continues from a checkpoint past the last one
// the ended run recorded only when that run wrote it (created since it
// started); later ones of another timeline, unreadable ones and those of
// a run whose start is unknown are not taken.
func TestOwnLater(t *testing.T) {
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(step int64, created time.Time) checkpoint.Ref {
		return checkpoint.Ref{Run: "r", Step: step, SHA256: "ab", Created: created}
	}
	before, after := start.Add(-time.Hour), start.Add(time.Minute)
	stored := []checkpoint.Ref{at(100, before), at(200, after), at(250, before), at(300, after), at(350, time.Time{}), at(400, start)}
	tests := []struct {
		name     string
		recorded int64 // -1: none
		started  time.Time
		want     []int64
	}{
		{"past the recorded, written since the start", 200, start, []int64{300, 400}},
		{"none recorded", -1, start, []int64{200, 300, 400}},
		{"the newest recorded", 400, start, nil},
		{"start unknown", 200, time.Time{}, nil},
		{"started after them all", 100, start.Add(2 * time.Hour), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prev := spec.RunStatus{StartedAt: tc.started}
			if tc.recorded >= 0 {
				prev.LastCkpt = &spec.CheckpointRef{Run: "r", Step: tc.recorded}
			}
			var got []int64
			for _, r := range ownLater(stored, prev) {
				got = append(got, r.Step)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ownLater = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestResumeOfAnUnfitRun: a run that failed because the checkpoint did
// not fit its job (a mistyped model) speaks for no job: the job that does
// fit is not refused for differing from it, and the words say so; any
// other ended run's job still is, and a data conflict always.
func TestResumeOfAnUnfitRun(t *testing.T) {
	base := spec.RunSpec{Name: "r", Nodes: 2, Steps: 400, Model: spec.ModelSpec{Kind: spec.ModelMLPMNIST, Hidden: []int{128}}}.WithDefaults()
	typo := base
	typo.Model.Hidden = []int{64}
	for _, tc := range []struct {
		name     string
		prev     spec.RunStatus
		conflict string
		note     string
	}{
		{"failed: unfit", spec.RunStatus{Phase: spec.PhaseFailed, CheckpointUnfit: true}, "",
			"(the earlier run failed because the checkpoint did not fit its job, so its job is not held against this one: model.hidden [128] (the earlier run's: [64]); the restore checks the checkpoint)"},
		{"failed otherwise", spec.RunStatus{Phase: spec.PhaseFailed}, "model.hidden [128] (the earlier run's: [64])", ""},
		{"unfit, other data", spec.RunStatus{Phase: spec.PhaseFailed, CheckpointUnfit: true, DataSHA256: strings.Repeat("b", 64)},
			"data_sha256 " + strings.Repeat("a", 64), "(the earlier run failed because"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			if tc.prev.DataSHA256 != "" {
				s.DataSHA256 = strings.Repeat("a", 64)
			}
			_, conflicts, note := resumeOf(s, typo, tc.prev)
			got := strings.Join(conflicts, "; ")
			if (tc.conflict == "") != (got == "") || !strings.Contains(got, tc.conflict) {
				t.Errorf("conflicts %q, want %q", got, tc.conflict)
			}
			if (tc.note == "") != (note == "") || !strings.HasPrefix(note, tc.note) {
				t.Errorf("note %q, want %q", note, tc.note)
			}
		})
	}
}

// TestRunRefusesAMissingTraceWithALocalServer: a green trace that does not
// open here is a typo when Temporal (and so, most likely, the control
// worker) runs on this host: refused, where before the run started and
// trained without its policy; with a remote server it is a note (the
// trace may be on the control worker's host).
func TestRunRefusesAMissingTraceWithALocalServer(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(job, []byte("name: g\nnodes: 1\nsteps: 100\ngreen:\n  trace: /nonexistent/es.csv\n  deadline: 10m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want string // in the error
	}{
		{"127.0.0.1:1", "green.trace: open /nonexistent/es.csv: no such file or directory"},
		{"localhost:1", "green.trace: open /nonexistent/es.csv"},
		{"temporal.example.invalid:7233", ""}, // (noted; then the dial fails)
	} {
		_, stderr, err := runCLI(t, "run", "-f", job, "--address", tc.addr, "--env-config=false")
		switch {
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want it refused: %q", tc.addr, err, tc.want)
		case tc.want == "" && (err == nil || strings.Contains(err.Error(), "green.trace") || !strings.Contains(stderr, "does not open here")):
			t.Errorf("%s: %v (stderr %q); want a note, then the dial's error", tc.addr, err, stderr)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:7233": true, "[::1]:7233": true, "localhost:7233": true, "10.0.0.5:7233": false, "temporal:7233": false} {
		if got := loopbackAddress(addr); got != want {
			t.Errorf("loopbackAddress(%q) = %v", addr, got)
		}
	}
}

// TestRunRefusesAMisspeltBucketParameter: a job's s3:// checkpoint_url
// with a parameter its driver does not take is refused before the run
// starts (no server is asked: the address is a closed port), naming it
// and what it may have meant; before, the run failed at its first chunk.
func TestRunRefusesAMisspeltBucketParameter(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(job, []byte("name: s\nnodes: 1\nsteps: 100\ncheckpoint_url: 's3://ckpt?endpoint=http://127.0.0.1:9000&use_path_stlye=true&region=us-east-1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, "run", "-f", job, "--address", "127.0.0.1:1", "--env-config=false")
	if err == nil || !strings.Contains(err.Error(), `checkpoint_url: "s3://ckpt?`) ||
		!strings.Contains(err.Error(), `unknown query parameter "use_path_stlye" (did you mean use_path_style?)`) {
		t.Errorf("run: %v; want the misspelt parameter named", err)
	}
}

// TestRunCommandForTheResumeHint: `run -f FILE --wait` of a run that
// fails gives its own command as the resume hint (not `-f JOB`), --name
// when it was given, each word quoted where a shell would split it.
func TestRunCommandForTheResumeHint(t *testing.T) {
	for _, tc := range []struct {
		o    runOptions
		want string
	}{
		{runOptions{file: "crash.yaml"}, "cann-train run -f crash.yaml"},
		{runOptions{file: "jobs/crash.yaml", name: "bad-crash"}, "cann-train run -f jobs/crash.yaml --name bad-crash"},
		{runOptions{file: "my jobs/it's.yaml"}, `cann-train run -f 'my jobs/it'\''s.yaml'`},
		{runOptions{}, ""},
	} {
		if got := tc.o.command(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
	st := spec.RunStatus{RunID: "run/bad-crash", Phase: spec.PhaseFailed, Model: spec.ModelExternal, Step: 23, TotalSteps: 40,
		LastCkpt: &spec.CheckpointRef{URL: "file:///b", Run: "bad-crash", Step: 20, Key: "runs/bad-crash/ckpt/000000000020/manifest.json"}, Error: "x"}
	for cmd, want := range map[string]string{
		"cann-train run -f crash.yaml --name bad-crash": "resume       cann-train run -f crash.yaml --name bad-crash --resume continues it from step 20\n",
		"": "resume       cann-train run -f JOB --name bad-crash --resume continues it from step 20\n",
	} {
		var b bytes.Buffer
		if err := printStatusOf(&b, st, "text", "", "default", cmd); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("command %q: status\n%s\nwant %q", cmd, b.String(), want)
		}
	}
}

// TestNodesDefaultBucket: the node workers' default bucket, as they
// registered it, is where `run` looks for an earlier run's checkpoints
// when the job names none: one all say; none where none said (an earlier
// build) or the URL carries a password (masked); a warning where they
// differ.
func TestNodesDefaultBucket(t *testing.T) {
	now := time.Now()
	reg := func(urls ...string) workflows.Registry {
		var r workflows.Registry
		for i, u := range urls {
			r.Nodes = append(r.Nodes, workflows.NodeRecord{Node: spec.Node{ID: fmt.Sprintf("n%d", i), CheckpointURL: u}, LastSeen: now})
		}
		return r
	}
	// A decommissioned node, silent for a day, and a failed one, each with
	// another bucket, beside two live ones.
	stale := reg("s3://ckpt", "file:///old", "file:///older", "s3://ckpt")
	stale.Nodes[1].LastSeen = now.Add(-24 * time.Hour)
	stale.Nodes[2].Failed = true
	for _, tc := range []struct {
		name      string
		reg       workflows.Registry
		url, warn string
	}{
		{"none registered", reg(), "", ""},
		{"an earlier build", reg("", ""), "", ""},
		{"all alike", reg("s3://ckpt?region=us-east-1", "s3://ckpt?region=us-east-1", ""), "s3://ckpt?region=us-east-1", ""},
		{"masked", reg("s3://ckpt?endpoint=http://u:xxxxx@minio:9000"), "", ""},
		{"stale ones left out", stale, "s3://ckpt", ""},
		{"differ", reg("file:///a", "file:///b", "file:///a"), "",
			"warning: the node workers' default checkpoint buckets differ (file:///a on 2, file:///b on 1): a run without checkpoint_url"},
	} {
		url, warn := nodesDefaultBucket(tc.reg, now)
		if url != tc.url || !strings.HasPrefix(warn, tc.warn) || (tc.warn == "") != (warn == "") {
			t.Errorf("%s: %q, %q; want %q, %q…", tc.name, url, warn, tc.url, tc.warn)
		}
	}
}
