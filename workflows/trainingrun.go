package workflows

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/parser"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/internal/suggest"
	"github.com/cann-train/cann-train/internal/yamlpos"
	"github.com/cann-train/cann-train/spec"
)

// RunInput starts (or continues) a TrainingRun.
type RunInput struct {
	Spec      spec.RunSpec `json:"spec"`
	ClusterID string       `json:"cluster_id"`
	// State is set when the run continues as new.
	State *RunState `json:"state,omitempty"`
	// Faults to inject from the start (testing and demos), as if signalled
	// with SignalInjectFault before the first chunk.
	Faults []spec.InjectFault `json:"faults,omitempty"`
	// Resume is the last status of an earlier run of this name (ended:
	// failed, cancelled, terminated or completed) to continue from its
	// last checkpoint, keeping its history: recoveries, checkpoints, the
	// batch controller's schedule and carbon accounting, a decided codec.
	Resume *spec.RunStatus `json:"resume,omitempty"`
	// ResumeCheckpoints are the earlier run's checkpoints up to its last,
	// oldest first (at most keepCheckpointRefs), for falling back when the
	// last is corrupt; without them only the last is known.
	ResumeCheckpoints []spec.CheckpointRef `json:"resume_checkpoints,omitempty"`

	// unknown names the fields of the JSON input this type does not
	// know (UnmarshalJSON), e.g. `unknown field "spec.nodse" (did you mean
	// nodes?)`.
	unknown string
	// badType names a field whose JSON value does not decode, e.g.
	// `spec.nodes: a string where a whole number belongs` (UnmarshalJSON).
	badType string
}

// UnmarshalJSON decodes a RunInput and notes the first field it does not
// know: a hand-written input (`temporal workflow start --input`) with a
// misspelt field would otherwise start a run without it, as if unset —
// where a job file names the field and its line. TrainingRun refuses such
// an input (versionUnknownInput).
func (in *RunInput) UnmarshalJSON(b []byte) error {
	type plain RunInput // (without this method)
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		// The run refuses it, naming the field, rather than fail its
		// first workflow task with the decoder's words.
		*in = RunInput(p)
		in.badType = strings.TrimPrefix(err.Error(), "json: ")
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
			in.badType = fmt.Sprintf("%s: %s where %s belongs", te.Field, article(te.Value), jsonKind(te.Type))
			if te.Field == "" {
				in.badType = fmt.Sprintf(`the input is %s, not an object: want {"spec": {"name": …, "nodes": …, "steps": …}}`, article(te.Value))
			}
		}
		return nil
	}
	*in = RunInput(p)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(plain)); err != nil {
		in.unknown = cmp.Or(unknownInputFields(b), strings.TrimPrefix(err.Error(), "json: "))
		if specOutside(b) {
			in.unknown += ` (a job's fields go under "spec": {"spec": {"name": …, "nodes": …}})`
		}
	}
	return nil
}

// specOutside: the JSON object b has no "spec" but names a field of the
// spec at its top level (the wrapper forgotten).
func specOutside(b []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return false
	}
	if _, ok := top["spec"]; ok {
		return false
	}
	t := reflect.TypeFor[spec.RunSpec]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if _, ok := top[name]; ok && name != "" && name != "-" {
			return true
		}
	}
	return false
}

// article puts "a" or "an" before a JSON value's kind ("string",
// "array", "number -3"…).
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// jsonKind says what JSON value a Go type takes: "a number", "a string".
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[spec.Duration]() {
		return `a duration string ("90s", "2m", "1h30m")`
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return "a string" // (its text form: a time, a name)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// unknownInputFields names every field of the JSON input b that RunInput
// does not know, by its path, with the fields each most likely meant:
// `unknown field "spec.nodse" (did you mean nodes?)`. Empty when b does
// not parse (the decoder's own error then says which field).
func unknownInputFields(b []byte) string {
	file, err := parser.ParseBytes(b, 0) // (JSON is YAML)
	if err != nil {
		return ""
	}
	t := reflect.TypeFor[RunInput]()
	var names []string
	for _, u := range yamlpos.UnknownFields(file, t) {
		name := strconv.Quote(u.Path)
		if guess := suggest.DidYouMean(yamlpos.Suggest(t, u.Path)); guess != "" {
			name += " (" + guess + ")"
		}
		names = append(names, name)
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "unknown field " + names[0]
	}
	return "unknown fields " + strings.Join(names, ", ")
}

// controlSignals are the signals a user sends TrainingRun; it reads
// checkpoint-saved too (its node workers', for an external job).
func controlSignals() []string {
	return []string{spec.SignalPause, spec.SignalResume, spec.SignalRescale, spec.SignalGreenOverride,
		spec.SignalEvict, spec.SignalInjectFault}
}

// ignoredSignals picks, from the names of the signals still unread
// (workflow.GetUnhandledSignalNames), those TrainingRun does not know,
// sorted, each with the name it most likely meant: `"pasue" (did you
// mean pause?)`. A known signal that is merely not read yet is not one.
func ignoredSignals(unread []string) []string {
	known := controlSignals()
	var out []string
	for _, name := range unread {
		if slices.Contains(known, name) || name == spec.SignalCheckpointSaved {
			continue
		}
		q := strconv.Quote(name)
		if guess := suggest.DidYouMean(suggest.Nearest(name, known)); guess != "" {
			q += " (" + guess + ")"
		}
		out = append(out, q)
	}
	slices.Sort(out)
	return out
}

// versionUnknownInput: an input with a field TrainingRun does not know
// fails the run at once (before: the field was ignored). Asked only for
// such an input, so that a history whose input held a field since removed
// replays as it ran.
const versionUnknownInput = "unknown-input"

// versionRunIDName: a run started with a workflow ID run/<x> other than
// run/<its spec's name> fails at once (before: it stored its checkpoints
// under the name, where nothing that knew it by its ID looked). Asked only
// for such a run's first execution.
const versionRunIDName = "run-id-name"

// RunState is everything that crosses continue-as-new.
type RunState struct {
	Status     spec.RunStatus  `json:"status"`
	Token      string          `json:"token"`
	Membership spec.Membership `json:"membership"`
	// GreenRecheck: the last green wait ended to decide again at a step
	// of the signal (versionRecheckGreenWait): the next one goes on with
	// it, not a new wait — across continue-as-new too
	// (versionRolloverInGreenWait).
	GreenRecheck bool `json:"green_recheck,omitempty"`
	// Epoch numbers chunk attempts; it makes every communicator session unique.
	Epoch    int64 `json:"epoch"`
	Restarts int   `json:"restarts"`
	// Unreached counts the recoveries in a row, since the last checkpoint
	// committed, from chunks stopped only because their nodes' heartbeats
	// did not reach Temporal (versionTemporalUnreachable): the first
	// maxFreeUnreached count no restart.
	Unreached int `json:"unreached,omitempty"`
	// LastChunkEnd is when the previous chunk's slowest rank finished.
	LastChunkEnd time.Time `json:"last_chunk_end"`
	// SegmentBreak: the run held (paused, waited) since the last chunk;
	// the next starts a segment of its own (heldBetweenChunks).
	SegmentBreak bool    `json:"segment_break,omitempty"`
	IdleSum      float64 `json:"idle_sum"`
	IdleCount    int     `json:"idle_count"`
	// Checkpoints are the last few committed checkpoints, oldest first; a
	// corrupt one is dropped and the run falls back to the one before.
	Checkpoints []spec.CheckpointRef `json:"checkpoints"`
	// TrainSeconds and StepsTrained count every chunk, redone ones too.
	TrainSeconds float64 `json:"train_seconds"`
	StepsTrained int64   `json:"steps_trained"`
	// Faults are pending fault injections (SignalInjectFault), in arrival order.
	Faults []spec.InjectFault `json:"faults,omitempty"`
	// Ctl is what the pause, resume, rescale and green-override signals
	// asked for.
	Ctl Controls `json:"ctl"`
	// Size is the node count the run trains on (0: spec.Nodes); rescales
	// and shrinks after failures change it.
	Size int `json:"size,omitempty"`
	// RegrowAt is when a run below its target size (Status.TargetNodes)
	// next asks the Cluster for free nodes; RegrowWait is the wait after
	// the last ask that found none (doubling up to regrowMax).
	RegrowAt   time.Time     `json:"regrow_at,omitzero"`
	RegrowWait time.Duration `json:"regrow_wait,omitempty"`
	// StorageHeld: the run holds for its checkpoint storage (storeHeld)
	// and tries next after StorageWait (0: at once).
	StorageHeld bool          `json:"storage_held,omitempty"`
	StorageWait time.Duration `json:"storage_wait,omitempty"`
	// KeptFinal: an external job's hold (StorageHeld) is for its final
	// checkpoint, which its first node kept: stored, the run completes
	// (storeKeptTry).
	KeptFinal bool `json:"kept_final,omitempty"`
	// StoreTries counts the hold's save-only chunks the storage refused:
	// with nodes that all speak spec.ChunkProtocolSaver each names the
	// next node the saver (storeSaver). WriteCutOff are the nodes that
	// could not store what another node stored in the last such hold
	// (wroteElsewhere).
	StoreTries  int      `json:"store_tries,omitempty"`
	WriteCutOff []string `json:"write_cut_off,omitempty"`
	// CutOff are the nodes that could not read the checkpoint at its
	// step in the last try while other nodes read it (cutOff): if they
	// fail so again at the next, they are cut off from the bucket.
	CutOff *CutOff `json:"cut_off,omitempty"`
	// ForceCheckpoint makes the next chunk checkpoint at its end (a
	// pending rescale waits for it).
	ForceCheckpoint bool `json:"force_checkpoint,omitempty"`
	// Unpriced are finished chunks that PlanCarbon has not priced yet.
	Unpriced []spec.Segment `json:"unpriced,omitempty"`
	// Session names the external job's current launch (its checkpoint
	// signals carry it).
	Session string `json:"session,omitempty"`
	// Algorithm is the gradient allreduce's algorithm the topology scan
	// chose (collective: auto) for AlgorithmRanks ranks; "" = the spec's.
	Algorithm      string `json:"algorithm,omitempty"`
	AlgorithmRanks int    `json:"algorithm_ranks,omitempty"`
	// PendingCkpt is a checkpoint rank 0 was still uploading when its chunk
	// ended (Key empty); the next chunk reports it committed, or a recovery
	// looks it up.
	PendingCkpt *spec.CheckpointRef `json:"pending_ckpt,omitempty"`
	// SyncMeasures are the ranks' measurements from the last chunk, for
	// an auto compression decision.
	SyncMeasures []SyncMeasure `json:"sync_measures,omitempty"`
	// DataSHA256 fingerprints the data set the run trains on: the first
	// chunk's (its nodes compared theirs); the chunks after tell the
	// nodes (ChunkInput.DataSHA256), and one whose data differs is unfit.
	DataSHA256 string `json:"data_sha256,omitempty"`
	// SlowStreaks are the nodes that computed slow_node_factor× their
	// peers' time in the last chunk, with how many chunks in a row
	// (noteSlow).
	SlowStreaks []spec.SlowNode `json:"slow_streaks,omitempty"`
	// SlowDrained are the slow nodes the run asked the Cluster to drain
	// (slow_node: drain), each once.
	SlowDrained []string `json:"slow_drained,omitempty"`
	// SlowLeft are the slow nodes the run left (slow_node: replace): its
	// acquire requests take them last (AcquireRequest.Avoid).
	SlowLeft []string `json:"slow_left,omitempty"`
	// CutOffLeft are the worker processes of the nodes the run replaced
	// for being cut off from its checkpoint bucket (cutOff): its acquire
	// requests shun them (AcquireRequest.Shun) until they register again.
	CutOffLeft []spec.NodeProcess `json:"cut_off_left,omitempty"`
	// CameBack are the nodes the run holds whose worker stopped on
	// purpose (SIGTERM: an Evict.Stopping) and registered again while the
	// run held them between chunks (the Cluster's Undrained evict, "its
	// worker registered again"): the next chunk finds their new process
	// without the run's state (NoState), a planned loss that counts no
	// restart (versionStoppedCameBack). Cleared once a chunk has trained
	// or a recovery restored every rank.
	CameBack []string `json:"came_back,omitempty"`
}

// TrainingRun drives one training run: acquire nodes, then train chunk by
// chunk — each chunk one TrainChunk activity per node, checkpointing at
// chunk ends — replacing failed nodes from the last checkpoint, and finally
// release the nodes and return the run's status as its report.
func TrainingRun(ctx workflow.Context, in RunInput) (spec.RunStatus, error) {
	r, err := newRun(ctx, in)
	if err != nil {
		return spec.RunStatus{}, err
	}
	st, err := r.run(ctx)
	var can *workflow.ContinueAsNewError
	if errors.As(err, &can) {
		return st, err
	}
	if ctx.Err() == nil {
		return st, runError(err)
	}
	// Cancelled (the last steps may have finished meanwhile): whatever
	// the cancelled context could not do, the nodes go back to the pool.
	if err == nil {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		r.releaseNodes(dctx)
		return st, nil
	}
	if r.st.Status.Phase == spec.PhaseCancelled {
		return st, err // fail saw it first
	}
	return r.cancelled(ctx)
}

// runError is the error a failed run ends with, as the Web UI and
// `temporal workflow describe` show it: the status's own words
// (failureMessage), non-retryable (a run's workflow has no retry policy;
// a Go error would read "retryable: true") and typed by its cause's type
// (NotEnoughNodes, PeerFailed …; RunFailed for none), not by the Go type
// of its last wrapping ("wrapError"). The cause stays attached.
func runError(err error) error {
	if err == nil {
		return nil
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && error(ae) == err {
		if ae.NonRetryable() {
			return err
		}
		return temporal.NewNonRetryableApplicationError(ae.Message(), ae.Type(), errors.Unwrap(ae))
	}
	typ := spec.ErrTypeRunFailed
	if errors.As(err, &ae) && ae.Type() != "" {
		typ = ae.Type()
	}
	return temporal.NewNonRetryableApplicationError(failureMessage(err), typ, err)
}

// cancelled ends a run whose workflow was cancelled: its chunks (or its
// external world) were cancelled with it; it releases its nodes, says
// where it stopped and ends Canceled. Its checkpoints stay in the bucket,
// the one still uploading included once it is there.
func (r *run) cancelled(ctx workflow.Context) (spec.RunStatus, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	r.settlePending(dctx)
	kept := r.storeKeptOnCancel(dctx)
	s := &r.st.Status
	s.Error = fmt.Sprintf("cancelled at step %d", max(s.Step, r.ckptStep())) // an external launch's Step is its start
	if s.LastCkpt != nil {
		s.Error += fmt.Sprintf("; last checkpoint at step %d", s.LastCkpt.Step)
	}
	s.Error += kept
	workflow.GetLogger(ctx).Info("run cancelled: releasing its nodes", "step", s.Step)
	r.releaseNodes(dctx)
	r.setPhase(dctx, spec.PhaseCancelled)
	return r.st.Status, ctx.Err()
}

type run struct {
	spec      spec.RunSpec
	clusterID string
	st        RunState
	chunksNow int // chunks in this workflow run (since continue-as-new)
	// ext is an external job's current launch (nil for built-in runs).
	ext *externalRun
	// heldAtCancel is the step of the checkpoint an external job held for
	// when it was cancelled during a try to store it (storeKeptOnCancel).
	heldAtCancel int64
	// failedNodes go with the next acquire request (AcquireRequest.Failed).
	failedNodes []spec.MarkFailed
	// leaving go with the next acquire request too (AcquireRequest.Leave).
	leaving []string
	// flight is the chunk training now (nil between chunks).
	flight *chunkFlight
	// slotEnd is the end of the planned green window an interruptible run
	// trains in (planGreen; zero: none).
	slotEnd time.Time
	// cancelSeen: the run was cancelled while a chunk trained, and asked
	// the chunk to end at a checkpoint first (endOnCancel).
	cancelSeen bool
	// askingSince: an ask for a free node (watchForNodes) has waited
	// since then for one to come free; zero when none waits. (For the
	// status query only.)
	askingSince time.Time
	// askCut: the last such ask, one that holds the node it finds, was
	// still out when its chunk ended (the next chunk's asks go on at once:
	// versionCutAsks); askOut: such an ask is out; askSeq counts the
	// chunks that started asking (watchForNodes), so that a chunk's
	// coroutine that runs after the next chunk started records nothing.
	askCut, askOut bool
	askSeq         int
}

func newRun(ctx workflow.Context, in RunInput) (*run, error) {
	r := &run{spec: in.Spec.WithDefaults(), clusterID: in.ClusterID}
	if r.clusterID == "" {
		r.clusterID = spec.DefaultClusterID
	}
	if in.badType != "" {
		err := fmt.Errorf("workflow input: %s (the spec's fields are the job file's: `cann-train run --help` lists them)", in.badType)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	if err := r.spec.Validate(); err != nil {
		if in.unknown != "" {
			// A misspelt field is the likelier cause ("name: required" for
			// a misspelt "name" or "spec"): say it first.
			err = fmt.Errorf("workflow input: %s; %w", in.unknown, err)
		}
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	if id := workflow.GetInfo(ctx).WorkflowExecution.ID; in.State == nil && strings.HasPrefix(id, spec.RunIDPrefix) &&
		id != spec.RunIDPrefix+r.spec.Name && workflow.GetVersion(ctx, versionRunIDName, workflow.DefaultVersion, 1) >= 1 {
		err := fmt.Errorf("workflow ID %q with spec name %q: a run's workflow ID is %s<name> (its checkpoints are the name's: `cann-train status`, `checkpoint ls` and --resume find it by the name)",
			id, r.spec.Name, spec.RunIDPrefix)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	if in.unknown != "" && workflow.GetVersion(ctx, versionUnknownInput, workflow.DefaultVersion, 1) >= 1 {
		err := fmt.Errorf("workflow input: %s (the spec's fields are the job file's: `cann-train run --help` lists them)", in.unknown)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	if in.State != nil && workflow.GetInfo(ctx).ContinuedExecutionRunID == "" {
		// A hand-written input (`temporal workflow start --input`) that
		// carries the state of another run would run on half of it and
		// fail later on what it lacks ("run_id is required").
		err := errors.New(`workflow input: "state" is the run's own, set only when it continues as new; ` +
			"a new run starts without it (to go on from an earlier run's checkpoint: `cann-train run --resume`)")
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	if in.State != nil {
		r.st = *in.State
	} else {
		r.st.Status = spec.RunStatus{
			RunID:      workflow.GetInfo(ctx).WorkflowExecution.ID,
			Phase:      spec.PhaseAcquiring,
			Model:      r.spec.Model.Kind,
			TotalSteps: r.spec.Steps,
			StartedAt:  workflow.Now(ctx),
			Recoveries: []spec.Recovery{},
		}
		r.st.Token = newToken(ctx)
		r.st.Faults = in.Faults
		if in.Resume != nil && in.Resume.LastCkpt != nil {
			r.resumeFrom(ctx, *in.Resume, in.ResumeCheckpoints)
		}
	}
	r.st.Status.ClusterID = r.clusterID
	r.st.Status.MinNodes = r.minNodes(ctx)
	r.st.Status.GlobalBatch = r.spec.GlobalBatch()
	if k := r.spec.LocalRanks(); k > 1 {
		r.st.Status.RanksPerNode = k
	}
	if r.st.Status.Sync == nil {
		r.st.Status.Sync = r.spec.NewSyncStatus()
	}
	if r.spec.Green != nil && r.st.Status.Green == nil {
		r.st.Status.Green = &spec.GreenStatus{Policy: *r.spec.Green, BudgetG: r.spec.Green.BudgetG}
		if r.spec.Green.Batch != nil && !r.spec.IsExternal() {
			r.st.Status.Green.Batch, r.st.Status.Green.LearningRate = r.spec.GlobalBatch(), r.spec.LearningRate
		}
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, spec.QueryStatus, func() (spec.RunStatus, error) {
		st := r.st.Status
		st.IgnoredSignals = ignoredSignals(workflow.GetUnhandledSignalNames(ctx))
		if why, next, ok := r.wantsNodes(); ok {
			st.NodeAsk = &spec.NodeAsk{Why: why, Next: next, WaitingSince: r.askingSince}
			if !r.askingSince.IsZero() {
				st.NodeAsk.Next = time.Time{}
			}
		}
		return st, nil
	}, workflow.QueryHandlerOptions{Description: "The run's status (spec.RunStatus): phase, step, nodes, checkpoints, recoveries, " +
		"green plan — what `cann-train status` shows"}); err != nil {
		return nil, err
	}
	faults := workflow.GetSignalChannelWithOptions(ctx, spec.SignalInjectFault, workflow.SignalChannelOptions{
		Description: `Kill or freeze a node of the run at a step, for tests and drills ({"node_id": ID, "at_step": S, "kind": "kill"|"freeze"}; ` +
			"its worker needs --allow-fault-injection): `cann-train fault kill|freeze --run RUN --node ID`"})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var f spec.InjectFault
			faults.Receive(ctx, &f)
			r.st.Faults = append(r.st.Faults, f)
			r.armFault(ctx, f)
		}
	})
	r.listen(ctx)
	return r, nil
}

// resumeFrom starts the run where an earlier run of its name checkpointed
// last: its status carries over (what it did stays on the record), the
// step is its last checkpoint's, and the generations go on from its (a
// node's warm state of that run is never taken for this one's).
func (r *run) resumeFrom(ctx workflow.Context, prev spec.RunStatus, earlier []spec.CheckpointRef) {
	ck := *prev.LastCkpt
	st := prev
	st.RunID, st.Phase, st.Model, st.TotalSteps = r.st.Status.RunID, spec.PhaseAcquiring, r.st.Status.Model, r.st.Status.TotalSteps
	st.Step, st.LastCkpt, st.StartedAt = ck.Step, &ck, r.st.Status.StartedAt
	st.Nodes, st.Error, st.Detail, st.WaitUntil, st.PauseRequested, st.PendingNodes, st.Evicting = nil, "", "", time.Time{}, false, 0, nil
	st.Leaving, st.Stopping = nil, nil
	st.CheckpointFailed, st.Topology, st.Strategy, st.Report = nil, nil, nil, ""
	st.DataSHA256 = "" // this run's nodes compare theirs (the resumption keeps it)
	if st.Recoveries == nil {
		st.Recoveries = []spec.Recovery{}
	}
	st.Resumed = append(slices.Clone(prev.Resumed), spec.Resumption{
		Phase: prev.Phase, Error: prev.Error, Step: prev.Step, FromStep: ck.Step, At: workflow.Now(ctx),
		DataSHA256: prev.DataSHA256, Recoveries: len(st.Recoveries),
	})
	if st.Sync != nil && st.Sync.Codec == "" {
		st.Sync = nil // undecided: measured afresh (newRun)
	}
	r.st.Status = st
	r.st.Checkpoints = []spec.CheckpointRef{ck}
	if n := len(earlier); n > 0 && earlier[n-1].Step == ck.Step {
		r.st.Checkpoints = slices.Clone(earlier[max(0, n-keepCheckpointRefs):])
	}
	r.st.Membership.Generation = prev.Generation
	workflow.GetLogger(ctx).Info("resuming an earlier run from its last checkpoint", "ended", prev.Phase, "step", prev.Step, "checkpoint", ck.Step)
}

// versionArmFaults: a signalled fault for a member node is handed to its
// worker (ActivityArmFault), so that it strikes in the chunk in flight
// too; before, it waited for a chunk starting before its step, and one
// signalled during the chunk that held its step never struck.
const versionArmFaults = "arm-faults"

// armFault hands fault f, just signalled, to its node's worker when the
// node is a member now: the worker strikes once a chunk of this run
// completes the step, the one in flight included, and the fault is no
// longer pending here. A node that is not a member (or does not answer
// within its heartbeat timeout) keeps it pending for its next chunk's
// input; one that refuses fault injection, or a malformed fault, drops
// it with a warning.
func (r *run) armFault(ctx workflow.Context, f spec.InjectFault) {
	if workflow.GetVersion(ctx, versionArmFaults, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	i := slices.IndexFunc(r.st.Membership.Nodes, func(n spec.Node) bool { return n.ID == f.NodeID })
	if i < 0 {
		return
	}
	node := r.st.Membership.Nodes[i]
	kind := f.Kind
	if kind == "" {
		kind = spec.FaultKill
	}
	actx := nodeCallOptions(ctx, node, toStart(r.spec), 10*time.Second, fmt.Sprintf("arm a %s fault on %s after step %d", kind, node.ID, f.AtStep))
	err := workflow.ExecuteActivity(actx, spec.ActivityArmFault, spec.ArmFaultInput{RunID: r.st.Status.RunID, Fault: f}).Get(ctx, nil)
	var app *temporal.ApplicationError
	switch {
	case err == nil:
	case errors.As(err, &app) && app.NonRetryable():
		workflow.GetLogger(ctx).Warn("fault dropped", "node", f.NodeID, "step", f.AtStep, "error", err)
	default:
		workflow.GetLogger(ctx).Warn("fault not armed on its node; it waits for the node's next chunk", "node", f.NodeID, "step", f.AtStep, "error", err)
		return
	}
	if j := slices.Index(r.st.Faults, f); j >= 0 {
		r.st.Faults = append(r.st.Faults[:j:j], r.st.Faults[j+1:]...)
	}
}

// faultFor takes the pending fault for node that falls in (from, to]
// (AtStep 0: none).
func (r *run) faultFor(node string, from, to int64) spec.InjectFault {
	for i, f := range r.st.Faults {
		if f.NodeID == node && f.AtStep > from && f.AtStep <= to {
			r.st.Faults = append(r.st.Faults[:i:i], r.st.Faults[i+1:]...)
			return f
		}
	}
	return spec.InjectFault{}
}

func (r *run) run(ctx workflow.Context) (spec.RunStatus, error) {
	if r.spec.IsExternal() {
		return r.runExternal(ctx)
	}
	if len(r.st.Membership.Nodes) == 0 {
		if err := r.acquire(ctx); err != nil {
			return r.fail(ctx, err)
		}
	}
	for r.st.Status.Step < r.spec.Steps || r.st.StorageHeld {
		if r.shouldContinueAsNew(ctx) {
			r.settle(ctx)
			return spec.RunStatus{}, workflow.NewContinueAsNewError(ctx, TrainingRun,
				RunInput{Spec: r.spec, ClusterID: r.clusterID, State: &r.st})
		}
		if r.st.StorageHeld {
			if err := r.storeHeld(ctx); err != nil {
				if err := r.recover(ctx, err); err != nil {
					return r.fail(ctx, err)
				}
			}
			continue
		}
		if r.controlled(ctx) {
			if err := r.beforeChunk(ctx); errors.Is(err, errWaitRollover) {
				continue // (continues as new above)
			} else if err != nil {
				return r.fail(ctx, err)
			}
		}
		before := r.st.Status.Step
		if err := r.trainChunk(ctx); err != nil {
			if err := r.recover(ctx, err); err != nil {
				return r.fail(ctx, err)
			}
		}
		if r.st.Status.Step > before {
			r.st.Ctl.ResumeUnspent = false // spent: the run trained on (a recovery from a later checkpoint too)
		}
		if r.cancelSeen && r.st.Status.Step < r.spec.Steps {
			return r.st.Status, ctx.Err() // its chunk ended at a checkpoint: the run ends cancelled there
		}
	}
	if r.controlled(ctx) {
		r.priceChunks(ctx)
	}
	r.releaseNodes(ctx)
	r.setPhase(ctx, spec.PhaseCompleted)
	r.writeReport(ctx)
	return r.st.Status, nil
}

// versionFinalReport: completed runs store their report in the bucket.
const versionFinalReport = "final-report"

// writeReport stores the finished run's status as its report next to its
// last checkpoint (best effort: a bucket that refuses it is logged, the
// run is complete all the same) and records where.
func (r *run) writeReport(ctx workflow.Context) {
	ck := r.st.Status.LastCkpt
	if ck == nil || workflow.GetVersion(ctx, versionFinalReport, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	opts := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           spec.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "write report",
	})
	var where string
	in := spec.ReportInput{URL: ck.URL, Run: ck.Run, Status: r.st.Status}
	if err := workflow.ExecuteActivity(opts, spec.ActivityWriteReport, in).Get(ctx, &where); err != nil {
		workflow.GetLogger(ctx).Warn("could not store the run's report", "error", err)
		return
	}
	r.st.Status.Report = where
	r.publish(ctx)
}

func (r *run) shouldContinueAsNew(ctx workflow.Context) bool {
	return r.chunksNow >= r.spec.ChunksPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// size is the node count the run trains on.
func (r *run) size() int {
	if r.st.Size > 0 {
		return r.st.Size
	}
	return r.spec.Nodes
}

// acquire gets the run's first nodes and starts its first generation.
// A run's first acquire with min_nodes below its size starts on as many
// as are free, at least min_nodes (versionStartSmall), and grows back to
// its size at chunk boundaries as nodes come free, as after a failure.
// A pause or a rescale that comes while it waits for them is acted on
// at once (versionControlsWhileAcquiring): the wait is withdrawn, the run
// holds without nodes until a resume, and asks again — for the new count.
func (r *run) acquire(ctx workflow.Context) error {
	for {
		if (r.st.Ctl.Paused || r.st.Ctl.Rescale > 0) && r.controlsWhileAcquiring(ctx) {
			if err := r.controlsBeforeNodes(ctx); err != nil {
				return err
			}
		}
		want, minCount := r.size(), 0
		if r.st.Membership.Generation == 0 && r.spec.MinNodes < want && r.spec.Strategy != spec.StrategyAuto && !r.spec.IsExternal() &&
			workflow.GetVersion(ctx, versionStartSmall, workflow.DefaultVersion, 1) >= 1 {
			minCount = r.spec.MinNodes
		}
		err := r.acquireNodesWatched(ctx, spec.PhaseAcquiring, want, minCount, r.spec.NodeWait.D(), true)
		if errors.Is(err, errWithdrawn) {
			continue // (the controls that withdrew it are acted on above)
		}
		if err != nil {
			return err
		}
		if n := len(r.st.Membership.Nodes); n < want {
			workflow.GetLogger(ctx).Info("started on fewer nodes than the job's: it grows back as nodes come free", "nodes", n, "of", want, "min_nodes", r.spec.MinNodes)
			r.shrank(ctx, want)
		}
		return nil
	}
}

// versionControlsWhileAcquiring: a pause or a rescale signalled while a
// run waits for its first nodes withdraws the wait (SignalWithdraw) and is
// acted on at once — a paused run holds without nodes, a rescaled one asks
// for the new count — and one signalled before the first acquire is acted
// on before it. Before, both waited until the nodes came (up to node_wait,
// and a run that could not get them failed). Asked only then.
const versionControlsWhileAcquiring = "controls-while-acquiring"

func (r *run) controlsWhileAcquiring(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionControlsWhileAcquiring, workflow.DefaultVersion, 1) >= 1
}

// errWithdrawn: the run withdrew its waiting acquire (a pause, a rescale).
var errWithdrawn = errors.New("acquire withdrawn")

// controlsBeforeNodes acts on a pause (holds until a resume) and a
// rescale (the node count to ask for) while the run holds no node.
func (r *run) controlsBeforeNodes(ctx workflow.Context) error {
	if r.st.Ctl.Paused {
		if err := r.hold(ctx); err != nil {
			return err
		}
	}
	if n := r.st.Ctl.Rescale; n > 0 {
		workflow.GetLogger(ctx).Info("rescaled before the run's first nodes", "nodes", n, "was", r.size())
		r.st.Size = n
		r.st.Ctl.Rescale, r.st.Status.PendingNodes = 0, 0
		r.setTarget(0)
		r.publish(ctx)
	}
	return nil
}

// acquireUnwanted reports whether a pause or a rescale to another count
// than count has come since the acquire of count nodes began.
func (r *run) acquireUnwanted(count int) bool {
	return r.st.Ctl.Paused || (r.st.Ctl.Rescale > 0 && r.st.Ctl.Rescale != count)
}

// versionStartSmall: a run whose job sets min_nodes below nodes starts on
// the free nodes when there are at least min_nodes, and grows back to
// nodes (before: it waited node_wait for all of them, then failed, though
// it could have trained). Asked only for such a run's first acquire.
const versionStartSmall = "start-small"

// acquireNodes makes the run hold count nodes (at least minCount when
// that is set: see AcquireRequest) and starts a new generation.
func (r *run) acquireNodes(ctx workflow.Context, phase spec.Phase, count, minCount int) error {
	return r.acquireNodesWithin(ctx, phase, count, minCount, r.spec.NodeWait.D())
}

// acquireNodesWithin is acquireNodes waiting up to wait for the nodes
// (0: take what is free now or fail).
func (r *run) acquireNodesWithin(ctx workflow.Context, phase spec.Phase, count, minCount int, wait time.Duration) error {
	return r.acquireNodesWatched(ctx, phase, count, minCount, wait, false)
}

// acquireNodesWatched is acquireNodesWithin; with watch, a pause or a
// rescale to another count while the acquire waits withdraws it
// (errWithdrawn; nodes the Cluster gave before the withdrawal are
// taken as usual).
func (r *run) acquireNodesWatched(ctx workflow.Context, phase spec.Phase, count, minCount int, wait time.Duration, watch bool) error {
	// Say what the run waits for (status, dashboard, Web UI), after what
	// the caller said (a rescale).
	prev := r.st.Status.Detail
	r.st.Status.Detail = acquireDetail(count, minCount, r.keeps(count), workflow.Now(ctx), wait) + shunDetail(r.st.Status.CutOff)
	if phase == spec.PhaseAcquiring && wait > 0 {
		// (A rescale's wait trains on after it; this one's fails the run.)
		r.st.Status.Detail += acquireThen
	}
	if prev != "" {
		r.st.Status.Detail = prev + ": " + r.st.Status.Detail
	}
	r.setPhase(ctx, phase)
	var nodes []spec.Node
	req := spec.AcquireRequest{RunID: r.st.Status.RunID, Count: count, MinCount: minCount, Wait: wait, Failed: r.failedNodes,
		DataSHA256: r.st.DataSHA256, RecheckHeld: r.st.DataSHA256 != "", Leave: r.leaving, Avoid: r.st.SlowLeft, Shun: r.st.CutOffLeft}
	if req.DataSHA256 == "" && !r.spec.IsExternal() {
		req.PreferDataSHA256 = r.spec.DataSHA256
		req.SameData = req.PreferDataSHA256 == ""
	}
	r.failedNodes, r.leaving = nil, nil
	fut := workflow.ExecuteActivity(acquireOptions(ctx, r.spec, count), spec.ActivityAcquireNodes, r.clusterID, req)
	ended := false
	if watch && wait > 0 {
		workflow.Go(ctx, func(ctx workflow.Context) { r.withdrawWhenUnwanted(ctx, count, &ended) })
	}
	err := fut.Get(ctx, &nodes)
	ended = true
	r.st.Status.Detail = prev
	if app := (*temporal.ApplicationError)(nil); errors.As(err, &app) && app.Type() == spec.ErrTypeAcquireWithdrawn {
		return errWithdrawn
	}
	if err != nil {
		return fmt.Errorf("acquire nodes: %w", err)
	}
	r.st.Membership = spec.Membership{Generation: r.st.Membership.Generation + 1, Nodes: nodes}
	r.st.Size = len(nodes)
	r.st.Status.Nodes = r.st.Membership.NodeIDs()
	r.st.Status.Generation = r.st.Membership.Generation
	r.scanTopology(ctx)
	if err := r.planStrategy(ctx); err != nil {
		return err
	}
	r.setPhase(ctx, spec.PhaseTraining)
	return nil
}

// withdrawWhenUnwanted waits, beside an acquire of count nodes, until the
// acquire has ended or a pause or another count is asked for
// (acquireUnwanted); then it asks the Cluster to withdraw the run's
// waiting acquire, and asks again every withdrawRetry until it has ended
// (the Update may not have reached the Cluster yet, or the Cluster
// continued as new and the acquire went to its next run).
func (r *run) withdrawWhenUnwanted(ctx workflow.Context, count int, ended *bool) {
	if workflow.Await(ctx, func() bool { return *ended || r.acquireUnwanted(count) }) != nil || *ended ||
		!r.controlsWhileAcquiring(ctx) {
		return
	}
	why := "a pause"
	if !r.st.Ctl.Paused {
		why = fmt.Sprintf("a rescale to %d node(s)", r.st.Ctl.Rescale)
	}
	workflow.GetLogger(ctx).Info("withdrawing the run's wait for nodes", "why", why)
	for !*ended {
		err := workflow.SignalExternalWorkflow(ctx, r.clusterID, "", spec.SignalWithdraw, spec.Withdraw{RunID: r.st.Status.RunID}).Get(ctx, nil)
		if err != nil && ctx.Err() == nil {
			workflow.GetLogger(ctx).Warn("could not withdraw the run's wait for nodes; asking again", "error", err)
		}
		if _, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: withdrawRetry,
			TimerOptions: workflow.TimerOptions{Summary: "withdraw the wait for nodes again unless it ended (" + why + ")"}}, func() bool { return *ended }); err != nil {
			return
		}
	}
}

// withdrawRetry: how often a run asks the Cluster again to withdraw its
// waiting acquire until the acquire has ended.
const withdrawRetry = 10 * time.Second

// keeps is how many of the nodes the run holds an acquire of count
// keeps: its members in the first count ranks, less the failed ones and
// those it leaves. (The Cluster decides: one whose lease lapsed unnoticed
// is replaced too.)
func (r *run) keeps(count int) int {
	n := 0
	for rank, node := range r.st.Membership.Nodes {
		if rank < count && !slices.Contains(r.leaving, node.ID) &&
			!slices.ContainsFunc(r.failedNodes, func(f spec.MarkFailed) bool { return f.NodeID == node.ID }) {
			n++
		}
	}
	return n
}

// acquireDetail says how many free nodes a run waits for, beside the
// held ones it keeps, and until when.
func acquireDetail(count, minCount, held int, now time.Time, wait time.Duration) string {
	atLeast := ""
	if minCount > 0 && minCount < count {
		atLeast = fmt.Sprintf(", or at least %d", minCount)
	}
	want := fmt.Sprintf("%d free node(s)%s", count, atLeast)
	if held > 0 && held < count {
		want = fmt.Sprintf("%d free node(s) beside the %d it keeps (%d in all%s)", count-held, held, count, atLeast)
	}
	if wait <= 0 {
		return "asking for " + want
	}
	return fmt.Sprintf("waiting for %s until %s (node_wait %s)", want, now.Add(wait).UTC().Format("15:04:05 MST"), wait)
}

// acquireThen ends the detail of a run waiting for the nodes it needs
// to train on: what follows the wait, and where to see why it waits.
const acquireThen = "; the run fails then if too few have come free (`cann-train nodes` says who has them, and which runs wait)"

// shunDetail says, after acquireDetail, which nodes the run does not
// take (RunStatus.CutOff, the nodes of RunState.CutOffLeft); "" when
// none.
func shunDetail(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	until := "until its worker registers again"
	if len(ids) > 1 {
		until = "until their workers register again"
	}
	return fmt.Sprintf(" (not %s: cut off from the run's checkpoint bucket, %s)", spec.NodesWord(ids), until)
}

func (r *run) releaseNodes(ctx workflow.Context) {
	r.st.Status.Evicting, r.st.Status.Stopping, r.st.Status.Leaving = nil, nil, nil // none held any more
	// Best effort: a Cluster that is gone has nothing to release.
	_ = workflow.SignalExternalWorkflow(ctx, r.clusterID, "", spec.SignalRelease,
		spec.Release{RunID: r.st.Status.RunID}).Get(ctx, nil)
}

func (r *run) fail(ctx workflow.Context, err error) (spec.RunStatus, error) {
	if ctx.Err() != nil {
		return r.cancelled(ctx) // not a failure: the workflow was cancelled
	}
	r.st.Status.Error = failureMessage(err)
	r.releaseNodes(ctx)
	r.resolveAtFailure(ctx)
	r.setPhase(ctx, spec.PhaseFailed)
	return r.st.Status, err
}

// versionFailResolves: a run that fails with a checkpoint's upload in
// flight (committed only by the next chunk's report) looks it up once
// first; before, a run that failed after it — no spare for a lost node —
// said "checkpoints 0", offered no --resume, and ls without --url found
// no bucket. Asked only when one is pending.
const versionFailResolves = "fail-resolves"

// resolveAtFailure commits the pending checkpoint of a failing run where
// the bucket holds it (one look, no hold: the run is failing anyway).
func (r *run) resolveAtFailure(ctx workflow.Context) {
	p := r.st.PendingCkpt
	if p == nil || (r.st.Status.LastCkpt != nil && r.st.Status.LastCkpt.Step >= p.Step) ||
		workflow.GetVersion(ctx, versionFailResolves, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	r.st.PendingCkpt = nil
	if ref, err := resolveCheckpoint(ctx, *p, impatient); err == nil {
		r.commitCheckpoint(ctx, ref)
	}
}

// setPhase records the phase in the status, the search attributes and the
// workflow's current details shown in the Web UI.
func (r *run) setPhase(ctx workflow.Context, p spec.Phase) {
	s := &r.st.Status
	s.Phase = p
	switch p {
	case spec.PhaseCompleted, spec.PhaseFailed, spec.PhaseCancelled:
		// What only a live run says — what it waits for and until when, a
		// pause or node count asked for — is not its end's (a run
		// cancelled while waiting said so ever after).
		s.Detail, s.WaitUntil, s.PauseRequested, s.PendingNodes = "", time.Time{}, false, 0
	}
	active := 1.0
	if p == spec.PhaseCompleted || p == spec.PhaseFailed || p == spec.PhaseCancelled {
		active = 0
	}
	r.metrics(ctx).Gauge(metricRunActive).Update(active)
	s.UpdatedAt = workflow.Now(ctx)
	r.publish(ctx)
}

// strategyAttr is the run's SearchAttrStrategy.
func (r *run) strategyAttr() string {
	switch {
	case r.spec.IsExternal():
		return "external"
	case r.spec.Strategy == spec.StrategyAuto && r.st.Status.Strategy != nil:
		return fmt.Sprintf("auto dp=%d", r.st.Status.Strategy.DataParallel)
	case r.spec.Strategy == spec.StrategyAuto:
		return "auto"
	}
	return fmt.Sprintf("fixed dp=%d", r.size())
}

func (r *run) publish(ctx workflow.Context) {
	s := &r.st.Status
	err := workflow.UpsertTypedSearchAttributes(ctx,
		temporal.NewSearchAttributeKeyKeyword(spec.SearchAttrModel).ValueSet(s.Model),
		temporal.NewSearchAttributeKeyInt64(spec.SearchAttrNodes).ValueSet(int64(r.size())),
		temporal.NewSearchAttributeKeyInt64(spec.SearchAttrStep).ValueSet(s.Step),
		temporal.NewSearchAttributeKeyKeyword(spec.SearchAttrStatus).ValueSet(string(s.Phase)),
		temporal.NewSearchAttributeKeyKeyword(spec.SearchAttrStrategy).ValueSet(r.strategyAttr()),
	)
	if err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	r.showDetails(ctx)
}

// showDetails sets the run's current details in the Web UI from its
// status (publish does too). It records no command: code that replays
// older histories may call it where publish would add one.
// grams is a mass of CO2 as the Web UI shows it: whole grams from 100 g,
// else three significant figures (a short run's 0.14 g is not "0 g").
func grams(g float64) string {
	if g >= 100 || g == 0 {
		return strconv.FormatFloat(g, 'f', 0, 64)
	}
	return strconv.FormatFloat(g, 'g', 3, 64)
}

func (r *run) showDetails(ctx workflow.Context) {
	s := &r.st.Status
	loss := "loss not measured yet"
	if s.Loss != 0 {
		loss = fmt.Sprintf("loss %.4g", s.Loss) // (2.2e-07, not 0.0000)
	}
	// (Set at chunk boundaries and phase changes: the status query, and
	// cann-train status, have the step the nodes heartbeat.)
	details := fmt.Sprintf(
		"**%s** · step %d/%d at the last chunk boundary · %s · generation %d · nodes %v · checkpoints %d · recoveries %d",
		s.Phase, s.Step, s.TotalSteps, loss, s.Generation, s.Nodes, s.Checkpoints, len(s.Recoveries))
	if s.Detail != "" {
		details += "\n\n" + s.Detail
	}
	if f := s.CheckpointFailed; f != nil {
		details += fmt.Sprintf("\n\n**the checkpoint at step %d could not be stored** (none since): %s", f.Step, f.Error)
	}
	if g := s.Green; g != nil {
		details += fmt.Sprintf("\n\ncarbon %s g (%.0f g/kWh, %.3f kWh)", grams(g.Grams), g.GPerKWh, g.KWh)
		if g.BudgetG > 0 {
			details += fmt.Sprintf(" · budget %.0f%% of %.0f g", g.BudgetUsedPct, g.BudgetG)
		}
	}
	workflow.SetCurrentDetails(ctx, details)
}

// newToken draws the run's peer-authentication secret once, recorded in
// history so replays see the same value.
func newToken(ctx workflow.Context) string {
	var tok string
	enc := workflow.SideEffect(ctx, func(workflow.Context) any { return randomHex(32) })
	if err := enc.Get(&tok); err != nil {
		panic(err) // decoding our own string cannot fail
	}
	return tok
}

func itoa(n int) string { return strconv.Itoa(n) }
