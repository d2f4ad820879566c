package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
)

// TestBenchStrategyJSON runs `bench strategy --codec int8` for one short
// repetition on two node processes: the plan's prediction (the real nodes
// timed the codec, the planner priced its exchange) and a fixed run's
// measurement for both degrees, the choice among them. (The uncompressed
// plan on real nodes: TestStrategyAutoRealRun.)
func TestBenchStrategyJSON(t *testing.T) {
	out, errs, err := runCLI(t, "bench", "strategy", "--nodes", "2", "--reps", "1", "--steps", "200", "-o", "json",
		"--codec", "int8", "--data-dir", t.TempDir())
	if err != nil {
		t.Fatalf("bench strategy: %v\n%s", err, errs)
	}
	var b StrategyBench
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if b.Nodes != 2 || b.GlobalBatch != 64 || len(b.Choices) != 1 || len(b.AutoMeasured) != 1 || len(b.Candidates) != 2 || b.Codec != "int8" {
		t.Fatalf("result %+v", b)
	}
	for _, c := range b.Candidates {
		if len(c.Predicted) != 1 || len(c.Measured) != 1 || !(c.PredictedMedian > 0) || !(c.MeasuredMedian > 0) ||
			c.Ratio != c.MeasuredMedian/c.PredictedMedian || c.Skipped != "" {
			t.Errorf("candidate %+v", c)
		}
		// Communication per step: none on one rank; on two, the plan's
		// and the run's, both positive and well below a step.
		wantComm := 0
		if c.Ranks > 1 {
			wantComm = 1
		}
		if len(c.Straggle) != 1 || len(c.Oversubscription) != 1 || !(c.Oversubscription[0] >= 1) {
			t.Errorf("%d rank(s): straggle %v, oversubscription %v: want one factor each per repetition", c.Ranks, c.Straggle, c.Oversubscription)
		}
		if len(c.Codecs) != wantComm || wantComm == 1 && (c.Codecs[0] != "int8:256" || !(c.PredictedCodecUs[0] > 0 && c.PredictedCodecUs[0] < c.PredictedCommUs[0])) {
			t.Errorf("%d rank(s): priced codecs %v, encoding %v µs of %v", c.Ranks, c.Codecs, c.PredictedCodecUs, c.PredictedCommUs)
		}
		if len(c.PredictedCommUs) != wantComm || len(c.MeasuredCommUs) != wantComm {
			t.Errorf("%d rank(s): allreduce µs per step predicted %v, measured %v", c.Ranks, c.PredictedCommUs, c.MeasuredCommUs)
		} else if wantComm == 1 {
			step := 1e6 / c.MeasuredMedian
			if !(c.PredictedCommMedian > 0 && c.MeasuredCommMedian > 0 && c.MeasuredCommMedian < step) {
				t.Errorf("2 ranks: allreduce %.0f µs predicted, %.0f measured, of a %.0f µs step", c.PredictedCommMedian, c.MeasuredCommMedian, step)
			}
		}
	}
	if b.Choice != b.Choices[0] || b.Fastest < 1 || b.Fastest > 2 || !(b.ChoiceVsFastest > 0 && b.ChoiceVsFastest <= 1) {
		t.Errorf("choice %d (of %v), fastest %d, %.2f× the fastest", b.Choice, b.Choices, b.Fastest, b.ChoiceVsFastest)
	}
	if _, _, err := runCLI(t, "bench", "strategy", "--reps", "0"); err == nil {
		t.Error("--reps 0 was accepted")
	}
	if _, _, err := runCLI(t, "bench", "strategy", "--codec", "zip", "--data-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "compression.codec") {
		t.Errorf("--codec zip: %v", err)
	}
}

func TestStrategyBenchSummarize(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		choices               []int
		measured              [][]float64 // per degree
		fastest, choice       int
		choiceVsFastest, rat0 float64
	}{
		{"the choice is the fastest", []int{2, 2, 1}, [][]float64{{10, 30, 20}, {40, 50, 60}}, 2, 2, 1, 20.0 / 10},
		{"a tie between choices goes to fewer ranks", []int{2, 1}, [][]float64{{10}, {40}}, 2, 1, 10.0 / 40, 1},
		{"a skipped degree is neither", []int{1}, [][]float64{{10}, nil}, 1, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := StrategyBench{Choices: tc.choices}
			for d, m := range tc.measured {
				b.Candidates = append(b.Candidates, StrategyBenchCandidate{Ranks: d + 1, Predicted: []float64{10}, Measured: m})
			}
			b.summarize()
			if b.Fastest != tc.fastest || b.Choice != tc.choice || b.ChoiceVsFastest != tc.choiceVsFastest || b.Candidates[0].Ratio != tc.rat0 {
				t.Errorf("fastest %d, choice %d, %.3f× the fastest, ratio of 1 rank %.3f; want %d, %d, %.3f, %.3f",
					b.Fastest, b.Choice, b.ChoiceVsFastest, b.Candidates[0].Ratio, tc.fastest, tc.choice, tc.choiceVsFastest, tc.rat0)
			}
		})
	}
}

// cancelOn is a writer that cancels when what it was written contains
// word.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	word   string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.word) {
		w.cancel()
	}
	return n, err
}

// TestBenchStrategyInterrupted: Ctrl-C while a run of `bench strategy`
// goes (here: once the auto run of the first repetition has reported)
// ends the bench as interrupted (exit 130), not as a failure with the
// Temporal SDK's "context canceled".
func TestBenchStrategyInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errw := &cancelOn{word: "repetition 1: plan", cancel: cancel}
	root := newRootCmd(&env{out: io.Discard, err: errw, command: childCommand})
	root.SetArgs([]string{"bench", "strategy", "--nodes", "1", "--reps", "2", "--steps", "100", "--data-dir", t.TempDir()})
	err := root.ExecuteContext(ctx)
	line, _, code := lastWords(err, ctx.Err() != nil)
	if ctx.Err() == nil || code != 130 || line != "cann-train: interrupted" {
		t.Errorf("ends %q, exit %d (%v), want an interruption (130); cancelled: %v\n%s", line, code, err, ctx.Err() != nil, errw.buf.String())
	}
}
