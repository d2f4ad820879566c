package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBenchCompressionJSON runs `bench compression -o json` for a few
// steps and checks the fields the acceptance reads, and the SVG.
func TestBenchCompressionJSON(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "loss.svg")
	out, errs, err := runCLI(t, "bench", "compression", "--optimizer", "onebit-adam", "--ranks", "2", "--steps", "20", "--freeze-step", "4", "-o", "json", "--svg", svg)
	if err != nil {
		t.Fatalf("bench compression: %v\n%s", err, errs)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"traffic_reduction", "final_loss_gap_pct", "tail_loss_gap_pct"} {
		if _, ok := res[k].(float64); !ok {
			t.Errorf("field %s is %v, want a number", k, res[k])
		}
	}
	if res["optimizer"] != "onebit-adam" || res["codec"] != "sign:1024" || res["freeze_step"] != 4.0 {
		t.Errorf("settings: optimizer %v, codec %v, freeze_step %v", res["optimizer"], res["codec"], res["freeze_step"])
	}
	if r, _ := res["traffic_reduction"].(float64); r < 4 { // 4 dense steps, 16 at ≈ 30×: ≈ 4.4×
		t.Errorf("traffic_reduction %v, want ≥ 4", r)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(b), "<polyline") {
		t.Errorf("SVG: %v, %d bytes", err, len(b))
	}
	if _, _, err := runCLI(t, "bench", "compression", "--exchange", "pigeon", "--steps", "2"); err == nil {
		t.Error("an unknown exchange was accepted")
	}
}

// TestBenchOverlapJSON runs `bench overlap -o json` for a few steps of a
// small model and checks the fields the acceptance reads.
func TestBenchOverlapJSON(t *testing.T) {
	out, errs, err := runCLI(t, "bench", "overlap", "--ranks", "2", "--steps", "4", "--warmup", "1", "--hidden", "16,64",
		"--bucket-bytes", "8192", "--first-bucket-bytes", "1024", "-o", "json")
	if err != nil {
		t.Fatalf("bench overlap: %v\n%s", err, errs)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"hidden_comm_pct", "comm_share_pct", "overlap_efficiency_pct", "speedup"} {
		if _, ok := res[k].(float64); !ok {
			t.Errorf("field %s is %v, want a number", k, res[k])
		}
	}
	for _, run := range []string{"serial", "overlapped"} {
		r, _ := res[run].(map[string]any)
		if s, _ := r["step_ms"].(float64); !(s > 0) {
			t.Errorf("%s step_ms %v", run, r["step_ms"])
		}
		if c, _ := r["chunks"].([]any); len(c) == 0 {
			t.Errorf("%s has no chunks", run)
		}
	}
	if h, _ := res["hidden_comm_pct"].(float64); h < 0 || h > 100 {
		t.Errorf("hidden_comm_pct %v", h)
	}
	// --warmup 0 times every step: the first chunk is step 0 (trainbench's
	// own 0 is "the default", 3).
	table, _, err := runCLI(t, "bench", "overlap", "--ranks", "2", "--steps", "2", "--warmup", "0", "--hidden", "8")
	if err != nil || !strings.Contains(table, "hidden_comm_pct") || !regexp.MustCompile(`(?m)^serial +0-0 `).MatchString(table) {
		t.Errorf("table output (want a first row of serial step 0-0): %v\n%s", err, table)
	}
}

// TestBenchCompressionSVGFirst: the --svg file is created before the
// training (minutes at the README's --steps 2000), so a path that cannot
// be written fails at once; a training that fails leaves no empty file.
// A cancelled context stands for a training that would fail or take long.
func TestBenchCompressionSVGFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	bad := filepath.Join(t.TempDir(), "missing", "loss.svg")
	_, _, err := runCLIContext(t, ctx, "bench", "compression", "--steps", "20", "--svg", bad)
	if err == nil || !strings.HasPrefix(err.Error(), "--svg: open "+bad) {
		t.Errorf("--svg in a missing directory: %v, want the SVG's error before any training", err)
	}
	good := filepath.Join(t.TempDir(), "loss.svg")
	_, _, err = runCLIContext(t, ctx, "bench", "compression", "--steps", "20", "--svg", good)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled training: %v", err)
	}
	if _, serr := os.Stat(good); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a failed training left %s (%v)", good, serr)
	}
}

// TestBenchCompressionRefuses: settings that would leave nothing
// compressed, or be ignored, are refused before training.
func TestBenchCompressionRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "20", "--warmup", "20"}, "--warmup 20: want fewer than --steps 20"},
		{[]string{"--steps", "20", "--optimizer", "onebit-adam", "--freeze-step", "50"}, "--freeze-step 50: want fewer than --steps 20"},
		{[]string{"--steps", "20", "--link-gbps", "1"}, `--link-gbps is the link --codec auto decides for: give --codec auto (not "")`},
	} {
		out, _, err := runCLI(t, append([]string{"bench", "compression"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("%v: %v, want %q before training\n%s", tc.args, err, tc.want, out)
		}
	}
}
