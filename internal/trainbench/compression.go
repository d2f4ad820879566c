package trainbench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/gradsync"
)

// Exchange modes of a compressed payload.
const (
	ExchangeAllGather = gradsync.ExchangeAllGather // codec.Exchange: every rank's encoding to every rank
	ExchangeTwoPhase  = gradsync.ExchangeTwoPhase  // codec.TwoPhase: all-to-all, server re-encoding, allgather
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
		if c == "" {
			continue
		}
		if _, err := gradsync.CheckCodec(c); err != nil {
			return o, err
		}
	}
	return o, nil
}

// CodecAuto is the Codec that lets codec.Choose decide.
const CodecAuto = gradsync.CodecAuto

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
	out := Run{Seconds: (time.Since(start) - evalTime).Seconds(), BytesPerRank: runners[0].bytes(), Loss: curves[0], Auto: runners[0].s.Decided()}
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

// rankRunner is one rank of a run: its trainer and the Syncer that
// averages its payloads.
type rankRunner struct {
	t    *engine.Trainer
	comm *ascend.Communicator
	s    *gradsync.Syncer
	o    CompressionOptions
}

// newRankRunner builds rank comm.Rank()'s trainer and Syncer: Adam with
// plain allreduce if !compressed, else as o says.
func newRankRunner(o CompressionOptions, compressed bool, comm *ascend.Communicator, train *engine.Dataset) (*rankRunner, error) {
	cfg := engine.DefaultConfig()
	cfg.Seed, cfg.Rank, cfg.World = o.Seed, comm.Rank(), comm.Size()
	var p gradsync.Policy
	if compressed {
		p = gradsync.Policy{Codec: o.Codec, Exchange: o.Exchange, Warmup: int64(o.Warmup), GradCodec: o.GradCodec}
		if o.Optimizer == engine.OneBitAdam.String() {
			cfg.Optimizer, cfg.FreezeStep = engine.OneBitAdam, int64(o.FreezeStep)
			p.Warmup = 0
		}
	}
	t, err := engine.NewTrainer(cfg, train)
	if err != nil {
		return nil, err
	}
	s, err := gradsync.New(t, p)
	if err != nil {
		return nil, err
	}
	if err := s.Begin(comm); err != nil {
		return nil, err
	}
	return &rankRunner{t: t, comm: comm, s: s, o: o}, nil
}

// step trains one step, settling an "auto" codec first when the warm-up
// is over.
func (rr *rankRunner) step(ctx context.Context) (float32, error) {
	if rr.s.NeedsDecision() {
		if err := rr.decide(ctx); err != nil {
			return 0, err
		}
	}
	return rr.s.Step(ctx)
}

// bytes is the traffic this rank sent so far.
func (rr *rankRunner) bytes() float64 { return rr.s.Stats().BytesSent }

// decide settles the "auto" codec: each rank applies codec.Choose to its
// warm-up measurements, and all take the most compressing choice.
func (rr *rankRunner) decide(ctx context.Context) error {
	if rr.o.LinkBytesPerSec <= 0 {
		// Time real exchanges, so that compression is chosen only where
		// it pays (on a hypothetical link, only the bytes count).
		if err := rr.s.Calibrate(ctx); err != nil {
			return err
		}
	}
	m := rr.s.Measure()
	if rr.o.LinkBytesPerSec > 0 {
		m.BytesPerSec = rr.o.LinkBytesPerSec
	}
	c := codec.Choose(m)
	idx := gradsync.LadderIndex(c.Codec)
	vote := []float32{float32(idx)}
	if err := rr.comm.AllReduce(ctx, vote, ascend.Max); err != nil {
		return fmt.Errorf("agreeing on a codec: %w", err)
	}
	agreed := gradsync.LadderCodec(int(vote[0]))
	if int(vote[0]) != idx {
		cd, _ := codec.Parse(agreed)
		c.Reason += fmt.Sprintf("; another rank needed more: %s", agreed)
		c.Codec, c.Ratio = agreed, codec.Ratio(cd, rr.t.NumParams())
	}
	return rr.s.Decide(agreed, &c)
}
