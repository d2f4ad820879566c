package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure recovery, collectives, gradient compression, overlap and the strategy planner on this machine",
		Long: `Measures on this machine: recovery from a killed node, the collectives (bus
bandwidth against the links' limit), gradient compression, compute and
communication overlap, and the strategy planner's predictions against real
runs. Each subcommand says what it compares its figures with.`,
	}
	cmd.AddCommand(newBenchRecoveryCmd(e), newBenchCollectiveCmd(e), newBenchCompressionCmd(e), newBenchOverlapCmd(e), newBenchStrategyCmd(e))
	return cmd
}

// benchOutputHelp is the --output help of every bench subcommand: all
// take the same words (bench collective's is ascend/bench's).
const benchOutputHelp = "text or table (the same), or json"

func newBenchCollectiveCmd(e *env) *cobra.Command {
	var opts bench.Options
	var ranks int
	var transport string
	cmd := &cobra.Command{
		Use:   "collective",
		Short: "nccl-tests-style collective benchmark: N rank processes on loopback",
		Long: `Starts N ranks as separate OS processes talking over loopback TCP (or shared
memory) and prints the nccl-tests table for each size as it is measured: size
count type redop root time algbw busbw #wrong, out-of-place and in-place, and
the average bus bandwidth (GB/s, GB = 1e9 B). Every size is checked for
correctness (-c 0: not). Sizes (-b, -e, -i, --sockbuf) are bytes with optional
K, M, G suffixes, powers of 1024; each is rounded down to whole elements (for
reducescatter, allgather and alltoall, whole elements per rank): one that
rounds down to none gives a row of 0 bytes, as in nccl-tests, left out of the
average. Durations (-T, --spin) need their unit: 200ms, 50us, -1ns.

The long flags are nccl-tests' (--minbytes, --maxbytes, --stepfactor,
--stepbytes, --iters, --check, --root, --datatype), and --warmup-iters
(nccl-tests' --warmup_iters, still taken but deprecated), except that
nccl-tests' -o is the reduction, here --op: -o is --output (table, or
text: the same, or json). With -R 1 (--shared-buffers) a forced ring runs
direct (the same bits), as auto does: the ring's table's heading says so,
and tables that would run the same calls (--algo auto,direct, ring,direct)
are measured once, a line standing for the others. double and int32
reductions (allreduce, reduce, reducescatter) run gather or shares whatever
algorithm is forced: there only auto has a table. Each table's footer gives
its best busbw as a percentage of the physical limit measured nearest its
size (loopback TCP, or memcpy over shared memory); -o json gives it for
every row (bus_bw_pct_of_limit).`,
		Example: `  cann-train bench collective --op allreduce --ranks 2 --transport tcp -b 8 -e 256M -f 2
  cann-train bench collective --coll allreduce --np 4 -b 1M -e 64M -f 4 --algo ring,hd,tree -o json
  cann-train bench collective --np 2 --shm -b 1M -e 64M -f 4
  cann-train bench collective --minbytes 1M --maxbytes 64M --stepfactor 4 --shm --shared-buffers 1 --output text`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Format, "text", "table", "json"); err != nil { // as every bench says it
				return err
			}
			if err := opts.CheckSetFlags(cmd.Flags().Changed); err != nil {
				return err
			}
			if ranks > 0 {
				if cmd.Flags().Changed("np") && opts.Ranks != ranks {
					return fmt.Errorf("--ranks %d and --np %d: give the number of ranks once", ranks, opts.Ranks)
				}
				opts.Ranks = ranks
			}
			switch transport {
			case "tcp":
				if opts.SharedMemory && cmd.Flags().Changed("transport") {
					return errors.New("--shm and --transport tcp: give one transport")
				}
			case "shm", "auto": // all ranks share this host: shared memory is the fast path
				opts.SharedMemory = true
			default:
				return fmt.Errorf("--transport %q: want tcp, shm or auto", transport)
			}
			if opts.SharedBuffers && !opts.SharedMemory {
				return errors.New("-R 1 (shared buffers) needs shared-memory links: --shm, or --transport shm or auto")
			}
			opts.Stdout, opts.Stderr = e.out, e.err
			return bench.Launch(cmd.Context(), opts, func(a ...string) *exec.Cmd {
				return e.command(append([]string{"bench", "collective"}, a...)...)
			})
		},
	}
	opts.RegisterFlags(cmd.Flags())
	// The notice for a deprecated flag (--warmup_iters) goes to stderr:
	// cobra would print it on the command's output, stdout here, ahead
	// of the table or the JSON that scripts read.
	cmd.Flags().SetOutput(e.err)
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
	// Identical: the final weights equal the reference run's (false, and
	// the times 0, where Error says the trial failed).
	Identical bool   `json:"identical"`
	Error     string `json:"error,omitempty"`
}

// RecoveryBench is `bench recovery`'s result.
type RecoveryBench struct {
	Trials []RecoveryTrial `json:"trials"`
	// Medians over the trials without an error (null: none).
	MedianDetect    *float64 `json:"median_detect_s"`
	MedianReplace   *float64 `json:"median_replace_s"`
	MedianResume    *float64 `json:"median_resume_s"`
	MedianLostSteps *float64 `json:"median_lost_steps"`
	CheckpointEvery int64    `json:"checkpoint_every"`
	// AllIdentical: every trial without an error ended bit-identical to
	// the reference run; Errors counts the trials that failed.
	AllIdentical bool `json:"all_identical"`
	Errors       int  `json:"errors"`
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
			if err := checkOutput(o.output, "text", "table", "json"); err != nil {
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
			return finishRecoveryBench(cmd.Context(), e, o, res, err)
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
	f.StringVarP(&o.output, "output", "o", "text", benchOutputHelp)
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "bench-recovery"), "logs, and the checkpoints of a trial run that failed (a finished one's are deleted)")
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
		if err = lc.client.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
			return st, watch.struck(), fmt.Errorf("%w (its checkpoints and logs stay in %s)", err, o.dataDir)
		}
		// A finished trial's checkpoints served only it: the next trials
		// would otherwise leave gigabytes behind in --data-dir.
		if err := purgeCheckpoints(ctx, lc.ckptURL, name); err != nil {
			return st, watch.struck(), fmt.Errorf("delete the checkpoints of trial run %s: %w", name, err)
		}
		return st, watch.struck(), nil
	}

	ref, _, err := trial("ref-"+stamp, -1, 0)
	if err != nil {
		return out, fmt.Errorf("reference run: %w", err)
	}
	fmt.Fprintf(e.err, "reference run: %d steps, weights %.12s\n", ref.Step, ref.WeightsSHA256)
	err = recoveryTrials(ctx, o, &out, ref.WeightsSHA256, stamp, e.err, trial)
	return out, err
}

// purgeCheckpoints deletes every checkpoint of the finished run and then
// its chunks, with no grace period: nothing saves the run any more.
func purgeCheckpoints(ctx context.Context, url, run string) error {
	if _, _, _, err := deleteCheckpoints(ctx, url, run); err != nil {
		return err
	}
	store, err := checkpoint.OpenWithOptions(ctx, url, checkpoint.Options{GCGrace: -1})
	if err != nil {
		return err
	}
	defer store.Close()
	_, err = store.GC(ctx, run)
	return err
}

// recoveryTrial runs one trial run (victim < 0: none) and says when the
// fault struck (see benchRecovery).
type recoveryTrial func(name string, victim int, killAt int64) (spec.RunStatus, map[string]injected, error)

// recoveryTrials runs the --kills trials with trial, each against the
// reference weights ref, into out (trials, medians, identity, errors),
// with a progress line each on log. A trial that fails is an error, not a
// run that ended different. When ctx ends (Ctrl-C) it stops: out holds
// the trials finished before, and it returns ctx's error.
func recoveryTrials(ctx context.Context, o recoveryBenchOptions, out *RecoveryBench, ref, stamp string, log io.Writer, trial recoveryTrial) error {
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	for i := 1; i <= o.kills && ctx.Err() == nil; i++ {
		victim := rng.IntN(o.nodes)
		killAt := o.ckptEvery + 1 + rng.Int64N(o.steps-2*o.ckptEvery-1)
		if o.killAt == "chunk-end" {
			ends := chunkEnds(o)
			killAt = ends[rng.IntN(len(ends))]
		}
		name := fmt.Sprintf("kill%d-%s", i, stamp)
		st, struck, err := trial(name, victim, killAt)
		if ctx.Err() != nil {
			break // interrupted: the trial did not finish, whatever it says
		}
		t := RecoveryTrial{Trial: i, Victim: fmt.Sprintf("rank %d", victim), KillStep: killAt}
		switch {
		case err != nil:
			t.Error = err.Error()
		case len(st.Recoveries) != 1:
			t.Error = fmt.Sprintf("%d recoveries, want 1", len(st.Recoveries))
		default:
			r := summarizeRecovery(st.Recoveries[0], struck)
			t.Victim, t.Detect, t.Replace, t.Resume, t.LostSteps = r.FailedNode, r.DetectSeconds, r.ReplaceSeconds, r.ResumeSeconds, r.LostSteps
			t.Identical = st.WeightsSHA256 == ref
		}
		if t.Error != "" {
			out.Errors++
			fmt.Fprintf(log, "trial %d: %s (%s) after step %d → ERROR: %s\n", i, t.Victim, o.fault, t.KillStep, t.Error)
		} else {
			out.AllIdentical = out.AllIdentical && t.Identical
			fmt.Fprintf(log, "trial %d: %s (%s) after step %d → detect %.2fs, resume %.2fs, %d steps lost, identical %v\n",
				i, t.Victim, o.fault, t.KillStep, t.Detect, t.Resume, t.LostSteps, t.Identical)
		}
		out.Trials = append(out.Trials, t)
	}
	var d, r, s, l []float64
	for _, t := range out.Trials {
		if t.Error == "" {
			d, r, s, l = append(d, t.Detect), append(r, t.Replace), append(s, t.Resume), append(l, float64(t.LostSteps))
		}
	}
	out.MedianDetect, out.MedianReplace, out.MedianResume, out.MedianLostSteps = medianOf(d), medianOf(r), medianOf(s), medianOf(l)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("after %d of %d trials: %w", len(out.Trials), o.kills, err)
	}
	return nil
}

// finishRecoveryBench ends `bench recovery`: it prints the result, and
// fails if a trial failed or ended different from the reference. If
// Ctrl-C came (err is ctx's), it prints the trials finished by then, if
// any, and says it was interrupted (exit 130).
func finishRecoveryBench(ctx context.Context, e *env, o recoveryBenchOptions, res RecoveryBench, err error) error {
	err = interrupted(ctx, err)
	stopped := errors.Is(err, context.Canceled) && ctx.Err() != nil
	if err != nil && (!stopped || len(res.Trials) == 0) {
		return err
	}
	if perr := printRecoveryBench(e, res, o.output); perr != nil {
		return perr
	}
	if stopped {
		return &interruptedError{what: fmt.Sprintf("interrupted after %d of %d trials", len(res.Trials), o.kills), err: err}
	}
	var failed []error
	if res.Errors > 0 {
		failed = append(failed, fmt.Errorf("%d of %d trials failed", res.Errors, len(res.Trials)))
	}
	if !res.AllIdentical {
		failed = append(failed, errors.New("a recovered run did not end bit-identical to the reference"))
	}
	if len(failed) > 0 {
		return &exitError{errors.Join(failed...)}
	}
	return nil
}

// interrupted is err, or where ctx has ended (Ctrl-C) an error that
// wraps ctx's, which main reports as an interruption (exit 130): the
// Temporal SDK's error for a call it cancelled does not wrap it.
func interrupted(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
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

// medianOf is the median of xs, nil if there are none.
func medianOf(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	m := median(xs)
	return &m
}

// median is the median of xs, 0 if there are none.
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

// printRecoveryBench prints the trials and their medians ("-" where no
// trial finished without an error).
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
	identical := "-" // no trial without an error
	if len(b.Trials) > b.Errors {
		identical = strconv.FormatBool(b.AllIdentical)
	}
	fmt.Fprintf(tw, "median\t\t\t%s\t%s\t%s\t%s\t%s\t\n", fmtMedian(b.MedianDetect, 3), fmtMedian(b.MedianReplace, 3), fmtMedian(b.MedianResume, 3), fmtMedian(b.MedianLostSteps, 0), identical)
	if err := tw.Flush(); err != nil {
		return err
	}
	if b.Errors > 0 {
		fmt.Fprintf(e.out, "%d of %d trials failed (ERROR): the medians and bit-identical are over the others\n", b.Errors, len(b.Trials))
	}
	if b.Fault == spec.FaultFreeze {
		fmt.Fprintf(e.out, "checkpoint every %d steps, heartbeat timeout %gs; detect s and first step after s count from the freeze as the bench saw it (the process found stopped, polled every 2 ms), replace s from when the workflow saw the failure (a frozen node's lost steps count from its last heartbeat, up to 0.8 × the timeout old)\n",
			b.CheckpointEvery, b.HeartbeatTimeout)
	} else {
		fmt.Fprintf(e.out, "checkpoint every %d steps; detect s and first step after s count from the kill as the launcher saw the process exit (an upper bound on its SIGKILL: they can read low, detect even below 0 on a loaded host), replace s from when the workflow saw the failure to the new membership\n", b.CheckpointEvery)
	}
	return nil
}

// fmtMedian prints a median with prec decimals, "-" for none.
func fmtMedian(m *float64, prec int) string {
	if m == nil {
		return "-"
	}
	return strconv.FormatFloat(*m, 'f', prec, 64)
}
