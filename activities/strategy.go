package activities

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"runtime"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/gradsync"
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
	var codecs []spec.CodecCost
	for t := range turns {
		if t == turn {
			if cost, err = engine.MeasureCompute(ctx, cfg, train, in.Compute.Budget.D()); err != nil {
				return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadProbeInput", err)
			}
			if codecs, err = measureCodecs(ctx, in.Compute); err != nil {
				return nil, err
			}
		}
		if err := comm.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("compute probe: turn %d: %w", t, err)
		}
	}
	return &spec.RankCompute{Rank: comm.Rank(), Host: host, Cores: runtime.NumCPU(),
		PerExampleNS: cost.PerExample.Nanoseconds(), OverheadNS: cost.Overhead.Nanoseconds(), Spread: cost.Spread,
		Codecs: codecs}, nil
}

// codecsToTime is the codecs a job's names stand for: auto is every codec
// of the ladder its policy chooses from.
func codecsToTime(names ...string) []string {
	var out []string
	for _, name := range names {
		if name == gradsync.CodecAuto {
			out = append(out, codec.Ladder...)
		} else {
			out = append(out, name)
		}
	}
	return out
}

// codecProbeBudget is what timing one codec may take on a node.
const codecProbeBudget = 30 * time.Millisecond

// measureCodecs times the probe's codecs (auto: the ladder an adaptive
// policy chooses from) on a gradient of the job's size.
func measureCodecs(ctx context.Context, p *spec.ComputeProbe) ([]spec.CodecCost, error) {
	var out []spec.CodecCost
	for _, name := range codecsToTime(p.Codecs...) {
		c, err := codec.Parse(name)
		if err == nil && p.GradientValues < 1 {
			err = fmt.Errorf("%d gradient values", p.GradientValues)
		}
		if err != nil {
			err = fmt.Errorf("compute probe: codec %q: %w", name, err)
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadProbeInput", err)
		}
		if c.Name() == "none" || slices.ContainsFunc(out, func(x spec.CodecCost) bool { return x.Codec == c.Name() }) {
			continue
		}
		cost, err := codec.MeasureCost(ctx, c, p.GradientValues, codecProbeBudget)
		if err != nil {
			return nil, fmt.Errorf("compute probe: %w", err)
		}
		out = append(out, spec.CodecCost{Codec: c.Name(), EncodeNS: cost.EncodeNS, DecodeNS: cost.DecodeNS})
	}
	return out, nil
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
// nodes' step times spread (all nodes' samples pooled). A compressed job's
// steps are priced by their phase: the warm-up's allreduce, then its
// codec's exchange (collectives of the encoded sizes, encoding and
// decoding at the nodes' measured cost per value; an auto codec is the
// one the run's policy would choose from those predictions).
func (Planner) SearchStrategy(_ context.Context, in spec.SearchStrategyInput) (*spec.StrategyPlan, error) {
	t := in.Topology
	n := len(t.Hosts)
	if len(t.Compute) != n || n == 0 {
		err := fmt.Errorf("the scan measured computation on %d of %d nodes", len(t.Compute), n)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	// A node of k ranks is k candidate ranks on its host, taken whole.
	k := max(in.RanksPerNode, 1)
	hosts := make([]string, 0, n*k)
	for _, h := range t.Hosts {
		hosts = append(hosts, slices.Repeat([]string{h}, k)...)
	}
	in.Topology.Hosts = hosts // newCommPricer prices the first d of these ranks
	dp := strategy.DPInput{GlobalBatch: in.GlobalBatch, Hosts: hosts, Cores: make([]int, n*k),
		MinRanks: in.MinRanks * k, MaxRanks: in.MaxRanks * k, RankStep: k}
	for r, c := range t.Compute {
		for j := range k {
			dp.Cores[r*k+j] = c.Cores
		}
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
	pr, err := newCommPricer(in, algo)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	dp.Comm = pr.comm
	plan, err := strategy.PlanDataParallel(dp)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadScan", err)
	}
	out := &spec.StrategyPlan{DataParallel: plan.Ranks, MaxRanks: in.MaxRanks * k, Reason: plan.Reason}
	for _, c := range plan.Candidates {
		out.Candidates = append(out.Candidates, spec.StrategyCandidate{Ranks: c.Ranks, ComputeSeconds: c.ComputeSeconds,
			CommSeconds: c.CommSeconds, StepSeconds: c.StepSeconds, ExamplesPerSec: c.ExamplesPerSec, Oversubscription: c.Oversubscription,
			Straggle: c.Straggle, Codec: c.Codec, CodecSeconds: c.CodecSeconds})
		if c.Ranks == plan.Ranks {
			out.PredictedStepSeconds = c.StepSeconds
		}
	}
	return out, nil
}

// commPricer prices a job's gradient exchange per step over the first d
// ranks of a scan: the allreduce, or for a compressed job the exchange of
// its codec (predicted for an auto codec by the policy the run applies
// after its warm-up), each step of the run priced by the phase it is in.
type commPricer struct {
	t     spec.TopologyPlan
	algo  ascend.Algorithm
	bytes int
	comp  *spec.StrategyCompression
	costs map[string]codec.Cost // the slowest node's, per canonical name
}

func newCommPricer(in spec.SearchStrategyInput, algo ascend.Algorithm) (commPricer, error) {
	p := commPricer{t: in.Topology, algo: algo, bytes: in.GradientBytes, comp: in.Compression}
	if c := p.comp; c != nil && (c.Steps < 1 || c.From < 0 || c.From > c.Steps) {
		return p, fmt.Errorf("compression from step %d of %d", c.From, c.Steps)
	}
	p.costs = map[string]codec.Cost{}
	timed := map[string]int{}
	for _, rc := range in.Topology.Compute {
		for _, c := range rc.Codecs {
			have := p.costs[c.Codec]
			p.costs[c.Codec] = codec.Cost{EncodeNS: max(have.EncodeNS, c.EncodeNS), DecodeNS: max(have.DecodeNS, c.DecodeNS)}
			timed[c.Codec]++
		}
	}
	if p.comp == nil {
		return p, nil
	}
	for _, name := range codecsToTime(p.comp.Codec, p.comp.WarmupCodec) {
		c, err := codec.Parse(name)
		if err != nil {
			return p, fmt.Errorf("compression: %w", err)
		}
		if timed[c.Name()] != len(in.Topology.Compute) && c.Name() != "none" {
			return p, fmt.Errorf("the scan did not time codec %s on every node", c.Name())
		}
	}
	return p, nil
}

// comm prices one step over d ranks whose computation takes compute
// seconds and who run slow (an auto codec is predicted from the slowed
// times its warm-up will measure; the prices returned are undisturbed).
func (p commPricer) comm(d int, compute float64, slow strategy.DPSlowdown) strategy.DPComm {
	m := planCostModel(p.t, d)
	dense, ok := m.Predict(ascend.CollAllReduce, p.algo, d, p.bytes)
	if !ok {
		dense, _ = m.Predict(ascend.CollAllReduce, ascend.AlgoRing, d, p.bytes)
	}
	c := p.comp
	if c == nil {
		return strategy.DPComm{Network: dense}
	}
	phase := func(name string) (net, cpu time.Duration, used string) {
		if name == gradsync.CodecAuto {
			name = p.choose(m, d, dense, compute, slow)
		}
		cd, _ := codec.Parse(name) // checked by newCommPricer
		if cd == nil || cd.Name() == "none" {
			return dense, 0, ""
		}
		net, cpu = p.exchange(m, cd, d)
		return net, cpu, cd.Name()
	}
	warmNet, warmCPU, _ := phase(c.WarmupCodec)
	net, cpu, name := phase(c.Codec)
	w := float64(c.From) / float64(c.Steps)
	mix := func(a, b time.Duration) time.Duration { return time.Duration(w*float64(a) + (1-w)*float64(b)) }
	return strategy.DPComm{Network: mix(warmNet, net), Codec: mix(warmCPU, cpu), Name: name}
}

// exchange prices one compressed step's communication with codec cd over
// d ranks: the exchange's collectives and the loss's allreduce (the run's
// algorithm where it implements them, else the model's choice, as the
// communicator does), and the encoding and decoding on one core.
func (p commPricer) exchange(m ascend.CostModel, cd codec.Codec, d int) (net, cpu time.Duration) {
	n := p.bytes / 4
	w := codec.TwoPhaseWork(cd, n, d)
	if p.comp.Exchange == gradsync.ExchangeAllGather {
		w = codec.ExchangeWork(cd, n, d)
	}
	coll := func(c ascend.Collective, bytes int) time.Duration {
		a := p.algo
		if !a.Implements(c) {
			a = m.Choose(c, d, bytes)
		}
		t, _ := m.Predict(c, a, d, bytes)
		return t
	}
	if w.AllToAll > 0 {
		net += coll(ascend.CollAllToAll, w.AllToAll)
	}
	if w.AllGather > 0 {
		net += coll(ascend.CollAllGather, w.AllGather)
	}
	net += time.Duration(w.LengthAllToAlls)*coll(ascend.CollAllToAll, 4*d) + time.Duration(w.LengthAllGathers)*coll(ascend.CollAllGather, 4*d)
	// The step's loss (and 1-bit Adam's statistics) travel apart, exactly:
	// one more small allreduce.
	net += coll(ascend.CollAllReduce, 4)
	return net, w.Compute(p.costs[cd.Name()])
}

// choose is the codec an auto policy would pick on d ranks (codec.Choose,
// as the run applies it after the warm-up), fed the model's times instead
// of the warm-up's measurements, slowed as the ranks will measure them.
func (p commPricer) choose(m ascend.CostModel, d int, dense time.Duration, compute float64, slow strategy.DPSlowdown) string {
	if d < 2 || dense <= 0 {
		return "none"
	}
	net := max(slow.Straggle, 1)
	cpu := max(slow.Cores, 1) * net
	scale := func(t time.Duration, f float64) time.Duration { return time.Duration(float64(t) * f) }
	dense = scale(dense, net)
	meas := codec.Measure{DenseBytes: p.bytes, Ranks: d, Compute: time.Duration(compute * 1e9), Dense: dense,
		BytesPerSec: 2 * float64(d-1) / float64(d) * float64(p.bytes) / dense.Seconds(), Exchange: map[string]time.Duration{}}
	for _, name := range codec.Ladder {
		cd, _ := codec.Parse(name)
		n, c := p.exchange(m, cd, d)
		meas.Exchange[cd.Name()] = scale(n, net) + scale(c, cpu)
	}
	return codec.Choose(meas).Codec
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
