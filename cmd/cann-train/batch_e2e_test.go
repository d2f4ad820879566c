package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// TestCarbonBatchControllerRealRun (issue 6, the batch controller, on the
// real server with node worker processes): on a grid at 500 g/kWh against
// a 200 g/kWh threshold the run shrinks its global batch at every
// boundary (64 → 48 → 36 → 32, the floor) with the learning rate; a node
// SIGKILLed after the second change rewinds to the checkpoint before it,
// the redone steps train the recorded batches, and the weights are
// bit-identical to a fault-free run with the controller — and differ from
// a run without it, so the schedule reached the engine.
func TestCarbonBatchControllerRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Minute)
	trace := writeZoneTrace(t, dir, now.Add(-time.Hour), now.Add(2*time.Hour), time.Minute, func(time.Time) int { return 500 })
	metrics, err := workers.ServeMetrics("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = metrics.Close(context.Background()) })
	c, l, addr := startInProcessControlWith(ctx, t, dir, controlSetup{metrics: metrics.Handler}, "node-1", "node-2", "node-3")
	// A budget the first priced chunk exceeds: the alert's metric too.
	green := &spec.GreenPolicy{Trace: trace, Zone: "Z", Forecast: spec.ForecastPerfect, Deadline: spec.Duration(time.Hour),
		Work: spec.Duration(time.Minute), Batch: &spec.BatchControl{ThresholdG: 200}, BudgetG: 1e-3}
	run := func(name string, g *spec.GreenPolicy, kill bool) spec.RunStatus {
		s := spec.RunSpec{Name: name, Nodes: 2, Steps: 300, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(3 * time.Second),
			Green: g}.WithDefaults()
		r := startRun(ctx, t, c, workflows.RunInput{Spec: s})
		if kill {
			faultKill(ctx, t, addr, name, "node-2", 250)
		}
		var st spec.RunStatus
		if err := r.Get(ctx, &st); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("%s: %v", name, err)
		}
		if st.Phase != spec.PhaseCompleted || st.Step != 300 {
			t.Fatalf("%s: %s at step %d", name, st.Phase, st.Step)
		}
		if kill {
			recordHistory(t, fetchHistory(ctx, t, c, r.GetID()), "trainingrun_batch.json")
		}
		return st
	}
	killed := run("batch-killed", green, true)
	if len(killed.Recoveries) != 1 || killed.Recoveries[0].ResumeStep != 200 {
		t.Fatalf("recoveries %+v, want one, back to the checkpoint at 200", killed.Recoveries)
	}
	g := killed.Green
	if g == nil || g.Batch != 32 || len(g.Schedule) != 3 || g.LearningRate != 2e-3*32/64 {
		t.Fatalf("batch controller status %+v: want global batch 32 (lr %g) after 3 changes", g, 2e-3*32/64)
	}
	var out bytes.Buffer
	printGreen(&out, g, false, time.Now())
	if !strings.Contains(out.String(), "global batch 32, learning rate 0.001 (carbon controller, threshold 200 g/kWh); 3 change(s)") {
		t.Errorf("status output:\n%s", out.String())
	}
	clean := run("batch-clean", green, false)
	if clean.WeightsSHA256 != killed.WeightsSHA256 {
		t.Errorf("weights after the kill %s differ from the fault-free run's %s", killed.WeightsSHA256, clean.WeightsSHA256)
	}
	plain := run("batch-off", &spec.GreenPolicy{Trace: trace, Zone: "Z", Forecast: spec.ForecastPerfect, Deadline: spec.Duration(time.Hour),
		Work: spec.Duration(time.Minute)}, false)
	if plain.WeightsSHA256 == clean.WeightsSHA256 {
		t.Error("the same weights without the batch controller: the schedule did not reach the engine")
	}

	// The control worker's Prometheus endpoint: the runs' gauges and the
	// budget alert, and the SDK's own metrics.
	text := scrape(t, metrics.URL)
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cann_train_global_batch", []string{`run="run/batch-clean"`}, 32},
		{"cann_train_step", []string{`run="run/batch-clean"`}, 300},
		{"cann_train_step", []string{`run="run/batch-off"`}, 300},
		{"cann_train_run_active", []string{`run="run/batch-off"`}, 0}, // (ended: its series stay)
		{"cann_train_carbon_budget_alerts_total", []string{`run="run/batch-clean"`, `level="exceeded"`}, 1},
		{"cann_train_carbon_grams", []string{`run="run/batch-clean"`}, clean.Green.Grams},
	} {
		if got, ok := metricValue(text, m.name, m.labels...); !ok || got != m.want {
			t.Errorf("%s%v = %v (found %v), want %v:\n%s", m.name, m.labels, got, ok, m.want, grep(text, m.name))
		}
	}
	if _, ok := metricValue(text, "cann_train_global_batch", `run="run/batch-off"`); ok {
		t.Error("a run without the batch controller reports a batch")
	}
	if _, ok := metricValue(text, "temporal_workflow_completed_total"); !ok {
		t.Error("no SDK metrics")
	}
}

// scrape reads the Prometheus text at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metricValue finds the sample of Prometheus text metric name whose
// labels include every one given, and returns its value.
func metricValue(text, name string, labels ...string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, name+"{")
		if !ok {
			continue
		}
		match := true
		for _, lb := range labels {
			match = match && strings.Contains(rest, lb)
		}
		if f := strings.Fields(rest); match && len(f) > 0 {
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// grep returns the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
