// Command cann-train trains models across a cluster of nodes under a durable
// Temporal workflow. `cann-train quickstart` runs everything locally: an
// embedded Temporal server with its Web UI, a control worker, node-worker
// child processes and one real training run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/internal/suggest"
	"github.com/cann-train/cann-train/workers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{out: os.Stdout, err: os.Stderr, command: dev.SelfCommand}
	err := newRootCmd(e).ExecuteContext(ctx)
	stop()
	if line, failed, code := lastWords(err, ctx.Err() != nil); code != 0 {
		if line != "" {
			printLast(os.Stderr, e.logJSON, failed, line)
		}
		os.Exit(code)
	}
}

// lastWords is how a command that returned err ends (interrupted: Ctrl-C
// or SIGTERM came): the line it ends on ("": none) — its error (failed),
// or what an interruption leaves going — and the exit code.
func lastWords(err error, interrupted bool) (line string, failed bool, code int) {
	var quiet *exitError
	var stopped *interruptedError
	switch {
	case err == nil:
		return "", false, 0
	case interrupted && errors.Is(err, context.Canceled):
		// Nothing went wrong with the command, and runs it started or
		// watched go on.
		if errors.As(err, &stopped) {
			return "cann-train: " + stopped.what, false, 130
		}
		return "cann-train: interrupted", false, 130
	case errors.As(err, &quiet):
		return "", true, 1
	}
	return "cann-train: " + err.Error(), true, 1
}

// printLast writes the line a command ends on, its error (failed) or
// that it was interrupted: plain text, or with --log-json a JSON log line
// like the rest of the log, which a log shipper parsing it keeps.
func printLast(w io.Writer, logJSON, failed bool, line string) {
	if !logJSON {
		fmt.Fprintln(w, line)
		return
	}
	log := workers.NewJSONLogger(w)
	if failed {
		log.Error(line)
	} else {
		log.Info(line)
	}
	_ = log.Sync()
}

// env is what commands need from the outside world; tests replace it.
type env struct {
	out, err io.Writer
	// command runs `cann-train <args>` as a child process.
	command dev.CommandFunc

	address   string
	namespace string
	logLevel  string
	logJSON   bool
	// envConfig: read Temporal's client environment configuration
	// (loadTemporalEnv); temporal is the connection it sets up (TLS,
	// credentials, gRPC metadata), temporalErr why it could not be read.
	envConfig   bool
	temporal    client.Options
	temporalErr error
}

// interruptedError is a command that Ctrl-C ended (err: the context's
// Canceled), with what it leaves going, said instead of "interrupted":
// "stopped watching run/x; the run goes on …".
type interruptedError struct {
	what string
	err  error
}

func (e *interruptedError) Error() string { return e.what }
func (e *interruptedError) Unwrap() error { return e.err }

// exitError fails the command without printing again.
type exitError struct{ err error }

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func (e *env) logger() (*zap.Logger, error) { return workers.NewLogger(e.logLevel, e.logJSON) }

func newRootCmd(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "cann-train",
		Short: "Durable distributed training on Temporal",
		Long: `cann-train trains models across a cluster of nodes. A durable Temporal workflow
drives each run through node acquisition, training in chunks of steps,
checkpoints and replacement of failed nodes.

Start here:  cann-train quickstart`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlagBounds(cmd); err != nil {
				return err
			}
			e.loadTemporalEnv(cmd.Flags())
			return nil
		},
	}
	root.SetOut(e.out)
	root.SetErr(e.err)
	pf := root.PersistentFlags()
	pf.StringVar(&e.address, "address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port (env TEMPORAL_ADDRESS, else the client configuration's)")
	pf.StringVar(&e.namespace, "namespace", envOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (env TEMPORAL_NAMESPACE, else the client configuration's)")
	pf.BoolVar(&e.envConfig, "env-config", true, "read Temporal's client configuration, as the temporal CLI does: TLS, mTLS, API key, gRPC metadata "+
		"(TEMPORAL_* variables over the TEMPORAL_PROFILE profile of TEMPORAL_CONFIG_FILE, default ~/.config/temporalio/temporal.toml)")
	pf.StringVar(&e.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.BoolVar(&e.logJSON, "log-json", false, "log as JSON")
	root.AddCommand(
		newQuickstartCmd(e),
		newDevCmd(e),
		newWorkerCmd(e),
		newRunCmd(e),
		newStatusCmd(e),
		newWatchCmd(e),
		newCheckpointCmd(e),
		newBenchCmd(e),
		newSearchCmd(e),
		newTopoScanCmd(e),
		newFaultCmd(e),
		newGreenCmd(e),
		newPauseCmd(e), newResumeCmd(e), newScaleCmd(e), newCancelCmd(e),
		newDashboardCmd(e),
		newNodesCmd(e),
	)
	groupsRefuseUnknown(root)
	root.SetFlagErrorFunc(suggestFlags)
	return root
}

// suggestFlags adds to an unknown flag's error the command's flags it
// most likely meant ("unknown flag: --list-preset (did you mean
// --list-presets?)"), or where to find them.
func suggestFlags(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var flags []string
	add := func(f *pflag.Flag) {
		if !f.Hidden {
			flags = append(flags, "--"+f.Name)
		}
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	if guess := suggest.DidYouMean(suggest.Nearest("--"+name, flags)); guess != "" {
		return fmt.Errorf("%w (%s)", err, guess)
	}
	return fmt.Errorf("%w ('%s --help' lists its flags)", err, cmd.CommandPath())
}

// addUIFlag adds --ui, the Temporal Web UI base URL for links.
func addUIFlag(f *pflag.FlagSet, ui *string) {
	f.StringVar(ui, "ui", envOr("CANN_TRAIN_UI", ""), "Web UI base URL for links (env CANN_TRAIN_UI; default: the --address host at port + 1000, where 'cann-train dev' serves it — over TLS, Temporal Cloud's UI for its endpoints, else none; none: no links)")
}

// webUI resolves --ui: ui when set ("none": no links), else the UI beside
// the frontend at --address, port + 1000, as `cann-train dev` and
// `temporal server start-dev` serve it — on plain gRPC. Over TLS the
// frontend is no dev server: Temporal Cloud's UI for its endpoints, else
// no guess.
func (e *env) webUI(ui string) string {
	switch ui {
	case "none":
		return ""
	case "":
	default:
		return ui
	}
	host, port, err := net.SplitHostPort(e.address)
	if e.temporal.ConnectionOptions.TLS != nil {
		if err == nil && strings.HasSuffix(host, ".tmprl.cloud") {
			return "https://cloud.temporal.io"
		}
		return ""
	}
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p < 1 || p+1000 > 65535 {
		return ""
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p+1000))
}

// uiLink is webUI for links a command prints: a guessed UI (no --ui,
// no CANN_TRAIN_UI) only where something listens at it — a dev server
// started with --ui-port 0 has none, and a link to it would be dead.
func (e *env) uiLink(ui string) string {
	base := e.webUI(ui)
	if ui != "" || base == "" {
		return base
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return base // (Temporal Cloud's)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 300*time.Millisecond)
	if err != nil {
		return ""
	}
	_ = conn.Close()
	return base
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// wantArgs checks a command's positional arguments — min to max of the
// upper-case words its usage line names after it ("status RUN") — and
// says which one is missing, or which is one too many, with the usage
// line (cobra's own: "accepts 1 arg(s), received 0").
func wantArgs(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ") // (errors print after "cann-train: ")
		switch {
		case len(args) < min:
			what := "an argument"
			if names := positionalNames(cmd.Use); len(args) < len(names) {
				what = names[len(args)]
			}
			return fmt.Errorf("%s needs %s (usage: %s)", name, what, cmd.UseLine())
		case len(args) > max && max == 0:
			hint := ""
			if f := cmd.Flags().ShorthandLookup("f"); f != nil && f.Name == "file" {
				hint = "; a job file is given with -f"
			}
			return fmt.Errorf("%s takes no arguments, got %q%s (usage: %s)", name, args[0], hint, cmd.UseLine())
		case len(args) > max:
			return fmt.Errorf("%s takes at most %d argument(s), got %d: %q is one too many (usage: %s)",
				name, max, len(args), args[max], cmd.UseLine())
		}
		return nil
	}
}

// wantRun checks the arguments of a command that takes RUN first (and
// up to max in all) as wantArgs does, and refuses an empty RUN; a missing
// one is pointed to the list of runs.
func wantRun(max int) cobra.PositionalArgs {
	want := wantArgs(1, max)
	return func(cmd *cobra.Command, args []string) error {
		if err := want(cmd, args); err != nil && len(args) == 0 {
			return fmt.Errorf("%w; cann-train dashboard lists the runs", err)
		} else if err != nil {
			return err
		}
		if strings.TrimSpace(runName(args[0])) == "" {
			return fmt.Errorf("RUN %q is empty: give a run's name, or run/<name> (cann-train dashboard lists the runs)", args[0])
		}
		return nil
	}
}

// positionalNames are the argument names in a usage line: the upper-case
// words after the command's name, up to the first flag or aside.
func positionalNames(use string) []string {
	var names []string
	for _, w := range strings.Fields(use)[1:] {
		if w != strings.ToUpper(w) || strings.ContainsAny(w[:1], "-[(") {
			break
		}
		names = append(names, w)
	}
	return names
}

// groupsRefuseUnknown makes every command that only groups others (bench,
// checkpoint, fault, green, worker) refuse a subcommand it does not know,
// as the root does, suggesting near names — cobra checks names at the root
// only, and a group printed its help and exited 0 (`checkpoint list`).
func groupsRefuseUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groupsRefuseUnknown(sub)
	}
	if !c.HasParent() || c.Runnable() || !c.HasSubCommands() {
		return
	}
	c.SuggestionsMinimumDistance = 2
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, " or "))
		}
		return fmt.Errorf("%s; '%s --help' lists its commands", msg, cmd.CommandPath())
	}
}
