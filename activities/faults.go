package activities

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/spec"
)

// ErrTypeFaultsRefused is the ArmFault error type of a node that does not
// allow fault injection (its worker runs without --allow-fault-injection).
const ErrTypeFaultsRefused = "FaultInjectionNotAllowed"

// armedFaults are the faults handed to this node worker (ArmFault), by
// run: each strikes once a chunk of its run on this node completes its
// step (or a later one, when it came late). A chunk's own KillAtStep
// is fixed when the chunk starts; these reach the chunk in flight. The
// zero value is empty and ready.
type armedFaults struct {
	n  atomic.Int32 // how many are armed: the step loop's fast path
	mu sync.Mutex
	by map[string][]spec.InjectFault
}

func (a *armedFaults) arm(run string, f spec.InjectFault) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = make(map[string][]spec.InjectFault)
	}
	a.by[run] = append(a.by[run], f)
	a.n.Add(1)
}

// due takes the first fault armed for run whose step is at most step.
func (a *armedFaults) due(run string, step int64) (spec.InjectFault, bool) {
	if a.n.Load() == 0 {
		return spec.InjectFault{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.by[run] {
		if f.AtStep <= step {
			a.by[run] = append(a.by[run][:i:i], a.by[run][i+1:]...)
			if len(a.by[run]) == 0 {
				delete(a.by, run)
			}
			a.n.Add(-1)
			return f, true
		}
	}
	return spec.InjectFault{}, false
}

// ArmFault keeps a signalled fault on this node until a chunk of its run
// here completes the fault's step (a chunk already running included). A
// node that does not allow fault injection refuses it (non-retryable,
// ErrTypeFaultsRefused).
func (n *Node) ArmFault(_ context.Context, in spec.ArmFaultInput) error {
	if err := in.Fault.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), "BadFault", err)
	}
	if in.Fault.NodeID != n.ID || in.Fault.AtStep <= 0 {
		err := fmt.Errorf("arm fault %+v: not for node %s at a positive step", in.Fault, n.ID)
		return temporal.NewNonRetryableApplicationError(err.Error(), "BadFault", err)
	}
	if !n.AllowFaults {
		err := fmt.Errorf("node %s does not allow fault injection (its worker runs without --allow-fault-injection)", n.ID)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFaultsRefused, err)
	}
	n.faults.arm(in.RunID, in.Fault)
	n.Logger.Info("fault armed", zap.String("run", in.RunID), zap.Int64("at_step", in.Fault.AtStep), zap.String("kind", in.Fault.Kind))
	return nil
}

// strikeArmed strikes a fault armed for run once step is done.
func (n *Node) strikeArmed(log *zap.Logger, run string, step int64, groups []int) {
	if f, ok := n.faults.due(run, step); ok {
		n.injectedFault(log, step, f.Freeze(), groups)
	}
}
