package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// nodeRow is one node as `cann-train nodes` shows it.
type nodeRow struct {
	ID       string    `json:"id"`
	State    string    `json:"state"` // free, busy, drained, draining, failed, unfit, silent, orphaned
	Reason   string    `json:"reason,omitempty"`
	Run      string    `json:"run,omitempty"`
	Rank     int       `json:"rank"`
	Host     string    `json:"host"`
	CommAddr string    `json:"comm_addr"`
	LastSeen time.Time `json:"last_seen"`
	// DataSHA256 is the data set the worker loaded (spec.Node.DataSHA256).
	DataSHA256 string `json:"data_sha256,omitempty"`
	// ChunkProtocol is what the worker's build does in a chunk
	// (spec.Node.ChunkProtocol; below spec.ChunkProtocolVersion: an
	// older build, to upgrade).
	ChunkProtocol int `json:"chunk_protocol"`
	// KeptFor is the waiting run a free node is kept for (it has waited
	// long for nodes: runs holding none that ask after it wait behind it).
	KeptFor string `json:"kept_for,omitempty"`
	// holderPaused: Run is paused, holding the node (markOrphans).
	holderPaused bool
}

// nodeRows judges each record as the Cluster does when it hands nodes
// out: failed (unfit when failed as misconfigured), silent (no lease
// renewal for a TTL), busy (held by a run) or free.
func nodeRows(reg workflows.Registry, now time.Time) []nodeRow {
	rows := make([]nodeRow, 0, len(reg.Nodes))
	for _, r := range reg.Nodes {
		row := nodeRow{ID: r.Node.ID, Run: r.Run, Rank: r.Rank, Host: r.Node.Host, CommAddr: r.Node.CommAddr, LastSeen: r.LastSeen,
			DataSHA256: r.Node.DataSHA256, ChunkProtocol: r.Node.ChunkProtocol()}
		silent := now.Sub(r.LastSeen) > reg.LeaseTTL
		switch {
		case r.Failed && r.FailReason == spec.ReasonWorkerStopped && r.Run != "":
			// (Kept for the run that held it: registered again, it is
			// that run's again, unless the run moved off it first.)
			row.State, row.Reason = "stopped", fmt.Sprintf("its worker stopped; %s's again when it registers", r.Run)
		case r.Failed && r.FailReason == spec.ReasonWorkerStopped:
			row.State, row.Reason = "stopped", "free again when its worker registers"
		case r.Failed && r.Misconfigured:
			row.State, row.Reason = "unfit", r.FailReason+"; out of the pool until its worker restarts"
		case r.Failed && silent:
			// Its worker is gone too (killed, hung): only a new one
			// brings the node back.
			row.State, row.Reason = "failed", fmt.Sprintf("worker silent for %s, restart it: %s", now.Sub(r.LastSeen).Round(time.Second), r.FailReason)
		case r.Failed:
			row.State, row.Reason = "failed", r.FailReason
		case silent:
			row.State, row.Reason = "silent", fmt.Sprintf("no lease renewal for over %s", reg.LeaseTTL)
		case r.Drained && r.Run != "":
			row.State, row.Reason = "draining", "its run moves off it at a chunk boundary once a free node can take its rank (or it can train on without it)"
			if r.DrainReason != "" {
				row.Reason = r.DrainReason + "; " + row.Reason
			}
		case r.Drained:
			row.State, row.Reason = "drained", r.DrainReason
		case r.Run != "":
			row.State = "busy"
		default:
			row.State = "free"
			if r.HeldFor != "" && now.Before(r.HeldUntil) {
				row.Reason = fmt.Sprintf("held for %s until %s (it ends a chunk early to take it)", r.HeldFor, r.HeldUntil.UTC().Format("15:04:05Z"))
			} else if w := keptFor(reg.Waiting, r.Node.ID); w != nil {
				row.KeptFor = w.RunID
				row.Reason = fmt.Sprintf("kept for %s, which has waited since %s for %d node(s) (runs holding none wait behind it)",
					w.RunID, w.Since.UTC().Format("15:04:05Z"), w.Count)
			}
		}
		if r.Run == "" {
			row.Rank = -1
		}
		rows = append(rows, row)
	}
	return rows
}

// keptFor is the waiting acquire a free node is kept for (nil: none).
func keptFor(waiting []workflows.WaitingAcquire, node string) *workflows.WaitingAcquire {
	for i := range waiting {
		if slices.Contains(waiting[i].Kept, node) {
			return &waiting[i]
		}
	}
	return nil
}

// waitNote says why run waits for nodes, from the registry (reg) and its
// rows (judged as `cann-train nodes` does, orphans and paused holders
// marked): how many it waits for and since when, the older run it waits
// behind, and who has the nodes — "run/e2 waits for 1 node(s) since
// 05:37:20Z: behind run/d, which has waited since 05:35:02Z for 3 (node-3
// free, kept for it); 2 held by run/f (paused: `cann-train resume f` or
// `cancel f` frees them)". "" when no acquire of run waits.
func waitNote(reg workflows.Registry, rows []nodeRow, run string) string {
	i := slices.IndexFunc(reg.Waiting, func(w workflows.WaitingAcquire) bool { return w.RunID == run })
	if i < 0 {
		return ""
	}
	w := reg.Waiting[i]
	var why []string
	if w.Behind != "" {
		b := w.Behind
		if j := slices.IndexFunc(reg.Waiting, func(x workflows.WaitingAcquire) bool { return x.RunID == w.Behind }); j >= 0 {
			x := reg.Waiting[j]
			b = fmt.Sprintf("%s, which has waited since %s for %d", x.RunID, x.Since.UTC().Format("15:04:05Z"), x.Count)
			if len(x.Kept) > 0 {
				b += fmt.Sprintf(" (%s free, kept for it)", strings.Join(x.Kept, ", "))
			}
		}
		why = append(why, "behind "+b)
	}
	if len(w.Kept) > 0 {
		why = append(why, fmt.Sprintf("%s free, kept for it (runs holding none wait behind it)", strings.Join(w.Kept, ", ")))
	}
	// Who has the others: the runs holding nodes (paused ones named with
	// what frees them), and the nodes out of the pool.
	held := map[string]int{}
	paused := map[string]bool{}
	var holders []string
	out := map[string]int{}
	var outStates []string
	for _, r := range rows {
		switch {
		case r.Run != "" && r.Run != run && (r.State == "busy" || r.State == "draining" || r.State == "orphaned" || r.State == "stopped"):
			if held[r.Run] == 0 {
				holders = append(holders, r.Run)
			}
			held[r.Run]++
			paused[r.Run] = paused[r.Run] || r.holderPaused
		case r.State != "free" && r.Run != run:
			if out[r.State] == 0 {
				outStates = append(outStates, r.State)
			}
			out[r.State]++
		}
	}
	for _, h := range holders {
		part := fmt.Sprintf("%d held by %s", held[h], h)
		if paused[h] {
			part += fmt.Sprintf(" (paused: `cann-train resume %s` or `cancel %s` frees them)", runName(h), runName(h))
		}
		why = append(why, part)
	}
	for _, st := range outStates {
		why = append(why, fmt.Sprintf("%d %s", out[st], st))
	}
	note := fmt.Sprintf("%s waits for %d node(s) since %s", run, w.Count, w.Since.UTC().Format("15:04:05Z"))
	if len(why) > 0 {
		note += ": " + strings.Join(why, "; ")
	}
	return note
}

// printNodes writes the table of rows, then how many are free and the
// runs waiting for nodes (reg.Waiting), each with why (waitNote).
func printNodes(w io.Writer, reg workflows.Registry, rows []nodeRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tRUN\tRANK\tDATA\tHOST\tCOMM\tLAST SEEN")
	free, kept := 0, 0
	for _, r := range rows {
		state, run, rank, data := r.State, "-", "-", "-"
		if r.DataSHA256 != "" {
			data = spec.ShortSHA256(r.DataSHA256)
		}
		if r.Reason != "" {
			state += ": " + clip(r.Reason, 60) // -o json has all of it
		}
		if r.Run != "" {
			run, rank = r.Run, fmt.Sprint(r.Rank)
		}
		if r.State == "free" {
			free++
		}
		if r.KeptFor != "" {
			kept++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n", r.ID, state, run, rank, data, r.Host, r.CommAddr,
			now.Sub(r.LastSeen).Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	line := fmt.Sprintf("%d node(s), %d free", len(rows), free)
	if kept > 0 {
		line += fmt.Sprintf(" (%d of them kept for a run that has waited long)", kept)
	}
	if _, err := fmt.Fprintln(w, line); err != nil {
		return err
	}
	for _, wa := range reg.Waiting {
		if _, err := fmt.Fprintf(w, "waiting: %s\n", waitNote(reg, rows, wa.RunID)); err != nil {
			return err
		}
	}
	return nil
}

func newNodesCmd(e *env) *cobra.Command {
	var output, clusterID string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the registered node workers: free, busy (run and rank), drained, failed (why), stopped or silent",
		Long: `Asks the Cluster workflow (the node registry) for every node worker that
registered: its state as runs see it when they acquire nodes — free; busy in a
run at a rank; drained by an operator (draining while a run still holds it);
failed, with the reason (a dead peer, a heartbeat timeout; a failed node that
keeps renewing its lease is handed out again after a lease TTL); stopped, its
worker stopped on purpose (SIGTERM, Ctrl-C: free again when it registers, or
back with the run that held it); unfit, failed as misconfigured (no data set
for the built-in model, an older build, an external job it cannot launch, a
work directory it cannot write), which only restarting its worker clears;
silent, its lease not renewed for a TTL; or orphaned, held by a run that was
terminated (the next run short of free nodes frees it) — with the fingerprint
of the data set it loaded (DATA: the first 12 hex digits of the SHA-256 a
run's status shows; a run takes no free node holding another than its own,
and a run that found one of its nodes holding another gave it back free),
its host, collective address and when it was last heard from (-o json adds
chunk_protocol: below 1, a worker of an older build, which runs' first
chunks refuse until it is upgraded). A free node kept for a run that has
waited a minute or more for nodes says so: runs holding none that ask after
it wait behind it. Under the table each run waiting for nodes is listed with
why: the older run it waits behind, and who has the nodes (a paused holder
with the command that frees them).
` + "`nodes drain` / `nodes undrain`" + ` take a node out of the pool and put it back;
` + "`nodes release RUN`" + ` frees an ended run's nodes.`,
		Example: `  cann-train nodes
  cann-train nodes -o json | jq '.[] | select(.state == "free") | .id'
  cann-train nodes drain node-7 --reason "replace the NIC"`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			c, err := dialQuiet(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			now := time.Now()
			reg, rows, err := judgedNodes(cmd.Context(), c, clusterID, now)
			if err != nil {
				return err
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(rows)
			}
			return printNodes(e.out, reg, rows, now)
		},
	}
	cmd.PersistentFlags().StringVar(&clusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow that owns the nodes")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	var reason string
	drain := &cobra.Command{
		Use:   "drain NODE",
		Short: "Take a node out of the pool for maintenance (kept across its worker's restarts)",
		Long: `Runs no longer get NODE. A run holding it is told and moves off it at its next
chunk boundary (the chunk in flight ends early, within a second, at a
checkpoint its nodes store): after a checkpoint at that step a free node takes
its rank, or, with none free, the run goes on without it (down to its
min_nodes); short of that it keeps the node, says so in its status, and asks
again every minute. An external job stops after its next checkpoint upload and
relaunches from it with a free node in that rank (with none free, on the same
nodes). The node worker keeps running; ` + "`cann-train nodes undrain NODE`" + `
puts it back.`,
		Example: `  cann-train nodes drain node-7 --reason "replace the NIC"`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setDrained(cmd, e, clusterID, args[0], true, reason)
		},
	}
	drain.Flags().StringVar(&reason, "reason", "", "why, shown by 'cann-train nodes'")
	undrain := &cobra.Command{
		Use:   "undrain NODE",
		Short: "Put a drained node back into the pool",
		Args:  wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setDrained(cmd, e, clusterID, args[0], false, "")
		},
	}
	release := &cobra.Command{
		Use:   "release RUN",
		Short: "Give back the nodes an ended run still holds (a run terminated rather than cancelled)",
		Long: `A run that ends — completed, failed or cancelled — gives its nodes back itself.
One terminated ('temporal workflow terminate') runs no more code: its nodes stay
held, shown as orphaned by 'cann-train nodes', until a run that finds too few
free nodes has the Cluster ask the server which holders have ended and free
theirs. This puts them back into the pool at once. A running run is refused:
'cann-train cancel RUN' ends it and frees them.`,
		Example: `  cann-train nodes release mnist-demo`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return releaseRun(cmd.Context(), e, clusterID, runID(args[0]))
		},
	}
	forget := &cobra.Command{
		Use:   "forget NODE",
		Short: "Remove a node that is gone for good from the registry (a decommissioned host, a mistyped --id)",
		Long: `The registry keeps every node that ever registered, stopped or silent ones too.
This removes NODE from it. Refused while a run holds the node (cancel the run,
or drain the node and let the run move off it) and while its worker still
renews its lease (stop the worker first: a live worker registers again); a
node whose worker stopped on purpose (stopped: SIGTERM, Ctrl-C) is forgotten
at once. A forgotten node's worker that starts later registers anew.`,
		Example: `  cann-train nodes forget node-7`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forgetNode(cmd.Context(), e, clusterID, args[0])
		},
	}
	cmd.AddCommand(drain, undrain, release, forget)
	return cmd
}

// forgetNode asks the Cluster to remove node from its registry (an
// Update: the Cluster says why it refuses).
func forgetNode(ctx context.Context, e *env, clusterID, node string) error {
	c, err := dialQuiet(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID:     fmt.Sprintf("forget/%s/%d", node, time.Now().UnixNano()),
		WorkflowID:   clusterID,
		UpdateName:   spec.UpdateForgetNode,
		Args:         []any{spec.ForgetNode{NodeID: node}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("forget %s in %s: %w", node, clusterID, err)
	}
	fmt.Fprintf(e.out, "%s forgotten: %s lists it no more\n", node, clusterID)
	return nil
}

// markOrphans marks the rows held by runs that have ended (terminated:
// a run that ends otherwise releases its nodes) as orphaned. Runs the
// server cannot describe now are left as they are.
func markOrphans(ctx context.Context, c client.Client, rows []nodeRow) {
	type holder struct{ how, phase string }
	holders := map[string]holder{}
	for i := range rows {
		r := &rows[i]
		if r.Run == "" || (r.State != "busy" && r.State != "draining") {
			continue
		}
		h, seen := holders[r.Run]
		if !seen {
			h.how, h.phase, _ = activities.RunState(ctx, c, r.Run)
			holders[r.Run] = h
		}
		switch {
		case h.how != "":
			r.State = "orphaned"
			r.Reason = fmt.Sprintf("held by %s, which has ended (%s): the next run short of nodes frees it, `cann-train nodes release %s` at once",
				r.Run, h.how, runName(r.Run))
		case h.phase == string(spec.PhasePaused):
			// (Its nodes stay held while it holds: resume or scale it.)
			r.holderPaused = true
			if r.Reason == "" {
				r.Reason = fmt.Sprintf("%s is paused, holding it: `cann-train resume %s`", r.Run, runName(r.Run))
			}
		}
	}
}

// releaseRun gives back the nodes the ended run id still holds.
func releaseRun(ctx context.Context, e *env, clusterID, id string) error {
	c, err := dialQuiet(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	how, err := activities.RunEnded(ctx, c, id)
	if err != nil {
		return err
	}
	if how == "" {
		return fmt.Errorf("%s is running: `cann-train cancel %s` ends it and frees its nodes", id, runName(id))
	}
	reg, err := readRegistry(ctx, c, clusterID)
	if err != nil {
		return err
	}
	var held []string
	for _, r := range reg.Nodes {
		if r.Run == id {
			held = append(held, r.Node.ID)
		}
	}
	if len(held) == 0 {
		if how == "deleted" {
			how = "the server knows no such run" // (it never was, or is past retention)
		}
		fmt.Fprintf(e.out, "no node is held by %s (%s)\n", id, how)
		return nil
	}
	if err := c.SignalWorkflow(ctx, clusterID, "", spec.SignalRelease, spec.Release{RunID: id}); err != nil {
		return fmt.Errorf("signal %s: %w", clusterID, err)
	}
	// The signal is recorded; the Cluster applies it when a control
	// worker runs its next task. Say "released" once it has.
	wait, cancel := context.WithTimeout(ctx, releaseWait)
	defer cancel()
	for {
		if reg, err := readRegistry(wait, c, clusterID); err == nil && !slices.ContainsFunc(reg.Nodes, func(r workflows.NodeRecord) bool { return r.Run == id }) {
			fmt.Fprintf(e.out, "released %d node(s) held by %s (%s): %v\n", len(held), id, how, held)
			return nil
		}
		select {
		case <-wait.Done():
			fmt.Fprintf(e.out, "asked %s to release %d node(s) held by %s (%s): %v; not done after %s — it is when a control worker serves the registry (`cann-train nodes` shows them free then)\n",
				clusterID, len(held), id, how, held, releaseWait)
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// releaseWait: how long `nodes release` waits to see the nodes free.
const releaseWait = 10 * time.Second

// readRegistry asks the Cluster clusterID for its nodes.
func readRegistry(ctx context.Context, c client.Client, clusterID string) (workflows.Registry, error) {
	var reg workflows.Registry
	if err := controlWorkerPolls(ctx, c); err != nil {
		return reg, err
	}
	v, err := queryWorkflow(ctx, c, clusterID, "", spec.QueryRegistry)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return reg, fmt.Errorf("no node registry %q: no node worker has registered yet (start `cann-train worker node --id ...`)", clusterID)
	}
	if noAnswer := (*noAnswerError)(nil); errors.As(err, &noAnswer) {
		return reg, err // (it names the registry)
	}
	if err != nil {
		return reg, fmt.Errorf("query the node registry %s: %w", clusterID, err)
	}
	if err := v.Get(&reg); err != nil {
		return reg, fmt.Errorf("decode the node registry: %w", err)
	}
	return reg, nil
}

// judgedNodes is the registry clusterID and its nodes judged at now as
// `cann-train nodes` shows them (nodeRows, orphans and paused holders
// marked).
func judgedNodes(ctx context.Context, c client.Client, clusterID string, now time.Time) (workflows.Registry, []nodeRow, error) {
	reg, err := readRegistry(ctx, c, clusterID)
	if err != nil {
		return reg, nil, err
	}
	rows := nodeRows(reg, now)
	markOrphans(ctx, c, rows)
	return reg, rows, nil
}

// setDrained signals the Cluster to drain node (or put it back) once it
// knows the node, and says what follows.
func setDrained(cmd *cobra.Command, e *env, clusterID, node string, drained bool, reason string) error {
	ctx := cmd.Context()
	c, err := dialQuiet(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	reg, err := readRegistry(ctx, c, clusterID)
	var noAnswer *noAnswerError
	if err != nil && drained && (errors.As(err, &noAnswer) || errors.Is(err, errNoControlWorker)) {
		// The server records the signal without a control worker, as it
		// does a pause or a scale: the drain is applied once one runs.
		if serr := c.SignalWorkflow(ctx, clusterID, "", spec.SignalDrain, spec.Drain{NodeID: node, Drained: true, Reason: reason}); serr != nil {
			return fmt.Errorf("%w; and signal %s: %w", err, clusterID, serr)
		}
		fmt.Fprintf(e.err, "note: %v\n  the drain is recorded and takes effect once a control worker runs the registry (whether %s is registered was not checked: `cann-train nodes` shows it drained then)\n", err, node)
		fmt.Fprintf(e.out, "%s: drain requested\n", node)
		return nil
	}
	if err != nil {
		return err
	}
	var rec *workflows.NodeRecord
	var ids []string
	for i := range reg.Nodes {
		ids = append(ids, reg.Nodes[i].Node.ID)
		if reg.Nodes[i].Node.ID == node {
			rec = &reg.Nodes[i]
		}
	}
	if rec == nil {
		return fmt.Errorf("no node %q in %s (registered: %v)", node, clusterID, ids)
	}
	if !drained && !rec.Drained {
		fmt.Fprintf(e.out, "%s is not drained: nothing to undo\n", node)
		return nil
	}
	if err := c.SignalWorkflow(ctx, clusterID, "", spec.SignalDrain, spec.Drain{NodeID: node, Drained: drained, Reason: reason}); err != nil {
		return fmt.Errorf("signal %s: %w", clusterID, err)
	}
	fmt.Fprintln(e.out, drainSaid(reg, *rec, drained))
	return nil
}

// drainSaid says what follows the drain of rec's node (or, !drained, its
// return to the pool), reg being the registry before it.
func drainSaid(reg workflows.Registry, rec workflows.NodeRecord, drained bool) string {
	node := rec.Node.ID
	switch {
	case !drained:
		return node + " is back in the pool"
	case rec.Run != "" && freeBeside(reg, node) == 0:
		return fmt.Sprintf("%s drained: no run gets it now; no other node is free, so %s moves off it at its next chunk boundary only if it can "+
			"train on without it (above its min_nodes), else keeps it until a free node can take its rank, asking again every minute (`cann-train status %s` shows it)",
			node, rec.Run, runName(rec.Run))
	case rec.Run != "":
		return fmt.Sprintf("%s drained: no run gets it now; %s moves off it at its next chunk boundary (`cann-train status %s` shows it)",
			node, rec.Run, runName(rec.Run))
	}
	return node + " drained: no run gets it now"
}

// freeBeside counts the free nodes other than node, judged as `nodes`
// does.
func freeBeside(reg workflows.Registry, node string) int {
	n := 0
	for _, r := range nodeRows(reg, time.Now()) {
		if r.State == "free" && r.ID != node {
			n++
		}
	}
	return n
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
