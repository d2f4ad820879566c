// Package gradsync averages a data-parallel [engine.Trainer]'s step buffer
// (the gradient, or 1-bit Adam's momentum) across ranks, step by step, the
// way a run's policy says: one plain allreduce; buckets allreduced on their
// own goroutine while backward is still running (overlap); or, after an
// uncompressed warm-up, a compressed exchange with error feedback
// (ascend/codec: top-k, sign, int8 over an allgather or 1-bit Adam's
// two-phase exchange; PowerSGD). It owns the per-rank state that must
// survive a checkpoint — the error-feedback residuals — and accounts this
// rank's traffic and time, which the run reports per chunk.
//
// A [Syncer] outlives communicators: the run path opens a communicator per
// chunk and brackets it with [Syncer.Begin] and [Syncer.End]. Everything
// it does is deterministic given the policy and the decided codec, so a
// run restored from a checkpoint (with every rank's [Syncer.MarshalBinary]
// in engine.State.CommState) continues bit for bit.
package gradsync

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/engine"
)

// Policy says how a run averages its step buffers. The zero value is one
// plain allreduce per step.
type Policy struct {
	// Codec compresses the payload once the warm-up is over: "none" (or
	// ""), a codec in codec.Parse syntax ("topk:0.01", "sign", "int8"),
	// "powersgd:R" (Adam only; its state does not checkpoint), or
	// [CodecAuto]: the caller decides after the warm-up ([Syncer.Decide]);
	// until then steps stay uncompressed.
	Codec string
	// Exchange is how compressed payloads travel: [ExchangeAllGather] or
	// [ExchangeTwoPhase]; "" picks allgather with Adam and two-phase with
	// 1-bit Adam.
	Exchange string
	// Warmup is, with Adam, the number of uncompressed steps: global steps
	// below it are averaged exactly. (With 1-bit Adam the warm-up is the
	// trainer's FreezeStep, during which GradCodec applies.)
	Warmup int64
	// GradCodec compresses, with 1-bit Adam, the gradient during the
	// warm-up ("" or "none": uncompressed).
	GradCodec string
	// Overlap averages uncompressed steps bucket by bucket while backward
	// runs ([engine.Trainer.StepOverlap] and an [engine.AsyncReducer];
	// the bucket sizes are the trainer's Config).
	Overlap bool
}

// WithDefaults fills in the defaults for optimizer opt and checks p.
func (p Policy) WithDefaults(opt engine.Optimizer) (Policy, error) {
	var err error
	if p.Codec, err = CheckCodec(p.Codec); err != nil {
		return p, err
	}
	if p.GradCodec, err = CheckCodec(p.GradCodec); err != nil {
		return p, err
	}
	if p.Exchange == "" {
		p.Exchange = ExchangeAllGather
		if opt == engine.OneBitAdam {
			p.Exchange = ExchangeTwoPhase
		}
	}
	switch {
	case p.Exchange != ExchangeAllGather && p.Exchange != ExchangeTwoPhase:
		return p, fmt.Errorf("gradsync: exchange %q, want %s or %s", p.Exchange, ExchangeAllGather, ExchangeTwoPhase)
	case p.Warmup < 0:
		return p, fmt.Errorf("gradsync: warm-up of %d steps", p.Warmup)
	case p.GradCodec == CodecAuto:
		return p, errors.New("gradsync: the warm-up gradient codec cannot be auto")
	case opt == engine.OneBitAdam && isPowerSGD(p.Codec):
		return p, errors.New("gradsync: onebit-adam needs an encoding codec (sign, topk, int8), not powersgd")
	case opt != engine.OneBitAdam && p.GradCodec != "none":
		return p, errors.New("gradsync: a warm-up gradient codec needs the onebit-adam optimizer")
	}
	return p, nil
}

func isPowerSGD(name string) bool { return len(name) >= 8 && name[:8] == "powersgd" }

// Stats is a Syncer's running account on this rank.
type Stats struct {
	Steps int64
	// CompressedSteps used the compressed payload reducer.
	CompressedSteps int64
	// BytesSent is what this rank sent to average its buffers (payload,
	// loss and statistics); DenseBytes what a ring allreduce of every
	// step's whole buffer sends. Their ratio is the traffic reduction.
	BytesSent  float64
	DenseBytes float64
	// Step is the time in steps; Comm the time communication took (with
	// overlap, on the communication goroutine); Exposed the time steps
	// waited for it (Comm without overlap; with overlap it includes the
	// goroutine hand-off, so it can exceed Comm when nothing was hidden).
	Step    time.Duration
	Comm    time.Duration
	Exposed time.Duration
}

// Sub returns s − o: what happened between two readings.
func (s Stats) Sub(o Stats) Stats {
	return Stats{Steps: s.Steps - o.Steps, CompressedSteps: s.CompressedSteps - o.CompressedSteps,
		BytesSent: s.BytesSent - o.BytesSent, DenseBytes: s.DenseBytes - o.DenseBytes,
		Step: s.Step - o.Step, Comm: s.Comm - o.Comm, Exposed: s.Exposed - o.Exposed}
}

// TrafficReduction is DenseBytes / BytesSent (1 with nothing sent).
func (s Stats) TrafficReduction() float64 {
	if s.BytesSent <= 0 {
		return 1
	}
	return s.DenseBytes / s.BytesSent
}

// HiddenFraction is 1 − Exposed/Comm: the share of communication that
// computation hid (0 without overlap, 1 with no communication).
func (s Stats) HiddenFraction() float64 {
	if s.Comm <= 0 {
		return 1
	}
	return max(0, 1-s.Exposed.Seconds()/s.Comm.Seconds())
}

// Syncer is one rank's averaging of one trainer's step buffers. It is not
// safe for concurrent use.
type Syncer struct {
	t          *engine.Trainer
	p          Policy
	rank, size int
	np         int
	stats1bit  int // 1-bit Adam's statistics after the loss: one per tensor
	opt        engine.Optimizer
	freeze     int64

	main     payloadReducer // nil while an auto codec is undecided
	mainName string
	grad     payloadReducer

	comm  Comm
	async *engine.AsyncReducer
	first bool // the first step since Begin (not measured)
	stats Stats
	// Uncompressed steps measured for Measure.
	measured           int64
	measStep, measComm time.Duration
	measExposed        time.Duration
	decision           *codec.Choice
	// Calibrate's measurements.
	dense    time.Duration
	exchange map[string]time.Duration
}

// New returns the Syncer of trainer t (its Config's Rank and World) under
// policy p.
func New(t *engine.Trainer, p Policy) (*Syncer, error) {
	cfg := t.Config()
	p, err := p.WithDefaults(cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	s := &Syncer{t: t, p: p, rank: cfg.Rank, size: cfg.World, np: t.NumParams(), opt: cfg.Optimizer, freeze: cfg.FreezeStep}
	if cfg.Optimizer == engine.OneBitAdam {
		s.stats1bit = len(t.Tensors())
	}
	if p.Codec != CodecAuto {
		if err := s.setMain(p.Codec); err != nil {
			return nil, err
		}
	}
	s.grad = denseReducer{}
	if cfg.Optimizer == engine.OneBitAdam {
		if s.grad, err = newPayloadReducer(p.GradCodec, p.Exchange, s.rank, s.size, t); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Syncer) setMain(name string) error {
	r, err := newPayloadReducer(name, s.p.Exchange, s.rank, s.size, s.t)
	if err != nil {
		return err
	}
	s.main, s.mainName = r, name
	return nil
}

// Policy returns the policy with its defaults filled in.
func (s *Syncer) Policy() Policy { return s.p }

// Trainer returns the trainer.
func (s *Syncer) Trainer() *engine.Trainer { return s.t }

// Codec returns the codec of the compressed phase: the policy's, the one
// Decide set, or "" while an auto codec is undecided.
func (s *Syncer) Codec() string { return s.mainName }

// Decided returns the choice Decide recorded (nil: none).
func (s *Syncer) Decided() *codec.Choice { return s.decision }

// NeedsDecision reports whether the next step would be compressed but the
// codec is still undecided (policy auto).
func (s *Syncer) NeedsDecision() bool { return s.main == nil && s.compressedPhase() }

// Decide sets the codec of an auto policy (in CheckCodec syntax; "none"
// keeps steps uncompressed). c, if not nil, is recorded as the reason.
// Every rank must decide the same codec before the same step.
func (s *Syncer) Decide(name string, c *codec.Choice) error {
	if s.p.Codec != CodecAuto {
		return fmt.Errorf("gradsync: Decide(%q) with a fixed codec %q", name, s.p.Codec)
	}
	canon, err := CheckCodec(name)
	if err != nil {
		return err
	}
	if canon == CodecAuto {
		return errors.New("gradsync: Decide(auto)")
	}
	if s.main != nil && s.mainName == canon {
		return nil
	}
	if s.main != nil {
		return fmt.Errorf("gradsync: codec already decided (%s), asked for %s", s.mainName, canon)
	}
	if err := s.setMain(canon); err != nil {
		return err
	}
	s.decision = c
	return nil
}

// Measure returns what codec.Choose decides from, measured over the
// uncompressed steps so far (the first step after each Begin excluded: it
// warms caches and links): the link's bandwidth from the allreduces' time
// (with overlap, on the communication goroutine) and the computation from
// the step time less the communication the step waited for.
func (s *Syncer) Measure() codec.Measure {
	m := codec.Measure{DenseBytes: 4 * s.np, Ranks: s.size}
	if s.measured > 0 {
		n := time.Duration(s.measured)
		m.Compute = (s.measStep - s.measExposed) / n
		if c := s.measComm / n; c > 0 {
			m.BytesPerSec = RingBytes(s.size, s.np) / c.Seconds()
		}
	}
	m.Exchange, m.Dense = s.exchange, s.dense
	return m
}

// calibrationRuns is how many exchanges of each kind Calibrate times.
const calibrationRuns = 5

// Calibrate measures what Measure needs to price compression, besides the
// uncompressed steps: the median time of a few uncompressed allreduces of
// the payload and, per codec of codec.Ladder, of a few real compressed
// exchanges of it (the policy's exchange, fresh error feedback, on a
// scratch copy of the parameters: the payload's size and scale). It is a
// collective: every rank calls it, between the same steps. It does not
// change the training state.
func (s *Syncer) Calibrate(ctx context.Context) error {
	if s.comm == nil {
		return ErrNotBegun
	}
	buf, one := make([]float32, s.np), make([]float32, 1)
	median := func(f func() error) (time.Duration, error) {
		ds := make([]time.Duration, calibrationRuns)
		for i := range ds {
			copy(buf, s.t.Params())
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds[i] = time.Since(t0)
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	var err error
	if s.dense, err = median(func() error { return s.comm.AllReduce(ctx, buf, ascend.Avg) }); err != nil {
		return fmt.Errorf("gradsync: calibrate: allreduce: %w", err)
	}
	s.exchange = map[string]time.Duration{}
	for _, name := range codec.Ladder {
		r, err := newPayloadReducer(name, s.p.Exchange, s.rank, s.size, s.t)
		if err != nil {
			return err
		}
		d, err := median(func() error {
			if _, err := r.reduce(ctx, s.comm, buf, 0); err != nil {
				return err
			}
			return s.comm.AllReduce(ctx, one, ascend.Avg) // a compressed step's loss goes apart
		})
		if err != nil {
			return fmt.Errorf("gradsync: calibrate: %s exchange: %w", name, err)
		}
		c, _ := codec.Parse(name)
		s.exchange[c.Name()] = d
	}
	return nil
}

// Stats returns the running account.
func (s *Syncer) Stats() Stats { return s.stats }

// compressedPhase reports whether the next step is past the warm-up.
func (s *Syncer) compressedPhase() bool {
	if s.opt == engine.OneBitAdam {
		return s.t.Payload() == engine.Momentum
	}
	return s.t.GlobalStep() >= s.p.Warmup
}

// Phase describes what the next step does, for status lines.
func (s *Syncer) Phase() string {
	switch {
	case s.size == 1:
		return "uncompressed (one rank: nothing to send)"
	case !s.compressedPhase() && s.opt == engine.OneBitAdam:
		return fmt.Sprintf("warm-up (Adam until step %d), gradient %s", s.freeze, s.p.GradCodec)
	case !s.compressedPhase():
		return fmt.Sprintf("warm-up (uncompressed until step %d)", s.p.Warmup)
	case s.main == nil:
		return "uncompressed (auto codec not decided yet)"
	case s.mainName == "none":
		return "uncompressed"
	}
	return fmt.Sprintf("%s %s, %s exchange", s.mainName, s.t.Payload(), s.p.Exchange)
}

// ErrNotBegun is returned by Step outside Begin/End.
var ErrNotBegun = errors.New("gradsync: Step without Begin")

// Begin binds comm (whose rank and size must be the trainer's) for the
// steps until End.
func (s *Syncer) Begin(comm Comm) error {
	if comm.Rank() != s.rank || comm.Size() != s.size {
		return fmt.Errorf("gradsync: communicator is rank %d of %d, the trainer rank %d of %d", comm.Rank(), comm.Size(), s.rank, s.size)
	}
	s.End()
	s.comm, s.first = comm, true
	if s.p.Overlap {
		s.async = engine.NewAsyncReducer(func(ctx context.Context, _ engine.Bucket, buf []float32) error {
			return comm.AllReduce(ctx, buf, ascend.Avg)
		})
	}
	return nil
}

// End releases the communicator bound by Begin.
func (s *Syncer) End() {
	if s.async != nil {
		s.async.Close()
		s.async = nil
	}
	s.comm = nil
}

// Step trains one step, averaging its buffer as the policy says for this
// point of the run. Errors are the trainer's: a failed step leaves the
// trainer unchanged (error-feedback residuals may have advanced: after a
// failure restore the Syncer from a checkpoint, as the trainer).
func (s *Syncer) Step(ctx context.Context) (float32, error) {
	if s.comm == nil {
		return 0, ErrNotBegun
	}
	compressed := s.compressedPhase()
	cur := payloadReducer(denseReducer{})
	switch {
	case compressed && s.main != nil:
		cur = s.main
	case !compressed:
		cur = s.grad
	}
	if s.size == 1 {
		// Nothing to send: a codec would only add its encoding, its
		// decoding and its error to the step.
		cur = denseReducer{}
	}
	_, whole := cur.(denseReducer)
	t0 := time.Now()
	var loss float32
	var err error
	var comm, exposed time.Duration
	switch {
	case whole && s.async != nil:
		before := s.async.Stats()
		loss, err = s.t.StepOverlap(ctx, s.async)
		d := s.async.Stats().Sub(before)
		comm, exposed = d.Comm, d.Waited
		s.stats.BytesSent += RingBytes(s.size, s.bufLen())
	case whole:
		loss, err = s.t.Step(ctx, func(ctx context.Context, buf []float32) error {
			c0 := time.Now()
			err := s.comm.AllReduce(ctx, buf, ascend.Avg)
			comm = time.Since(c0)
			s.stats.BytesSent += RingBytes(s.size, len(buf))
			return err
		})
		exposed = comm
	default:
		step := uint64(s.t.GlobalStep())
		loss, err = s.t.Step(ctx, func(ctx context.Context, buf []float32) error {
			c0 := time.Now()
			defer func() { comm = time.Since(c0) }()
			sent, err := cur.reduce(ctx, s.comm, buf[:s.np], step)
			s.stats.BytesSent += sent
			if err != nil {
				return err
			}
			// The loss (and 1-bit Adam's statistics), exactly.
			s.stats.BytesSent += RingBytes(s.size, len(buf)-s.np)
			return s.comm.AllReduce(ctx, buf[s.np:], ascend.Avg)
		})
		exposed = comm
	}
	el := time.Since(t0)
	s.stats.Steps++
	s.stats.Step += el
	s.stats.Comm += comm
	s.stats.Exposed += exposed
	s.stats.DenseBytes += RingBytes(s.size, s.bufLen())
	if compressed && !whole {
		s.stats.CompressedSteps++
	}
	if err == nil && whole && !s.first {
		s.measured++
		s.measStep += el
		s.measComm += comm
		s.measExposed += exposed
	}
	s.first = false
	return loss, err
}

// bufLen is the length of the step buffer: the payload, the loss and (with
// 1-bit Adam) one statistic per tensor.
func (s *Syncer) bufLen() int { return s.np + 1 + s.stats1bit }

// stateMagic starts a marshalled Syncer state.
const stateMagic = "CTGS1"

// MarshalBinary encodes this rank's state that a checkpoint must keep: the
// compressed phase's codec and both reducers' residuals (the uncompressed
// reducer has none).
func (s *Syncer) MarshalBinary() ([]byte, error) {
	out := append([]byte(stateMagic), byte(len(s.mainName)))
	out = append(out, s.mainName...)
	for _, p := range []payloadReducer{s.main, s.grad} {
		var b []byte
		var err error
		if p != nil {
			if b, err = p.state(); err != nil {
				return nil, err
			}
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// UnmarshalBinary restores, into a fresh Syncer, what MarshalBinary wrote
// on the same rank. An auto policy still undecided takes the state's codec
// as decided; a state saved before an auto codec was decided restores into
// a decided Syncer with empty residuals.
func (s *Syncer) UnmarshalBinary(b []byte) error {
	if len(b) < len(stateMagic)+1 || string(b[:len(stateMagic)]) != stateMagic {
		return errors.New("gradsync: state: bad magic")
	}
	b = b[len(stateMagic):]
	nl := int(b[0])
	if len(b) < 1+nl {
		return errors.New("gradsync: state: truncated codec name")
	}
	name := string(b[1 : 1+nl])
	b = b[1+nl:]
	main := s.main
	switch {
	case name == s.mainName:
	case name == "":
		// Saved before an auto codec was decided: nothing was compressed
		// yet, so the decided codec starts with empty residuals.
		main = nil
	case s.main == nil:
		if err := s.setMain(name); err != nil {
			return fmt.Errorf("gradsync: state: codec %q: %w", name, err)
		}
		main = s.main
	default:
		return fmt.Errorf("gradsync: state is for codec %s, this run uses %s", name, s.mainName)
	}
	for i, p := range []payloadReducer{main, s.grad} {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return fmt.Errorf("gradsync: state: truncated part %d", i)
		}
		part := b[k : k+int(l)]
		if p == nil {
			if l != 0 {
				return fmt.Errorf("gradsync: state: part %d for an undecided codec", i)
			}
		} else if err := p.setState(part); err != nil {
			return fmt.Errorf("gradsync: state part %d: %w", i, err)
		}
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return fmt.Errorf("gradsync: state: %d trailing bytes", len(b))
	}
	return nil
}

// LadderIndex is the place of codec name on ("none", codec.Ladder...), or
// 0 if it is not there: the higher, the more it compresses.
func LadderIndex(name string) int {
	for i, n := range codec.Ladder {
		if c, err := codec.Parse(n); err == nil && (c.Name() == name || n == name) {
			return i + 1
		}
	}
	return 0
}

// LadderCodec is the codec at place i of ("none", codec.Ladder...).
func LadderCodec(i int) string {
	if i <= 0 || i > len(codec.Ladder) {
		return "none"
	}
	c, err := codec.Parse(codec.Ladder[i-1])
	if err != nil {
		panic(err) // Ladder is fixed
	}
	return c.Name()
}

// Agree combines the ranks' codec.Choose decisions into the run's: the
// most compressing one, since the slowest link bounds every step.
func Agree(choices []codec.Choice) codec.Choice {
	if len(choices) == 0 {
		return codec.Choice{Codec: "none", Ratio: 1, Reason: "no rank measured"}
	}
	best := 0
	for i, c := range choices {
		if LadderIndex(c.Codec) > LadderIndex(choices[best].Codec) {
			best = i
		}
	}
	return choices[best]
}

// ChooseAll applies codec.Choose to every rank's measurement and agrees on
// the result.
func ChooseAll(ms []codec.Measure) codec.Choice {
	cs := make([]codec.Choice, len(ms))
	for i, m := range ms {
		cs[i] = codec.Choose(m)
	}
	return Agree(cs)
}
