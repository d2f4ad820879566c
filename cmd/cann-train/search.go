package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/engine/strategy"
	"github.com/cann-train/cann-train/internal/yamlpos"
)

func newSearchCmd(e *env) *cobra.Command {
	var modelArg, clusterArg, evaluate, output, showPreset string
	var top int
	var listPresets bool
	var space searchSpace
	cmd := &cobra.Command{
		Use:   "search --model M --cluster C",
		Short: "Rank parallel strategies (DP×TP×PP×EP×CP, micro-batch, recompute, ZeRO) by a cost model",
		Long: `Searches every parallel plan that fits in memory and ranks them by predicted
throughput, showing memory headroom, communication and pipeline-bubble shares
and the failure blast radius. --model and --cluster take a YAML file or a
preset name (--list-presets). --evaluate scores one given plan. -o html writes
a self-contained HTML report (inline CSS, no external assets) of the plans.

The search space can be narrowed to what a training framework offers:
--zero and --recompute list the ZeRO stages and recompute modes to try,
--max-tp, --max-cp, --max-ep, --max-mb and --max-vpp cap the degrees
(--max-vpp 1: no interleaving), --no-sp leaves sequence parallelism out,
--min-headroom drops plans with less free device memory, and --overlap
prices every plan with the data-parallel gradient reduction overlapped with
the backward pass and ZeRO-3's parameter gathers prefetched (Megatron's
--overlap-grad-reduce, FSDP, DeepSpeed's overlap_comm; without it the
reduction runs after the pipeline flush). A plan given to --evaluate says
all of that itself (zero=, recompute=, overlap=true, ...).

` + specFieldsHelp(),
		Example: `  cann-train search --model moe_bert --cluster 1024_ascend910b
  cann-train search --model gpt3_18.4b --cluster vtrain_a100_256 --top 5 -o json
  cann-train search --model moe_bert --cluster 1024_ascend910b --top 20 -o html > plans.html
  cann-train search --model gpt3_174.6b --cluster selene_a100_384 --zero 0,1 --recompute selective,full --max-vpp 4 --overlap
  cann-train search --model my_model.yaml --cluster my_cluster.yaml \
      --evaluate "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1,vpp=1,sp=true,ep=1,cp=1"`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "html"); err != nil {
				return err
			}
			switch {
			case showPreset != "":
				b, err := strategy.Preset(showPreset)
				if err != nil {
					return fmt.Errorf("--show-preset: %w", err)
				}
				_, err = e.out.Write(b)
				return err
			case listPresets && output == "html":
				return errors.New("--list-presets: -o html has no list; use -o text or json")
			case listPresets:
				return writePresets(e.out, output)
			}
			if modelArg == "" || clusterArg == "" {
				return errors.New("--model and --cluster are required: a YAML file or a preset (--list-presets)")
			}
			// Given, even empty, --evaluate scores a plan: `--evaluate ""` (an
			// unset shell variable) is a mistake, not a request to search.
			evaluating := cmd.Flags().Changed("evaluate")
			if evaluating && strings.TrimSpace(evaluate) == "" {
				return errors.New(`--evaluate: empty plan: want one such as "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1" (leave --evaluate out to search)`)
			}
			m, err := loadModel(modelArg)
			if err != nil {
				return err
			}
			c, err := loadCluster(clusterArg)
			if err != nil {
				return err
			}
			opts, err := space.options(cmd, top, evaluating)
			if err != nil {
				return err
			}
			var res []strategy.Estimate
			if evaluating {
				p, err := strategy.ParsePlanOn(evaluate, c)
				if err != nil {
					return fmt.Errorf("--evaluate: %w", err)
				}
				res = []strategy.Estimate{strategy.Evaluate(m, c, p)}
			} else if res, err = strategy.Search(cmd.Context(), m, c, opts); err != nil {
				if output == "html" && errors.Is(err, strategy.ErrNoPlan) {
					// `-o html > plans.html` has made the file already: a page
					// that says why there is no plan, not an empty one.
					rep := strategy.Report{Model: m, Cluster: c, Space: opts.Describe(), Error: err.Error()}
					if werr := strategy.WriteHTML(e.out, rep); werr != nil {
						return errors.Join(err, werr)
					}
					return fmt.Errorf("%w (the HTML report written says so too)", err)
				}
				return err
			}
			var werr error
			switch output {
			case "html":
				rep := strategy.Report{Model: m, Cluster: c, Estimates: res, Evaluated: evaluating}
				if !evaluating {
					rep.Space = opts.Describe()
				}
				werr = strategy.WriteHTML(e.out, rep)
			case "json":
				enc := json.NewEncoder(e.out)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false) // (a note's "pp > 1" stays readable)
				if evaluating {
					werr = enc.Encode(res[0])
				} else {
					werr = enc.Encode(res)
				}
			default:
				if werr = strategy.WriteTable(e.out, res); werr == nil {
					werr = strategy.WriteLegend(e.out)
				}
			}
			if werr == nil && evaluating && !res[0].Feasible {
				// Printed (the reason is in the output); the exit status says it
				// cannot run, for scripts.
				return &exitError{fmt.Errorf("--evaluate: the plan cannot run: %s", oneLineReason(res[0].Reason))}
			}
			return werr
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelArg, "model", "", "model spec: YAML file or preset name")
	f.StringVar(&clusterArg, "cluster", "", "cluster spec: YAML file or preset name")
	f.StringVar(&evaluate, "evaluate", "", `score one plan, e.g. "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1" (without dp: the devices tp·pp·cp leave)`)
	f.IntVar(&top, "top", 10, "plans to show")
	f.BoolVar(&listPresets, "list-presets", false, "list the preset models and clusters (-o json: their specs in full)")
	f.StringVar(&showPreset, "show-preset", "", "print a preset's YAML, to start a spec file from")
	cmd.MarkFlagsMutuallyExclusive("list-presets", "show-preset")
	f.StringVarP(&output, "output", "o", "table", "table, json, or html (a self-contained report page)")
	space.flags(cmd)
	return cmd
}

// searchSpace holds the flags that narrow the search space
// (strategy.SearchOptions); zero values keep the defaults.
type searchSpace struct {
	zero                               []int
	recompute                          []string
	maxTP, maxCP, maxEP, maxMB, maxVPP int
	noSP, overlap                      bool
	minHeadroomGiB                     float64
}

func (s *searchSpace) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntSliceVar(&s.zero, "zero", nil, "ZeRO stages to try, e.g. 0,1 (default 0,1,2,3)")
	f.StringSliceVar(&s.recompute, "recompute", nil, "recompute modes to try: none, selective, full (default all three)")
	f.IntVar(&s.maxTP, "max-tp", 0, "largest tensor-parallel degree, a power of two (default devices_per_node)")
	f.IntVar(&s.maxCP, "max-cp", 0, "largest context-parallel degree, a power of two (default 8, or seq_len/8192 rounded down to a power of two where that is more)")
	f.IntVar(&s.maxEP, "max-ep", 0, "largest expert-parallel degree (default the model's experts)")
	f.IntVar(&s.maxMB, "max-mb", 0, "largest micro-batch in sequences (default 16)")
	f.IntVar(&s.maxVPP, "max-vpp", 0, "most interleaved chunks per pipeline stage, a power of two; 1: no interleaving (default 8)")
	f.BoolVar(&s.noSP, "no-sp", false, "leave sequence parallelism out")
	f.BoolVar(&s.overlap, "overlap", false, "price plans with the gradient reduction overlapped with the backward pass and ZeRO-3 gathers prefetched")
	f.Float64Var(&s.minHeadroomGiB, "min-headroom", 0, "drop plans with less free device memory, in GiB")
}

// spaceFlags are the flags of searchSpace, in the order errors name them.
var spaceFlags = []string{"zero", "recompute", "max-tp", "max-cp", "max-ep", "max-mb", "max-vpp", "no-sp", "overlap", "min-headroom"}

// options checks the flags and returns the search options. With
// --evaluate none of them may be set: the plan string says it all.
func (s *searchSpace) options(cmd *cobra.Command, top int, evaluating bool) (strategy.SearchOptions, error) {
	o := strategy.SearchOptions{TopK: top, MaxTP: s.maxTP, MaxCP: s.maxCP, MaxEP: s.maxEP, MaxMicroBatch: s.maxMB,
		MaxVPP: s.maxVPP, NoSP: s.noSP, Overlap: s.overlap, MinHeadroomGiB: s.minHeadroomGiB, ZeRO: slices.Compact(slices.Sorted(slices.Values(s.zero)))}
	var set []string
	for _, name := range spaceFlags {
		if cmd.Flags().Changed(name) {
			set = append(set, "--"+name)
		}
	}
	if evaluating && len(set) > 0 {
		return o, fmt.Errorf("%s: search-space flags do not apply to --evaluate; say it in the plan (e.g. zero=1,recompute=full,vpp=1,sp=false,overlap=true)", strings.Join(set, ", "))
	}
	if top < 1 {
		return o, fmt.Errorf("--top %d: want at least 1", top)
	}
	for _, z := range s.zero {
		if z < 0 || z > 3 {
			return o, fmt.Errorf("--zero %d: want stages in 0..3", z)
		}
	}
	for _, r := range s.recompute {
		m, err := strategy.ParseRecompute(r)
		if err != nil {
			return o, fmt.Errorf("--recompute %w", err)
		}
		if !slices.Contains(o.Recompute, m) { // (full,full: once; each would rank every plan again)
			o.Recompute = append(o.Recompute, m)
		}
	}
	for _, c := range []struct {
		name     string
		v        int
		powerOf2 bool
	}{{"max-tp", s.maxTP, true}, {"max-cp", s.maxCP, true}, {"max-ep", s.maxEP, false}, {"max-mb", s.maxMB, false}, {"max-vpp", s.maxVPP, true}} {
		switch {
		case cmd.Flags().Changed(c.name) && c.v < 1:
			return o, fmt.Errorf("--%s %d: want at least 1", c.name, c.v)
		case c.powerOf2 && c.v&(c.v-1) != 0:
			return o, fmt.Errorf("--%s %d: want a power of two", c.name, c.v)
		}
	}
	if s.minHeadroomGiB < 0 || math.IsNaN(s.minHeadroomGiB) || math.IsInf(s.minHeadroomGiB, 0) {
		return o, fmt.Errorf("--min-headroom %g: want a finite number of GiB, at least 0", s.minHeadroomGiB)
	}
	return o, nil
}

func loadModel(arg string) (strategy.Model, error) {
	m, err := loadSpec(arg, strategy.LoadModel, strategy.PresetModel)
	if err != nil {
		if _, cerr := strategy.LoadCluster(arg); cerr == nil {
			return m, fmt.Errorf("%s is a cluster spec, not a model (--cluster takes it)", arg)
		}
	}
	return m, err
}

func loadCluster(arg string) (strategy.Cluster, error) {
	c, err := loadSpec(arg, strategy.LoadCluster, strategy.PresetCluster)
	if err != nil {
		if _, merr := strategy.LoadModel(arg); merr == nil {
			return c, fmt.Errorf("%s is a model spec, not a cluster (--model takes it)", arg)
		}
	}
	return c, err
}

// loadSpec reads arg's spec file, else the preset it names; an arg that
// is neither but looks like a file (a directory in it, a .yaml or .yml
// name) is said to be a missing file.
func loadSpec[T any](arg string, file, preset func(string) (T, error)) (T, error) {
	_, err := os.Stat(arg)
	if err == nil {
		return file(arg)
	}
	v, perr := preset(arg)
	if perr != nil && (strings.ContainsRune(arg, os.PathSeparator) || strings.HasSuffix(arg, ".yml") || strings.HasSuffix(arg, ".yaml")) {
		return v, fmt.Errorf("%w; nor is it a preset (--list-presets lists them)", err)
	}
	return v, perr
}

// specFieldsHelp lists the fields of the model and cluster spec files,
// read off the types the files decode into.
func specFieldsHelp() string {
	join := func(t reflect.Type) string {
		fields := yamlpos.Fields(t)
		for i, f := range fields {
			if u, ok := specUnits[f]; ok {
				fields[i] += " (" + u + ")"
			}
		}
		return strings.Join(fields, ", ")
	}
	return strings.Join([]string{
		"Spec files are YAML (--show-preset NAME prints one to start from).",
		hang("  model:   ", join(reflect.TypeFor[strategy.Model]()), 80),
		hang("  cluster: ", join(reflect.TypeFor[strategy.Cluster]()), 80),
		hang("  device:  ", "a profile ("+strings.Join(strategy.Profiles(), ", ")+") or a mapping of profile (one to start from), "+
			join(reflect.TypeFor[strategy.Device]()), 80),
		hang("  precision: ", "a mapping of "+join(reflect.TypeFor[strategy.Precision]())+
			" (bytes per parameter; defaults 2, 4, 12: bf16 weights, fp32 gradients, fp32 master weights with Adam's m and v)", 80),
	}, "\n")
}

// specUnits gives the unit of a spec field in `search --help`'s list.
var specUnits = map[string]string{
	"seq_len": "tokens", "global_batch": "sequences",
	"intra_node_gbps": "GB/s per device, one direction", "inter_node_gbps": "GB/s per device, one direction: a node's NICs / its devices",
	"intra_node_latency_us": "µs per ring step", "inter_node_latency_us": "µs per ring step",
	"intra_node_efficiency": "0..1", "inter_node_efficiency": "0..1", "reserved_gib": "GiB per device",
	"peak_tflops": "dense TFLOP/s", "memory_gib": "GiB", "hbm_gbps": "GB/s",
	"gemm_efficiency": "0..1", "memory_efficiency": "0..1", "op_overhead_us": "µs per operator",
}

// writePresets lists the preset models and clusters: a line each, or as
// JSON their specs in full.
func writePresets(w io.Writer, output string) error {
	type preset[T any] struct {
		Preset string `json:"preset"`
		Spec   T      `json:"spec"`
	}
	var (
		models   []preset[strategy.Model]
		clusters []preset[strategy.Cluster]
	)
	for _, file := range strategy.Presets() {
		name := strings.TrimSuffix(file, ".yaml")
		kind, err := strategy.PresetKind(name)
		if err != nil {
			return err
		}
		if kind == strategy.KindModel {
			m, err := strategy.PresetModel(name)
			if err != nil {
				return err
			}
			models = append(models, preset[strategy.Model]{name, m})
			continue
		}
		c, err := strategy.PresetCluster(name)
		if err != nil {
			return err
		}
		clusters = append(clusters, preset[strategy.Cluster]{name, c})
	}
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Models   []preset[strategy.Model]   `json:"models"`
			Clusters []preset[strategy.Cluster] `json:"clusters"`
		}{models, clusters})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL (--model)\tPARAMETERS\tLAYERS\tHIDDEN\tHEADS\tSEQ\tGLOBAL BATCH\tNAME")
	for _, p := range models {
		m := p.Spec
		params := fmt.Sprintf("%.1f B", m.Params()/1e9)
		if m.Experts > 0 {
			params += fmt.Sprintf(" (%d experts, top-%d)", m.Experts, m.TopK)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Preset, params, m.Layers, m.Hidden, m.Heads, m.SeqLen, m.GlobalBatch, m.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER (--cluster)\tDEVICES\tDEVICE\tINTRA GB/s\tINTER GB/s\tNAME")
	for _, p := range clusters {
		c := p.Spec
		fmt.Fprintf(tw, "%s\t%d × %d\t%s\t%g\t%g\t%s\n", p.Preset, c.Nodes, c.DevicesPerNode, c.Device.Name, c.IntraNodeGBps, c.InterNodeGBps, c.Name)
	}
	return tw.Flush()
}

// oneLineReason is an estimate's reason on one line.
func oneLineReason(r string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(r, ":\n", ": ")), " ")
}
