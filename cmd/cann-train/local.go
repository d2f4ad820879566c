package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workers"
	"github.com/cann-train/cann-train/workflows"
)

// localCluster is an embedded Temporal server, an in-process control
// worker and node-worker child processes: what quickstart and the local
// benchmarks run on.
type localCluster struct {
	srv      *dev.Server
	client   client.Client
	launcher *dev.Launcher
	ckptURL  string
	dataDir  string
	stop     func()
}

type localOptions struct {
	port, uiPort int
	// anyPorts: where port or uiPort is taken, use free ones and say so
	// (the quickstart's default ports).
	anyPorts    bool
	dataDir     string
	metricsAddr string // the control worker's Prometheus endpoint ("": none)
	// run, where set, keeps the logs of this cluster's processes under
	// logs/<run> of dataDir: two quickstarts on one data dir (each holds
	// its run's name, quickstartLock) write logs of their own.
	run string
}

// logDir is where o's processes log.
func (o localOptions) logDir() string {
	if o.run != "" {
		return filepath.Join(o.dataDir, "logs", o.run)
	}
	return filepath.Join(o.dataDir, "logs")
}

// localStartError adds to a server start's port clash the flag that gets
// past it.
func localStartError(err error) error {
	var inUse *dev.PortInUseError
	if errors.As(err, &inUse) && inUse.UI {
		return fmt.Errorf("%w; stop it, or pass --ui-port -1 (any free port) or --ui-port 0 (no Web UI)", err)
	}
	return fmt.Errorf("%w; stop it, or pass --port 0 (any free port)", err)
}

func startLocal(ctx context.Context, e *env, o localOptions) (*localCluster, error) {
	log, err := e.logger()
	if err != nil {
		return nil, err
	}
	quiet := log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	// Metrics first: an address that cannot be listened on is refused
	// before a server starts (and its shutdown noise comes first).
	h, closeMetrics, err := serveMetrics(e, o.metricsAddr, quiet)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", o.metricsAddr, err)
	}
	start := time.Now()
	so := dev.ServerOptions{
		FrontendPort: o.port, UIPort: o.uiPort, Namespace: e.namespace,
		SearchAttributes: workers.SearchAttributes(), Logger: quiet.Named("temporal"),
	}
	srv, err := dev.StartServer(ctx, so)
	if errors.Is(err, dev.ErrPortInUse) && o.anyPorts {
		fmt.Fprintf(e.err, "%v; using free ports instead\n", err)
		so.FrontendPort = 0
		if so.UIPort > 0 {
			so.UIPort = -1
		}
		srv, err = dev.StartServer(ctx, so)
	}
	if errors.Is(err, dev.ErrPortInUse) {
		closeMetrics()
		return nil, localStartError(err)
	}
	if err != nil {
		closeMetrics()
		return nil, err
	}
	ui := srv.UIURL()
	if ui == "" {
		ui = "off (--ui-port 0)"
	}
	fmt.Fprintf(e.err, "Temporal %s up in %.1fs; Web UI %s\n", srv.FrontendAddr(), time.Since(start).Seconds(), ui)
	// The in-process control worker (and its SDK client) log to a file
	// beside the node workers': a recovery's warnings would break into
	// the progress lines, which say it in a line of their own.
	ctlLog, closeLog, err := fileLogger(e, log, filepath.Join(o.logDir(), "control.log"))
	if err != nil {
		closeMetrics()
		srv.Stop()
		return nil, err
	}
	co := workers.ClientOptions{Address: srv.FrontendAddr(), Namespace: srv.Namespace(), Logger: ctlLog}
	co.MetricsHandler = h
	c, err := workers.Dial(ctx, co)
	if err != nil {
		closeMetrics()
		closeLog()
		srv.Stop()
		return nil, err
	}
	// Not ctx's child: after a Ctrl-C the control worker still answers
	// the run's status query (where it stopped) until stop.
	wctx, stopControl := context.WithCancel(context.WithoutCancel(ctx))
	controlDone := make(chan error, 1)
	go func() { controlDone <- workers.RunControl(wctx, c, srv.Namespace(), ctlLog) }()

	ckptDir := filepath.Join(o.dataDir, "checkpoints")
	launcher := &dev.Launcher{Command: e.command, LogDir: o.logDir()}
	lc := &localCluster{srv: srv, client: c, launcher: launcher, ckptURL: "file://" + ckptDir, dataDir: o.dataDir}
	lc.stop = func() {
		srv.Quiet() // (the teardown's failed polls are no news)
		_ = launcher.StopAll(10 * time.Second)
		stopControl()
		<-controlDone
		c.Close()
		closeMetrics()
		closeLog()
		srv.Stop()
	}
	if err := os.MkdirAll(ckptDir, 0o755); err != nil {
		lc.stop()
		return nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	return lc, nil
}

// startNode launches one node-worker process registered with clusterID.
// Local nodes accept fault injection (RunInput.Faults, fault kill).
func (lc *localCluster) startNode(id, clusterID string) (*dev.Proc, error) {
	return lc.launcher.Start(id, "worker", "node", "--id", id,
		"--address", lc.srv.FrontendAddr(), "--namespace", lc.srv.Namespace(), "--env-config=false",
		"--cluster-id", clusterID, "--checkpoint-url", lc.ckptURL, "--log-level", "info",
		"--work-dir", filepath.Join(lc.dataDir, "work", id), "--allow-fault-injection")
}

// awaitNodes polls the Cluster registry clusterID until n nodes have
// registered, so that ranks go to nodes in ID order and the spares are the
// last ones (nodes register once their data is loaded).
func awaitNodes(ctx context.Context, c client.Client, clusterID string, n int) error {
	for {
		var nodes []workflows.NodeRecord
		q, err := c.QueryWorkflow(ctx, clusterID, "", spec.QueryNodes)
		if err == nil && q.Get(&nodes) == nil && len(nodes) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d nodes never registered with %s (last: %d, %v): %w", n, clusterID, len(nodes), err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fileLogger is a logger at log's level, in the command's format, that
// appends to path (its directory created).
func fileLogger(e *env, log *zap.Logger, path string) (*zap.Logger, func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, fmt.Errorf("log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	if e.logJSON {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	fl := zap.New(zapcore.NewCore(enc, zapcore.AddSync(f), log.Core()), zap.AddCaller())
	return fl, func() { _ = fl.Sync(); f.Close() }, nil
}
