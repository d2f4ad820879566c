package main

import (
	"bytes"
	"strings"
	"testing"
)

// runSearch runs `cann-train search args...`.
func runSearch(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(append([]string{"search"}, args...))
	err = root.Execute()
	return out.String(), errb.String(), err
}

// TestSearchOutputsAudit: what the second audit of search asked for, as
// the user sees it.
func TestSearchOutputsAudit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string   // "": succeeds
		want    []string // in stdout
		not     []string // not in stdout
	}{
		// The field list gives the units, and the links' are per device.
		{"help units", []string{"--help"}, "",
			[]string{"inter_node_gbps (GB/s per device, one direction: a node's NICs / its devices)", "intra_node_gbps (GB/s per device, one direction)",
				"seq_len (tokens)", "peak_tflops (dense TFLOP/s)"}, nil},
		// A text table ends in its legend; JSON has none.
		{"table legend", []string{"--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--top", "2"}, "",
			[]string{"columns:\n  hw_TFLOP/s/dev", "bubble%", "blast ", "no causal halving"}, nil},
		{"no legend in JSON", []string{"--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--top", "2", "-o", "json"}, "",
			[]string{`"layer_split": "`}, []string{"columns:"}},
		// No plan: -o html writes a page that says why (the shell has made
		// the file already), and the command fails saying so too.
		{"html without a plan", []string{"--model", "gpt_1t", "--cluster", "vtrain_a100_64", "-o", "html"}, "no feasible plan",
			[]string{"<!DOCTYPE html>", "<h2>No plan</h2>", "the smallest needs"}, nil},
		{"preset misspelt", []string{"--model", "gpt3_3.6b", "--cluster", "selene_a100_38"}, `unknown preset "selene_a100_38"; did you mean selene_a100_384? (known: `, nil, nil},
		{"caps said", []string{"--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--max-mb", "1", "--max-tp", "1", "--top", "1"}, "",
			[]string{"note: the best plan sits at the search's bound --max-tp 1, ", "--max-mb 1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runSearch(t, tc.args...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			// (Help text is wrapped: a phrase may span lines.)
			flat := strings.Join(strings.Fields(out), " ")
			for _, w := range tc.want {
				if !strings.Contains(out, w) && !strings.Contains(flat, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
		})
	}
}
