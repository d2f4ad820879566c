package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/workers"
)

// devUIPort is the Web UI port of a dev server on frontend port port
// without --ui-port: port + 1000, as temporal server start-dev (the CLI's
// links expect it); with port 0 (any free port), or no room above it, any
// free port (dev.ServerOptions.UIPort -1) — not 8233, where a second such
// server's UI would clash with the first's.
func devUIPort(port int) int {
	if port > 0 && port+1000 <= 65535 {
		return port + 1000
	}
	return -1
}

// devStartError adds to a dev server's start failure the flag that gets
// past it: for a port in use, the flag of that port; for a database
// another server holds, another --db-file.
func devStartError(err error) error {
	var inUse *dev.PortInUseError
	switch {
	case errors.As(err, &inUse) && inUse.UI:
		return fmt.Errorf("%w; stop it, or pass --ui-port -1 (any free port) or --ui-port 0 (no Web UI)", err)
	case errors.As(err, &inUse):
		return fmt.Errorf("%w; stop it, or pass --port 0 (any free port; a second server also needs its own --db-file)", err)
	case errors.Is(err, dev.ErrDBInUse):
		return fmt.Errorf("%w; stop that server, or give this one another --db-file", err)
	}
	return err
}

func defaultDataDir() string {
	if d := os.Getenv("CANN_TRAIN_HOME"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".cann-train"
	}
	return filepath.Join(home, ".cann-train")
}

type devOptions struct {
	ip     string
	port   int
	uiPort int
	dbFile string
	// serverLog is the server's log level (--log-level is ours).
	serverLog string
}

func newDevCmd(e *env) *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the embedded Temporal dev server (SQLite file, Web UI)",
		Example: `  cann-train dev
  cann-train dev --port 7233 --ui-port 8233 --db-file /tmp/temporal.db
  cann-train dev --ip 0.0.0.0      # workers on other hosts too: it prints the address they dial`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := workers.NewLogger(o.serverLog, e.logJSON)
			if err != nil {
				return fmt.Errorf("--server-log-level: %w", err)
			}
			if !cmd.Flags().Changed("ui-port") {
				o.uiPort = devUIPort(o.port)
			}
			srv, err := dev.StartServer(cmd.Context(), dev.ServerOptions{
				IP: o.ip, FrontendPort: o.port, UIPort: o.uiPort, DBFile: o.dbFile,
				Namespace: e.namespace, SearchAttributes: workers.SearchAttributes(), Logger: log.Named("temporal"),
			})
			if err != nil {
				return devStartError(err)
			}
			ui := browsable(srv.UIURL(), thisHostIP) // (not http://0.0.0.0:…)
			if ui == "" {
				ui = "off (--ui-port 0)"
			}
			fmt.Fprintf(e.out, "Temporal dev server: %s (namespace %s, db %s)\nWeb UI: %s\n",
				srv.FrontendAddr(), srv.Namespace(), o.dbFile, ui)
			// Workers and commands in other terminals dial 7233 unless told;
			// on other hosts (--ip 0.0.0.0), this host's address.
			here, elsewhere := e.reachExports(srv.FrontendAddr(), srv.Namespace(), srv.UIURL(), thisHostIP)
			if here != "" && here == elsewhere {
				fmt.Fprintf(e.out, "Other terminals, on this host and others (workers, run, status), reach it with: %s\n"+
					"  (this host's address on its default route: this host's node workers then listen for their peers on every interface; "+
					"name another address where the other hosts reach this one elsewhere)\n", here)
				here, elsewhere = "", ""
			}
			if here != "" {
				fmt.Fprintf(e.out, "Other terminals (workers, run, status) reach it with: %s\n", here)
			}
			if elsewhere != "" {
				fmt.Fprintf(e.out, "Other hosts reach it with: %s\n  (this host's address on its default route; name another where they reach it elsewhere)\n", elsewhere)
			}
			fmt.Fprintln(e.out, "Ctrl-C to stop.")
			<-cmd.Context().Done()
			srv.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ip, "ip", "127.0.0.1", "IP to bind (0.0.0.0: every interface, for workers and commands on other hosts)")
	f.IntVar(&o.port, "port", 7233, "frontend gRPC port (0: any free port, and the Web UI on any free port too unless --ui-port is given)")
	// (Its default depends on --port: devUIPort.)
	f.IntVar(&o.uiPort, "ui-port", 0, "Web UI port (0: no UI; -1: any free port; default: --port + 1000, any free port with --port 0)")
	bounded(f, "0", "65535", "port")
	bounded(f, "-1", "65535", "ui-port")
	f.StringVar(&o.dbFile, "db-file", filepath.Join(defaultDataDir(), "temporal.db"), "SQLite database file (one server at a time: a second server on it refuses to start)")
	f.StringVar(&o.serverLog, "server-log-level", "warn", "the Temporal server's log level: debug, info, warn, error (as temporal server start-dev's --log-level)")
	return cmd
}
