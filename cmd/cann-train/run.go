package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

type runOptions struct {
	file      string
	wait      bool
	clusterID string
	output    string
	uiURL     string
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
  checkpoint_url (file:///…, mem://, s3://…, gs://…, azblob://…),
  checkpoint_every (chunk_steps; smaller: chunks end where one is due),
  max_restarts 5, node_wait 2m,
  heartbeat_timeout 10s, chunks_per_run 50, min_nodes (nodes),
  collective ring|hd|rd|tree|hier|auto, topology_scan false, strategy
    fixed|auto (auto: train on the data-parallel degree the cost model
    predicts fastest, from the scanned links and measured computation),
  optimizer adam|onebit-adam, freeze_step (1.5 % of steps; onebit-adam)
  compression (optional): codec auto|none|topk:RATIO|sign|int8 (auto;
    sign with onebit-adam), exchange twophase|allgather, warmup_steps
    (2 % of steps; adam), warmup_codec none (onebit-adam)
  overlap (optional): bucket_kib 25600, first_bucket_kib 1024
  green (optional): trace FILE | provider electricitymaps|carbon-aware-sdk|uk,
    zone, column (direct|lca), trace_start T, provider_url, forecast
    (persistence|seasonal|perfect), planner (online: the observed
    present, then the forecast corrected by its past errors | replan), deadline 48h, interruptible, min_slot, work, budget_g,
    node_watts 300, pue 1
  external (optional; runs your own script instead of the built-in model):
    launcher torchrun|ascend|msrun, entrypoint [argv…], procs_per_node 1,
    env {KEY: value}, workdir (job file's directory), checkpoint_dir,
    master_port (0: free port), stop_grace 10s, meter_every (how often the
    nodes' energy meters are read; 0: 3m per node). With external, steps is the
    script's total (optional, for progress), checkpoint_every is what
    cann_train.should_checkpoint() follows (100), and the built-in fields
    (model.hidden, chunk_steps, batch_per_rank, learning_rate, seed,
    collective, topology_scan, strategy, optimizer, freeze_step,
    compression, overlap) are errors. See examples/torch-ddp/.`,
		Example: `  cann-train run -f examples/mnist.yaml --wait
  cann-train run -f examples/mnist-onebit.yaml --wait
  cann-train run -f examples/torch-ddp/job.yaml --wait
  temporal workflow describe --workflow-id run/mnist-demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "text", "json", "jsonl"); err != nil {
				return err
			}
			s, err := spec.LoadFile(o.file)
			if err != nil {
				return err
			}
			// An external job's relative workdir is the job file's directory.
			if s, err = s.WithJobDir(filepath.Dir(o.file)); err != nil {
				return err
			}
			log, err := e.logger()
			if err != nil {
				return err
			}
			c, err := workers.Dial(cmd.Context(), workers.ClientOptions{Address: e.address, Namespace: e.namespace, Logger: log})
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := startRunWith(cmd.Context(), c, s, o.clusterID)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.err, "started %s\n", id)
			if !o.wait {
				fmt.Fprintln(e.out, id)
				return nil
			}
			st, err := watchRun(cmd.Context(), c, id, e.err, o.output == "jsonl")
			if err != nil {
				return err
			}
			return printStatus(e.out, st, o.output, e.webUI(o.uiURL), e.namespace)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "job file (YAML)")
	f.BoolVar(&o.wait, "wait", false, "watch the run until it ends")
	f.StringVar(&o.clusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow that owns the nodes")
	f.StringVarP(&o.output, "output", "o", "text", "output with --wait: text, json or jsonl (progress lines)")
	addUIFlag(f, &o.uiURL)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// startRun starts TrainingRun with ID run/<name>; a run of that name that
// is still going is an error, not a second run.
// faults are fault injections the run starts with (quickstart --inject,
// bench recovery); `cann-train fault kill` adds them to a running run.
func startRunWith(ctx context.Context, c client.Client, s spec.RunSpec, clusterID string, faults ...spec.InjectFault) (string, error) {
	id := spec.RunIDPrefix + s.Name
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                spec.ControlTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Without this the SDK hands back the running run as if started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, spec.WorkflowTrainingRun, workflows.RunInput{Spec: s, ClusterID: clusterID, Faults: faults})
	var running *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &running) {
		return "", fmt.Errorf("start %s: a run of that name is still going (follow it with `cann-train watch %s`, or give this one another name): %w", id, s.Name, err)
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
	return fmt.Errorf("unknown output format %q (allowed: %v)", got, allowed)
}
