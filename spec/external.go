package spec

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/cann-train/cann-train/internal/yamlpos"
)

// External jobs: the user's own training script (PyTorch, torch_npu,
// MindSpore …), launched by the node workers under the run's workflow.
//
//	name: torch-ddp
//	nodes: 2
//	steps: 200            # optional: the script's total, for progress only
//	checkpoint_every: 20  # what the script's should_checkpoint() follows
//	external:
//	  launcher: torchrun  # torchrun | ascend | msrun
//	  entrypoint: [python3, train.py, --lr, "0.05"]
//	  procs_per_node: 2
//	  workdir: .          # relative: to the job file's directory
//	  env: {GLOO_SOCKET_IFNAME: lo}
//
// Each node worker starts procs_per_node processes with the launcher's
// environment contract (see engine/launch) plus the CANN_TRAIN_* variables
// of the Python helper (python/cann_train.py). The checkpoint directory
// (CANN_TRAIN_CHECKPOINT_DIR) belongs to the node worker: before every
// launch it is emptied and filled with the run's last uploaded checkpoint
// (empty on a fresh start); files that global rank 0 writes there and
// commits with cann_train.saved(step) are uploaded incrementally to the
// run's checkpoint bucket. A rank exiting non-zero or a node dying
// restarts the whole world — the dead node replaced by a spare — from the
// last uploaded checkpoint, at most max_restarts times.
//
// A green: policy works as for built-in runs, with uploaded checkpoints as
// the boundaries: the run plans before every launch and re-plans at every
// checkpoint; outside a planned slot it stops the world after that
// checkpoint, waits for the slot and relaunches from it. The work left is
// steps left × the pace measured between checkpoints, else green.work's
// share of the steps left (or, with steps unknown, green.work less the
// time trained so far) — so the policy needs steps or green.work.

// ModelExternal is RunSpec.Model.Kind of an external job.
const ModelExternal = "external"

// Launchers an external job may name: whose environment contract its
// processes get.
const (
	// LauncherTorchrun: what torchrun (torch.distributed.run) exports.
	LauncherTorchrun = "torchrun"
	// LauncherAscend: an HCCL rank table (RANK_TABLE_FILE) plus RANK_ID,
	// RANK_SIZE, DEVICE_ID …, and the torch rendezvous variables for
	// torch_npu scripts.
	LauncherAscend = "ascend"
	// LauncherMSRun: what MindSpore's msrun exports (a scheduler process
	// on the first node and MS_WORKER processes).
	LauncherMSRun = "msrun"
)

// Launchers lists the known launchers.
var Launchers = []string{LauncherTorchrun, LauncherAscend, LauncherMSRun}

// Names of the external job's activities, signal and error type.
const (
	// ActivityRunExternal runs one node's processes of an external job
	// until they all exit (node queue).
	ActivityRunExternal = "RunExternal"
	// ActivityReservePort finds a free TCP port on the first node for the
	// job's rendezvous (MASTER_PORT, MS_SCHED_PORT).
	ActivityReservePort = "ReservePort"
	// ActivityReadEnergy reads a node's host energy meter (EnergyReading):
	// an external job's launches are measured by reading every node at
	// their start and at each checkpoint.
	ActivityReadEnergy = "ReadEnergy"
	// SignalCheckpointSaved (payload CheckpointSaved) tells the run that a
	// node uploaded a checkpoint of the script's directory.
	SignalCheckpointSaved = "checkpoint-saved"
	// ErrTypeRankExited: one of the job's processes exited non-zero (or was
	// killed); details carry a RankExit.
	ErrTypeRankExited = "RankExited"
	// ErrTypeBadJob: the job cannot start on this node (no such program,
	// its workdir missing, a launcher's setting); restarting does not
	// help. It fails the run unless the job trained before and another
	// node of the world launched it: then this host lacks it, and is
	// replaced. (A node's own work directory that cannot be written is
	// ErrTypeNodeUnfit.)
	ErrTypeBadJob = "BadJob"
	// ErrTypeShortOfSteps types the failure of a run whose script exited
	// 0 on every rank short of the job's steps (RunSpec.Steps): the job
	// said how long it is, and the script did not get there.
	ErrTypeShortOfSteps = "ShortOfSteps"
)

// EnergyReading is a node's host meter as ReadEnergy found it: the
// energy the host used since its meter was opened (J, facility overhead
// not included), or, with Meter empty, why there is no figure.
type EnergyReading struct {
	Joules float64 `json:"joules"`
	// Meter names the meter ("" without a reading).
	Meter string `json:"meter,omitempty"`
	// Reason says why there is no reading: no meter on the node, or the
	// meter's error.
	Reason string `json:"reason,omitempty"`
}

// Environment variables of the Python helper protocol, set for every
// process of an external job (python/cann_train.py reads them).
const (
	// EnvCheckpointDir is where the script reads and writes checkpoints.
	EnvCheckpointDir = "CANN_TRAIN_CHECKPOINT_DIR"
	// EnvRestoredStep is the step of the checkpoint restored into it (0 on
	// a fresh start).
	EnvRestoredStep = "CANN_TRAIN_RESTORED_STEP"
	// EnvCheckpointEvery is the run's checkpoint_every (steps).
	EnvCheckpointEvery = "CANN_TRAIN_CHECKPOINT_EVERY"
	// EnvReportFile is the process's own JSON-lines file for report() and
	// saved() records.
	EnvReportFile = "CANN_TRAIN_REPORT_FILE"
	// EnvAckFile is where the node worker writes the last checkpoint step
	// it has copied; saved() waits for it.
	EnvAckFile = "CANN_TRAIN_ACK_FILE"
	// EnvRequestFile is where the node worker writes the step the run asks
	// the processes to checkpoint at (ActivityRequestCheckpoint);
	// should_checkpoint() says yes there too.
	EnvRequestFile = "CANN_TRAIN_REQUEST_FILE"
	// EnvRank and EnvWorldSize are the process's global rank (-1 for a
	// process that is not a rank, e.g. the msrun scheduler) and the world
	// size, whatever the launcher.
	EnvRank      = "CANN_TRAIN_RANK"
	EnvWorldSize = "CANN_TRAIN_WORLD_SIZE"
	// EnvTotalSteps is the job's steps (0: unknown).
	EnvTotalSteps = "CANN_TRAIN_TOTAL_STEPS"
	// EnvRestartCount is how many times the run restarted the world
	// before this launch (ExternalInput.Restarts), whatever the launcher:
	// torchrun's TORCHELASTIC_RESTART_COUNT for ascend and msrun jobs too.
	EnvRestartCount = "CANN_TRAIN_RESTART_COUNT"
)

// HelperEnv lists the CANN_TRAIN_* variables the node worker sets.
var HelperEnv = []string{EnvCheckpointDir, EnvRestoredStep, EnvCheckpointEvery, EnvReportFile, EnvAckFile,
	EnvRequestFile, EnvRank, EnvWorldSize, EnvTotalSteps, EnvRestartCount}

// LauncherEnv lists the variables a launcher's contract fixes for every
// process: a job's env may not set them (the defaults a launcher only
// suggests, such as OMP_NUM_THREADS or HCCL_CONNECT_TIMEOUT, it may).
func LauncherEnv(launcher string) []string {
	torch := []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
	switch launcher {
	case LauncherTorchrun:
		return append(torch, "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
			"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
			"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE")
	case LauncherAscend:
		return append(torch, "RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "ASCEND_DEVICE_ID")
	case LauncherMSRun:
		return []string{"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "RANK_ID", "RANK_SIZE"}
	}
	return nil
}

// wrappedLauncher names the distributed launcher argv runs (torchrun,
// `python -m torch.distributed.run`, msrun, mpirun, …), "" for none.
func wrappedLauncher(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	switch prog := path.Base(argv[0]); prog {
	case "torchrun", "msrun", "mpirun", "mpiexec", "srun", "deepspeed":
		return prog
	}
	for i, a := range argv[1:] {
		if a == "-m" && i+2 < len(argv) {
			switch m := argv[i+2]; m {
			case "torch.distributed.run", "torch.distributed.launch":
				return "python -m " + m
			}
		}
	}
	return ""
}

// ExternalJob is the `external:` block of a job file.
type ExternalJob struct {
	// Launcher is torchrun (default), ascend or msrun.
	Launcher string `yaml:"launcher" json:"launcher"`
	// Entrypoint is the argv every process runs, e.g. [python3, train.py];
	// the program is looked up in PATH, relative paths from Workdir.
	Entrypoint []string `yaml:"entrypoint" json:"entrypoint"`
	// ProcsPerNode is how many processes (ranks) each node runs. Default 1.
	ProcsPerNode int `yaml:"procs_per_node" json:"procs_per_node"`
	// Env is added to every process's environment (the launcher's
	// contract variables excepted).
	Env map[string]string `yaml:"env" json:"env,omitempty"`
	// Workdir is the processes' working directory on every node. A
	// relative path is taken from the job file's directory when the run is
	// submitted (`cann-train run`); empty: that directory.
	Workdir string `yaml:"workdir" json:"workdir,omitempty"`
	// CheckpointDir, when set, is the directory the node worker restores
	// into and uploads from (relative: to Workdir). It must be private to
	// one node worker — it is emptied before every launch: Validate
	// refuses the workdir or a directory above it, and a node worker one
	// that holds files it did not put there (launch.DirMarker). Empty: a
	// directory of the node worker's own (--work-dir).
	CheckpointDir string `yaml:"checkpoint_dir" json:"checkpoint_dir,omitempty"`
	// MasterPort fixes the rendezvous port on the first node (0: a free
	// port found at each launch).
	MasterPort int `yaml:"master_port" json:"master_port,omitempty"`
	// StopGrace is how long processes get between SIGTERM and SIGKILL when
	// the world is stopped. Default 10s.
	StopGrace Duration `yaml:"stop_grace" json:"stop_grace,omitempty"`
	// MeterEvery is how often, at most, a launch reads its nodes' energy
	// meters: at the first checkpoint after it (and at the launch's
	// start, stop and end). A round of readings is three history events
	// per node. 0: 3 minutes per node, about one event per minute.
	MeterEvery Duration `yaml:"meter_every" json:"meter_every,omitempty"`
	// RequestLead is how far ahead of rank 0, in its steps' time, a
	// checkpoint the run asks for is set (ActivityRequestCheckpoint):
	// every rank must learn the step before it gets there, which a
	// sharded (collective) save needs; a busy server relays it slower.
	// 0: 1s.
	RequestLead Duration `yaml:"request_lead" json:"request_lead,omitempty"`
}

// DefaultRequestLead is ExternalJob.RequestLead's default.
const DefaultRequestLead = time.Second

// Lead is RequestLead, its default filled in.
func (x ExternalJob) Lead() time.Duration {
	if x.RequestLead > 0 {
		return x.RequestLead.D()
	}
	return DefaultRequestLead
}

// IsExternal reports whether the spec runs a user's script.
func (s RunSpec) IsExternal() bool { return s.External != nil }

// WorldSize is the number of ranks of an external job on n nodes.
func (s RunSpec) WorldSize(n int) int {
	if s.External == nil {
		return n
	}
	return n * s.External.ProcsPerNode
}

// externalDefaults is WithDefaults for an external job: the built-in
// model's fields stay unset.
func (s RunSpec) externalDefaults() RunSpec {
	x := *s.External
	if x.Launcher == "" {
		x.Launcher = LauncherTorchrun
	}
	if x.ProcsPerNode == 0 {
		x.ProcsPerNode = 1
	}
	if x.StopGrace == 0 {
		x.StopGrace = Duration(10 * time.Second)
	}
	s.External = &x
	if s.Model.Kind == "" {
		s.Model.Kind = ModelExternal
	}
	if s.Nodes == 0 {
		s.Nodes = 1
	}
	if s.CheckpointEvery == 0 {
		s.CheckpointEvery = 100
	}
	return s.operationDefaults()
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateExternal is Validate for an external job.
func (s RunSpec) validateExternal() error {
	var errs []FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Name == "" {
		bad("name", "required: a run name such as torch-ddp")
	} else if !validName(s.Name) {
		bad("name", "%q: use letters, digits, '-', '_' and '.', starting with a letter or digit, without '..', at most 64 characters", s.Name)
	}
	if s.Model.Kind != ModelExternal {
		bad("model.kind", "%q cannot run an external job (drop model, or write kind: %s)", s.Model.Kind, ModelExternal)
	}
	if s.Nodes < 1 || s.Nodes > 1024 {
		bad("nodes", "%d out of range 1..1024", s.Nodes)
	}
	if s.Steps < 0 {
		bad("steps", "must not be negative, got %d (0: unknown)", s.Steps)
	}
	s.validateOperation(bad)
	if s.MinNodes != s.Nodes {
		bad("min_nodes", "%d: an external job keeps its world size (min_nodes must equal nodes, %d)", s.MinNodes, s.Nodes)
	}
	if g := s.Green; g != nil {
		g.validate(bad)
		if g.Batch != nil {
			bad("green.batch", "applies to the built-in model only; an external job's script owns its batch size")
		}
		// The plan needs the work left: steps left × the pace measured
		// between checkpoints, or the job's estimate.
		if s.Steps == 0 && g.Work <= 0 {
			bad("green", "an external job's green policy needs its length: steps (the script's total; the pace is "+
				"measured at its checkpoints) or green.work (its estimated training time)")
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"optimizer", s.Optimizer != "" && s.Optimizer != OptimizerAdam}, {"freeze_step", s.FreezeStep != 0},
		{"compression", s.Compression != nil}, {"overlap", s.Overlap != nil}} {
		if f.set {
			bad(f.name, "applies to the built-in model only; an external job's script owns its optimizer and gradient exchange")
		}
	}
	if s.RanksPerNode > 1 {
		bad("ranks_per_node", "applies to the built-in model only; an external job sets external.procs_per_node")
	}
	if s.DataSHA256 != "" {
		bad("data_sha256", "applies to the built-in model only; an external job's script reads its own data")
	}
	for _, f := range []struct {
		field string
		set   bool
	}{{"slow_node", s.SlowNode != ""}, {"slow_node_factor", s.SlowNodeFactor != 0}, {"slow_node_chunks", s.SlowNodeChunks != 0}} {
		if f.set {
			bad(f.field, "applies to the built-in model only; an external job's chunks are not timed node by node")
		}
	}
	x := s.External
	if !slices.Contains(Launchers, x.Launcher) {
		bad("external.launcher", "unknown launcher %q (want %s)", x.Launcher, strings.Join(Launchers, ", "))
	}
	if len(x.Entrypoint) == 0 {
		bad("external.entrypoint", "required: the command every process runs, e.g. [python3, train.py]")
	}
	for i, a := range x.Entrypoint {
		if i == 0 && strings.TrimSpace(a) == "" {
			bad("external.entrypoint[0]", "empty program name")
		}
		if strings.ContainsRune(a, 0) {
			bad(fmt.Sprintf("external.entrypoint[%d]", i), "contains a NUL byte")
		}
	}
	if l := wrappedLauncher(x.Entrypoint); l != "" {
		bad("external.entrypoint", "runs the launcher %s: the node workers are the launcher (launcher: %s gives every process its environment: "+
			"RANK, WORLD_SIZE, MASTER_ADDR, …), and a launcher inside would start a world of its own, on ports of its own — give your "+
			"script itself, e.g. [python3, train.py], and procs_per_node for the processes per node", l, x.Launcher)
	}
	if x.ProcsPerNode < 1 || x.ProcsPerNode > 256 {
		bad("external.procs_per_node", "%d out of range 1..256", x.ProcsPerNode)
	}
	reserved := LauncherEnv(x.Launcher)
	for _, k := range sortedKeys(x.Env) {
		switch {
		case !envName.MatchString(k):
			bad("external.env."+k, "%q is not an environment variable name", k)
		case slices.Contains(reserved, k):
			bad("external.env."+k, "set by the %s launcher for every process; it cannot be overridden", x.Launcher)
		case strings.HasPrefix(k, "CANN_TRAIN_"):
			bad("external.env."+k, "CANN_TRAIN_* variables are set by the node worker")
		case strings.ContainsRune(x.Env[k], 0):
			bad("external.env."+k, "value contains a NUL byte")
		}
	}
	if d := x.CheckpointDir; d != "" {
		c := filepath.Clean(d)
		if c == "." || c == "/" || slices.Contains(strings.Split(filepath.ToSlash(d), "/"), "..") {
			bad("external.checkpoint_dir", "%q: name a directory of its own (it is emptied before every launch), without '..'", d)
		} else if msg := x.checkpointDirClash(); msg != "" {
			bad("external.checkpoint_dir", "%s", msg)
		}
	}
	if p := x.MasterPort; p != 0 && (p < 1024 || p > 65535) {
		bad("external.master_port", "%d out of range 1024..65535 (0: a free port at each launch)", p)
	}
	if x.StopGrace == badDuration || x.StopGrace < 0 {
		bad("external.stop_grace", "not a duration: want e.g. 10s")
	}
	if x.MeterEvery == badDuration || x.MeterEvery < 0 {
		bad("external.meter_every", "not a duration: want e.g. 10m (0: 3 minutes per node)")
	}
	if x.RequestLead == badDuration || x.RequestLead < 0 || x.RequestLead.D() > time.Hour {
		bad("external.request_lead", "want a duration up to 1h, e.g. 5s (0: 1s)")
	}
	if len(errs) > 0 {
		return &SpecError{Fields: errs}
	}
	return nil
}

// checkpointDirClash says what is wrong with CheckpointDir where it is
// the workdir or contains it (it is emptied before every launch); "" when
// nothing is, or when that is not known yet: an absolute checkpoint_dir
// with the workdir still relative to the job file's directory (WithJobDir
// checks it once resolved). A relative checkpoint_dir without ".." lies
// strictly inside the workdir, as a checkpoint_dir should.
func (x ExternalJob) checkpointDirClash() string {
	if x.CheckpointDir == "" || !filepath.IsAbs(x.Workdir) {
		return ""
	}
	ckpt, wd := filepath.Clean(x.JoinWorkdir(x.CheckpointDir)), filepath.Clean(x.Workdir)
	switch {
	case ckpt == wd:
		return fmt.Sprintf("%q is the workdir %s: the node worker empties checkpoint_dir before every launch, "+
			"which would delete the job's files; name a directory of its own, e.g. %s", x.CheckpointDir, wd, filepath.Join(wd, "checkpoints"))
	case pathWithin(wd, ckpt):
		return fmt.Sprintf("%q contains the workdir %s: the node worker empties checkpoint_dir before every launch, "+
			"which would delete the job's files; name a directory of its own, e.g. %s", x.CheckpointDir, wd, filepath.Join(wd, "checkpoints"))
	}
	return ""
}

// pathWithin reports whether p lies strictly below dir (both clean and
// absolute), comparing whole path elements: /data/ab is not below /data/a.
func pathWithin(p, dir string) bool {
	prefix := dir
	if !strings.HasSuffix(prefix, string(filepath.Separator)) { // (the root ends in one)
		prefix += string(filepath.Separator)
	}
	return p != dir && strings.HasPrefix(p, prefix)
}

// envLiterals reads external.env in a job file's syntax tree: the source
// text of each value written as a plain number or boolean (1.10, 0x10,
// true), which the decoder would respell (1.1, 16) — an environment
// variable takes the text as written —, and a problem for each null value
// (B: null, B: ~, or B: with nothing after it), which the decoder would
// make "" unasked.
func envLiterals(file *ast.File) (map[string]string, []FieldError) {
	const envPath = "$.external.env."
	lits := map[string]string{}
	var errs []FieldError
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		for _, n := range ast.Filter(ast.MappingValueType, doc.Body) {
			mv, ok := n.(*ast.MappingValueNode)
			if !ok || mv.Key == nil || mv.Value == nil || mv.Key.GetToken() == nil {
				continue
			}
			key := mv.Key.GetToken().Value
			if mv.GetPath() != envPath+key { // (not an entry of env itself)
				continue
			}
			v := mv.Value
			if a, ok := v.(*ast.AnchorNode); ok && a.Value != nil {
				v = a.Value
			}
			switch v.(type) {
			case *ast.NullNode:
				line := 0
				if p := mv.Key.GetToken().Position; p != nil {
					line = p.Line
				}
				errs = append(errs, FieldError{Field: "external.env." + key, Line: line,
					Msg: fmt.Sprintf(`want a string (write %s: "" for an empty value)`, key)})
			case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
				if tok := v.GetToken(); tok != nil {
					lits[key] = tok.Value
				}
			}
		}
	}
	return lits, errs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// builtinOnly are job-file fields of the built-in model that an external
// job must not set.
var builtinOnly = []string{"model.hidden", "chunk_steps", "batch_per_rank", "learning_rate", "seed",
	"collective", "topology_scan", "optimizer", "freeze_step", "compression", "overlap", "strategy",
	"ranks_per_node", "slow_node", "slow_node_factor", "slow_node_chunks", "data_sha256"}

// parseExternal finishes Parse for an external job: drops the built-in
// defaults the file did not set, reports the built-in fields it did set,
// applies the external defaults and validates, all with YAML lines.
func parseExternal(name string, decoded RunSpec, file *ast.File, perr error) (RunSpec, error) {
	written := func(field string) int {
		if perr != nil {
			return 0
		}
		return yamlpos.LineOf(file, field)
	}
	var errs []FieldError
	for _, f := range builtinOnly {
		if line := written(f); line > 0 {
			errs = append(errs, FieldError{Field: f, Line: line,
				Msg: "applies to the built-in model only; an external job's script configures itself (drop it)"})
		}
	}
	s := RunSpec{
		Name: decoded.Name, Nodes: decoded.Nodes, CheckpointURL: decoded.CheckpointURL,
		MaxRestarts: decoded.MaxRestarts, NodeWait: decoded.NodeWait, HeartbeatTimeout: decoded.HeartbeatTimeout,
		ChunksPerRun: decoded.ChunksPerRun, Green: decoded.Green, External: decoded.External,
		CancelGrace: decoded.CancelGrace,
	}
	if written("model.kind") > 0 {
		s.Model.Kind = decoded.Model.Kind
	}
	if written("nodes") == 0 {
		s.Nodes = 0 // external default
	}
	if written("steps") > 0 {
		s.Steps = decoded.Steps
	}
	if written("checkpoint_every") > 0 {
		s.CheckpointEvery = decoded.CheckpointEvery
	}
	if written("min_nodes") > 0 {
		s.MinNodes = decoded.MinNodes
	}
	if line := written("green.deadline"); line > 0 && s.Green != nil && s.Green.Deadline == 0 {
		errs = append(errs, FieldError{Field: "green.deadline", Line: line, Msg: greenDeadlineZero})
	}
	if line := written("external.procs_per_node"); line > 0 && s.External.ProcsPerNode == 0 {
		errs = append(errs, FieldError{Field: "external.procs_per_node", Line: line, Msg: "0 out of range 1..256"})
	}
	if perr == nil {
		// env values as written, not as the decoder respelt them.
		lits, nulls := envLiterals(file)
		errs = append(errs, nulls...)
		if len(lits) > 0 {
			x := *s.External
			x.Env = maps.Clone(x.Env)
			for k, v := range lits {
				if _, ok := x.Env[k]; ok {
					x.Env[k] = v
				}
			}
			s.External = &x
		}
	}
	if fe := jobFileRestarts(&s); fe != nil {
		fe.Line = written(fe.Field)
		errs = append(errs, *fe)
	}
	s = s.WithDefaults()
	if err := s.validateJobFile(); err != nil {
		var se *SpecError
		if !errors.As(err, &se) {
			return RunSpec{}, err
		}
		for _, f := range se.Fields {
			f.Line = written(f.Field)
			if f.Line == 0 && strings.HasPrefix(f.Field, "external.env.") {
				f.Line = written("external.env")
			}
			errs = append(errs, f)
		}
	}
	if len(errs) > 0 {
		sortByLine(errs)
		return RunSpec{}, &SpecError{File: name, Fields: errs}
	}
	return s, nil
}

// WithJobDir resolves the job's relative paths from dir (the job file's
// directory), making them absolute: an external job's workdir (empty
// becomes dir), and a green policy's trace when the file is there (else
// it stays relative: the control worker reads it from its own directory).
// It refuses (*SpecError) an absolute external.checkpoint_dir that is the
// workdir so resolved or contains it.
func (s RunSpec) WithJobDir(dir string) (RunSpec, error) {
	if s.External == nil && (s.Green == nil || s.Green.Trace == "") {
		return s, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return s, fmt.Errorf("job directory %s: %w", dir, err)
	}
	if g := s.Green; g != nil && g.Trace != "" && !filepath.IsAbs(g.Trace) {
		if p := filepath.Join(abs, g.Trace); fileExists(p) {
			gc := *g
			gc.Trace = p
			s.Green = &gc
		}
	}
	if s.External == nil {
		return s, nil
	}
	x := *s.External
	switch {
	case x.Workdir == "":
		x.Workdir = abs
	case !filepath.IsAbs(x.Workdir):
		x.Workdir = filepath.Join(abs, x.Workdir)
	}
	s.External = &x
	// (Validate could not compare an absolute checkpoint_dir with a
	// workdir still relative.)
	if msg := x.checkpointDirClash(); msg != "" {
		return s, &SpecError{Fields: []FieldError{{Field: "external.checkpoint_dir", Msg: msg}}}
	}
	return s, nil
}

// ExternalInput is what one node's RunExternal activity needs: the world
// (membership, rendezvous port) and where to start from.
type ExternalInput struct {
	RunID      string     `json:"run_id"`
	Spec       RunSpec    `json:"spec"`
	Membership Membership `json:"membership"`
	// Rank is the node's rank (torchrun's GROUP_RANK); its processes are
	// global ranks Rank·procs_per_node … +procs_per_node−1.
	Rank int `json:"rank"`
	// Session names this launch of the world (unique per attempt).
	Session string `json:"session"`
	// Restarts is how many times the world was restarted before
	// (TORCHELASTIC_RESTART_COUNT).
	Restarts int `json:"restarts"`
	// MasterPort is the rendezvous port on the first node.
	MasterPort int `json:"master_port"`
	// Restore is the checkpoint the processes start from (nil: fresh).
	Restore *CheckpointRef `json:"restore,omitempty"`
	// KillAtStep, when positive, asks the node to SIGKILL itself once its
	// first process reports that step (fault injection).
	KillAtStep int64 `json:"kill_at_step,omitempty"`
	// Freeze makes that fault a SIGSTOP of the node and its processes.
	Freeze bool `json:"freeze,omitempty"`
	// KeepRefused asks the node (the first: its rank 0 uploads the
	// checkpoints) to keep the directory of an upload the bucket refuses
	// (ChunkProtocolStoreKept): told as CheckpointSaved.Kept, and a
	// refused final upload ends the activity with its result
	// (ChunkResult.CheckpointFailed) instead of a CheckpointStorage error.
	KeepRefused bool `json:"keep_refused,omitempty"`
}

// RankExit is the detail of a RankExited error.
type RankExit struct {
	// Rank is the global rank (-1: a process that is not a rank, such as
	// the msrun scheduler); Process names it ("rank-3", "scheduler").
	Rank    int    `json:"rank"`
	Process string `json:"process"`
	Node    string `json:"node"`
	// ExitCode is the exit status (-1 when killed by a signal).
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Step is the last step the process reported; for a process that
	// reported none (msrun's scheduler, a rank that failed before its
	// first report), the step its node's ranks had reached (the restored
	// step before any report).
	Step int64 `json:"step"`
	// LogTail is the end of its output.
	LogTail string `json:"log_tail"`
	// LogFile is the full output on the node; BucketLog where it is
	// copied in the run's bucket once the launch ends (the key, after
	// the bucket's URL; "" without a bucket).
	LogFile   string `json:"log_file"`
	BucketLog string `json:"bucket_log,omitempty"`
	// Program is the program the process ran, as its node found it
	// (launch.ProgramText: "python3 = /usr/bin/python3").
	Program string `json:"program,omitempty"`
	// NoStep: no process of its node had reported a step, nor committed
	// a checkpoint, since the launch (as far as its node saw: the world
	// was still starting). Node workers from before it never say so.
	NoStep bool `json:"no_step,omitempty"`
	// FirstStepAt is when its node's processes first reported a step in
	// the launch (zero: none did, or a node worker from before it).
	FirstStepAt time.Time `json:"first_step_at,omitzero"`
}

// Where says where the process's whole log is: the file on its node and,
// when it has one (BucketLog), its copy in the run's bucket (at bucket:
// a file:// bucket's as a path on the hosts that share it).
func (d RankExit) Where(bucket string) string {
	if d.LogFile == "" {
		return ""
	}
	out := fmt.Sprintf("whole log: %s on node %s", d.LogFile, d.Node)
	if d.BucketLog == "" {
		return out
	}
	if dir, ok := strings.CutPrefix(bucket, "file://"); ok && !strings.Contains(dir, "?") {
		return out + fmt.Sprintf("; copied when the launch ends to %s", filepath.Join(dir, filepath.FromSlash(d.BucketLog)))
	}
	return out + fmt.Sprintf("; copied when the launch ends to %s in the run's bucket %s", d.BucketLog, bucket)
}

// CheckpointSaved is the SignalCheckpointSaved payload: node rank 0 of
// Session uploaded the checkpoint Ref.
type CheckpointSaved struct {
	Session string        `json:"session"`
	Ref     CheckpointRef `json:"ref"`
	// Loss is the script's last reported loss at that step (0: none).
	Loss float32 `json:"loss,omitempty"`
	// From is the step the launch started from and FirstLoss the first
	// loss it reported: the run's initial loss when From is 0.
	From      int64   `json:"from,omitempty"`
	FirstLoss float32 `json:"first_loss,omitempty"`
	// FirstStepAt is when the launch's first step was reported on the
	// node (zero from node workers before it): a recovery's first step,
	// recorded even if the launch later fails or is cancelled.
	FirstStepAt time.Time `json:"first_step_at,omitzero"`
	// Failed, when set, says the upload of the checkpoint at Ref.Step
	// failed, and why (Ref then carries only Run and Step).
	Failed string `json:"failed,omitempty"`
	// Kept, with Failed: the node keeps that checkpoint's directory on
	// its disk and stores it when asked (ActivityStoreKept).
	Kept bool `json:"kept,omitempty"`
	// Missed says instead that rank 0 went past Ref.Step, the step the
	// run asked a checkpoint at (ActivityRequestCheckpoint), without
	// committing one there: the script does not take requests (Ref
	// carries only Run and Step).
	Missed bool `json:"missed,omitempty"`
}

// JoinWorkdir resolves p against the job's workdir (p absolute: as is).
func (x ExternalJob) JoinWorkdir(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(x.Workdir, p)
}

// Bounds of the log tail a RunExternal heartbeat carries.
const (
	// LogTailLines is how many of its last lines each process shows.
	LogTailLines = 20
	// LogTailBytes is the node's budget, shared by its processes (each
	// gets at least LogTailMinBytes).
	LogTailBytes    = 16 << 10
	LogTailMinBytes = 256
)

// NodeLogs is the second detail of a RunExternal heartbeat (the first is
// the ChunkProgress): the last lines each of the node's processes wrote,
// so that `cann-train status` shows them while the job runs. The full
// logs stay on the node and are copied to the run's bucket (LogKey in
// activities) when the launch ends.
type NodeLogs struct {
	Node string `json:"node"`
	// NodeRank is the node's rank in the world; Session the launch.
	NodeRank int           `json:"node_rank"`
	Session  string        `json:"session"`
	Procs    []ProcessTail `json:"procs"`
	// Dir is the directory on the node that holds the launch's whole
	// logs (rank-N.log; "" from node workers before it).
	Dir string `json:"dir,omitempty"`
}

// ProcessTail is one process's last log lines.
type ProcessTail struct {
	// Process names it ("rank-3", "scheduler"); Rank is its global rank
	// (-1: not a rank).
	Process string   `json:"process"`
	Rank    int      `json:"rank"`
	Lines   []string `json:"lines"`
}

// LogTailBudget is the bytes each of procs processes may show.
func LogTailBudget(procs int) int {
	return max(LogTailMinBytes, LogTailBytes/max(1, procs))
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
