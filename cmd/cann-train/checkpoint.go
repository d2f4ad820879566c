package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
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
	pf.StringVar(&url, "url", "file://"+filepath.Join(defaultDataDir(), "checkpoints"), "checkpoint bucket URL (unset: the bucket of the run's last checkpoint, else the one its job names, as Temporal says; else this)")
	pf.StringVarP(&output, "output", "o", "text", "text or json")

	// bucket settles url: --url if given, else the bucket of the run's
	// last checkpoint as its status says, else the bucket its job names
	// (a run that has committed no checkpoint yet), else the default —
	// saying on stderr why, when Temporal could not tell: "no
	// checkpoints" in a bucket that is not the run's reads as "gone".
	bucket := func(cmd *cobra.Command, ask *temporalAsk, arg string) {
		if cmd.Flags().Changed("url") {
			return
		}
		run := runName(arg)
		rec, err := ask.record(cmd.Context(), run)
		switch {
		case err != nil:
			fmt.Fprintf(e.err, "could not ask Temporal for run %s's bucket: %v; reading %s (--url names the bucket)\n", run, err, url)
		case rec.last != nil:
			url = rec.last.URL
			fmt.Fprintf(e.err, "bucket %s (run/%s's last checkpoint; --url overrides)\n", url, run)
		case !rec.known:
			fmt.Fprintf(e.err, "Temporal knows no run/%s; reading %s (--url names the bucket)\n", run, url)
		case rec.jobURL != "" && rec.why != nil:
			url = rec.jobURL
			fmt.Fprintf(e.err, "bucket %s (run/%s's job; its status, which names its last checkpoint, could not be read: %v; --url overrides)\n", url, run, rec.why)
		case rec.jobURL != "":
			url = rec.jobURL
			fmt.Fprintf(e.err, "bucket %s (run/%s's job: it has committed no checkpoint yet; --url overrides)\n", url, run)
		case rec.why != nil:
			fmt.Fprintf(e.err, "could not read run/%s's status from Temporal (%v), and its job names no checkpoint_url; reading %s (--url names the bucket)\n", run, rec.why, url)
		default:
			fmt.Fprintf(e.err, "run/%s has committed no checkpoint yet, and its job names no checkpoint_url: its nodes write to their workers' --checkpoint-url, "+
				"which Temporal does not know; reading %s (--url names the bucket; a quickstart's nodes write to %s)\n",
				run, url, "file://"+filepath.Join(defaultDataDir(), "quickstart", "checkpoints"))
		}
	}
	// openRun checks the output format, opens the bucket (asking ask
	// where it is) and lists the run. A read-only command (write false)
	// creates no bucket: a mistyped file:// path is said not to exist,
	// where it used to be created and listed empty ("no checkpoints").
	openRun := func(cmd *cobra.Command, ask *temporalAsk, arg string, write bool) (*checkpoint.Store, []checkpoint.Ref, error) {
		if err := checkOutput(output, "text", "json"); err != nil {
			return nil, nil, err
		}
		bucket(cmd, ask, arg)
		store, err := openBucket(cmd.Context(), url, runName(arg), checkpoint.Options{MustExist: !write})
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
			store, refs, err := openRun(cmd, ask, args[0], false)
			if err != nil {
				return err
			}
			defer store.Close()
			run := runName(args[0])
			if len(refs) == 0 {
				return noCheckpoints(e, output, "[]", run, url)
			}
			// An unreadable manifest is listed with why, not as a
			// checkpoint of 0 bytes.
			type entry struct {
				checkpoint.Ref
				Unreadable string `json:"unreadable,omitempty"`
			}
			entries := make([]entry, len(refs))
			for i, r := range refs {
				entries[i].Ref = r
				if r.SHA256 == "" {
					entries[i].Unreadable = unreadableWhy(cmd.Context(), store, r)
				}
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(entries)
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STEP\tBYTES\tCREATED (UTC)\tSHA256\tMANIFEST")
			for _, r := range entries {
				if r.Unreadable != "" {
					fmt.Fprintf(tw, "%d\t-\tunreadable\t-\t%s (%s)\n", r.Step, r.Key, r.Unreadable)
					continue
				}
				fmt.Fprintf(tw, "%d\t%d\t%s\t%.16s\t%s\n", r.Step, r.Bytes, r.Created.UTC().Format(time.DateTime), r.SHA256, r.Key)
			}
			return tw.Flush()
		},
	}
	verify := &cobra.Command{
		Use:   "verify RUN",
		Short: "Check every checkpoint's hash and decode its state; name the bad ones",
		Long: `Reads every checkpoint of RUN, checks its size and SHA-256 against its
manifest and decodes the training state (an external job's: its checkpoint
directory's layout, every file inside the payload). Checks too that the last
checkpoint RUN's history records (asked of Temporal) is there, with the
SHA-256 recorded: MISSING when its manifest is not, MISMATCH when it holds
another. Exits non-zero if any is bad, naming the object and what is wrong
with it, and how many are bad (last on stdout; on stderr with -o json).
When Temporal cannot be asked, stderr says that the recorded last
checkpoint was not checked.`,
		Example: `  cann-train checkpoint verify mnist-demo --url file:///tmp/ckpt`,
		Args:    wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ask := &temporalAsk{e: e}
			defer ask.Close()
			store, refs, err := openRun(cmd, ask, args[0], false)
			if err != nil {
				return err
			}
			defer store.Close()
			run := runName(args[0])
			recorded, why := recordedLast(cmd.Context(), ask, run, url)
			if why != "" {
				fmt.Fprintf(e.err, "run/%s's recorded last checkpoint was not checked (%s)\n", run, why)
			}
			if len(refs) == 0 && recorded == nil {
				return noCheckpoints(e, output, "[]", run, url)
			}
			type verdict struct {
				Run  string `json:"run"`
				Step int64  `json:"step"`
				Key  string `json:"key"` // the manifest's, always
				OK   bool   `json:"ok"`
				// State: ok, corrupt, missing or mismatch.
				State string `json:"state"`
				// Object: the bad object (the manifest, a payload or a
				// chunk), when one is.
				Object  string `json:"object,omitempty"`
				Problem string `json:"problem,omitempty"`
				// Last: the run's last checkpoint as its history records it.
				Last bool `json:"recorded_last,omitempty"`
			}
			out := []verdict{}
			var bad []int64
			model := builtinModel(cmd.Context(), store, run)
			for _, r := range refs {
				v := verdict{Run: run, Step: r.Step, Key: r.Key, OK: true, State: "ok"}
				if err := checkLoads(cmd.Context(), store, r, model); err != nil {
					v.OK, v.State, v.Problem = false, "corrupt", err.Error()
					var ce *checkpoint.CorruptError
					if errors.As(err, &ce) {
						v.Object, v.Problem = ce.Key, corruptWhy(ce)
					}
				}
				if recorded != nil && r.Step == recorded.Step {
					v.Last = true
					if v.OK && recorded.SHA256 != "" && r.SHA256 != recorded.SHA256 {
						v.OK, v.State, v.Object = false, "mismatch", r.Key
						v.Problem = fmt.Sprintf("sha256 %.16s…, not the %.16s… run/%s's history records for its last checkpoint: another run's checkpoint at this step",
							r.SHA256, recorded.SHA256, run)
					}
				}
				if !v.OK {
					bad = append(bad, v.Step)
				}
				out = append(out, v)
			}
			if recorded != nil && !slices.ContainsFunc(refs, func(r checkpoint.Ref) bool { return r.Step == recorded.Step }) {
				key := recorded.Key
				if key == "" {
					key = checkpoint.ManifestKey(run, recorded.Step)
				}
				v := verdict{Run: run, Step: recorded.Step, Key: key, State: "missing", Object: key, Last: true,
					Problem: fmt.Sprintf("run/%s's last checkpoint as its history records it (sha256 %.16s…), but its manifest is not in %s: `run --resume` falls back to an earlier one",
						run, recorded.SHA256, url)}
				i, _ := slices.BinarySearchFunc(out, v.Step, func(v verdict, step int64) int { return cmp.Compare(v.Step, step) })
				out = slices.Insert(out, i, v)
				bad = append(bad, v.Step)
				slices.Sort(bad)
			}
			if output == "json" {
				if err := json.NewEncoder(e.out).Encode(out); err != nil {
					return err
				}
			} else {
				for _, v := range out {
					problem := v.Problem
					if v.Object != "" && v.Object != v.Key {
						problem = v.Object + ": " + problem
					}
					switch v.State {
					case "ok":
						fmt.Fprintf(e.out, "ok       step %d  %s\n", v.Step, v.Key)
					case "missing":
						fmt.Fprintf(e.out, "MISSING  step %d  %s: %s\n", v.Step, v.Key, problem)
					case "mismatch":
						fmt.Fprintf(e.out, "MISMATCH step %d  %s: %s\n", v.Step, v.Key, problem)
					default:
						fmt.Fprintf(e.out, "CORRUPT  step %d  %s: %s\n", v.Step, v.Key, problem)
					}
				}
			}
			if len(bad) > 0 {
				// main prints nothing for an exitError: the count is
				// said here, after the report on stdout (on stderr with
				// -o json, whose stdout is the JSON document alone).
				err := fmt.Errorf("%d of %d checkpoint(s) bad (step(s) %s)", len(bad), len(out), joinSteps(bad))
				w := e.out
				if output == "json" {
					w = e.err
				}
				fmt.Fprintf(w, "%v\n", err)
				return &exitError{err}
			}
			return nil
		},
	}
	var keepLast int
	var keepEvery int64
	var grace time.Duration
	var dryRun bool
	gc := &cobra.Command{
		Use:   "gc RUN",
		Short: "Delete old checkpoints (retention) and the chunks no checkpoint references",
		Long: `Keeps the newest --keep-last checkpoints of RUN and every checkpoint whose step
is a multiple of --keep-every (0: none), deletes the others, then deletes the
content-addressed chunks that no remaining manifest references (chunks
younger than the grace period are spared, as a save in flight may use them),
and what writers killed mid-write left (temporary files, empty step
directories) once older than the grace period and 10 minutes.
Counting starts at the last checkpoint RUN's history records (asked of
Temporal), which is always kept: checkpoints above it — another timeline's,
an earlier run of the name that went further, uploads the history does not
record — are neither counted nor deleted, and named. When Temporal cannot
say, every checkpoint in the bucket counts, and stderr says so.
Before it deletes anything, gc checks that the chunk collection can run: a
manifest of RUN that does not decode stops it, naming the manifest, with
nothing deleted. When retention would delete checkpoints it loads the kept
ones, newest first, until one loads; when none does, it keeps the newest
one that loads as well, naming the corrupt ones. When the run's recorded
last checkpoint has no manifest in the bucket, no chunk is deleted (which
ones it holds is unknown).
A grace under ` + minLiveGrace.String() + ` is refused while the run's workflow runs, and when
Temporal cannot be asked whether it does.
Run it while nothing else saves RUN, or let the run's own retention do it: the
node that saves a run's checkpoints keeps the newest 8 (the job's
keep_checkpoints) and those at multiples of its keep_every, and collects the
chunks they left once older than its --checkpoint-gc-grace (an hour by
default). Milestones kept here with --keep-every go once the run saves again
unless its job keeps them too (keep_every).
--dry-run says what gc would delete — checkpoints, chunks, leftovers — and
deletes nothing (allowed while the run's workflow runs, whatever the grace).`,
		Example: `  cann-train checkpoint gc mnist-demo --keep-last 3 --dry-run
  cann-train checkpoint gc mnist-demo --keep-last 3 --keep-every 1000 --url file:///tmp/ckpt`,
		Args: wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx := cmd.Context()
			ask := &temporalAsk{e: e}
			defer ask.Close()
			run := runName(args[0])
			bucket(cmd, ask, args[0])
			opts := checkpoint.Options{GCGrace: grace, MustExist: true}
			if grace == 0 {
				opts.GCGrace = -1 // none
			}
			if grace < minLiveGrace && !dryRun {
				if err := refuseLiveRun(ctx, ask, run, grace); err != nil {
					return err
				}
			}
			store, err := openBucket(ctx, url, run, opts)
			if err != nil {
				return err
			}
			defer store.Close()
			refs, err := store.List(ctx, run)
			if err != nil {
				return err
			}
			type problem struct {
				Step    int64  `json:"step"`
				Key     string `json:"key"`
				Problem string `json:"problem"`
			}
			type result struct {
				Deleted   []checkpoint.Ref `json:"deleted_checkpoints"`
				Kept      int              `json:"kept_checkpoints"`
				LastStep  *int64           `json:"recorded_last_step,omitempty"`
				AboveLast []checkpoint.Ref `json:"left_above_last,omitempty"`
				// Unreadable: checkpoints whose manifest does not read
				// (left alone, neither counted nor deleted).
				Unreadable []problem `json:"unreadable,omitempty"`
				// KeptCorrupt: kept checkpoints that do not load, and
				// Spared the newest one that does, kept as well.
				KeptCorrupt []problem          `json:"kept_corrupt,omitempty"`
				Spared      *checkpoint.Ref    `json:"spared,omitempty"`
				Chunks      checkpoint.GCStats `json:"chunks"`
				// ChunksSkipped says why no chunk was collected.
				ChunksSkipped string `json:"chunks_skipped,omitempty"`
				// DryRun: nothing was deleted; Deleted and Chunks say
				// what gc would delete.
				DryRun bool `json:"dry_run,omitempty"`
			}
			res := result{Deleted: []checkpoint.Ref{}, DryRun: dryRun}
			if len(refs) == 0 {
				js, _ := json.Marshal(res)
				return noCheckpoints(e, output, string(js), run, url)
			}
			// Count from the run's last checkpoint, as its history records
			// it: Retain alone counts checkpoints above it (another
			// timeline's, a stale or corrupt one) among the newest, keeps
			// them and deletes the run's own last.
			newest := int64(math.MaxInt64)
			last, why := recordedLast(ctx, ask, run, url)
			switch {
			case last != nil:
				newest = last.Step
				res.LastStep = &last.Step
				if !slices.ContainsFunc(refs, func(r checkpoint.Ref) bool { return r.Step == last.Step }) {
					// Its manifest may come back (a backup, a versioned
					// bucket), pointing at its chunks: which ones those
					// are is unknown, so none is deleted — as for a
					// manifest that does not decode. Retention goes on
					// (it deletes manifests, and chunks only GC does),
					// and so the run's gc is not blocked for good by a
					// manifest that never comes back: the chunks go once
					// the run commits a newer checkpoint.
					res.ChunksSkipped = fmt.Sprintf("run/%s's last checkpoint (step %d), as its history records it, has no manifest in %s, so which chunks it holds is unknown, "+
						"and a manifest restored later (from a backup, a versioned bucket) would point at deleted ones: restore it and run gc again, "+
						"or gc collects them once the run has committed a newer checkpoint (`cann-train run --resume`)", run, last.Step, url)
					fmt.Fprintf(e.err, "run/%s's last checkpoint (step %d) is not in %s (its manifest is missing: `cann-train checkpoint verify %s` names it); "+
						"retention counts from it all the same, and no chunk is deleted\n", run, last.Step, url, run)
				}
			case why != "":
				fmt.Fprintf(e.err, "could not check which checkpoint is run/%s's last (%s): retention counts every checkpoint in %s, one above the run's last too (another timeline's, a stale one)\n",
					run, why, url)
			default:
				fmt.Fprintf(e.err, "run/%s's history records no checkpoint: retention counts every checkpoint in %s\n", run, url)
			}
			// Check before deleting anything that the chunk collection
			// will run: a manifest that does not decode (or a listing
			// that fails) stopped it only after retention had deleted
			// checkpoints.
			if res.ChunksSkipped == "" {
				if err := store.CheckGC(ctx, run); err != nil {
					var ce *checkpoint.CorruptError
					if errors.As(err, &ce) {
						return fmt.Errorf("%w; nothing deleted: `cann-train checkpoint verify %s` names that manifest: "+
							"restore it, or delete it (its checkpoint cannot be loaded either way), then run gc again", err, run)
					}
					return fmt.Errorf("reading run %s's chunks and manifests in %s (nothing deleted): %w", run, url, err)
				}
			}
			keep, err := checkpoint.RetentionPlan(refs, newest, keepLast, keepEvery)
			if err != nil {
				return err
			}
			good, spared, corrupt, err := keepOneThatLoads(ctx, store, refs, keep, newest, builtinModel(ctx, store, run))
			if err != nil {
				return err
			}
			var above []checkpoint.Ref
			for _, r := range refs {
				if r.SHA256 == "" {
					res.Unreadable = append(res.Unreadable, problem{r.Step, r.Key, unreadableWhy(ctx, store, r)})
				} else if r.Step > newest {
					above = append(above, r)
				}
			}
			for i, r := range refs {
				if keep[i] {
					continue
				}
				if dryRun {
					res.Deleted = append(res.Deleted, r)
					continue
				}
				if err := store.Delete(ctx, r); err != nil {
					return fmt.Errorf("retention (%d checkpoint(s) deleted before the error): %w", len(res.Deleted), err)
				}
				res.Deleted = append(res.Deleted, r)
			}
			res.Kept, res.AboveLast = len(refs)-len(res.Deleted), above
			for _, c := range corrupt {
				res.KeptCorrupt = append(res.KeptCorrupt, problem{c.ref.Step, c.ref.Key, c.why})
			}
			var corruptSteps []int64
			for _, c := range corrupt {
				corruptSteps = append(corruptSteps, c.ref.Step)
			}
			switch {
			case spared:
				res.Spared = &refs[good]
				fmt.Fprintf(e.err, "none of the checkpoints of run/%s that retention keeps loads (step(s) %s: `cann-train checkpoint verify %s` says why): "+
					"kept step %d as well, the newest one that does, which `run --resume` falls back to\n", run, joinSteps(corruptSteps), run, refs[good].Step)
			case len(corrupt) > 0 && good >= 0:
				fmt.Fprintf(e.err, "run/%s's newest checkpoint(s) that retention keeps do not load (step(s) %s: `cann-train checkpoint verify %s` says why); "+
					"step %d, kept too, does\n", run, joinSteps(corruptSteps), run, refs[good].Step)
			case len(corrupt) > 0:
				fmt.Fprintf(e.err, "no checkpoint of run/%s loads (step(s) %s, which retention keeps, nor any older one): `cann-train checkpoint verify %s` says why\n",
					run, joinSteps(corruptSteps), run)
			}
			if output != "json" {
				verb := "deleted"
				if dryRun {
					verb = "would delete"
				}
				for _, r := range res.Deleted {
					fmt.Fprintf(e.out, "%s  step %d  %s\n", verb, r.Step, r.Key)
				}
				for _, c := range res.KeptCorrupt {
					fmt.Fprintf(e.out, "CORRUPT  step %d  %s: %s (kept: it does not load)\n", c.Step, c.Key, c.Problem)
				}
				if res.Spared != nil {
					fmt.Fprintf(e.out, "spared   step %d  %s: the newest checkpoint of run/%s that loads, kept as well\n", res.Spared.Step, res.Spared.Key, run)
				}
				for _, u := range res.Unreadable {
					fmt.Fprintf(e.out, "left     step %d  %s: unreadable: %s\n", u.Step, u.Key, u.Problem)
				}
				for _, r := range above {
					fmt.Fprintf(e.out, "left     step %d  %s\n", r.Step, r.Key)
				}
				if len(above) > 0 {
					fmt.Fprintf(e.out, "left the %d checkpoint(s) above run/%s's last (step %d, as its history records it) alone, neither counted nor deleted: "+
						"another timeline's (an earlier run of the name that went further, a rewound run's uploads) or uploads its history does not record\n",
						len(above), run, newest)
				}
				if len(res.Unreadable) > 0 {
					fmt.Fprintf(e.out, "left the %d checkpoint(s) whose manifest does not read alone, neither counted nor deleted: `cann-train checkpoint verify %s` names them\n",
						len(res.Unreadable), run)
				}
			}
			if res.ChunksSkipped == "" && dryRun {
				var deleted []int64
				for _, r := range res.Deleted {
					deleted = append(deleted, r.Step)
				}
				if res.Chunks, err = store.GCPreview(ctx, run, deleted); err != nil {
					return fmt.Errorf("chunk GC preview (nothing deleted): %w", err)
				}
			} else if res.ChunksSkipped == "" {
				res.Chunks, err = store.GC(ctx, run)
				var ce *checkpoint.CorruptError
				switch {
				case errors.As(err, &ce):
					return fmt.Errorf("chunk GC (%d checkpoint(s) deleted before it): %w; `cann-train checkpoint verify %s` names that manifest: "+
						"restore it, or delete it (its checkpoint cannot be loaded either way), then run gc again", len(res.Deleted), err, run)
				case err != nil:
					return fmt.Errorf("chunk GC (%d checkpoint(s) deleted before it): %w", len(res.Deleted), err)
				}
			}
			if output == "json" {
				return json.NewEncoder(e.out).Encode(res)
			}
			st := res.Chunks
			if dryRun {
				if res.ChunksSkipped != "" {
					fmt.Fprintf(e.out, "dry run, nothing deleted: would keep %d checkpoint(s), delete %d; chunks: none would be deleted: %s\n", res.Kept, len(res.Deleted), res.ChunksSkipped)
					return nil
				}
				fmt.Fprintf(e.out, "dry run, nothing deleted: would keep %d checkpoint(s), delete %d; chunks: %d found, %d referenced by what stays, %d young kept, %d would be deleted (%d bytes), %d orphan payload(s) and %d leftover(s) of killed writers would be deleted\n",
					res.Kept, len(res.Deleted), st.Chunks, st.Referenced, st.Young, st.Deleted, st.DeletedBytes, st.Orphans, st.Leftovers)
				return nil
			}
			if res.ChunksSkipped != "" {
				fmt.Fprintf(e.out, "kept %d checkpoint(s), deleted %d; chunks: none deleted: %s\n", res.Kept, len(res.Deleted), res.ChunksSkipped)
				return nil
			}
			fmt.Fprintf(e.out, "kept %d checkpoint(s), deleted %d; chunks: %d found, %d referenced, %d young kept, %d deleted (%d bytes), %d orphan payload(s) deleted, %d leftover(s) of killed writers deleted\n",
				res.Kept, len(res.Deleted), st.Chunks, st.Referenced, st.Young, st.Deleted, st.DeletedBytes, st.Orphans, st.Leftovers)
			return nil
		},
	}
	gc.Flags().IntVar(&keepLast, "keep-last", 3, "keep this many newest checkpoints (>= 1)")
	gc.Flags().Int64Var(&keepEvery, "keep-every", 0, "also keep checkpoints whose step is a multiple of this (0: none)")
	gc.Flags().BoolVar(&dryRun, "dry-run", false, "say what gc would delete, and delete nothing")
	gc.Flags().DurationVar(&grace, "grace", checkpoint.DefaultGCGrace, "spare unreferenced chunks younger than this (0: none; under "+minLiveGrace.String()+": refused while the run's workflow runs)")
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
` + "`cann-train run -f JOB --name RUN --resume`" + ` continues from it. Refused
while RUN's workflow runs (` + "`cann-train resume`" + ` has its node store it),
when the bucket already holds a checkpoint of RUN at that step or later, for a
file that is not a packed checkpoint directory, and for a RUN neither Temporal
nor the bucket knows.`,
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
			store, refs, err := openRun(cmd, ask, args[0], true)
			if err != nil {
				return err
			}
			defer store.Close()
			if askErr == nil && ended == "deleted" && len(refs) == 0 {
				return fmt.Errorf("no run %s here: Temporal has no run/%s and %s holds none of its checkpoints (a typo? `cann-train dashboard` lists the runs)",
					run, run, url)
			}
			if model := builtinModel(cmd.Context(), store, run); model != "" {
				return fmt.Errorf("run %s trains the built-in model (%s), whose checkpoints are engine states its nodes save themselves: %s is an external job's checkpoint directory, which it cannot restore (another run's file?)",
					run, model, file)
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
			fmt.Fprintf(e.out, "`cann-train run -f JOB --name %s --resume` continues from it; %s can go\n", run, file)
			return nil
		},
	}
	cmd.AddCommand(ls, verify, gc, storeKept)
	return cmd
}

// openBucket opens the checkpoint bucket at url for run's commands: a
// memory bucket and a URL that names no bucket are refused, and a
// file:// bucket opened with o.MustExist that does not exist is said so.
func openBucket(ctx context.Context, url, run string, o checkpoint.Options) (*checkpoint.Store, error) {
	if spec.MemoryBucket(url) {
		return nil, fmt.Errorf("bucket %s is the memory of the process that wrote it: another process (this command) cannot read it", url)
	}
	if err := spec.CheckBucketURL(url); err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	store, err := checkpoint.OpenWithOptions(ctx, url, o)
	if errors.Is(err, checkpoint.ErrNoBucket) {
		return nil, fmt.Errorf("%w: nothing of run %s to read there (--url names the bucket its nodes write to)", err, run)
	}
	return store, err
}

// builtinModel is the built-in model run trains, as the job it stored
// next to its checkpoints in store says ("": an external job's, or no
// stored job that reads).
func builtinModel(ctx context.Context, store *checkpoint.Store, run string) string {
	job, err := readStoredJob(ctx, store, run)
	if err != nil || job.IsExternal() {
		return ""
	}
	return job.Model.Kind
}

// noCheckpoints is what ls, verify and gc end with for a run that has no
// checkpoint in the bucket: the three fail alike (exit 1), where ls used
// to succeed with an empty list. "Nothing there" is most often a wrong
// run name or bucket (a typo, the default bucket where the run's nodes
// write elsewhere), and a script running `verify RUN && …` or reading
// `ls -o json` must not take it for "all good". With -o json each still
// writes its empty document (empty, [] or gc's object) on stdout, so that
// a reader of stdout always gets JSON; the error goes to stderr.
func noCheckpoints(e *env, output, empty, run, url string) error {
	if output == "json" {
		fmt.Fprintln(e.out, empty)
	}
	return fmt.Errorf("no checkpoints of run %q in %s (--url names the bucket its nodes write to)", run, url)
}

// unreadableWhy says why the manifest of r, listed as unreadable, does
// not read.
func unreadableWhy(ctx context.Context, store *checkpoint.Store, r checkpoint.Ref) string {
	err := store.ManifestError(ctx, r)
	var ce *checkpoint.CorruptError
	switch {
	case err == nil:
		return "unreadable when listed, readable now"
	case errors.As(err, &ce):
		return corruptWhy(ce)
	}
	return err.Error()
}

// corruptWhy is a CorruptError's reason and cause, without the object it
// names.
func corruptWhy(ce *checkpoint.CorruptError) string {
	if ce.Err != nil {
		return ce.Reason + ": " + ce.Err.Error()
	}
	return ce.Reason
}

// checkLoads loads r and decodes what it holds — an external job's
// checkpoint directory by its layout, else a state of the built-in
// engine at r's step —, as a resume would. A bad checkpoint is a
// *checkpoint.CorruptError naming the bad object; one deleted since it was
// listed wraps checkpoint.ErrNotFound; any other error is the storage's.
// model is the built-in model the run trains (builtinModel; "": an
// external job's, or unknown), which cannot restore a checkpoint directory.
func checkLoads(ctx context.Context, store *checkpoint.Store, r checkpoint.Ref, model string) error {
	payload, err := store.Load(ctx, r)
	if err != nil {
		return err
	}
	if launch.IsPackedDir(payload) {
		if model != "" {
			// (Stored by hand with store-kept, say: the run's model
			// cannot restore it.)
			return &checkpoint.CorruptError{Key: r.Key, Reason: fmt.Sprintf(
				"an external job's checkpoint directory, in a run of the built-in model (%s) that cannot restore it", model)}
		}
		if _, derr := launch.CheckPacked(payload); derr != nil {
			return &checkpoint.CorruptError{Key: r.Key, Reason: "checkpoint directory does not unpack", Err: derr}
		}
		return nil
	}
	var st engine.State
	if derr := st.UnmarshalBinary(payload); derr != nil {
		return &checkpoint.CorruptError{Key: r.Key, Reason: "state does not decode", Err: derr}
	}
	if st.Step != r.Step {
		return &checkpoint.CorruptError{Key: r.Key, Reason: fmt.Sprintf("state is at step %d, manifest says %d", st.Step, r.Step)}
	}
	return nil
}

// badCheckpoint is a checkpoint that does not load, and why.
type badCheckpoint struct {
	ref checkpoint.Ref
	why string
}

// keepOneThatLoads makes sure retention, keeping refs[i] where keep[i],
// leaves the run a checkpoint that loads when it has one at or below step
// newest (where a resume starts from): it loads the kept ones, newest
// first, until one loads — one load when all is well, none when retention
// deletes nothing (good -1). When none of them loads, it keeps the newest
// of the others that does as well (keep[good] set, spared true). good is
// the newest that loads, kept or spared (-1: none does, or none was
// loaded). It returns the kept ones it found corrupt, newest first.
//
// Keeping one more rather than refusing is what a user who runs gc wants:
// its space freed without losing the run. A refusal would free nothing
// and leave the user to sort out the checkpoints by hand, while the extra
// checkpoint costs one checkpoint's space and leaves the run resumable
// (`run --resume` falls back past the corrupt newer ones to it); gc says
// which ones are corrupt, on stdout and stderr. An error loading one that
// is not its corruption (the storage's) stops gc before it deletes
// anything: it cannot tell whether the checkpoint is good.
func keepOneThatLoads(ctx context.Context, store *checkpoint.Store, refs []checkpoint.Ref, keep []bool, newest int64, model string) (good int, spared bool, corrupt []badCheckpoint, err error) {
	if !slices.Contains(keep, false) {
		return -1, false, nil, nil // Retention deletes nothing: no checkpoint is lost.
	}
	// try says whether refs[i] loads, and if not why.
	try := func(i int) (bool, string, error) {
		r := refs[i]
		err := checkLoads(ctx, store, r, model)
		var ce *checkpoint.CorruptError
		switch {
		case err == nil:
			return true, "", nil
		case errors.As(err, &ce):
			why := corruptWhy(ce)
			if ce.Key != r.Key {
				why = ce.Key + ": " + why
			}
			return false, why, nil
		case errors.Is(err, checkpoint.ErrNotFound):
			return false, "deleted since it was listed", nil
		}
		return false, "", fmt.Errorf("loading run %s's checkpoint at step %d to check that retention keeps one that loads (nothing deleted): %w", r.Run, r.Step, err)
	}
	candidate := func(i int) bool { return refs[i].SHA256 != "" && refs[i].Step <= newest }
	for i := len(refs) - 1; i >= 0; i-- {
		if !keep[i] || !candidate(i) {
			continue
		}
		ok, why, err := try(i)
		if err != nil {
			return -1, false, corrupt, err
		}
		if ok {
			return i, false, corrupt, nil
		}
		corrupt = append(corrupt, badCheckpoint{refs[i], why})
	}
	for i := len(refs) - 1; i >= 0; i-- {
		if keep[i] || !candidate(i) {
			continue
		}
		ok, _, err := try(i)
		if err != nil {
			return -1, false, corrupt, err
		}
		if ok {
			keep[i] = true
			return i, true, corrupt, nil
		}
	}
	return -1, false, corrupt, nil
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

	rec    *runRecord // record's answer for recRun
	recRun string
	recErr error
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

// minLiveGrace is the shortest --grace gc takes while the run's workflow
// runs, or when Temporal cannot say whether it does. A save in another
// process (the run's node) relies on a chunk it found present for up to
// half the grace — the checkpoint package rewrites before reusing only
// chunks older than that — and GC spares the chunks it uploads only while
// they are younger than the grace. One request of a save may take up to
// checkpoint.DefaultRequestTimeout (a minute) before its node gives it up
// as stalled, so a grace of twice that spares a save with one request
// that slow; anything shorter (a second, a nanosecond) is as good as none
// for a save to a slow bucket. A run's own retention spares an hour.
const minLiveGrace = 2 * checkpoint.DefaultRequestTimeout

// refuseLiveRun refuses a GC with a grace period under minLiveGrace of a
// run whose workflow still runs, or when Temporal cannot say: a save of
// its in flight may rely on chunks no manifest names yet, which only the
// grace spares.
func refuseLiveRun(ctx context.Context, ask *temporalAsk, run string, grace time.Duration) error {
	flag := "--grace " + grace.String()
	if grace == 0 {
		flag = "--grace 0"
	}
	ended, err := askRunEnded(ctx, ask, run)
	switch {
	case err != nil:
		// Fail closed: a live run's save in flight would lose chunks.
		return fmt.Errorf("%s: could not ask Temporal whether run/%s still runs (%v), and a checkpoint a running run is saving may rely on chunks "+
			"no manifest names yet for up to half the grace; keep --grace %v or more (the default, %v, is safest), or let this host reach Temporal (--address)",
			flag, run, err, minLiveGrace, checkpoint.DefaultGCGrace)
	case ended == "":
		return fmt.Errorf("%s: run/%s is still running, and a checkpoint it is saving may rely on chunks no manifest names yet for up to half the grace; "+
			"keep --grace %v or more (the default, %v, is safest) or wait until the run has ended", flag, run, minLiveGrace, checkpoint.DefaultGCGrace)
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

// runRecord is what Temporal records of a run, for the checkpoint
// commands.
type runRecord struct {
	known bool                // Temporal knows the run (else the rest is empty)
	read  bool                // its status was read: last is what it records
	last  *spec.CheckpointRef // its last committed checkpoint (nil: none, or unread)
	// jobURL is the bucket its job names (checkpoint_url, else the one
	// the run it resumed last checkpointed in): "" when the job names
	// none, and its nodes write to their workers' --checkpoint-url.
	jobURL string
	why    error // why its status, or its job, could not be read
}

// record asks Temporal (once per run) what it records of run: its status
// (a failed or cancelled run's too) and, when that names no checkpoint,
// its job. The error says why Temporal could not be asked; a run Temporal
// does not know is no error.
func (a *temporalAsk) record(ctx context.Context, run string) (runRecord, error) {
	if a.rec == nil || a.recRun != run {
		rec, err := a.askRecord(ctx, run)
		a.rec, a.recRun, a.recErr = &rec, run, err
	}
	return *a.rec, a.recErr
}

func (a *temporalAsk) askRecord(ctx context.Context, run string) (runRecord, error) {
	var rec runRecord
	c, err := a.client(ctx)
	if err != nil {
		return rec, err
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	id := spec.RunIDPrefix + run
	st, _, _, err := readProgress(ctx, c, id)
	var nf *serviceerror.NotFound
	var de *describeError
	var ended *runEnded
	switch {
	case errors.As(err, &nf):
		return rec, nil
	case errors.As(err, &de):
		return rec, err
	case err == nil || errors.As(err, &ended) && st.RunID != "":
		rec.read, rec.last = true, st.LastCkpt
	case errors.As(err, &ended):
		rec.why = fmt.Errorf("%v, and no control worker answered its status query", err)
	default:
		rec.why = err
	}
	rec.known = true
	if rec.last == nil {
		in, err := runInput(ctx, c, id)
		switch {
		case err != nil:
			rec.why = errors.Join(rec.why, err)
		case in.Spec.CheckpointURL != "":
			rec.jobURL = in.Spec.CheckpointURL
		case in.Resume != nil && in.Resume.LastCkpt != nil:
			rec.jobURL = in.Resume.LastCkpt.URL // (the workflow pins it: nodeSpec)
		}
	}
	return rec, nil
}

// recordedLast is the last checkpoint run's history records, when it is
// in the bucket at url; else nil and why it is not known here ("": the
// history records none).
func recordedLast(ctx context.Context, ask *temporalAsk, run, url string) (*spec.CheckpointRef, string) {
	rec, err := ask.record(ctx, run)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("Temporal could not be asked: %v", err)
	case !rec.known:
		return nil, fmt.Sprintf("Temporal knows no run/%s", run)
	case !rec.read:
		return nil, fmt.Sprintf("its status could not be read: %v", rec.why)
	case rec.last == nil:
		return nil, ""
	case !sameBucket(rec.last.URL, url):
		return nil, fmt.Sprintf("its history records it at step %d in %s, not in %s", rec.last.Step, rec.last.URL, url)
	}
	return rec.last, ""
}

// sameBucket says whether bucket URLs a and b name the same bucket (up to
// a trailing slash).
func sameBucket(a, b string) bool {
	return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

// joinSteps is steps as "1000, 2000".
func joinSteps(steps []int64) string {
	var b strings.Builder
	for i, step := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, step)
	}
	return b.String()
}
