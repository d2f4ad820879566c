package main

import (
	"context"
	"time"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
)

// faultWatch notes when injected faults strike their nodes' processes: a
// kill when the process exits, a freeze when it is seen stopped (a frozen
// process does not exit: it is polled until the watch ends).
type faultWatch struct {
	stop   context.CancelFunc
	faults []spec.InjectFault
	procs  map[string]*dev.Proc
	frozen map[string]chan time.Time
}

// watchFaults watches faults, whose nodes' processes are procs, until
// struck is called (or ctx ends).
func watchFaults(ctx context.Context, faults []spec.InjectFault, procs map[string]*dev.Proc) *faultWatch {
	wctx, stop := context.WithCancel(ctx)
	w := &faultWatch{stop: stop, faults: faults, procs: procs, frozen: map[string]chan time.Time{}}
	for _, f := range faults {
		if p := procs[f.NodeID]; p != nil && f.Freeze() {
			ch := make(chan time.Time, 1)
			w.frozen[f.NodeID] = ch
			go func() { ch <- p.StoppedAt(wctx, 2*time.Millisecond) }()
		}
	}
	return w
}

// struck ends the watch and says when each fault struck its node; one that
// did not (the run ended before its step) is absent.
func (w *faultWatch) struck() map[string]injected {
	w.stop()
	out := map[string]injected{}
	for _, f := range w.faults {
		p := w.procs[f.NodeID]
		if p == nil {
			continue
		}
		if ch, ok := w.frozen[f.NodeID]; ok {
			if at := <-ch; !at.IsZero() {
				out[f.NodeID] = injected{at, spec.FaultFreeze}
			}
			continue
		}
		select {
		case <-p.Done():
			out[f.NodeID] = injected{p.ExitedAt(), spec.FaultKill}
		default:
		}
	}
	return out
}
