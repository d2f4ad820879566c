package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/internal/trainbench"
)

func newBenchCompressionCmd(e *env) *cobra.Command {
	var o trainbench.CompressionOptions
	var output, svg string
	cmd := &cobra.Command{
		Use:   "compression",
		Short: "Gradient compression on the built-in task: traffic saved, convergence kept",
		Long: `Trains the built-in task (MNIST MLP, data parallel over --ranks in-process
ranks linked by loopback TCP) twice from the same seed: with plain allreduce,
then with the gradient compressed by --codec (error feedback on, after
--warmup uncompressed steps). Prints the gradient traffic per rank of both
runs, their ratio (traffic_reduction) and the gap between their test-set
losses after the last step (final_loss_gap_pct); --svg draws both loss
curves.`,
		Example: `  cann-train bench compression --codec topk:0.01 --steps 600 -o json --svg loss.svg
  cann-train bench compression --codec sign --ranks 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			res, err := trainbench.Compression(cmd.Context(), o)
			if err != nil {
				return err
			}
			if svg != "" {
				f, err := os.Create(svg)
				if err != nil {
					return err
				}
				title := fmt.Sprintf("%s, %d ranks: uncompressed vs %s (%.0f× less traffic)", "MNIST MLP", res.Ranks, res.Codec, res.TrafficReduction)
				werr := trainbench.WriteCurvesSVG(f, title, 20,
					trainbench.Curve{Name: "uncompressed", Color: "#1f77b4", Values: res.Dense.Loss},
					trainbench.Curve{Name: res.Codec + " + error feedback", Color: "#d62728", Values: res.Compressed.Loss})
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				if werr != nil {
					return werr
				}
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(res)
			}
			fmt.Fprintf(e.out, "# %s; %d ranks, %d steps, codec %s after %d uncompressed steps\n", res.Task, res.Ranks, res.Steps, res.Codec, res.Warmup)
			fmt.Fprintf(e.out, "%-14s %14s %10s %10s %8s\n", "run", "bytes/rank", "test loss", "accuracy", "seconds")
			for _, r := range []struct {
				name string
				run  trainbench.Run
			}{{"uncompressed", res.Dense}, {"compressed", res.Compressed}} {
				fmt.Fprintf(e.out, "%-14s %14.0f %10.4f %9.2f%% %8.1f\n", r.name, r.run.BytesPerRank, r.run.TestLoss, 100*r.run.TestAccuracy, r.run.Seconds)
			}
			fmt.Fprintf(e.out, "traffic_reduction %.1f×, final_loss_gap_pct %+.2f %%\n", res.TrafficReduction, res.FinalLossGapPct)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 3, "data-parallel ranks")
	f.IntVar(&o.Steps, "steps", 600, "training steps of each run")
	f.StringVar(&o.Codec, "codec", "topk:0.01", "none, topk:RATIO, sign[:BUCKET], int8[:BUCKET]")
	f.IntVar(&o.Warmup, "warmup", 0, "uncompressed steps first (0: 2 % of --steps; negative: none)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.StringVar(&svg, "svg", "", "write both loss curves to this SVG file")
	return cmd
}
