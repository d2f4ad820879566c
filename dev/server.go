// Package dev holds local-only helpers: the embedded Temporal dev server
// (go.temporal.io/server on SQLite, with the Web UI) and the local
// multi-process cluster launcher used by the quickstart and the tests.
//
// Nothing here is needed in production, where workers dial a real Temporal
// cluster; nothing in workflows/, activities/ or engine/ knows which it is.
package dev

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	tserver "go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cann-train/cann-train/internal/pidlock"
)

// ServerOptions configures the embedded server. The zero value is usable:
// in-memory SQLite, namespace "default", frontend on 127.0.0.1 with a free
// port, no Web UI.
type ServerOptions struct {
	// IP the frontend and UI bind to. Default 127.0.0.1.
	IP string
	// FrontendPort for gRPC. 0 picks a free port.
	FrontendPort int
	// UIPort for the Web UI. 0 disables the UI; -1 picks a free port.
	UIPort int
	// DBFile is the SQLite file. Empty means in-memory (lost at Stop).
	// The server holds a lock on DBFile + ".lock" while it runs: a second
	// server on the same file (which would take its history shard away
	// from the first) fails to start with ErrDBInUse.
	DBFile string
	// Namespace to create. Default "default".
	Namespace string
	// SearchAttributes to register at start, name → type.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's logs. Default: warnings and above to stderr.
	Logger *zap.Logger
	// SuggestContinueAsNewEvents is the history length at which the
	// server suggests continue-as-new to a workflow (0: the server's
	// default, 4096 events); tests lower it to reach a long history's
	// behaviour in seconds.
	SuggestContinueAsNewEvents int
}

// Server is a running embedded Temporal server.
type Server struct {
	level        zap.AtomicLevel
	srv          tserver.Server
	ui           *uiserver.Server
	frontendAddr string
	uiAddr       string
	namespace    string
	// dbLock holds the database file's lock (nil: in memory).
	dbLock *os.File
}

// StartServer starts a real Temporal server in this process. It returns
// once the frontend accepts connections.
func StartServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Logger == nil {
		l, err := zap.NewProduction(zap.IncreaseLevel(zap.WarnLevel))
		if err != nil {
			return nil, fmt.Errorf("dev: build logger: %w", err)
		}
		opts.Logger = l
	}
	// Before anything else: a second server on this file would take its
	// history shard from the first, each failing the other's writes.
	var dbLock *os.File
	if opts.DBFile != "" {
		var err error
		if dbLock, err = lockDB(opts.DBFile); err != nil {
			return nil, err
		}
	}
	srv, err := startServer(ctx, opts)
	if err != nil {
		unlockDB(dbLock)
		return nil, err
	}
	srv.dbLock = dbLock
	return srv, nil
}

// startServer is StartServer with the database file locked.
func startServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	// Stop raises this to Error: a stopping server's own workers complain
	// loudly about the connections it closes.
	level := zap.NewAtomicLevelAt(zapcore.DebugLevel)
	opts.Logger = opts.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return levelCore{Core: c, min: level}
	}))
	// Free ports are picked ahead of binding (FreePort), so another
	// process may take one first; the HTTP API's bind fails then with an
	// error (the gRPC listeners' bind ends the process: nothing to retry),
	// and the server is built again on fresh ports.
	pickFrontend, pickUI := opts.FrontendPort == 0, opts.UIPort < 0
	// A port asked for by number must be free now: the server's gRPC bind
	// failing would end the process (a Fatal log), with no error to return.
	if !pickFrontend {
		if err := portFree(opts.IP, opts.FrontendPort, false); err != nil {
			return nil, err
		}
	}
	if opts.UIPort > 0 {
		if err := portFree(opts.IP, opts.UIPort, true); err != nil {
			return nil, err
		}
	}
	var srv tserver.Server
	ports := &portPicker{ip: opts.IP, taken: map[int]bool{opts.FrontendPort: true, opts.UIPort: true}}
	err := retryPortClash(maxPortAttempts, func() error {
		var err error
		if pickFrontend {
			if opts.FrontendPort, err = ports.free(); err != nil {
				return err
			}
		}
		if pickUI {
			if opts.UIPort, err = ports.free(); err != nil {
				return err
			}
		}
		srv, err = newServer(opts, ports)
		if errors.Is(err, syscall.EADDRINUSE) {
			opts.Logger.Warn("dev: a port was taken before the server bound it", zap.Error(err))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("dev: start server: %w", err)
	}
	s := &Server{
		level:        level,
		srv:          srv,
		frontendAddr: net.JoinHostPort(opts.IP, strconv.Itoa(opts.FrontendPort)),
		namespace:    opts.Namespace,
	}
	if opts.UIPort > 0 {
		s.uiAddr = net.JoinHostPort(opts.IP, strconv.Itoa(opts.UIPort))
		s.ui = uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
			Host:                opts.IP,
			Port:                opts.UIPort,
			TemporalGRPCAddress: s.frontendAddr,
			EnableUI:            true,
			CORS:                uiconfig.CORS{CookieInsecure: true},
			HideLogs:            true,
			DisableNewsFetch:    true,
		}))
		go func() {
			if err := s.ui.Start(); err != nil && !errors.Is(err, context.Canceled) {
				opts.Logger.Warn("web UI stopped", zap.Error(err))
			}
		}()
	}
	if err := waitTCP(ctx, s.frontendAddr); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServer builds the Temporal server of opts (ports chosen; ports picks
// its services' own).
func newServer(opts ServerOptions, ports *portPicker) (tserver.Server, error) {
	conf, err := buildConfig(opts, ports)
	if err != nil {
		return nil, err
	}
	logger := tlog.NewZapLogger(opts.Logger)
	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("dev: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("dev: claim mapper: %w", err)
	}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for name, svc := range map[primitives.ServiceName]string{
		primitives.FrontendService: "frontend", primitives.HistoryService: "history",
		primitives.MatchingService: "matching", primitives.WorkerService: "worker",
	} {
		hosts[name] = static.SingleLocalHost(net.JoinHostPort(opts.IP, strconv.Itoa(conf.Services[svc].RPC.GRPCPort)))
	}
	dyn := dynamicconfig.StaticClient{
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():      true,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
		// A deleted closed workflow goes once its close task is acked in
		// the persisted queue state, which by default is written every
		// 30 s: `temporal workflow delete` took ~30 s to show. One small
		// SQLite write a second is nothing to a dev server.
		dynamicconfig.TransferProcessorUpdateAckInterval.Key(): time.Second,
		// A run's AcquireNodes Update waits for nodes by design (a node
		// lost without a spare: up to node_wait); the frontend logged each
		// such call as a "Slow gRPC call" warning after 5 s, on the
		// quickstart user's terminal.
		dynamicconfig.SlowRequestLoggingThreshold.Key(): 10 * time.Minute,
	}
	if opts.SuggestContinueAsNewEvents > 0 {
		dyn[dynamicconfig.HistoryCountSuggestContinueAsNew.Key()] = opts.SuggestContinueAsNewEvents
	}
	srv, err := tserver.NewServer(
		tserver.WithConfig(conf),
		tserver.ForServices(tserver.DefaultServices),
		tserver.WithStaticHosts(hosts),
		tserver.WithLogger(logger),
		tserver.WithAuthorizer(authorizer),
		tserver.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		tserver.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		return nil, fmt.Errorf("dev: new server: %w", err)
	}
	return srv, nil
}

// FrontendAddr is host:port of the gRPC frontend.
func (s *Server) FrontendAddr() string { return s.frontendAddr }

// UIURL is the Web UI's base URL, or "" when the UI is off.
func (s *Server) UIURL() string {
	if s.uiAddr == "" {
		return ""
	}
	return "http://" + s.uiAddr
}

// Namespace the server created.
func (s *Server) Namespace() string { return s.namespace }

// Quiet keeps the server's errors out of its log from now on (panics
// still go there): for a teardown, in which the server fails the requests
// of the workers being stopped — polls on closed task queues, cancelled
// updates — and says so at error level, after what the user came for.
func (s *Server) Quiet() { s.level.SetLevel(zapcore.DPanicLevel) }

// Stop shuts the UI and the server down.
func (s *Server) Stop() {
	if s.level.Level() < zapcore.ErrorLevel { // (not below Quiet's)
		s.level.SetLevel(zapcore.ErrorLevel)
	}
	if s.ui != nil {
		s.ui.Stop()
	}
	if err := s.srv.Stop(); err != nil {
		_ = err // the server logs its own shutdown problems
	}
	unlockDB(s.dbLock)
	s.dbLock = nil
}

// ErrDBInUse is a database file another server holds (its lock file's).
var ErrDBInUse = errors.New("in use by another cann-train dev server")

// lockDB takes the exclusive lock on db's lock file, db + ".lock", and
// writes this process's ID there; it fails at once with ErrDBInUse, naming
// the holder's, when another process holds it (a flock: released with
// its file, so when its process ends, however). The file stays after
// unlockDB: removing it would let a server that opened it meanwhile lock
// a file no later one sees.
func lockDB(db string) (*os.File, error) {
	path := db + ".lock"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("dev: database dir: %w", err)
	}
	f, err := pidlock.TryLock(path)
	var held *pidlock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("dev: db file %s is %w (%s; lock file %s)", db, ErrDBInUse, held.Holder, path)
	case err != nil:
		return nil, fmt.Errorf("dev: lock db file %s (%s): %w", db, path, err)
	}
	pidlock.WritePID(f)
	return f, nil
}

// unlockDB releases lockDB's lock (nil: none).
func unlockDB(f *os.File) {
	if f == nil {
		return
	}
	_ = f.Truncate(0) // (no stale pid for the next server's message)
	_ = f.Close()     // (releases the flock)
}

func buildConfig(opts ServerOptions, ports *portPicker) (*config.Config, error) {
	sqlConf := config.SQL{PluginName: sqliteplugin.PluginName}
	if opts.DBFile == "" {
		sqlConf.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		sqlConf.DatabaseName = strconv.Itoa(rand.IntN(1 << 30))
	} else {
		sqlConf.ConnectAttributes = map[string]string{"mode": "rwc"}
		sqlConf.DatabaseName = opts.DBFile
		if _, err := os.Stat(opts.DBFile); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(opts.DBFile), 0o755); err != nil {
				return nil, fmt.Errorf("dev: database dir: %w", err)
			}
			if err := sqliteschema.SetupSchema(&sqlConf); err != nil {
				return nil, fmt.Errorf("dev: set up schema in %s: %w", opts.DBFile, err)
			}
		}
	}
	nsConf, err := sqliteschema.NewNamespaceConfig("active", opts.Namespace, false, opts.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("dev: namespace config: %w", err)
	}
	if err := sqliteschema.CreateNamespaces(&sqlConf, nsConf); err != nil {
		return nil, fmt.Errorf("dev: create namespace %q: %w", opts.Namespace, err)
	}

	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = opts.IP
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: &sqlConf}}
	httpPort, err := ports.free()
	if err != nil {
		return nil, err
	}
	frontend := net.JoinHostPort(opts.IP, strconv.Itoa(opts.FrontendPort))
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontend,
				HTTPAddress:            net.JoinHostPort(opts.IP, strconv.Itoa(httpPort)),
				// No ClusterID: a new database gets a random UUID (the
				// server warned on any non-UUID name), an existing one
				// keeps its own.
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{}
	for _, name := range []string{"frontend", "history", "matching", "worker"} {
		var svc config.Service
		svc.RPC.BindOnIP = opts.IP
		if name == "frontend" {
			svc.RPC.GRPCPort = opts.FrontendPort
			svc.RPC.HTTPPort = httpPort
		} else if svc.RPC.GRPCPort, err = ports.free(); err != nil {
			return nil, err
		}
		conf.Services[name] = svc
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = frontend
	return &conf, nil
}

// maxPortAttempts bounds StartServer's attempts to bind free ports.
const maxPortAttempts = 5

// retryPortClash calls try until it succeeds, fails otherwise than on a
// port another process took (EADDRINUSE), or has been called attempts
// times; it returns try's last error.
func retryPortClash(attempts int, try func() error) error {
	for i := 1; ; i++ {
		err := try()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || i >= attempts {
			return err
		}
	}
}

// ErrPortInUse is a port StartServer was asked to use that another process
// holds (a *PortInUseError says which).
var ErrPortInUse = errors.New("port in use")

// PortInUseError is ErrPortInUse for one port: the frontend's, or the Web
// UI's (UI).
type PortInUseError struct {
	IP   string
	Port int
	UI   bool
}

// Error names the port asked for; a Temporal dev server is named as the
// likely holder only of the port such a server takes by default (7233,
// the Web UI's 8233), not of any port.
func (e *PortInUseError) Error() string {
	what, usual := "frontend", 7233
	if e.UI {
		what, usual = "Web UI", 8233
	}
	who := "another process"
	if e.Port == usual {
		who += " (a Temporal dev server — `temporal server start-dev`, `cann-train dev` or a quickstart — takes it by default)"
	}
	return fmt.Sprintf("%s port %d on %s: %v by %s", what, e.Port, e.IP, ErrPortInUse, who)
}

func (e *PortInUseError) Unwrap() error { return ErrPortInUse }

// portFree checks that port on ip, the Web UI's or the frontend's, can be
// bound now.
func portFree(ip string, port int, ui bool) error {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return &PortInUseError{IP: ip, Port: port, UI: ui}
	}
	if err != nil {
		what := "frontend"
		if ui {
			what = "Web UI"
		}
		return fmt.Errorf("dev: %s port %d on %s: %w", what, port, ip, err)
	}
	return l.Close()
}

// FreePort finds a free TCP port on ip for a server that binds it later.
// It prefers a port below the kernel's ephemeral range (picked at random,
// checked free): the ports of listeners on port 0 elsewhere — node
// workers' collective links, other tests — come from that range, so none
// of them can take this one before the server binds it (an embedded
// Temporal service that loses its port ends the process). Without such a
// port, it asks the kernel for one. Callers that can bind directly should.
func FreePort(ip string) (int, error) {
	if lo := ephemeralLow(); lo-minPickedPort >= 1000 {
		for range 32 {
			p := minPickedPort + rand.IntN(lo-minPickedPort)
			if l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p))); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("dev: free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portPicker hands out free ports for one server, never the same one
// twice: FreePort checks that a port is free now, not that an earlier pick
// has not taken it, and two of a server's services on one port end the
// process (the second gRPC bind is a Fatal log: seen in CI).
type portPicker struct {
	ip    string
	taken map[int]bool
}

func (p *portPicker) free() (int, error) {
	for range 64 {
		port, err := FreePort(p.ip)
		if err != nil {
			return 0, err
		}
		if !p.taken[port] {
			p.taken[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("dev: no free port on %s apart from the %d this server took", p.ip, len(p.taken))
}

// minPickedPort is the lowest port FreePort picks at random: above the
// well-known and most registered service ports.
const minPickedPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// net.ipv4.ip_local_port_range), 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= 0 || hi < lo {
		return 0
	}
	return lo
}

func waitTCP(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dev: frontend %s not reachable: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// levelCore drops entries below a level that can change at run time.
type levelCore struct {
	zapcore.Core
	min zap.AtomicLevel
}

func (c levelCore) Enabled(l zapcore.Level) bool { return c.min.Enabled(l) && c.Core.Enabled(l) }

func (c levelCore) With(f []zapcore.Field) zapcore.Core {
	return levelCore{Core: c.Core.With(f), min: c.min}
}

func (c levelCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.min.Enabled(e.Level) {
		return ce
	}
	return c.Core.Check(e, ce)
}
