package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	r.StartedExecution = true // (firstStart could not tell)
	r.addStatus(spec.RunStatus{RunID: "run/a", Phase: spec.PhaseTraining, Model: "mlp-mnist", Nodes: []string{"n1", "n2"},
		Step: 400, TotalSteps: 1000, Loss: 0.5, SamplesPerSec: 100, Green: &spec.GreenStatus{Grams: 12.5},
		StartedAt: start.Add(-time.Hour)},
		&spec.ChunkProgress{Step: 450, Loss: 0.4, SamplesPerSec: 60})
	if r.Step != 450 || r.Loss != 0.4 || r.SamplesPerSec != 120 || r.Nodes != 2 || r.Steps != 1000 || r.CarbonGrams != 12.5 ||
		!r.read || r.StartedExecution {
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
	if err := printDashboard(&b, nil, "", 0, 20); err != nil || !strings.Contains(b.String(), "no training runs") {
		t.Errorf("empty: %q %v", b.String(), err)
	}
	b.Reset()
	if err := printDashboard(&b, nil, "CannStatus = 'running'", 0, 20); err != nil ||
		!strings.Contains(b.String(), "no training runs match CannStatus = 'running' (CannStatus is the phase: acquiring, training,") {
		t.Errorf("empty, with a query: %q %v", b.String(), err)
	}
	b.Reset()
	rows := []dashboardRow{
		{WorkflowID: "run/a", Execution: "running", Status: spec.PhaseTraining, Model: "m", Nodes: 2, TargetNodes: 3, Step: 5, Steps: 10, Loss: 0.25, read: true},
		{WorkflowID: "run/b", Execution: "failed", Detail: strings.Repeat("x", 100)},
		{WorkflowID: "run/c", Execution: "running", Unread: "query: no worker"},
		{WorkflowID: "run/d", Execution: "failed", Status: spec.PhaseFailed},
		{WorkflowID: "run/e", Execution: "terminated", Status: spec.PhaseTraining},
		{WorkflowID: "run/f", Execution: "canceled", Status: spec.PhaseCancelled, Detail: "cancelled at step 40"},
	}
	if err := printDashboard(&b, rows, "", 0, 20); err != nil {
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
	if f := strings.Fields(lines[1]); len(f) < 5 || f[3] != "2/3" || f[4] != "5/10" || !strings.Contains(lines[1], " 0.25 ") {
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

// visibilityLister is a visibility store of executions, in its order: it
// pages them by PageSize and counts them (or fails to: countErr), and
// records the page sizes asked for.
type visibilityLister struct {
	infos    []*workflowpb.WorkflowExecutionInfo
	countErr error
	pages    []int32
}

func (v *visibilityLister) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	v.pages = append(v.pages, req.GetPageSize())
	from := 0
	if len(req.GetNextPageToken()) > 0 {
		from, _ = strconv.Atoi(string(req.GetNextPageToken()))
	}
	to := min(from+int(req.GetPageSize()), len(v.infos))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: v.infos[from:to]}
	if to < len(v.infos) {
		resp.NextPageToken = []byte(strconv.Itoa(to))
	}
	return resp, nil
}

func (v *visibilityLister) CountWorkflow(context.Context, *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	if v.countErr != nil {
		return nil, v.countErr
	}
	return &workflowservice.CountWorkflowExecutionsResponse{Count: int64(len(v.infos))}, nil
}

func visibilityInfos(n int) []*workflowpb.WorkflowExecutionInfo {
	infos := make([]*workflowpb.WorkflowExecutionInfo, n)
	for i := range infos {
		infos[i] = &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: fmt.Sprintf("run/r%03d", i), RunId: "x"}}
	}
	return infos
}

// listRuns says whether (and how many) runs the limit left out: it asks
// for one more than the limit, and counts only when there is one.
func TestDashboardListRuns(t *testing.T) {
	for _, tc := range []struct {
		runs, limit int
		countErr    error
		want, more  int
		pages       []int32
	}{
		{runs: 0, limit: 20, want: 0, more: 0, pages: []int32{21}},
		{runs: 5, limit: 20, want: 5, more: 0, pages: []int32{21}},
		{runs: 20, limit: 20, want: 20, more: 0, pages: []int32{21}},
		{runs: 21, limit: 20, want: 20, more: 1, pages: []int32{21}},
		{runs: 57, limit: 20, want: 20, more: 37, pages: []int32{21}},
		{runs: 57, limit: 20, countErr: errors.New("count: unavailable"), want: 20, more: -1, pages: []int32{21}},
		{runs: 250, limit: 150, want: 150, more: 100, pages: []int32{100, 51}},
		{runs: 120, limit: 150, want: 120, more: 0, pages: []int32{100, 51}},
	} {
		v := &visibilityLister{infos: visibilityInfos(tc.runs), countErr: tc.countErr}
		infos, more, err := listRuns(context.Background(), v, "default", "q", tc.limit)
		if err != nil || len(infos) != tc.want || more != tc.more || !slices.Equal(v.pages, tc.pages) {
			t.Errorf("%d runs, --limit %d (count error %v): %d listed, %d more, pages %v, %v; want %d, %d more, pages %v",
				tc.runs, tc.limit, tc.countErr, len(infos), more, v.pages, err, tc.want, tc.more, tc.pages)
		}
		for i, info := range infos { // the visibility store's order
			if info != v.infos[i] {
				t.Errorf("%d runs, --limit %d: listed %d is %s, want %s", tc.runs, tc.limit, i,
					info.GetExecution().GetWorkflowId(), v.infos[i].GetExecution().GetWorkflowId())
				break
			}
		}
	}
}

// A list the limit cut says so in a last line, naming the --limit that
// lists them all.
func TestPrintDashboardMore(t *testing.T) {
	rows := []dashboardRow{{WorkflowID: "run/a", Execution: "running", read: true}}
	for _, tc := range []struct {
		more, limit int
		want        string
	}{
		{0, 20, ""},
		{37, 20, "… 37 more run(s) not listed: --limit 57 lists them all"},
		{1, 1, "… 1 more run(s) not listed: --limit 2 lists them all"},
		{-1, 20, "… more runs not listed: --limit 40 lists more"},
	} {
		var b bytes.Buffer
		if err := printDashboard(&b, rows, "", tc.more, tc.limit); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if tc.want == "" && len(lines) != 2 || tc.want != "" && (len(lines) != 3 || lines[2] != tc.want) {
			t.Errorf("%d more, --limit %d:\n%s\nwant a last line %q", tc.more, tc.limit, b.String(), tc.want)
		}
	}
}

// The rows are newest start first whatever the visibility store's order
// (running runs first, then by close time); ties by workflow ID, then as
// listed.
func TestDashboardSort(t *testing.T) {
	at := func(hhmm string) time.Time {
		tm, err := time.Parse("15:04", hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name string
		rows []dashboardRow
		want []string // workflow ID/run ID
	}{
		{"closed later, started earlier", []dashboardRow{
			{WorkflowID: "run/early", RunID: "1", StartedAt: at("13:50")},
			{WorkflowID: "run/late", RunID: "1", StartedAt: at("13:59")},
		}, []string{"run/late/1", "run/early/1"}},
		{"running above closed in visibility", []dashboardRow{
			{WorkflowID: "run/running", RunID: "1", StartedAt: at("09:00")},
			{WorkflowID: "run/done", RunID: "1", StartedAt: at("12:00")},
			{WorkflowID: "run/mid", RunID: "1", StartedAt: at("10:30")},
		}, []string{"run/done/1", "run/mid/1", "run/running/1"}},
		{"ties by workflow ID, then as listed", []dashboardRow{
			{WorkflowID: "run/b", RunID: "1", StartedAt: at("10:00")},
			{WorkflowID: "run/a", RunID: "2", StartedAt: at("10:00")},
			{WorkflowID: "run/a", RunID: "1", StartedAt: at("10:00")},
			{WorkflowID: "run/c", RunID: "1", StartedAt: at("11:00")},
		}, []string{"run/c/1", "run/a/2", "run/a/1", "run/b/1"}},
	} {
		sortDashboard(tc.rows)
		var got []string
		for _, r := range tc.rows {
			got = append(got, r.WorkflowID+"/"+r.RunID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A run resumed with `run --resume` is one row, its latest execution's:
// the execution it resumed is listed by the server too.
func TestDashboardLatestOfEachRun(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	rows := []dashboardRow{
		{WorkflowID: "run/long", RunID: "2", StartedAt: t0.Add(time.Hour)}, // the resumed run, running
		{WorkflowID: "run/other", RunID: "1", StartedAt: t0.Add(30 * time.Minute)},
		{WorkflowID: "run/long", RunID: "1", StartedAt: t0}, // the run it resumed, cancelled
		{WorkflowID: "run/same", RunID: "a", StartedAt: t0},
		{WorkflowID: "run/same", RunID: "b", StartedAt: t0}, // (a tie: the first listed)
	}
	var got []string
	for _, r := range latestOfEachRun(rows) {
		got = append(got, r.WorkflowID+"/"+r.RunID)
	}
	if want := []string{"run/long/2", "run/other/1", "run/same/a"}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// LOSS is "-" while none was measured (null in JSON, as `watch -o jsonl`
// writes it), and a tiny loss stays visible; RECOVERIES and SAMPLES/S are
// "-" where the run's status was not read (recoveries null in JSON).
func TestDashboardFigures(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		row                      dashboardRow
		loss, sps, recoveries    string // table cells
		jsonLoss, jsonRecoveries string
	}{
		{"no loss yet", dashboardRow{read: true, SamplesPerSec: 0}, "-", "-", "0", "null", "0"},
		{"tiny loss", dashboardRow{read: true, Loss: 2.2e-07, SamplesPerSec: 1234.4, Recoveries: 1}, "2.2e-07", "1234", "1", "2.2e-7", "1"},
		{"loss", dashboardRow{read: true, Loss: 0.25, SamplesPerSec: 99.6, Recoveries: 2}, "0.25", "100", "2", "0.25", "2"},
		{"large loss", dashboardRow{read: true, Loss: 12.345678}, "12.35", "-", "0", "12.345678", "0"},
		{"status not read", dashboardRow{Unread: "no control worker"}, "-", "-", "-", "null", "null"},
	} {
		r := tc.row
		r.WorkflowID, r.Execution, r.Status, r.Model, r.Steps = "run/x", "running", spec.PhaseTraining, "m", 10
		var b bytes.Buffer
		if err := printDashboard(&b, []dashboardRow{r}, "", 0, 20); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		f := strings.Fields(lines[len(lines)-1])
		if len(f) < 8 || f[5] != tc.loss || f[6] != tc.sps || f[7] != tc.recoveries {
			t.Errorf("%s: row %q: want loss %s, samples/s %s, recoveries %s", tc.name, lines[len(lines)-1], tc.loss, tc.sps, tc.recoveries)
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		if string(m["loss"]) != tc.jsonLoss || string(m["recoveries"]) != tc.jsonRecoveries {
			t.Errorf("%s: JSON loss %s, recoveries %s; want %s, %s: %s", tc.name, m["loss"], m["recoveries"], tc.jsonLoss, tc.jsonRecoveries, js)
		}
		// The job's steps under status's name for them too.
		if string(m["total_steps"]) != "10" || string(m["steps"]) != "10" {
			t.Errorf("%s: JSON steps %s, total_steps %s; want 10 and 10: %s", tc.name, m["steps"], m["total_steps"], js)
		}
		// Read back (as scripts and the end-to-end tests do): null is 0.
		var back dashboardRow
		if err := json.Unmarshal(js, &back); err != nil || back.Loss != r.Loss || back.Recoveries != r.Recoveries || back.WorkflowID != r.WorkflowID {
			t.Errorf("%s: read back %+v, %v", tc.name, back, err)
		}
	}
}

// DETAIL is one line of at most detailWidth runes: a multi-line error's
// newlines and tabs are folded into spaces (JSON keeps the text).
func TestDashboardDetail(t *testing.T) {
	for _, tc := range []struct{ detail, want string }{
		{"", ""},
		{"paused at step 400", "paused at step 400"},
		{"run spec: 1 problem(s):\n  name: required", "run spec: 1 problem(s): name: required"},
		{"a\tb\r\nc\n", "a b c"},
		{strings.Repeat("x", 100), strings.Repeat("x", 57) + "..."},
		{strings.Repeat("×", 100), strings.Repeat("×", 57) + "..."}, // runes, not bytes
		{strings.Repeat("×", 60), strings.Repeat("×", 60)},
	} {
		if got := tableDetail(tc.detail); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("tableDetail(%q) = %q, want %q", tc.detail, got, tc.want)
		}
	}
	detail := "run spec: 1 problem(s):\n  name: required (the run's name)\n  steps: want at least 1"
	rows := []dashboardRow{
		{WorkflowID: "run/bad", Execution: "failed", Status: spec.PhaseFailed, Detail: detail, read: true},
		{WorkflowID: "run/ok", Execution: "running", Status: spec.PhaseTraining, Detail: "waiting\tfor a node", read: true},
	}
	var b bytes.Buffer
	if err := printDashboard(&b, rows, "", 0, 20); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "bad ") || !strings.HasSuffix(lines[1], "run spec: 1 problem(s): name: required (the run's name) s...") ||
		!strings.HasPrefix(lines[2], "ok ") || !strings.HasSuffix(lines[2], "waiting for a node") {
		t.Errorf("table with multi-line details:\n%s", b.String())
	}
	js, err := json.Marshal(rows[0])
	if err != nil || !strings.Contains(string(js), `"detail":"run spec: 1 problem(s):\n  name: required`) {
		t.Errorf("JSON %s, %v: want the detail as it is", js, err)
	}
}

// describedExecutions describes executions (workflow ID/run ID; run ID
// "" is the current one) as the server does, counting the calls; one it
// does not know is NotFound.
type describedExecutions struct {
	client.Client // (dashboardRows: nothing else called)
	infos         map[string]*workflowpb.WorkflowExecutionInfo
	current       map[string]string // workflow ID → current run ID
	err           error             // every describe fails
	calls         int
}

func (d *describedExecutions) DescribeWorkflowExecution(_ context.Context, wid, rid string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.calls++
	if d.err != nil {
		return nil, d.err
	}
	if rid == "" {
		rid = d.current[wid]
	}
	info, ok := d.infos[wid+"/"+rid]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow execution not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}, nil
}

// execution is an execution of wid as the server has it: first is its
// chain's first run ID (FirstRunId), started its start.
func execution(wid, rid, first string, started time.Time, status enumspb.WorkflowExecutionStatus) *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: wid, RunId: rid},
		FirstRunId: first, StartTime: timestamppb.New(started), Status: status}
}

// A row without the run's status starts when the run's first execution
// did (visibility has the current execution's, later after a
// continue-as-new); unknown, it says the start is the execution's.
func TestDashboardFirstStart(t *testing.T) {
	first := time.Date(2026, 11, 30, 13, 50, 0, 0, time.UTC)
	now := first.Add(9 * time.Minute)
	can := enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	for _, tc := range []struct {
		name  string
		infos []*workflowpb.WorkflowExecutionInfo
		err   error
		want  time.Time
		exec  bool
		calls int
	}{
		{"never continued", []*workflowpb.WorkflowExecutionInfo{execution("run/a", "r2", "r2", now, running)}, nil, now, false, 1},
		{"continued as new", []*workflowpb.WorkflowExecutionInfo{
			execution("run/a", "r1", "r1", first, can), execution("run/a", "r2", "r1", now, running)}, nil, first, false, 2},
		{"first execution past retention", []*workflowpb.WorkflowExecutionInfo{execution("run/a", "r2", "r1", now, running)}, nil, now, true, 2},
		{"server without FirstRunId", []*workflowpb.WorkflowExecutionInfo{execution("run/a", "r2", "", now, running)}, nil, now, true, 1},
		{"describe fails", nil, errors.New("unavailable"), now, true, 1},
	} {
		d := &describedExecutions{infos: map[string]*workflowpb.WorkflowExecutionInfo{}, err: tc.err}
		for _, info := range tc.infos {
			d.infos[info.GetExecution().GetWorkflowId()+"/"+info.GetExecution().GetRunId()] = info
		}
		r := dashboardRow{WorkflowID: "run/a", RunID: "r2", StartedAt: now}
		r.firstStart(context.Background(), d)
		if !r.StartedAt.Equal(tc.want) || r.StartedExecution != tc.exec || d.calls != tc.calls {
			t.Errorf("%s: started %v (execution's: %v) in %d describe(s); want %v (%v) in %d", tc.name,
				r.StartedAt, r.StartedExecution, d.calls, tc.want, tc.exec, tc.calls)
		}
		var b bytes.Buffer
		if err := printDashboard(&b, []dashboardRow{r}, "", 0, 20); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "(this execution's)") != tc.exec {
			t.Errorf("%s: table\n%s\nwant the start marked as the execution's: %v", tc.name, b.String(), tc.exec)
		}
	}
}

// controlWorkerDown is a server whose control task queue has no poller:
// it lists its executions (in visibility's order) and describes them,
// and the run's status cannot be read.
type controlWorkerDown struct {
	describedExecutions
	visibility visibilityLister
}

func (c *controlWorkerDown) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return c.visibility.ListWorkflow(ctx, req)
}

func (c *controlWorkerDown) CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	return c.visibility.CountWorkflow(ctx, req)
}

func (c *controlWorkerDown) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	return &workflowservice.DescribeTaskQueueResponse{}, nil // no poller
}

// While no control worker runs, the rows have what visibility indexes:
// a run that continued as new starts when it first did, the rows are
// newest start first, recoveries are not said to be 0, and a cut list
// says so.
func TestDashboardRowsControlWorkerDown(t *testing.T) {
	base := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	can := enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	c := &controlWorkerDown{describedExecutions: describedExecutions{
		infos: map[string]*workflowpb.WorkflowExecutionInfo{}, current: map[string]string{}}}
	for _, ex := range []struct {
		wid, rid, first string
		started         time.Duration
		visible         bool
	}{
		{"run/rolled", "r1", "r1", 0, false}, // started 13:00, continued as new at 14:30
		{"run/rolled", "r2", "r1", 90 * time.Minute, true},
		{"run/fresh", "f1", "f1", 59 * time.Minute, true},
		{"run/gone", "g2", "g1", 80 * time.Minute, true}, // its first execution past retention
		{"run/older", "o1", "o1", 10 * time.Minute, true},
	} {
		info := execution(ex.wid, ex.rid, ex.first, base.Add(ex.started), can)
		if ex.visible {
			info.Status = running
			c.current[ex.wid] = ex.rid
			c.visibility.infos = append(c.visibility.infos, info)
		}
		c.infos[ex.wid+"/"+ex.rid] = info
	}
	for _, tc := range []struct {
		limit int
		want  []string // run name and start (hh:mm), newest first
		more  int
	}{
		{10, []string{"gone 14:20 exec", "fresh 13:59", "older 13:10", "rolled 13:00"}, 0},
		{2, []string{"fresh 13:59", "rolled 13:00"}, 2}, // (visibility's first two)
	} {
		rows, more, err := dashboardRows(context.Background(), c, "default", dashboardQuery(""), tc.limit, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			s := strings.TrimPrefix(r.WorkflowID, spec.RunIDPrefix) + " " + r.StartedAt.UTC().Format("15:04")
			if r.StartedExecution {
				s += " exec"
			}
			got = append(got, s)
			if !strings.Contains(r.Unread, "no control worker polls") {
				t.Errorf("--limit %d: row %+v: want it unread", tc.limit, r)
			}
		}
		if !slices.Equal(got, tc.want) || more != tc.more {
			t.Errorf("--limit %d: rows %q, %d more; want %q, %d more", tc.limit, got, more, tc.want, tc.more)
		}
		var b bytes.Buffer
		if err := printDashboard(&b, rows, "", more, tc.limit); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		for _, line := range lines[1 : 1+len(rows)] {
			if f := strings.Fields(line); len(f) < 8 || f[7] != "-" {
				t.Errorf("--limit %d: row %q: want recoveries -", tc.limit, line)
			}
		}
		if tc.more > 0 && !strings.HasPrefix(lines[len(lines)-1], fmt.Sprintf("… %d more run(s) not listed", tc.more)) {
			t.Errorf("--limit %d: table\n%s\nwant a last line saying %d more", tc.limit, b.String(), tc.more)
		}
	}
}
