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
  cann-train dev --port 7233 --ui-port 8233 --db-file /tmp/temporal.db`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := workers.NewLogger(o.serverLog, e.logJSON)
			if err != nil {
				return fmt.Errorf("--server-log-level: %w", err)
			}
			if !cmd.Flags().Changed("ui-port") && o.port > 0 && o.port+1000 <= 65535 {
				o.uiPort = o.port + 1000 // as temporal server start-dev; the CLI's links expect it
			}
			srv, err := dev.StartServer(cmd.Context(), dev.ServerOptions{
				IP: o.ip, FrontendPort: o.port, UIPort: o.uiPort, DBFile: o.dbFile,
				Namespace: e.namespace, SearchAttributes: workers.SearchAttributes(), Logger: log.Named("temporal"),
			})
			if errors.Is(err, dev.ErrPortInUse) {
				return fmt.Errorf("%w; stop it, or pass --port 0 (any free port)", err)
			}
			if err != nil {
				return err
			}
			ui := srv.UIURL()
			if ui == "" {
				ui = "off (--ui-port 0)"
			}
			fmt.Fprintf(e.out, "Temporal dev server: %s (namespace %s, db %s)\nWeb UI: %s\nCtrl-C to stop.\n",
				srv.FrontendAddr(), srv.Namespace(), o.dbFile, ui)
			<-cmd.Context().Done()
			srv.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ip, "ip", "127.0.0.1", "IP to bind")
	f.IntVar(&o.port, "port", 7233, "frontend gRPC port (0: any free port)")
	f.IntVar(&o.uiPort, "ui-port", 8233, "Web UI port (0: no UI; default: --port + 1000)")
	bounded(f, "0", "65535", "port", "ui-port")
	f.StringVar(&o.dbFile, "db-file", filepath.Join(defaultDataDir(), "temporal.db"), "SQLite database file")
	f.StringVar(&o.serverLog, "server-log-level", "warn", "the Temporal server's log level: debug, info, warn, error (as temporal server start-dev's --log-level)")
	return cmd
}
