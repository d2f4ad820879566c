package strategy

import (
	"cmp"
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
	fmt.Fprintln(tw, "#\ttp\tpp\tdp\tcp\tep\tmb\tvpp\tsp\trecompute\tzero\tstep_s\ttok/s\thw_TFLOP/s/dev\tmfu\tmem_GiB\theadroom_GiB\tcomm%\tbubble%\tblast\tlayers\t")
	for i, e := range es {
		p := e.Plan
		split := cmp.Or(e.LayerSplit(), "-")
		if !e.Feasible {
			mem := "-" // (a plan Check refused was never sized)
			if e.MemPerDeviceGiB > 0 {
				mem = fmt.Sprintf("%.1f", e.MemPerDeviceGiB)
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\t%s\t%s\t-\t-\t-\t-\t%s\t-\t-\t-\t-\t%s\t  %s\n",
				i+1, p.TP, p.PP, p.DP, p.CP, p.EP, p.MicroBatch, p.VPP, p.SP, p.Recompute, zeroLabel(e), mem, split, oneLine(e.Reason))
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\t%s\t%s\t%.3f\t%.0f\t%.1f\t%.1f%%\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%s\t\n",
			i+1, p.TP, p.PP, p.DP, p.CP, p.EP, p.MicroBatch, p.VPP, p.SP, p.Recompute, zeroLabel(e),
			e.StepTimeS, e.TokensPerS, e.TFLOPSPerDevice, 100*e.MFU, e.MemPerDeviceGiB, e.MemHeadroomGiB,
			100*e.CommShare, 100*e.BubbleShare, e.BlastRadius, split)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for _, n := range append(notes(es), capNotes(es)...) {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}

// TableLegend explains WriteTable's columns, for a reader of the text
// table (the HTML report's footer says the same).
const TableLegend = `columns:
  hw_TFLOP/s/dev  executed FLOP/s per device, recompute included (hfu × peak; Narayanan et al. eq. 3 under full recompute)
  mfu             model FLOP/s (forward and backward, no recompute; Korthikanti et al. eq. 7) over peak: below hw/peak where layers are recomputed
  comm%, bubble%  exposed (not overlapped) communication, and pipeline fill, drain and stage imbalance, as shares of step_s
  blast           devices whose state no surviving device holds when one device fails (the blast radius)
  layers          layers per pipeline stage: 12×8 is 8 stages of 12; 3+8×12+6 an uneven split (first, 12 in between, last)
FLOPs count GEMMs, the attention core's every key (no causal halving); all figures are predictions of a cost model, not measurements.
`

// WriteLegend writes TableLegend.
func WriteLegend(w io.Writer) error {
	if _, err := io.WriteString(w, TableLegend); err != nil {
		return fmt.Errorf("write table legend: %w", err)
	}
	return nil
}

// The MFU band of published large dense runs on A100/H100
// (/work/shared/reference/strategy.md: "a prediction far outside that band
// needs a reason").
const mfuBandLow, mfuBandHigh = 0.38, 0.56

// capNotes says where the best plan (the first) sits at a search bound,
// naming the flag that widens it; where its MFU is above the published
// band; and where it splits its layers unevenly, how Megatron-Core lays
// that out.
func capNotes(es []Estimate) []string {
	if len(es) == 0 {
		return nil
	}
	var out []string
	e := es[0]
	if e.AtCaps != "" {
		out = append(out, fmt.Sprintf("the best plan sits at the search's bound %s: larger degrees were not tried; "+
			"raise that flag to search further", e.AtCaps))
	}
	if e.Feasible && e.MFU > mfuBandHigh {
		why := ""
		if e.Plan.Overlap && e.PricedZeRO == 3 {
			why = " (overlap prices ZeRO-3's gathers and reduce-scatters as hidden behind compute, at no cost to it)"
		}
		out = append(out, fmt.Sprintf("the best plan's predicted MFU %.1f%% is above the %.0f–%.0f%% published large dense runs reach on A100/H100: "+
			"read it as optimistic%s", 100*e.MFU, 100*mfuBandLow, 100*mfuBandHigh, why))
	}
	if split := e.LayerSplit(); strings.Contains(split, "+") {
		out = append(out, fmt.Sprintf("the best plan splits the layers unevenly (%s); Megatron-Core: %s", split, e.MegatronSplit()))
	}
	return out
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
