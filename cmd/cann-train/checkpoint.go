package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/checkpoint"
)

func newCheckpointCmd(e *env) *cobra.Command {
	var url, output string
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "List and verify a run's checkpoints in blob storage",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&url, "url", "file://"+filepath.Join(defaultDataDir(), "checkpoints"), "checkpoint bucket URL")
	pf.StringVarP(&output, "output", "o", "text", "text or json")

	runName := func(arg string) string { return strings.TrimPrefix(arg, "run/") }
	// openRun checks the output format, opens the bucket and lists the run.
	openRun := func(cmd *cobra.Command, arg string) (*checkpoint.Store, []checkpoint.Ref, error) {
		if err := checkOutput(output, "text", "json"); err != nil {
			return nil, nil, err
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
		Short:   "List a run's checkpoints, oldest first",
		Example: `  cann-train checkpoint ls mnist-demo --url file:///tmp/ckpt`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, refs, err := openRun(cmd, args[0])
			if err != nil {
				return err
			}
			defer store.Close()
			if output == "json" {
				return json.NewEncoder(e.out).Encode(refs)
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STEP\tBYTES\tSHA256\tMANIFEST")
			for _, r := range refs {
				fmt.Fprintf(tw, "%d\t%d\t%.16s\t%s\n", r.Step, r.Bytes, r.SHA256, r.Key)
			}
			return tw.Flush()
		},
	}
	verify := &cobra.Command{
		Use:   "verify RUN",
		Short: "Check every checkpoint's hash and decode its state; name the bad ones",
		Long: `Reads every checkpoint of RUN, checks its size and SHA-256 against its
manifest and decodes the training state. Exits non-zero if any is bad, naming
the object and what is wrong with it.`,
		Example: `  cann-train checkpoint verify mnist-demo --url file:///tmp/ckpt`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, refs, err := openRun(cmd, args[0])
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
				if err == nil {
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
	cmd.AddCommand(ls, verify)
	return cmd
}
