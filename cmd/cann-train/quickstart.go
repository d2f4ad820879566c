package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

type quickstartOptions struct {
	nodes       int
	perNode     int // ranks per node
	steps       int64
	chunkSteps  int64
	name        string
	port        int
	metricsAddr string
	uiPort      int
	dataDir     string
	output      string
	keep        bool
	hbTimeout   time.Duration
	spares      int
	inject      []string
	collective  string
	scan        bool
	file        string
	// changed reports whether a flag was given (with -f, only those
	// override the job file).
	changed func(flag string) bool
}

// parseInjections reads --inject values "kill:<node-id>@<step>" and
// "freeze:<node-id>@<step>".
func parseInjections(specs []string, nodes int, steps int64) (map[string]spec.InjectFault, error) {
	out := map[string]spec.InjectFault{}
	for _, s := range specs {
		kind, rest, ok := strings.Cut(s, ":")
		node, stepStr, ok2 := strings.Cut(rest, "@")
		if !ok || !ok2 || (kind != spec.FaultKill && kind != spec.FaultFreeze) {
			return nil, fmt.Errorf("--inject %q: want kill:<node-id>@<step> or freeze:<node-id>@<step>, e.g. kill:node-2@130", s)
		}
		step, err := strconv.ParseInt(stepStr, 10, 64)
		if err != nil || step < 1 || step >= steps {
			return nil, fmt.Errorf("--inject %q: step must be an integer in 1..%d", s, steps-1)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(node, "node-"))
		if !strings.HasPrefix(node, "node-") || err != nil || n < 1 || n > nodes {
			return nil, fmt.Errorf("--inject %q: no such node (quickstart names them node-1 … node-%d)", s, nodes)
		}
		if _, dup := out[node]; dup {
			return nil, fmt.Errorf("--inject %q: %s already has a fault", s, node)
		}
		out[node] = spec.InjectFault{NodeID: node, AtStep: step, Kind: kind}
	}
	return out, nil
}

func newQuickstartCmd(e *env) *cobra.Command {
	o := quickstartOptions{}
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Embedded Temporal + local node workers + one real training run",
		Long: `Starts a real Temporal server (in memory) with its Web UI, a control worker,
and N node workers as separate processes talking TCP on 127.0.0.1, then trains
an MLP on MNIST data-parallel across them, showing live progress, and prints
a summary with the Web UI link.`,
		Example: `  cann-train quickstart
  cann-train quickstart --nodes 3 --steps 300 -o json
  cann-train quickstart --nodes 2 --ranks-per-node 2   # 4 ranks, two in each node worker
  cann-train quickstart --keep      # leave the server up to browse the Web UI
  cann-train quickstart --spares 1 --inject kill:node-2@250   # watch a node die and be replaced
  cann-train quickstart --spares 1 --inject freeze:node-2@250 --heartbeat-timeout 3s   # … or hang
  cann-train quickstart -f examples/torch-ddp/job.yaml --spares 1 --inject kill:node-2@40 -o json`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "text", "json"); err != nil {
				return err
			}
			o.changed = cmd.Flags().Changed
			return quickstart(cmd.Context(), e, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", 3, "node-worker processes")
	f.IntVar(&o.perNode, "ranks-per-node", 1, "ranks each node trains (its devices): the world is nodes × ranks-per-node")
	f.Int64Var(&o.steps, "steps", 1000, "training steps")
	f.Int64Var(&o.chunkSteps, "chunk-steps", 100, "steps per chunk (one activity per node)")
	f.StringVar(&o.name, "name", "", "run name (default quickstart-<time>)")
	f.IntVar(&o.port, "port", 7233, "Temporal frontend port (0: any free port)")
	f.IntVar(&o.uiPort, "ui-port", 8233, "Web UI port (-1: any free port, 0: no UI)")
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "quickstart"), "checkpoints and worker logs")
	f.StringVarP(&o.output, "output", "o", "text", "summary format: text or json")
	f.BoolVar(&o.keep, "keep", false, "keep the server and Web UI up after the run (Ctrl-C to stop)")
	f.DurationVar(&o.hbTimeout, "heartbeat-timeout", 10*time.Second, "a node silent this long is presumed dead")
	f.IntVar(&o.spares, "spares", 0, "extra node workers that replace failed ones")
	// (A zero would read as "unset" in the run spec: --nodes 0 ran on 3.)
	atLeast(f, "1", "nodes", "ranks-per-node", "steps", "chunk-steps")
	atLeast(f, "0", "spares")
	atLeast(f, "1s", "heartbeat-timeout")
	bounded(f, "0", "65535", "port")
	bounded(f, "-1", "65535", "ui-port")
	f.StringArrayVar(&o.inject, "inject", nil, "fault injection, repeatable: kill:<node-id>@<step> SIGKILLs that node's process after the step, freeze:<node-id>@<step> SIGSTOPs it (it hangs until the quickstart ends)")
	f.StringVarP(&o.file, "file", "f", "", "run this job file (built-in or external) instead of the MNIST demo; --nodes, --steps, --name … given too override it")
	f.StringVar(&o.collective, "collective", "ring", "gradient allreduce: ring, hd, rd, tree, hier, or auto (chosen by the topology scan)")
	f.BoolVar(&o.scan, "topology-scan", false, "measure every node pair when the run starts (implied by --collective auto)")
	addMetricsFlag(cmd, &o.metricsAddr)
	return cmd
}

// injectNote warns, before the run, that the nodes --inject strikes
// outnumber the spares by more than min_nodes lets the run lose ("" when
// they do not): the run will wait node_wait for a node, then fail.
func injectNote(strikes, spares int, s spec.RunSpec) string {
	lost := strikes - spares
	if lost <= 0 || s.Nodes-lost >= s.MinNodes {
		return ""
	}
	fix := fmt.Sprintf("--spares %d", strikes)
	if !s.IsExternal() && s.Nodes > lost {
		fix += fmt.Sprintf(", or a job file (-f) with min_nodes %d to go on without it", s.Nodes-lost)
	}
	return fmt.Sprintf("note: --inject strikes %d node(s) and --spares gives %d: the run waits node_wait (%s) for a free node, then fails (%s)",
		strikes, spares, time.Duration(s.NodeWait), fix)
}

func quickstart(ctx context.Context, e *env, o quickstartOptions) error {
	if o.changed == nil {
		o.changed = func(string) bool { return false }
	}
	s, err := quickstartSpec(o)
	if err != nil {
		return err
	}
	o.nodes = s.Nodes
	injectLimit := s.Steps
	if injectLimit == 0 {
		injectLimit = math.MaxInt64 // an external job of unknown length
	}
	kills, err := parseInjections(o.inject, o.nodes+o.spares, injectLimit)
	if err != nil {
		return err
	}
	if note := injectNote(len(kills), o.spares, s); note != "" {
		fmt.Fprintln(e.err, note)
	}
	lc, err := startLocal(ctx, e, localOptions{port: o.port, uiPort: o.uiPort, dataDir: o.dataDir, metricsAddr: o.metricsAddr,
		anyPorts: !o.changed("port") && !o.changed("ui-port")})
	if err != nil {
		return err
	}
	defer lc.stop()
	srv, c := lc.srv, lc.client
	procs := map[string]*dev.Proc{}
	for i := 1; i <= o.nodes+o.spares; i++ {
		id := "node-" + strconv.Itoa(i)
		p, err := lc.startNode(id, spec.DefaultClusterID)
		if err != nil {
			return err
		}
		procs[id] = p
	}
	if err := awaitNodes(ctx, c, spec.DefaultClusterID, o.nodes+o.spares); err != nil {
		return err
	}
	fmt.Fprintf(e.err, "%d node workers registered (%d spare; logs in %s)\n", o.nodes+o.spares, o.spares, lc.launcher.LogDir)

	var faults []spec.InjectFault
	for _, node := range slices.Sorted(maps.Keys(kills)) {
		faults = append(faults, kills[node])
	}
	if err := quickstartFresh(ctx, e, s, lc.ckptURL); err != nil {
		return err
	}
	watch := watchFaults(ctx, faults, procs)
	defer watch.stop()
	id, err := startRunWith(ctx, c, s, spec.DefaultClusterID, faults...)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.err, "started %s: %d steps on %d nodes\n", id, s.Steps, s.Nodes)
	st, err := watchRun(ctx, c, id, e.err, false, nil)
	if err != nil && st.RunID == "" {
		return err
	}
	struck := watch.struck()
	if perr := printSummary(e.out, st, summarize(st, srv.UIURL(), srv.Namespace(), struck), o.output); perr != nil {
		return perr
	}
	for _, f := range faults {
		if _, ok := struck[f.NodeID]; !ok { // (on stderr: -o json stays JSON)
			fmt.Fprintf(e.err, "note: --inject %s:%s@%d never struck: %s did not train past step %d in this run (a spare no failure called on, or the run ended first)\n",
				cmp.Or(f.Kind, spec.FaultKill), f.NodeID, f.AtStep, f.NodeID, f.AtStep)
		}
	}
	if err != nil {
		return &exitError{err}
	}
	if st.Phase != spec.PhaseCompleted {
		return &exitError{errors.New("run did not complete")}
	}
	if o.keep {
		if ui := srv.UIURL(); ui == "" {
			fmt.Fprintf(e.err, "server kept up at %s (no Web UI: --ui-port 0) — Ctrl-C to stop\n", srv.FrontendAddr())
		} else {
			fmt.Fprintf(e.err, "server kept up: Web UI %s — Ctrl-C to stop\n", ui)
		}
		if ui := srv.UIURL(); srv.FrontendAddr() != "127.0.0.1:7233" || ui != (&env{address: srv.FrontendAddr()}).webUI("") {
			fmt.Fprintf(e.err, "other commands reach it with: export TEMPORAL_ADDRESS=%s CANN_TRAIN_UI=%s\n", srv.FrontendAddr(), cmp.Or(ui, "none"))
		}
		<-ctx.Done()
	}
	return nil
}

// quickstartSpec is the run quickstart starts: the MNIST demo from the
// flags, or the job file (-f) with the flags given overriding it.
func quickstartSpec(o quickstartOptions) (spec.RunSpec, error) {
	changed := o.changed
	if changed == nil {
		changed = func(string) bool { return false }
	}
	if o.file == "" {
		name := o.name
		if name == "" {
			name = "quickstart-" + time.Now().Format("20060102-150405")
		}
		s := spec.RunSpec{
			Name: name, Nodes: o.nodes, Steps: o.steps, ChunkSteps: o.chunkSteps,
			HeartbeatTimeout: spec.Duration(o.hbTimeout), NodeWait: spec.Duration(time.Minute),
			Collective: o.collective, TopologyScan: o.scan,
		}.WithDefaults()
		if o.perNode != 1 {
			s.RanksPerNode = o.perNode
		}
		return s, s.Validate()
	}
	s, err := spec.LoadFile(o.file)
	if err != nil {
		return s, err
	}
	// An external job's relative workdir is the job file's directory.
	if s, err = s.WithJobDir(filepath.Dir(o.file)); err != nil {
		return s, err
	}
	if _, err := checkGreenTrace(s.Green, time.Now(), true); err != nil {
		return s, err // (the control worker runs here)
	}
	if o.name != "" {
		s.Name = o.name
	}
	if changed("nodes") {
		s.Nodes = o.nodes
		if s.IsExternal() || s.MinNodes > s.Nodes {
			s.MinNodes = s.Nodes
		}
	}
	if changed("steps") {
		s.Steps = o.steps
	}
	if changed("ranks-per-node") {
		s.RanksPerNode = o.perNode
	}
	if changed("chunk-steps") && !s.IsExternal() {
		s.ChunkSteps = o.chunkSteps
	}
	if changed("heartbeat-timeout") {
		s.HeartbeatTimeout = spec.Duration(o.hbTimeout)
	}
	return s, s.Validate()
}

// quickstartFresh keeps a quickstart from training over an earlier run's
// checkpoints of the same name (its server starts empty each time, but its
// data dir keeps the bucket): a later --resume would find two timelines
// mixed there. In the quickstart's own bucket they are deleted, and that
// said; in a bucket the job file names, which others may use, the
// quickstart is refused.
func quickstartFresh(ctx context.Context, e *env, s spec.RunSpec, own string) error {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if s.CheckpointURL != "" && s.CheckpointURL != own {
		refs, err := earlierCheckpoints(lctx, s.CheckpointURL, s.Name, math.MaxInt64)
		if err == nil && len(refs) > 0 {
			return fmt.Errorf("%s holds checkpoints of a run named %s (up to step %d): a quickstart starts a run afresh; "+
				"give the job another name (--name), or continue it with `cann-train run -f JOB --resume` on a cluster", s.CheckpointURL, s.Name, refs[len(refs)-1].Step)
		}
		return nil
	}
	n, first, last, err := deleteCheckpoints(lctx, own, s.Name)
	switch {
	case err != nil:
		return fmt.Errorf("clear the earlier checkpoints of %s in %s: %w", s.Name, own, err)
	case n > 0:
		fmt.Fprintf(e.err, "deleted the %d checkpoint(s) of an earlier quickstart of %s (steps %d–%d) in %s: each quickstart starts afresh\n",
			n, s.Name, first, last, own)
	}
	return nil
}
