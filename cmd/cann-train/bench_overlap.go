package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/internal/trainbench"
)

func newBenchOverlapCmd(e *env) *cobra.Command {
	var o trainbench.OverlapOptions
	var output string
	cmd := &cobra.Command{
		Use:   "overlap",
		Short: "Communication hidden behind the backward pass: how much, on the built-in task",
		Long: `Trains the built-in task (an MNIST MLP, by default with hidden layers
64,1024,1024 so that computation outweighs communication) over --ranks
in-process ranks linked by loopback TCP (by default as many as CPUs, 2 to 3),
twice from the same seed:

  serial      the whole gradient is averaged in one ring allreduce after
              backward (engine Trainer.Step)
  overlapped  the gradient is cut into buckets (--bucket-bytes, the first
              --first-bucket-bytes; never across layers), each averaged on a
              communication goroutine as soon as backward has produced it
              (backward runs from the last layer to the first), and the
              optimizer waits only for what is left (Trainer.StepOverlap with
              an engine.AsyncReducer)

and prints per step, averaged over ranks and per chunk of --chunk steps: the
step time, the communication time, the time the step waited for it, the
computation time, and hidden_comm_pct = 100·(1 − waited / communication time)
(hidden_of_serial_comm_pct: the same against the serial run's communication
time, which sharing the cores with backward does not stretch).
comm_share_pct is the serial run's communication over its step time;
overlap_efficiency_pct = 100·(1 − (overlapped step − serial computation) /
serial communication) also charges the overlap for computation slowed by
communication sharing its cores. GOMAXPROCS is raised to 2·ranks for the run
(--procs) so that every rank's communication goroutine has a P of its own,
as a rank process on two cores would.`,
		Example: `  cann-train bench overlap
  cann-train bench overlap --hidden 64,1024,1024 --steps 60 -o json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "table", "json"); err != nil {
				return err
			}
			if o.Ranks == 1 {
				return errors.New("--ranks 1: one rank has nothing to overlap; want 2 or more (0: the CPUs, within 2..3)")
			}
			for i, h := range o.Hidden {
				if h < 1 || h > engine.MaxLayerWidth {
					return fmt.Errorf("--hidden %v: layer %d is %d wide; want 1..%d", o.Hidden, i+1, h, engine.MaxLayerWidth)
				}
			}
			if o.Warmup == 0 {
				o.Warmup = -1 // (trainbench's 0 is its default)
			}
			res, err := trainbench.Overlap(cmd.Context(), o)
			if err != nil {
				return err
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(res)
			}
			fmt.Fprintf(e.out, "# %s; %d ranks, hidden %v, %d params, batch %d per rank, %d buckets (first ≤ %d B, then ≤ %d B), GOMAXPROCS %d, %d timed steps\n",
				res.Task, res.Ranks, res.Hidden, res.Params, res.BatchPerRank, res.Buckets, res.FirstBucketBytes, res.BucketBytes, res.GOMAXPROCS, res.Steps)
			fmt.Fprintf(e.out, "%-11s %6s %9s %9s %9s %10s %7s\n", "run", "steps", "step ms", "comm ms", "wait ms", "compute ms", "hidden")
			for _, r := range []struct {
				name string
				run  trainbench.OverlapRun
			}{{"serial", res.Serial}, {"overlapped", res.Overlapped}} {
				for _, c := range r.run.Chunks {
					fmt.Fprintf(e.out, "%-11s %6s %9.1f %9.1f %9.1f %10.1f %6.1f%%\n", r.name, fmt.Sprintf("%d-%d", c.FirstStep, c.FirstStep+c.Steps-1), c.StepMs, c.CommMs, c.WaitMs, c.ComputeMs, c.HiddenCommPct)
				}
				c := r.run.OverlapChunk
				fmt.Fprintf(e.out, "%-11s %6s %9.1f %9.1f %9.1f %10.1f %6.1f%%\n", r.name, "all", c.StepMs, c.CommMs, c.WaitMs, c.ComputeMs, c.HiddenCommPct)
			}
			fmt.Fprintf(e.out, "hidden_comm_pct %.1f %% (of the serial communication time: %.1f %%), comm_share_pct %.1f %% (computation %.2f× communication), step %.1f ms serial vs %.1f ms overlapped (%.2f×), overlap_efficiency_pct %.1f %%\n",
				res.HiddenCommPct, res.HiddenOfSerialCommPct, res.CommSharePct, res.ComputeOverComm, res.Serial.StepMs, res.Overlapped.StepMs, res.Speedup, res.OverlapEfficiencyPct)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 0, "data-parallel ranks (0: the CPUs, within 2..3; more ranks than cores time-slice and drift apart)")
	f.IntVar(&o.Steps, "steps", 40, "timed steps of each run")
	f.IntVar(&o.Warmup, "warmup", 3, "untimed steps first (0: none)")
	f.IntVar(&o.Chunk, "chunk", 0, "steps per reported chunk (0: a quarter of --steps)")
	f.IntSliceVar(&o.Hidden, "hidden", trainbench.DefaultOverlapHidden, "hidden layer widths")
	f.IntVar(&o.BatchPerRank, "batch", 32, "examples per rank per step")
	f.IntVar(&o.BucketBytes, "bucket-bytes", trainbench.DefaultOverlapBucketBytes, "bucket size cap")
	f.IntVar(&o.FirstBucketBytes, "first-bucket-bytes", trainbench.DefaultOverlapFirstBucketBytes, "cap of the first bucket (the last layer's)")
	f.IntVar(&o.Procs, "procs", 0, "GOMAXPROCS during the run (0: max(2·ranks, current); negative: unchanged)")
	f.StringVarP(&output, "output", "o", "table", benchOutputHelp)
	atLeast(f, "0", "ranks", "chunk", "warmup")
	atLeast(f, "1", "steps", "batch", "bucket-bytes", "first-bucket-bytes")
	return cmd
}
