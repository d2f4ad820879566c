package spec

import "time"

// ProbeInput asks one node to take part in a link scan as rank Rank.
type ProbeInput struct {
	RunID      string     `json:"run_id"`
	Membership Membership `json:"membership"`
	Rank       int        `json:"rank"`
	Session    string     `json:"session"`
	Token      string     `json:"token"`
	// Budget bounds the measurements (ascend.ProbeOptions.Budget).
	Budget  Duration `json:"budget"`
	Timeout Duration `json:"timeout"`
	// Compute, when set, also measures the built-in engine's computation
	// on each node (ranks sharing a host take turns), for SearchStrategy.
	Compute *ComputeProbe `json:"compute,omitempty"`
}

// ComputeProbe is the model a link scan also times single-rank steps of.
type ComputeProbe struct {
	Hidden       []int    `json:"hidden"`
	LearningRate float64  `json:"learning_rate"`
	Budget       Duration `json:"budget"`
	// Codecs are gradient codecs (canonical names) to time on
	// GradientValues values as well, for a compressed job's search.
	Codecs         []string `json:"codecs,omitempty"`
	GradientValues int      `json:"gradient_values,omitempty"`
}

// CodecCost is one codec's measured computation on one core, per value:
// encoding with error feedback and decoding into a sum.
type CodecCost struct {
	Codec    string  `json:"codec"`
	EncodeNS float64 `json:"encode_ns"`
	DecodeNS float64 `json:"decode_ns"`
}

// RankCompute is one node's measured computation (ProbeResult, and the
// TopologyPlan's copy).
type RankCompute struct {
	Rank  int    `json:"rank"`
	Host  string `json:"host"`
	Cores int    `json:"cores"`
	// A step of b examples takes OverheadNS + b·PerExampleNS on one core.
	PerExampleNS int64 `json:"per_example_ns"`
	OverheadNS   int64 `json:"overhead_ns"`
	// Spread is how much slower than that the node's steps ran: equally
	// likely multiples ≥ 1 (engine.ComputeCost.Spread); absent in scans
	// recorded before it was measured.
	Spread []float64 `json:"spread,omitempty"`
	// Codecs are the ComputeProbe's codecs' costs, timed one rank at a
	// time like the steps.
	Codecs []CodecCost `json:"codecs,omitempty"`
}

// LinkSample is one measured direction of a rank pair.
type LinkSample struct {
	From        int     `json:"from"`
	To          int     `json:"to"`
	LatencyNS   int64   `json:"latency_ns"`
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// ProbeResult is one node's part of a scan: its host, and (rank 0) the
// whole matrix.
type ProbeResult struct {
	NodeID string       `json:"node_id"`
	Rank   int          `json:"rank"`
	Host   string       `json:"host"`
	Links  []LinkSample `json:"links,omitempty"`
	// Compute is set when the probe measured computation.
	Compute *RankCompute `json:"compute,omitempty"`
}

// PlanTopologyInput is what PlanTopology analyses.
type PlanTopologyInput struct {
	Results []ProbeResult `json:"results"` // by rank
	// GradientBytes is the size of one step's allreduce.
	GradientBytes int `json:"gradient_bytes"`
	// Collective is the spec's choice: auto, or an algorithm to keep.
	Collective string `json:"collective"`
	// Nodes are the scanned nodes by rank (their addresses and NPU
	// device IPs go into the rank table).
	Nodes []Node `json:"nodes,omitempty"`
	// RanksPerNode is how many ranks each scanned node trains (0: one):
	// the algorithms are priced for nodes × ranks_per_node ranks, a
	// node's ranks on its host.
	RanksPerNode int `json:"ranks_per_node,omitempty"`
}

// TopologyLevel is one level of the measured hierarchy.
type TopologyLevel struct {
	Name        string  `json:"name"` // intra-host or inter-host
	Links       int     `json:"links"`
	AlphaNS     int64   `json:"alpha_ns"`
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// AlgorithmPrediction is the cost model's time for one algorithm.
type AlgorithmPrediction struct {
	Algorithm string  `json:"algorithm"`
	Seconds   float64 `json:"seconds"`
}

// TopologyPlan is the scan's outcome, recorded in the run's history.
type TopologyPlan struct {
	ScannedAt  time.Time       `json:"scanned_at"`
	Generation int64           `json:"generation"`
	Hosts      []string        `json:"hosts"` // host per rank
	HostCount  int             `json:"host_count"`
	Levels     []TopologyLevel `json:"levels"`
	SlowLinks  int             `json:"slow_links"`
	// Algorithm is the gradient allreduce's algorithm for the run, and
	// Predictions what the cost model, fed the measured α and β, expects
	// of each for GradientBytes.
	Algorithm     string                `json:"algorithm"`
	GradientBytes int                   `json:"gradient_bytes"`
	Predictions   []AlgorithmPrediction `json:"predictions"`
	// Text is the matrix and hierarchy as `cann-train topo-scan` prints
	// them.
	Text string `json:"text"`
	// RankTable is the HCCL rank table (v1.0 JSON) of the scanned nodes,
	// one device per rank (the node's NPU device IP where it has one,
	// else its host address); empty when hosts interleave ranks.
	RankTable string `json:"rank_table,omitempty"`
	// Compute is every rank's measured computation (strategy: auto; any
	// scan of runs started since the scan timed computation always).
	Compute []RankCompute `json:"compute,omitempty"`
}

// SingleRankSamplesPerSec is what one rank computes per second with b
// examples per step and a core of its own, by the scan's measured
// computation (the fastest steps, timed beside the host's other ranks up
// to one per core; the mean over the scanned ranks); ok is false without
// it.
func (t *TopologyPlan) SingleRankSamplesPerSec(b float64) (float64, bool) {
	if t == nil || len(t.Compute) == 0 || b <= 0 {
		return 0, false
	}
	var ns float64
	for _, c := range t.Compute {
		ns += float64(c.OverheadNS) + b*float64(c.PerExampleNS)
	}
	ns /= float64(len(t.Compute))
	if ns <= 0 {
		return 0, false
	}
	return b / (ns / 1e9), true
}

// SearchStrategyInput is what SearchStrategy plans from: the scan and the
// job's numbers.
type SearchStrategyInput struct {
	Topology      TopologyPlan `json:"topology"`
	GradientBytes int          `json:"gradient_bytes"`
	GlobalBatch   int          `json:"global_batch"`
	MinRanks      int          `json:"min_ranks"`
	MaxRanks      int          `json:"max_ranks"`
	// Algorithm prices the gradient allreduce (ring when empty).
	Algorithm string `json:"algorithm,omitempty"`
	// Compression is the job's gradient compression (nil: none); its
	// codecs' costs are in the scan's Compute.
	Compression *StrategyCompression `json:"compression,omitempty"`
	// RanksPerNode is how many ranks each scanned node trains (0: one):
	// MinRanks and MaxRanks then count nodes, and the plan's
	// DataParallel counts ranks, whole nodes of them.
	RanksPerNode int `json:"ranks_per_node,omitempty"`
}

// StrategyCompression is what the search needs of a compressed job: steps
// From..Steps-1 exchange Codec-encoded gradients (auto: the codec the run
// will choose after its warm-up, predicted by the same policy), the steps
// before them WarmupCodec's (empty or none: uncompressed).
type StrategyCompression struct {
	Codec       string `json:"codec"`
	Exchange    string `json:"exchange"`
	WarmupCodec string `json:"warmup_codec,omitempty"`
	From        int64  `json:"from"`
	Steps       int64  `json:"steps"`
}

// StrategyCandidate is the cost model's prediction for one data-parallel
// degree.
type StrategyCandidate struct {
	Ranks            int     `json:"ranks"`
	ComputeSeconds   float64 `json:"compute_s"`
	CommSeconds      float64 `json:"comm_s"`
	StepSeconds      float64 `json:"step_s"`
	ExamplesPerSec   float64 `json:"examples_per_s"`
	Oversubscription float64 `json:"oversubscription"`
	// Straggle is the multiple of an undisturbed rank's time both phases
	// are priced at: the expected slowest of Ranks ranks (0: not measured).
	Straggle float64 `json:"straggle,omitempty"`
	// Codec is the compression priced for the compressed steps, and
	// CodecSeconds the encoding and decoding in CommSeconds (per step,
	// averaged over the run's steps like CommSeconds).
	Codec        string  `json:"codec,omitempty"`
	CodecSeconds float64 `json:"codec_s,omitempty"`
}

// StrategyPlan is SearchStrategy's choice, recorded in history and shown
// in the status.
type StrategyPlan struct {
	PlannedAt time.Time `json:"planned_at"`
	// DataParallel is the ranks the run trains on (whole nodes: with one
	// rank per node, the nodes), out of the MaxRanks it had.
	DataParallel int                 `json:"data_parallel"`
	MaxRanks     int                 `json:"max_ranks"`
	Candidates   []StrategyCandidate `json:"candidates"`
	Reason       string              `json:"reason"`
	// PredictedStepSeconds is the chosen candidate's step time, to
	// compare with what the run measures (RunStatus.StepsPerSec).
	PredictedStepSeconds float64 `json:"predicted_step_s"`
}
