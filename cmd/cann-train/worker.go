package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/ascend/npusmi"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
)

func newWorkerCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a control worker or a node worker",
	}
	cmd.AddCommand(newControlWorkerCmd(e), newNodeWorkerCmd(e))
	return cmd
}

func newControlWorkerCmd(e *env) *cobra.Command {
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Serve workflows and control activities (task queue cann-train)",
		Example: `  cann-train worker control --address temporal.example:7233
  cann-train worker control --metrics-listen 0.0.0.0:9464   # Prometheus: curl http://host:9464/metrics`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.logger()
			if err != nil {
				return err
			}
			c, done, err := dialWorker(cmd.Context(), e, log, metricsAddr)
			if err != nil {
				return err
			}
			defer done()
			return workers.RunControl(cmd.Context(), c, e.namespace, log)
		},
	}
	addMetricsFlag(cmd, &metricsAddr)
	return cmd
}

// addMetricsFlag adds --metrics-listen.
func addMetricsFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "metrics-listen", "", "serve Prometheus metrics (the Temporal SDK's and the runs' cann_train_* gauges and counters) on this host:port at /metrics; empty: none")
}

// dialWorker connects a worker to Temporal, with its metrics served on
// metricsAddr when that is set; done closes both.
func dialWorker(ctx context.Context, e *env, log *zap.Logger, metricsAddr string) (client.Client, func(), error) {
	o, err := e.clientOptions(log)
	if err != nil {
		return nil, nil, err
	}
	h, closeMetrics, err := serveMetrics(e, metricsAddr, log)
	if err != nil {
		return nil, nil, err
	}
	o.MetricsHandler = h
	c, err := workers.DialWaiting(ctx, o, log)
	if err != nil {
		closeMetrics()
		return nil, nil, err
	}
	return c, func() { c.Close(); closeMetrics() }, nil
}

// serveMetrics serves a worker's metrics on addr and says where; with addr
// empty it serves nothing (nil handler). closeMetrics stops serving.
func serveMetrics(e *env, addr string, log *zap.Logger) (h client.MetricsHandler, closeMetrics func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	m, err := workers.ServeMetrics(addr, log)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(e.err, "metrics at %s\n", m.URL)
	return m.Handler, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(sctx)
	}, nil
}

// secondSignal returns a channel closed by the second SIGINT or SIGTERM
// from now on, and a function that stops listening.
func secondSignal() (<-chan struct{}, func()) {
	hurry, done := make(chan struct{}), make(chan struct{})
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for range 2 {
			select {
			case <-sig:
			case <-done:
				return
			}
		}
		close(hurry)
	}()
	return hurry, func() {
		signal.Stop(sig)
		close(done)
	}
}

// clusterLeaseTTL is how long the Cluster registry hands out a node after
// its last lease renewal: workflows/cluster.go, newCluster's default
// ClusterState.LeaseTTL (keep the two the same).
const clusterLeaseTTL = 20 * time.Second

// minLeaseEvery is the shortest --lease-every: each renewal is a signal to
// the Cluster workflow, whose history a flood of them would fill.
const minLeaseEvery = time.Second

// checkLeaseEvery refuses a --lease-every that floods the Cluster with
// signals, or one at or above its lease TTL, with which a healthy node
// shows silent between renewals and is left out of runs.
func checkLeaseEvery(d time.Duration) error {
	switch {
	case d < minLeaseEvery:
		return fmt.Errorf("--lease-every %v: want at least %v (each renewal is a signal to the Cluster workflow)", d, minLeaseEvery)
	case d >= clusterLeaseTTL:
		return fmt.Errorf("--lease-every %v: want under %v, the Cluster's lease TTL: a node not heard from for that long shows silent and gets no runs "+
			"(keep it a few times shorter; the default is 5s)", d, clusterLeaseTTL)
	}
	return nil
}

func newNodeWorkerCmd(e *env) *cobra.Command {
	o := workers.NodeOptions{}
	var metricsAddr, rendezvous string
	var requestTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Serve one node: train chunks on queue cann-train/node/<id>",
		Example: `  cann-train worker node --id node-1
  cann-train worker node --id gpu-07 --address temporal.example:7233 \
      --comm-listen 0.0.0.0:29500 --comm-advertise 10.0.0.7:29500 --rendezvous-ports 29600-29699 \
      --checkpoint-url 's3://ckpt?endpoint=http://minio:9000&use_path_style=true&region=us-east-1'
  cann-train worker node --id npu-03 --address temporal.example:7233 --comm-listen 0.0.0.0:29500 --comm-interface =ib0`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := spec.CheckNodeID(o.ID); err != nil {
				return fmt.Errorf("--id: %w", err)
			}
			if err := checkLeaseEvery(o.LeaseEvery); err != nil {
				return err
			}
			// (Before waiting for Temporal: nothing there cures them.)
			if o.CommAdvertise != "" {
				if err := workers.CheckCommAdvertise(o.CommAdvertise); err != nil {
					return fmt.Errorf("--comm-advertise %w", err)
				}
			}
			if !cmd.Flags().Changed("comm-interface") && o.CommListen == "" && o.CommAdvertise == "" {
				// HCCL's convention; the flags set it aside.
				if o.CommInterface = os.Getenv(workers.CommInterfaceEnv); o.CommInterface != "" {
					o.CommInterfaceFrom = workers.CommInterfaceEnv
				}
			}
			if err := workers.CheckCommInterface(o); err != nil {
				return err
			}
			var err error
			if o.RendezvousPorts, err = workers.ParsePortRange(rendezvous); err != nil {
				return fmt.Errorf("--rendezvous-ports %w", err)
			}
			if cmd.Flags().Changed("npu-ids") {
				if err := checkNPUIDs(o.NPUIDs); err != nil {
					return err
				}
			}
			if o.WorkDir == "" {
				o.WorkDir = filepath.Join(defaultDataDir(), "work", o.ID)
			}
			// (Before waiting for Temporal: nothing there cures it.)
			if err := workers.CheckWorkDir(o.WorkDir); err != nil {
				return fmt.Errorf("--work-dir %s: %w", o.WorkDir, err)
			}
			log, err := e.logger()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("npu-ids") {
				o.NPUIDs = nodeNPUs(cmd.Context(), nil, log)
			}
			c, done, err := dialWorker(cmd.Context(), e, log, metricsAddr)
			if err != nil {
				return err
			}
			defer done()
			o.TemporalAddress = e.address
			if o.CheckpointRequestTimeout = requestTimeout; requestTimeout == 0 {
				o.CheckpointRequestTimeout = -1 // no limit
			}
			// The first signal ends cmd.Context() (main): the worker stops
			// within --stop-grace. A second one stops it at once.
			hurry, quit := secondSignal()
			defer quit()
			o.Hurry = hurry
			if err := workers.RunNode(cmd.Context(), c, o, log); err != nil {
				return fmt.Errorf("node worker: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ID, "id", "", "node ID (required; stable across restarts)")
	f.StringVar(&o.CommListen, "comm-listen", "", "collective listener address, which every peer node dials (0.0.0.0:PORT or [::]:PORT: every interface; "+
		"default: 127.0.0.1 on any free port while Temporal is on this host's loopback, else every interface on any free port). "+
		"A loopback address while Temporal is not on loopback is refused unless --comm-advertise names it (every node on this host)")
	f.StringVar(&o.CommAdvertise, "comm-advertise", "", "HOST:PORT peers dial, not a wildcard (default: the bound address; for a --comm-listen on every interface, "+
		"this host's address on its route to the Temporal frontend, else the first non-loopback address of its host name, as the log says)")
	f.StringVar(&o.CommInterface, "comm-interface", "", "the network interface whose address the collective listener binds and advertises, "+
		"in HCCL_SOCKET_IFNAME's form: eth (a prefix), =eth1 (a name), ^docker,lo (all but these), comma-separated; the first one up with an address wins "+
		"(for hosts whose data network is not their route to Temporal; default: env "+workers.CommInterfaceEnv+" when no --comm-listen/--comm-advertise is given; "+
		"with --comm-listen 0.0.0.0:PORT it picks only the address advertised)")
	f.StringVar(&rendezvous, "rendezvous-ports", "", "LO-HI: the ports an external job whose first node this is takes its rendezvous port from "+
		"(MASTER_PORT, MS_SCHED_PORT) when its job sets no master_port, for a firewall to open (default: any free port)")
	f.StringVar(&o.ClusterID, "cluster-id", spec.DefaultClusterID, "Cluster workflow to register with")
	f.StringVar(&o.CheckpointURL, "checkpoint-url", "file://"+filepath.Join(defaultDataDir(), "checkpoints"), "default checkpoint bucket URL")
	f.DurationVar(&o.BucketGrace, "bucket-grace", activities.DefaultBucketGrace,
		"how long a run's committed checkpoint may be missing from this node's view of the bucket before its chunks fail (nodes that do not share one)")
	f.DurationVar(&requestTimeout, "checkpoint-request-timeout", checkpoint.DefaultRequestTimeout,
		"how long one request to a checkpoint bucket may take, plus 1s per MiB it moves, before it fails as stalled (0: no limit; "+
			"keep it the same on every node: peers wait as long for a node restoring a checkpoint)")
	f.DurationVar(&o.CheckpointGCGrace, "checkpoint-gc-grace", checkpoint.DefaultGCGrace,
		"after retention deletes a run's old checkpoints, this node (the run's writer) deletes the chunks no remaining checkpoint references once they are this old "+
			"(a pass at most every quarter of it; keep it above the longest checkpoint upload of another process into the same run)")
	atLeast(f, "0s", "checkpoint-request-timeout")
	atLeast(f, "1s", "checkpoint-gc-grace")
	f.StringVar(&o.MNISTDir, "mnist-dir", "", "MNIST IDX files (default: env CANN_TRAIN_MNIST_DIR or the GoMNIST module)")
	f.DurationVar(&o.LeaseEvery, "lease-every", 5*time.Second, fmt.Sprintf("lease renewal period: at least %v and under the Cluster's lease TTL, %v, "+
		"after which a node not heard from shows silent and gets no runs (keep it a few times shorter)", minLeaseEvery, clusterLeaseTTL))
	atLeast(f, "1ns", "lease-every", "bucket-grace") // (lease-every: checkLeaseEvery too)
	f.DurationVar(&o.StopGrace, "stop-grace", workers.DefaultStopGrace,
		"on SIGTERM or Ctrl-C the node leaves the cluster and takes no new chunk; the chunk in flight ends early, at a step its nodes agree on within a second, with a checkpoint there "+
			"(its run then moves off the node at that step, losing none), and an external job in flight and then the checkpoint upload may finish for this long; "+
			"a second signal stops at once. Keep it under what your supervisor waits "+
			"before SIGKILL (Kubernetes' terminationGracePeriodSeconds, 30s by default; docker compose's stop_grace_period)")
	atLeast(f, "0s", "stop-grace")
	f.BoolVar(&o.AllowFaults, "allow-fault-injection", false, "let 'cann-train fault kill' SIGKILL this worker (testing and demos only)")
	f.StringVar(&o.WorkDir, "work-dir", "", "external jobs' logs, reports and checkpoint directories (default <data dir>/work/<id>; "+
		"created at start, and a directory the worker cannot write to stops it there)")
	f.IntSliceVar(&o.NPUIDs, "npu-ids", nil, "the physical NPU ids (npu-smi's device ids, /dev/davinci<N>) this node drives, e.g. 0,3: "+
		"an ascend job's local rank i takes the i-th as DEVICE_ID, ASCEND_DEVICE_ID and its rank table's device_id (device_ip: /etc/hccn.conf's address_<id>) "+
		"(default: npu-smi's healthy chips when npu-smi is installed, else 0..procs_per_node-1)")
	f.StringVar(&o.Energy, "energy", "auto", "energy meter whose readings chunks report: auto (Linux RAPL when readable), rapl, npu-smi, nvidia-smi, or off (the run then models energy)")
	addMetricsFlag(cmd, &metricsAddr)
	_ = cmd.MarkFlagRequired("id")
	return cmd
}

// maxNPUID bounds --npu-ids (hccn.conf's address_<id> lines go to 1023).
const maxNPUID = 1023

// checkNPUIDs refuses a --npu-ids list with a negative, too large or
// repeated id.
func checkNPUIDs(ids []int) error {
	seen := map[int]bool{}
	for _, id := range ids {
		switch {
		case id < 0 || id > maxNPUID:
			return fmt.Errorf("--npu-ids: %d out of range 0..%d", id, maxNPUID)
		case seen[id]:
			return fmt.Errorf("--npu-ids: %d given twice: each process needs its own NPU", id)
		}
		seen[id] = true
	}
	return nil
}

// nodeNPUs lists this host's healthy NPU chips by device id, as topo-scan
// names them (npuDevices), for a node worker given no --npu-ids: nil
// without npu-smi, or when it fails (said in the log: ascend jobs then
// take NPUs 0..procs_per_node-1).
func nodeNPUs(ctx context.Context, run npusmi.Runner, log *zap.Logger) []int {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := npusmi.Probe(pctx, run)
	if errors.Is(err, npusmi.ErrNotFound) {
		return nil
	}
	healthy := 0
	if err == nil {
		for _, c := range info.Chips {
			if c.Health.OK() {
				healthy++
			}
		}
	}
	var npus npuChoice
	if err == nil {
		npus, err = npuDevices(info, nil, healthy, false)
	}
	if err != nil {
		log.Warn("npu-smi failed, so this node does not say which NPUs it drives: ascend jobs take NPUs 0..procs_per_node-1 here "+
			"(give --npu-ids to name them)", zap.Error(err))
		return nil
	}
	ids := make([]int, len(npus.devices))
	for i, d := range npus.devices {
		ids[i] = d.ID
	}
	log.Info("NPUs this node drives (npu-smi's healthy chips; --npu-ids names others)", zap.Ints("npu_ids", ids),
		zap.Strings("left_out", npus.unhealthy))
	return ids
}
