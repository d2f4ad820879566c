package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/spec"
)

type strategyBenchOptions struct {
	nodes, reps, batch int
	steps              int64
	output, dataDir    string
	codec              string
}

func newBenchStrategyCmd(e *env) *cobra.Command {
	o := strategyBenchOptions{}
	cmd := &cobra.Command{
		Use:   "strategy",
		Short: "How well `strategy: auto` predicts: its plan against runs on every data-parallel degree",
		Long: `Starts the embedded server and --nodes node workers, then, --reps times: one
run with strategy: auto (the topology scan times every node's computation and
SearchStrategy predicts the step time of training on 1…nodes of them, keeping
the global batch), and one run on each degree d with the same global batch
(skipped where d does not divide it), in an order that rotates from one
repetition to the next. It prints, per degree, the predicted and the measured
steps per second (medians over the repetitions, steps inside chunks) and their
ratio, the planner's choices, and how the degree it chose measured against the
fastest one. With --codec every run compresses its gradient exchange
(job file compression.codec), and the plan prices that.`,
		Example: `  cann-train bench strategy
  cann-train bench strategy --nodes 3 --reps 5 --steps 600 -o json
  cann-train bench strategy --codec auto`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "text", "table", "json"); err != nil {
				return err
			}
			res, err := benchStrategy(cmd.Context(), e, o)
			if err != nil {
				return interrupted(cmd.Context(), err) // Ctrl-C: exit 130
			}
			return printStrategyBench(e, res, o.output)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", 3, "node workers; the plan chooses 1…nodes of them")
	f.IntVar(&o.reps, "reps", 3, "repetitions (each: the auto run, then every degree)")
	f.IntVar(&o.batch, "batch-per-rank", 32, "examples per rank on all nodes: the global batch is nodes × this")
	f.Int64Var(&o.steps, "steps", 600, "steps per run")
	atLeast(f, "1", "nodes", "reps", "batch-per-rank", "steps")
	f.StringVarP(&o.output, "output", "o", "text", benchOutputHelp)
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "bench-strategy"), "checkpoints and logs")
	f.StringVar(&o.codec, "codec", "", "compress every run's gradient exchange: auto, none, sign, int8, topk:RATIO (default: uncompressed)")
	return cmd
}

// StrategyBench is `bench strategy`'s result.
type StrategyBench struct {
	Nodes       int   `json:"nodes"`
	Hosts       int   `json:"hosts"`
	GlobalBatch int   `json:"global_batch"`
	Steps       int64 `json:"steps"`
	Reps        int   `json:"repetitions"`
	// Codec is --codec ("": uncompressed).
	Codec string `json:"codec,omitempty"`
	// Choices is the plan's degree in each repetition; AutoMeasured what
	// the auto run then measured on it (steps/s).
	Choices      []int                    `json:"choices"`
	AutoMeasured []float64                `json:"auto_measured_steps_per_s"`
	Candidates   []StrategyBenchCandidate `json:"candidates"`
	// Fastest is the degree with the highest measured median; Choice the
	// degree the plan chose most often, and ChoiceVsFastest its measured
	// median over the fastest's (1: the plan chose the fastest).
	Fastest         int     `json:"fastest"`
	Choice          int     `json:"choice"`
	ChoiceVsFastest float64 `json:"choice_vs_fastest"`
}

// StrategyBenchCandidate is one data-parallel degree: the plan's
// prediction and the fixed runs' measurements, one per repetition.
type StrategyBenchCandidate struct {
	Ranks     int       `json:"ranks"`
	Predicted []float64 `json:"predicted_steps_per_s"`
	Measured  []float64 `json:"measured_steps_per_s"`
	// PredictedCommUs and MeasuredCommUs are each repetition's time per
	// step in the gradient allreduce (µs): the plan's, and the run's comm
	// share of its measured step time. Both include waiting for the
	// slowest rank (the plan's straggle; the time a rank spends in the
	// call before its peers arrive), which on a loaded host is most of it.
	PredictedCommUs []float64 `json:"predicted_comm_us,omitempty"`
	MeasuredCommUs  []float64 `json:"measured_comm_us,omitempty"`
	// Straggle and Oversubscription are the plan's factors on an
	// undisturbed rank's computation (spec.StrategyCandidate), per
	// repetition.
	Straggle         []float64 `json:"straggle,omitempty"`
	Oversubscription []float64 `json:"oversubscription,omitempty"`
	// Codecs are the compression the plan priced, per repetition ("":
	// none); PredictedCodecUs the encoding and decoding in its
	// communication.
	Codecs           []string  `json:"codecs,omitempty"`
	PredictedCodecUs []float64 `json:"predicted_codec_us,omitempty"`
	// Medians over the repetitions, and measured over predicted.
	PredictedMedian     float64 `json:"predicted_median"`
	MeasuredMedian      float64 `json:"measured_median"`
	Ratio               float64 `json:"measured_over_predicted,omitempty"`
	PredictedCommMedian float64 `json:"predicted_comm_us_median,omitempty"`
	MeasuredCommMedian  float64 `json:"measured_comm_us_median,omitempty"`
	Skipped             string  `json:"skipped,omitempty"`
}

func benchStrategy(ctx context.Context, e *env, o strategyBenchOptions) (StrategyBench, error) {
	g := o.nodes * o.batch
	out := StrategyBench{Nodes: o.nodes, GlobalBatch: g, Steps: o.steps, Reps: o.reps, Codec: o.codec}
	for d := 1; d <= o.nodes; d++ {
		c := StrategyBenchCandidate{Ranks: d}
		if g%d != 0 {
			c.Skipped = fmt.Sprintf("global batch %d is not a multiple of %d", g, d)
		}
		out.Candidates = append(out.Candidates, c)
	}
	if _, err := o.spec("check", o.nodes, true); err != nil {
		return out, err // before starting anything
	}
	lc, err := startLocal(ctx, e, localOptions{port: 0, uiPort: 0, dataDir: o.dataDir})
	if err != nil {
		return out, err
	}
	defer lc.stop()
	for i := 1; i <= o.nodes; i++ {
		if _, err := lc.startNode("node-"+strconv.Itoa(i), spec.DefaultClusterID); err != nil {
			return out, err
		}
	}
	if err := awaitNodes(ctx, lc.client, spec.DefaultClusterID, o.nodes); err != nil {
		return out, err
	}
	stamp := time.Now().Format("150405")
	run := func(name string, nodes int, auto bool) (spec.RunStatus, error) {
		s, err := o.spec(name, nodes, auto)
		if err != nil {
			return spec.RunStatus{}, err
		}
		id, err := startRunWith(ctx, lc.client, s, spec.DefaultClusterID)
		if err != nil {
			return spec.RunStatus{}, err
		}
		var st spec.RunStatus
		if err := lc.client.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
			return st, fmt.Errorf("%s: %w", id, err)
		}
		if st.Phase != spec.PhaseCompleted || st.StepsPerSec <= 0 {
			return st, fmt.Errorf("%s: %s at step %d, %.0f steps/s", id, st.Phase, st.Step, st.StepsPerSec)
		}
		return st, nil
	}
	for rep := 1; rep <= o.reps; rep++ {
		st, err := run(fmt.Sprintf("bench-strategy-%s-r%d-auto", stamp, rep), o.nodes, true)
		if err != nil {
			return out, err
		}
		p := st.Strategy
		if p == nil || len(p.Candidates) != o.nodes {
			return out, fmt.Errorf("repetition %d: the auto run made no plan over %d degrees (%+v)", rep, o.nodes, p)
		}
		if t := st.Topology; t != nil {
			out.Hosts = t.HostCount
		}
		out.Choices = append(out.Choices, p.DataParallel)
		out.AutoMeasured = append(out.AutoMeasured, st.StepsPerSec)
		for _, c := range p.Candidates {
			if c.Ranks >= 1 && c.Ranks <= o.nodes && c.StepSeconds > 0 {
				k := &out.Candidates[c.Ranks-1]
				k.Predicted = append(k.Predicted, 1/c.StepSeconds)
				k.Straggle = append(k.Straggle, c.Straggle)
				k.Oversubscription = append(k.Oversubscription, c.Oversubscription)
				if c.Ranks > 1 {
					k.PredictedCommUs = append(k.PredictedCommUs, 1e6*c.CommSeconds)
					if o.codec != "" {
						k.Codecs = append(k.Codecs, cmp.Or(c.Codec, "none"))
						k.PredictedCodecUs = append(k.PredictedCodecUs, 1e6*c.CodecSeconds)
					}
				}
			}
		}
		fmt.Fprintf(e.err, "repetition %d: plan %d of %d (%s); measured %.0f steps/s on it\n", rep, p.DataParallel, o.nodes, p.Reason, st.StepsPerSec)
		for k := range o.nodes {
			c := &out.Candidates[(k+rep-1)%o.nodes] // rotate the order
			if c.Skipped != "" {
				continue
			}
			st, err := run(fmt.Sprintf("bench-strategy-%s-r%d-d%d", stamp, rep, c.Ranks), c.Ranks, false)
			if err != nil {
				return out, err
			}
			c.Measured = append(c.Measured, st.StepsPerSec)
			if c.Ranks > 1 {
				c.MeasuredCommUs = append(c.MeasuredCommUs, 1e6*st.CommShare/st.StepsPerSec)
			}
			fmt.Fprintf(e.err, "repetition %d: %d rank(s) %.0f steps/s\n", rep, c.Ranks, st.StepsPerSec)
		}
	}
	out.summarize()
	return out, nil
}

// spec is the job of one of the bench's runs, checked.
func (o strategyBenchOptions) spec(name string, nodes int, auto bool) (spec.RunSpec, error) {
	s := spec.RunSpec{Name: name, Nodes: nodes, Steps: o.steps, BatchPerRank: o.nodes * o.batch / nodes,
		HeartbeatTimeout: spec.Duration(5 * time.Second), NodeWait: spec.Duration(time.Minute)}
	if auto {
		s.Strategy = spec.StrategyAuto
	}
	if o.codec != "" {
		s.Compression = &spec.CompressionPolicy{Codec: o.codec}
	}
	s = s.WithDefaults()
	return s, s.Validate()
}

// summarize fills the medians, ratios, the fastest degree and the
// plan's usual choice.
func (b *StrategyBench) summarize() {
	b.Fastest, b.Choice, b.ChoiceVsFastest = 0, 0, 0
	for i := range b.Candidates {
		c := &b.Candidates[i]
		c.PredictedMedian, c.MeasuredMedian, c.Ratio = median(c.Predicted), median(c.Measured), 0
		c.PredictedCommMedian, c.MeasuredCommMedian = median(c.PredictedCommUs), median(c.MeasuredCommUs)
		if c.PredictedMedian > 0 && c.MeasuredMedian > 0 {
			c.Ratio = c.MeasuredMedian / c.PredictedMedian
		}
		if c.MeasuredMedian > 0 && (b.Fastest == 0 || c.MeasuredMedian > b.Candidates[b.Fastest-1].MeasuredMedian) {
			b.Fastest = c.Ranks
		}
	}
	count := map[int]int{}
	for _, d := range b.Choices {
		count[d]++
		if b.Choice == 0 || count[d] > count[b.Choice] || count[d] == count[b.Choice] && d < b.Choice {
			b.Choice = d
		}
	}
	if b.Fastest > 0 && b.Choice >= 1 && b.Choice <= len(b.Candidates) {
		if m := b.Candidates[b.Choice-1].MeasuredMedian; m > 0 {
			b.ChoiceVsFastest = m / b.Candidates[b.Fastest-1].MeasuredMedian
		}
	}
}

func printStrategyBench(e *env, b StrategyBench, output string) error {
	if output == "json" {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	compressed := ""
	if b.Codec != "" {
		compressed = ", compression " + b.Codec
	}
	fmt.Fprintf(e.out, "# strategy: auto on %d node(s), %d host(s); MNIST MLP, global batch %d, %d steps per run, %d repetition(s)%s\n",
		b.Nodes, b.Hosts, b.GlobalBatch, b.Steps, b.Reps, compressed)
	w := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ranks\tpredicted steps/s\tmeasured steps/s (min–max)\tmeasured/predicted\tcommunication µs/step predicted / measured\t")
	for _, c := range b.Candidates {
		mark := ""
		if c.Ranks == b.Choice {
			mark = " *"
		}
		if c.Skipped != "" {
			fmt.Fprintf(w, "%d%s\t%.0f\tnot measured: %s\t\t\n", c.Ranks, mark, c.PredictedMedian, c.Skipped)
			continue
		}
		comm := "-"
		if c.Ranks > 1 {
			comm = fmt.Sprintf("%.0f / %.0f", c.PredictedCommMedian, c.MeasuredCommMedian)
			if len(c.Codecs) > 0 {
				comm += fmt.Sprintf(" (priced: %s, %.0f µs encoding)", strings.Join(slices.Compact(slices.Clone(c.Codecs)), ", "), median(c.PredictedCodecUs))
			}
		}
		fmt.Fprintf(w, "%d%s\t%.0f\t%.0f (%.0f–%.0f)\t%.2f\t%s\t\n", c.Ranks, mark, c.PredictedMedian, c.MeasuredMedian,
			slices.Min(c.Measured), slices.Max(c.Measured), c.Ratio, comm)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "choices %v (* the usual one); the auto runs measured %s steps/s on theirs\n", b.Choices, joinFloats(b.AutoMeasured))
	if b.Fastest > 0 && b.ChoiceVsFastest > 0 {
		fmt.Fprintf(e.out, "measured fastest: %d rank(s); the usual choice ran at %.2f× its speed\n", b.Fastest, b.ChoiceVsFastest)
	}
	return nil
}

func joinFloats(xs []float64) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += strconv.FormatFloat(x, 'f', 0, 64)
	}
	return s
}
