package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// nodeRow is one node as `cann-train nodes` shows it.
type nodeRow struct {
	ID       string    `json:"id"`
	State    string    `json:"state"` // free, busy, failed, silent
	Reason   string    `json:"reason,omitempty"`
	Run      string    `json:"run,omitempty"`
	Rank     int       `json:"rank"`
	Host     string    `json:"host"`
	CommAddr string    `json:"comm_addr"`
	LastSeen time.Time `json:"last_seen"`
}

// nodeRows judges each record as the Cluster does when it hands nodes
// out: failed, silent (no lease renewal for a TTL), busy (held by a run)
// or free.
func nodeRows(reg workflows.Registry, now time.Time) []nodeRow {
	rows := make([]nodeRow, 0, len(reg.Nodes))
	for _, r := range reg.Nodes {
		row := nodeRow{ID: r.Node.ID, Run: r.Run, Rank: r.Rank, Host: r.Node.Host, CommAddr: r.Node.CommAddr, LastSeen: r.LastSeen}
		switch {
		case r.Failed:
			row.State, row.Reason = "failed", r.FailReason
		case now.Sub(r.LastSeen) > reg.LeaseTTL:
			row.State, row.Reason = "silent", fmt.Sprintf("no lease renewal for over %s", reg.LeaseTTL)
		case r.Run != "":
			row.State = "busy"
		default:
			row.State = "free"
		}
		if r.Run == "" {
			row.Rank = -1
		}
		rows = append(rows, row)
	}
	return rows
}

func printNodes(w io.Writer, rows []nodeRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tRUN\tRANK\tHOST\tCOMM\tLAST SEEN")
	free := 0
	for _, r := range rows {
		state, run, rank := r.State, "-", "-"
		if r.Reason != "" {
			state += ": " + clip(r.Reason, 60) // -o json has all of it
		}
		if r.Run != "" {
			run, rank = r.Run, fmt.Sprint(r.Rank)
		}
		if r.State == "free" {
			free++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n", r.ID, state, run, rank, r.Host, r.CommAddr,
			now.Sub(r.LastSeen).Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d node(s), %d free\n", len(rows), free)
	return err
}

func newNodesCmd(e *env) *cobra.Command {
	var output, clusterID string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the registered node workers: free, busy (run and rank), failed (why) or silent",
		Long: `Asks the Cluster workflow (the node registry) for every node worker that
registered: its state as runs see it when they acquire nodes — free; busy in a
run at a rank; failed, with the reason (a dead peer, a heartbeat timeout, a
stopped worker); or silent, its lease not renewed for a TTL — with its host,
collective address and when it was last heard from.`,
		Example: `  cann-train nodes
  cann-train nodes -o json | jq '.[] | select(.state == "free") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			c, err := dialQuiet(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := controlWorkerPolls(cmd.Context(), c); err != nil {
				return err
			}
			v, err := c.QueryWorkflow(cmd.Context(), clusterID, "", spec.QueryRegistry)
			var notFound *serviceerror.NotFound
			if errors.As(err, &notFound) {
				return fmt.Errorf("no node registry %q: no node worker has registered yet (start `cann-train worker node --id ...`)", clusterID)
			}
			if err != nil {
				return fmt.Errorf("query the node registry %s: %w", clusterID, err)
			}
			var reg workflows.Registry
			if err := v.Get(&reg); err != nil {
				return fmt.Errorf("decode the node registry: %w", err)
			}
			now := time.Now()
			rows := nodeRows(reg, now)
			if output == "json" {
				return json.NewEncoder(e.out).Encode(rows)
			}
			return printNodes(e.out, rows, now)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().StringVar(&clusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow that owns the nodes")
	return cmd
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
