package ascend

// Algorithm selection. Every collective that has more than one algorithm
// picks one per call from an α-β-γ (Hockney) cost model, like NCCL's
// tuning model and Open MPI's decision tables:
//
//	α  seconds per message step (latency plus per-step software overhead)
//	β  seconds per byte sent over one link (1 / bandwidth)
//	γ  seconds per byte reduced
//
// Each algorithm file states its cost at the top and implements the small
// algorithm interface below; selection takes the cheapest prediction for
// (collective, ranks, bytes). The model's α and β are measured per link
// when a communicator starts (Calibrate, a few milliseconds of ping-pong
// with the ring neighbours), agreed across ranks (the slowest link wins),
// so every rank makes the same choice. The choice can be forced per
// communicator (Config.Algorithm, SetAlgorithm) or per process with
// ASCEND_ALGO, in the spirit of NCCL_ALGO and HCCL_ALGO.
//
// Which algorithm implements what:
//
//	                ring            hd (halving-doubling)     tree (binomial)
//	AllReduce       RS + AG ring    Rabenseifner              reduce + broadcast
//	                (and rd: recursive doubling, whole vector each step)
//	ReduceScatter   ring            recursive halving         -
//	AllGather(V)    ring            recursive doubling        -
//	Broadcast       pipelined chain -                         pipelined tree
//	Reduce          pipelined chain -                         pipelined tree
//	AllToAll(V)     pairwise exchange only
//	Barrier         dissemination only

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"
)

// EnvAlgorithm names the environment variable that forces algorithms for
// every communicator of the process unless Config.Algorithm is set. See
// ParseAlgorithmSpec for its syntax.
const EnvAlgorithm = "ASCEND_ALGO"

// Algorithm names a collective algorithm.
type Algorithm uint8

const (
	AlgoAuto     Algorithm = iota // chosen per call by the cost model
	AlgoRing                      // ring (chain for rooted collectives)
	AlgoHD                        // recursive halving-doubling (Rabenseifner)
	AlgoTree                      // binomial tree
	AlgoPairwise                  // pairwise exchange (AllToAll, point-to-point)
	AlgoRD                        // recursive doubling (small-message AllReduce)
	AlgoHier                      // hierarchical: within hosts, then among host leaders
	AlgoDirect                    // reading peers' shared buffers (direct.go): AllReduce, ReduceScatter, AllGather, Broadcast
	AlgoBruck                     // Bruck's AllToAll: log p rounds (small blocks)
	numAlgo
)

func (a Algorithm) String() string {
	switch a {
	case AlgoAuto:
		return "auto"
	case AlgoRing:
		return "ring"
	case AlgoHD:
		return "hd"
	case AlgoTree:
		return "tree"
	case AlgoPairwise:
		return "pairwise"
	case AlgoRD:
		return "rd"
	case AlgoHier:
		return "hier"
	case AlgoDirect:
		return "direct"
	case AlgoBruck:
		return "bruck"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return a < numAlgo }

// ParseAlgorithm parses "auto", "ring", "hd" (also "rhd", "halving-doubling",
// "rabenseifner"), "tree" (also "binomial"), "rd" (also
// "recursive-doubling") or "pairwise", case-insensitively.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto", "default":
		return AlgoAuto, nil
	case "ring":
		return AlgoRing, nil
	case "hd", "rhd", "h-d_r", "halving-doubling", "halvingdoubling", "rabenseifner":
		return AlgoHD, nil
	case "tree", "binomial":
		return AlgoTree, nil
	case "pairwise":
		return AlgoPairwise, nil
	case "rd", "recursive-doubling", "recursivedoubling":
		return AlgoRD, nil
	case "hier", "hierarchical", "2level", "two-level":
		return AlgoHier, nil
	case "direct", "shared":
		return AlgoDirect, nil
	case "bruck":
		return AlgoBruck, nil
	}
	return AlgoAuto, fmt.Errorf("%w: unknown algorithm %q (want auto, ring, hd, tree, rd, hier, pairwise, bruck or direct)", ErrInvalid, s)
}

// Collective names a collective operation; it is also the kind field of
// frame tags.
type Collective uint8

const (
	CollAllReduce Collective = 1 + iota
	CollBroadcast
	CollBarrier
	CollReduceScatter
	CollAllGather
	CollReduce
	CollAllToAll
	CollSendRecv
	collProbe
	numColl
)

// kindAbort is the tag kind of abort notices (abort.go).
const kindAbort = 0xF

var collNames = [...]string{
	CollAllReduce:     "allreduce",
	CollBroadcast:     "broadcast",
	CollBarrier:       "barrier",
	CollReduceScatter: "reducescatter",
	CollAllGather:     "allgather",
	CollReduce:        "reduce",
	CollAllToAll:      "alltoall",
	CollSendRecv:      "sendrecv",
	collProbe:         "calibrate",
}

func (c Collective) String() string {
	if int(c) < len(collNames) && collNames[c] != "" {
		return collNames[c]
	}
	if c == kindAbort {
		return "abort"
	}
	return fmt.Sprintf("Collective(%d)", uint8(c))
}

// ParseCollective parses a collective name as printed by String (also
// accepting "all_reduce", "reduce_scatter", "all_gather", "all_to_all").
func ParseCollective(s string) (Collective, error) {
	s = strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(s), "_", ""), "-", ""))
	for c := CollAllReduce; c < collProbe; c++ {
		if collNames[c] == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown collective %q", ErrInvalid, s)
}

// ParseAlgorithmSpec parses an algorithm override as ASCEND_ALGO carries
// it: either one algorithm for every collective ("ring", "hd", "tree",
// "auto"), or per collective, e.g. "allreduce=hd,broadcast=tree" (";" also
// separates; a bare name among them sets the default for the rest).
// Collectives that do not implement the named algorithm choose
// automatically.
func ParseAlgorithmSpec(spec string) (force [numColl]Algorithm, err error) {
	for part := range strings.FieldsFuncSeq(spec, func(r rune) bool { return r == ',' || r == ';' }) {
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			a, err := ParseAlgorithm(part)
			if err != nil {
				return force, err
			}
			all := forceAll(a)
			for c := range force {
				if force[c] == AlgoAuto {
					force[c] = all[c]
				}
			}
			continue
		}
		coll, err := ParseCollective(name)
		if err != nil {
			return force, err
		}
		a, err := ParseAlgorithm(val)
		if err != nil {
			return force, err
		}
		if a != AlgoAuto && !implements(a, coll) {
			return force, fmt.Errorf("%w: %v has no %v algorithm", ErrInvalid, coll, a)
		}
		force[coll] = a
	}
	return force, nil
}

// forceAll forces a for every collective that implements it.
func forceAll(a Algorithm) (force [numColl]Algorithm) {
	for c := range force {
		if implements(a, Collective(c)) {
			force[c] = a
		}
	}
	return force
}

// CostModel is the α-β-γ model automatic selection uses.
//
// Alpha and Beta describe a one-way message over one link with the rest of
// the group idle; they price an algorithm's critical path. AlphaAll and
// BetaAll are measured while every rank takes a step at once (the ring
// pattern: each sends one message and receives one): on dedicated links
// and cores they are a little above Alpha and Beta (a rank both sends and
// receives), but when ranks share CPUs (more ranks than cores, as in tests and on small
// hosts) or a network port, every message and byte costs CPU time the
// ranks compete for, and the total work of an algorithm, not its critical
// path, sets its time. Each algorithm's prediction is therefore the
// larger of
//
//	critical path:  steps·α + (bytes on the busiest path)·β + …
//	shared work:    (messages per rank)·α_all + (bytes per rank)·β_all + …
//
// (the second is LogP's per-message overhead in disguise). With all ranks
// busy in every step (ring, halving-doubling) the two coincide; a tree
// moves the same bytes in far fewer messages, which wins small messages
// on a loaded host by the factor log p the critical path hides.
type CostModel struct {
	Alpha time.Duration // latency of a one-way message between two ranks
	Beta  float64       // seconds per byte over one link, one way
	Gamma float64       // seconds per byte reduced
	// AlphaAll and BetaAll are the latency and seconds per byte of a step
	// in which every rank sends one message and receives one; zero means
	// equal to Alpha and Beta.
	AlphaAll time.Duration
	BetaAll  float64
	// Segment is the pipelining granularity in bytes of the tree and
	// chain algorithms (the communicator's ChunkBytes, or a multiple of it
	// over TCP when ranks outnumber cores: see oversubPipeBytes); 0 means
	// DefaultChunkBytes.
	Segment int
	// Hosts and PerHost describe the two-level topology (number of hosts,
	// most ranks on one host; the communicator fills them in from
	// Config.Hosts), IntraAlpha and IntraBeta the links inside a host
	// (zero: unknown, then the hierarchical algorithm is never chosen
	// automatically). Alpha and Beta then describe the slowest links.
	Hosts, PerHost int
	IntraAlpha     time.Duration
	IntraBeta      float64
	// MemoryLinks: every link of the group copies through shared memory
	// (Calibrate finds it out and the ranks agree). A message then costs
	// little besides its copies, and an AllReduce of at least
	// memoryRingBytes on 3 or more ranks takes the ring rather than
	// halving-doubling, which the formulas prefer by a few α: each ring
	// step copies one segment of n/p bytes, where halving-doubling's first
	// and last steps copy n/2 at a time, out of the caches' reach on a
	// core that several ranks share. Measured over shared-memory links,
	// the two algorithms' tables alternated five times (medians): 4 ranks
	// 256 KiB 60 vs 72 µs, 1 MiB 232 vs 289, 4 MiB 1858 vs 2137, 16 MiB
	// 10.4 vs 10.2 ms; 3 ranks 256 KiB 51 vs 56 µs, 1 MiB 192 vs 212,
	// 4 MiB 1.9 vs 2.4 ms; 64 KiB even (29 vs 31 and 25 vs 24 µs). Over
	// TCP halving-doubling stays (4 ranks, 256 KiB: 216–223 µs against
	// the ring's 370–384).
	MemoryLinks bool
}

// memoryRingBytes is the AllReduce size from which memory links take the
// ring (see CostModel.MemoryLinks).
const memoryRingBytes = 256 << 10

// DefaultCostModel is a conservative model of loopback TCP on a small VM
// (25 µs per step, 1 GB/s per link, 4 GB/s reduction), used until
// Calibrate measures the real links.
func DefaultCostModel() CostModel {
	return CostModel{Alpha: 25 * time.Microsecond, Beta: 1 / 1e9, Gamma: 1 / 4e9, Segment: DefaultChunkBytes}
}

func (m CostModel) String() string {
	pm := m.params()
	s := fmt.Sprintf("α=%v β=%.3g s/B (%.2f GB/s) γ=%.3g s/B (%.2f GB/s), all ranks stepping: α=%v β=%.3g s/B (%.2f GB/s)",
		m.Alpha, m.Beta, 1/m.Beta/1e9, m.Gamma, 1/m.Gamma/1e9, time.Duration(pm.aa*1e9), pm.ba, 1/pm.ba/1e9)
	if m.MemoryLinks {
		s += ", shared-memory links"
	}
	return s
}

// params are the model in float seconds with the derived quantities the
// cost formulas share.
type params struct {
	a, b, g        float64 // α, β, γ
	aa, ba         float64 // α and β with every rank stepping
	seg            float64 // segment bytes
	hosts, perHost int     // two-level topology
	ai, bi         float64 // intra-host α and β (0: unknown)
	wake           float64 // bytes a receiver takes per wakeup (0: any message in one)
}

// wakeBytes is how much of a TCP message a receiver gets per wakeup: one
// loopback segment (the 65,536-byte MTU less 52 bytes of IP and TCP
// headers with timestamps; on a NIC, GRO's 64 KiB ceiling). A message
// whose frame (payload and wireHdr) needs a second segment wakes its
// receiver twice: 2 ranks, allreduce by one exchange (rd), 65,408 bytes
// took 30–37 µs and 65,472 bytes 48–70 (three runs, 1000 iterations).
// Shared-memory links have no such unit.
const wakeBytes = 65536 - 52

// wireHdr is the bytes a TCP frame adds to its payload (header and
// padding, at most).
const wireHdr = 16

func (m CostModel) params() params {
	seg := float64(m.Segment)
	if seg <= 0 {
		seg = DefaultChunkBytes
	}
	pm := params{a: m.Alpha.Seconds(), b: m.Beta, g: m.Gamma, aa: m.AlphaAll.Seconds(), ba: m.BetaAll, seg: seg,
		hosts: m.Hosts, perHost: m.PerHost, ai: m.IntraAlpha.Seconds(), bi: m.IntraBeta}
	if !m.MemoryLinks {
		pm.wake = wakeBytes
	}
	if pm.ai > 0 && pm.bi <= 0 {
		pm.bi = pm.b
	}
	if pm.aa <= 0 {
		pm.aa = pm.a
	}
	if pm.ba <= 0 {
		pm.ba = pm.b
	}
	return pm
}

// busy prices an algorithm in which every rank sends and receives in each
// of its steps: the critical path is the per-rank work.
func (m params) busy(steps, bytes, reduced float64) float64 {
	w := steps + m.extraWakes(steps, bytes)
	b, ba := m.perByte()
	return max(w*m.a+bytes*b, w*m.aa+bytes*ba) + reduced*m.g
}

// extraWakes is how many more times than once per message receivers wake
// for msgs messages of bytes in all, alike (see wakeBytes).
func (m params) extraWakes(msgs, bytes float64) float64 {
	if m.wake <= 0 || msgs <= 0 {
		return 0
	}
	return msgs * (math.Ceil((bytes/msgs+wireHdr)/m.wake) - 1)
}

// perByte is β and β_all less the wakeups they include: Calibrate
// measures them on transfers of many segments, each of which woke the
// receiver once, and the cost formulas now count those wakeups as α
// (extraWakes). Large messages cost what they did; one that fits in a
// segment costs its one α and its bytes at the copy rate. At least half
// of the measured β stays, whatever the α.
func (m params) perByte() (b, ba float64) {
	if m.wake <= 0 {
		return m.b, m.ba
	}
	return max(m.b-m.a/m.wake, m.b/2), max(m.ba-m.aa/m.wake, m.ba/2)
}

// pair is m for steps between two ranks only: the same two processes
// whose one-way messages α and β measure, so a step costs at most two of
// them back to back, however a noisy calibration inflated α_all and β_all
// (a loaded host slows many ranks stepping at once, not these two).
func (m params) pair() params {
	m.aa, m.ba = min(m.aa, 2*m.a), min(m.ba, 2*m.b)
	return m
}

// split prices an algorithm whose critical path (steps, critBytes on the
// busiest rank, critReduced) differs from its per-rank share of the work
// (msgs, bytes, reduced per rank).
func (m params) split(steps, critBytes, critReduced, msgs, bytes, reduced float64) float64 {
	steps += m.extraWakes(steps, critBytes)
	msgs += m.extraWakes(msgs, bytes)
	b, ba := m.perByte()
	return max(steps*m.a+critBytes*b+critReduced*m.g, msgs*m.aa+bytes*ba+reduced*m.g)
}

// algorithm is what an algorithm file provides to selection.
type algorithm interface {
	// cost predicts the seconds coll takes on p ≥ 2 ranks for n bytes
	// (the nccl-tests "size": the buffer for AllReduce, Broadcast and
	// Reduce; the whole p-segment array for ReduceScatter, AllGather and
	// AllToAll), or ok=false if the algorithm does not implement coll.
	cost(coll Collective, p int, n float64, m params) (sec float64, ok bool)
}

// candidates in tie-break order: on equal predictions (tiny messages)
// recursive doubling wins, then the tree, then halving-doubling.
var candidates = [...]struct {
	id   Algorithm
	impl algorithm
}{
	{AlgoRD, rdAlgorithm{}},
	{AlgoTree, treeAlgorithm{}},
	{AlgoHD, hdAlgorithm{}},
	{AlgoRing, ringAlgorithm{}},
	{AlgoPairwise, pairwiseAlgorithm{}},
	{AlgoBruck, bruckAlgorithm{}},
	{AlgoHier, hierAlgorithm{}},
}

func implementation(a Algorithm) algorithm {
	for _, c := range candidates {
		if c.id == a {
			return c.impl
		}
	}
	return nil
}

// Implements reports whether a implements coll (AlgoAuto implements
// every collective).
func (a Algorithm) Implements(coll Collective) bool {
	if a == AlgoAuto {
		return coll >= CollAllReduce && coll < collProbe
	}
	return implements(a, coll)
}

// implements reports whether algorithm a implements coll.
func implements(a Algorithm, coll Collective) bool {
	if a == AlgoDirect {
		return directColl(coll) // not a cost-model candidate: see direct.go
	}
	impl := implementation(a)
	if impl == nil {
		return false
	}
	_, ok := impl.cost(coll, 4, 1024, DefaultCostModel().params())
	return ok
}

// Predict returns the modelled time of coll with algorithm algo on p ranks
// for bytes (see Choose for what bytes means), or ok=false if algo does
// not implement coll.
func (m CostModel) Predict(coll Collective, algo Algorithm, p, bytes int) (time.Duration, bool) {
	impl := implementation(algo)
	if impl == nil {
		return 0, false
	}
	if p < 2 {
		_, ok := impl.cost(coll, 2, 0, m.params())
		return 0, ok
	}
	sec, ok := impl.cost(coll, p, float64(bytes), m.params())
	return time.Duration(sec * 1e9), ok
}

// Choose returns the algorithm with the lowest predicted time for coll on
// p ranks. bytes is the nccl-tests size: the buffer for AllReduce,
// Broadcast and Reduce, the whole array (p segments) for ReduceScatter,
// AllGather and AllToAll.
func (m CostModel) Choose(coll Collective, p, bytes int) Algorithm {
	best, bestT := AlgoAuto, math.Inf(1)
	pm := m.params()
	for _, c := range candidates {
		if t, ok := c.impl.cost(coll, max(p, 2), float64(bytes), pm); ok && t < bestT {
			best, bestT = c.id, t
		}
	}
	if m.MemoryLinks && coll == CollAllReduce && p >= 3 && bytes >= memoryRingBytes && best == AlgoHD {
		best = AlgoRing
	}
	return best
}

// choose picks the algorithm for one call: forced, else modelled. The
// model's answer for the last size of each collective is kept (a training
// loop repeats its sizes), since evaluating every candidate's cost costs
// more than a small message's own overhead allows (~0.1 µs); whatever
// replaces c.model clears c.chosen.
func (c *Communicator) choose(coll Collective, bytes int) Algorithm {
	if a := c.force[coll]; a != AlgoAuto {
		return a
	}
	if ch := c.chosen[coll]; ch.algo != AlgoAuto && ch.bytes == bytes {
		return ch.algo
	}
	a := c.model.Choose(coll, c.size, bytes)
	c.chosen[coll] = choice{bytes: bytes, algo: a}
	return a
}

// choice is one cached answer of the cost model (see choose).
type choice struct {
	bytes int
	algo  Algorithm
}

// SetAlgorithm forces algo for every collective that implements it (the
// others choose automatically), overriding Config.Algorithm and
// ASCEND_ALGO; AlgoAuto restores the communicator's initial setting
// (Config.Algorithm, else ASCEND_ALGO, else the cost model). Like a
// collective, it must be called on every rank at the same point of the
// call sequence.
func (c *Communicator) SetAlgorithm(algo Algorithm) error {
	if !algo.valid() {
		return errorf(ErrInvalid, "algorithm %d", uint8(algo))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if algo == AlgoAuto {
		c.force = c.initial
	} else {
		c.force = forceAll(algo)
	}
	return nil
}

// Algorithm reports the algorithm the next call of coll with the given
// size would use (bytes as for CostModel.Choose).
func (c *Communicator) Algorithm(coll Collective, bytes int) Algorithm {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	return c.choose(coll, bytes)
}

// CostModel returns the model automatic selection uses.
func (c *Communicator) CostModel() CostModel {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	return c.model
}

// SetCostModel replaces the model (its Segment, Hosts, PerHost and
// MemoryLinks, facts of the communicator, are kept). It must be equal
// on all ranks, or they may choose different algorithms (then the
// collective fails with ErrMismatch).
func (c *Communicator) SetCostModel(m CostModel) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seg, hosts, per, mem := c.model.Segment, c.model.Hosts, c.model.PerHost, c.model.MemoryLinks
	c.model = m
	c.model.Segment = seg
	c.model.Hosts, c.model.PerHost, c.model.MemoryLinks = hosts, per, mem
	c.chosen = [numColl]choice{}
}

// log2ceil is ⌈log2 p⌉ for p ≥ 1.
func log2ceil(p int) int { return bits.Len(uint(p - 1)) }

// pow2floor is the largest power of two ≤ p (p ≥ 1).
func pow2floor(p int) int { return 1 << (bits.Len(uint(p)) - 1) }
