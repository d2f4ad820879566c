package main

import (
	"slices"
	"strings"
	"testing"
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
