package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
	"unsafe"

	"github.com/cann-train/cann-train/ascend"
)

// Report is the result of a run, as rank 0 prints it.
type Report struct {
	Ranks     int     `json:"ranks"`
	Options   Options `json:"options"`
	CostModel string  `json:"cost_model"`
	// CostModelParams is CostModel's figures, each in a named unit.
	CostModelParams CostModelParams `json:"cost_model_params"`
	// GOMAXPROCS is what rank 0 ran with (see Options.Procs).
	GOMAXPROCS int `json:"gomaxprocs"`
	// Limits are measured before the sweep and LimitsAfter after it (on a
	// shared host the two bracket the noise), at 1, 4, 16 and 64 MiB as far
	// as the sweep reaches, and at 1 MiB however small it is (see
	// limitSizes).
	Limits      []Limits `json:"limits,omitempty"`
	LimitsAfter []Limits `json:"limits_after,omitempty"`
	Tables      []Table  `json:"tables"`
	// Skipped are the tables asked for and not measured, each with why:
	// on shared buffers auto and a forced ring run direct, so with direct
	// (or each other) also asked for they would measure the same calls
	// twice; a forced algorithm does not choose how a typed reduction
	// (double, int32) reduces (see planTables).
	Skipped []Skipped        `json:"skipped_tables,omitempty"`
	Start   time.Time        `json:"start_time"`
	End     time.Time        `json:"end_time"`
	Model   ascend.CostModel `json:"-"`
}

// Table is one collective's sweep with one algorithm setting.
type Table struct {
	Collective string `json:"collective"`
	Algorithm  string `json:"algorithm"` // as forced: auto, ring, hd, tree, …
	// RunsAs is the algorithm that runs where the communicator replaces the
	// one forced (a ring on shared buffers runs direct: the same bits);
	// empty where it does not.
	RunsAs string `json:"runs_as,omitempty"`
	Rows   []Row  `json:"results"`
	// AvgBusBW is the mean busbw over the placements of the rows of more
	// than 0 bytes. (A requested size below one element — per rank, for the
	// collectives that split it among the ranks — rounds down to a row of
	// 0 bytes, as in nccl-tests: a call with nothing to move.)
	AvgBusBW float64 `json:"avg_bus_bandwidth"`
	Wrong    int64   `json:"nwrong"` // -1: not checked
}

// Skipped is a table asked for and not measured.
type Skipped struct {
	Collective string `json:"collective"`
	Algorithm  string `json:"algorithm"`
	// MeasuredAs is the algorithm of the table that measures the same
	// calls; empty where none does (a forced algorithm on a typed
	// reduction).
	MeasuredAs string `json:"measured_as,omitempty"`
	Reason     string `json:"reason"`
	// at is the number of tables before it, for WriteTable.
	at int
}

// CostModelParams is an ascend.CostModel in named units: latencies in
// µs, link and reduction rates in GB/s (1/β, 1/γ), the "all ranks
// stepping" figures where every rank sends and receives at once.
type CostModelParams struct {
	AlphaUs        float64 `json:"alpha_us"`
	BetaGBps       float64 `json:"beta_gbps"`
	GammaGBps      float64 `json:"gamma_gbps"`
	AlphaAllUs     float64 `json:"alpha_all_us"`
	BetaAllGBps    float64 `json:"beta_all_gbps"`
	SharedMemLinks bool    `json:"shared_memory_links"`
}

func costModelParams(m ascend.CostModel) CostModelParams {
	rate := func(secPerByte float64) float64 { // 0 for no figure (no +Inf in JSON)
		if secPerByte <= 0 {
			return 0
		}
		return 1 / secPerByte / 1e9
	}
	aa, ba := m.AlphaAll, m.BetaAll
	if aa <= 0 {
		aa = m.Alpha
	}
	if ba <= 0 {
		ba = m.Beta
	}
	return CostModelParams{AlphaUs: us(m.Alpha), BetaGBps: rate(m.Beta), GammaGBps: rate(m.Gamma),
		AlphaAllUs: us(aa), BetaAllGBps: rate(ba), SharedMemLinks: m.MemoryLinks}
}

// Row is one size, nccl-tests style.
type Row struct {
	Size       int64  `json:"size"`  // bytes (nccl-tests size)
	Count      int    `json:"count"` // elements (per rank for scatter/gather shapes)
	Type       string `json:"type"`
	RedOp      string `json:"redop"`
	Root       int    `json:"root"`
	Algorithm  string `json:"algorithm"` // what ran
	Iterations int    `json:"actual_iterations"`
	// Limit is the physical limit its busbw is compared with (each
	// Result's BusBWOfLimit); nil where none was measured (see
	// limiter.forRow), as on every rank but 0, which alone measures them.
	Limit      *RowLimit `json:"limit,omitempty"`
	OutOfPlace *Result   `json:"out_of_place"`
	InPlace    *Result   `json:"in_place"` // nil where there is no in-place variant
}

// Result is one placement's measurement.
type Result struct {
	Time  float64 `json:"time_us"` // µs per operation, mean over ranks
	AlgBW float64 `json:"alg_bw"`  // GB/s
	BusBW float64 `json:"bus_bw"`  // GB/s
	// BusBWOfLimit is BusBW as a percentage of the row's Limit; nil where
	// the row has none.
	BusBWOfLimit *float64 `json:"bus_bw_pct_of_limit,omitempty"`
	NWrong       int64    `json:"nwrong"` // -1: not checked
}

// collective describes how to benchmark one collective.
type collective struct {
	factor  func(p float64) float64 // busbw / algbw
	rooted  bool                    // has a root
	reduces bool                    // has an op
	inPlace bool                    // has an in-place variant
	// shape maps a requested nccl-tests size to the count column, the
	// send and receive lengths (elements of es bytes) and the actual size.
	shape func(size int64, p, es int) (count, send, recv int, actual int64)
}

var collectives = map[ascend.Collective]collective{
	ascend.CollAllReduce: {factor: func(p float64) float64 { return 2 * (p - 1) / p }, reduces: true, inPlace: true, shape: flat},
	ascend.CollBroadcast: {factor: one, rooted: true, inPlace: true, shape: flat},
	ascend.CollReduce:    {factor: one, rooted: true, reduces: true, inPlace: true, shape: flat},
	ascend.CollReduceScatter: {factor: frac, reduces: true, inPlace: true, shape: func(size int64, p, es int) (int, int, int, int64) {
		n := int(size / int64(es*p))
		return n, p * n, n, int64(es * p * n)
	}},
	ascend.CollAllGather: {factor: frac, inPlace: true, shape: func(size int64, p, es int) (int, int, int, int64) {
		n := int(size / int64(es*p))
		return n, n, p * n, int64(es * p * n)
	}},
	ascend.CollAllToAll: {factor: frac, shape: func(size int64, p, es int) (int, int, int, int64) {
		n := int(size / int64(es*p))
		return n, p * n, p * n, int64(es * p * n)
	}},
}

func one(float64) float64    { return 1 }
func frac(p float64) float64 { return (p - 1) / p }
func flat(size int64, _, es int) (int, int, int, int64) {
	n := int(size / int64(es))
	return n, n, n, int64(es * n)
}

// RunRank runs the benchmark on this rank of comm; every rank of comm
// must call it with the same options. Rank 0 writes the report to out
// (the others write nothing): a table as it goes, as nccl-tests does
// (the header, then each row once its size is measured, so that a run
// stopped early keeps what it measured), or JSON at the end.
func RunRank(ctx context.Context, comm *ascend.Communicator, opts Options, out io.Writer) error {
	var live *tableWriter
	if comm.Rank() == 0 && opts.Defaults().Format != "json" {
		live = newTableWriter(out)
	}
	rep, err := run(ctx, comm, opts, live)
	if err != nil || comm.Rank() != 0 || live != nil {
		return err
	}
	return rep.WriteJSON(out)
}

// Run runs the benchmark on this rank and returns the report (complete on
// rank 0; the other ranks get theirs with the same aggregate numbers).
func Run(ctx context.Context, comm *ascend.Communicator, opts Options) (*Report, error) {
	return run(ctx, comm, opts, nil)
}

// run is Run, printing the table to live as it goes (nil: not).
func run(ctx context.Context, comm *ascend.Communicator, opts Options, live *tableWriter) (*Report, error) {
	opts = opts.Defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p, r := comm.Size(), comm.Rank()
	if opts.Root >= p {
		return nil, fmt.Errorf("bench: -r %d: want a rank below the %d ranks", opts.Root, p)
	}
	rep := &Report{Ranks: p, Options: opts, Start: time.Now(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	limits := func() ([]Limits, error) {
		var ls []Limits
		if opts.SkipLimits || r != 0 {
			return nil, comm.Barrier(ctx)
		}
		// With every core, whatever the ranks run with.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.NumCPU()))
		for _, size := range limitSizes(opts.MaxBytes) {
			l, err := MeasureLimits(ctx, size, p)
			if err != nil {
				return nil, err
			}
			ls = append(ls, l)
		}
		return ls, comm.Barrier(ctx) // the others wait here meanwhile
	}
	var err error
	if rep.Limits, err = limits(); err != nil {
		return nil, err
	}
	// Buffers for the largest size, allocated and faulted in once.
	// Lengths in float32 words (an element is es/4 of them); even, so
	// that a double view of the receive buffer after the send buffer in
	// shared memory stays aligned.
	maxSend, maxRecv := opts.bufferWords(p)
	b := &bufs{}
	if opts.SharedBuffers {
		sb, err := comm.AllocShared(ctx, maxSend+maxRecv)
		if err != nil {
			return nil, fmt.Errorf("bench: shared buffers: %w", err)
		}
		defer sb.Free()
		b.send, b.recv = sb.Floats()[:maxSend:maxSend], sb.Floats()[maxSend:]
	} else {
		b.send, b.recv = make([]float32, maxSend), make([]float32, maxRecv)
	}
	clear(b.send)
	clear(b.recv)
	if opts.Touch {
		b.pattern, b.sink = make([]float32, max(maxSend, maxRecv)), make([]float32, max(maxSend, maxRecv))
	}
	if err := settle(ctx, comm, settleTime); err != nil {
		return nil, err
	}
	rep.Model = comm.CostModel()
	rep.CostModel, rep.CostModelParams = rep.Model.String(), costModelParams(rep.Model)
	if err := live.header(rep); err != nil {
		return nil, err
	}

	lim := newLimiter(rep)
	for _, coll := range opts.Collectives {
		plans, err := planTables(comm, opts, coll, b.recv, b.send)
		if err != nil {
			return nil, err
		}
		for _, pl := range plans {
			if pl.skip != nil {
				sk := *pl.skip
				sk.at = len(rep.Tables)
				rep.Skipped = append(rep.Skipped, sk)
				if err := live.skipped(sk); err != nil {
					return nil, err
				}
				continue
			}
			if err := comm.SetAlgorithm(pl.algo); err != nil {
				return nil, err
			}
			t, err := runTable(ctx, comm, opts, coll, pl.algo, pl.runsAs, b, lim, live)
			if err != nil {
				return nil, err
			}
			rep.Tables = append(rep.Tables, t)
		}
	}
	if err := comm.SetAlgorithm(ascend.AlgoAuto); err != nil {
		return nil, err
	}
	if rep.LimitsAfter, err = limits(); err != nil {
		return nil, err
	}
	rep.Model = comm.CostModel()
	rep.CostModel, rep.CostModelParams = rep.Model.String(), costModelParams(rep.Model)
	rep.End = time.Now()
	return rep, live.footer(rep)
}

type bufs struct {
	send, recv []float32
	// pattern and sink (with Options.Touch) are where a call's input is
	// copied from and its output to.
	pattern, sink []float32
}

// settleTime is how long the ranks exchange small messages before the
// first timed size. Without it the first row paid for the start-up
// (garbage collection of the limits' buffers, the ranks' threads and the
// scheduler finding their places): 4 ranks over shared memory, 4 KiB,
// 12–20 µs in the first table of a run against 7.7–9.3 µs in the two
// identical tables after it (four runs), and 51 µs as the median of five
// runs of make bench-mpi, where the limits before the sweep are larger.
const settleTime = 200 * time.Millisecond

// settle collects the garbage, then runs one-element allreduces until
// rank 0 has seen d pass: it says so in the reduced value, so every rank
// stops after the same call.
func settle(ctx context.Context, comm *ascend.Communicator, d time.Duration) error {
	debug.FreeOSMemory() // a collection, and the freed heap (the limits' buffers) returned to the OS now rather than by the background scavenger during the first sizes
	flag := make([]float32, 1)
	start := time.Now()
	for {
		flag[0] = 0
		if comm.Rank() == 0 && time.Since(start) < d {
			flag[0] = 1
		}
		if err := comm.AllReduce(ctx, flag, ascend.Max); err != nil {
			return err
		}
		if flag[0] == 0 {
			return nil
		}
	}
}

// limitSizes are the transfer sizes the limits are measured at: 1, 4, 16
// and 64 MiB up to the sweep's largest, and 1 MiB (minLimitBytes) however
// small that is. Caches make memcpy two to three times faster at 1-4 MiB
// than at 64 MiB, so each row is compared with the limit measured nearest
// its size.
func limitSizes(maxBytes int64) []int64 {
	var sizes []int64
	for _, s := range []int64{minLimitBytes, 4 << 20, 16 << 20, 64 << 20} {
		if s <= maxBytes || len(sizes) == 0 {
			sizes = append(sizes, s)
		}
	}
	return sizes
}

// minLimitBytes is the least transfer size the limits are measured at:
// smaller transfers time the per-message latency (a loopback TCP write of
// 8 B: 0.00 GB/s), not a ceiling on bandwidth.
const minLimitBytes = 1 << 20

// runsDirect reports whether coll runs direct on comm with the algorithm
// comm has forced for it (auto, ring or direct) and the buffers recv and
// send: float32 collectives, and the double and int32 ones that move
// words without reducing them (ascend's typed Broadcast and AllGather run
// the float32 machinery; its typed reductions do not).
func runsDirect(comm *ascend.Communicator, opts Options, coll ascend.Collective, recv, send []float32) bool {
	return (opts.DType == DTypeFloat || !collectives[coll].reduces) && comm.DirectFor(coll, recv, send)
}

// tablePlan is what run does for one algorithm asked for, on one
// collective: measure a table of algo (runsAs is its Table.RunsAs), or
// print skip's line instead.
type tablePlan struct {
	algo   ascend.Algorithm
	runsAs string
	skip   *Skipped
}

// typedReduction reports whether coll, of opts' data type, runs one of the
// typed reductions (ascend.AllReduceOf, ReduceOf, ReduceScatterOf of double
// or int32): they reduce by their own algorithm, gather or shares, whatever
// algorithm is forced (which at most picks how their allgathers move the
// words), so a forced algorithm has no table of its own there.
func (o Options) typedReduction(coll ascend.Collective) bool {
	return o.DType != DTypeFloat && collectives[coll].reduces
}

// hasTable reports whether algo asked for gives coll a table: auto always;
// a forced algorithm where coll implements it and runs it (not a typed
// reduction).
func (o Options) hasTable(algo ascend.Algorithm, coll ascend.Collective) bool {
	return algo == ascend.AlgoAuto || algo.Implements(coll) && !o.typedReduction(coll)
}

// planTables decides, for coll, what each algorithm of opts.Algorithms
// gets, in their order. An algorithm coll does not implement gets
// nothing; a forced one on a typed reduction gets a line saying why it has
// no table. Then tables that would run the same calls are measured once,
// a line standing for the others: on shared buffers (-R 1) auto and a
// forced ring both run direct (ascend's directFor; the ring's bits and
// direct's are the same), and an algorithm asked for twice runs the same
// calls twice. The one measured is direct where direct is asked for, else
// the first of them; a forced ring measured so says in its heading that it
// runs direct. Every rank must call it at the same point: it sets the
// communicator's algorithm (as SetAlgorithm), which it leaves undefined.
func planTables(comm *ascend.Communicator, opts Options, coll ascend.Collective, recv, send []float32) ([]tablePlan, error) {
	algos := opts.Algorithms
	runs := make([]string, len(algos)) // the path each runs; "": no table
	for i, algo := range algos {
		if !opts.hasTable(algo, coll) {
			continue
		}
		if err := comm.SetAlgorithm(algo); err != nil {
			return nil, err
		}
		runs[i] = algo.String()
		if (algo == ascend.AlgoAuto || algo == ascend.AlgoRing) && runsDirect(comm, opts, coll, recv, send) {
			runs[i] = ascend.AlgoDirect.String()
		}
	}
	var plans []tablePlan
	for i, algo := range algos {
		if runs[i] == "" {
			if algo.Implements(coll) && opts.typedReduction(coll) {
				plans = append(plans, tablePlan{algo: algo, skip: &Skipped{Collective: coll.String(), Algorithm: algo.String(),
					Reason: fmt.Sprintf("%s reductions run gather or shares whatever algorithm is forced: no table of %s (algorithm auto measures them)", opts.DType, algo)}})
			}
			continue
		}
		same := func(j int) bool { return runs[j] == runs[i] }
		m := slices.IndexFunc(algos, func(a ascend.Algorithm) bool { return a.String() == runs[i] }) // direct asked for
		if m < 0 || !same(m) {
			m = slices.IndexFunc(runs, func(r string) bool { return r == runs[i] })
		}
		if m == i {
			pl := tablePlan{algo: algo}
			if algo == ascend.AlgoRing && runs[i] != algo.String() {
				pl.runsAs = runs[i]
			}
			plans = append(plans, pl)
			continue
		}
		where := "below"
		if m < i {
			where = "above"
		}
		var why string
		switch {
		case algos[m] == algo:
			why = "asked for twice"
		case algo == ascend.AlgoRing:
			why = "a ring on shared buffers runs direct (the same bits)"
		default: // auto
			why = "auto on shared buffers runs direct"
		}
		plans = append(plans, tablePlan{algo: algo, skip: &Skipped{Collective: coll.String(), Algorithm: algo.String(), MeasuredAs: algos[m].String(),
			Reason: fmt.Sprintf("%s: measured once, as algorithm %s (%s)", why, algos[m], where)}})
	}
	return plans, nil
}

// runTable measures one table, printing it to live as it goes (nil: not).
// runsAs is Table.RunsAs; lim gives each row its limit.
func runTable(ctx context.Context, comm *ascend.Communicator, opts Options, coll ascend.Collective, algo ascend.Algorithm, runsAs string, b *bufs, lim limiter, live *tableWriter) (Table, error) {
	cd := collectives[coll]
	p := comm.Size()
	t := Table{Collective: coll.String(), Algorithm: algo.String(), RunsAs: runsAs}
	if opts.SkipCheck {
		t.Wrong = -1
	}
	if err := live.tableStart(&t); err != nil {
		return t, err
	}
	var sum float64
	var nbw int
	seen := map[int64]bool{}
	for _, req := range opts.sizes() {
		es := opts.elemBytes()
		count, ns, nr, size := cd.shape(req, p, es)
		if seen[size] {
			continue // several requested sizes round to the same shape
		}
		seen[size] = true
		ns, nr = ns*es/4, nr*es/4 // in float32 words
		row := Row{Size: size, Count: count, Type: opts.DType, RedOp: "none", Root: -1,
			Algorithm: comm.Algorithm(coll, int(size)).String()}
		switch {
		case opts.DType != DTypeFloat && coll == ascend.CollReduceScatter:
			row.Algorithm = ascend.TypedShares
		case opts.DType != DTypeFloat && cd.reduces:
			row.Algorithm = ascend.TypedReduction(p, int(size))
		case runsDirect(comm, opts, coll, b.recv[:nr], b.send[:ns]):
			row.Algorithm = ascend.AlgoDirect.String()
		}
		if cd.reduces {
			row.RedOp = opts.Op.String()
		}
		if cd.rooted {
			row.Root = opts.Root
		}
		x := &op{comm: comm, coll: coll, opts: opts, count: count, send: b.send[:ns], recv: b.recv[:nr], b: b}
		iters := opts.Iters
		for pi, inPlace := range []bool{false, true} {
			if inPlace && !cd.inPlace {
				continue
			}
			x.inPlace = inPlace
			res := &Result{NWrong: -1}
			if !opts.SkipCheck {
				wrong, err := x.check(ctx, 1+len(t.Rows))
				if err != nil {
					return t, err
				}
				res.NWrong = wrong
				t.Wrong += wrong
			}
			switch {
			case iters == 0: // warm up and agree on the count, once per size
				n, err := x.agreeIters(ctx)
				if err != nil {
					return t, err
				}
				iters = n
			default: // fixed count, or the second placement of a size
				warm := opts.Warmup
				if opts.Iters == 0 && pi > 0 {
					warm = 1
				}
				for range warm {
					if err := x.run(ctx); err != nil {
						return t, err
					}
				}
			}
			sec, err := x.time(ctx, iters)
			if err != nil {
				return t, err
			}
			res.Time = sec * 1e6
			if sec > 0 {
				res.AlgBW = float64(size) / sec / 1e9
			}
			res.BusBW = res.AlgBW * cd.factor(float64(p))
			if size > 0 { // an empty call's 0 GB/s is no bandwidth
				sum += res.BusBW
				nbw++
			}
			if inPlace {
				row.InPlace = res
			} else {
				row.OutOfPlace = res
			}
		}
		row.Iterations = iters
		lim.compare(coll, &row)
		t.Rows = append(t.Rows, row)
		if err := live.row(row); err != nil {
			return t, err
		}
	}
	if nbw > 0 {
		t.AvgBusBW = sum / float64(nbw)
	}
	return t, live.tableEnd(&t)
}

// op runs one collective at one size and placement; send and recv are
// float32 words, count elements of the data type per segment.
type op struct {
	comm       *ascend.Communicator
	coll       ascend.Collective
	opts       Options
	count      int
	send, recv []float32
	inPlace    bool
	b          *bufs
}

// touched is what a call reads and what it writes (Options.Touch): out of
// place send and recv; in place the one buffer (send for ReduceScatter,
// which reduces in send, recv for the others).
func (x *op) touched() (in, out []float32) {
	switch {
	case !x.inPlace || x.coll == ascend.CollAllToAll:
		return x.send, x.recv
	case x.coll == ascend.CollReduceScatter:
		return x.send, x.send
	}
	return x.recv, x.recv
}

func (x *op) run(ctx context.Context) error {
	switch x.opts.DType {
	case DTypeDouble:
		return runTyped[float64](ctx, x)
	case DTypeInt32:
		return runTyped[int32](ctx, x)
	}
	c, o := x.comm, x.opts
	switch x.coll {
	case ascend.CollAllReduce:
		if x.inPlace {
			return c.AllReduce(ctx, x.recv, o.Op)
		}
		return c.AllReduceInto(ctx, x.recv, x.send, o.Op)
	case ascend.CollBroadcast:
		if x.inPlace {
			return c.Broadcast(ctx, x.recv, o.Root)
		}
		return c.BroadcastInto(ctx, x.recv, x.send, o.Root)
	case ascend.CollReduce:
		if x.inPlace {
			return c.Reduce(ctx, x.recv, o.Op, o.Root)
		}
		return c.ReduceInto(ctx, x.recv, x.send, o.Op, o.Root)
	case ascend.CollReduceScatter:
		if x.inPlace {
			return c.ReduceScatter(ctx, x.send, o.Op)
		}
		return c.ReduceScatterInto(ctx, x.recv, x.send, o.Op)
	case ascend.CollAllGather:
		if x.inPlace {
			return c.AllGather(ctx, x.recv)
		}
		return c.AllGatherInto(ctx, x.recv, x.send)
	case ascend.CollAllToAll:
		return c.AllToAll(ctx, x.recv, x.send)
	}
	return fmt.Errorf("bench: no benchmark for %v", x.coll)
}

// view is the float32 words w as elements of T.
func view[T ascend.Element](w []float32) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*4/int(unsafe.Sizeof(z)))
}

// runTyped is run for double and int32, through the typed collectives,
// with the same buffers and placements as the float32 methods.
func runTyped[T ascend.Element](ctx context.Context, x *op) error {
	c, o := x.comm, x.opts
	send, recv := view[T](x.send), view[T](x.recv)
	in := send
	if x.inPlace {
		in = recv
	}
	switch x.coll {
	case ascend.CollAllReduce:
		return ascend.AllReduceOf(ctx, c, recv, in, o.Op)
	case ascend.CollBroadcast:
		return ascend.BroadcastOf(ctx, c, recv, in, o.Root)
	case ascend.CollReduce:
		return ascend.ReduceOf(ctx, c, recv, in, o.Op, o.Root)
	case ascend.CollReduceScatter:
		if x.inPlace {
			r, n := c.Rank(), x.count
			return ascend.ReduceScatterOf(ctx, c, send[r*n:(r+1)*n], send, o.Op)
		}
		return ascend.ReduceScatterOf(ctx, c, recv, send, o.Op)
	case ascend.CollAllGather:
		if x.inPlace {
			r, n := c.Rank(), x.count
			return ascend.AllGatherOf(ctx, c, recv, recv[r*n:(r+1)*n])
		}
		return ascend.AllGatherOf(ctx, c, recv, send)
	case ascend.CollAllToAll:
		return ascend.AllToAllOf(ctx, c, recv, send)
	}
	return fmt.Errorf("bench: no benchmark for %v", x.coll)
}

// agreeIters runs the warm-up, timing each operation, and derives the
// iteration count from rank 0's median, which it broadcasts so every rank
// runs the same number of operations (Gloo's benchmark runner does the
// same).
func (x *op) agreeIters(ctx context.Context) (int, error) {
	o := x.opts
	times := make([]float64, o.Warmup)
	for i := range times {
		start := time.Now()
		if err := x.run(ctx); err != nil {
			return 0, err
		}
		times[i] = time.Since(start).Seconds()
	}
	slices.Sort(times)
	med := []float32{float32(times[len(times)/2])}
	if err := x.comm.Broadcast(ctx, med, 0); err != nil {
		return 0, err
	}
	n := int(math.Ceil(o.TargetTime.Seconds() / max(float64(med[0]), 1e-9)))
	return min(max(n, o.MinIters), o.MaxIters), nil
}

// time runs iters back-to-back operations after a barrier and returns
// the mean seconds per operation, averaged over ranks (nccl-tests -a 1).
func (x *op) time(ctx context.Context, iters int) (float64, error) {
	if err := x.comm.Barrier(ctx); err != nil {
		return 0, err
	}
	var in, out, pattern, sink []float32
	if x.opts.Touch {
		in, out = x.touched()
		pattern, sink = x.b.pattern[:len(in)], x.b.sink[:len(out)]
		copy(pattern, in) // the values the call just ran on: no overflow from call to call
	}
	start := time.Now()
	for range iters {
		copy(in, pattern)
		if err := x.run(ctx); err != nil {
			return 0, err
		}
		copy(sink, out)
	}
	sec := []float32{float32(time.Since(start).Seconds() / float64(iters))}
	if err := x.comm.AllReduce(ctx, sec, ascend.Avg); err != nil {
		return 0, err
	}
	return float64(sec[0]), nil
}

// value is rank's seeded input element i: base + rank·step with small
// integer base and step ≥ 1, so values are distinct per rank, every
// reduction is exact in float32 in any order, and its expected value has
// a closed form.
func value(seed, rank, i int) float32 {
	base, step := baseStep(seed, i)
	return base + float32(rank)*step
}

func baseStep(seed, i int) (base, step float32) {
	h := uint32(seed)*0x9E3779B1 ^ uint32(i)*0x85EBCA77
	h ^= h >> 15
	h *= 0xC2B2AE3D
	h ^= h >> 13
	return float32(int(h%129) - 64), float32(1 + h>>24%8)
}

// expected is the reduction over p ranks of element i.
func expected(seed, i, p int, o ascend.Op) float32 { return expectedAs[float32](seed, i, p, o) }

// expectedAs is expected computed in T (exact: the inputs are small
// integers, and Avg's one division rounds in T as the collective's does).
func expectedAs[T ascend.Element](seed, i, p int, o ascend.Op) T {
	b, st := baseStep(seed, i)
	base, step, P := T(b), T(st), T(p)
	switch o {
	case ascend.Max:
		return base + (P-1)*step
	case ascend.Min:
		return base
	}
	sum := P*base + step*T(p*(p-1)/2)
	if o == ascend.Avg {
		return sum / P
	}
	return sum
}

// check fills the inputs, runs the collective once and counts the wrong
// output elements over all ranks.
func (x *op) check(ctx context.Context, seed int) (int64, error) {
	var wrong int64
	var err error
	switch x.opts.DType {
	case DTypeDouble:
		wrong, err = checkAs[float64](ctx, x, seed, math.NaN())
	case DTypeInt32:
		wrong, err = checkAs[int32](ctx, x, seed, math.MinInt32)
	default:
		wrong, err = checkAs[float32](ctx, x, seed, float32(math.NaN()))
	}
	if err != nil {
		return 0, err
	}
	// Sum in 12-bit digits: exact in float32 for up to 4096 ranks.
	tot := []float32{float32(wrong >> 24), float32(wrong >> 12 & 0xFFF), float32(wrong & 0xFFF)}
	if err := x.comm.AllReduce(ctx, tot, ascend.Sum); err != nil {
		return 0, err
	}
	return int64(tot[0])<<24 + int64(tot[1])<<12 + int64(tot[2]), nil
}

// checkAs fills this rank's inputs with value converted to T and unset
// outputs with garbage, runs the collective once and returns how many of
// this rank's output elements are wrong.
func checkAs[T ascend.Element](ctx context.Context, x *op, seed int, garbage T) (int64, error) {
	p, r := x.comm.Size(), x.comm.Rank()
	n, o := x.count, x.opts
	send, recv := view[T](x.send), view[T](x.recv)
	fillIn := func(buf []T, rank, from int) {
		for i := range buf {
			buf[i] = T(value(seed, rank, from+i))
		}
	}
	spoil := func(buf []T) {
		for i := range buf {
			buf[i] = garbage
		}
	}
	var wrong int64
	eq := func(got, want T) {
		if got != want {
			wrong++
		}
	}
	in := send
	if x.inPlace {
		in = recv
	}
	spoil(recv)
	switch x.coll {
	case ascend.CollAllReduce, ascend.CollReduce:
		fillIn(in, r, 0)
	case ascend.CollBroadcast:
		if r == o.Root {
			fillIn(in, r, 0)
		}
	case ascend.CollReduceScatter, ascend.CollAllToAll:
		fillIn(send, r, 0)
	case ascend.CollAllGather:
		if x.inPlace {
			fillIn(recv[r*n:(r+1)*n], r, 0)
		} else {
			fillIn(send, r, 0)
		}
	}
	if err := x.run(ctx); err != nil {
		return 0, err
	}
	switch x.coll {
	case ascend.CollAllReduce:
		for i, v := range recv {
			eq(v, expectedAs[T](seed, i, p, o.Op))
		}
	case ascend.CollReduce:
		if r == o.Root {
			for i, v := range recv {
				eq(v, expectedAs[T](seed, i, p, o.Op))
			}
		}
	case ascend.CollBroadcast:
		for i, v := range recv {
			eq(v, T(value(seed, o.Root, i)))
		}
	case ascend.CollReduceScatter:
		out := recv
		if x.inPlace {
			out = send[r*n : (r+1)*n]
		}
		for i, v := range out {
			eq(v, expectedAs[T](seed, r*n+i, p, o.Op))
		}
	case ascend.CollAllGather:
		for i, v := range recv {
			eq(v, T(value(seed, i/n, i%n)))
		}
	case ascend.CollAllToAll:
		for i, v := range recv {
			eq(v, T(value(seed, i/n, r*n+i%n)))
		}
	}
	return wrong, nil
}
