package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestArgumentErrors: a wrong command line fails (no help on stdout and a
// zero exit) and says what is wrong: an unknown subcommand of a group, with
// near names; a missing argument by its usage name; one too many; a job
// file given without -f; an unknown flag, with near names; a mem:// bucket, which only its writer can read;
// the controls' flags. No server is needed: all fail before dialling (the
// address is one nothing listens on).
func TestArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"checkpoint", "lst", "r"}, []string{`unknown command "lst" for "cann-train checkpoint"`, "did you mean ls?"}},
		// (before the quickstart starts a server)
		{[]string{"quickstart", "--metrics-listen", "nothost:99999", "--port", "0", "--ui-port", "0"}, []string{"--metrics-listen nothost:99999: ", "invalid port"}},
		{[]string{"green", "foo"}, []string{`unknown command "foo" for "cann-train green"`, "'cann-train green --help' lists its commands"}},
		{[]string{"worker", "nod"}, []string{`unknown command "nod"`, "did you mean node?"}},
		{[]string{"bench", "colective"}, []string{"did you mean collective?"}},
		{[]string{"fault", "kil"}, []string{"did you mean kill?"}},
		{[]string{"statu", "r"}, []string{`unknown command "statu" for "cann-train"`}},
		{[]string{"search", "--list-preset"}, []string{"unknown flag: --list-preset (did you mean --list-presets?)"}},
		{[]string{"pause", "r", "--wiat", "1m"}, []string{"unknown flag: --wiat (did you mean --wait?)"}},
		{[]string{"status", "r", "--adress=x"}, []string{"unknown flag: --adress (did you mean --address?)"}}, // an inherited flag
		{[]string{"run", "--zzzz"}, []string{"unknown flag: --zzzz ('cann-train run --help' lists its flags)"}},
		{[]string{"status"}, []string{"status needs RUN", "usage: cann-train status RUN"}},
		{[]string{"status", "a", "b"}, []string{`"b" is one too many`}},
		{[]string{"nodes", "drain"}, []string{"nodes drain needs NODE"}},
		{[]string{"green", "report"}, []string{"green report needs RUN"}},
		{[]string{"scale"}, []string{"scale needs RUN"}},
		{[]string{"scale", "a", "2", "3"}, []string{"at most 2 argument(s)", `"3" is one too many`}},
		{[]string{"run", "job.yaml"}, []string{`run takes no arguments, got "job.yaml"; a job file is given with -f`}},
		{[]string{"dashboard", "x"}, []string{`dashboard takes no arguments, got "x" (usage`}},
		{[]string{"checkpoint", "verify", "r", "--url", "mem://"}, []string{"bucket mem:// is the memory of the process that wrote it"}},
		{[]string{"quickstart", "--nodes", "0"}, []string{"--nodes 0: want at least 1"}},
		{[]string{"quickstart", "--steps", "0"}, []string{"--steps 0: want at least 1"}},
		{[]string{"quickstart", "--spares", "-1"}, []string{"--spares -1: want 0 or more"}},
		// Numeric flags out of range (bounded), 0 included where it would
		// read as the default, checked before anything runs.
		{[]string{"quickstart", "--ui-port", "-2", "--port", "70000"}, []string{"--port 70000: want 0..65535; --ui-port -2: want -1..65535"}},
		{[]string{"dev", "--port", "-5"}, []string{"--port -5: want 0..65535"}},
		{[]string{"bench", "compression", "--ranks", "0"}, []string{"--ranks 0: want at least 2"}},
		{[]string{"bench", "overlap", "--steps", "0"}, []string{"--steps 0: want at least 1"}},
		{[]string{"bench", "overlap", "--ranks", "1"}, []string{"--ranks 1: one rank has nothing to overlap"}},
		{[]string{"bench", "collective", "--ranks", "-1"}, []string{"--ranks -1: want at least 1"}},
		{[]string{"bench", "recovery", "--heartbeat-timeout", "500ms"}, []string{"--heartbeat-timeout 500ms: want at least 1s"}},
		{[]string{"dashboard", "--limit", "0", "--every", "-1s"}, []string{"--every -1s: want a positive duration; --limit 0: want at least 1"}},
		{[]string{"checkpoint", "gc", "r", "--keep-last", "0"}, []string{"--keep-last 0: want at least 1"}},
		{[]string{"checkpoint", "gc", "r", "--keep-every", "-5"}, []string{"--keep-every -5: want 0 or more"}},
		{[]string{"topo-scan", "--budget", "0s"}, []string{"--budget 0s: want a positive duration"}},
		{[]string{"worker", "node", "--id", "x", "--lease-every", "0s"}, []string{"--lease-every 0s: want a positive duration"}},
		{[]string{"worker", "node", "--id", "a b"}, []string{"--id: "}},
		{[]string{"fault", "kill", "--run", "r", "--node", "node-1", "--at-step", "-4"}, []string{"--at-step -4: want at least 1"}},
		// Controls: flags checked before any connection.
		{[]string{"scale", "r"}, []string{"how many nodes? scale RUN N or scale RUN --nodes N"}},
		{[]string{"scale", "r", "--nodes", "0"}, []string{"--nodes 0: want 1..1024"}},
		{[]string{"scale", "r", "0"}, []string{"node count 0: want 1..1024"}},
		{[]string{"scale", "r", "four"}, []string{`node count "four": want a number`}},
		{[]string{"scale", "r", "4", "--nodes", "4"}, []string{"give the node count once"}},
		{[]string{"scale", "r", "4", "5"}, []string{`scale takes at most 2 argument(s), got 3: "5" is one too many`}},
		{[]string{"pause"}, []string{"pause needs RUN"}},
		{[]string{"resume", "a", "b"}, []string{`resume takes at most 1 argument(s), got 2: "b" is one too many`}},
		{[]string{"green", "override", "r", "--clear", "--for", "1h"}, []string{"--clear takes neither"}},
		{[]string{"green", "override", "r", "--for", "1h", "--until", "2026-01-01T00:00:00Z"}, []string{"not both"}},
		{[]string{"green", "override", "r", "--until", "tomorrow"}, []string{"RFC 3339"}},
		{[]string{"green", "override", "r", "--for", "0s"}, []string{"--for 0s: want a positive duration"}},
		{[]string{"pause", "r", "--wait", "-1s"}, []string{"--wait -1s: want 0 or more"}},
		{[]string{"cancel", "r", "--wait", "-1s"}, []string{"--wait -1s: want 0 or more"}},
		{[]string{"green", "override", "r", "--until", "2020-01-01T00:00:00Z"}, []string{"--until 2020-01-01T00:00:00Z has passed"}},
		{[]string{"green", "report", "r", "-o", "yaml"}, []string{"allowed"}},
		{[]string{"bench", "recovery", "--checkpoint-every", "0"}, []string{"--checkpoint-every 0: want at least 1"}},
		{[]string{"bench", "recovery", "--nodes", "1"}, []string{"--nodes 1: want at least 2"}},
		{[]string{"bench", "recovery", "--chunk-steps", "-5"}, []string{"--chunk-steps -5: want at least 1"}},
		{[]string{"bench", "recovery", "--steps", "100"}, []string{"--steps 100: want at least 3 × --checkpoint-every (150)"}},
		{[]string{"bench", "strategy", "--reps", "0"}, []string{"--reps 0: want at least 1"}},
		{[]string{"bench", "overlap", "--hidden", "64,0"}, []string{"--hidden [64 0]: layer 2 is 0 wide; want 1..65536"}},
		{[]string{"bench", "compression", "--codec", "powersgd:0"}, []string{`powersgd rank "0": want a positive integer`}},
		{[]string{"bench", "collective", "--ranks", "2", "--np", "3"}, []string{"--ranks 2 and --np 3: give the number of ranks once"}},
		{[]string{"bench", "collective", "--ranks", "2", "--algo", "pairwise", "-e", "64"}, []string{"--algo pairwise implements none of the collectives asked for"}},
		{[]string{"green", "report", "r", "--trace-start", "March"}, []string{`--trace-start "March": want RFC 3339, a date`}},
		{[]string{"dev", "--port", "0", "--server-log-level", "loud"}, []string{`--server-log-level: log level "loud"`}},
		{[]string{"worker", "node", "--id", "n", "--checkpoint-gc-grace", "0s"}, []string{"--checkpoint-gc-grace 0s: want at least 1s"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
			root.SetArgs(append(tc.args, "--address", "127.0.0.1:1"))
			err := root.Execute()
			if err == nil {
				t.Fatalf("no error; stdout:\n%s", out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// A group alone still shows its commands.
	var out bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &out, command: childCommand})
	root.SetArgs([]string{"checkpoint"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("checkpoint alone: %v\n%s", err, out.String())
	}
	// `checkpoint list` is `checkpoint ls`.
	root = newRootCmd(&env{out: &out, err: &out, command: childCommand})
	if c, _, err := root.Find([]string{"checkpoint", "list", "r"}); err != nil || c.Name() != "ls" {
		t.Errorf("checkpoint list finds %v, %v", c, err)
	}
}

// TestFlagUsageNamesNoType: pflag shows a back-quoted word in a flag's
// usage as its value's name ("--ui cann-train dev" in --help); no flag's
// usage quotes that way.
func TestFlagUsageNamesNoType(t *testing.T) {
	eachCommand(newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand}), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a back quote (help would read it as the value's name)", c.CommandPath(), f.Name, f.Usage)
			}
		})
	})
}

// eachCommand calls fn on c and every command below it.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		eachCommand(sub, fn)
	}
}
