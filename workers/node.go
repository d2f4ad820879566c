package workers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cann-train/cann-train/activities"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/energy"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// NodeOptions configures a node worker.
type NodeOptions struct {
	// ID names the node; stable across restarts of the same machine.
	ID string
	// CommListen is where the collective listener binds, e.g.
	// "127.0.0.1:0" or "0.0.0.0:29500". Empty: defaultCommListen's
	// choice — this host's loopback while Temporal is reached on it, else
	// every interface.
	CommListen string
	// CommAdvertise is the address peers dial (HOST:PORT, not a wildcard:
	// CheckCommAdvertise); default the bound address, with a wildcard host
	// (0.0.0.0, ::) replaced by this host's address towards
	// TemporalAddress (advertiseAddr). A loopback address advertised
	// while Temporal is not on this host's loopback is refused, unless
	// CommAdvertise names it (checkLoopbackAdvertise).
	CommAdvertise string
	// CommInterface selects the network interface whose address the
	// collective listener binds and advertises, in HCCL_SOCKET_IFNAME's
	// form ("eth", "=eth1", "^docker,lo": interfaceIP): for hosts whose
	// data network is not their route to Temporal. With a wildcard
	// CommListen it only picks the address advertised; it excludes
	// CommAdvertise and a CommListen on another address.
	CommInterface string
	// CommInterfaceFrom names where CommInterface came from in messages
	// (default "--comm-interface"; e.g. HCCL_SOCKET_IFNAME).
	CommInterfaceFrom string
	// TemporalAddress is the Temporal frontend's host:port the client
	// dials: a wildcard CommListen advertises the local address of the
	// route to it, and whether it is on this host's loopback decides
	// CommListen's default.
	TemporalAddress string
	// RendezvousPorts is the range an external job whose first node this
	// is takes its rendezvous port from (MASTER_PORT, MS_SCHED_PORT) when
	// its spec names none: a range a firewall can open. Zero: any free
	// port (the kernel's ephemeral choice).
	RendezvousPorts PortRange
	// ClusterID is the Cluster workflow to register with.
	ClusterID string
	// CheckpointURL is the default checkpoint bucket.
	CheckpointURL string
	// BucketGrace is how long the node may miss a run's committed
	// checkpoint before failing its chunks (activities.Node.BucketGrace;
	// zero: activities.DefaultBucketGrace).
	BucketGrace time.Duration
	// CheckpointRequestTimeout bounds each request to a checkpoint bucket
	// (activities.Node.CheckpointRequestTimeout: zero is the default,
	// negative none).
	CheckpointRequestTimeout time.Duration
	// CheckpointGCGrace is how young an unreferenced checkpoint chunk
	// may be and stay when the node collects a run's old chunks
	// (activities.Node.CheckpointGCGrace: zero is the default, an hour).
	CheckpointGCGrace time.Duration
	// MNISTDir overrides the data location.
	MNISTDir string
	// LeaseEvery is how often the lease is renewed. Default 5s.
	LeaseEvery time.Duration
	// AllowFaults honours `cann-train fault kill` for this node.
	AllowFaults bool
	// StopGrace is how long a stopping worker (ctx ended: SIGTERM,
	// Ctrl-C) lets the chunk in flight end early (activities.Node.EndChunks)
	// or the external job in flight finish, and then rank 0's checkpoint
	// upload finish, before it cancels them and exits
	// (DefaultStopGrace for the command). From the first moment it takes
	// no new chunk and the Cluster hands it to no run. Zero: cancel at
	// once.
	StopGrace time.Duration
	// Hurry, once closed, cuts StopGrace short (a second signal).
	Hurry <-chan struct{}
	// WorkDir holds external jobs' directories on this node (logs,
	// reports, checkpoint directory). Default: a temporary directory. Set,
	// it is created and must be writable (CheckWorkDir).
	WorkDir string
	// Energy is the host meter chunks read (energy.HostMeterOptions.Kind:
	// "" or auto is RAPL when readable; off disables metering). Without a
	// meter the run models the node's energy.
	Energy string
	// NPUIDs are the physical NPU ids this node drives, in the order an
	// ascend job's processes take them (spec.Node.NPUIDs; empty: unknown,
	// 0..procs_per_node-1).
	NPUIDs []int
}

// heartbeatEvery bounds how long a node's running activities wait to
// send their latest heartbeat (worker.Options.MaxHeartbeatThrottleInterval).
const heartbeatEvery = time.Second

// RunNode serves the node's task queue, registers the node with the
// Cluster and renews its lease until ctx ends.
func RunNode(ctx context.Context, c client.Client, o NodeOptions, log *zap.Logger) error {
	if o.ID == "" {
		return errors.New("node worker: an ID is required (--id)")
	}
	if o.ClusterID == "" {
		o.ClusterID = spec.DefaultClusterID
	}
	var ifaceIP net.IP
	if o.CommInterface != "" {
		ip, name, err := commInterface(o)
		if err != nil {
			return fmt.Errorf("node %s: %w", o.ID, err)
		}
		ifaceIP = ip
		if o.CommListen == "" {
			o.CommListen = net.JoinHostPort(ip.String(), "0")
		}
		log.Info("the collective listener uses the address of the interface --comm-interface selects",
			zap.String("node", o.ID), zap.String("selection", o.CommInterface), zap.String("from", o.CommInterfaceFrom), zap.String("interface", name), zap.String("address", ip.String()))
	}
	if o.CommListen == "" {
		if o.CommListen = defaultCommListen(o.TemporalAddress, OutboundIP); o.CommListen != "127.0.0.1:0" {
			log.Info("no --comm-listen given and Temporal is not on this host's loopback: the collective listener binds every interface, "+
				"on any free port, for peers on other hosts (give --comm-listen 0.0.0.0:PORT for a port a firewall can open)",
				zap.String("node", o.ID), zap.String("temporal", o.TemporalAddress))
		}
	}
	if o.LeaseEvery <= 0 {
		o.LeaseEvery = 5 * time.Second
	}
	if err := spec.CheckNodeID(o.ID); err != nil {
		return err // (the CLI says "node worker: ")
	}
	if o.CommAdvertise != "" {
		if err := CheckCommAdvertise(o.CommAdvertise); err != nil {
			return fmt.Errorf("node %s: --comm-advertise %w", o.ID, err)
		}
	}
	if err := o.RendezvousPorts.check(); err != nil {
		return fmt.Errorf("node %s: --rendezvous-ports %w", o.ID, err)
	}
	if o.WorkDir != "" { // its first external job would fail on it
		if err := CheckWorkDir(o.WorkDir); err != nil {
			return fmt.Errorf("node %s: work dir %s: %w", o.ID, o.WorkDir, err)
		}
	}
	if err := checkDefaultBucket(ctx, o, bucketCheckTimeout, log); err != nil {
		return err
	}
	l, err := tcp.Listen(o.CommListen)
	if err != nil {
		return fmt.Errorf("node %s: collective listener on %s: %w", o.ID, o.CommListen, err)
	}
	// Shared-memory files of ranks killed while setting up a link or a
	// shared buffer (they are unlinked within seconds otherwise).
	if n, err := shm.RemoveStale("", time.Hour); err != nil || n > 0 {
		log.Info("stale shared-memory files", zap.Int("removed", n), zap.Error(err))
	}
	defer l.Close()
	advertise := o.CommAdvertise
	if ifaceIP != nil {
		_, port, _ := net.SplitHostPort(l.Addr())
		advertise = net.JoinHostPort(ifaceIP.String(), port)
	}
	if advertise == "" {
		var why string
		var chosen bool
		advertise, why, chosen = advertiseAddr(l.Addr(), o.TemporalAddress, OutboundIP, hostIPs)
		switch {
		case chosen:
			log.Info("advertising this host's address to peers: --comm-listen binds every interface and no --comm-advertise names one "+
				"(give --comm-advertise if peers reach this host at another)",
				zap.String("node", o.ID), zap.String("comm", advertise), zap.String("listen", l.Addr()), zap.String("how", why))
		case why != "":
			log.Warn("advertising a wildcard address, which peers on other hosts cannot dial: give --comm-advertise",
				zap.String("node", o.ID), zap.String("comm", advertise), zap.String("why", why))
		}
	}
	switch warn, err := checkLoopbackAdvertise(advertise, o.CommListen, o.CommAdvertise != "" || ifaceIP != nil, o.TemporalAddress, OutboundIP); {
	case err != nil:
		return fmt.Errorf("node %s: %w", o.ID, err)
	case warn != "":
		log.Warn(warn, zap.String("node", o.ID), zap.String("comm", advertise), zap.String("temporal", o.TemporalAddress))
	}
	host, _ := os.Hostname()
	if h, _, err := net.SplitHostPort(advertise); err == nil && h != "" {
		host = h + " (" + host + ")"
	}
	node := spec.Node{ID: o.ID, TaskQueue: spec.NodeTaskQueue(o.ID), CommAddr: advertise, Host: host, Devices: 1,
		DeviceIPs: hccnDeviceIPs(hccnConf), NPUIDs: o.NPUIDs, Incarnation: fmt.Sprintf("%d.%d", time.Now().UnixNano(), os.Getpid()),
		FaultInjection: spec.FaultsRefused, CheckpointURL: checkpoint.Redact(o.CheckpointURL)}
	if o.AllowFaults {
		node.FaultInjection = spec.FaultsAllowed
	}
	log = log.With(zap.String("node", o.ID))
	// Before polling the node's task queue: a second worker must not take
	// any of its chunks.
	if err := notServedElsewhere(ctx, c, o.ClusterID, node, l.Addr(), registryRetry, log); err != nil {
		return err
	}

	// A newer worker registered this node's ID (a second worker started
	// with the same --id): the runs plan for that one, and this one's
	// chunks all fail; it stops serving, saying why.
	ctx, supersede := context.WithCancelCause(ctx)
	defer supersede(nil)
	acts := &activities.Node{ID: o.ID, Listener: l, Logger: log, DefaultCheckpointURL: o.CheckpointURL, MNISTDir: o.MNISTDir,
		AllowFaults: o.AllowFaults, WorkDir: o.WorkDir, Incarnation: node.Incarnation, PeerWatch: peerWatch, BucketGrace: o.BucketGrace,
		CheckpointRequestTimeout: o.CheckpointRequestTimeout, CheckpointGCGrace: o.CheckpointGCGrace,
		RendezvousPorts: [2]int{o.RendezvousPorts.Lo, o.RendezvousPorts.Hi},
		Superseded:      func(err error) { supersede(&SupersededError{Err: err}) }}
	defer acts.Close()
	switch m, err := energy.OpenHostMeter(ctx, energy.HostMeterOptions{Kind: o.Energy}); {
	case err == nil:
		defer m.Close()
		acts.Energy = m
		log.Info("energy meter", zap.Stringer("meter", m))
	case errors.Is(err, energy.ErrNoMeter) && (o.Energy == "" || o.Energy == energy.MeterAuto || o.Energy == energy.MeterOff):
		log.Info("energy not metered: runs model this node's energy", zap.Error(err))
	default:
		return fmt.Errorf("node %s: %w", o.ID, err) // ("energy: ...")
	}
	w := worker.New(c, node.TaskQueue, worker.Options{
		// A relaunched world's activity (and its port reservation) may
		// arrive while the stopped one still winds down.
		MaxConcurrentActivityExecutionSize: 4,
		// Stop stops polling at once and gives the activities in flight
		// this long (stop).
		WorkerStopTimeout: max(o.StopGrace, 0),
		// An activity learns of its cancellation only from the reply to a
		// heartbeat, and the SDK sends one at most every 0.8 × the
		// heartbeat timeout (8 s for the default 10 s): a cancelled chunk
		// trained on that long, on nodes the run may have released. A
		// heartbeat a second (RecordActivityTaskHeartbeat per running
		// activity) stops it within about one, and keeps the live
		// progress that status and watch read as fresh.
		MaxHeartbeatThrottleInterval: heartbeatEvery,
	})
	w.RegisterActivityWithOptions(acts.TrainChunk, activity.RegisterOptions{Name: spec.ActivityTrainChunk})
	w.RegisterActivityWithOptions(acts.RunExternal, activity.RegisterOptions{Name: spec.ActivityRunExternal})
	w.RegisterActivityWithOptions(acts.ReservePort, activity.RegisterOptions{Name: spec.ActivityReservePort})
	w.RegisterActivityWithOptions(acts.ReadEnergy, activity.RegisterOptions{Name: spec.ActivityReadEnergy})
	w.RegisterActivityWithOptions(acts.ProbeLinks, activity.RegisterOptions{Name: spec.ActivityProbeLinks})
	w.RegisterActivityWithOptions(acts.CheckNodes, activity.RegisterOptions{Name: spec.ActivityCheckNodes})
	w.RegisterActivityWithOptions(acts.ArmFault, activity.RegisterOptions{Name: spec.ActivityArmFault})
	w.RegisterActivityWithOptions(acts.EndChunk, activity.RegisterOptions{Name: spec.ActivityEndChunk})
	w.RegisterActivityWithOptions(acts.RequestCheckpoint, activity.RegisterOptions{Name: spec.ActivityRequestCheckpoint})
	w.RegisterActivityWithOptions(acts.ProbeRead, activity.RegisterOptions{Name: spec.ActivityProbeRead})
	w.RegisterActivityWithOptions(acts.StoreKept, activity.RegisterOptions{Name: spec.ActivityStoreKept})
	// Load the data before offering the node: a spare is then ready to
	// train the moment it replaces a failed rank.
	if err := acts.Preload(); err != nil {
		log.Warn("no data set for the built-in model: its runs' chunks fail on this node, which they replace (and the Cluster keeps failed "+
			"until this worker registers again); give --mnist-dir or CANN_TRAIN_MNIST_DIR (external jobs do not need it)", zap.Error(err))
	}
	node.DataSHA256, node.Protocol = acts.DataSHA256(), spec.ChunkProtocolVersion
	if err := register(ctx, c, o.ClusterID, node); err != nil {
		return err
	}
	// Poll only once registered: a restarted worker then takes no chunk
	// before the Cluster knows its new address, so a run that held the
	// node re-forms its group with this process (a chunk still planned
	// for the last one is refused as NoState, once) instead of looping
	// on chunks this process must refuse.
	if err := w.Start(); err != nil {
		return fmt.Errorf("node %s: start worker: %w", o.ID, err)
	}
	// (Stopped by stop, the only way out from here: a deferred Stop
	// would wait out the grace that a second signal cuts short.)
	log.Info("node worker serving", zap.String("task_queue", node.TaskQueue), zap.String("comm", advertise),
		zap.Stringer("rendezvous_ports", o.RendezvousPorts))

	t := time.NewTicker(o.LeaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			if se := (*SupersededError)(nil); errors.As(cause, &se) {
				log.Error("another worker process registered this node ID after this one: this one stops serving (--id must be unique)", zap.Error(se.Err))
			}
			leave(c, o.ClusterID, node, log) // (the Cluster ignores an earlier process's word)
			stop(w, acts, l, o, cause, log)
			if se := (*SupersededError)(nil); errors.As(cause, &se) {
				return fmt.Errorf("node %s: %w", o.ID, se)
			}
			return nil
		case <-t.C:
		}
		err := c.SignalWorkflow(ctx, o.ClusterID, "", spec.SignalHeartbeat, spec.NodeHeartbeat{NodeID: o.ID, Incarnation: node.Incarnation, Node: &node})
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// The registry was terminated (or the server lost its
			// state): register again, starting a new one. (The other
			// nodes' renewals then reach that one and register them:
			// they carry the registration.)
			err = register(ctx, c, o.ClusterID, node)
		}
		if err != nil && ctx.Err() == nil {
			// Transient: the next tick tries again; the lease outlives a few misses.
			log.Warn("lease renewal failed", zap.Error(err))
		}
	}
}

func register(ctx context.Context, c client.Client, clusterID string, node spec.Node) error {
	_, err := c.SignalWithStartWorkflow(ctx, clusterID, spec.SignalRegister, node,
		client.StartWorkflowOptions{ID: clusterID, TaskQueue: spec.ControlTaskQueue},
		spec.WorkflowCluster, workflows.ClusterInput{})
	if err != nil {
		return fmt.Errorf("node %s: register with %s: %w", node.ID, clusterID, err)
	}
	return nil
}

// ErrDuplicateNode: another live worker already serves the node ID.
// SupersededError ends a node worker whose node ID a newer worker
// process registered since (activities.Node.Superseded): two workers with
// one --id would take each other's chunks.
type SupersededError struct{ Err error }

func (e *SupersededError) Error() string { return "superseded: " + e.Err.Error() }
func (e *SupersededError) Unwrap() error { return e.Err }

var ErrDuplicateNode = errors.New("another worker serves this node ID")

// notServedElsewhere refuses to start a second worker for a node ID whose
// registered worker is alive: two processes polling one node's task queue
// would each take some of its chunks while its peers connect to one of
// them. The registered worker counts as alive when its collective port
// still accepts a connection — a killed process's listener closes with it,
// so a worker restarted under the same ID (or at the same address) goes
// on — and its lease is live: a process stopped (SIGSTOP) or hung still
// has its handshakes completed by the kernel, but renews no lease, and
// once that has lapsed (the registry's TTL) this worker takes the
// node over, with a warning to kill -9 the hung one. A registered worker
// that said it stopped (SIGTERM, Ctrl-C: spec.ReasonWorkerStopped) is not
// asked, nor one whose address reaches this worker's own listener, bound
// at bound (a restart at another --comm-advertise on the same port: that
// port is this worker's now). The registry is answered by a control worker: while none answers
// (none yet, one restarting or slow) it asks again, backing off, within
// retry's budget, and then starts with a warning that it could not check;
// a namespace that does not exist ends it at once, and a permission
// denied warns at once.
func notServedElsewhere(ctx context.Context, c client.Client, clusterID string, node spec.Node, bound string, retry retryPolicy, log *zap.Logger) error {
	asked := time.Now()
	tries := 0
	var ttl time.Duration // the registry's lease TTL
	records, err := retry.do(ctx, func(ctx context.Context) ([]workflows.NodeRecord, error) {
		reg, err := registryNodes(ctx, c, clusterID)
		if tries++; err != nil && tries == 1 && !permanent(err) {
			log.Info("the cluster registry does not answer; asking again before serving, to rule out a second worker with this node ID",
				zap.String("cluster", clusterID), zap.Duration("for_up_to", retry.budget), zap.Error(err))
		}
		ttl = reg.LeaseTTL
		return reg.Nodes, err
	})
	ttl = cmp.Or(ttl, workflows.DefaultLeaseTTL) // (an earlier build's registry says none)
	if ctx.Err() != nil {
		return fmt.Errorf("node %s: asking the cluster registry %s: %w", node.ID, clusterID, ctx.Err())
	}
	if nf := (*serviceerror.NamespaceNotFound)(nil); errors.As(err, &nf) {
		return fmt.Errorf("node %s: asking the cluster registry %s: %w", node.ID, clusterID, err)
	}
	if err != nil {
		why := "the cluster registry did not answer (is a control worker running?)"
		if permanent(err) {
			why = "Temporal refused to let this worker ask the cluster registry (its credentials' permissions)"
		}
		log.Warn("could not rule out a second worker serving this node ID: "+why+". "+
			"If another worker has the same --id, both take this node's chunks and its runs fail, blaming restarts that never happened",
			zap.String("cluster", clusterID), zap.Int("tries", tries), zap.Duration("waited", time.Since(asked).Round(time.Millisecond)), zap.Error(err))
		return nil
	}
	for _, r := range records {
		if r.Node.ID != node.ID || r.Node.CommAddr == "" || r.Node.CommAddr == node.CommAddr {
			continue
		}
		if r.Failed && r.FailReason == spec.ReasonWorkerStopped {
			return nil // it left on purpose (its own word): this worker is its successor
		}
		var d net.Dialer
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(dctx, "tcp", r.Node.CommAddr)
		dcancel()
		if err != nil {
			return nil // gone: this worker replaces it
		}
		self := ownListener(conn, bound)
		conn.Close()
		if self {
			// Its address reaches this worker's own listener, which holds
			// that port now: the registered worker's listener is gone.
			return nil
		}
		ago := time.Since(r.LastSeen).Round(time.Second)
		if ago > ttl {
			// The kernel completes a stopped (SIGSTOP) or hung process's
			// handshakes; the registry's lease says whether it lives. A
			// process continued later finds this one registered and
			// stops itself at the first chunk that shows it.
			log.Warn("the worker registered for this node ID still accepts connections on its collective port but has renewed "+
				"no lease for longer than the registry's TTL: it is hung (stopped with SIGSTOP, or stuck); this worker takes the node over. "+
				"If that process still exists, kill -9 it (a stopped process ignores SIGTERM until it is continued)",
				zap.String("host", r.Node.Host), zap.String("comm_addr", r.Node.CommAddr), zap.Duration("last_seen_ago", ago),
				zap.Duration("lease_ttl", ttl), zap.String("fail_reason", r.FailReason))
			return nil
		}
		return fmt.Errorf("node %s: %w: the worker registered on %s (last seen %s ago, its lease live) still answers on its collective port %s; stop it or give this one another --id",
			node.ID, ErrDuplicateNode, r.Node.Host, ago, r.Node.CommAddr)
	}
	return nil
}

// ownListener reports whether conn, just dialled, reached the listener
// bound at bound (its Addr) — this process's own: the connection stayed on
// this host (to a loopback address, or from the very address it reached,
// the kernel's source for a local destination), to bound's port, at an
// address bound covers (a wildcard covers every one). While bound holds
// that address and port no other listener does (no SO_REUSEPORT here).
func ownListener(conn net.Conn, bound string) bool {
	remote, ok1 := conn.RemoteAddr().(*net.TCPAddr)
	local, ok2 := conn.LocalAddr().(*net.TCPAddr)
	host, port, err := net.SplitHostPort(bound)
	if !ok1 || !ok2 || err != nil || port != strconv.Itoa(remote.Port) {
		return false
	}
	if !remote.IP.IsLoopback() && !remote.IP.Equal(local.IP) {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && (ip.IsUnspecified() || ip.Equal(remote.IP))
}

// errNoControlWorker: nothing polls the control task queue, so a query of
// the Cluster would only wait out its deadline.
var errNoControlWorker = errors.New("no control worker polls task queue " + spec.ControlTaskQueue)

// registryNodes asks the Cluster registry clusterID for its nodes and
// lease TTL (spec.QueryRegistry). A
// registry not started yet has none.
func registryNodes(ctx context.Context, c client.Client, clusterID string) (workflows.Registry, error) {
	var reg workflows.Registry
	if ok, err := ControlWorkerPolls(ctx, c); !ok {
		if err == nil {
			err = errNoControlWorker
		}
		return reg, err
	}
	v, err := c.QueryWorkflow(ctx, clusterID, "", spec.QueryRegistry)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return reg, nil // no registry, so no node registered
	}
	if err == nil {
		err = v.Get(&reg)
	}
	if err != nil {
		return reg, fmt.Errorf("query the cluster registry %s: %w", clusterID, err)
	}
	return reg, nil
}

// retryPolicy bounds how long a starting node worker asks again for what
// it needs of a control worker: from first, twice as long each time, each
// try at most perTry, all within budget.
type retryPolicy struct {
	first, perTry, budget time.Duration
}

// registryRetry is how long a starting node worker waits for the Cluster
// registry (notServedElsewhere): a control worker restarting is back
// within seconds, and startup is not held up for long when there is none.
var registryRetry = retryPolicy{first: time.Second, perTry: 5 * time.Second, budget: 15 * time.Second}

// do calls try until it succeeds, ctx ends, or the budget is spent, and
// returns its last result. The last wait is cut short to leave the last
// try a tenth of the budget at least.
func (p retryPolicy) do(ctx context.Context, try func(context.Context) ([]workflows.NodeRecord, error)) ([]workflows.NodeRecord, error) {
	deadline := time.Now().Add(p.budget)
	wait := p.first
	for {
		tctx, cancel := context.WithTimeout(ctx, min(p.perTry, time.Until(deadline)))
		v, err := try(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || permanent(err) {
			return v, err
		}
		left := time.Until(deadline) - p.budget/10
		if left <= 0 {
			return v, err
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		wait *= 2
	}
}

// permanent: an answer from Temporal that asking again does not change —
// the namespace does not exist, or the credentials may not do that.
func permanent(err error) bool {
	var nf *serviceerror.NamespaceNotFound
	var pd *serviceerror.PermissionDenied
	return errors.As(err, &nf) || errors.As(err, &pd) || status.Code(err) == codes.PermissionDenied
}

// CheckWorkDir creates dir (a node's --work-dir) and checks that a file
// can be written there: a node whose external jobs could not write their
// logs would fail every one of them, in the run. (The caller names dir.)
func CheckWorkDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err // (*fs.PathError: "mkdir DIR: not a directory")
	}
	f, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return fmt.Errorf("not writable: %w", err)
	}
	name := f.Name()
	err = f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("write probe: %w", err)
	}
	return nil
}

// advertiseAddr is the collective address a node registers when it is
// given none: the bound address, but a wildcard host there (0.0.0.0, ::,
// none) — which a peer on another host would dial as its own — gives way to
// the local address of this host's route to the Temporal frontend at
// temporal (outbound: no packet is sent), else to the first non-loopback
// address of the host's name (hostIPs), else to a loopback address that
// outbound found. chosen says it replaced the host, and why how; why
// without chosen says why a wildcard address is kept.
func advertiseAddr(bound, temporal string, outbound func(target string) (net.IP, error), hostIPs func() ([]net.IP, error)) (addr, why string, chosen bool) {
	h, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound, "", false
	}
	if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
		return bound, "", false
	}
	target := strings.TrimPrefix(temporal, "dns:///")
	var reasons []string
	var loopback net.IP
	switch ip, err := outbound(target); {
	case err != nil:
		reasons = append(reasons, fmt.Sprintf("no route to Temporal at %s: %v", target, err))
	case DialableIP(ip):
		return net.JoinHostPort(ip.String(), port), "the local address of the route to Temporal at " + target, true
	default:
		loopback = ip
		reasons = append(reasons, fmt.Sprintf("the route to Temporal at %s leaves from %s", target, ip))
	}
	ips, err := hostIPs()
	for _, ip := range ips {
		if DialableIP(ip) {
			return net.JoinHostPort(ip.String(), port), "the first non-loopback address of the host's name (" + strings.Join(reasons, "; ") + ")", true
		}
	}
	if err != nil {
		reasons = append(reasons, fmt.Sprintf("host name: %v", err))
	} else {
		reasons = append(reasons, "the host's name has no non-loopback address")
	}
	if loopback != nil {
		return net.JoinHostPort(loopback.String(), port), "a loopback address, as Temporal is reached on one: only peers on this host can dial it (" +
			strings.Join(reasons, "; ") + ")", true
	}
	return bound, strings.Join(reasons, "; "), false
}

// defaultCommListen is the collective listener's address when none is
// given: this host's loopback, any port, while the Temporal frontend at
// temporal is reached on it (or where that cannot be told) — a node that
// reaches Temporal there is on Temporal's host, with its peers —, else
// every interface, any port, which advertiseAddr advertises as this
// host's address on its route to Temporal: a node on another host than
// Temporal's would register a loopback address none of its peers on
// other hosts can dial.
func defaultCommListen(temporal string, outbound func(target string) (net.IP, error)) string {
	if loopback, known := temporalOnLoopback(temporal, outbound); known && !loopback {
		return ":0"
	}
	return "127.0.0.1:0"
}

// temporalOnLoopback says whether the Temporal frontend at temporal
// (host:port, perhaps dns:///host:port) is reached over this host's
// loopback: named so (localhost, 127.0.0.1, ::1, a wildcard), or the route
// to it leaves from a loopback address. known is false when that cannot
// be told (no address, no route).
func temporalOnLoopback(temporal string, outbound func(target string) (net.IP, error)) (loopback, known bool) {
	target := strings.TrimPrefix(temporal, "dns:///")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false, false
	}
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		return true, true
	}
	ip, err := outbound(target)
	if err != nil || ip == nil {
		return false, false
	}
	return ip.IsLoopback(), true
}

// loopbackHost: host (of a host:port) is this host's loopback.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && (strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback())
}

// checkLoopbackAdvertise vets the collective address a node registers,
// advertise, against where Temporal is: a loopback address while Temporal
// at temporal is not on this host's loopback — its nodes may well be on
// other hosts, which would dial their own loopback and blame this node
// for every run's failure — is refused (err) when it only follows from
// --comm-listen (listen, as given), and said (warn) when --comm-advertise
// names it (explicit): the operator says every node runs on this host.
func checkLoopbackAdvertise(advertise, listen string, explicit bool, temporal string, outbound func(target string) (net.IP, error)) (warn string, err error) {
	if !loopbackHost(advertise) {
		return "", nil
	}
	if loopback, known := temporalOnLoopback(temporal, outbound); !known || loopback {
		return "", nil
	}
	// The fixes name the port asked for (any free one: PORT to choose).
	_, port, _ := net.SplitHostPort(listen)
	if p, err := strconv.Atoi(port); err != nil || p == 0 {
		port = "PORT"
	}
	if explicit {
		return fmt.Sprintf("advertising a loopback address, which only peers on this host can dial, while Temporal at %s is not on this host's loopback: "+
			"every node of this cluster must run on this host (else give --comm-listen 0.0.0.0:%s and leave --comm-advertise out, "+
			"or name this host's address)", temporal, port), nil
	}
	return "", fmt.Errorf("the collective listener is on this host's loopback (%s), which peers on other hosts cannot dial, and Temporal at %s is not "+
		"on this host's loopback: give --comm-listen 0.0.0.0:%s (this host's address on its route to Temporal is then advertised) "+
		"or --comm-advertise HOST:%[3]s; if every node of this cluster runs on this host, --comm-listen 127.0.0.1:%[3]s --comm-advertise 127.0.0.1:%[3]s says so",
		advertise, temporal, port)
}

// CheckCommAdvertise refuses a --comm-advertise that peers cannot dial:
// not HOST:PORT with a port 1..65535, or a wildcard IP (0.0.0.0, ::),
// which each peer would dial as its own host. (The caller names the flag.)
func CheckCommAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT, the address and port peers dial (e.g. 10.0.0.7:29500): %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q: want a number 1..65535, the port --comm-listen binds", addr, port)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is a wildcard address: peers would dial their own host; name this host's address, "+
			"or leave --comm-advertise out to have it picked", addr)
	}
	return nil
}

// PortRange is a range of TCP ports, Lo to Hi inclusive; the zero value
// is any free port (the kernel's ephemeral choice).
type PortRange struct{ Lo, Hi int }

// ParsePortRange reads LO-HI (or one port, PORT) as a PortRange; "" is
// the zero value.
func ParsePortRange(s string) (PortRange, error) {
	if s == "" {
		return PortRange{}, nil
	}
	lo, hi, ranged := strings.Cut(s, "-")
	if !ranged {
		hi = lo
	}
	var r PortRange
	var err1, err2 error
	r.Lo, err1 = strconv.Atoi(strings.TrimSpace(lo))
	r.Hi, err2 = strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("%q: want LO-HI, e.g. 29600-29699 (or one port)", s)
	}
	if err := r.check(); err != nil {
		return PortRange{}, err
	}
	return r, nil
}

// check refuses ports out of 1..65535 or a range that ends before it
// starts (the zero value passes).
func (r PortRange) check() error {
	switch {
	case r == PortRange{}:
		return nil
	case r.Lo < 1 || r.Hi > 65535:
		return fmt.Errorf("%s: ports go from 1 to 65535", r)
	case r.Lo > r.Hi:
		return fmt.Errorf("%s: the range ends before it starts", r)
	}
	return nil
}

func (r PortRange) String() string {
	if r == (PortRange{}) {
		return "any free port"
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// DialableIP: ip is an address of this host another host may dial (not
// unspecified, loopback, link-local or multicast).
func DialableIP(ip net.IP) bool {
	return ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsMulticast()
}

// OutboundIP is the local address of this host's route to target
// (host:port): a UDP socket connected towards it, which sends nothing.
func OutboundIP(target string) (net.IP, error) {
	d := net.Dialer{Timeout: 3 * time.Second} // (the name's lookup)
	conn, err := d.Dial("udp", target)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP, nil
}

// hostIPs are the addresses of this host's name.
func hostIPs() ([]net.IP, error) {
	name, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupIP(ctx, "ip", name)
}

// leave tells the Cluster that a gracefully stopping node is gone, so it is
// not handed to a run before its lease would run out.
func leave(c client.Client, clusterID string, node spec.Node, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// (With its incarnation: a worker started meanwhile under the same ID
	// stays in the pool.)
	err := c.SignalWorkflow(ctx, clusterID, "", spec.SignalMarkFailed,
		spec.MarkFailed{NodeID: node.ID, Reason: spec.ReasonWorkerStopped, Incarnation: node.Incarnation})
	if err != nil {
		log.Warn("could not deregister from the cluster; its lease will expire", zap.Error(err))
	}
}

// DefaultStopGrace is `worker node --stop-grace`'s default: under the
// 30 s that Kubernetes (terminationGracePeriodSeconds) waits before its
// SIGKILL.
const DefaultStopGrace = 25 * time.Second

// stopper is the part of a Temporal worker that stop uses.
type stopper interface{ Stop() }

// inFlight is what stop asks of the node's activities (activities.Node).
type inFlight interface {
	Running() int
	EndChunks()
	Settle(ctx context.Context) (run string, step int64, err error)
}

// stop ends a node worker that has left the Cluster: it takes no new
// task and asks the chunk in flight to end early — its ranks and their
// peers agree, within a fraction of a second, on a step to stop after and
// store a checkpoint there, and the run moves off the node at that
// boundary, losing no step — or lets an external job in flight finish,
// within o.StopGrace; then it waits out what is left of the grace for
// rank 0's checkpoint upload, which the run's recovery then finds
// committed; its collective listener, comm, closes in between. Whatever
// still runs after the grace (or o.Hurry) is cancelled or abandoned.
// It logs why the worker stops (reason: the signal) and that it stopped,
// which tells an operator a clean stop from a crash.
func stop(w stopper, acts inFlight, comm io.Closer, o NodeOptions, reason error, log *zap.Logger) {
	deadline := time.Now().Add(o.StopGrace)
	log.Info("node worker stopping", zap.NamedError("reason", reason))
	defer log.Info("node worker stopped")
	acts.EndChunks()
	if n := acts.Running(); n > 0 {
		log.Info("stopping: no new chunks; ending the one(s) in flight at a step the run's nodes agree on, with a checkpoint there (a second signal stops at once)",
			zap.Int("in_flight", n), zap.Duration("grace", o.StopGrace))
	}
	stopped := make(chan struct{})
	go func() {
		w.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-o.Hurry:
		log.Warn("stopping now: the chunk in flight is abandoned; its run recovers from its last checkpoint",
			zap.Int("in_flight", acts.Running()))
		return
	}
	if n := acts.Running(); n > 0 {
		log.Warn("stop grace over: the chunk in flight was cancelled; its run recovers from its last checkpoint",
			zap.Int("in_flight", n), zap.Duration("grace", o.StopGrace))
	}
	// No chunk runs here any more: the run's next one, planned on this
	// node, finds its address refusing connections at once (its process
	// gone, to its peers) instead of a listener that never answers while
	// the upload settles.
	_ = comm.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() {
		select {
		case <-o.Hurry:
			cancel()
		case <-ctx.Done():
		}
	}()
	switch run, step, err := acts.Settle(ctx); {
	case run == "":
	case err != nil:
		log.Warn("stopping with the checkpoint upload unfinished: the run recovers from an earlier one",
			zap.String("run", run), zap.Int64("step", step), zap.Error(err))
	default:
		log.Info("checkpoint upload finished before stopping", zap.String("run", run), zap.Int64("step", step))
	}
}

// bucketCheckTimeout bounds a node worker's look at its default
// checkpoint bucket as it starts.
const bucketCheckTimeout = 15 * time.Second

// checkDefaultBucket looks at the node's default checkpoint bucket (its
// --checkpoint-url: where every run without a checkpoint_url of its own
// saves) as the worker starts, for at most within (one cheap request;
// file:// and mem:// answer at once). A bucket a setting makes unusable
// — credentials it refuses, a bucket that does not exist, an endpoint
// named wrong: checkpoint.Misconfigured — refuses the start, saying what
// to fix: registered, the node would be handed out free, and its runs
// would fail at their first checkpoint. A store that is down or does not
// answer is only said: it may come back (a worker started before its
// MinIO), a run holds for its storage until it does, and a node cut off
// from a bucket its peers reach is found and left by its runs.
func checkDefaultBucket(ctx context.Context, o NodeOptions, within time.Duration, log *zap.Logger) error {
	if o.CheckpointURL == "" {
		return nil
	}
	if err := spec.CheckBucketURL(o.CheckpointURL); err != nil {
		return fmt.Errorf("node %s: --checkpoint-url: %w", o.ID, err)
	}
	url := checkpoint.Redact(o.CheckpointURL)
	st, err := checkpoint.OpenWithOptions(ctx, o.CheckpointURL, checkpoint.Options{RequestTimeout: o.CheckpointRequestTimeout})
	if err != nil {
		return fmt.Errorf("node %s: checkpoint bucket: %w", o.ID, err)
	}
	defer st.Close()
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err = st.Accessible(actx); err == nil {
		err = st.Writable(actx, o.ID) // (credentials that list may not write)
	}
	switch {
	case err == nil:
	case checkpoint.Misconfigured(err):
		return fmt.Errorf("node %s: default checkpoint bucket %s (--checkpoint-url) is unusable, and every run without a checkpoint_url "+
			"of its own would fail at its first checkpoint on this node: %w", o.ID, url, err)
	case ctx.Err() != nil: // stopping already: what comes next says so
	default:
		if actx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", within, err)
		}
		log.Warn("default checkpoint bucket not accessible: runs without checkpoint_url cannot store their checkpoints from this node until it is",
			zap.String("node", o.ID), zap.String("url", url), zap.Error(err))
	}
	if spec.MemoryBucket(o.CheckpointURL) {
		log.Warn("default checkpoint bucket mem:// is this process's memory: no other node sees its checkpoints, and a run "+
			"without checkpoint_url fails once another node needs them (give every node one bucket: file:// on one host, s3://, gs://, azblob://)",
			zap.String("url", url))
	}
	return nil
}

// hccnConf is where Ascend hosts keep their NPU NIC addresses.
const hccnConf = "/etc/hccn.conf"

// hccnDeviceIPs reads the address_<id>=<ip> lines of an hccn.conf as a
// list indexed by device id (nil when there is no such file).
func hccnDeviceIPs(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	byID := map[int]string{}
	top := -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		id, err := strconv.Atoi(strings.TrimPrefix(k, "address_"))
		if !ok || !strings.HasPrefix(k, "address_") || err != nil || id < 0 || id > 1023 {
			continue
		}
		byID[id] = strings.TrimSpace(v)
		top = max(top, id)
	}
	if top < 0 {
		return nil
	}
	out := make([]string, top+1)
	for id, ip := range byID {
		out[id] = ip
	}
	return out
}

// peerWatch is how often an external job's node asks its neighbour nodes'
// workers whether they are alive (activities.Node.PeerWatch): every member
// of a run's membership is a node worker with a collective listener.
const peerWatch = time.Second
