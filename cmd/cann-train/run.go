package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

type runOptions struct {
	file      string
	name      string
	wait      bool
	resume    bool
	fresh     bool
	clusterID string
	output    string
	uiURL     string
	// nodesBucket is the node workers' default checkpoint bucket as they
	// registered it (nodesDefaultBucket; "" unknown): a job without a
	// checkpoint_url keeps its checkpoints there (input fills it in).
	nodesBucket string
}

// command is the `cann-train run` that starts this job again ("" without
// a job file): what a resume hint gives, --resume appended.
func (o runOptions) command() string {
	if o.file == "" {
		return ""
	}
	cmd := "cann-train run -f " + shellWord(o.file)
	if o.name != "" {
		cmd += " --name " + shellWord(o.name)
	}
	return cmd
}

// shellWord is s as one shell word: as it is when nothing in it is
// special to a shell, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:+,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func newRunCmd(e *env) *cobra.Command {
	o := runOptions{}
	cmd := &cobra.Command{
		Use:   "run -f job.yaml",
		Short: "Validate a job file and start its TrainingRun workflow",
		Long: `Validates the job file (every problem is reported with its field and line; no
workflow starts unless the file is valid) and starts workflow run/<name>.

Job file fields (all optional but name):
  name, model.kind (mlp-mnist), model.hidden [128], nodes 3, steps 600,
  chunk_steps 100, batch_per_rank 32, learning_rate 0.002, seed 1,
  ranks_per_node 1 (ranks, one per device, each node trains: 1..64),
  checkpoint_url (file:///…, s3://…, gs://…, azblob://…: a bucket every
    node reaches; unset: each node worker's --checkpoint-url),
  checkpoint_every (chunk_steps; smaller: chunks end where one is due),
  keep_checkpoints 8 (the newest kept in storage), keep_every (0; N: every
    checkpoint at a multiple of N kept besides),
  max_restarts 5 (0: no restarts, the first failure fails the run),
  node_wait 2m,
  heartbeat_timeout 10s, chunks_per_run 50, min_nodes (nodes; fewer: the run
    starts once that many are free and goes on with as few after a
    failure, growing back to nodes as more come free),
  cancel_grace 1m (how long a cancel waits for the checkpoint the chunk
    in flight, or an external job, is asked to end at),
  collective ring|hd|rd|tree|hier|auto, topology_scan false, strategy
    fixed|auto (auto: train on the data-parallel degree the cost model
    predicts fastest, from the scanned links and measured computation:
    min_nodes..nodes, or 1..nodes with min_nodes left at nodes, the plan's
    size then the run's min_nodes),
  slow_node report|replace|drain (a node computing slow_node_factor 1.5×
    its peers' time slow_node_chunks 3 chunks in a row: named in the status;
    replace: the run also moves off it to a free node, leaving it in the
    pool; drain: also drained, the run moves off it),
  data_sha256 (the data set's fingerprint, as a run's status shows it: nodes
    holding other data are replaced; none holding it fails the run),
  optimizer adam|onebit-adam, freeze_step (1.5 % of steps; onebit-adam)
  compression (optional): codec auto|none|topk:RATIO|sign|int8 (auto;
    sign with onebit-adam), exchange twophase|allgather, warmup_steps
    (2 % of steps; adam), warmup_codec none (onebit-adam)
  overlap (optional): bucket_kib 25600, first_bucket_kib 1024
  green (optional): trace FILE | provider electricitymaps|carbon-aware-sdk|uk,
    zone, column (direct|lca), trace_start T, provider_url, forecast
    (persistence|seasonal|perfect), planner (online: the observed
    present, then the forecast corrected by its past errors | replan),
    deadline 48h, interruptible, min_slot, work, budget_g, node_watts 300,
    pue 1, batch (optional: threshold_g, the intensity
    above 1.3× of which the global batch shrinks ×0.75 and below 0.7× of
    which it grows ×1.25, within min and max: half and twice the batch)
  external (optional; runs your own script instead of the built-in model):
    launcher torchrun|ascend|msrun, entrypoint [argv…], procs_per_node 1,
    env {KEY: value}, workdir (job file's directory), checkpoint_dir
    (unset: under the node worker's --work-dir; relative: to workdir;
    emptied before every launch, so private to one node worker, new or
    empty, not the workdir or above it), master_port (0: free port),
    stop_grace 10s, meter_every (how often the nodes' energy meters are
    read; 0: 3m per node), request_lead 1s (how far ahead of rank 0 a
    checkpoint the run asks for, e.g. for a pause, is set). With external,
    steps is the script's total (optional, for progress), checkpoint_every
    is what cann_train.should_checkpoint() follows (100), and the built-in
    fields (model.hidden, chunk_steps, batch_per_rank, learning_rate, seed,
    collective, topology_scan, strategy, optimizer, freeze_step,
    compression, overlap) are errors. See examples/torch-ddp/.`,
		Example: `  cann-train run -f examples/mnist.yaml --wait
  cann-train run -f examples/mnist-onebit.yaml --wait
  cann-train run -f examples/torch-ddp/job.yaml --wait
  temporal workflow describe --workflow-id run/mnist-demo`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "text", "json", "jsonl"); err != nil {
				return err
			}
			s, err := spec.LoadFile(o.file)
			if err != nil {
				return err
			}
			// What the nodes' storage driver would refuse at the first
			// chunk (an s3:// URL's misspelt parameter), refused here.
			if err := checkpoint.CheckURL(cmd.Context(), s.CheckpointURL); err != nil {
				return fmt.Errorf("%s: checkpoint_url: %w", o.file, err)
			}
			if o.name != "" {
				s.Name = o.name
				if err := s.Validate(); err != nil {
					return fmt.Errorf("--name: %w", err)
				}
			}
			// Relative paths (an external job's workdir, a green trace)
			// are the job file's.
			if s, err = s.WithJobDir(filepath.Dir(o.file)); err != nil {
				return err
			}
			// A trace this host cannot open may be on the control worker's
			// host — unless Temporal runs here (a dev server, a quickstart):
			// then it is a typo, refused.
			local := loopbackAddress(e.address)
			if g := s.Green; g != nil && g.Trace != "" && !filepath.IsAbs(g.Trace) && !local {
				fmt.Fprintf(e.err, "(green.trace %s is not next to the job file here: the control worker reads it from its own directory)\n", g.Trace)
			} else if note, err := checkGreenTrace(s.Green, time.Now(), local); err != nil {
				return err
			} else if note != "" {
				fmt.Fprintln(e.err, note)
			}
			log, err := e.logger()
			if err != nil {
				return err
			}
			co, err := e.clientOptions(log)
			if err != nil {
				return err
			}
			c, err := workers.Dial(cmd.Context(), co)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := o.input(cmd.Context(), c, s, e.err)
			if err != nil {
				return err
			}
			// What the nodes are now, said once the run started (a start
			// refused — a run of that name still going — needs no note).
			var notes []string
			rctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			if reg, err := readRegistry(rctx, c, o.clusterID); err == nil {
				var w string
				switch {
				case s.IsExternal():
				case s.DataSHA256 != "":
					w = pinWarning(reg, s.DataSHA256)
				default:
					w = mixedWarning(reg, s.Nodes)
				}
				notes = []string{fewNote(reg, time.Now(), s.Nodes, s.NodeWait.D()), w}
			}
			cancel()
			id, err := startRunInput(cmd.Context(), c, in)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.err, "started %s\n", id)
			for _, line := range notes {
				if line != "" {
					fmt.Fprintln(e.err, line)
				}
			}
			if !o.wait {
				// Where to follow it (stderr: stdout is the ID alone, for scripts).
				follow := fmt.Sprintf("follow it with `cann-train watch %s`", strings.TrimPrefix(id, spec.RunIDPrefix))
				if ui := e.uiLink(o.uiURL); ui != "" {
					follow += ", or in the Web UI: " + workflowURL(ui, e.namespace, id)
				}
				fmt.Fprintln(e.err, follow)
				fmt.Fprintln(e.out, id)
				return nil
			}
			before := in.Resume // (its status carries over where the run resumes from its checkpoint)
			if before != nil && before.LastCkpt == nil {
				before = nil
			}
			st, err := watchRun(cmd.Context(), c, id, e.err, o.output == "jsonl", before)
			if ended := (*runEnded)(nil); errors.As(err, &ended) && st.RunID != "" && o.output != "jsonl" {
				// A run that failed or was cancelled: its status too (where
				// it stopped, its checkpoints, its recoveries; -o json a
				// script can read), then why.
				if perr := printStatusOf(e.out, st, o.output, e.uiLink(o.uiURL), e.namespace, o.command()); perr != nil {
					return perr
				}
				return err
			}
			if err != nil {
				return err
			}
			return printStatus(e.out, st, o.output, e.uiLink(o.uiURL), e.namespace)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "job file (YAML)")
	f.StringVar(&o.name, "name", "", "run under this name instead of the job file's (one job file, several runs side by side)")
	f.BoolVar(&o.wait, "wait", false, "watch the run until it ends")
	f.StringVar(&o.clusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow that owns the nodes")
	f.StringVarP(&o.output, "output", "o", "text", "output with --wait: text, json or jsonl (progress lines)")
	addUIFlag(f, &o.uiURL)
	f.BoolVar(&o.resume, "resume", false, "continue the earlier run of this name (ended: failed, cancelled, terminated or completed) from its last checkpoint")
	f.BoolVar(&o.fresh, "fresh", false, "start over from step 0 although an earlier run of this name left checkpoints (deleting them from its bucket)")
	cmd.MarkFlagsMutuallyExclusive("resume", "fresh")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// input is the run to start for job s: fresh, or continuing the earlier
// run of its name with --resume. Without either flag an earlier run that
// left checkpoints is an error naming both ways, not a silent start over
// its checkpoints.
func (o runOptions) input(ctx context.Context, c client.Client, s spec.RunSpec, say io.Writer) (workflows.RunInput, error) {
	in := workflows.RunInput{Spec: s, ClusterID: o.clusterID}
	id := spec.RunIDPrefix + s.Name
	prev, prevSpec, err := earlierRun(ctx, c, id)
	if (s.CheckpointURL == "" || prev != nil && prevSpec.CheckpointURL == "") && o.nodesBucket == "" && !errors.Is(err, errRunGoing) {
		// Where the nodes keep the checkpoints of a job naming no bucket
		// (this one, or the earlier run of its name).
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if reg, rerr := readRegistry(rctx, c, o.clusterID); rerr == nil {
			var warn string
			o.nodesBucket, warn = nodesDefaultBucket(reg, time.Now())
			if warn != "" {
				fmt.Fprintln(say, warn)
			}
		}
		cancel()
	}
	if o.fresh {
		clearEarlier(ctx, s, o.nodesBucket, prev, err, say)
		return in, nil
	}
	switch {
	case errors.Is(err, errRunGoing) && o.resume:
		return in, fmt.Errorf("--resume: run %s has not ended (a cancel takes a moment: `cann-train cancel %s --wait`, then --resume)", id, s.Name)
	case errors.Is(err, errRunGoing):
		return in, nil // (the start says it is going)
	case err != nil:
		return in, err
	case prev == nil && o.resume:
		return o.resumeFromBucket(ctx, in, say)
	case prev == nil:
		// The server may have forgotten a run its bucket remembers.
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second) // (every new name asks)
		defer cancel()
		url := jobBucket(s, o.nodesBucket)
		if refs, err := earlierCheckpoints(lctx, url, s.Name, math.MaxInt64); err == nil && len(refs) > 0 {
			return in, fmt.Errorf("the server knows no run named %s, but %s holds its checkpoints up to step %d: --resume continues from them, --fresh deletes them and starts over from step 0, or give the job another name",
				s.Name, checkpoint.Redact(url), refs[len(refs)-1].Step)
		}
		return in, nil // (a bucket this host cannot read is the nodes' business)
	}
	// The run ended. Its bucket may hold checkpoints of it past the last
	// its history records: uploads that finished as it ended.
	url := jobBucket(prevSpec, o.nodesBucket)
	if prev.LastCkpt != nil {
		url = prev.LastCkpt.URL
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, listErr := bucketCheckpoints(lctx, url, s.Name)
	recorded, last := prev.LastCkpt, prev.LastCkpt
	later := ownLater(stored, *prev)
	if n := len(later); n > 0 {
		ref := activities.FromStoreRef(url, later[n-1])
		last = &ref
	}
	// The last checkpoint the history records may be gone from the bucket
	// or unreadable there (its manifest deleted, damaged): resumed from
	// it, every node would fail to find it, be blamed for not reaching the
	// bucket, and the restarts run out. The newest readable one before it
	// is where the run's lineage goes on.
	var unreadable *spec.CheckpointRef
	if listErr == nil && last != nil && o.resume && !slices.ContainsFunc(stored, func(r checkpoint.Ref) bool { return r.Step == last.Step }) {
		unreadable = last
		last = nil
		for _, r := range slices.Backward(stored) {
			if r.Step < unreadable.Step {
				ref := activities.FromStoreRef(url, r)
				last, recorded = &ref, &ref
				break
			}
		}
		if last == nil {
			return in, fmt.Errorf("--resume: run %s's last checkpoint (step %d) is not readable in %s, nor is any earlier one (`cann-train checkpoint verify %s` says why): --fresh starts it over",
				id, unreadable.Step, checkpoint.Redact(url), s.Name)
		}
	}
	switch {
	case last == nil && !o.resume:
		return in, nil
	case !o.resume:
		return in, fmt.Errorf("run %s ran before (%s at step %d; its last checkpoint is at step %d): --resume continues from that checkpoint, --fresh deletes its checkpoints and starts over from step 0, or give the job another name",
			id, prev.Phase, max(prev.Step, last.Step), last.Step)
	case last == nil:
		return in, fmt.Errorf("--resume: run %s (%s at step %d) stored no checkpoint; --fresh starts it over", id, prev.Phase, prev.Step)
	case last.Step >= s.Steps:
		return in, fmt.Errorf("--resume: run %s's last checkpoint is at step %d and the job has %d steps: nothing left to train (raise steps)", id, last.Step, s.Steps)
	}
	resumed, conflicts, note := resumeOf(s, prevSpec, *prev)
	if len(conflicts) > 0 {
		return in, fmt.Errorf("--resume: this job cannot continue run %s's checkpoint: %s", id, strings.Join(conflicts, "; "))
	}
	if note != "" {
		fmt.Fprintln(say, note)
	}
	from := *prev
	from.LastCkpt, from.Step = last, max(prev.Step, last.Step)
	in.Spec, in.Resume = resumed, &from
	if listErr != nil {
		fmt.Fprintf(say, "(the resumed run knows only the checkpoint at step %d: %v)\n", last.Step, listErr)
	} else {
		// What a corrupt last falls back on: the run's own up to the
		// last recorded, then the later ones.
		for _, r := range stored {
			if recorded != nil && r.Step <= recorded.Step {
				in.ResumeCheckpoints = append(in.ResumeCheckpoints, activities.FromStoreRef(url, r))
			}
		}
		for _, r := range later {
			in.ResumeCheckpoints = append(in.ResumeCheckpoints, activities.FromStoreRef(url, r))
		}
	}
	fmt.Fprintf(say, "resuming %s from its checkpoint at step %d (the earlier run ended %s)\n",
		id, last.Step, endedAs(from.Phase, from.Step, from.Error))
	if unreadable != nil {
		fmt.Fprintf(say, "(its last checkpoint, at step %d, is not readable in %s: its manifest is missing or damaged — `cann-train checkpoint verify %s` says which; the newest readable one before it is at step %d)\n",
			unreadable.Step, checkpoint.Redact(url), s.Name, last.Step)
	}
	if len(later) > 0 {
		recordedAt := "none"
		if recorded != nil {
			recordedAt = fmt.Sprintf("step %d", recorded.Step)
		}
		fmt.Fprintf(say, "(%s holds it, written after the run started, past the last checkpoint its history records (%s): an upload that finished as the run ended, or one a node kept that `cann-train checkpoint store-kept` stored)\n",
			url, recordedAt)
	}
	return in, nil
}

// loopbackAddress: the Temporal frontend host:port addr is on this host
// (localhost, a loopback IP), so the control workers serving it most
// likely are too.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// resumeOf is s set to continue the ended run prev (of spec prevSpec),
// and what in s contradicts it. A run that failed because the checkpoint
// it resumed did not fit its job (RunStatus.CheckpointUnfit) speaks for
// no job: the differences from its spec are not held against s, and note
// says so — the restore checks the checkpoint itself. (Its spec was the
// mistake: held to it, the job that does fit would be refused.)
func resumeOf(s, prevSpec spec.RunSpec, prev spec.RunStatus) (resumed spec.RunSpec, conflicts []string, note string) {
	resumed, conflicts = s.ResumeOf(prevSpec)
	if prev.CheckpointUnfit && len(conflicts) > 0 {
		note = fmt.Sprintf("(the earlier run failed because the checkpoint did not fit its job, so its job is not held against this one: %s; the restore checks the checkpoint)",
			strings.Join(conflicts, "; "))
		conflicts = nil
	}
	if c := s.DataConflict(prev.DataSHA256); c != "" {
		conflicts = append(conflicts, c)
	}
	return resumed, conflicts, note
}

// ownLater are the checkpoints in stored (oldest first) past the last
// one the ended run prev recorded that the run wrote itself: written
// since it started (by the writers' clocks). One past it written before
// is another timeline's — an earlier run of the name that went further,
// which a resumption from an earlier checkpoint left in the bucket —
// and continuing from it would skip steps this run's lineage never
// trained.
func ownLater(stored []checkpoint.Ref, prev spec.RunStatus) []checkpoint.Ref {
	if prev.StartedAt.IsZero() {
		return nil // (which are its own is unknown)
	}
	after := int64(-1)
	if prev.LastCkpt != nil {
		after = prev.LastCkpt.Step
	}
	var out []checkpoint.Ref
	for _, r := range stored {
		if r.Step > after && !r.Created.IsZero() && !r.Created.Before(prev.StartedAt) {
			out = append(out, r)
		}
	}
	return out
}

// resumeFromBucket is --resume for a name the server knows no run of (its
// history deleted, expired, or on another server): the run continues from
// the newest checkpoint of its name in the job's bucket (checkpoint_url,
// else the node workers' default on this host), the ones before it to
// fall back on. The earlier job is unknown here, so what must match
// cannot be checked before the start: a checkpoint that does not fit the
// model fails its restore, and the run with it.
func (o runOptions) resumeFromBucket(ctx context.Context, in workflows.RunInput, say io.Writer) (workflows.RunInput, error) {
	url := jobBucket(in.Spec, o.nodesBucket)
	refs, unreadable, err := readableCheckpoints(ctx, url, in.Spec.Name)
	if err != nil {
		return in, fmt.Errorf("--resume: the server knows no run named %s: %w", in.Spec.Name, err)
	}
	if len(refs) == 0 && len(unreadable) > 0 {
		return in, fmt.Errorf("--resume: the server knows no run named %s, and %s holds no readable checkpoint of it: the manifest at step(s) %s does not read (`cann-train checkpoint verify %s` says why); --fresh starts it over",
			in.Spec.Name, checkpoint.Redact(url), joinSteps(unreadable), in.Spec.Name)
	}
	if len(refs) == 0 {
		return in, fmt.Errorf("--resume: the server knows no run named %s, and %s holds no checkpoint of it (checkpoint_url names the bucket)", in.Spec.Name, checkpoint.Redact(url))
	}
	last := refs[len(refs)-1]
	// Newer checkpoints whose manifest does not read are skipped: said,
	// as the --resume of a run the server knows says it.
	skipped := slices.DeleteFunc(unreadable, func(step int64) bool { return step < last.Step })
	if last.Step >= in.Spec.Steps {
		return in, fmt.Errorf("--resume: the newest checkpoint of %s in %s is at step %d and the job has %d steps: nothing left to train (raise steps)", in.Spec.Name, checkpoint.Redact(url), last.Step, in.Spec.Steps)
	}
	id := spec.RunIDPrefix + in.Spec.Name
	checked := "this job must be the one that wrote them — same model, seed and global batch"
	switch prev, err := storedJob(ctx, url, in.Spec.Name); {
	case errors.Is(err, checkpoint.ErrNotFound):
		// written before jobs were stored with their checkpoints
	case err != nil:
		fmt.Fprintf(say, "(the job stored with the checkpoints is unreadable, so this job cannot be checked against it: %v)\n", err)
	default:
		resumed, conflicts := in.Spec.ResumeOf(prev)
		if len(conflicts) > 0 {
			return in, fmt.Errorf("--resume: this job cannot continue the checkpoints of %s in %s: %s", in.Spec.Name, checkpoint.Redact(url), strings.Join(conflicts, "; "))
		}
		in.Spec = resumed
		checked = "the job stored with them agrees with this one"
	}
	in.Resume = &spec.RunStatus{RunID: id, Phase: phaseUnknown, Step: last.Step, LastCkpt: &last, Checkpoints: len(refs)}
	in.ResumeCheckpoints = refs
	fmt.Fprintf(say, "resuming %s from the newest of its %d checkpoint(s) in %s, at step %d (the server knows no earlier run of this name; %s)\n",
		id, len(refs), checkpoint.Redact(url), last.Step, checked)
	if len(skipped) > 0 {
		fmt.Fprintf(say, "(its newer checkpoint(s) at step(s) %s are not readable in %s: the manifest is damaged — `cann-train checkpoint verify %s` says which; the newest readable one is at step %d)\n",
			joinSteps(skipped), checkpoint.Redact(url), in.Spec.Name, last.Step)
	}
	return in, nil
}

// storedJob reads the job a run stored next to its checkpoints
// (spec.JobKey); checkpoint.ErrNotFound when there is none.
func storedJob(ctx context.Context, url, run string) (spec.RunSpec, error) {
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		return spec.RunSpec{}, err
	}
	defer store.Close()
	return readStoredJob(ctx, store, run)
}

// readStoredJob is storedJob in an open store.
func readStoredJob(ctx context.Context, store *checkpoint.Store, run string) (spec.RunSpec, error) {
	data, err := store.ReadBlob(ctx, spec.JobKey(run), 1<<20)
	if err != nil {
		return spec.RunSpec{}, err
	}
	var s spec.RunSpec
	if err := json.Unmarshal(data, &s); err != nil {
		return spec.RunSpec{}, fmt.Errorf("%s: %w", spec.JobKey(run), err)
	}
	if s.Name != run {
		return spec.RunSpec{}, fmt.Errorf("%s names run %q", spec.JobKey(run), s.Name)
	}
	return s, nil
}

// clearEarlier deletes, for run --fresh, the checkpoints an earlier run
// of job s's name left (prev: its last status, nil when the server knows
// none; prevErr: earlierRun's) in its bucket, so that nothing passes for
// the new run's — not while a run of the name is still going (its start
// is then refused), nor when the server could not say.
// A bucket this host cannot reach is said and left: the new run's
// retention leaves checkpoints past its step alone.
func clearEarlier(ctx context.Context, s spec.RunSpec, nodesBucket string, prev *spec.RunStatus, prevErr error, say io.Writer) {
	var de *describeError
	switch {
	case errors.Is(prevErr, errRunGoing):
		return
	case errors.As(prevErr, &de):
		fmt.Fprintf(say, "--fresh: the earlier checkpoints of %s are left (whether a run of the name is going is unknown: %v)\n", s.Name, prevErr)
		return
	}
	url := jobBucket(s, nodesBucket)
	if prev != nil && prev.LastCkpt != nil {
		url = prev.LastCkpt.URL
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, first, last, err := deleteCheckpoints(lctx, url, s.Name)
	switch {
	case err != nil:
		fmt.Fprintf(say, "--fresh: the earlier checkpoints of %s in %s are left (%d deleted): %v\n", s.Name, checkpoint.Redact(url), n, err)
	case n > 0:
		fmt.Fprintf(say, "--fresh: deleted the %d checkpoint(s) of the earlier run of %s (steps %d–%d) from %s (the chunks they held go with `cann-train checkpoint gc %s`, or the nodes' own collection within the hour)\n",
			n, s.Name, first, last, checkpoint.Redact(url), s.Name)
	}
}

// deleteCheckpoints deletes every checkpoint of run in the bucket at url
// (the chunks they shared stay for `cann-train checkpoint gc`).
func deleteCheckpoints(ctx context.Context, url, run string) (n int, first, last int64, err error) {
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		return 0, 0, 0, err
	}
	defer store.Close()
	refs, err := store.List(ctx, run)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, r := range refs {
		if err := store.Delete(ctx, r); err != nil {
			return n, first, last, err
		}
		if n == 0 {
			first = r.Step
		}
		n, last = n+1, r.Step
	}
	return n, first, last, nil
}

// jobBucket is the bucket of job s's checkpoints as this host names it:
// its checkpoint_url, else the node workers' default bucket (nodes: as
// they registered it, nodesDefaultBucket), else the node workers' default
// on this host.
func jobBucket(s spec.RunSpec, nodes string) string {
	switch {
	case s.CheckpointURL != "":
		return s.CheckpointURL
	case nodes != "":
		return nodes
	}
	return "file://" + filepath.Join(defaultDataDir(), "checkpoints")
}

// nodesDefaultBucket is the default checkpoint bucket the node workers in
// reg registered (spec.Node.CheckpointURL; the live ones at now, where
// any is): where a run without a
// checkpoint_url keeps its checkpoints, on a cluster whose nodes are
// other hosts than this one. "" where none said (workers of an earlier
// build) or they differ — then warn says so: such a run's nodes each save
// to their own, which must be one bucket — or the URL has a password,
// masked in the registry.
func nodesDefaultBucket(reg workflows.Registry, now time.Time) (url, warn string) {
	// The live registrations, where there are any: the registry keeps
	// every node that ever registered, a decommissioned one's old bucket
	// too.
	nodes := reg.Nodes
	if live := slices.DeleteFunc(slices.Clone(nodes), func(r workflows.NodeRecord) bool {
		return r.Failed || now.Sub(r.LastSeen) > cmp.Or(reg.LeaseTTL, workflows.DefaultLeaseTTL)
	}); len(live) > 0 {
		nodes = live
	}
	count := map[string]int{}
	var urls []string
	for _, r := range nodes {
		if u := r.Node.CheckpointURL; u != "" {
			if count[u] == 0 {
				urls = append(urls, u)
			}
			count[u]++
		}
	}
	switch {
	case len(urls) == 0:
		return "", ""
	case len(urls) > 1:
		slices.Sort(urls)
		parts := make([]string, len(urls))
		for i, u := range urls {
			parts[i] = fmt.Sprintf("%s on %d", u, count[u])
		}
		return "", "warning: the node workers' default checkpoint buckets differ (" + strings.Join(parts, ", ") + "): a run without " +
			"checkpoint_url keeps its checkpoints in each node's own, which only works where they are one bucket; name one in the job " +
			"(checkpoint_url). Earlier checkpoints of this name were looked for on this host only"
	case checkpoint.Redact(urls[0]) != urls[0] || strings.Contains(urls[0], "xxxxx"):
		return "", "" // (masked: this host cannot open it from the registry)
	}
	return urls[0], ""
}

// errRunGoing: the run of the name has not ended.
var errRunGoing = errors.New("a run of that name is still going")

// phaseUnknown is how an earlier run the server knows nothing of ended.
const phaseUnknown spec.Phase = "unknown"

// earlierCheckpoints lists run's checkpoints up to step upTo in the bucket
// at url (manifests only; unreadable ones left out), oldest first: what a
// resumed run falls back on should its last be corrupt.
func earlierCheckpoints(ctx context.Context, url, run string, upTo int64) ([]spec.CheckpointRef, error) {
	refs, err := bucketCheckpoints(ctx, url, run)
	if err != nil {
		return nil, err
	}
	var out []spec.CheckpointRef
	for _, r := range refs {
		if r.Step <= upTo {
			out = append(out, activities.FromStoreRef(url, r))
		}
	}
	return out, nil
}

// bucketCheckpoints lists run's checkpoints in the bucket at url whose
// manifests are readable, oldest first.
func bucketCheckpoints(ctx context.Context, url, run string) ([]checkpoint.Ref, error) {
	refs, err := listCheckpoints(ctx, url, run)
	return slices.DeleteFunc(refs, func(r checkpoint.Ref) bool { return r.SHA256 == "" }), err
}

// readableCheckpoints lists run's checkpoints in the bucket at url as
// earlierCheckpoints does (readable manifests, oldest first) and the steps
// of those whose manifest does not read, which it leaves out.
func readableCheckpoints(ctx context.Context, url, run string) (readable []spec.CheckpointRef, unreadable []int64, err error) {
	refs, err := listCheckpoints(ctx, url, run)
	for _, r := range refs {
		if r.SHA256 == "" {
			unreadable = append(unreadable, r.Step)
		} else {
			readable = append(readable, activities.FromStoreRef(url, r))
		}
	}
	return readable, unreadable, err
}

// listCheckpoints lists all of run's checkpoints in the bucket at url,
// oldest first (an unreadable manifest's with no SHA256).
func listCheckpoints(ctx context.Context, url, run string) ([]checkpoint.Ref, error) {
	store, err := checkpoint.Open(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("the bucket %s cannot be opened from here: %w", checkpoint.Redact(url), err)
	}
	defer store.Close()
	refs, err := store.List(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("the bucket %s cannot be listed from here: %w", checkpoint.Redact(url), err)
	}
	return refs, nil
}

// earlierRun is the last status and the spec of the ended run with
// workflow ID id (nil when there is none); errRunGoing when a run of
// that ID has not ended (a cancel may still be winding it down), a
// *describeError when the server did not answer.
func earlierRun(ctx context.Context, c client.Client, id string) (*spec.RunStatus, spec.RunSpec, error) {
	st, _, _, closed, err := readLive(ctx, c, id)
	var nf *serviceerror.NotFound
	var de *describeError
	switch {
	case errors.As(err, &nf):
		return nil, spec.RunSpec{}, nil
	case errors.As(err, &de):
		return nil, spec.RunSpec{}, err // the server did not answer
	case !closed:
		return nil, spec.RunSpec{}, errRunGoing
	}
	if st.RunID == "" {
		return nil, spec.RunSpec{}, fmt.Errorf("run %s ran before, and its last status is unreadable (%v): start a control worker to read it, or pass --fresh to start over", id, err)
	}
	// (A terminated or timed-out run's phase is Temporal's word for how it
	// closed: readLive.)
	in, err := runInput(ctx, c, id)
	if err != nil {
		return nil, spec.RunSpec{}, err
	}
	return &st, in.Spec, nil
}

// runInput is the input of the latest execution of workflow id (a
// TrainingRun): the job it runs.
func runInput(ctx context.Context, c client.Client, id string) (workflows.RunInput, error) {
	var in workflows.RunInput
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return in, fmt.Errorf("run %s: empty history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return in, fmt.Errorf("run %s's history: %w", id, err)
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		return in, fmt.Errorf("run %s's input: %w", id, err)
	}
	return in, nil
}

// startRun starts TrainingRun with ID run/<name>; a run of that name that
// is still going is an error, not a second run.
// faults are fault injections the run starts with (quickstart --inject,
// bench recovery); `cann-train fault kill` adds them to a running run.
func startRunWith(ctx context.Context, c client.Client, s spec.RunSpec, clusterID string, faults ...spec.InjectFault) (string, error) {
	return startRunInput(ctx, c, workflows.RunInput{Spec: s, ClusterID: clusterID, Faults: faults})
}

// startRunInput is startRunWith with the whole input (a resumed run's).
func startRunInput(ctx context.Context, c client.Client, in workflows.RunInput) (string, error) {
	id := spec.RunIDPrefix + in.Spec.Name
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                spec.ControlTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Without this the SDK hands back the running run as if started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, spec.WorkflowTrainingRun, in)
	var running *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &running) {
		return "", fmt.Errorf("start %s: a run of that name is still going (follow it with `cann-train watch %s`, or give this one another name: --name): %w", id, in.Spec.Name, err)
	}
	if err != nil {
		return "", fmt.Errorf("start %s: %w", id, err)
	}
	return id, nil
}

func checkOutput(got string, allowed ...string) error {
	for _, a := range allowed {
		if got == a {
			return nil
		}
	}
	return fmt.Errorf("unknown output format %q (allowed: %s)", got, strings.Join(allowed, ", "))
}

// fewNote says, before a job starts, that fewer nodes are free than it
// asks for (as `cann-train nodes` judges them): the run waits up to its
// node_wait for the others, then fails. "" when enough are free or none
// is registered (a cluster starting up).
func fewNote(reg workflows.Registry, now time.Time, nodes int, wait time.Duration) string {
	free := 0
	for _, r := range nodeRows(reg, now) {
		if r.State == "free" {
			free++
		}
	}
	if free >= nodes || len(reg.Nodes) == 0 {
		return ""
	}
	are := "are"
	if free == 1 {
		are = "is"
	}
	return fmt.Sprintf("note: the job asks for %d node(s) and %d %s free now (%d registered; 'cann-train nodes' lists them): "+
		"the run waits up to its node_wait (%s) for the others, then fails", nodes, free, are, len(reg.Nodes), wait)
}

// mixedWarning says, before a job that does not pin its data set starts,
// that the usable node workers in the registry hold several data sets
// and none is on as many nodes as the job needs: its first chunk will
// drop the nodes of the others (or fail with no majority). "" when one
// set (with the nodes that have not said which they hold) can fill it.
func mixedWarning(reg workflows.Registry, nodes int) string {
	held := map[string]int{}
	unknown := 0
	for _, r := range reg.Nodes {
		switch {
		case r.Failed || r.Drained:
		case r.Node.DataSHA256 == "":
			unknown++
		default:
			held[r.Node.DataSHA256]++
		}
	}
	most := 0
	for _, n := range held {
		most = max(most, n)
	}
	if len(held) < 2 || most+unknown >= nodes {
		return ""
	}
	return fmt.Sprintf("warning: the node workers hold %d data sets (%s) and none is on the %d nodes the job needs: "+
		"its first chunk replaces the nodes whose data most do not hold, or fails where no majority holds one "+
		"(pin the run's with data_sha256, or give the workers the same files)", len(held), dataCounts(held), nodes)
}

// dataCounts lists data sets and their nodes: "ac2983e23822… on 3, …".
func dataCounts(held map[string]int) string {
	sums := slices.Sorted(maps.Keys(held))
	parts := make([]string, len(sums))
	for i, h := range sums {
		parts[i] = fmt.Sprintf("%s… on %d", spec.ShortSHA256(h), held[h])
	}
	return strings.Join(parts, ", ")
}

// pinWarning says, before a job that pins its data set (sum) starts,
// that no node worker in the registry holds it, and what they hold
// instead: the run would fail at its first chunk unless a node holding
// it registers. "" when a usable (neither failed nor drained) node holds
// it or has not said (a worker from before nodes said), or when no node
// is registered at all.
func pinWarning(reg workflows.Registry, sum string) string {
	held := map[string]int{}
	for _, r := range reg.Nodes {
		if r.Failed || r.Drained {
			continue
		}
		if r.Node.DataSHA256 == "" || r.Node.DataSHA256 == sum {
			return ""
		}
		held[r.Node.DataSHA256]++
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf("warning: no registered node worker holds the data set the job pins (data_sha256 %s…); they hold %s: "+
		"the run fails at its first chunk unless a node holding it registers (`cann-train nodes` shows each node's)",
		spec.ShortSHA256(sum), dataCounts(held))
}
