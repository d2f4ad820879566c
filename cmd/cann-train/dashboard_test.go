package main

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/cann-train/cann-train/spec"
)

func TestDashboardQuery(t *testing.T) {
	base := "WorkflowType = 'TrainingRun' AND ExecutionStatus != 'ContinuedAsNew'"
	for _, tc := range []struct{ user, want string }{
		{"", base},
		{"  ", base},
		{"CannStatus = 'training'", base + " AND (CannStatus = 'training')"},
		{"CannModel = 'a' OR CannModel = 'b'", base + " AND (CannModel = 'a' OR CannModel = 'b')"},
	} {
		if got := dashboardQuery(tc.user); got != tc.want {
			t.Errorf("dashboardQuery(%q) = %q, want %q", tc.user, got, tc.want)
		}
	}
}

// A row reads the search attributes TrainingRun upserts, whatever their
// payload encoding, and ignores a malformed one.
func TestDashboardRowFromVisibility(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	payload := func(v any) *commonpb.Payload {
		p, err := dc.ToPayload(v)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sa := map[string]*commonpb.Payload{
		spec.SearchAttrModel: payload("mlp-mnist"), spec.SearchAttrNodes: payload(int64(3)),
		spec.SearchAttrStep: payload(int64(400)), spec.SearchAttrStatus: payload(string(spec.PhasePaused)),
		spec.SearchAttrStrategy: payload([]byte{0xff}), // not a string: left empty
	}
	r := rowFromVisibility(&commonpb.WorkflowExecution{WorkflowId: "run/a", RunId: "r1"},
		enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, start, sa)
	want := dashboardRow{WorkflowID: "run/a", RunID: "r1", Execution: "running", Status: spec.PhasePaused,
		Model: "mlp-mnist", Nodes: 3, Step: 400, StartedAt: start}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("row %+v, want %+v", r, want)
	}
	r.addStatus(spec.RunStatus{RunID: "run/a", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2"},
		Step: 400, TotalSteps: 1000, Loss: 0.5, SamplesPerSec: 100, Green: &spec.GreenStatus{Grams: 12.5},
		StartedAt: start.Add(-time.Hour)},
		&spec.ChunkProgress{Step: 450, Loss: 0.4, SamplesPerSec: 60})
	if r.Step != 450 || r.Loss != 0.4 || r.SamplesPerSec != 120 || r.Nodes != 2 || r.Steps != 1000 || r.CarbonGrams != 12.5 {
		t.Errorf("with status and a heartbeat ahead of it: %+v", r)
	}
	// The run started before its current execution (continued as new).
	if !r.StartedAt.Equal(start.Add(-time.Hour)) {
		t.Errorf("started %v, want the status's %v", r.StartedAt, start.Add(-time.Hour))
	}
	// A slow node is the detail of a run that has none of its own.
	slow := []spec.SlowNode{{NodeID: "n2", Factor: 2.04, Chunks: 3, Since: 200}}
	for _, tc := range []struct{ detail, want string }{
		{"", "slow: n2 2.0×"},
		{"paused at step 400", "paused at step 400"},
	} {
		r.addStatus(spec.RunStatus{Phase: spec.PhaseTraining, Nodes: []string{"n1", "n2"}, SlowNodes: slow, Detail: tc.detail}, nil)
		if r.Detail != tc.want || !slices.Equal(r.SlowNodes, []string{"n2"}) {
			t.Errorf("detail %q, slow nodes %v; want %q, [n2]", r.Detail, r.SlowNodes, tc.want)
		}
	}
}

func TestPrintDashboard(t *testing.T) {
	var b bytes.Buffer
	if err := printDashboard(&b, nil, ""); err != nil || !strings.Contains(b.String(), "no training runs") {
		t.Errorf("empty: %q %v", b.String(), err)
	}
	b.Reset()
	if err := printDashboard(&b, nil, "CannStatus = 'running'"); err != nil ||
		!strings.Contains(b.String(), "no training runs match CannStatus = 'running' (CannStatus is the phase: acquiring, training,") {
		t.Errorf("empty, with a query: %q %v", b.String(), err)
	}
	b.Reset()
	rows := []dashboardRow{
		{WorkflowID: "run/a", Execution: "running", Status: spec.PhaseTraining, Model: "m", Nodes: 2, TargetNodes: 3, Step: 5, Steps: 10, Loss: 0.25},
		{WorkflowID: "run/b", Execution: "failed", Detail: strings.Repeat("x", 100)},
		{WorkflowID: "run/c", Execution: "running", Unread: "query: no worker"},
		{WorkflowID: "run/d", Execution: "failed", Status: spec.PhaseFailed},
		{WorkflowID: "run/e", Execution: "terminated", Status: spec.PhaseTraining},
		{WorkflowID: "run/f", Execution: "canceled", Status: spec.PhaseCancelled, Detail: "cancelled at step 40"},
	}
	if err := printDashboard(&b, rows, ""); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "RUN") {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, want := range []string{"a  ", "b  ", "c  ", "d  ", "e  ", "f  "} {
		if !strings.HasPrefix(lines[i+1], want) {
			t.Errorf("row %d %q: want the run name without run/", i, lines[i+1])
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 5 || f[3] != "2/3" || f[4] != "5/10" || !strings.Contains(lines[1], "0.2500") {
		t.Errorf("running row %q: want 2/3 nodes (shrunk, growing back), 5/10 steps", lines[1])
	}
	if !strings.Contains(lines[2], "failed") || !strings.Contains(lines[2], "...") {
		t.Errorf("failed row %q: want its execution status and a shortened detail", lines[2])
	}
	if !strings.Contains(lines[3], "status unreadable: query: no worker") {
		t.Errorf("unreadable row %q", lines[3])
	}
	if f := strings.Fields(lines[4]); len(f) < 2 || f[1] != "failed" {
		t.Errorf("failed run's row %q: want its status once", lines[4])
	}
	if f := strings.Fields(lines[5]); len(f) < 2 || f[1] != "training/terminated" {
		t.Errorf("terminated run's row %q: want where it was and how it ended", lines[5])
	}
	if f := strings.Fields(lines[6]); len(f) < 2 || f[1] != "cancelled" {
		t.Errorf("cancelled run's row %q: want its status once", lines[6])
	}
}
