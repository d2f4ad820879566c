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
	var linkGbps float64
	cmd := &cobra.Command{
		Use:   "compression",
		Short: "Gradient compression on the built-in task: traffic saved, convergence kept",
		Long: `Trains the built-in task (MNIST MLP, data parallel over --ranks in-process
ranks linked by loopback TCP) twice from the same seed: with Adam and plain
allreduce, then compressed (error feedback on):

  --optimizer adam         the gradient is compressed by --codec after --warmup
                           uncompressed steps (default codec topk:0.01, payloads
                           allgathered)
  --optimizer onebit-adam  1-bit Adam: --freeze-step steps of Adam on the
                           uncompressed gradient (or --grad-codec), then the
                           variance is frozen and the momentum is compressed by
                           --codec (default sign: 1 bit per value), through the
                           two-phase exchange (all-to-all, server re-encoding
                           with its own error feedback, allgather)

--codec auto picks the codec at the end of the warm-up from the measured
bandwidth and computation time (codec.Choose; --link-gbps plans for another
link). Prints the gradient traffic per rank of both runs, their ratio
(traffic_reduction), the gap between their test-set losses after the last step
(final_loss_gap_pct) and between their mean test losses over the last tenth of
the run (tail_loss_gap_pct, less noisy); --svg draws both loss curves.`,
		Example: `  cann-train bench compression --optimizer onebit-adam --steps 2000 -o json --svg loss.svg
  cann-train bench compression --codec topk:0.01 --steps 600
  cann-train bench compression --optimizer onebit-adam --codec auto --link-gbps 1`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "table", "json"); err != nil {
				return err
			}
			// Settings that would leave nothing compressed, or be ignored.
			switch {
			case o.Warmup >= o.Steps:
				return fmt.Errorf("--warmup %d: want fewer than --steps %d, or nothing is compressed", o.Warmup, o.Steps)
			case o.FreezeStep >= o.Steps:
				return fmt.Errorf("--freeze-step %d: want fewer than --steps %d, or nothing is compressed", o.FreezeStep, o.Steps)
			case linkGbps > 0 && o.Codec != "auto":
				return fmt.Errorf("--link-gbps is the link --codec auto decides for: give --codec auto (not %q)", o.Codec)
			}
			o.LinkBytesPerSec = linkGbps * 1e9 / 8
			var svgFile *os.File
			if svg != "" { // before training, which takes minutes: a path that cannot be written fails now
				f, err := os.Create(svg)
				if err != nil {
					return fmt.Errorf("--svg: %w", err)
				}
				svgFile = f
				defer svgFile.Close() // (closed and checked below once written)
			}
			res, err := trainbench.Compression(cmd.Context(), o)
			if err != nil {
				if svgFile != nil {
					_ = os.Remove(svg) // empty: no curves to draw
				}
				return err
			}
			if svgFile != nil {
				if err := writeCompressionSVG(svgFile, res); err != nil {
					return fmt.Errorf("--svg: %w", err)
				}
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(res)
			}
			how := fmt.Sprintf("codec %s after %d uncompressed steps", res.Codec, res.Warmup)
			if res.Optimizer != "adam" {
				how = fmt.Sprintf("%s, momentum codec %s (%s exchange) after %d steps of Adam (gradient codec %s)",
					res.Optimizer, res.Codec, res.Exchange, res.FreezeStep, res.GradCodec)
			}
			fmt.Fprintf(e.out, "# %s; %d ranks, %d steps, seed %d, %s\n", res.Task, res.Ranks, res.Steps, res.Seed, how)
			if a := res.Compressed.Auto; a != nil {
				fmt.Fprintf(e.out, "# auto: %s (need %.3g×, codec %.3g×): %s\n", a.Codec, a.Need, a.Ratio, a.Reason)
			}
			fmt.Fprintf(e.out, "%-14s %14s %10s %10s %10s %8s\n", "run", "bytes/rank", "test loss", "tail loss", "accuracy", "seconds")
			for _, r := range []struct {
				name string
				run  trainbench.Run
			}{{"uncompressed", res.Dense}, {"compressed", res.Compressed}} {
				fmt.Fprintf(e.out, "%-14s %14.0f %10.4f %10.4f %9.2f%% %8.1f\n", r.name, r.run.BytesPerRank, r.run.TestLoss, r.run.TailTestLoss, 100*r.run.TestAccuracy, r.run.Seconds)
			}
			fmt.Fprintf(e.out, "traffic_reduction %.1f×, final_loss_gap_pct %+.2f %%, tail_loss_gap_pct %+.2f %%\n", res.TrafficReduction, res.FinalLossGapPct, res.TailLossGapPct)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 3, "data-parallel ranks")
	f.IntVar(&o.Steps, "steps", 600, "training steps of each run")
	f.Uint64Var(&o.Seed, "seed", 0, "engine seed (0: the engine default)")
	f.StringVar(&o.Optimizer, "optimizer", "adam", "adam (compress the gradient) or onebit-adam (compress the momentum)")
	f.StringVar(&o.Codec, "codec", "", "none, topk:RATIO, sign[:BUCKET], int8[:BUCKET], powersgd:RANK (adam) or auto (default: topk:0.01 with adam, sign with onebit-adam)")
	f.StringVar(&o.Exchange, "exchange", "", "allgather or twophase (default: allgather with adam, twophase with onebit-adam)")
	f.IntVar(&o.Warmup, "warmup", 0, "adam: uncompressed steps first (0: 2 % of --steps; negative: none)")
	f.IntVar(&o.FreezeStep, "freeze-step", 0, "onebit-adam: Adam steps before the variance freezes (0: 1.5 % of --steps)")
	f.StringVar(&o.GradCodec, "grad-codec", "", "onebit-adam: codec of the warm-up's gradient (default none)")
	f.Float64Var(&linkGbps, "link-gbps", 0, "--codec auto: decide for this link bandwidth (Gbit/s) instead of the measured one")
	f.StringVarP(&output, "output", "o", "table", benchOutputHelp)
	atLeast(f, "2", "ranks")
	atLeast(f, "1", "steps")
	atLeast(f, "0", "freeze-step", "link-gbps")
	f.StringVar(&svg, "svg", "", "write both loss curves to this SVG file")
	return cmd
}

// writeCompressionSVG draws both loss curves into f and closes it.
func writeCompressionSVG(f *os.File, res trainbench.CompressionResult) error {
	name := res.Codec + " + error feedback"
	if res.Optimizer != "adam" {
		name = fmt.Sprintf("%s, momentum %s (freeze %d)", res.Optimizer, res.Codec, res.FreezeStep)
	}
	title := fmt.Sprintf("MNIST MLP, %d ranks: Adam vs %s (%.1f× less traffic, final gap %+.2f %%)", res.Ranks, name, res.TrafficReduction, res.FinalLossGapPct)
	werr := trainbench.WriteCurvesSVG(f, title, 20,
		trainbench.Curve{Name: "Adam, uncompressed", Color: "#1f77b4", Values: res.Dense.Loss},
		trainbench.Curve{Name: name, Color: "#d62728", Values: res.Compressed.Loss})
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
