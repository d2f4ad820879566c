package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/spec"
)

// Bad flags are refused before anything starts.
func TestBenchRecoveryFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kills", "0"}, "--kills 0: want at least 1"},
		{[]string{"--kill-at", "noon"}, `--kill-at "noon": want random or chunk-end`},
		{[]string{"--kill-at", "chunk-end", "--steps", "150", "--chunk-steps", "200"}, "no chunk ends"},
		{[]string{"--fault", "melt"}, `--fault "melt": want kill or freeze`},
		{[]string{"--fault", "freeze", "--heartbeat-timeout", "500ms"}, "--heartbeat-timeout 500ms: want at least 1s"},
	} {
		_, _, err := runCLI(t, append([]string{"bench", "recovery", "--data-dir", t.TempDir()}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestChunkEnds(t *testing.T) {
	for _, tc := range []struct {
		steps, chunk, every int64
		want                []int64
	}{
		{400, 50, 50, []int64{100, 150, 200, 250, 300, 350}},
		{400, 100, 50, []int64{100, 200, 300}},
		{150, 200, 50, nil},
	} {
		got := chunkEnds(recoveryBenchOptions{steps: tc.steps, chunk: tc.chunk, ckptEvery: tc.every})
		if !slices.Equal(got, tc.want) {
			t.Errorf("chunkEnds(steps %d, chunk %d, every %d) = %v, want %v", tc.steps, tc.chunk, tc.every, got, tc.want)
		}
	}
}

// TestBenchRecoveryTrials runs the trial loop of `bench recovery` with fake
// trials: a failed trial counts as an error, not as a run that ended
// different; medians of no trial print "-" (JSON null); Ctrl-C during a
// trial stops the bench at once, printing the trials finished before and
// exiting as interrupted (130).
func TestBenchRecoveryTrials(t *testing.T) {
	o := recoveryBenchOptions{kills: 3, nodes: 3, steps: 400, chunk: 50, ckptEvery: 50, seed: 1, killAt: "random", fault: spec.FaultKill}
	const ref = "ref-sha"
	good := func(sha string) (spec.RunStatus, map[string]injected, error) {
		return spec.RunStatus{WeightsSHA256: sha, Recoveries: []spec.Recovery{{FailedNodes: []string{"n1"}, LostSteps: 20, ReplaceSeconds: 0.5}}}, nil, nil
	}
	failed := errors.New("4 nodes never registered")
	for _, tc := range []struct {
		name string
		// outcome of trial i (1-based); cancel: Ctrl-C during it
		outcome      func(i int) (sha string, err error, cancel bool)
		trials, errs int
		identical    bool
		code         int      // lastWords' exit code
		line         string   // and the line it ends on
		text, json   []string // substrings, or the median row's cells ("median …")
	}{
		{"all identical", func(int) (string, error, bool) { return ref, nil, false }, 3, 0, true, 0, "",
			[]string{"median 0.000 0.500 0.000 20 true"}, []string{`"median_replace_s": 0.5`, `"errors": 0`}},
		{"one failed trial", func(i int) (string, error, bool) {
			if i == 2 {
				return "", failed, false
			}
			return ref, nil, false
		}, 3, 1, true, 1, "",
			[]string{"ERROR: 4 nodes never registered", "true", "1 of 3 trials failed (ERROR)"}, []string{`"all_identical": true`, `"errors": 1`}},
		{"one different", func(i int) (string, error, bool) {
			if i == 3 {
				return "other", nil, false
			}
			return ref, nil, false
		}, 3, 0, false, 1, "", []string{"false"}, []string{`"all_identical": false`}},
		{"every trial failed", func(int) (string, error, bool) { return "", failed, false }, 3, 3, true, 1, "",
			[]string{"median - - - - -"}, []string{`"median_detect_s": null`, `"median_lost_steps": null`, `"errors": 3`}},
		{"Ctrl-C in trial 2", func(i int) (string, error, bool) {
			if i == 2 {
				return "", fmt.Errorf("workflow not found: %w", context.Canceled), true
			}
			return ref, nil, false
		}, 1, 0, true, 130, "cann-train: interrupted after 1 of 3 trials", []string{"       1 "}, []string{`"trial": 1,`}},
		{"Ctrl-C in trial 1", func(i int) (string, error, bool) { return "", errors.New("4 nodes never registered"), true }, 0, 0, true, 130, "cann-train: interrupted", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, output := range []string{"text", "json"} {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var calls int
				trial := func(name string, victim int, killAt int64) (spec.RunStatus, map[string]injected, error) {
					calls++
					sha, err, stop := tc.outcome(calls)
					if stop {
						cancel()
					}
					if err != nil {
						return spec.RunStatus{}, nil, err
					}
					return good(sha)
				}
				var out, log bytes.Buffer
				res := RecoveryBench{AllIdentical: true, CheckpointEvery: o.ckptEvery, Fault: o.fault}
				err := recoveryTrials(ctx, o, &res, ref, "x", &log, trial)
				if tc.code == 130 && calls != len(res.Trials)+1 {
					t.Errorf("%d trials run after Ctrl-C", calls-len(res.Trials)-1)
				}
				if len(res.Trials) != tc.trials || res.Errors != tc.errs || res.AllIdentical != tc.identical {
					t.Errorf("%d trials, %d errors, identical %v; want %d, %d, %v", len(res.Trials), res.Errors, res.AllIdentical, tc.trials, tc.errs, tc.identical)
				}
				oo := o
				oo.output = output
				err = finishRecoveryBench(ctx, &env{out: &out, err: &log}, oo, res, err)
				line, _, code := lastWords(err, ctx.Err() != nil)
				if code != tc.code || tc.line != "" && line != tc.line {
					t.Errorf("ends %q, exit %d; want %q, %d (%v)", line, code, tc.line, tc.code, err)
				}
				want := tc.text
				if output == "json" {
					want = tc.json
				}
				for _, w := range want {
					if strings.HasPrefix(w, "median ") { // the median row's cells
						for l := range strings.Lines(out.String()) {
							if f := strings.Fields(l); len(f) > 0 && f[0] == "median" && strings.Join(f, " ") != w {
								t.Errorf("median row %q, want %q", strings.Join(f, " "), w)
							}
						}
						w = "median"
					}
					if !strings.Contains(out.String(), w) {
						t.Errorf("%s output lacks %q:\n%s", output, w, out.String())
					}
				}
				if len(want) == 0 && out.Len() > 0 {
					t.Errorf("printed with no trial finished:\n%s", out.String())
				}
			}
		})
	}
}

// A finished trial's checkpoints go, chunks included; another run's in
// the same bucket stay.
func TestPurgeCheckpoints(t *testing.T) {
	ctx := context.Background()
	url, store := fileStore(t)
	dir := strings.TrimPrefix(url, "file://")
	payload := bytes.Repeat([]byte("weights!"), 1<<16)
	for _, run := range []string{"trial", "other"} {
		for step := int64(50); step <= 100; step += 50 {
			if _, _, err := store.SaveIncremental(ctx, run, step, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := func(run string) (n int) {
		_ = filepath.WalkDir(filepath.Join(dir, "runs", run), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.Contains(p, "/chunks/") || strings.Contains(p, "/ckpt/")) {
				n++
			}
			return nil
		})
		return n
	}
	before := files("other")
	if files("trial") == 0 || before == 0 {
		t.Fatalf("no checkpoint files saved (trial %d, other %d)", files("trial"), before)
	}
	if err := purgeCheckpoints(ctx, url, "trial"); err != nil {
		t.Fatal(err)
	}
	if n := files("trial"); n != 0 {
		t.Errorf("%d checkpoint or chunk files of the purged run remain", n)
	}
	if n := files("other"); n != before {
		t.Errorf("the other run has %d checkpoint and chunk files, had %d", n, before)
	}
}
