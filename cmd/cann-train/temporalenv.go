package main

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/workers"
)

// loadTemporalEnv reads Temporal's client environment configuration, as
// the temporal CLI and the SDKs do: the profile TEMPORAL_PROFILE names
// ("default" unless set) of the TOML file TEMPORAL_CONFIG_FILE names
// (~/.config/temporalio/temporal.toml unless set), with the TEMPORAL_*
// variables over it — TLS and mTLS (TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH,
// TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH, …), an
// API key (TEMPORAL_API_KEY: TLS on unless TEMPORAL_TLS=false), gRPC
// metadata (TEMPORAL_GRPC_META_*). Its address and namespace count where
// neither --address / --namespace nor TEMPORAL_ADDRESS /
// TEMPORAL_NAMESPACE say. One that cannot be read fails the commands
// that dial Temporal, naming it, and no other. Off with --env-config=false
// (quickstart's own node workers, which dial its embedded server).
func (e *env) loadTemporalEnv(flags *pflag.FlagSet) {
	if !e.envConfig {
		return
	}
	prof, err := loadTemporalProfile()
	if err == nil {
		if !flags.Changed("address") && os.Getenv("TEMPORAL_ADDRESS") == "" && prof.Address != "" {
			e.address = prof.Address
		}
		if !flags.Changed("namespace") && os.Getenv("TEMPORAL_NAMESPACE") == "" && prof.Namespace != "" {
			e.namespace = prof.Namespace
		}
		e.temporal, err = prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	}
	if err != nil {
		e.temporalErr = fmt.Errorf("read Temporal's client configuration (%s; --env-config=false ignores it): %w", temporalEnvSource(), err)
	}
}

// loadTemporalProfile is the client configuration's profile; a
// TEMPORAL_CONFIG_FILE that is not there is an error (the SDK reads it as
// empty).
func loadTemporalProfile() (envconfig.ClientConfigProfile, error) {
	if f := os.Getenv("TEMPORAL_CONFIG_FILE"); f != "" {
		if _, err := os.Stat(f); err != nil {
			return envconfig.ClientConfigProfile{}, err
		}
	}
	return envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{})
}

// temporalEnvSource names where the client configuration came from.
func temporalEnvSource() string {
	file := os.Getenv("TEMPORAL_CONFIG_FILE")
	if file == "" {
		file = envconfig.DefaultConfigFilePath()
	}
	profile := os.Getenv("TEMPORAL_PROFILE")
	if profile == "" {
		profile = envconfig.DefaultConfigFileProfile
	}
	return fmt.Sprintf("profile %q of %s, and the TEMPORAL_* variables", profile, file)
}

// clientOptions are the options commands dial Temporal with.
func (e *env) clientOptions(log *zap.Logger) (workers.ClientOptions, error) {
	if e.temporalErr != nil {
		return workers.ClientOptions{}, e.temporalErr
	}
	return workers.ClientOptions{Address: e.address, Namespace: e.namespace, Logger: log, Connection: e.temporal}, nil
}

// reachExport is the shell line that points other commands (in other
// terminals: status, pause, green override, worker) at a server this
// command runs at frontend addr in namespace, its Web UI at ui ("": none),
// or "" where they reach it as they are: the address and Web UI this
// command resolved (flags, TEMPORAL_ADDRESS, the client configuration,
// CANN_TRAIN_UI) are the server's, and so is the namespace another
// terminal resolves (otherTerminalsNamespace: not this command's
// --namespace). A wildcard host (`dev --ip 0.0.0.0`) is dialled as
// 127.0.0.1, and its Web UI linked at this host's address (thisHostIP),
// which other hosts' browsers reach too.
func (e *env) reachExport(addr, namespace, ui string) string {
	here, _ := e.reachExports(addr, namespace, ui, thisHostIP)
	return here
}

// reachExports is reachExport's line (here) and, for a server bound to
// every interface, the line for other hosts (elsewhere), which dial it at
// this host's address, hostIP's ("" when it finds none; always given
// otherwise: other hosts have nothing set).
func (e *env) reachExports(addr, namespace, ui string, hostIP func() net.IP) (here, elsewhere string) {
	var ip net.IP
	found := false
	thisHost := func() net.IP {
		if !found {
			ip, found = hostIP(), true
		}
		return ip
	}
	local, shownUI := addr, browsable(ui, thisHost)
	if port, ok := wildcardPort(addr); ok {
		local = net.JoinHostPort("127.0.0.1", port)
		if ip := thisHost(); ip != nil {
			// This host's workers too: dialing 127.0.0.1 they would take
			// Temporal for a local one and listen for their peers on
			// loopback, where the other hosts' nodes cannot dial them.
			local = net.JoinHostPort(ip.String(), port)
			elsewhere = "export TEMPORAL_ADDRESS=" + local
		}
	}
	nsPart := ""
	if namespace != e.otherTerminalsNamespace() {
		nsPart = " TEMPORAL_NAMESPACE=" + namespace
	}
	if elsewhere != "" {
		if namespace != "default" {
			elsewhere += " TEMPORAL_NAMESPACE=" + namespace
		}
		elsewhere += " CANN_TRAIN_UI=" + cmp.Or(shownUI, "none")
	}
	if have := e.webUI(os.Getenv("CANN_TRAIN_UI")); e.address == local && nsPart == "" && have == shownUI {
		return "", elsewhere
	}
	return "export TEMPORAL_ADDRESS=" + local + nsPart + " CANN_TRAIN_UI=" + cmp.Or(shownUI, "none"), elsewhere
}

// browsable is ui, a Web UI's URL, as a browser reaches it: one bound to
// every interface at this host's address (hostIP; 127.0.0.1 where none
// is found), not at the wildcard.
func browsable(ui string, hostIP func() net.IP) string {
	u, err := url.Parse(ui)
	if ui == "" || err != nil {
		return ui
	}
	port, ok := wildcardPort(u.Host)
	if !ok {
		return ui
	}
	host := "127.0.0.1"
	if ip := hostIP(); ip != nil {
		host = ip.String()
	}
	u.Host = net.JoinHostPort(host, port)
	return u.String()
}

// wildcardPort: addr (host:port) binds every interface, on port.
func wildcardPort(addr string) (port string, ok bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	ip := net.ParseIP(host)
	return port, host == "" || ip != nil && ip.IsUnspecified()
}

// otherTerminalsNamespace is the namespace a command in another terminal
// resolves, given no --namespace: TEMPORAL_NAMESPACE, else the client
// configuration's (read as commands read it by default), else "default".
func (e *env) otherTerminalsNamespace() string {
	if ns := os.Getenv("TEMPORAL_NAMESPACE"); ns != "" {
		return ns
	}
	if prof, err := loadTemporalProfile(); err == nil && prof.Namespace != "" {
		return prof.Namespace
	}
	return "default"
}

// thisHostIP is the address other hosts most likely reach this one at:
// the local address of its default route (a UDP socket connected towards
// a documentation address, TEST-NET-1, which sends nothing), else the
// first address of its interfaces that is not loopback or link-local;
// nil when it has none.
func thisHostIP() net.IP {
	if ip, err := workers.OutboundIP("192.0.2.1:9"); err == nil && workers.DialableIP(ip) {
		return ip
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && workers.DialableIP(n.IP) {
			return n.IP
		}
	}
	return nil
}
