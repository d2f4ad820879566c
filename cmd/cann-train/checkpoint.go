package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
)

func newCheckpointCmd(e *env) *cobra.Command {
	var url, output string
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "List, verify and garbage-collect a run's checkpoints in blob storage",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&url, "url", "file://"+filepath.Join(defaultDataDir(), "checkpoints"), "checkpoint bucket URL (unset: the bucket of the run's last checkpoint, if Temporal answers; else this)")
	pf.StringVarP(&output, "output", "o", "text", "text or json")

	// bucket settles url: --url if given, else the bucket of the run's
	// last checkpoint as its status says (when Temporal answers), else
	// the default.
	bucket := func(cmd *cobra.Command, ask *temporalAsk, arg string) {
		if cmd.Flags().Changed("url") {
			return
		}
		if u := runBucket(cmd.Context(), ask, runName(arg)); u != "" {
			url = u
			fmt.Fprintf(e.err, "bucket %s (run/%s's last checkpoint; --url overrides)\n", url, runName(arg))
		}
	}
	// openRun checks the output format, opens the bucket (asking ask
	// where it is) and lists the run.
	openRun := func(cmd *cobra.Command, ask *temporalAsk, arg string) (*checkpoint.Store, []checkpoint.Ref, error) {
		if err := checkOutput(output, "text", "json"); err != nil {
			return nil, nil, err
		}
		bucket(cmd, ask, arg)
		if spec.MemoryBucket(url) {
			return nil, nil, fmt.Errorf("bucket %s is the memory of the process that wrote it: another process (this command) cannot read it", url)
		}
		if err := spec.CheckBucketURL(url); err != nil {
			return nil, nil, fmt.Errorf("--url: %w", err)
		}
		store, err := checkpoint.Open(cmd.Context(), url)
		if err != nil {
			return nil, nil, err
		}
		refs, err := store.List(cmd.Context(), runName(arg))
		if err != nil {
			store.Close()
			return nil, nil, err
		}
		return store, refs, nil
	}
	ls := &cobra.Command{
		Use:     "ls RUN",
		Aliases: []string{"list"},
		Short:   "List a run's checkpoints, oldest first",
		Example: `  cann-train checkpoint ls mnist-demo --url file:///tmp/ckpt`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ask := &temporalAsk{e: e}
			defer ask.Close()
			store, refs, err := openRun(cmd, ask, args[0])
			if err != nil {
				return err
			}
			defer store.Close()
			if output == "json" {
				return json.NewEncoder(e.out).Encode(refs)
			}
			if len(refs) == 0 {
				fmt.Fprintf(e.err, "no checkpoints of run %q in %s (--url names the bucket its nodes write to)\n", runName(args[0]), url)
				return nil
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STEP\tBYTES\tCREATED (UTC)\tSHA256\tMANIFEST")
			for _, r := range refs {
				created := "unreadable"
				if r.SHA256 != "" {
					created = r.Created.UTC().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%d\t%d\t%s\t%.16s\t%s\n", r.Step, r.Bytes, created, r.SHA256, r.Key)
			}
			return tw.Flush()
		},
	}
	verify := &cobra.Command{
		Use:   "verify RUN",
		Short: "Check every checkpoint's hash and decode its state; name the bad ones",
		Long: `Reads every checkpoint of RUN, checks its size and SHA-256 against its
manifest and decodes the training state (an external job's: its checkpoint
directory's layout, every file inside the payload). Exits non-zero if any is
bad, naming the object and what is wrong with it.`,
		Example: `  cann-train checkpoint verify mnist-demo --url file:///tmp/ckpt`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ask := &temporalAsk{e: e}
			defer ask.Close()
			store, refs, err := openRun(cmd, ask, args[0])
			if err != nil {
				return err
			}
			defer store.Close()
			if len(refs) == 0 {
				return fmt.Errorf("no checkpoints of run %q in %s", runName(args[0]), url)
			}
			type verdict struct {
				Step    int64  `json:"step"`
				Key     string `json:"key"`
				OK      bool   `json:"ok"`
				Problem string `json:"problem,omitempty"`
			}
			var out []verdict
			bad := 0
			for _, r := range refs {
				v := verdict{Step: r.Step, Key: r.Key, OK: true}
				payload, err := store.Load(cmd.Context(), r)
				if err == nil && launch.IsPackedDir(payload) {
					// An external job's checkpoint directory: its layout,
					// not a state of the built-in engine.
					if _, derr := launch.CheckPacked(payload); derr != nil {
						err = fmt.Errorf("checkpoint directory does not unpack: %w", derr)
					}
				} else if err == nil {
					var st engine.State
					if derr := st.UnmarshalBinary(payload); derr != nil {
						err = fmt.Errorf("state does not decode: %w", derr)
					} else if st.Step != r.Step {
						err = fmt.Errorf("state is at step %d, manifest says %d", st.Step, r.Step)
					}
				}
				var ce *checkpoint.CorruptError
				switch {
				case err == nil:
				case errors.As(err, &ce):
					v.OK, v.Problem, v.Key = false, ce.Reason, ce.Key
				default:
					v.OK, v.Problem = false, err.Error()
				}
				if !v.OK {
					bad++
				}
				out = append(out, v)
			}
			if output == "json" {
				if err := json.NewEncoder(e.out).Encode(out); err != nil {
					return err
				}
			} else {
				for _, v := range out {
					if v.OK {
						fmt.Fprintf(e.out, "ok       step %d  %s\n", v.Step, v.Key)
					} else {
						fmt.Fprintf(e.out, "CORRUPT  step %d  %s: %s\n", v.Step, v.Key, v.Problem)
					}
				}
			}
			if bad > 0 {
				return &exitError{fmt.Errorf("%d of %d checkpoint(s) bad", bad, len(out))}
			}
			return nil
		},
	}
	var keepLast int
	var keepEvery int64
	var grace time.Duration
	gc := &cobra.Command{
		Use:   "gc RUN",
		Short: "Delete old checkpoints (retention) and the chunks no checkpoint references",
		Long: `Keeps the newest --keep-last checkpoints of RUN and every checkpoint whose step
is a multiple of --keep-every (0: none), deletes the others, then deletes the
content-addressed chunks that no remaining manifest references (chunks
younger than the grace period are spared, as a save in flight may use them).
Run it while nothing else saves RUN, or let the run's own retention do it: the
node that saves a run's checkpoints keeps the newest 8 and collects the chunks
they left once older than its --checkpoint-gc-grace (an hour by default).`,
		Example: `  cann-train checkpoint gc mnist-demo --keep-last 3 --keep-every 1000 --url file:///tmp/ckpt`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ask := &temporalAsk{e: e}
			defer ask.Close()
			bucket(cmd, ask, args[0])
			opts := checkpoint.Options{GCGrace: grace}
			if grace == 0 {
				opts.GCGrace = -1 // none
				if err := refuseLiveRun(cmd.Context(), ask, runName(args[0])); err != nil {
					return err
				}
			}
			store, err := checkpoint.OpenWithOptions(cmd.Context(), url, opts)
			if err != nil {
				return err
			}
			defer store.Close()
			refs, err := store.List(cmd.Context(), runName(args[0]))
			if err != nil {
				return err
			}
			if len(refs) == 0 {
				return fmt.Errorf("no checkpoints of run %q in %s", runName(args[0]), url)
			}
			deleted, err := store.Retain(cmd.Context(), runName(args[0]), keepLast, keepEvery)
			if err != nil {
				return fmt.Errorf("retention (%d checkpoint(s) deleted before the error): %w", len(deleted), err)
			}
			st, err := store.GC(cmd.Context(), runName(args[0]))
			if err != nil {
				return fmt.Errorf("chunk GC: %w", err)
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(struct {
					Deleted []checkpoint.Ref   `json:"deleted_checkpoints"`
					Kept    int                `json:"kept_checkpoints"`
					Chunks  checkpoint.GCStats `json:"chunks"`
				}{deleted, len(refs) - len(deleted), st})
			}
			for _, r := range deleted {
				fmt.Fprintf(e.out, "deleted  step %d  %s\n", r.Step, r.Key)
			}
			fmt.Fprintf(e.out, "kept %d checkpoint(s), deleted %d; chunks: %d found, %d referenced, %d young kept, %d deleted (%d bytes), %d orphan payload(s) deleted\n",
				len(refs)-len(deleted), len(deleted), st.Chunks, st.Referenced, st.Young, st.Deleted, st.DeletedBytes, st.Orphans)
			return nil
		},
	}
	gc.Flags().IntVar(&keepLast, "keep-last", 3, "keep this many newest checkpoints (>= 1)")
	gc.Flags().Int64Var(&keepEvery, "keep-every", 0, "also keep checkpoints whose step is a multiple of this (0: none)")
	gc.Flags().DurationVar(&grace, "grace", checkpoint.DefaultGCGrace, "spare unreferenced chunks younger than this (0: none; refused while the run's workflow runs)")
	atLeast(gc.Flags(), "1", "keep-last")
	atLeast(gc.Flags(), "0", "keep-every", "grace")
	storeKept := &cobra.Command{
		Use:   "store-kept RUN FILE",
		Short: "Store a checkpoint a node kept when the bucket refused it; `run --resume` then continues from it",
		Long: `An external job's first node keeps the checkpoint directory of an upload the
bucket refused (<work dir>/kept/<run>/step-<step>-<sha256>.pack) while the run
holds for its storage. A run cancelled before the bucket took it again says
where the file is. Once the bucket takes writes, this stores FILE as RUN's
checkpoint at its step (its bytes checked against the hash in its name), and
` + "`cann-train run JOB --resume`" + ` continues from it. Refused while RUN's workflow
runs (` + "`cann-train resume`" + ` has its node store it), when the bucket already
holds a checkpoint of RUN at that step or later, for a file that is not a
packed checkpoint directory, and for a RUN neither Temporal nor the bucket
knows.`,
		Example: `  cann-train checkpoint store-kept llm-pretrain /var/lib/cann-train/node-1/kept/run_llm-pretrain/step-000000001500-3f2a….pack --url s3://ckpt`,
		Args:    wantArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, file := runName(args[0]), args[1]
			step, payload, err := activities.ReadKeptFile(file)
			if err != nil {
				return err
			}
			ask := &temporalAsk{e: e}
			defer ask.Close()
			ended, askErr := askRunEnded(cmd.Context(), ask, run)
			if askErr == nil && ended == "" {
				return fmt.Errorf("run/%s is still running: `cann-train resume %s` has its hold store the checkpoint its node kept now", run, run)
			}
			store, refs, err := openRun(cmd, ask, args[0])
			if err != nil {
				return err
			}
			defer store.Close()
			if askErr == nil && ended == "deleted" && len(refs) == 0 {
				return fmt.Errorf("no run %s here: Temporal has no run/%s and %s holds none of its checkpoints (a typo? `cann-train dashboard` lists the runs)",
					run, run, url)
			}
			if n := len(refs); n > 0 && refs[n-1].Step >= step {
				return fmt.Errorf("%s already holds run %s's checkpoint at step %d, not older than the kept one at step %d: nothing to store",
					url, run, refs[n-1].Step, step)
			}
			ref, _, err := store.SaveIncremental(cmd.Context(), run, step, payload)
			if err != nil {
				return fmt.Errorf("store the checkpoint at step %d in %s: %w", step, url, err)
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(activities.FromStoreRef(url, ref))
			}
			fmt.Fprintf(e.out, "stored run %s's checkpoint at step %d in %s (%s, %d bytes)\n", run, ref.Step, url, ref.Key, ref.Bytes)
			fmt.Fprintf(e.out, "`cann-train run JOB --resume` continues from it; %s can go\n", file)
			return nil
		},
	}
	cmd.AddCommand(ls, verify, gc, storeKept)
	return cmd
}

// temporalAsk asks Temporal about runs for the checkpoint commands, which
// also work offline: it dials once, at its first question, and gives each
// question a few seconds — a Temporal that does not answer costs one
// wait, not one per question.
type temporalAsk struct {
	e       *env
	dialled bool
	c       client.Client
	err     error
}

// askTimeout bounds the dial and each question of a temporalAsk.
const askTimeout = 3 * time.Second

// client dials on first use and returns the client, or why there is none.
func (a *temporalAsk) client(ctx context.Context) (client.Client, error) {
	if !a.dialled {
		ctx, cancel := context.WithTimeout(ctx, askTimeout)
		defer cancel()
		a.c, a.err = dialQuiet(ctx, a.e)
		a.dialled = true
	}
	return a.c, a.err
}

// Close closes the client, if one was dialled.
func (a *temporalAsk) Close() {
	if a.c != nil {
		a.c.Close()
	}
}

// refuseLiveRun refuses a GC without a grace period of a run whose
// workflow still runs (when Temporal answers): a save of its in flight
// may rely on chunks no manifest names yet, which only the grace spares.
func refuseLiveRun(ctx context.Context, ask *temporalAsk, run string) error {
	ended, err := askRunEnded(ctx, ask, run)
	switch {
	case err != nil:
		// Fail closed: a live run's save in flight would lose chunks.
		return fmt.Errorf("--grace 0: could not ask Temporal whether run/%s still runs (%v), and a checkpoint a running run is saving may rely on chunks "+
			"no manifest names yet; keep a grace period (--grace 1s spares only what was written in the last second), or let this host reach Temporal (--address)", run, err)
	case ended == "":
		return fmt.Errorf("--grace 0: run/%s is still running, and a checkpoint it is saving may rely on chunks no manifest names yet; "+
			"keep a grace period (e.g. --grace 1m spares what was written in the last minute) or wait until the run has ended", run)
	}
	return nil
}

// askRunEnded asks Temporal how run's workflow ended ("": it runs).
func askRunEnded(ctx context.Context, ask *temporalAsk, run string) (string, error) {
	c, err := ask.client(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	return activities.RunEnded(ctx, c, spec.RunIDPrefix+run)
}

// runBucket is the bucket URL of run's last checkpoint, from its status on
// Temporal; "" when Temporal does not answer within a few seconds or the
// run has no checkpoint (the commands also work offline, on --url).
func runBucket(ctx context.Context, ask *temporalAsk, run string) string {
	c, err := ask.client(ctx)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	st, _, _, _ := readProgress(ctx, c, spec.RunIDPrefix+run) // a failed or cancelled run's status too
	if st.LastCkpt == nil {
		return ""
	}
	return st.LastCkpt.URL
}
