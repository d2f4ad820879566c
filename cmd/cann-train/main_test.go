package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/cann-train/cann-train/dev"
)

// childArgsEnv makes this test binary act as `cann-train <args>`, so tests
// start real worker processes without building the binary first.
const childArgsEnv = "CANN_TRAIN_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgsEnv); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, "bad", childArgsEnv, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		root := newRootCmd(&env{out: os.Stdout, err: os.Stderr, command: childCommand})
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "cann-train:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Tests dial servers of their own: a Temporal client configuration of
	// the developer's (TLS, an API key, a profile) must not reach them. A
	// test that wants one sets it.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TEMPORAL_") {
			os.Unsetenv(k)
		}
	}
	os.Setenv("TEMPORAL_CONFIG_FILE", os.DevNull)
	os.Exit(m.Run())
}

// childCommand runs `cann-train <args>` as a child process of the test.
var childCommand dev.CommandFunc = func(args ...string) *exec.Cmd {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childArgsEnv + "=" + string(raw)}
	return cmd
}
