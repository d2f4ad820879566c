package main

import (
	"bytes"
	"strings"
	"testing"
)

// Flag problems are reported before any connection (the address is one
// nothing listens on).
func TestControlFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"scale", "r"}, "how many nodes? scale RUN N or scale RUN --nodes N"},
		{[]string{"scale", "r", "--nodes", "0"}, "--nodes 0: want 1..1024"},
		{[]string{"scale", "r", "0"}, "--nodes 0: want 1..1024"},
		{[]string{"scale", "r", "four"}, `node count "four": want a number`},
		{[]string{"scale", "r", "4", "--nodes", "4"}, "give the node count once"},
		{[]string{"scale", "r", "4", "5"}, `scale takes at most 2 argument(s), got 3: "5" is one too many`},
		{[]string{"pause"}, "pause needs RUN"},
		{[]string{"resume", "a", "b"}, `resume takes at most 1 argument(s), got 2: "b" is one too many`},
		{[]string{"green", "override", "r", "--clear", "--for", "1h"}, "--clear takes neither"},
		{[]string{"green", "override", "r", "--for", "1h", "--until", "2026-01-01T00:00:00Z"}, "not both"},
		{[]string{"green", "override", "r", "--until", "tomorrow"}, "RFC 3339"},
		{[]string{"green", "override", "r", "--until", "2020-01-01T00:00:00Z"}, "--until 2020-01-01T00:00:00Z has passed"},
		{[]string{"green", "report", "r", "-o", "yaml"}, "allowed"},
	} {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append(tc.args, "--address", "127.0.0.1:1"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
