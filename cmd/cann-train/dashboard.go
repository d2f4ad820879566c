package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/spec"
)

// dashboardRow is one run as `cann-train dashboard` shows it: what the
// visibility store indexes (the search attributes TrainingRun keeps up to
// date) and, from the run itself, what only its status query or result
// knows (loss, throughput, carbon). In JSON (MarshalJSON) a loss not
// measured yet is null, and so are the recoveries of a run whose status
// was not read.
type dashboardRow struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Execution is Temporal's status of the workflow (running, completed,
	// failed, terminated, …); Status is the run's own phase.
	Execution string     `json:"execution"`
	Status    spec.Phase `json:"status"`
	Model     string     `json:"model"`
	Nodes     int64      `json:"nodes"`
	// TargetNodes is the size a running run that lost nodes grows back
	// to (status target_nodes; 0: none).
	TargetNodes   int64   `json:"target_nodes,omitempty"`
	Step          int64   `json:"step"`
	Steps         int64   `json:"steps"`
	Loss          float32 `json:"loss"` // 0: none measured yet (null in JSON)
	SamplesPerSec float64 `json:"samples_per_sec"`
	Strategy      string  `json:"strategy,omitempty"`
	Recoveries    int     `json:"recoveries"`
	// SlowNodes are the nodes setting the run's pace (status slow_nodes).
	SlowNodes   []string `json:"slow_nodes,omitempty"`
	CarbonGrams float64  `json:"carbon_g,omitempty"`
	Detail      string   `json:"detail,omitempty"`
	// StartedAt is when the run started: its status's start, else its
	// first execution's (it may have continued as new since).
	StartedAt time.Time `json:"started_at"`
	// StartedExecution: StartedAt is the current execution's start, the
	// run's own being unknown (neither its status nor, after a
	// continue-as-new, its first execution could be read).
	StartedExecution bool   `json:"started_at_execution,omitempty"`
	WebUI            string `json:"web_ui,omitempty"`
	// Unread says why the run's own status could not be read (the row
	// then has only what the visibility store indexes).
	Unread string `json:"unread,omitempty"`

	// read: the row has the run's status (addStatus), not only what
	// the visibility store indexes.
	read bool
}

// MarshalJSON writes the row with a null loss where none was measured
// yet (0, as `watch -o jsonl` writes it), and null recoveries where the
// run's status was not read (unknown: the visibility store does not
// index them). The job's steps go out as total_steps too, the name
// `status -o json` gives them (its "steps" is the step reached).
func (r dashboardRow) MarshalJSON() ([]byte, error) {
	type plain dashboardRow // its fields, without this method
	out := struct {
		plain
		Loss       *float32 `json:"loss"`
		Recoveries *int     `json:"recoveries"`
		TotalSteps int64    `json:"total_steps"`
	}{plain: plain(r), TotalSteps: r.Steps}
	if r.Loss != 0 {
		out.Loss = &r.Loss
	}
	if r.read {
		out.Recoveries = &r.Recoveries
	}
	return json.Marshal(out)
}

// dashboardQuery is the visibility query for TrainingRun workflows (the
// executions a run continued as new from are left out: the run goes on in
// the newest one), narrowed by the user's (ANDed, in parentheses) when
// there is one.
func dashboardQuery(user string) string {
	q := "WorkflowType = '" + spec.WorkflowTrainingRun + "' AND ExecutionStatus != 'ContinuedAsNew'"
	if u := strings.TrimSpace(user); u != "" {
		q += " AND (" + u + ")"
	}
	return q
}

// dashboardOptions are what `cann-train dashboard` shows, and how.
type dashboardOptions struct {
	output, query, namespace string
	ui                       string // the Web UI's base for links ("": none)
	limit                    int
	watch                    bool
	every                    time.Duration
}

func newDashboardCmd(e *env) *cobra.Command {
	var ui string
	var o dashboardOptions
	cmd := &cobra.Command{
		Use:     "dashboard",
		Aliases: []string{"ls", "list", "ps"},
		Short:   "Every training run at a glance: status, step, loss, throughput, carbon",
		Long: `Lists the TrainingRun workflows of the namespace, latest start first, with
what the Temporal visibility store indexes (the Cann* search attributes) and
what each run's status query (or, once closed, its result) adds: loss,
samples/s (while the run trains), recoveries, grams of CO2. On a terminal the
table fits its width: DETAIL is cut, and on a narrow one STARTED, MODEL and
other columns go. --limit bounds the list (the running runs, then those that
ended last, as the visibility store orders them: a run that continued as new
counts from its latest execution's start, so it may be listed before a run
started after it); a last line says how many more match, and the --limit that
lists them all. --query narrows the list with a visibility query (e.g.
CannStatus = 'training', CannModel = 'mlp-mnist',
StartTime > '2026-11-30T00:00:00Z'). CannStatus is the run's phase, one of
` + hang("", runPhases(), 80) + `.
--watch redraws it every --every until interrupted (on a terminal in place; to
a file or a pipe, each table after a blank line), and waits out a server that
stops answering; Ctrl-C ends it, with exit status 130 as watch.`,
		Example: `  cann-train dashboard
  cann-train dashboard --watch
  cann-train dashboard --query "CannStatus IN ('paused', 'waiting-storage')" -o json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, "text", "json"); err != nil {
				return err
			}
			if o.watch && o.output == "json" {
				return errors.New("--watch draws the text table; -o json prints once")
			}
			ctx := cmd.Context()
			c, err := dialQuiet(ctx, e)
			if err != nil {
				return err
			}
			defer c.Close()
			o.namespace, o.ui = e.namespace, e.uiLink(ui)
			return showDashboard(ctx, c, e.out, e.err, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.StringVar(&o.query, "query", "", "visibility query narrowing the list (ANDed with the TrainingRun type)")
	f.IntVar(&o.limit, "limit", 20, "most runs listed: the running ones, then those that ended last (a last line says how many more match)")
	f.BoolVarP(&o.watch, "watch", "w", false, "redraw the table every --every")
	f.DurationVar(&o.every, "every", 2*time.Second, "refresh interval of --watch")
	atLeast(f, "1", "limit")
	atLeast(f, "1ns", "every")
	addUIFlag(f, &ui)
	return cmd
}

// showDashboard prints the runs' table (or JSON array) on out once or,
// with o.watch, every o.every until ctx ends: on a terminal in place (and
// to its width), else each after a blank line. A watch waits out a server
// that stops answering, its header saying since when, under the last
// table read; a server not answering is said as such, with its address.
// Interrupted, a watch ends as `watch` does: an *interruptedError saying
// that the runs go on (exit status 130).
func showDashboard(ctx context.Context, c client.Client, out, errw io.Writer, o dashboardOptions) error {
	address, _ := placeOf(c)
	cols := func() int { return 0 } // (no limit: a file or a pipe)
	if isTerminal(out) {
		cols = terminalCols(out)
	}
	interrupted := func() error {
		return &interruptedError{what: "stopped watching the dashboard; the runs go on", err: ctx.Err()}
	}
	var last []dashboardRow // the last table read, and when
	var lastMore, drawn int
	var lastAt, silentSince time.Time
	for ; ; drawn++ {
		asked := time.Now()
		rows, more, err := dashboardRows(ctx, c, o.namespace, dashboardQuery(o.query), o.limit, o.ui)
		now := time.Now()
		switch {
		case o.watch && ctx.Err() != nil:
			return interrupted()
		case err == nil:
			last, lastMore, lastAt, silentSince = rows, more, now, time.Time{}
		case o.watch && serverSilent(err):
			if silentSince.IsZero() {
				silentSince = asked // (the list waited out its deadline)
			}
		case serverSilent(err):
			return fmt.Errorf("%s: %w", serverDown(address), err)
		default:
			return err
		}
		if o.output == "json" {
			if more != 0 { // (on stderr: the output stays a JSON array)
				fmt.Fprintln(errw, "cann-train dashboard: "+moreLine(more, o.limit))
			}
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		if o.watch {
			if isTerminal(out) {
				fmt.Fprint(out, "\033[H\033[2J") // home, clear screen
			} else if drawn > 0 {
				fmt.Fprintln(out) // (the tables one after the other)
			}
			for _, line := range watchHeader(now, o.every, address, silentSince, lastAt, cols()) {
				fmt.Fprintln(out, line)
			}
			fmt.Fprintln(out)
		}
		if !lastAt.IsZero() { // (nothing read yet: no table, rather than "no training runs")
			if err := printDashboardTo(out, last, o.query, lastMore, o.limit, cols()); err != nil {
				return err
			}
		}
		if !o.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return interrupted()
		case <-time.After(o.every):
		}
	}
}

// watchHeader is the header of `dashboard --watch` as of now: when the
// table was drawn and how often, and while the server does not answer
// (since silentSince; zero: it answers) since when, and when the table
// shown was read (lastAt; zero: none was). Each line is cut to cols-1
// columns (0: no limit), as the table's are: on a terminal a longer one
// wrapped, and every redraw then scrolled.
func watchHeader(now time.Time, every time.Duration, address string, silentSince, lastAt time.Time, cols int) []string {
	lines := []string{fmt.Sprintf("cann-train dashboard  %s  every %s (Ctrl-C ends)", now.Format("15:04:05"), every)}
	switch {
	case silentSince.IsZero():
	case lastAt.IsZero():
		lines = append(lines, fmt.Sprintf("server %s not answering since %s, retrying", cmp.Or(address, "?"), silentSince.Format("15:04:05")))
	default:
		lines = append(lines, fmt.Sprintf("server %s not answering since %s, retrying; the runs as of %s:", cmp.Or(address, "?"),
			silentSince.Format("15:04:05"), lastAt.Format("15:04:05")))
	}
	for i := range lines {
		lines[i] = cutToWidth(lines[i], cols)
	}
	return lines
}

// cutToWidth is line cut to a terminal cols wide (cutCell to cols-1: the
// last column wraps on some terminals); as it is where cols is 0 (a file
// or a pipe: no limit).
func cutToWidth(line string, cols int) string {
	if cols <= 0 {
		return line
	}
	return cutCell(line, cols-1)
}

// dashboardRows lists up to limit runs matching query (listRuns: more
// is how many others match) and reads each one's status: a running run's
// status query (and its chunks' heartbeats), a closed one's result or
// failure. The rows are sorted newest start first (sortDashboard).
func dashboardRows(ctx context.Context, c client.Client, namespace, query string, limit int, ui string) ([]dashboardRow, int, error) {
	infos, more, err := listRuns(ctx, c, namespace, query, limit)
	if err != nil {
		return nil, 0, err
	}
	rows := make([]dashboardRow, 0, len(infos))
	for _, info := range infos {
		rows = append(rows, rowFromVisibility(info.GetExecution(), info.GetStatus(),
			info.GetStartTime().AsTime(), info.GetSearchAttributes().GetIndexedFields()))
	}
	rows = latestOfEachRun(rows)
	running := activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	asked, polls := false, false // a control worker answers queries (asked once)
	var noAnswer *noAnswerError  // once one query went unanswered, the others would too
	for i := range rows {
		r := &rows[i]
		if ui != "" {
			r.WebUI = fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s", strings.TrimRight(ui, "/"),
				url.PathEscape(namespace), url.PathEscape(r.WorkflowID), url.PathEscape(r.RunID))
		}
		if r.Execution == running {
			if noAnswer != nil {
				r.Unread = noAnswer.others() // (its Error names the run asked)
				continue
			}
			st, live, _, err := readProgress(ctx, c, r.WorkflowID)
			if na := (*noAnswerError)(nil); errors.As(err, &na) {
				r.Unread = err.Error()
				if na.taskAttempts <= 1 { // (not this run's own workflow task failing)
					noAnswer, polls, asked = na, false, true // nor would the others' queries be answered
				}
				continue
			}
			if err != nil {
				r.Unread = err.Error()
			}
			if st.RunID != "" {
				r.addStatus(st, live)
			}
			continue
		}
		var st spec.RunStatus
		err := c.GetWorkflow(ctx, r.WorkflowID, r.RunID).Get(ctx, &st)
		if st.RunID == "" && err != nil {
			// A run that failed or was cancelled (or terminated) returns
			// no status; its query still answers: where it stopped, its
			// loss, recoveries and last checkpoint.
			if !asked {
				asked, polls = true, controlWorkerPolls(ctx, c) == nil
			}
			if polls {
				switch q, qerr := queryWorkflow(ctx, c, r.WorkflowID, r.RunID, spec.QueryStatus); {
				case qerr == nil:
					_ = q.Get(&st) // unreadable: the row keeps what it has
				case errors.As(qerr, &noAnswer):
					polls = false // nor would the next
				}
			}
		}
		switch {
		case st.RunID != "":
			r.addStatus(st, nil)
			if st.Error == "" && err != nil {
				r.Detail = failureText(err) // terminated or timed out: no code of its said why
			}
		case err != nil && r.Execution == activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED) && failureText(err) == "canceled":
			r.Detail = string(spec.PhaseCancelled) // (the run's spelling, not Temporal's)
		case err != nil:
			r.Detail = failureText(err) // how it failed, was terminated or timed out
		}
	}
	for i := range rows {
		if !rows[i].read {
			rows[i].firstStart(ctx, c)
		}
	}
	sortDashboard(rows)
	return rows, more, nil
}

// latestOfEachRun keeps, of rows, the latest-started execution of each
// workflow ID: a run continued with `run --resume` is a new execution of
// its ID, and the one it resumed (its status's "resumed" record) is no
// run of its own — listed too, the name appeared twice.
func latestOfEachRun(rows []dashboardRow) []dashboardRow {
	latest := map[string]time.Time{}
	for _, r := range rows {
		if t, ok := latest[r.WorkflowID]; !ok || r.StartedAt.After(t) {
			latest[r.WorkflowID] = r.StartedAt
		}
	}
	seen := map[string]bool{}
	return slices.DeleteFunc(rows, func(r dashboardRow) bool {
		drop := seen[r.WorkflowID] || r.StartedAt.Before(latest[r.WorkflowID])
		seen[r.WorkflowID] = seen[r.WorkflowID] || !drop
		return drop
	})
}

// runLister is what listRuns asks of a client.Client.
type runLister interface {
	ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	CountWorkflow(context.Context, *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
}

// listRuns lists up to limit executions matching query, in the visibility
// store's order (the running ones, then those that ended last), and says
// how many more match: 0 none; -1 some, not counted (the count failed).
// It asks for one more than limit to tell, and counts only then.
func listRuns(ctx context.Context, c runLister, namespace, query string, limit int) ([]*workflowpb.WorkflowExecutionInfo, int, error) {
	var infos []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for len(infos) <= limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, PageSize: int32(min(limit+1-len(infos), 100)), NextPageToken: token, Query: query,
		})
		if err != nil {
			return nil, 0, fmt.Errorf("list runs (query %q): %w", query, err)
		}
		infos = append(infos, resp.GetExecutions()...)
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	if len(infos) <= limit {
		return infos, 0, nil
	}
	more := -1
	if n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query}); err == nil &&
		n.GetCount() > int64(limit) {
		more = int(n.GetCount()) - limit
	}
	return infos[:limit], more, nil
}

// moreLine says that the list left runs out (more: listRuns's), and
// which --limit lists them.
func moreLine(more, limit int) string {
	if more < 0 {
		return fmt.Sprintf("more runs not listed: --limit %d lists more", 2*limit)
	}
	return fmt.Sprintf("%d more run(s) not listed: --limit %d lists them all", more, limit+more)
}

// sortDashboard sorts rows newest start first (the visibility store lists
// the running runs first, then by when they closed); ties by workflow ID,
// then as listed.
func sortDashboard(rows []dashboardRow) {
	slices.SortStableFunc(rows, func(a, b dashboardRow) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.WorkflowID, b.WorkflowID)
	})
}

// describer is what firstStart asks of a client.Client.
type describer interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// firstStart corrects the start of a row without the run's status: the
// visibility store's is the row's execution's, later after every
// continue-as-new, and the run started when its first execution did
// (which the server describes while it keeps it: the namespace's
// retention). Where that is not known, the row says its start is the
// execution's (StartedExecution).
func (r *dashboardRow) firstStart(ctx context.Context, c describer) {
	desc, err := c.DescribeWorkflowExecution(ctx, r.WorkflowID, r.RunID)
	first := desc.GetWorkflowExecutionInfo().GetFirstRunId()
	if err == nil && first == r.RunID {
		return // its first execution: the start is the run's
	}
	if err == nil && first != "" { // (empty: a server that does not say)
		desc, err = c.DescribeWorkflowExecution(ctx, r.WorkflowID, first)
		if started := desc.GetWorkflowExecutionInfo().GetStartTime(); err == nil && started != nil {
			r.StartedAt = started.AsTime()
			return
		}
	}
	r.StartedExecution = true
}

// rowFromVisibility is what the visibility store says of one run.
func rowFromVisibility(ex *commonpb.WorkflowExecution, status enumspb.WorkflowExecutionStatus, started time.Time, sa map[string]*commonpb.Payload) dashboardRow {
	r := dashboardRow{WorkflowID: ex.GetWorkflowId(), RunID: ex.GetRunId(), Execution: activities.ExecutionName(status), StartedAt: started}
	dc := converter.GetDefaultDataConverter()
	decode := func(name string, v any) {
		if p, ok := sa[name]; ok {
			_ = dc.FromPayload(p, v) // a malformed attribute leaves the zero value
		}
	}
	var phase string
	decode(spec.SearchAttrModel, &r.Model)
	decode(spec.SearchAttrNodes, &r.Nodes)
	decode(spec.SearchAttrStep, &r.Step)
	decode(spec.SearchAttrStatus, &phase)
	decode(spec.SearchAttrStrategy, &r.Strategy)
	r.Status = spec.Phase(phase)
	return r
}

// addStatus completes a row with the run's status (live: the freshest
// chunk heartbeat, ahead of the status between chunk boundaries).
func (r *dashboardRow) addStatus(st spec.RunStatus, live *spec.ChunkProgress) {
	r.read, r.StartedExecution = true, false
	r.Status, r.Model, r.Nodes = st.Phase, st.Model, int64(len(st.Nodes))
	r.Step, r.Steps, r.Loss, r.SamplesPerSec = st.Step, st.TotalSteps, st.Loss, st.SamplesPerSec
	if live != nil && live.Step > st.Step {
		r.Step, r.Loss, r.SamplesPerSec = live.Step, live.Loss, live.SamplesPerSec*float64(max(1, len(st.Nodes)))
		if !live.At.IsZero() && time.Since(live.At) > staleStep {
			r.SamplesPerSec = 0 // (no step for a while: that speed is not its speed now)
		}
	}
	if st.Phase != spec.PhaseTraining {
		// The last chunk's speed is not the speed of a run that waits,
		// is paused or has ended.
		r.SamplesPerSec = 0
	}
	r.Recoveries = len(st.Recoveries)
	if !st.StartedAt.IsZero() {
		// The run's own start: the visibility store's is its current
		// execution's, later after every continue-as-new.
		r.StartedAt = st.StartedAt
	}
	if st.TargetNodes > len(st.Nodes) {
		r.TargetNodes = int64(st.TargetNodes)
	}
	if st.Green != nil {
		r.CarbonGrams = st.Green.Grams
	}
	var slow []string
	r.SlowNodes = nil
	for _, sn := range st.SlowNodes {
		r.SlowNodes = append(r.SlowNodes, sn.NodeID)
		slow = append(slow, fmt.Sprintf("%s %.1f×", sn.NodeID, sn.Factor))
	}
	r.Detail = st.Detail
	switch {
	case st.Error != "":
		r.Detail = endText(st)
	case r.Detail == "" && len(slow) > 0:
		r.Detail = "slow: " + strings.Join(slow, ", ")
	}
}

// runPhases lists CannStatus's values (the help, and the hint of a
// --query that matched nothing).
func runPhases() string {
	phases := []spec.Phase{spec.PhaseAcquiring, spec.PhaseTraining, spec.PhaseRecovering, spec.PhasePaused, spec.PhaseGreenWait,
		spec.PhaseStorageWait, spec.PhaseRescaling, spec.PhaseCancelling, spec.PhaseCompleted, spec.PhaseFailed, spec.PhaseCancelled}
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// hang breaks head+s into lines of at most width columns at s's spaces,
// the lines after the first indented as far as s starts (a word too long
// for a line gets one of its own).
func hang(head, s string, width int) string {
	var b strings.Builder
	b.WriteString(head)
	indent := utf8.RuneCountInString(head)
	col, first := indent, true
	for _, w := range strings.Fields(s) {
		n := utf8.RuneCountInString(w)
		switch {
		case first:
			first = false
		case col+1+n > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += n
	}
	return b.String()
}

// printDashboard prints rows; none says so, and with a --query what
// CannStatus takes (a guess such as 'running' matches nothing). A last
// line says how many more runs the list left out (more: listRuns's).
// Figures not known are "-": a loss not measured yet, the samples/s and
// recoveries of a run whose status was not read, the samples/s of a run
// that does not train.
func printDashboard(w io.Writer, rows []dashboardRow, query string, more, limit int) error {
	return printDashboardTo(w, rows, query, more, limit, 0)
}

// dashboardColumns are the table's headers; dashboardDropped the ones a
// narrow terminal loses first, in that order (RUN, STATUS and STEP stay).
var (
	dashboardColumns = []string{"RUN", "STATUS", "MODEL", "NODES", "STEP", "LOSS", "SAMPLES/S", "RECOVERIES", "CO2 g", "STARTED", "DETAIL"}
	dashboardDropped = []string{"STARTED", "MODEL", "CO2 g", "RECOVERIES", "NODES", "SAMPLES/S", "LOSS"}
)

// Column widths of the dashboard on a terminal: the gap between columns,
// the room DETAIL is given before the other columns go (less is cut), and
// the least DETAIL is shown at (less: none).
const (
	dashboardGap       = 2
	dashboardDetailMin = 24
	dashboardDetailCut = 8
)

// printDashboardTo is printDashboard at most cols columns wide (0: no
// limit; a terminal's width, where each row wrapped onto two or three
// lines): DETAIL is cut to the room the other columns leave; where that
// is less than dashboardDetailMin, columns go (dashboardDropped), and
// DETAIL too where it would still be cut shorter than dashboardDetailCut.
func printDashboardTo(w io.Writer, rows []dashboardRow, query string, more, limit, cols int) error {
	if len(rows) == 0 && query != "" {
		_, err := fmt.Fprintf(w, "no training runs match %s (CannStatus is the phase: %s)\n", query, runPhases())
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no training runs (start one: cann-train quickstart, or cann-train run -f job.yaml)")
		return err
	}
	table := [][]string{dashboardColumns}
	for _, r := range rows {
		table = append(table, dashboardCells(r))
	}
	detail := len(dashboardColumns) - 1
	keep := make([]bool, len(dashboardColumns))
	for i := range keep {
		keep[i] = true
	}
	widths := make([]int, len(dashboardColumns))
	for _, row := range table {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	// room is what the kept columns before DETAIL leave it (the last
	// column of a terminal wraps on some: not used).
	room := func() int {
		n := cols - 1
		for i := range detail {
			if keep[i] {
				n -= widths[i] + dashboardGap
			}
		}
		return n
	}
	if cols > 0 {
		for _, name := range dashboardDropped {
			if room() >= min(widths[detail], dashboardDetailMin) {
				break
			}
			keep[slices.Index(dashboardColumns, name)] = false
		}
		keep[detail] = room() >= min(widths[detail], dashboardDetailCut)
	}
	last := detail // the last column shown: not padded
	for !keep[last] {
		last--
	}
	for _, row := range table {
		var line strings.Builder
		for i, cell := range row {
			switch {
			case !keep[i]:
			case i == last:
				if i == detail && cols > 0 {
					cell = cutCell(cell, room())
				}
				line.WriteString(cell)
			default:
				line.WriteString(cell + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)+dashboardGap))
			}
		}
		if _, err := fmt.Fprintln(w, strings.TrimRight(line.String(), " ")); err != nil {
			return err
		}
	}
	if more == 0 {
		return nil
	}
	_, err := fmt.Fprintln(w, cutToWidth("… "+moreLine(more, limit), cols))
	return err
}

// dashboardCells are row's cells, in dashboardColumns' order.
func dashboardCells(r dashboardRow) []string {
	status := string(r.Status)
	same := status == r.Execution || // (Temporal spells it canceled)
		(r.Status == spec.PhaseCancelled && r.Execution == activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED))
	if !same && (status == "" || (r.Execution != activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) &&
		r.Execution != activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED))) {
		status = strings.TrimPrefix(strings.Join([]string{status, r.Execution}, "/"), "/")
	}
	step := fmt.Sprint(r.Step)
	if r.Steps > 0 {
		step = fmt.Sprintf("%d/%d", r.Step, r.Steps)
	}
	nodes := fmt.Sprint(r.Nodes)
	if r.TargetNodes > r.Nodes && r.Execution == activities.ExecutionName(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) {
		nodes = fmt.Sprintf("%d/%d", r.Nodes, r.TargetNodes) // shrunk, growing back
	}
	loss, sps, recoveries, carbon := "-", "-", "-", "-"
	if r.Loss != 0 {
		loss = fmt.Sprintf("%.4g", r.Loss) // (2.2e-07, not 0.0000)
	}
	if r.SamplesPerSec > 0 {
		sps = fmt.Sprintf("%.0f", r.SamplesPerSec)
	}
	if r.read {
		recoveries = fmt.Sprint(r.Recoveries)
	}
	if r.CarbonGrams > 0 {
		carbon = fmt.Sprintf("%.1f", r.CarbonGrams)
	}
	started := r.StartedAt.Local().Format("01-02 15:04:05")
	if r.StartedExecution {
		started += " (this execution's)"
	}
	detail := greenDetail(r.Detail, time.Now()) // (-o json: as the run says it)
	if r.Unread != "" {
		detail = "status unreadable: " + r.Unread
	}
	return []string{strings.TrimPrefix(r.WorkflowID, spec.RunIDPrefix), status, r.Model, nodes, step, loss, sps, recoveries, carbon, started, tableDetail(detail)}
}

// detailWidth is the most runes of a row's detail the table shows.
const detailWidth = 60

// tableDetail is a detail as a table cell: on one line (a multi-line
// error's newlines and tabs, which would break the table, folded into
// single spaces) and at most detailWidth runes.
func tableDetail(s string) string {
	return cutCell(strings.Join(strings.Fields(s), " "), detailWidth)
}

// cutCell is s in at most n runes: cut, its end "...", where longer.
func cutCell(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 3 {
		return string([]rune(s)[:max(0, n)])
	}
	return string([]rune(s)[:n-3]) + "..."
}
