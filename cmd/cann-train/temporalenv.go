package main

import (
	"cmp"
	"fmt"
	"net"
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
// or "" where they reach it as they are: the address, namespace and Web UI
// this command resolved (flags, TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE, the
// client configuration, CANN_TRAIN_UI) are the server's. A wildcard host
// (`dev --ip 0.0.0.0`) is dialled as 127.0.0.1.
func (e *env) reachExport(addr, namespace, ui string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	if e.address == addr && e.namespace == namespace && e.webUI(os.Getenv("CANN_TRAIN_UI")) == ui {
		return ""
	}
	line := "export TEMPORAL_ADDRESS=" + addr
	if e.namespace != namespace {
		line += " TEMPORAL_NAMESPACE=" + namespace
	}
	return line + " CANN_TRAIN_UI=" + cmp.Or(ui, "none")
}
