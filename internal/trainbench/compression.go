package trainbench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine"
)

// Exchange modes of a compressed payload.
const (
	ExchangeAllGather = "allgather" // codec.Exchange: every rank's encoding to every rank
	ExchangeTwoPhase  = "twophase"  // codec.TwoPhase: all-to-all, server re-encoding, allgather
)

// CompressionOptions describes one side-by-side run. The zero value of a
// field selects its default.
type CompressionOptions struct {
	Ranks int // data-parallel ranks (default 3)
	Steps int // training steps (default 600)
	// Optimizer is "adam" (default: the gradient is compressed after
	// Warmup uncompressed steps) or "onebit-adam" (1-bit Adam: FreezeStep
	// steps of Adam on the gradient, then the momentum is compressed).
	Optimizer string
	// Codec compresses the gradient (adam) or the momentum (onebit-adam),
	// in codec.Parse syntax or "powersgd:RANK" (adam only). Default
	// "topk:0.01" with adam, "sign" with onebit-adam. "auto" lets
	// codec.Choose pick one at the end of the warm-up from the measured
	// bandwidth and computation time (the ranks take the most compressing
	// of their choices).
	Codec string
	// LinkBytesPerSec, if > 0, replaces the measured bandwidth in the
	// "auto" decision: what would it pick on a slower network?
	LinkBytesPerSec float64
	// Exchange is how compressed payloads travel: ExchangeAllGather
	// (default with adam) or ExchangeTwoPhase (default with onebit-adam).
	Exchange string
	// Warmup is, with adam, the number of uncompressed steps first (0: 2 %
	// of Steps; negative: none).
	Warmup int
	// FreezeStep is, with onebit-adam, engine.Config.FreezeStep (0: 1.5 %
	// of Steps).
	FreezeStep int
	// GradCodec compresses, with onebit-adam, the gradient during the
	// warm-up, through Exchange (default "none": uncompressed, a plain
	// allreduce).
	GradCodec string
	// Seed is engine.Config.Seed (0: engine.DefaultSeed).
	Seed uint64
	// Data is the MNIST directory (default engine.MNISTDir()).
	Data string
}

func (o CompressionOptions) withDefaults() (CompressionOptions, error) {
	if o.Ranks <= 0 {
		o.Ranks = 3
	}
	if o.Steps <= 0 {
		o.Steps = 600
	}
	if o.Seed == 0 {
		o.Seed = engine.DefaultSeed
	}
	opt, err := engine.ParseOptimizer(o.Optimizer)
	if err != nil {
		return o, err
	}
	o.Optimizer = opt.String()
	switch opt {
	case engine.Adam:
		if o.Codec == "" {
			o.Codec = "topk:0.01"
		}
		if o.Exchange == "" {
			o.Exchange = ExchangeAllGather
		}
		if o.Warmup < 0 {
			o.Warmup = 0
		} else if o.Warmup == 0 {
			o.Warmup = o.Steps / 50
		}
		if o.FreezeStep != 0 || o.GradCodec != "" {
			return o, errors.New("trainbench: a freeze step and a gradient codec need the onebit-adam optimizer")
		}
	case engine.OneBitAdam:
		if o.Codec == "" {
			o.Codec = "sign"
		}
		if o.Exchange == "" {
			o.Exchange = ExchangeTwoPhase
		}
		if o.FreezeStep <= 0 {
			o.FreezeStep = max(1, o.Steps*3/200)
		}
		if o.GradCodec == "" {
			o.GradCodec = "none"
		}
		if strings.HasPrefix(o.Codec, "powersgd") {
			return o, errors.New("trainbench: onebit-adam needs an encoding codec (sign, topk, int8), not powersgd")
		}
		o.Warmup = 0
	}
	if o.Exchange != ExchangeAllGather && o.Exchange != ExchangeTwoPhase {
		return o, fmt.Errorf("trainbench: exchange %q, want %s or %s", o.Exchange, ExchangeAllGather, ExchangeTwoPhase)
	}
	for _, c := range []string{o.Codec, o.GradCodec} {
		if c == "" || c == CodecAuto || strings.HasPrefix(c, "powersgd") {
			continue
		}
		if _, err := codec.Parse(c); err != nil {
			return o, err
		}
	}
	return o, nil
}

// CodecAuto is the Codec that lets codec.Choose decide.
const CodecAuto = "auto"

// Run is one training run's outcome.
type Run struct {
	TestLoss     float64 `json:"test_loss"`
	TestAccuracy float64 `json:"test_accuracy"`
	// TailTestLoss is the mean test loss over the last tenth of the run
	// (TailPoints evaluations, the last one after the last step; fewer in
	// runs under 200 steps, one per 20 steps): the test loss of a single
	// step moves by a few percent from one step to the next, this much
	// less.
	TailTestLoss float64   `json:"tail_test_loss"`
	BytesPerRank float64   `json:"bytes_sent_per_rank"` // gradient traffic, whole run
	Seconds      float64   `json:"seconds"`
	Loss         []float32 `json:"loss_curve"` // training loss per step
	// Auto is the decision of the "auto" codec (rank 0's measurement,
	// the codec all ranks agreed on).
	Auto *codec.Choice `json:"auto,omitempty"`
}

// CompressionResult compares a compressed run with an uncompressed one
// from the same seed.
type CompressionResult struct {
	Task       string `json:"task"`
	Ranks      int    `json:"ranks"`
	Steps      int    `json:"steps"`
	Optimizer  string `json:"optimizer"`
	Codec      string `json:"codec"`
	Exchange   string `json:"exchange"`
	Warmup     int    `json:"warmup_steps"`
	FreezeStep int    `json:"freeze_step,omitempty"`
	GradCodec  string `json:"grad_codec,omitempty"`
	// TrafficReduction is the uncompressed run's gradient bytes sent per
	// rank (ring allreduce) over the compressed run's (warm-up, length
	// exchanges and the loss scalar included).
	TrafficReduction float64 `json:"traffic_reduction"`
	// FinalLossGapPct is (compressed − uncompressed) / uncompressed test
	// loss after the last step, in percent.
	FinalLossGapPct float64 `json:"final_loss_gap_pct"`
	// TailLossGapPct is the same for TailTestLoss.
	TailLossGapPct float64 `json:"tail_loss_gap_pct"`
	Seed           uint64  `json:"seed"`
	Dense          Run     `json:"uncompressed"`
	Compressed     Run     `json:"compressed"`
}

// Compression trains the built-in task twice from the same seed: with
// Adam and plain allreduce, then as o says (error feedback on), and
// compares them.
func Compression(ctx context.Context, o CompressionOptions) (CompressionResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return CompressionResult{}, err
	}
	canon := func(s string) string {
		if c, err := codec.Parse(s); err == nil && s != CodecAuto && !strings.HasPrefix(s, "powersgd") {
			return c.Name()
		}
		return s
	}
	train, test, err := loadData(o.Data)
	if err != nil {
		return CompressionResult{}, err
	}
	res := CompressionResult{Task: "MNIST MLP (engine defaults), data parallel, test-set loss after the last step",
		Ranks: o.Ranks, Steps: o.Steps, Optimizer: o.Optimizer, Codec: canon(o.Codec), Exchange: o.Exchange, Warmup: o.Warmup,
		FreezeStep: o.FreezeStep, Seed: o.Seed}
	if o.GradCodec != "" {
		res.GradCodec = canon(o.GradCodec)
	}
	if res.Dense, err = trainRun(ctx, o, false, train, test); err != nil {
		return res, fmt.Errorf("uncompressed run: %w", err)
	}
	if res.Compressed, err = trainRun(ctx, o, true, train, test); err != nil {
		return res, fmt.Errorf("compressed run: %w", err)
	}
	if a := res.Compressed.Auto; a != nil {
		res.Codec = "auto: " + a.Codec
	}
	res.TrafficReduction = res.Dense.BytesPerRank / res.Compressed.BytesPerRank
	res.FinalLossGapPct = 100 * (res.Compressed.TestLoss - res.Dense.TestLoss) / res.Dense.TestLoss
	res.TailLossGapPct = 100 * (res.Compressed.TailTestLoss - res.Dense.TailTestLoss) / res.Dense.TailTestLoss
	return res, nil
}

// loadData loads MNIST from dir (default engine.MNISTDir()).
func loadData(dir string) (train, test *engine.Dataset, err error) {
	if dir == "" {
		if dir, err = engine.MNISTDir(); err != nil {
			return nil, nil, err
		}
	}
	return engine.LoadMNIST(dir)
}

// group connects n in-process ranks over loopback TCP.
func group(ctx context.Context, n int) ([]*ascend.Communicator, error) {
	ls := make([]*tcp.Listener, n)
	addrs := make([]string, n)
	for i := range ls {
		l, err := tcp.Listen("127.0.0.1:0")
		if err != nil {
			for _, l := range ls[:i] {
				l.Close()
			}
			return nil, err
		}
		ls[i], addrs[i] = l, l.Addr()
	}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	token := make([]byte, 32)
	rand.Read(token)
	comms := make([]*ascend.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Ring: the trainer's reductions are then bit-identical run to run.
			comms[r], errs[r] = tcp.Connect(ctx, ls[r], tcp.Group{Session: "trainbench", Rank: r, Addrs: addrs, Token: token},
				tcp.Options{Algorithm: ascend.AlgoRing, SkipCalibration: true})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(comms)
		return nil, err
	}
	return comms, nil
}

func closeAll(comms []*ascend.Communicator) {
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
}

// onRanks runs fn for every rank in its own goroutine; a failing rank
// closes its communicator so that the others fail fast.
func onRanks(comms []*ascend.Communicator, fn func(r int) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = fn(r); errs[r] != nil {
				comms[r].Close()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// trainRun trains o.Steps steps on o.Ranks ranks, uncompressed with Adam
// or as o says, and evaluates rank 0's model.
func trainRun(ctx context.Context, o CompressionOptions, compressed bool, train, test *engine.Dataset) (Run, error) {
	comms, err := group(ctx, o.Ranks)
	if err != nil {
		return Run{}, err
	}
	defer closeAll(comms)
	runners := make([]*rankRunner, len(comms))
	curves := make([][]float32, len(comms))
	var tail []float64
	var evalTime time.Duration
	// Up to TailPoints evaluations, at most one per 20 steps; with one,
	// the tail is the final evaluation.
	points := max(1, min(TailPoints, o.Steps/20))
	every := max(1, o.Steps/(10*points))
	start := time.Now()
	err = onRanks(comms, func(r int) error {
		rr, err := newRankRunner(o, compressed, comms[r], train)
		if err != nil {
			return err
		}
		runners[r] = rr
		for s := range o.Steps {
			loss, err := rr.step(ctx)
			if err != nil {
				return err
			}
			curves[r] = append(curves[r], loss)
			if left := o.Steps - 1 - s; r == 0 && points > 1 && left%every == 0 && left/every < points {
				t0 := time.Now()
				_, l, err := rr.t.EvaluateErr(test)
				if err != nil {
					return err
				}
				tail = append(tail, l)
				evalTime += time.Since(t0)
			}
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	out := Run{Seconds: (time.Since(start) - evalTime).Seconds(), BytesPerRank: runners[0].bytes, Loss: curves[0], Auto: runners[0].choice}
	if err := sameWeights(runners); err != nil {
		return Run{}, err
	}
	out.TestAccuracy, out.TestLoss, err = runners[0].t.EvaluateErr(test)
	if len(tail) == 0 {
		tail = append(tail, out.TestLoss)
	}
	for _, l := range tail {
		out.TailTestLoss += l / float64(len(tail))
	}
	return out, err
}

// TailPoints is the number of test-set evaluations averaged into
// Run.TailTestLoss.
const TailPoints = 10

func sameWeights(runners []*rankRunner) error {
	for r, rr := range runners[1:] {
		if rr.t.WeightsSHA256() != runners[0].t.WeightsSHA256() {
			return fmt.Errorf("rank %d ended with other weights than rank 0", r+1)
		}
	}
	return nil
}

// payloadReducer averages a payload (the first NumParams values of the
// step buffer) across ranks and says how many bytes this rank sent.
type payloadReducer interface {
	reduce(ctx context.Context, buf []float32, step uint64) (sent float64, err error)
	// state and setState marshal what must survive a checkpoint (nil: none).
	state() ([]byte, error)
	setState([]byte) error
}

// ringBytes is what a rank sends in a ring allreduce of n values.
func ringBytes(comm *ascend.Communicator, n int) float64 {
	p := float64(comm.Size())
	return 2 * (p - 1) / p * 4 * float64(n)
}

type denseReducer struct{ comm *ascend.Communicator }

func (d denseReducer) reduce(ctx context.Context, buf []float32, _ uint64) (float64, error) {
	return ringBytes(d.comm, len(buf)), d.comm.AllReduce(ctx, buf, ascend.Avg)
}
func (denseReducer) state() ([]byte, error) { return nil, nil }
func (denseReducer) setState(b []byte) error {
	if len(b) != 0 {
		return errors.New("trainbench: state for an uncompressed reducer")
	}
	return nil
}

type allGatherReducer struct {
	comm *ascend.Communicator
	fb   *codec.Feedback
	x    codec.Exchange
}

func (a *allGatherReducer) reduce(ctx context.Context, buf []float32, step uint64) (float64, error) {
	st, err := a.x.AllReduce(ctx, a.comm, a.fb, buf, step, true)
	p := float64(a.comm.Size())
	return (p - 1) / p * float64(st.TotalPayload+4*a.comm.Size()), err
}
func (a *allGatherReducer) state() ([]byte, error)  { return a.fb.MarshalBinary() }
func (a *allGatherReducer) setState(b []byte) error { return a.fb.UnmarshalBinary(b) }

type twoPhaseReducer struct {
	comm *ascend.Communicator
	x    *codec.TwoPhase
}

func (t *twoPhaseReducer) reduce(ctx context.Context, buf []float32, step uint64) (float64, error) {
	st, err := t.x.AllReduce(ctx, t.comm, buf, step, true)
	return float64(st.SentBytes), err
}
func (t *twoPhaseReducer) state() ([]byte, error)  { return t.x.MarshalBinary() }
func (t *twoPhaseReducer) setState(b []byte) error { return t.x.UnmarshalBinary(b) }

type powerSGDReducer struct {
	comm    *ascend.Communicator
	p       *codec.PowerSGD
	tensors []engine.Tensor
	mats    []codec.Matrix
}

func (p *powerSGDReducer) reduce(ctx context.Context, buf []float32, _ uint64) (float64, error) {
	for i, ts := range p.tensors {
		p.mats[i].Data = buf[ts.Offset : ts.Offset+ts.Rows*ts.Cols]
	}
	if err := p.p.AllReduce(ctx, sumReducer{p.comm}, p.mats); err != nil {
		return 0, err
	}
	values, _ := p.p.Traffic(p.mats)
	return ringBytes(p.comm, values), nil
}
func (p *powerSGDReducer) state() ([]byte, error) {
	return nil, errors.New("trainbench: powersgd state does not checkpoint")
}
func (p *powerSGDReducer) setState([]byte) error {
	return errors.New("trainbench: powersgd state does not checkpoint")
}

// newPayloadReducer builds rank comm's reducer of n values for codecName
// ("none" or "": uncompressed).
func newPayloadReducer(codecName, exchange string, comm *ascend.Communicator, t *engine.Trainer) (payloadReducer, error) {
	n := t.NumParams()
	switch {
	case codecName == "" || codecName == "none":
		return denseReducer{comm}, nil
	case strings.HasPrefix(codecName, "powersgd"):
		rank := 4
		if _, arg, ok := strings.Cut(codecName, ":"); ok {
			if _, err := fmt.Sscanf(arg, "%d", &rank); err != nil {
				return nil, fmt.Errorf("powersgd rank %q: %w", arg, err)
			}
		}
		ps, err := codec.NewPowerSGD(rank, 1)
		if err != nil {
			return nil, err
		}
		pr := &powerSGDReducer{comm: comm, p: ps, tensors: t.Tensors()}
		for _, ts := range pr.tensors {
			pr.mats = append(pr.mats, codec.Matrix{Rows: ts.Rows, Cols: ts.Cols})
		}
		return pr, nil
	}
	c, err := codec.Parse(codecName) // one per rank: codecs keep scratch
	if err != nil {
		return nil, err
	}
	if exchange == ExchangeTwoPhase {
		x, err := codec.NewTwoPhase(c, n, comm.Rank(), comm.Size())
		if err != nil {
			return nil, err
		}
		return &twoPhaseReducer{comm: comm, x: x}, nil
	}
	return &allGatherReducer{comm: comm, fb: codec.NewFeedback(c, n)}, nil
}

// rankRunner is one rank of a run: its trainer and the reducers of its
// payloads.
type rankRunner struct {
	t      *engine.Trainer
	comm   *ascend.Communicator
	warmup int            // adam: dense steps before main
	main   payloadReducer // the compressed payload
	grad   payloadReducer // onebit-adam: gradient payloads
	dense  denseReducer
	bytes  float64 // sent so far
	reduce engine.ReduceFunc
	cur    payloadReducer

	// Codec "auto": main is nil until decided; the warm-up is measured.
	o                            CompressionOptions
	commTime, stepTime, lastComm time.Duration
	measured                     int
	choice                       *codec.Choice
}

// newRankRunner builds rank comm.Rank()'s trainer and reducers: Adam with
// plain allreduce if !compressed, else as o says.
func newRankRunner(o CompressionOptions, compressed bool, comm *ascend.Communicator, train *engine.Dataset) (*rankRunner, error) {
	cfg := engine.DefaultConfig()
	cfg.Seed, cfg.Rank, cfg.World = o.Seed, comm.Rank(), comm.Size()
	if compressed && o.Optimizer == engine.OneBitAdam.String() {
		cfg.Optimizer, cfg.FreezeStep = engine.OneBitAdam, int64(o.FreezeStep)
	}
	t, err := engine.NewTrainer(cfg, train)
	if err != nil {
		return nil, err
	}
	rr := &rankRunner{t: t, comm: comm, dense: denseReducer{comm}, o: o}
	rr.main, rr.grad = rr.dense, rr.dense
	if compressed {
		if o.Codec == CodecAuto {
			rr.main = nil
		} else if rr.main, err = newPayloadReducer(o.Codec, o.Exchange, comm, t); err != nil {
			return nil, err
		}
		if cfg.Optimizer == engine.OneBitAdam {
			if rr.grad, err = newPayloadReducer(o.GradCodec, o.Exchange, comm, t); err != nil {
				return nil, err
			}
		} else {
			rr.warmup = o.Warmup
		}
	}
	np := t.NumParams()
	rr.reduce = func(ctx context.Context, buf []float32) error {
		t0 := time.Now()
		sent, err := rr.cur.reduce(ctx, buf[:np], uint64(rr.t.GlobalStep()))
		rr.lastComm = time.Since(t0)
		rr.bytes += sent
		if err != nil {
			return err
		}
		rr.bytes += ringBytes(comm, len(buf)-np) // the loss
		return comm.AllReduce(ctx, buf[np:], ascend.Avg)
	}
	return rr, nil
}

// step trains one step with the reducer its payload calls for.
func (rr *rankRunner) step(ctx context.Context) (float32, error) {
	main := false
	switch {
	case rr.t.Config().Optimizer == engine.OneBitAdam && rr.t.Payload() == engine.Momentum:
		main = true
	case rr.t.Config().Optimizer == engine.OneBitAdam:
		rr.cur = rr.grad
	case rr.t.GlobalStep() < int64(rr.warmup):
		rr.cur = rr.dense
	default:
		main = true
	}
	if main && rr.main == nil {
		if err := rr.decide(ctx); err != nil {
			return 0, err
		}
	}
	if main {
		rr.cur = rr.main
	}
	t0 := time.Now()
	loss, err := rr.t.Step(ctx, rr.reduce)
	if rr.main == nil && err == nil && rr.t.GlobalStep() > 1 { // the first step warms up caches and links
		rr.stepTime += time.Since(t0)
		rr.commTime += rr.lastComm
		rr.measured++
	}
	return loss, err
}

// decide settles the "auto" codec: each rank applies codec.Choose to its
// warm-up measurements, and all take the most compressing choice.
func (rr *rankRunner) decide(ctx context.Context) error {
	np := rr.t.NumParams()
	m := codec.Measure{DenseBytes: 4 * np, Ranks: rr.comm.Size()}
	if rr.measured > 0 {
		n := time.Duration(rr.measured)
		m.Compute = (rr.stepTime - rr.commTime) / n
		if c := rr.commTime / n; c > 0 {
			m.BytesPerSec = ringBytes(rr.comm, np) / c.Seconds()
		}
	}
	if rr.o.LinkBytesPerSec > 0 {
		m.BytesPerSec = rr.o.LinkBytesPerSec
	}
	c := codec.Choose(m)
	names := append([]string{"none"}, codec.Ladder...)
	idx := 0
	for i, name := range names {
		if cd, err := codec.Parse(name); err == nil && (cd.Name() == c.Codec || name == c.Codec) {
			idx = i
		}
	}
	vote := []float32{float32(idx)}
	if err := rr.comm.AllReduce(ctx, vote, ascend.Max); err != nil {
		return fmt.Errorf("agreeing on a codec: %w", err)
	}
	if agreed := names[int(vote[0])]; agreed != names[idx] {
		cd, _ := codec.Parse(agreed)
		c.Reason += fmt.Sprintf("; another rank needed more: %s", cd.Name())
		c.Codec, c.Ratio = cd.Name(), codec.Ratio(cd, np)
	}
	main, err := newPayloadReducer(names[int(vote[0])], rr.o.Exchange, rr.comm, rr.t)
	if err != nil {
		return err
	}
	rr.main, rr.choice = main, &c
	return nil
}

// commState marshals this rank's reducer state (both reducers') for
// engine.State.CommState.
func (rr *rankRunner) commState() ([]byte, error) {
	var out []byte
	for _, p := range []payloadReducer{rr.main, rr.grad} {
		var b []byte
		var err error
		if p != nil { // nil: an "auto" codec not decided yet
			b, err = p.state()
		}
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// setCommState restores what commState wrote.
func (rr *rankRunner) setCommState(b []byte) error {
	for i, p := range []payloadReducer{rr.main, rr.grad} {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return fmt.Errorf("trainbench: comm state: truncated part %d", i)
		}
		if p == nil {
			if l != 0 {
				return errors.New("trainbench: comm state of a decided \"auto\" codec: the decision does not restore")
			}
		} else if err := p.setState(b[k : k+int(l)]); err != nil {
			return fmt.Errorf("trainbench: comm state part %d: %w", i, err)
		}
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return fmt.Errorf("trainbench: comm state: %d trailing bytes", len(b))
	}
	return nil
}

// sumReducer adapts a communicator to codec.Reducer.
type sumReducer struct{ c *ascend.Communicator }

func (s sumReducer) Size() int { return s.c.Size() }
func (s sumReducer) AllReduceSum(ctx context.Context, b []float32) error {
	return s.c.AllReduce(ctx, b, ascend.Sum)
}
