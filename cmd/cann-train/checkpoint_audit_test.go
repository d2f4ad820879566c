package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/spec"
)

// The checkpoint commands as a second audit found them wanting: gc that
// kept only corrupt checkpoints, read-only commands that created a
// mistyped bucket, verify's count never printed, JSON that changed shape,
// and exit codes that differed for a run with no checkpoints.

// damageChunk damages a chunk of the checkpoint whose manifest is ref in
// the file:// bucket in dir that no other manifest of its run names — cut
// to half its size when truncate, else one byte flipped — and returns
// the chunk's key.
func damageChunk(t *testing.T, dir string, ref spec.CheckpointRef, truncate bool) string {
	t.Helper()
	chunks := func(key string) []string {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Chunks []struct {
				Hash string `json:"hash"`
			} `json:"chunks"`
		}
		if err := json.Unmarshal(b, &m); err != nil || len(m.Chunks) == 0 {
			t.Fatalf("manifest %s lists no chunks (%v)", key, err)
		}
		var out []string
		for _, c := range m.Chunks {
			out = append(out, c.Hash)
		}
		return out
	}
	others, err := filepath.Glob(filepath.Join(dir, "runs", ref.Run, "ckpt", "*", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string]bool{}
	for _, path := range others {
		key, _ := filepath.Rel(dir, path)
		if key = filepath.ToSlash(key); key != ref.Key {
			for _, h := range chunks(key) {
				shared[h] = true
			}
		}
	}
	for _, h := range chunks(ref.Key) {
		if shared[h] {
			continue
		}
		key := "runs/" + ref.Run + "/chunks/" + h
		path := filepath.Join(dir, filepath.FromSlash(key))
		c, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if truncate {
			c = c[:len(c)/2]
		} else {
			c[len(c)/2] ^= 0xff
		}
		if err := os.WriteFile(path, c, 0o644); err != nil {
			t.Fatal(err)
		}
		return key
	}
	t.Fatalf("every chunk of %s is another checkpoint's too", ref.Key)
	return ""
}

// TestCheckpointGCKeepsOneThatLoads: gc never leaves a run with no
// checkpoint that loads when it had one: when none of the checkpoints
// retention keeps loads, it keeps the newest one that does as well, and
// names the corrupt ones; it loads no more than it must (none when it
// deletes nothing, and stops at the first kept one that loads).
func TestCheckpointGCKeepsOneThatLoads(t *testing.T) {
	ctx := context.Background()
	cli := offline(ctx)
	all := []int64{1000, 2000, 3000, 4000, 5000}
	for i, tc := range []struct {
		name    string
		args    []string
		corrupt []int64
		want    []int64  // left in the bucket
		out     []string // on stdout
		stderr  string   // on stderr ("": no warning)
		json    bool
	}{
		{name: "newest corrupt, keep-last 1", args: []string{"--keep-last", "1"}, corrupt: []int64{5000}, want: []int64{4000, 5000},
			out:    []string{"deleted  step 3000", "CORRUPT  step 5000  runs/h-0/ckpt/000000005000/manifest.json: runs/h-0/chunks/", "(kept: it does not load)", "spared   step 4000  runs/h-0/ckpt/000000004000/manifest.json: the newest checkpoint of run/h-0 that loads, kept as well"},
			stderr: "none of the checkpoints of run/h-0 that retention keeps loads (step(s) 5000: `cann-train checkpoint verify h-0` says why): kept step 4000 as well"},
		{name: "two newest corrupt, keep-last 2", args: []string{"--keep-last", "2"}, corrupt: []int64{4000, 5000}, want: []int64{3000, 4000, 5000},
			out: []string{"spared   step 3000"}, stderr: "retention keeps loads (step(s) 5000, 4000:"},
		{name: "newest corrupt, keep-last 2", args: []string{"--keep-last", "2"}, corrupt: []int64{5000}, want: []int64{4000, 5000},
			out: []string{"CORRUPT  step 5000"}, stderr: "run/h-2's newest checkpoint(s) that retention keeps do not load (step(s) 5000: `cann-train checkpoint verify h-2` says why); step 4000, kept too, does"},
		// The newest kept one loads: the older kept one is not loaded
		// (its damage goes unsaid), nothing is spared.
		{name: "newest loads", args: []string{"--keep-last", "1", "--keep-every", "2000"}, corrupt: []int64{2000}, want: []int64{2000, 4000, 5000}},
		// Retention deletes nothing: nothing is loaded.
		{name: "nothing deleted", args: []string{"--keep-last", "10"}, corrupt: []int64{5000}, want: all},
		// None loads: nothing to keep one of; retention goes ahead.
		{name: "all corrupt", args: []string{"--keep-last", "1"}, corrupt: all, want: []int64{5000}, out: []string{"CORRUPT  step 5000"},
			stderr: "no checkpoint of run/h-5 loads (step(s) 5000, which retention keeps, nor any older one)"},
		{name: "json", args: []string{"--keep-last", "1", "-o", "json"}, corrupt: []int64{5000}, want: []int64{4000, 5000}, json: true,
			stderr: "kept step 4000 as well"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("h-%d", i)
			url, dir := newBucket(t)
			refs := saveSteps(t, url, name, all...)
			for _, step := range tc.corrupt {
				damageChunk(t, dir, refs[step], false)
			}
			// (--grace 2m: Temporal is not asked whether the run runs.)
			out, errOut, err := cli(append([]string{"checkpoint", "gc", name, "--url", url, "--grace", "2m"}, tc.args...)...)
			t.Logf("gc:\n%s%s", out, errOut)
			if err != nil {
				t.Fatalf("gc: %v", err)
			}
			if got := bucketSteps(t, url, name); !slices.Equal(got, tc.want) {
				t.Errorf("after gc the bucket holds %v; want %v", got, tc.want)
			}
			for _, want := range tc.out {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			if tc.out == nil && !tc.json && (strings.Contains(out, "CORRUPT") || strings.Contains(out, "spared")) {
				t.Errorf("stdout names a corrupt or spared checkpoint")
			}
			warned := strings.Contains(errOut, "retention keeps")
			if tc.stderr == "" && warned || tc.stderr != "" && !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr %q; want %q", errOut, tc.stderr)
			}
			if tc.json {
				var res struct {
					Deleted     []struct{ Step int64 } `json:"deleted_checkpoints"`
					Kept        int                    `json:"kept_checkpoints"`
					KeptCorrupt []struct {
						Step    int64  `json:"step"`
						Key     string `json:"key"`
						Problem string `json:"problem"`
					} `json:"kept_corrupt"`
					Spared *struct{ Step int64 } `json:"spared"`
				}
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatal(err)
				}
				if len(res.Deleted) != 3 || res.Kept != 2 || res.Spared == nil || res.Spared.Step != 4000 || len(res.KeptCorrupt) != 1 ||
					res.KeptCorrupt[0].Step != 5000 || res.KeptCorrupt[0].Problem == "" {
					t.Errorf("gc -o json: %s; want 3 deleted, 2 kept, 4000 spared, 5000 corrupt", out)
				}
			}
		})
	}
}

// TestCheckpointReadOnlyCommandsCreateNoBucket: ls, verify and gc of a
// file:// bucket that does not exist say so and do not create it;
// store-kept, which writes, creates it.
func TestCheckpointReadOnlyCommandsCreateNoBucket(t *testing.T) {
	ctx := context.Background()
	cli := offline(ctx)
	dir := filepath.Join(t.TempDir(), "nonexist")
	url := "file://" + dir
	for _, args := range [][]string{
		{"ls", "r"}, {"ls", "r", "-o", "json"}, {"verify", "r"}, {"gc", "r"}, {"gc", "r", "--grace", "2m"},
	} {
		out, _, err := cli(append(append([]string{"checkpoint"}, args...), "--url", url)...)
		if err == nil || !strings.Contains(err.Error(), "bucket "+url+" does not exist (no directory "+dir+"): nothing of run r to read there") {
			t.Errorf("%v of a missing bucket: %v (%q); want it said not to exist", args, err, out)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v created the bucket's directory (%v)", args, err)
		}
	}
	kept := keptFile(t, 150, packedDir(t))
	if out, errOut, err := cli("checkpoint", "store-kept", "r", kept, "--url", url); err != nil {
		t.Fatalf("store-kept into a missing bucket: %v\n%s%s", err, out, errOut)
	}
	if got := bucketSteps(t, url, "r"); !slices.Equal(got, []int64{150}) {
		t.Errorf("store-kept left %v in the bucket it created; want [150]", got)
	}
}

// TestCheckpointVerifyReports: verify says how many checkpoints are bad
// (last on stdout; on stderr with -o json, whose stdout stays JSON), and
// its JSON keeps key the manifest's, names the bad object apart and keeps
// the underlying error in problem.
func TestCheckpointVerifyReports(t *testing.T) {
	ctx := context.Background()
	cli := offline(ctx)
	url, dir := newBucket(t)
	refs := saveSteps(t, url, "vj", 1000, 2000)
	chunk := damageChunk(t, dir, refs[2000], true)

	out, errOut, err := cli("checkpoint", "verify", "vj", "--url", url)
	var quiet *exitError
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !errors.As(err, &quiet) || len(lines) != 3 || lines[2] != "1 of 2 checkpoint(s) bad (step(s) 2000)" ||
		!strings.HasPrefix(lines[1], "CORRUPT  step 2000  "+refs[2000].Key+": "+chunk+": chunk does not decompress: ") {
		t.Errorf("verify: %v\n%s%s; want the corrupt one named and the count last on stdout", err, out, errOut)
	}

	out, errOut, err = cli("checkpoint", "verify", "vj", "--url", url, "-o", "json")
	var got []map[string]any
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil || !errors.As(err, &quiet) || len(got) != 2 {
		t.Fatalf("verify -o json: %v, %v\n%s%s", jerr, err, out, errOut)
	}
	if !strings.Contains(errOut, "1 of 2 checkpoint(s) bad (step(s) 2000)") {
		t.Errorf("verify -o json: stderr %q lacks the count", errOut)
	}
	ok, bad := got[0], got[1]
	if ok["key"] != refs[1000].Key || ok["run"] != "vj" || ok["state"] != "ok" || ok["object"] != nil {
		t.Errorf("ok entry: %v", ok)
	}
	problem, _ := bad["problem"].(string)
	if bad["key"] != refs[2000].Key || bad["object"] != chunk || bad["run"] != "vj" || bad["state"] != "corrupt" ||
		!strings.HasPrefix(problem, "chunk does not decompress: ") || len(problem) <= len("chunk does not decompress: ") {
		t.Errorf("corrupt entry: %v; want key the manifest's, object %s, the decoder's error in problem", bad, chunk)
	}
}

// TestCheckpointJSONShapes: gc -o json says [] for no deleted checkpoint
// and snake_case chunk counts; ls flags an unreadable manifest, in JSON
// and in text, rather than listing it as 0 bytes.
func TestCheckpointJSONShapes(t *testing.T) {
	ctx := context.Background()
	cli := offline(ctx)
	url, dir := newBucket(t)
	refs := saveSteps(t, url, "js", 1000, 2000)
	out, errOut, err := cli("checkpoint", "gc", "js", "--url", url, "--keep-last", "5", "-o", "json")
	if err != nil || !strings.Contains(out, `"deleted_checkpoints":[]`) || !strings.Contains(out, `"deleted_bytes":0`) ||
		!strings.Contains(out, `"referenced":`) || strings.Contains(out, "DeletedBytes") {
		t.Errorf("gc -o json: %v\n%s%s", err, out, errOut)
	}
	// A manifest that decodes, but is no valid one.
	path := filepath.Join(dir, filepath.FromSlash(refs[2000].Key))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"version": 2`, `"version": 99`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = cli("checkpoint", "ls", "js", "--url", url, "-o", "json")
	var entries []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 2 {
		t.Fatalf("ls -o json: %v\n%s%s", err, out, errOut)
	}
	if entries[0]["unreadable"] != nil || entries[0]["sha256"] != refs[1000].SHA256 {
		t.Errorf("ls -o json, good entry: %v", entries[0])
	}
	if why, _ := entries[1]["unreadable"].(string); !strings.Contains(why, "unsupported manifest version 99") {
		t.Errorf("ls -o json, unreadable entry: %v; want unreadable saying why", entries[1])
	}
	out, _, err = cli("checkpoint", "ls", "js", "--url", url)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if f := strings.Fields(lines[len(lines)-1]); err != nil || len(lines) != 3 || len(f) < 6 || f[0] != "2000" || f[1] != "-" || f[2] != "unreadable" || f[3] != "-" ||
		!strings.Contains(out, refs[2000].Key+" (unsupported manifest version 99") {
		t.Errorf("ls: %v\n%s", err, out)
	}
}

// TestCheckpointNoCheckpointsExitCodes: ls, verify and gc of a run with no
// checkpoint in an existing bucket all fail alike, saying so; with -o json
// each still writes its empty document on stdout.
func TestCheckpointNoCheckpointsExitCodes(t *testing.T) {
	ctx := context.Background()
	cli := offline(ctx)
	url, _ := newBucket(t)
	saveSteps(t, url, "other", 1000)
	for _, tc := range []struct {
		args []string
		json string // stdout with -o json
	}{
		{[]string{"ls"}, "[]"},
		{[]string{"verify"}, "[]"},
		{[]string{"gc"}, `"deleted_checkpoints":[]`},
	} {
		for _, js := range []bool{false, true} {
			args := append(append([]string{"checkpoint"}, tc.args...), "nope", "--url", url)
			if js {
				args = append(args, "-o", "json")
			}
			out, errOut, err := cli(args...)
			if err == nil || !strings.Contains(err.Error(), `no checkpoints of run "nope" in `+url) {
				t.Errorf("%v: %v\n%s%s; want it to fail, saying there are none", args, err, out, errOut)
			}
			if js && !strings.Contains(out, tc.json) || !js && out != "" {
				t.Errorf("%v: stdout %q", args, out)
			}
		}
	}
}
