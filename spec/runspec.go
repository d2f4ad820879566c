package spec

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/cann-train/cann-train/internal/redact"
	"github.com/cann-train/cann-train/internal/suggest"
	"github.com/cann-train/cann-train/internal/yamlpos"
)

// ModelSpec chooses the model the engine trains.
type ModelSpec struct {
	// Kind is the model family; "mlp-mnist" is built in.
	Kind string `yaml:"kind" json:"kind"`
	// Hidden lists hidden-layer widths.
	Hidden []int `yaml:"hidden" json:"hidden"`
}

// RunSpec is one training run as the user describes it (job.yaml). Every
// field has a default; Validate says what is wrong and where.
type RunSpec struct {
	Name         string    `yaml:"name" json:"name"`
	Model        ModelSpec `yaml:"model" json:"model"`
	Nodes        int       `yaml:"nodes" json:"nodes"`
	Steps        int64     `yaml:"steps" json:"steps"`
	ChunkSteps   int64     `yaml:"chunk_steps" json:"chunk_steps"`
	BatchPerRank int       `yaml:"batch_per_rank" json:"batch_per_rank"`
	LearningRate float64   `yaml:"learning_rate" json:"learning_rate"`
	Seed         uint64    `yaml:"seed" json:"seed"`
	// CheckpointURL is a gocloud blob bucket URL (file://, mem://, s3://,
	// gs://, azblob://). Empty: the worker's default.
	CheckpointURL string `yaml:"checkpoint_url" json:"checkpoint_url"`
	// CheckpointEvery is in steps; a checkpoint is taken at the first chunk
	// boundary at or after each multiple, and always at the end. Below
	// ChunkSteps, chunks end at its multiples.
	CheckpointEvery int64 `yaml:"checkpoint_every" json:"checkpoint_every"`
	// MaxRestarts bounds node replacements before the run fails (a node
	// whose worker stops on purpose, or one found cut off from the run's
	// bucket, is replaced without counting). 0 is unset (the default,
	// DefaultMaxRestarts: a workflow input written before NoRestarts
	// existed keeps that meaning); NoRestarts allows none, which a job
	// file says as max_restarts: 0.
	MaxRestarts int `yaml:"max_restarts" json:"max_restarts"`
	// KeepCheckpoints is how many of the run's newest checkpoints its
	// nodes keep in storage after each save (0: DefaultKeepCheckpoints);
	// KeepEvery keeps, besides, every checkpoint whose step is a multiple
	// of it (0: none) — milestones the run's retention never deletes.
	KeepCheckpoints int   `yaml:"keep_checkpoints" json:"keep_checkpoints,omitempty"`
	KeepEvery       int64 `yaml:"keep_every" json:"keep_every,omitempty"`
	// NodeWait bounds how long to wait for enough live nodes; a run below
	// its size, or keeping a drained node for want of a free one, asks
	// for a free node at least this often.
	NodeWait Duration `yaml:"node_wait" json:"node_wait"`
	// HeartbeatTimeout: a node silent this long is presumed dead.
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout" json:"heartbeat_timeout"`
	// ChunksPerRun bounds chunks before the workflow continues as new.
	ChunksPerRun int `yaml:"chunks_per_run" json:"chunks_per_run"`
	// MinNodes is the fewest nodes the run goes on with when a node fails
	// and no spare is free (default: nodes, i.e. wait for a replacement).
	MinNodes int `yaml:"min_nodes" json:"min_nodes,omitempty"`
	// CancelGrace is how long a cancelled run waits for the checkpoint it
	// asks its chunk in flight (or external world) to end at before it
	// stops it regardless, losing the steps since the last one (0: 1m,
	// DefaultCancelGrace). A large model's save and upload may need more.
	CancelGrace Duration `yaml:"cancel_grace" json:"cancel_grace,omitempty"`
	// Green makes the run carbon-aware (optional).
	Green *GreenPolicy `yaml:"green" json:"green,omitempty"`
	// External runs the user's own training script instead of the
	// built-in model (see external.go); nil for built-in runs.
	External *ExternalJob `yaml:"external" json:"external,omitempty"`
	// Collective is the gradient allreduce's algorithm: ring (the
	// default), hd, rd, tree or hier fix it; auto lets the topology scan
	// at the run's start choose it from measured links (then recorded in
	// history, so recoveries keep it; two runs compare bit for bit only
	// when they use the same algorithm).
	Collective string `yaml:"collective" json:"collective,omitempty"`
	// TopologyScan measures every node pair when the run gets its nodes
	// (implied by collective: auto) and shows the hierarchy in the status.
	TopologyScan bool `yaml:"topology_scan" json:"topology_scan,omitempty"`
	// Optimizer is adam (the default) or onebit-adam: Adam for
	// freeze_step steps, then the variance frozen and the momentum
	// averaged instead, which compression sends in one bit per value.
	Optimizer  string `yaml:"optimizer" json:"optimizer,omitempty"`
	FreezeStep int64  `yaml:"freeze_step" json:"freeze_step,omitempty"`
	// Compression compresses the gradient exchange (see sync.go).
	Compression *CompressionPolicy `yaml:"compression" json:"compression,omitempty"`
	// Overlap averages gradient buckets while backward runs.
	Overlap *OverlapPolicy `yaml:"overlap" json:"overlap,omitempty"`
	// Strategy auto lets the run's SearchStrategy choose how many of its
	// nodes to train on (the data-parallel degree, between min_nodes and
	// nodes) from the cost model fed the topology scan's measured links
	// and the nodes' measured computation (implies the scan); fixed (the
	// default) trains on all of them.
	Strategy string `yaml:"strategy" json:"strategy,omitempty"`
	// RanksPerNode is how many ranks (devices) each node trains: its
	// TrainChunk hosts them all, and ranks of one node exchange through
	// shared memory (0 or 1: one). The world is nodes × ranks_per_node
	// ranks; batch_per_rank is per rank.
	RanksPerNode int `yaml:"ranks_per_node" json:"ranks_per_node,omitempty"`
	// SlowNode is what the run does about a node whose computation takes
	// much longer than its peers' chunk after chunk (it sets the run's
	// pace): report (the default) names it in the status; replace also
	// moves the run off it at the next boundary, to a free node (none
	// free: it keeps the node and asks again a minute later), and gives
	// it back to the pool for other runs — the slowness may be this
	// run's share of a busy host; drain drains it, as `cann-train nodes
	// drain` does — the run moves off it at a boundary, to a free node or
	// down to min_nodes, and no run gets it until it is undrained.
	SlowNode string `yaml:"slow_node" json:"slow_node,omitempty"`
	// SlowNodeFactor and SlowNodeChunks say when a node is slow: its
	// computation took SlowNodeFactor times the median of its peers' or
	// more in SlowNodeChunks chunks in a row (defaults 1.5 and 3).
	SlowNodeFactor float64 `yaml:"slow_node_factor" json:"slow_node_factor,omitempty"`
	SlowNodeChunks int     `yaml:"slow_node_chunks" json:"slow_node_chunks,omitempty"`
	// DataSHA256 pins the data set the run trains on: the fingerprint
	// (SHA-256, 64 hex digits) a run on that data shows in its status
	// ("data sha256 …"). Where one of the first chunk's nodes holds it,
	// however few, it is the run's and a node holding other data is unfit
	// (replaced); where none does, the run fails at once, marking no
	// node. Unset, the first chunk takes the data set more than half its
	// nodes hold (a tie, such as two nodes that differ, fails the run:
	// nobody can tell which is right).
	DataSHA256 string `yaml:"data_sha256" json:"data_sha256,omitempty"`
}

// SlowNode values.
const (
	SlowNodeReport  = "report"
	SlowNodeReplace = "replace"
	SlowNodeDrain   = "drain"
)

// Defaults of SlowNodeFactor and SlowNodeChunks.
const (
	DefaultSlowNodeFactor = 1.5
	DefaultSlowNodeChunks = 3
)

// SlowFactor is SlowNodeFactor, or its default.
func (s RunSpec) SlowFactor() float64 {
	if s.SlowNodeFactor > 0 {
		return s.SlowNodeFactor
	}
	return DefaultSlowNodeFactor
}

// SlowChunks is SlowNodeChunks, or its default.
func (s RunSpec) SlowChunks() int {
	if s.SlowNodeChunks > 0 {
		return s.SlowNodeChunks
	}
	return DefaultSlowNodeChunks
}

// LocalRanks is the number of ranks each node trains (RanksPerNode, at
// least 1).
func (s RunSpec) LocalRanks() int { return max(s.RanksPerNode, 1) }

// Collective algorithms a job file may name.
var collectiveAlgorithms = []string{"ring", "hd", "rd", "tree", "hier", "auto"}

// ScansTopology reports whether the run measures its links at the start.
func (s RunSpec) ScansTopology() bool {
	return s.TopologyScan || s.Collective == "auto" || s.Strategy == StrategyAuto
}

// Strategy values.
const (
	StrategyFixed = "fixed"
	StrategyAuto  = "auto"
)

// GradientFloats is the number of floats one step's allreduce carries: the
// model's parameters plus the loss.
func (s RunSpec) GradientFloats() int {
	in, n := 784, 1 // MNIST: 28×28 inputs, 10 classes; +1 for the loss
	for _, h := range s.Model.Hidden {
		n += in*h + h
		in = h
	}
	return n + in*10 + 10
}

// GlobalBatch is the run's global batch: batch_per_rank on every rank of
// the nodes it starts with. Rescaled runs keep it.
func (s RunSpec) GlobalBatch() int { return s.BatchPerRank * s.Nodes * s.LocalRanks() }

// Duration is a time.Duration written as "90s" or "2m" in YAML and JSON.
type Duration time.Duration

// badDuration marks text that did not parse, so that Validate can report
// it with its line (decode errors from text unmarshalers carry no position).
const badDuration Duration = -1

// UnmarshalText parses "90s", "2m", "1h30m". Text that does not parse
// decodes to a marker that Validate reports.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v < 0 {
		*d = badDuration
		return nil
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ModelMLPMNIST is the built-in MLP trained on MNIST.
const ModelMLPMNIST = "mlp-mnist"

// WithDefaults returns s with every unset field set to its default.
func (s RunSpec) WithDefaults() RunSpec {
	if s.External != nil {
		return s.externalDefaults()
	}
	if s.Model.Kind == "" {
		s.Model.Kind = ModelMLPMNIST
	}
	if s.Model.Hidden == nil {
		s.Model.Hidden = []int{128}
	}
	if s.Nodes == 0 {
		s.Nodes = 3
	}
	if s.Steps == 0 {
		s.Steps = 600
	}
	if s.ChunkSteps == 0 {
		s.ChunkSteps = 100
	}
	if s.BatchPerRank == 0 {
		s.BatchPerRank = 32
	}
	if s.LearningRate == 0 {
		s.LearningRate = 2e-3
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.CheckpointEvery == 0 {
		s.CheckpointEvery = s.ChunkSteps
	}
	s = s.operationDefaults()
	if s.Collective == "" {
		s.Collective = "ring"
	}
	s.DataSHA256 = strings.ToLower(s.DataSHA256) // as sha256sum and the status print it
	return s.syncDefaults().batchDefaults()
}

// batchDefaults bounds the batch controller at half and twice the run's
// global batch (at least the node count, at most the training set).
func (s RunSpec) batchDefaults() RunSpec {
	if s.Green == nil || s.Green.Batch == nil {
		return s
	}
	g := *s.Green
	c := *g.Batch
	if c.Min == 0 {
		c.Min = max(s.Nodes*s.LocalRanks(), s.GlobalBatch()/2)
	}
	if c.Max == 0 {
		c.Max = min(MNISTTrainExamples, 2*s.GlobalBatch())
	}
	g.Batch = &c
	s.Green = &g
	return s
}

// FieldError is one invalid field. Line is 0 when unknown.
type FieldError struct {
	Field string // YAML path without the leading "$.", e.g. "model.hidden[0]"
	Line  int
	Msg   string
}

func (e FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// SpecError collects every problem found in one spec.
type SpecError struct {
	File   string
	Fields []FieldError
}

func (e *SpecError) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "run spec"
	}
	fmt.Fprintf(&b, "%s: %d problem(s):", name, len(e.Fields))
	for _, f := range e.Fields {
		b.WriteString("\n  ")
		b.WriteString(f.Error())
	}
	return b.String()
}

// Validate checks an already-defaulted spec. It returns a *SpecError.
func (s RunSpec) Validate() error {
	if s.External != nil {
		return s.validateExternal()
	}
	var errs []FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Name == "" {
		bad("name", "required: a run name such as mnist-demo")
	} else if !validName(s.Name) {
		bad("name", "%q: use letters, digits, '-', '_' and '.', starting with a letter or digit, without '..', at most 64 characters", s.Name)
	}
	if s.Model.Kind != ModelMLPMNIST {
		bad("model.kind", "unknown model %q (known: %s)", s.Model.Kind, ModelMLPMNIST)
	}
	if len(s.Model.Hidden) == 0 {
		bad("model.hidden", "needs at least one hidden layer width")
	}
	for i, h := range s.Model.Hidden {
		if h < 1 || h > 8192 {
			bad(fmt.Sprintf("model.hidden[%d]", i), "width %d out of range 1..8192", h)
		}
	}
	if s.Nodes < 1 || s.Nodes > 1024 {
		bad("nodes", "%d out of range 1..1024", s.Nodes)
	}
	if s.Steps < 1 {
		bad("steps", "must be positive, got %d", s.Steps)
	}
	if s.ChunkSteps < 1 {
		bad("chunk_steps", "must be positive, got %d", s.ChunkSteps)
	}
	if s.BatchPerRank < 1 || s.BatchPerRank > 65536 {
		bad("batch_per_rank", "%d out of range 1..65536", s.BatchPerRank)
	}
	if !(s.LearningRate > 0 && s.LearningRate < 10) {
		bad("learning_rate", "%g out of range (0, 10)", s.LearningRate)
	}
	s.validateOperation(bad)
	switch nodesOK := s.Nodes >= 1 && s.Nodes <= 1024; {
	case !nodesOK && s.MinNodes == s.Nodes:
		// derived from nodes, whose range is said above
	case s.MinNodes < 1 || (nodesOK && s.MinNodes > s.Nodes):
		bad("min_nodes", "%d out of range 1..nodes (%d)", s.MinNodes, s.Nodes)
	}
	if s.Green != nil {
		s.Green.validate(bad)
		if c := s.Green.Batch; c != nil {
			c.validate(s.GlobalBatch(), s.Nodes*s.LocalRanks(), bad)
		}
	}
	if !slices.Contains(collectiveAlgorithms, s.Collective) {
		bad("collective", "unknown algorithm %q (want %s)", s.Collective, strings.Join(collectiveAlgorithms, ", "))
	}
	s.validateSync(bad)
	if s.Strategy != "" && s.Strategy != StrategyFixed && s.Strategy != StrategyAuto {
		bad("strategy", "unknown strategy %q (want fixed or auto)", s.Strategy)
	}
	if s.SlowNode != "" && s.SlowNode != SlowNodeReport && s.SlowNode != SlowNodeReplace && s.SlowNode != SlowNodeDrain {
		bad("slow_node", "unknown action %q (want report, replace or drain)", s.SlowNode)
	}
	if f := s.SlowNodeFactor; f != 0 && !(f >= 1.05 && f <= 100) {
		bad("slow_node_factor", "%g out of range 1.05..100 (a node is slow at this many times its peers' computation)", f)
	}
	if s.SlowNodeChunks < 0 || s.SlowNodeChunks > 1000 {
		bad("slow_node_chunks", "%d out of range 1..1000", s.SlowNodeChunks)
	}
	if s.RanksPerNode < 0 || s.RanksPerNode > 64 {
		bad("ranks_per_node", "%d out of range 1..64", s.RanksPerNode)
	}
	if s.DataSHA256 != "" && !isSHA256(s.DataSHA256) {
		hint := ""
		if strings.Trim(s.DataSHA256, "0123456789.e+-") == "" {
			hint = `; put it in quotes: unquoted, YAML reads digits as a number`
		}
		bad("data_sha256", "%q is not a SHA-256 (64 hex digits, as `cann-train status` shows a run's data set)%s", s.DataSHA256, hint)
	}
	if len(errs) > 0 {
		return &SpecError{Fields: errs}
	}
	return nil
}

// CheckNodeID says what is wrong with id as a node worker's ID (nil when
// nothing): the rules of a run name, since it names the node's task
// queue, its directories and its place in rank tables and logs.
func CheckNodeID(id string) error {
	if id == "" || !validName(id) {
		return fmt.Errorf("node ID %q: use letters, digits, '-', '_' and '.', starting with a letter or digit, without '..', at most 64 characters", id)
	}
	return nil
}

// isSHA256 says whether s is a SHA-256 in lower-case hex.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validName: a run name or node ID names directories and bucket keys,
// so it follows checkpoint.ValidateRun (a leading '.' or '-', or a "..",
// would read as a hidden file, a flag or a parent directory).
func validName(s string) bool {
	if s == "" || len(s) > 64 || strings.Contains(s, "..") || !isAlnum(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || isAlnum(r)) {
			return false
		}
	}
	return true
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// LoadFile reads, decodes strictly, defaults and validates a job file.
func LoadFile(path string) (RunSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RunSpec{}, fmt.Errorf("read job file: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes a job file's bytes; name is used in errors. Unknown fields,
// wrong types and impossible values come back as a *SpecError whose fields
// carry the YAML line (see validateJobFile for what a job file may not say
// that a RunSpec may).
func Parse(name string, data []byte) (RunSpec, error) {
	return parse(name, data, maxDecodePasses)
}

// greenDeadlineZero is the error for a green policy's deadline written
// as 0, which would otherwise read as unset: 48 hours.
const greenDeadlineZero = "0 out of range: the work needs time to be done in (leave it out for 48h)"

// maxDecodePasses bounds how many times parse decodes a job file again
// without the fields it found wrong (decodeProblems).
const maxDecodePasses = 32

func parse(name string, data []byte, passes int) (RunSpec, error) {
	// Decode over the defaults, so that a value written explicitly — a
	// zero too — is what gets validated.
	s := RunSpec{}.WithDefaults()
	s.CheckpointEvery = 0 // derived from chunk_steps unless written
	s.MinNodes = 0        // derived from nodes unless written
	file, perr := parser.ParseBytes(data, 0)
	if perr == nil {
		if fe := oneDocument(file); fe != nil {
			return RunSpec{}, &SpecError{File: name, Fields: []FieldError{*fe}}
		}
	}
	if err := yamlpos.Unmarshal(data, &s, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		if perr != nil {
			file = nil
		}
		return RunSpec{}, &SpecError{File: name, Fields: decodeProblems(name, file, err, passes)}
	}
	if s.External != nil {
		return parseExternal(name, s, file, perr)
	}
	if perr == nil {
		// `external:` with nothing under it (a mis-indented or commented
		// out block) decodes as no external job: the built-in model.
		if line := yamlpos.LineOf(file, "external"); line > 0 {
			return RunSpec{}, &SpecError{File: name, Fields: []FieldError{{Field: "external", Line: line,
				Msg: "empty (want launcher, entrypoint … indented under it; drop the key to train the built-in model)"}}}
		}
	}
	if s.CheckpointEvery == 0 && (perr != nil || yamlpos.LineOf(file, "checkpoint_every") == 0) {
		s.CheckpointEvery = s.ChunkSteps
	}
	if s.MinNodes == 0 && (perr != nil || yamlpos.LineOf(file, "min_nodes") == 0) {
		s.MinNodes = s.Nodes
	}
	deadlineZero := s.Green != nil && s.Green.Deadline == 0 // (the default is 48h)
	if s.Green != nil {
		g := s.Green.WithDefaults()
		s.Green = &g
	}
	s = s.syncDefaults().batchDefaults()
	s.DataSHA256 = strings.ToLower(s.DataSHA256)
	restarts := jobFileRestarts(&s)
	err := s.validateJobFile()
	if restarts != nil {
		var se *SpecError
		switch {
		case err == nil:
			err = &SpecError{Fields: []FieldError{*restarts}}
		case errors.As(err, &se):
			se.Fields = append(se.Fields, *restarts)
		}
	}
	// Unset means a default; written, 0 is out of range as in a flag.
	for _, z := range []struct {
		field, msg string
		zero       bool
	}{
		{"ranks_per_node", "0 out of range 1..64 (leave it out for one rank per node)", s.RanksPerNode == 0},
		{"keep_checkpoints", fmt.Sprintf("0 out of range: keep at least 1 (leave it out for %d)", DefaultKeepCheckpoints), s.KeepCheckpoints == 0},
		{"green.deadline", greenDeadlineZero, deadlineZero},
	} {
		if perr != nil || !z.zero || yamlpos.LineOf(file, z.field) == 0 {
			continue
		}
		zero := FieldError{Field: z.field, Msg: z.msg}
		var se *SpecError
		switch {
		case err == nil:
			err = &SpecError{Fields: []FieldError{zero}}
		case errors.As(err, &se):
			se.Fields = append(se.Fields, zero)
		}
	}
	if err != nil {
		var se *SpecError
		if errors.As(err, &se) {
			se.File = name
			for i := range se.Fields {
				if perr == nil {
					se.Fields[i].Line = yamlpos.LineOf(file, se.Fields[i].Field)
				}
			}
			sortByLine(se.Fields)
		}
		return RunSpec{}, err
	}
	return s, nil
}

// jobFileRestarts reads max_restarts as a job file writes it, into s
// decoded over the defaults (so 0 was written): 0 allows no restart
// (NoRestarts), a negative number is refused — the problem it returns,
// s then keeping the default so that Validate does not say it again.
func jobFileRestarts(s *RunSpec) *FieldError {
	switch {
	case s.MaxRestarts == 0:
		s.MaxRestarts = NoRestarts
	case s.MaxRestarts < 0:
		fe := &FieldError{Field: "max_restarts", Msg: fmt.Sprintf("must not be negative, got %d "+
			"(0: no restarts, the first failure fails the run; leave it out for %d)", s.MaxRestarts, DefaultMaxRestarts)}
		s.MaxRestarts = DefaultMaxRestarts
		return fe
	}
	return nil
}

// validateJobFile is Validate for a job file, which also never names a
// mem:// checkpoint_url: a job file is for node workers, each its own
// process, and mem:// is one process's memory (Validate accepts it, for
// tests that run every worker in one process).
func (s RunSpec) validateJobFile() error {
	err := s.Validate()
	if !MemoryBucket(s.CheckpointURL) {
		return err
	}
	mem := FieldError{Field: "checkpoint_url", Msg: fmt.Sprintf("%q is one process's memory: the node workers (each its own process) "+
		"would not see each other's checkpoints, and a replacement node could not resume; use file:///path on one host, "+
		"or s3://, gs://, azblob:// that every node reaches", s.CheckpointURL)}
	var se *SpecError
	switch {
	case err == nil:
		return &SpecError{Fields: []FieldError{mem}}
	case errors.As(err, &se):
		se.Fields = append(se.Fields, mem)
	}
	return err
}

// oneDocument says what is wrong with a job file that is not one YAML
// document: nothing in it (decoded, every field would be zero, and each
// said wrong), or several (the decoder reads the first and ignores the
// rest, their mistakes too).
func oneDocument(file *ast.File) *FieldError {
	var docs []*ast.DocumentNode
	for _, d := range file.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	switch len(docs) {
	case 0:
		return &FieldError{Field: "(document)", Msg: "empty: a job file names at least the run (name: mnist-demo); " +
			"`cann-train run --help` lists the fields, examples/mnist.yaml shows them"}
	case 1:
		return nil
	}
	fe := &FieldError{Field: "(document)", Msg: fmt.Sprintf("%d YAML documents (separated by ---): a job file is one run; "+
		"put each run in a file of its own", len(docs))}
	if tok := docs[1].Body.GetToken(); tok != nil && tok.Position != nil {
		fe.Line = tok.Position.Line
	}
	return fe
}

// decodeProblems is every problem of a job file that did not decode: the
// decoder's error (decodeError), then what the file says wrong once the
// fields it names are left out — the decoder stops at the first value
// of the wrong type, and validation never ran — found by parsing the
// rest again (at most passes times). Problems are in line order.
func decodeProblems(name string, file *ast.File, err error, passes int) []FieldError {
	out := decodeError(err, file)
	if file == nil || passes <= 1 {
		return out
	}
	for _, f := range out {
		if !yamlpos.Drop(file, f.Field) {
			return out
		}
	}
	_, err = parse(name, []byte(file.String()), passes-1)
	var se *SpecError
	if !errors.As(err, &se) {
		return out
	}
	said := func(field string) bool {
		return slices.ContainsFunc(out, func(f FieldError) bool {
			return field == f.Field || strings.HasPrefix(field, f.Field+".") || strings.HasPrefix(field, f.Field+"[")
		})
	}
	for _, f := range se.Fields {
		if f.Field == "(document)" || f.Field == "(syntax)" || said(f.Field) {
			continue // (what is left of the file, or a field already said wrong)
		}
		f.Line = yamlpos.LineOf(file, f.Field) // (the nodes left keep this file's lines)
		out = append(out, f)
	}
	sortByLine(out)
	return out
}

// sortByLine puts a spec's problems in line order, those without a line
// last, the order found otherwise.
func sortByLine(fs []FieldError) {
	yamlpos.SortByLine(fs, func(f FieldError) int { return f.Line })
}

// decodeError is the decoder's error as field errors, fields named by
// their path in file (when it parsed): one, or for unknown fields every
// one in the file (the decoder names one of them at random).
func decodeError(err error, file *ast.File) []FieldError {
	field, line, msg, unknown := yamlpos.DecodeError(err)
	if file != nil {
		field = yamlpos.PathOfToken(file, err, field)
	}
	if !unknown {
		return []FieldError{{Field: field, Line: line, Msg: msg}}
	}
	t := reflect.TypeFor[RunSpec]()
	unknownMsg := func(path string) string {
		if guess := suggest.DidYouMean(yamlpos.Suggest(t, path)); guess != "" {
			return "unknown field; " + guess + " (`cann-train run --help` lists the fields)"
		}
		return "unknown field (check the spelling; `cann-train run --help` lists the fields)"
	}
	all := yamlpos.UnknownFields(file, t)
	if len(all) == 0 {
		return []FieldError{{Field: field, Line: line, Msg: unknownMsg(field)}}
	}
	out := make([]FieldError, len(all))
	for i, u := range all {
		out[i] = FieldError{Field: u.Path, Line: u.Line, Msg: unknownMsg(u.Path)}
	}
	return out
}

// DefaultCancelGrace is RunSpec.CancelGrace's default.
const DefaultCancelGrace = time.Minute

// CancelGraceD is the cancel grace: CancelGrace, or its default.
func (s RunSpec) CancelGraceD() time.Duration {
	if s.CancelGrace > 0 {
		return s.CancelGrace.D()
	}
	return DefaultCancelGrace
}

// DefaultKeepCheckpoints is how many checkpoints of a run its nodes keep
// when the job does not say (keep_checkpoints); the workflow keeps as
// many references to fall back to on corruption.
const DefaultKeepCheckpoints = 8

// Retention is the run's checkpoint retention: the newest keepLast, and
// every one whose step is a multiple of keepEvery (0: none). (Not filled
// in by WithDefaults: the specs of runs started before it stay as they
// were.)
func (s RunSpec) Retention() (keepLast int, keepEvery int64) {
	keepLast = s.KeepCheckpoints
	if keepLast <= 0 {
		keepLast = DefaultKeepCheckpoints
	}
	return keepLast, s.KeepEvery
}

// DefaultMaxRestarts is max_restarts when a job does not say.
const DefaultMaxRestarts = 5

// NoRestarts is RunSpec.MaxRestarts for a run that restarts nothing: the
// first failure that would count fails it. A job file says it as
// max_restarts: 0 (Parse); in a RunSpec, 0 is unset (DefaultMaxRestarts),
// as it always was in the workflow inputs of runs already started. Every
// comparison "restarts so far >= MaxRestarts" holds at once for it.
const NoRestarts = -1

// RestartBudget is how many restarts the run may count: MaxRestarts, or 0
// for NoRestarts (defaults applied).
func (s RunSpec) RestartBudget() int { return max(s.MaxRestarts, 0) }

// operationDefaults fills in the fields every run has, built-in or
// external: restarts, timeouts, min_nodes and the green policy's own.
func (s RunSpec) operationDefaults() RunSpec {
	if s.MaxRestarts == 0 {
		s.MaxRestarts = DefaultMaxRestarts
	}
	if s.NodeWait == 0 {
		s.NodeWait = Duration(2 * time.Minute)
	}
	if s.HeartbeatTimeout == 0 {
		s.HeartbeatTimeout = Duration(10 * time.Second)
	}
	if s.ChunksPerRun == 0 {
		s.ChunksPerRun = 50
	}
	if s.MinNodes == 0 {
		s.MinNodes = s.Nodes
	}
	if s.Green != nil {
		g := s.Green.WithDefaults()
		s.Green = &g
	}
	return s
}

// CheckpointSchemes are the bucket URL schemes the workers can open (the
// gocloud.dev/blob drivers they link), sorted.
func CheckpointSchemes() []string { return []string{"azblob", "file", "gs", "mem", "s3"} }

// MemoryBucket reports whether url is a mem:// bucket: one process's
// memory, which no other process (another node worker, the CLI) sees.
func MemoryBucket(url string) bool {
	scheme, _, _ := strings.Cut(url, "://")
	return scheme == "mem"
}

// CheckBucketURL says what is wrong with a checkpoint bucket URL that a
// node's driver would refuse, or take to mean another place: no scheme, one
// no driver serves, a file:// URL naming a host (file://data/ckpt) or no
// directory, a cloud URL naming no bucket. Query parameters are the
// drivers' to check (a node opens the bucket before it trains a chunk).
func CheckBucketURL(raw string) error {
	const forms = "file:///path, s3://bucket, gs://bucket, azblob://container"
	shown := redact.URL(raw) // (a password in it stays out of the message)
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return fmt.Errorf("%q is not a bucket URL (%s)", shown, forms)
	}
	if !slices.Contains(CheckpointSchemes(), scheme) {
		return fmt.Errorf("%q: no storage driver for %q (%s)", shown, scheme, forms)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q does not parse as a URL", shown)
	case scheme == "file" && u.Host != "" && u.Host != "localhost":
		return fmt.Errorf("%q names host %q: a file:// URL is an absolute path on each node's own host, after three slashes (file:///data/ckpt)", shown, u.Host)
	case scheme == "file" && strings.Trim(u.Path, "/") == "":
		return fmt.Errorf("%q names no directory (file:///data/ckpt)", shown)
	case scheme != "file" && scheme != "mem" && u.Host == "":
		return fmt.Errorf("%q names no bucket (%s://bucket)", shown, scheme)
	}
	if q := u.Query(); scheme == "s3" && q.Has("max_attempts") {
		if n, err := strconv.Atoi(q.Get("max_attempts")); err != nil || n < 1 {
			return fmt.Errorf("%q: max_attempts=%q is not a number of tries (1 or more)", shown, q.Get("max_attempts"))
		}
	}
	return nil
}

// validateOperation checks the fields every run has, built-in or external:
// checkpointing, restarts and the timeouts.
func (s RunSpec) validateOperation(bad func(field, format string, args ...any)) {
	if s.CheckpointEvery < 1 {
		bad("checkpoint_every", "must be positive, got %d", s.CheckpointEvery)
	}
	if s.CheckpointURL != "" {
		if err := CheckBucketURL(s.CheckpointURL); err != nil {
			bad("checkpoint_url", "%v", err)
		}
	}
	if s.MaxRestarts < NoRestarts {
		bad("max_restarts", "must not be negative, got %d (0: no restarts)", s.MaxRestarts)
	}
	if s.KeepCheckpoints < 0 {
		bad("keep_checkpoints", "must not be negative, got %d (0: the default, %d)", s.KeepCheckpoints, DefaultKeepCheckpoints)
	}
	if s.KeepEvery < 0 {
		bad("keep_every", "must not be negative, got %d (0: no milestones)", s.KeepEvery)
	}
	if s.NodeWait < 0 {
		bad("node_wait", "not a duration: want e.g. 30s or 5m")
	}
	if s.HeartbeatTimeout == badDuration {
		bad("heartbeat_timeout", "not a duration: want e.g. 10s")
	} else if s.HeartbeatTimeout.D() < time.Second {
		bad("heartbeat_timeout", "%s is too short (at least 1s)", s.HeartbeatTimeout.D())
	}
	if s.CancelGrace == badDuration || s.CancelGrace < 0 {
		bad("cancel_grace", "not a duration: want e.g. 1m or 10m")
	}
	if s.ChunksPerRun < 1 {
		bad("chunks_per_run", "must be positive, got %d", s.ChunksPerRun)
	}
}
