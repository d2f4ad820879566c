package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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
