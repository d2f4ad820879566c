package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCollectiveLongNames: `bench collective` takes nccl-tests' long
// flag names and ours (--output, --target-time, --shared-buffers) as well
// as the one-letter shorthands, and -o text prints the table.
func TestBenchCollectiveLongNames(t *testing.T) {
	base := []string{"bench", "collective", "--np", "1", "--limits", "0"}
	for _, tc := range []struct {
		args []string
		json bool
	}{
		{[]string{"--minbytes", "8", "--maxbytes", "16", "--stepfactor", "2", "--iters", "1", "--warmup-iters", "1", "--check", "1", "--root", "0", "--datatype", "double", "--output", "json"}, true},
		{[]string{"--minbytes", "8", "--maxbytes", "24", "--stepbytes", "8", "--target-time", "1ms", "--shared-buffers", "0", "--output", "text"}, false},
		{[]string{"-b", "8", "-e", "16", "-f", "2", "-n", "1", "-w", "1", "-c", "1", "-r", "0", "-d", "double", "-o", "text"}, false},
		{[]string{"-b", "8", "-e", "16", "-T", "1ms", "-R", "0", "-o", "table"}, false},
	} {
		out, errs, err := runCLI(t, append(append([]string{}, base...), tc.args...)...)
		if err != nil {
			t.Errorf("%v: %v\n%s", tc.args, err, errs)
			continue
		}
		if tc.json {
			var rep struct {
				Options struct {
					MinBytes int64  `json:"min_bytes"`
					MaxBytes int64  `json:"max_bytes"`
					DType    string `json:"dtype"`
				} `json:"options"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Options.MinBytes != 8 || rep.Options.MaxBytes != 16 || rep.Options.DType != "double" {
				t.Errorf("%v: %+v, %v\n%s", tc.args, rep, err, out)
			}
		} else if !strings.HasPrefix(out, "# ascend collective benchmark") || !strings.Contains(out, "# Avg bus bandwidth") {
			t.Errorf("%v: no table:\n%s", tc.args, out)
		}
	}
}

// TestBenchOutputWords: every bench subcommand takes the same -o words,
// text and table (the same) or json, says so in its help, and names all
// three when refusing another. (Each accepted word is shown to pass the
// output check by the next check failing, before anything runs.)
func TestBenchOutputWords(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		next []string // a flag refused after the output check
		want string   // that refusal
	}{
		{"collective", []string{"--np", "1", "-b", "8", "-e", "8", "-w", "0"}, "-w 0: want at least 1 warm-up iteration"},
		{"compression", []string{"--steps", "20", "--warmup", "20"}, "--warmup 20: want fewer than --steps 20"},
		{"overlap", []string{"--ranks", "1"}, "--ranks 1: one rank has nothing to overlap"},
		{"recovery", []string{"--steps", "10"}, "--steps 10: want at least 3 × --checkpoint-every"},
		{"strategy", []string{"--codec", "bogus"}, `unknown codec "bogus"`},
	} {
		for _, word := range []string{"text", "table", "json"} {
			_, _, err := runCLI(t, append([]string{"bench", tc.cmd, "-o", word}, tc.next...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("bench %s -o %s: %v, want the output accepted and then %q", tc.cmd, word, err, tc.want)
			}
		}
		_, _, err := runCLI(t, "bench", tc.cmd, "-o", "yaml")
		if err == nil || !strings.Contains(err.Error(), "yaml") || !strings.Contains(err.Error(), "text") || !strings.Contains(err.Error(), "table") || !strings.Contains(err.Error(), "json") {
			t.Errorf("bench %s -o yaml: %v, want a refusal naming text, table and json", tc.cmd, err)
		}
		help, _, err := runCLI(t, "bench", tc.cmd, "--help")
		if err != nil || !strings.Contains(help, "text") || !strings.Contains(help, "table") || !strings.Contains(help, "(the same)") {
			t.Errorf("bench %s --help: %v; -o help does not name text and table as the same:\n%s", tc.cmd, err, help)
		}
	}
}
