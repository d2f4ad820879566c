package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/spec"
)

func newFaultCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fault",
		Short: "Inject faults into a running run (testing and demos)",
	}
	cmd.AddCommand(newFaultKindCmd(e, spec.FaultKill, "SIGKILL a node worker when it completes a given step",
		`Tells the run to have node ID SIGKILL its own process once it completes
global step S (default: about two seconds of training after the run's step as
its status reads it, at least 20 steps), as a power cut would. A node training
the run now gets the fault at once (the chunk in flight strikes it); another one
when it next trains the run. The node worker must run with
--allow-fault-injection. The run then detects the loss, replaces the node and
resumes from its last checkpoint; see its recoveries with 'cann-train status
RUN'.`,
		"will SIGKILL itself"))
	cmd.AddCommand(newFaultKindCmd(e, spec.FaultFreeze, "SIGSTOP a node worker when it completes a given step (it hangs)",
		`Tells the run to have node ID SIGSTOP its own process (and an external
job's processes) once it completes global step S (default: about two
seconds of training after the run's step as its status reads it, at least
20 steps): the node hangs as one stuck in a driver call does,
its connections open and its listener accepting, until you SIGCONT or kill
it. It reaches the node as kill's does. The node worker must run with
--allow-fault-injection. The run finds it silent within its heartbeat
timeout, replaces it and resumes.`,
		"will SIGSTOP itself (and hang)"))
	return cmd
}

// checkRegistered refuses a fault for a node the run's Cluster does not
// know (a typo would wait for it for ever) or whose worker takes no faults
// (it refuses the fault, and the run only logs that); a registry that
// cannot be read is no reason to refuse.
func checkRegistered(ctx context.Context, c client.Client, st spec.RunStatus, node string) error {
	cluster := st.ClusterID
	if cluster == "" { // (a run started by an older build)
		cluster = spec.DefaultClusterID
	}
	reg, err := readRegistry(ctx, c, cluster)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(reg.Nodes))
	for _, r := range reg.Nodes {
		if r.Node.ID == node && r.Node.FaultInjection == spec.FaultsRefused {
			return fmt.Errorf("node %s takes no faults: its worker runs without --allow-fault-injection (for tests and demos: restart it with the flag)", node)
		}
		if r.Node.ID == node {
			return nil
		}
		ids = append(ids, r.Node.ID)
	}
	slices.Sort(ids)
	return fmt.Errorf("node %s is not registered with %s, which gives %s its nodes (registered: %s; `cann-train nodes` lists them)",
		node, cluster, st.RunID, strings.Join(ids, " "))
}

// newFaultKindCmd is `fault kill` or `fault freeze`.
func newFaultKindCmd(e *env, kind, short, long, does string) *cobra.Command {
	var run, node string
	var at int64
	c := &cobra.Command{
		Use:     kind + " --run RUN --node ID [--at-step S]",
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  cann-train fault %s --run mnist-demo --node node-2 --at-step 250", kind),
		Args:    wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run == "" || node == "" {
				return errors.New("--run and --node are required")
			}
			ctx := cmd.Context()
			c, err := dialQuiet(ctx, e)
			if err != nil {
				return err
			}
			defer c.Close()
			id := runID(run)
			st, live, closed, err := readProgress(ctx, c, id)
			if closed && err == nil {
				err = fmt.Errorf("run %s has ended (%s)", id, st.Phase)
			}
			if err != nil {
				return fmt.Errorf("a fault needs the run's progress: %w", err)
			}
			now := st.Step
			if live != nil {
				now = max(now, live.Step)
			}
			switch {
			case at <= 0:
				at = defaultFaultStep(st, now)
				if st.TotalSteps > 0 && at >= st.TotalSteps {
					return fmt.Errorf("run %s is at step %d of %d: too close to the end for a fault; give --at-step", id, now, st.TotalSteps)
				}
			case at <= now:
				return fmt.Errorf("run %s is at step %d already: give an --at-step after it", id, now)
			case st.TotalSteps > 0 && at >= st.TotalSteps:
				return fmt.Errorf("--at-step %d: run %s trains %d steps, so the fault would never strike; give a step before %d", at, id, st.TotalSteps, st.TotalSteps)
			}
			if err := checkRegistered(ctx, c, st, node); err != nil {
				return err
			}
			f := spec.InjectFault{NodeID: node, AtStep: at, Kind: kind}
			if err := c.SignalWorkflow(ctx, id, "", spec.SignalInjectFault, f); err != nil {
				return fmt.Errorf("signal %s: %w", id, err)
			}
			fmt.Fprintf(e.out, "%s %s after step %d of %s (at once where it has trained past it)\n", node, does, at, id)
			if len(st.Nodes) > 0 && !slices.Contains(st.Nodes, node) {
				fmt.Fprintf(e.out, "%s does not train %s now (nodes %s): the fault waits until it does\n", node, id, strings.Join(st.Nodes, " "))
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&run, "run", "", "run name or run/<name>")
	f.StringVar(&node, "node", "", "node ID")
	f.Int64Var(&at, "at-step", 0, "global step after which the fault strikes (default: about 2 s of training after the run's step, at least 20 steps; one the node has passed strikes at once)")
	atLeast(f, "1", "at-step")
	return c
}

// defaultFaultStep is the step a fault without --at-step strikes after,
// for a run whose status st reads step now: far enough ahead for the node
// to hear of it first (the signal reaches it within a second or so), two
// seconds of the run's measured pace, at least 20 steps — 20 for a run
// that holds (paused, waiting), whose pace is not its step's.
func defaultFaultStep(st spec.RunStatus, now int64) int64 {
	if st.Phase != spec.PhaseTraining {
		return now + 20
	}
	return now + max(20, int64(2*st.StepsPerSec))
}
