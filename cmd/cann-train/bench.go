package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/ascend/bench"
	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure recovery, collectives, gradient compression, overlap and the strategy planner on this machine",
	}
	cmd.AddCommand(newBenchRecoveryCmd(e), newBenchCollectiveCmd(e), newBenchCompressionCmd(e), newBenchOverlapCmd(e), newBenchStrategyCmd(e))
	return cmd
}

func newBenchCollectiveCmd(e *env) *cobra.Command {
	var opts bench.Options
	var ranks int
	var transport string
	fs := flag.NewFlagSet("collective", flag.ContinueOnError)
	opts.RegisterFlags(fs)
	cmd := &cobra.Command{
		Use:   "collective",
		Short: "nccl-tests-style collective benchmark: N rank processes on loopback",
		Long: `Starts N ranks as separate OS processes talking over loopback TCP (or shared
memory) and prints the nccl-tests table for each size: size count type redop
root time algbw busbw #wrong, out-of-place and in-place, and the average bus
bandwidth (GB = 1e9). Every size is checked for correctness.`,
		Example: `  cann-train bench collective --op allreduce --ranks 2 --transport tcp -b 8 -e 256M -f 2
  cann-train bench collective --coll allreduce --np 4 -b 1M -e 64M -f 4 --algo ring,hd,tree -o json
  cann-train bench collective --np 2 --shm -b 1M -e 64M -f 4`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ranks > 0 {
				if cmd.Flags().Changed("np") && opts.Ranks != ranks {
					return fmt.Errorf("--ranks %d and --np %d: give the number of ranks once", ranks, opts.Ranks)
				}
				opts.Ranks = ranks
			}
			switch transport {
			case "tcp":
			case "shm", "auto": // all ranks share this host: shared memory is the fast path
				opts.SharedMemory = true
			default:
				return fmt.Errorf("--transport %q: want tcp, shm or auto", transport)
			}
			opts.Stdout, opts.Stderr = e.out, e.err
			return bench.Launch(cmd.Context(), opts, func(a ...string) *exec.Cmd {
				return e.command(append([]string{"bench", "collective"}, a...)...)
			})
		},
	}
	cmd.Flags().AddGoFlagSet(fs)
	cmd.Flags().IntVar(&ranks, "ranks", 0, "ranks (processes) to launch; same as --np")
	atLeast(cmd.Flags(), "1", "ranks")
	cmd.Flags().StringVar(&transport, "transport", "tcp", "tcp, shm, or auto (shm when all ranks share a host, as here); --shm is shm")
	cmd.AddCommand(&cobra.Command{
		Use:                "bench-rank",
		Short:              "one rank of `bench collective` (started by it)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := bench.ParseChildArgs(args)
			if err != nil {
				return err
			}
			return bench.RunChild(cmd.Context(), a, e.out)
		},
	})
	return cmd
}

type recoveryBenchOptions struct {
	kills, nodes    int
	steps, chunk    int64
	ckptEvery       int64
	seed            uint64
	killAt          string // random or chunk-end
	fault           string // spec.FaultKill or spec.FaultFreeze
	hbTimeout       time.Duration
	output, dataDir string
}

// RecoveryTrial is one killed run.
type RecoveryTrial struct {
	Trial     int     `json:"trial"`
	Victim    string  `json:"victim"`
	KillStep  int64   `json:"kill_step"`
	Detect    float64 `json:"detect_s"`
	Replace   float64 `json:"replace_s"`
	Resume    float64 `json:"resume_s"`
	LostSteps int64   `json:"lost_steps"`
	Identical bool    `json:"identical"`
	Error     string  `json:"error,omitempty"`
}

// RecoveryBench is `bench recovery`'s result.
type RecoveryBench struct {
	Trials          []RecoveryTrial `json:"trials"`
	MedianDetect    float64         `json:"median_detect_s"`
	MedianReplace   float64         `json:"median_replace_s"`
	MedianResume    float64         `json:"median_resume_s"`
	MedianLostSteps float64         `json:"median_lost_steps"`
	CheckpointEvery int64           `json:"checkpoint_every"`
	AllIdentical    bool            `json:"all_identical"`
	// Fault is how the victims failed: kill or freeze.
	Fault string `json:"fault"`
	// HeartbeatTimeout finds a frozen node (seconds).
	HeartbeatTimeout float64 `json:"heartbeat_timeout_s"`
}

func newBenchRecoveryCmd(e *env) *cobra.Command {
	o := recoveryBenchOptions{}
	cmd := &cobra.Command{
		Use:   "recovery",
		Short: "SIGKILL (or SIGSTOP) a node at a random step, several times; median detect/replace/resume times",
		Long: `Runs a fault-free reference run, then --kills runs that each SIGKILL one node
worker at a random step (seeded). Each trial has its own spare and cluster
registry. For each: seconds from the kill (when the launcher saw the
process exit) until the workflow acts (detect), from then until the new
membership stands (replace), from the kill until the first step after the
recovery completes (resume); steps lost; and whether the final weights equal
the reference run's bit for bit. With --kill-at chunk-end every kill comes
right after a chunk's last step, before the node reports the chunk (its
peers finish it and name nobody: the run asks a finished node about it).
With --fault freeze the victim SIGSTOPs itself instead (it hangs, its
connections open): found by its heartbeat timeout.`,
		Example: `  cann-train bench recovery --kills 5
  cann-train bench recovery --kills 5 --kill-at chunk-end
  cann-train bench recovery --kills 5 --fault freeze --heartbeat-timeout 2s
  cann-train bench recovery --kills 3 --steps 600 --checkpoint-every 50 -o json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "text", "json"); err != nil {
				return err
			}
			if o.steps < 3*o.ckptEvery {
				return fmt.Errorf("--steps %d: want at least 3 × --checkpoint-every (%d), room for kills between checkpoints", o.steps, 3*o.ckptEvery)
			}
			if o.fault != spec.FaultKill && o.fault != spec.FaultFreeze {
				return fmt.Errorf("--fault %q: want kill or freeze", o.fault)
			}
			if o.killAt != "random" && o.killAt != "chunk-end" {
				return fmt.Errorf("--kill-at %q: want random or chunk-end", o.killAt)
			}
			if o.killAt == "chunk-end" && (o.chunk < 1 || len(chunkEnds(o)) == 0) {
				return fmt.Errorf("--kill-at chunk-end: no chunk ends after the first checkpoint and one checkpoint interval before the last step (--chunk-steps %d)", o.chunk)
			}
			res, err := benchRecovery(cmd.Context(), e, o)
			if err != nil {
				return err
			}
			return printRecoveryBench(e, res, o.output)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.kills, "kills", 5, "killed runs")
	f.IntVar(&o.nodes, "nodes", 3, "nodes per run (plus one spare)")
	f.Int64Var(&o.steps, "steps", 400, "steps per run")
	f.Int64Var(&o.chunk, "chunk-steps", 50, "steps per chunk")
	f.Int64Var(&o.ckptEvery, "checkpoint-every", 50, "checkpoint interval in steps")
	f.Uint64Var(&o.seed, "seed", 1, "seed for victims and kill steps")
	f.StringVar(&o.killAt, "kill-at", "random", "random steps, or chunk-end: a chunk's last step, before the node reports it")
	f.StringVar(&o.fault, "fault", spec.FaultKill, "kill (SIGKILL) or freeze (SIGSTOP: the node hangs)")
	f.DurationVar(&o.hbTimeout, "heartbeat-timeout", 5*time.Second, "the runs' heartbeat timeout (a frozen node is silent this long)")
	atLeast(f, "1s", "heartbeat-timeout")
	atLeast(f, "1", "kills", "steps", "chunk-steps", "checkpoint-every")
	atLeast(f, "2", "nodes")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "bench-recovery"), "checkpoints and logs")
	return cmd
}

func benchRecovery(ctx context.Context, e *env, o recoveryBenchOptions) (RecoveryBench, error) {
	out := RecoveryBench{CheckpointEvery: o.ckptEvery, AllIdentical: true, Fault: o.fault, HeartbeatTimeout: o.hbTimeout.Seconds()}
	lc, err := startLocal(ctx, e, localOptions{port: 0, uiPort: 0, dataDir: o.dataDir})
	if err != nil {
		return out, err
	}
	defer lc.stop()
	stamp := time.Now().Format("150405")
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))

	// trial runs one run on its own registry and nodes; victim < 0: none.
	// struck says when the fault struck the victim (zero: it did not).
	trial := func(name string, victim int, killAt int64) (st spec.RunStatus, struck map[string]injected, err error) {
		cluster := "cluster-" + name
		var victimProc *dev.Proc
		var procs []*dev.Proc
		defer func() {
			for _, p := range procs {
				_ = p.Stop(5 * time.Second)
			}
		}()
		for i := 0; i <= o.nodes; i++ { // the last one is the spare
			p, err := lc.startNode(name+"-n"+strconv.Itoa(i), cluster)
			if err != nil {
				return spec.RunStatus{}, nil, err
			}
			procs = append(procs, p)
			if i == victim {
				victimProc = p
			}
		}
		s := spec.RunSpec{Name: name, Nodes: o.nodes, Steps: o.steps, ChunkSteps: o.chunk,
			CheckpointEvery: o.ckptEvery, HeartbeatTimeout: spec.Duration(o.hbTimeout)}.WithDefaults()
		if err := awaitNodes(ctx, lc.client, cluster, o.nodes+1); err != nil {
			return spec.RunStatus{}, nil, err
		}
		var faults []spec.InjectFault
		victims := map[string]*dev.Proc{}
		if victimProc != nil {
			faults = append(faults, spec.InjectFault{NodeID: victimProc.Name, AtStep: killAt, Kind: o.fault})
			victims[victimProc.Name] = victimProc
		}
		watch := watchFaults(ctx, faults, victims)
		defer watch.stop()
		id, err := startRunWith(ctx, lc.client, s, cluster, faults...)
		if err != nil {
			return spec.RunStatus{}, nil, err
		}
		err = lc.client.GetWorkflow(ctx, id, "").Get(ctx, &st)
		return st, watch.struck(), err
	}

	ref, _, err := trial("ref-"+stamp, -1, 0)
	if err != nil {
		return out, fmt.Errorf("reference run: %w", err)
	}
	fmt.Fprintf(e.err, "reference run: %d steps, weights %.12s\n", ref.Step, ref.WeightsSHA256)
	for i := 1; i <= o.kills; i++ {
		victim := rng.IntN(o.nodes)
		killAt := o.ckptEvery + 1 + rng.Int64N(o.steps-2*o.ckptEvery-1)
		if o.killAt == "chunk-end" {
			ends := chunkEnds(o)
			killAt = ends[rng.IntN(len(ends))]
		}
		name := fmt.Sprintf("kill%d-%s", i, stamp)
		st, struck, err := trial(name, victim, killAt)
		t := RecoveryTrial{Trial: i, Victim: fmt.Sprintf("rank %d", victim), KillStep: killAt}
		switch {
		case err != nil:
			t.Error = err.Error()
		case len(st.Recoveries) != 1:
			t.Error = fmt.Sprintf("%d recoveries, want 1", len(st.Recoveries))
		default:
			r := summarizeRecovery(st.Recoveries[0], struck)
			t.Victim, t.Detect, t.Replace, t.Resume, t.LostSteps = r.FailedNode, r.DetectSeconds, r.ReplaceSeconds, r.ResumeSeconds, r.LostSteps
			t.Identical = st.WeightsSHA256 == ref.WeightsSHA256
		}
		if !t.Identical {
			out.AllIdentical = false
		}
		fmt.Fprintf(e.err, "trial %d: %s (%s) after step %d → detect %.2fs, resume %.2fs, %d steps lost, identical %v %s\n",
			i, t.Victim, o.fault, t.KillStep, t.Detect, t.Resume, t.LostSteps, t.Identical, t.Error)
		out.Trials = append(out.Trials, t)
	}
	var d, r, s, l []float64
	for _, t := range out.Trials {
		if t.Error == "" {
			d, r, s, l = append(d, t.Detect), append(r, t.Replace), append(s, t.Resume), append(l, float64(t.LostSteps))
		}
	}
	out.MedianDetect, out.MedianReplace, out.MedianResume, out.MedianLostSteps = median(d), median(r), median(s), median(l)
	return out, nil
}

// chunkEnds are the steps ending a chunk in (checkpoint-every, steps −
// checkpoint-every]: a kill there loses a whole chunk at most.
func chunkEnds(o recoveryBenchOptions) []int64 {
	var ends []int64
	for s := o.chunk; s <= o.steps-o.ckptEvery; s += o.chunk {
		if s > o.ckptEvery {
			ends = append(ends, s)
		}
	}
	return ends
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func printRecoveryBench(e *env, b RecoveryBench, output string) error {
	if output == "json" {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trial\tvictim\tkill step\tdetect s\treplace s\tfirst step after s\tlost steps\tbit-identical\t")
	for _, t := range b.Trials {
		if t.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\t%d\tERROR: %s\t\t\t\t\t\n", t.Trial, t.Victim, t.KillStep, t.Error)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%.3f\t%.3f\t%d\t%v\t\n", t.Trial, t.Victim, t.KillStep, t.Detect, t.Replace, t.Resume, t.LostSteps, t.Identical)
	}
	fmt.Fprintf(tw, "median\t\t\t%.3f\t%.3f\t%.3f\t%.0f\t%v\t\n", b.MedianDetect, b.MedianReplace, b.MedianResume, b.MedianLostSteps, b.AllIdentical)
	if err := tw.Flush(); err != nil {
		return err
	}
	if b.Fault == spec.FaultFreeze {
		fmt.Fprintf(e.out, "checkpoint every %d steps, heartbeat timeout %gs; detect s and first step after s count from the freeze as the bench saw it (the process found stopped, polled every 2 ms), replace s from when the workflow saw the failure (a frozen node's lost steps count from its last heartbeat, up to 0.8 × the timeout old)\n",
			b.CheckpointEvery, b.HeartbeatTimeout)
	} else {
		fmt.Fprintf(e.out, "checkpoint every %d steps; detect s and first step after s count from the kill as the launcher saw the process exit (an upper bound on its SIGKILL: they can read low, detect even below 0 on a loaded host), replace s from when the workflow saw the failure to the new membership\n", b.CheckpointEvery)
	}
	if !b.AllIdentical {
		return &exitError{fmt.Errorf("a recovered run did not end bit-identical to the reference")}
	}
	return nil
}
