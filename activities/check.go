package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/spec"
)

// CheckNodes asks the workers of the given ranks of a membership, all at
// once, whether they are alive, and returns a PeerFailure (Rank,
// NoticedAt) for each that is gone: its collective listener refuses
// connections for peerRefusedGrace, so no process holds its address (a
// node worker listens from before it registers until it exits). A live
// worker answers at once; one that cannot be told (silent: frozen, or
// unreachable) counts as alive — its heartbeat timeout still finds it.
func (n *Node) CheckNodes(ctx context.Context, in spec.CheckNodesInput) ([]spec.PeerFailure, error) {
	for _, r := range in.Ranks {
		if r < 0 || r >= len(in.Membership.Nodes) {
			err := fmt.Errorf("check nodes: rank %d outside the membership of %d node(s)", r, len(in.Membership.Nodes))
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadCheckInput", err)
		}
	}
	var out []spec.PeerFailure
	for i, g := range goneNodes(ctx, in.Membership.Nodes, in.Ranks) {
		if g != nil {
			out = append(out, spec.PeerFailure{Rank: in.Ranks[i], NoticedAt: time.Now()})
			m := in.Membership.Nodes[in.Ranks[i]]
			n.Logger.Info("node gone: its listener refuses connections", zap.String("node", m.ID), zap.String("addr", m.CommAddr))
		}
	}
	return out, nil
}

// goneNodes probes the listeners of nodes[ranks[i]] concurrently; the i-th
// result is that node's *ascend.PeerError when it is gone, else nil (alive
// or unknown). A node without an address is not asked.
func goneNodes(ctx context.Context, nodes []spec.Node, ranks []int) []error {
	gone := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		m := nodes[r]
		if m.CommAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, g := tcp.Probe(ctx, r, m.CommAddr, peerRefusedGrace); g != nil {
				gone[i] = fmt.Errorf("node %s: %w", m.ID, g)
			}
		}()
	}
	wg.Wait()
	return gone
}
