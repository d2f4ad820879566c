package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
)

// TestNodeNPUs: a node worker given no --npu-ids names npu-smi's healthy
// chips by device id, as topo-scan does (an unhealthy one left out, an
// A3's Phy-IDs); none without npu-smi, or when it fails (said in the log).
func TestNodeNPUs(t *testing.T) {
	info910b, infoA3 := npuSmiSamples(t)
	// Chips 0 and 3 (the second row renumbered), 0 then Critical.
	chips03 := strings.Replace(string(info910b), "| 1     910B1", "| 3     910B1", 1)
	sick0 := strings.Replace(chips03, "| OK ", "| Critical ", 1)
	for _, tc := range []struct {
		name string
		out  string
		err  error
		want []int
		warn bool
	}{
		{"chips 0 and 3", chips03, nil, []int{0, 3}, false},
		{"chip 0 unhealthy", sick0, nil, []int{3}, false},
		{"A3 phy ids", string(infoA3), nil, []int{0, 1}, false}, // (NPU 0's two dies)
		{"no npu-smi", "", exec.ErrNotFound, nil, false},
		{"npu-smi fails", "", errors.New("exit status 1: dcmi error"), nil, true},
		{"not a table", "npu-smi: driver not loaded\n", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			run := func(context.Context, string, ...string) ([]byte, error) { return []byte(tc.out), tc.err }
			got := nodeNPUs(context.Background(), run, zap.New(core))
			if !slices.Equal(got, tc.want) {
				t.Errorf("npu ids %v, want %v", got, tc.want)
			}
			warned := logs.FilterLevelExact(zap.WarnLevel).Len() > 0
			if warned != tc.warn {
				t.Errorf("warned %v, want %v: %v", warned, tc.warn, logs.All())
			}
		})
	}
}

// TestNodeWorkerNPUIDsFlag: --npu-ids with a repeated, negative or too
// large id stops the node worker before it starts.
func TestNodeWorkerNPUIDsFlag(t *testing.T) {
	t.Setenv("CANN_TRAIN_HOME", t.TempDir())
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	for _, tc := range []struct {
		ids, want string
	}{
		{"2,2", "--npu-ids: 2 given twice"},
		{"0,-1", "--npu-ids: -1 out of range 0..1023"},
		{"1024", "--npu-ids: 1024 out of range"},
		{"a", "npu-ids"},
	} {
		// (Were it taken, the worker would wait for a Temporal server: the
		// deadline ends it.)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
		root.SetArgs([]string{"worker", "node", "--id", "n1", "--npu-ids", tc.ids})
		err := root.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--npu-ids %s: %v; want %q", tc.ids, err, tc.want)
		}
	}
	if err := checkNPUIDs([]int{4, 6, 7}); err != nil {
		t.Error(fmt.Errorf("4,6,7: %w", err))
	}
}

// TestNodeWorkerAddressFlagsRefusedAtOnce: a --comm-advertise peers could
// not dial (no port, a wildcard that each would dial as its own host) and
// a malformed --rendezvous-ports stop `worker node` before it waits for
// Temporal.
func TestNodeWorkerAddressFlagsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	node := []string{"worker", "node", "--id", "n1", "--work-dir", filepath.Join(dir, "work"), "--address", "127.0.0.1:1", "--env-config=false"}
	for _, tc := range []struct {
		args []string
		want string
		env  string // HCCL_SOCKET_IFNAME
	}{
		{[]string{"--comm-listen", "0.0.0.0:17320", "--comm-advertise", "0.0.0.0:17320"},
			`--comm-advertise "0.0.0.0:17320" is a wildcard address: peers would dial their own host`, ""},
		{[]string{"--comm-advertise", "10.77.0.13"}, `--comm-advertise "10.77.0.13": want HOST:PORT`, ""},
		{[]string{"--comm-advertise", "10.77.0.13:0"}, `want a number 1..65535`, ""},
		{[]string{"--rendezvous-ports", "29699-29600"}, "--rendezvous-ports 29699-29600: the range ends before it starts", ""},
		{[]string{"--rendezvous-ports", "29600:29699"}, `--rendezvous-ports "29600:29699": want LO-HI`, ""},
		{[]string{"--comm-interface", "=no-such-if0"}, `--comm-interface "=no-such-if0" selects no interface that is up with an address; this host has lo (`, ""},
		{[]string{"--comm-interface", "=lo", "--comm-advertise", "10.77.0.13:29500"}, `--comm-interface "=lo" and --comm-advertise 10.77.0.13:29500 both say which address peers dial`, ""},
		// HCCL_SOCKET_IFNAME stands for --comm-interface; the address flags set it aside.
		{[]string{"--rendezvous-ports", "1-0"}, `HCCL_SOCKET_IFNAME "=no-such-if1" selects no interface`, "=no-such-if1"},
		{[]string{"--comm-advertise", "10.77.0.13:29500", "--rendezvous-ports", "1-0"}, "--rendezvous-ports 1-0: the range ends before it starts", "=no-such-if1"},
		{[]string{"--comm-listen", "0.0.0.0:0", "--rendezvous-ports", "1-0"}, "--rendezvous-ports 1-0: the range ends before it starts", "=no-such-if1"},
	} {
		t.Setenv(workers.CommInterfaceEnv, tc.env)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
		root.SetArgs(append(append([]string{}, node...), tc.args...))
		err := root.ExecuteContext(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
			t.Errorf("%v: %v (context: %v); want %q at once", tc.args, err, ctx.Err(), tc.want)
		}
		cancel()
	}
}

// TestNodeWorkerExampleURLPastes: `worker node --help`'s example pastes
// into a shell as one command — its s3 URL quoted (unquoted, & sent the
// command to the background and ? globbed) — with the region MinIO needs
// (else requests are signed for an empty one), and its flags parse.
func TestNodeWorkerExampleURLPastes(t *testing.T) {
	cmd, _, err := newRootCmd(&env{out: io.Discard, err: io.Discard}).Find([]string{"worker", "node"})
	if err != nil {
		t.Fatal(err)
	}
	ex := strings.ReplaceAll(cmd.Example, "\\\n", " ")
	_, rest, ok := strings.Cut(ex, "--checkpoint-url ")
	if !ok {
		t.Fatalf("no --checkpoint-url in the example:\n%s", cmd.Example)
	}
	if !strings.HasPrefix(rest, "'") || strings.Count(rest, "'") < 2 {
		t.Fatalf("the example's URL is not quoted: %s", rest)
	}
	url := strings.Split(rest, "'")[1]
	if err := spec.CheckBucketURL(url); err != nil || !strings.Contains(url, "region=") {
		t.Errorf("example URL %s: %v; want a valid URL naming its region", url, err)
	}
	for _, line := range strings.Split(cmd.Example, "\n") {
		if strings.Contains(line, "&") && !strings.Contains(line, "'") {
			t.Errorf("an unquoted & in the example: %s", line)
		}
	}
	var args []string
	for _, f := range strings.Fields(strings.ReplaceAll(ex, "'", "")) {
		if f != "cann-train" && f != "worker" && f != "node" && !strings.HasPrefix(f, "#") {
			args = append(args, f)
		}
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Errorf("the example's flags: %v", err)
	}
}
