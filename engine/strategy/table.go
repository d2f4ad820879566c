package strategy

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable writes estimates as an aligned text table, one row per plan in
// the given order, with a rank column. Infeasible rows show their reason.
// The zero column shows the stage the row prices where it is not the
// plan's ("3→1", see Estimate.PricedZeRO), and the notes that say why
// follow the table, each once.
func WriteTable(w io.Writer, es []Estimate) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\ttp\tpp\tdp\tcp\tep\tmb\tvpp\tsp\trecompute\tzero\tstep_s\ttok/s\thw_TFLOP/s/dev\tmfu\tmem_GiB\theadroom_GiB\tcomm%\tbubble%\tblast\t")
	for i, e := range es {
		p := e.Plan
		if !e.Feasible {
			mem := "-" // (a plan Check refused was never sized)
			if e.MemPerDeviceGiB > 0 {
				mem = fmt.Sprintf("%.1f", e.MemPerDeviceGiB)
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\t%s\t%s\t-\t-\t-\t-\t%s\t-\t-\t-\t-\t  %s\n",
				i+1, p.TP, p.PP, p.DP, p.CP, p.EP, p.MicroBatch, p.VPP, p.SP, p.Recompute, zeroLabel(e), mem, oneLine(e.Reason))
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\t%s\t%s\t%.3f\t%.0f\t%.1f\t%.1f%%\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n",
			i+1, p.TP, p.PP, p.DP, p.CP, p.EP, p.MicroBatch, p.VPP, p.SP, p.Recompute, zeroLabel(e),
			e.StepTimeS, e.TokensPerS, e.TFLOPSPerDevice, 100*e.MFU, e.MemPerDeviceGiB, e.MemHeadroomGiB,
			100*e.CommShare, 100*e.BubbleShare, e.BlastRadius)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for _, n := range notes(es) {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}

// zeroLabel is the zero column of e: the plan's stage, "3→1" where the
// estimate prices another (a pipelined ZeRO-3 plan).
func zeroLabel(e Estimate) string {
	if e.Note != "" && e.PricedZeRO != e.Plan.ZeRO {
		return fmt.Sprintf("%d→%d", e.Plan.ZeRO, e.PricedZeRO)
	}
	return fmt.Sprint(e.Plan.ZeRO)
}

// notes lists the estimates' notes, each once, in the order first met.
func notes(es []Estimate) []string {
	var out []string
	for _, e := range es {
		if e.Note != "" && !slices.Contains(out, e.Note) {
			out = append(out, e.Note)
		}
	}
	return out
}

// oneLine joins a multi-line reason into one line, its lines apart by
// "; " ("1 problem(s): a; b").
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	var kept []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	out := strings.Join(kept, "; ")
	return strings.ReplaceAll(out, ":; ", ": ")
}
