package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// runCLIContext is runCLI under ctx (a Ctrl-C is ctx cancelled).
func runCLIContext(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// TestBenchCollectiveRefuses: values the options would read as "the
// default", sizes that overflow or do not fit in memory, a root or frame
// size the ranks would refuse, and contradictory transports are refused
// before any rank starts, each naming its flag. (Each command line would
// otherwise run a tiny sweep and succeed.)
func TestBenchCollectiveRefuses(t *testing.T) {
	tiny := []string{"bench", "collective", "-n", "1", "--limits", "0", "--np", "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-b", "0", "-e", "8"}, "-b 0: want at least 1 byte (default 8)"},
		{[]string{"-b", "8", "-e", "0"}, "-e 0: want at least 1 byte (default 256M)"},
		{[]string{"-b", "8", "-e", "8", "-f", "0"}, "-f 0 would never grow the size"},
		{[]string{"-b", "8", "-e", "8", "-w", "0"}, "-w 0: want at least 1 warm-up iteration (default 5)"},
		{[]string{"-b", "8", "-e", "8", "--np", "0"}, "--np 0: want 1 or more ranks"},
		{[]string{"-b", "8", "-e", "8", "-n", "0", "-T", "0s"}, "-T 0s: want a positive duration (default 200ms)"},
		{[]string{"-b", "8", "-e", "8", "-n", "0", "-T", "-1s"}, "-T -1s: want a positive duration"},
		{[]string{"-b", "8589934592G", "-e", "16"}, `size "8589934592G" is too large`},
		{[]string{"-b", "8", "-e", "8589934591G"}, "-e 8589934591G needs 17179869182.0 GiB of buffers per rank (send, receive) × 1 ranks"},
		{[]string{"-b", "8", "-e", "8", "--spin", "-1"}, `invalid argument "-1" for "--spin" flag: want a duration with its unit`},
		{[]string{"-b", "8", "-e", "8", "--limits", "2"}, `invalid argument "2" for "--limits" flag: want 0 or 1`},
		{[]string{"-b", "8", "-e", "8", "--coll", "broadcast", "-r", "5"}, "-r 5: want a rank below the 1 launched"},
		{[]string{"-b", "8", "-e", "8", "--chunk", "-5"}, "--chunk -5: want 0 (the default) or 4 to"},
		{[]string{"-b", "8", "-e", "8", "--algo", "direct,ring"}, "--algo direct reads the peers' buffers in shared memory: it needs -R 1"},
		{[]string{"-b", "8", "-e", "8", "-R", "1"}, "-R 1 (shared buffers) needs shared-memory links: --shm, or --transport shm or auto"},
		{[]string{"-b", "8", "-e", "8", "--shm", "--transport", "tcp"}, "--shm and --transport tcp: give one transport"},
		{[]string{"-b", "8", "-e", "8", "-d", "double", "--algo", "ring"}, "--algo ring with -d double: allreduce of double runs gather or shares whatever algorithm is forced"},
		{[]string{"-b", "8", "-e", "8", "--warmup_iters", "0"}, "-w 0: want at least 1 warm-up iteration"},
	} {
		if _, err := os.Stat("/proc/meminfo"); err != nil && strings.Contains(tc.want, "GiB") {
			continue // no memory check where the host's memory is unknown
		}
		args := append(append([]string{}, tiny...), tc.args...)
		out, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: a sweep ran:\n%s", tc.args, out)
		}
	}
	// The same sweep with valid values runs.
	if out, errs, err := runCLI(t, append(tiny, "-b", "8", "-e", "16", "-w", "1")...); err != nil || !strings.Contains(out, "# Avg bus bandwidth") {
		t.Errorf("a valid sweep: %v\n%s\n%s", err, out, errs)
	}
}

// TestBenchCollectiveHelp: the help names what each flag takes (no Go
// type names), shows the real defaults, lists every algorithm and spells
// flags as they parse.
func TestBenchCollectiveHelp(t *testing.T) {
	out, _, err := runCLI(t, "bench", "collective", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-b, --minbytes size", "-R, --shared-buffers 0|1", "--algo list", "(default 256M)", "(default 200ms)", "-f, --stepfactor int         size multiplication factor, 2 or more (default 2)",
		"(default 5)", "--np int                 ranks (processes) to launch (default 2)", "auto, ring, hd, tree, rd, hier, pairwise (alltoall), bruck (alltoall), direct (needs -R 1)",
		"powers of 1024", "rounded down to whole elements", "--spin duration", "-1ns", "ring runs direct", "-w, --warmup-iters int"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`Flag\b|github\.com|listFlag|sizeFlag|flag01|--warmup_iters int`), regexp.MustCompile(`[^-]-(shm|coll|op|np|algo|touch|limits)\b`),
		regexp.MustCompile(`-., --.\b`)} { // a long name that is the shorthand again

		if m := bad.FindString(out); m != "" {
			t.Errorf("help has %q:\n%s", m, out)
		}
	}
}

// TestBenchCollectiveWarmupItersAlias: nccl-tests' --warmup_iters still
// works (deprecated: -w is --warmup-iters now), and its notice goes to
// stderr, so that -o json's stdout stays one JSON document.
func TestBenchCollectiveWarmupItersAlias(t *testing.T) {
	out, errs, err := runCLI(t, "bench", "collective", "--np", "1", "--limits", "0", "-b", "8", "-e", "8", "-n", "1", "--warmup_iters", "2", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	var rep struct {
		Options struct {
			Warmup int `json:"warmup"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Options.Warmup != 2 {
		t.Errorf("stdout is not the JSON of -w 2 (%v, warm-up %d):\n%s", err, rep.Options.Warmup, out)
	}
	if !strings.Contains(errs, "--warmup_iters has been deprecated, use --warmup-iters (or -w)") {
		t.Errorf("stderr has no deprecation notice naming --warmup-iters:\n%s", errs)
	}
	if _, errs, err := runCLI(t, "bench", "collective", "--np", "1", "--limits", "0", "-b", "8", "-e", "8", "-n", "1", "--warmup-iters", "2"); err != nil || strings.Contains(errs, "deprecated") {
		t.Errorf("--warmup-iters 2: %v\n%s", err, errs)
	}
}
