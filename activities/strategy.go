package activities

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"runtime"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/strategy"
	"github.com/cann-train/cann-train/engine/topology"
	"github.com/cann-train/cann-train/spec"
)

// probeCompute times the built-in engine's single-rank steps on this node
// (engine.MeasureCompute). Ranks on one host measure as many at a time as
// it has cores, in turns: side by side, as they will train (sharing caches
// and memory bandwidth), but never more than one per core, since the
// planner prices sharing a core itself. A collective tells each rank its
// place among its host's ranks.
func (n *Node) probeCompute(ctx context.Context, comm *ascend.Communicator, in spec.ProbeInput) (*spec.RankCompute, error) {
	host := shm.HostName()
	keys := make([]float32, comm.Size())
	keys[comm.Rank()] = math.Float32frombits(crc32.ChecksumIEEE([]byte(host)))
	if err := comm.AllGather(ctx, keys); err != nil {
		return nil, fmt.Errorf("compute probe: hosts: %w", err)
	}
	turn, turns := probeTurns(keys, comm.Rank(), runtime.NumCPU())
	train, _, err := n.data()
	if err != nil {
		return nil, err
	}
	cfg := engine.Config{Seed: 1, Hidden: in.Compute.Hidden, LearningRate: in.Compute.LearningRate, BatchPerRank: 1, World: 1}
	var cost engine.ComputeCost
	for t := range turns {
		if t == turn {
			if cost, err = engine.MeasureCompute(ctx, cfg, train, in.Compute.Budget.D()); err != nil {
				return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadProbeInput", err)
			}
		}
		if err := comm.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("compute probe: turn %d: %w", t, err)
		}
	}
	return &spec.RankCompute{Rank: comm.Rank(), Host: host, Cores: runtime.NumCPU(),
		PerExampleNS: cost.PerExample.Nanoseconds(), OverheadNS: cost.Overhead.Nanoseconds(), Spread: cost.Spread}, nil
}

// probeTurns places rank among the ranks whose hosts have its key: the
// host's ranks measure cores at a time, in rank order; turns is the most
// any host needs.
func probeTurns(keys []float32, rank, cores int) (turn, turns int) {
	same := map[uint32]int{}
	for r, k := range keys {
		b := math.Float32bits(k)
		if r == rank {
			turn = same[b] / cores
		}
		same[b]++
		turns = max(turns, (same[b]+cores-1)/cores)
	}
	return turn, turns
}

// SearchStrategy chooses the run's data-parallel degree
// (strategy.PlanDataParallel): each candidate's computation from the
// nodes' measured cost (the slowest node's, with ranks sharing a host's
// cores), its gradient allreduce from the collective engine's cost model
// fed the scan's α and β, both waiting for the slowest rank as the
// nodes' step times spread (all nodes' samples pooled).
func (Planner) SearchStrategy(_ context.Context, in spec.SearchStrategyInput) (*spec.StrategyPlan, error) {
	t := in.Topology
	n := len(t.Hosts)
	if len(t.Compute) != n || n == 0 {
		err := fmt.Errorf("the scan measured computation on %d of %d nodes", len(t.Compute), n)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	dp := strategy.DPInput{GlobalBatch: in.GlobalBatch, Hosts: t.Hosts, Cores: make([]int, n), MinRanks: in.MinRanks, MaxRanks: in.MaxRanks}
	for r, c := range t.Compute {
		dp.Cores[r] = c.Cores
		dp.SecondsPerExample = max(dp.SecondsPerExample, time.Duration(c.PerExampleNS).Seconds())
		dp.StepOverhead = max(dp.StepOverhead, time.Duration(c.OverheadNS))
		dp.Spread = append(dp.Spread, c.Spread...)
	}
	algo := ascend.AlgoRing
	if in.Algorithm != "" {
		a, err := ascend.ParseAlgorithm(in.Algorithm)
		if err != nil || a == ascend.AlgoAuto {
			err = errors.Join(err, fmt.Errorf("algorithm %q", in.Algorithm))
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
		}
		algo = a
	}
	dp.AllReduce = func(d int) time.Duration {
		m := planCostModel(t, d)
		if p, ok := m.Predict(ascend.CollAllReduce, algo, d, in.GradientBytes); ok {
			return p
		}
		p, _ := m.Predict(ascend.CollAllReduce, ascend.AlgoRing, d, in.GradientBytes)
		return p
	}
	plan, err := strategy.PlanDataParallel(dp)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	out := &spec.StrategyPlan{DataParallel: plan.Ranks, MaxRanks: in.MaxRanks, Reason: plan.Reason}
	for _, c := range plan.Candidates {
		out.Candidates = append(out.Candidates, spec.StrategyCandidate{Ranks: c.Ranks, ComputeSeconds: c.ComputeSeconds,
			CommSeconds: c.CommSeconds, StepSeconds: c.StepSeconds, ExamplesPerSec: c.ExamplesPerSec, Oversubscription: c.Oversubscription,
			Straggle: c.Straggle})
		if c.Ranks == plan.Ranks {
			out.PredictedStepSeconds = c.StepSeconds
		}
	}
	return out, nil
}

// planCostModel is the collective engine's α-β-γ model of the first d
// ranks of a scanned topology: the slowest level spanned prices the flat
// algorithms (inter-host when those ranks span hosts), the intra-host
// level the hierarchical algorithm's inner phases.
func planCostModel(t spec.TopologyPlan, d int) ascend.CostModel {
	m := ascend.DefaultCostModel()
	level := map[string]spec.TopologyLevel{}
	for _, l := range t.Levels {
		level[l.Name] = l
	}
	perHost := map[string]int{}
	for _, h := range t.Hosts[:d] {
		perHost[h]++
	}
	set := func(l spec.TopologyLevel) (time.Duration, float64) {
		beta := 0.0
		if l.BytesPerSec > 0 {
			beta = 1 / l.BytesPerSec
		}
		return time.Duration(l.AlphaNS), beta
	}
	intra, hasIntra := level[string(topology.IntraHost)]
	inter, hasInter := level[string(topology.InterHost)]
	switch {
	case len(perHost) > 1 && hasInter:
		m.Alpha, m.Beta = set(inter)
		if hasIntra {
			m.IntraAlpha, m.IntraBeta = set(intra)
		}
	case hasIntra:
		m.Alpha, m.Beta = set(intra)
	case hasInter:
		m.Alpha, m.Beta = set(inter)
	}
	m.Hosts = len(perHost)
	for _, c := range perHost {
		m.PerHost = max(m.PerHost, c)
	}
	return m
}
