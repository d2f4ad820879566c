package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"golang.org/x/sys/unix"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/internal/pidlock"
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
an MLP on MNIST data-parallel across them, showing live progress, and prints a
summary. The server lives in memory and stops with the quickstart, its Web UI
too: --keep keeps them up, and the workers, however the run ended — to browse
it, or to continue a run cancelled or failed with cann-train run -f JOB --resume
against that server (the export line it prints). Without --keep a quickstart's
run cannot be resumed; its checkpoints stay (for cann-train checkpoint
ls|verify) until a later quickstart deletes a completed run's. Quickstarts side
by side on one --data-dir each need a run name of their own (the default is
one).`,
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
	f.StringVar(&o.name, "name", "", "run name (default quickstart-<time>, or quickstart-<time>-2 … where another quickstart holds that)")
	f.IntVar(&o.port, "port", 7233, "Temporal frontend port (0: any free port)")
	f.IntVar(&o.uiPort, "ui-port", 8233, "Web UI port (-1: any free port, 0: no UI)")
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "quickstart"), "checkpoints (checkpoints/) and worker logs (logs/<run>/)")
	f.StringVarP(&o.output, "output", "o", "text", "summary format: text or json")
	f.BoolVar(&o.keep, "keep", false, "keep the server and Web UI up after the run, however it ended (Ctrl-C to stop)")
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

// webUIPort is the Web UI port the quickstart asks for: --ui-port where
// given, else as dev's, beside --port (8233 beside 7233) and any free port
// with --port 0 (it was 8233 then, clashing with another server's).
func (o quickstartOptions) webUIPort() int {
	if o.changed != nil && o.changed("ui-port") {
		return o.uiPort
	}
	return devUIPort(o.port)
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
	o.uiPort = o.webUIPort()
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
	if err := quickstartData(s); err != nil {
		return err
	}
	// The run's name is this quickstart's in its data dir until it ends:
	// a second quickstart of the name would delete its checkpoints.
	name, lock, err := claimQuickstartRun(o.dataDir, s.Name, o.name == "" && o.file == "")
	if err != nil {
		return err
	}
	defer lock.release()
	s.Name = name
	if note := injectNote(len(kills), o.spares, s); note != "" {
		fmt.Fprintln(e.err, note)
	}
	lc, err := startLocal(ctx, e, localOptions{port: o.port, uiPort: o.uiPort, dataDir: o.dataDir, metricsAddr: o.metricsAddr,
		anyPorts: !o.changed("port") && !o.changed("ui-port"), run: s.Name})
	if err != nil {
		return err
	}
	defer lc.stop()
	srv, c := lc.srv, lc.client
	if line := e.reachExport(srv.FrontendAddr(), srv.Namespace(), srv.UIURL()); line != "" {
		while := " while it runs"
		if o.keep {
			while = ""
		}
		fmt.Fprintf(e.err, "other terminals reach this quickstart's server%s with: %s\n", while, line)
	}
	bucket := cmp.Or(s.CheckpointURL, lc.ckptURL)
	if s.CheckpointURL == "" || s.CheckpointURL == lc.ckptURL {
		sweepQuickstartCheckpoints(e, o.dataDir, filepath.Join(o.dataDir, "checkpoints"), s.Name)
	}
	workers := o.nodes + o.spares
	fmt.Fprintf(e.err, "starting %s (each loads the data set, then registers)…\n", quickstartCount(workers, "node worker"))
	procs := map[string]*dev.Proc{}
	for i := 1; i <= workers; i++ {
		id := "node-" + strconv.Itoa(i)
		p, err := lc.startNode(id, spec.DefaultClusterID)
		if err != nil {
			return err
		}
		procs[id] = p
	}
	if err := awaitNodes(ctx, c, spec.DefaultClusterID, workers); err != nil {
		return err
	}
	fmt.Fprintf(e.err, "%s registered (%d spare; logs in %s)\n", quickstartCount(workers, "node worker"), o.spares, lc.launcher.LogDir)

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
	fmt.Fprintf(e.err, "started %s: %d steps on %s\n", id, s.Steps, quickstartCount(s.Nodes, "node"))
	st, err := watchRun(ctx, c, id, e.err, false, nil)
	if ctx.Err() != nil {
		return quickstartInterrupted(ctx, e, c, o, id, st, bucket, srv.Namespace(), watch.struck())
	}
	if err != nil && st.RunID == "" {
		return err
	}
	struck := watch.struck()
	// --keep keeps the server up however the run ended — cancelled or
	// failed too, for `run --resume` against it — unless Ctrl-C ended it.
	keep := o.keep && ctx.Err() == nil
	sum := quickstartResult(st, srv.UIURL(), srv.Namespace(), struck, keep, bucket)
	if perr := printQuickstartSummary(e.out, st, sum, o.output); perr != nil {
		return perr
	}
	for _, f := range faults {
		if _, ok := struck[f.NodeID]; !ok { // (on stderr: -o json stays JSON)
			fmt.Fprintf(e.err, "note: --inject %s:%s@%d never struck: %s did not train past step %d in this run (a spare no failure called on, or the run ended first)\n",
				cmp.Or(f.Kind, spec.FaultKill), f.NodeID, f.AtStep, f.NodeID, f.AtStep)
		}
	}
	var end error
	switch {
	case err != nil:
		end = &exitError{err}
	case st.Phase != spec.PhaseCompleted:
		end = &exitError{errors.New("run did not complete")}
	}
	if keep {
		if ui := srv.UIURL(); ui == "" {
			fmt.Fprintf(e.err, "server kept up at %s (no Web UI: --ui-port 0) — Ctrl-C to stop\n", srv.FrontendAddr())
		} else {
			fmt.Fprintf(e.err, "server kept up: Web UI %s — Ctrl-C to stop\n", ui)
		}
		if line := e.reachExport(srv.FrontendAddr(), srv.Namespace(), srv.UIURL()); line != "" {
			fmt.Fprintf(e.err, "other commands reach it with: %s\n", line)
		}
		<-ctx.Done()
	}
	return end
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

// quickstartCount is n of noun, in the singular for one: "1 node", "3 node workers".
func quickstartCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// quickstartData checks, before a server or worker starts, that the
// built-in model's data set is where the node workers will look (they
// run here, with this environment): without it each would register
// unfit, and the run fail after waiting node_wait for fit nodes, with an
// error of several hundred characters. The places looked in are left out
// (the hint says how to put the data where they are).
func quickstartData(s spec.RunSpec) error {
	if s.IsExternal() || s.Model.Kind != spec.ModelMLPMNIST {
		return nil
	}
	_, err := engine.MNISTDir()
	if err == nil {
		return nil
	}
	hint, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "engine: "), "; looked in ")
	return fmt.Errorf("the quickstart's model (%s) needs the MNIST data, and its node workers would not find it: %s", s.Model.Kind, hint)
}

// quickstartLock holds a run name in a quickstart data dir for the
// quickstart that trains it (an flock on locks/<name>.lock there,
// released with its file, so when the process ends however it ends).
type quickstartLock struct {
	f    *os.File
	path string
}

// quickstartRunningError: a quickstart of the name runs now in the data dir.
type quickstartRunningError struct {
	name, holder, path string
}

func (e *quickstartRunningError) Error() string {
	return fmt.Sprintf("a quickstart of run %s is running now (%s; lock %s), and its checkpoints and logs are that name's: give this one another --name, or wait for it to end",
		e.name, e.holder, e.path)
}

// lockQuickstartRun takes name's lock in dataDir and writes this
// process's ID there for the message of a quickstart refused; it fails at
// once with a *quickstartRunningError while another quickstart holds it.
func lockQuickstartRun(dataDir, name string) (*quickstartLock, error) {
	dir := filepath.Join(dataDir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("quickstart lock dir: %w", err)
	}
	path := filepath.Join(dir, name+".lock")
	for {
		f, err := pidlock.TryLock(path)
		var held *pidlock.HeldError
		switch {
		case errors.As(err, &held):
			return nil, &quickstartRunningError{name: name, holder: held.Holder, path: path}
		case err != nil:
			return nil, fmt.Errorf("quickstart lock %s: %w", path, err)
		}
		// The holder before removes the file as it lets go: a lock taken
		// on the file it removed is on one no later quickstart sees.
		var locked, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &locked) == nil && unix.Stat(path, &named) == nil && locked.Ino == named.Ino && locked.Dev == named.Dev {
			pidlock.WritePID(f)
			return &quickstartLock{f: f, path: path}, nil
		}
		f.Close()
	}
}

// release lets the name go (nil: none held), removing its file first.
func (l *quickstartLock) release() {
	if l == nil {
		return
	}
	_ = os.Remove(l.path)
	_ = l.f.Close()
}

// claimQuickstartRun locks run name in dataDir (lockQuickstartRun). pick
// (a default name, quickstart-<time>, from no --name or job file) takes
// the first of name, name-2, name-3 … that no quickstart holds: two
// quickstarts started in the same second (two `make run`) both run.
func claimQuickstartRun(dataDir, name string, pick bool) (string, *quickstartLock, error) {
	try := name
	for i := 2; ; i++ {
		l, err := lockQuickstartRun(dataDir, try)
		var running *quickstartRunningError
		if !pick || !errors.As(err, &running) || i > 100 {
			return try, l, err
		}
		try = name + "-" + strconv.Itoa(i)
	}
}

// sweepQuickstartCheckpoints deletes from the quickstart's own bucket
// (directory ckptDir) the checkpoints — manifests and chunks; the run's
// report and job stay — of the earlier quickstart runs that completed
// (their report says so) and that no quickstart runs now, but the run
// named except (quickstartFresh's): nothing resumes them (a quickstart's
// server, and with it the run's history, lived in memory), and each was
// kept until now for `cann-train checkpoint ls|verify`. It says what it
// deleted; one it cannot delete is said and left.
func sweepQuickstartCheckpoints(e *env, dataDir, ckptDir, except string) {
	entries, _ := os.ReadDir(filepath.Join(ckptDir, "runs"))
	var runs int
	var size int64
	for _, d := range entries {
		name := d.Name()
		if !d.IsDir() || name == except {
			continue
		}
		dir := filepath.Join(ckptDir, "runs", name)
		b, err := os.ReadFile(filepath.Join(dir, "report.json"))
		var report spec.RunStatus
		if err != nil || json.Unmarshal(b, &report) != nil || report.Phase != spec.PhaseCompleted {
			continue // (failed or interrupted: kept, as its quickstart said)
		}
		var n int64
		for _, sub := range []string{"ckpt", "chunks"} {
			n += dirSize(filepath.Join(dir, sub))
		}
		if n == 0 {
			continue
		}
		lock, err := lockQuickstartRun(dataDir, name)
		if err != nil {
			continue // (a quickstart of the name runs: its own)
		}
		for _, sub := range []string{"ckpt", "chunks"} {
			err = errors.Join(err, os.RemoveAll(filepath.Join(dir, sub)))
		}
		lock.release()
		if err != nil {
			fmt.Fprintf(e.err, "note: could not delete the checkpoints of the completed quickstart run %s: %v\n", name, err)
			continue
		}
		runs, size = runs+1, size+n
	}
	if runs > 0 {
		fmt.Fprintf(e.err, "deleted the checkpoints of %s (%.1f MB) in %s: nothing resumes a quickstart's run\n",
			quickstartCount(runs, "earlier completed quickstart run"), float64(size)/1e6, ckptDir)
	}
}

// dirSize is the bytes of the files under dir (0: none, or no dir).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// quickstartSummary is the summary a quickstart prints: its run's, and
// what is left once the quickstart ends.
type quickstartSummary struct {
	Summary
	// Server says whether the quickstart's server is still up: without
	// --keep it stopped with the quickstart, and web_ui is left out (its
	// link would be dead).
	Server string `json:"server"`
	// CheckpointsKept says how long the run's checkpoints stay, and that
	// nothing resumes them.
	CheckpointsKept string `json:"checkpoints_kept,omitempty"`
}

// MarshalJSON writes q as Summary's MarshalJSON does (which its
// embedding would otherwise stand for alone, leaving q's own fields out),
// with q's own fields.
func (q quickstartSummary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		summaryJSON
		Server          string `json:"server"`
		CheckpointsKept string `json:"checkpoints_kept,omitempty"`
	}{q.Summary.jsonForm(), q.Server, q.CheckpointsKept})
}

const (
	quickstartServerStopped = "stopped with the quickstart: it ran in memory, and its Web UI and the run's history went with it (`--keep` keeps them up)"
	quickstartServerKept    = "kept up (--keep) until Ctrl-C"
)

// quickstartResult is the summary of a quickstart's run that ended in st:
// with a Web UI link only where the server stays up (keep, for a run that
// completed), else saying it stopped; and what becomes of the
// checkpoints in bucket.
func quickstartResult(st spec.RunStatus, uiBase, namespace string, struck map[string]injected, keep bool, bucket string) quickstartSummary {
	sum := quickstartSummary{Summary: summarize(st, uiBase, namespace, struck), Server: quickstartServerKept}
	if !keep || st.Phase != spec.PhaseCompleted {
		sum.WebUI, sum.Server = "", quickstartServerStopped
	}
	sum.CheckpointsKept = quickstartCheckpointsKept(st.Phase, sum.Checkpoints.Count, bucket)
	return sum
}

// quickstartCheckpointsKept says what becomes of a quickstart run's
// checkpoints in bucket (none: ""): a completed run's stay until the next
// quickstart deletes them (sweepQuickstartCheckpoints); an unfinished
// run's stay, and nothing resumes them either.
func quickstartCheckpointsKept(phase spec.Phase, count int, bucket string) string {
	switch {
	case count == 0:
		return ""
	case phase == spec.PhaseCompleted:
		return fmt.Sprintf("kept in %s until the next quickstart, which deletes a completed run's (nothing resumes a quickstart's run)", bucket)
	}
	return fmt.Sprintf("kept in %s (a quickstart of the same name deletes them): nothing resumes a quickstart's run, whose server stopped with it", bucket)
}

// printQuickstartSummary prints s as printSummary does, the server's and
// the checkpoints' fate added. An unfinished run gets no `run --resume`
// line: nothing resumes a quickstart's run.
func printQuickstartSummary(w io.Writer, st spec.RunStatus, s quickstartSummary, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	plain := s.Summary
	if st.Phase != spec.PhaseCompleted {
		plain.Checkpoints.LastURL = "" // (no resume line; said below)
	}
	// (Its hints name no command that asks the server: `green report`
	// failed with "connection refused" once it had stopped.)
	plain.serverGone = s.Server == quickstartServerStopped
	if err := printSummary(w, st, plain, output); err != nil {
		return err
	}
	if s.Server == quickstartServerStopped {
		fmt.Fprintln(w, "web UI       none now: the server stopped with the quickstart (`--keep` keeps it up)")
	}
	if s.CheckpointsKept != "" {
		last := ""
		if plain.Checkpoints.LastURL != s.Checkpoints.LastURL {
			last = fmt.Sprintf(", last %s (step %d)", s.Checkpoints.LastURL, s.Checkpoints.LastStep)
		}
		fmt.Fprintf(w, "checkpoints  %s%s\n", s.CheckpointsKept, last)
	}
	return nil
}

// quickstartInterrupted ends a quickstart that Ctrl-C (or SIGTERM)
// stopped while its run trained: where the run stopped — its step and
// last checkpoint, read again (the control worker and the server answer
// until the quickstart stops them) — and that nothing resumes it, as
// the line the command ends on; with -o json the summary too, its status
// "interrupted". Not the last status read (training) nor a Web UI link.
func quickstartInterrupted(ctx context.Context, e *env, c client.Client, o quickstartOptions, id string, last spec.RunStatus,
	bucket, namespace string, struck map[string]injected) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	st, live, _, err := readProgress(rctx, c, id)
	if err != nil || st.RunID == "" {
		st = last
	}
	step := st.Step
	if live != nil && live.Step > step {
		step = live.Step
	}
	name := runName(id)
	var ckpt *spec.CheckpointRef
	if refs, err := earlierCheckpoints(rctx, bucket, name, math.MaxInt64); err == nil && len(refs) > 0 {
		ckpt = &refs[len(refs)-1]
	} else if st.LastCkpt != nil {
		ckpt = st.LastCkpt
	}
	what := quickstartStopped(id, step, st.TotalSteps, ckpt, bucket)
	if o.output == "json" && st.RunID != "" {
		sum := quickstartSummary{Summary: summarize(st, "", namespace, struck), Server: quickstartServerStopped}
		sum.Status, sum.Steps, sum.Step, sum.Error = quickstartInterruptedPhase, step, step, what
		if ckpt != nil {
			sum.CheckpointsKept = quickstartCheckpointsKept(quickstartInterruptedPhase, 1, bucket)
		}
		if err := printQuickstartSummary(e.out, st, sum, o.output); err != nil {
			return err
		}
	}
	return &interruptedError{what: what, err: ctx.Err()}
}

// quickstartInterruptedPhase is the status of a quickstart's run that
// Ctrl-C stopped: not a phase of the run's own (it went down with the
// server, in whatever phase it was).
const quickstartInterruptedPhase spec.Phase = "interrupted"

// quickstartStopped says where an interrupted quickstart's run stopped
// and that nothing resumes it.
func quickstartStopped(id string, step, total int64, ckpt *spec.CheckpointRef, bucket string) string {
	at := fmt.Sprintf("step %d", step)
	if total > 0 {
		at += fmt.Sprintf(" of %d", total)
	}
	kept := "it had written no checkpoint"
	if ckpt != nil {
		kept = fmt.Sprintf("its last checkpoint, step %d, is kept in %s", ckpt.Step, bucket)
	}
	return fmt.Sprintf("%s stopped at %s; %s. A quickstart's server runs in memory, so the run cannot be resumed: "+
		"a new quickstart starts afresh (for runs that `cann-train run --resume` continues: `cann-train dev`, its workers and `cann-train run -f JOB`)",
		id, at, kept)
}
