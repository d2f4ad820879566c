package activities

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/cann-train/cann-train/spec"
)

// energyWindow measures one chunk's energy on the node's host meter.
type energyWindow struct {
	n      *Node
	start  float64
	ok     bool
	shares int     // nodes of the membership on this host
	pue    float64 // the run's facility overhead
}

// startEnergy reads the host meter at the start of a chunk of rank in
// membership m. Without a meter, or when the reading fails (logged), the
// chunk reports no measurement and the run models its energy.
func (n *Node) startEnergy(ctx context.Context, sp spec.RunSpec, m spec.Membership, rank int, log *zap.Logger) *energyWindow {
	w := &energyWindow{n: n, shares: m.HostShares(rank), pue: 1}
	if sp.Green != nil {
		w.pue = sp.Green.WithDefaults().PUE
	}
	if n.Energy == nil {
		return w
	}
	j, err := n.readEnergy(ctx, time.Now())
	if err != nil {
		log.Warn("energy meter: no measurement for this chunk", zap.Error(err))
		return w
	}
	w.start, w.ok = j, true
	return w
}

// joules is the chunk's share of the host's energy since startEnergy,
// facility overhead included; 0 without a measurement.
func (w *energyWindow) joules(ctx context.Context, log *zap.Logger) float64 {
	if !w.ok {
		return 0
	}
	j, err := w.n.readEnergy(ctx, time.Now())
	if err != nil || j < w.start {
		log.Warn("energy meter: no measurement for this chunk", zap.Error(err), zap.Float64("start_j", w.start), zap.Float64("end_j", j))
		return 0
	}
	return (j - w.start) * w.pue / float64(w.shares)
}

func (n *Node) readEnergy(ctx context.Context, now time.Time) (float64, error) {
	n.energyMu.Lock()
	defer n.energyMu.Unlock()
	return n.Energy.Joules(ctx, now)
}

// ReadEnergy reads the host meter for an external job's launch: the host's
// energy since the meter was opened. Without a meter, or when the meter
// fails, the reading says why and the run models that stretch's energy.
func (n *Node) ReadEnergy(ctx context.Context) (spec.EnergyReading, error) {
	if n.Energy == nil {
		return spec.EnergyReading{Reason: "node " + n.ID + " has no energy meter"}, nil
	}
	j, err := n.readEnergy(ctx, time.Now())
	if err != nil {
		return spec.EnergyReading{Reason: fmt.Sprintf("node %s: %v", n.ID, err)}, nil
	}
	name := "meter"
	if s, ok := n.Energy.(fmt.Stringer); ok {
		name = s.String()
	}
	return spec.EnergyReading{Joules: j, Meter: name}, nil
}
