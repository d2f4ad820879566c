package gradsync

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/engine"
)

// Comm is what a Syncer needs of a communicator (*ascend.Communicator has
// it). A Syncer outlives communicators: a run opens one per chunk, and the
// reducers' state (error feedback) carries over.
type Comm interface {
	Rank() int
	Size() int
	AllReduce(ctx context.Context, buf []float32, op ascend.Op) error
	AllGather(ctx context.Context, buf []float32) error
	AllGatherV(ctx context.Context, dst, src []float32, counts []int) error
	AllToAllV(ctx context.Context, dst, src []float32, sendCounts, recvCounts []int) error
}

// payloadReducer averages a payload (the first NumParams values of the
// step buffer) across ranks and says how many bytes this rank sent.
type payloadReducer interface {
	reduce(ctx context.Context, comm Comm, buf []float32, step uint64) (sent float64, err error)
	// state and setState marshal what must survive a checkpoint (nil: none).
	state() ([]byte, error)
	setState([]byte) error
}

// RingBytes is what a rank sends in a ring allreduce of n float32 values
// over size ranks: 2(size−1)/size · 4n.
func RingBytes(size, n int) float64 {
	p := float64(size)
	return 2 * (p - 1) / p * 4 * float64(n)
}

type denseReducer struct{}

func (denseReducer) reduce(ctx context.Context, comm Comm, buf []float32, _ uint64) (float64, error) {
	return RingBytes(comm.Size(), len(buf)), comm.AllReduce(ctx, buf, ascend.Avg)
}
func (denseReducer) state() ([]byte, error) { return nil, nil }
func (denseReducer) setState(b []byte) error {
	if len(b) != 0 {
		return errors.New("gradsync: state for an uncompressed reducer")
	}
	return nil
}

type allGatherReducer struct {
	fb *codec.Feedback
	x  codec.Exchange
}

func (a *allGatherReducer) reduce(ctx context.Context, comm Comm, buf []float32, step uint64) (float64, error) {
	st, err := a.x.AllReduce(ctx, comm, a.fb, buf, step, true)
	p := float64(comm.Size())
	return (p - 1) / p * float64(st.TotalPayload+4*comm.Size()), err
}
func (a *allGatherReducer) state() ([]byte, error)  { return a.fb.MarshalBinary() }
func (a *allGatherReducer) setState(b []byte) error { return a.fb.UnmarshalBinary(b) }

type twoPhaseReducer struct{ x *codec.TwoPhase }

func (t *twoPhaseReducer) reduce(ctx context.Context, comm Comm, buf []float32, step uint64) (float64, error) {
	st, err := t.x.AllReduce(ctx, comm, buf, step, true)
	return float64(st.SentBytes), err
}
func (t *twoPhaseReducer) state() ([]byte, error)  { return t.x.MarshalBinary() }
func (t *twoPhaseReducer) setState(b []byte) error { return t.x.UnmarshalBinary(b) }

type powerSGDReducer struct {
	p       *codec.PowerSGD
	tensors []engine.Tensor
	mats    []codec.Matrix
}

func (p *powerSGDReducer) reduce(ctx context.Context, comm Comm, buf []float32, _ uint64) (float64, error) {
	for i, ts := range p.tensors {
		p.mats[i].Data = buf[ts.Offset : ts.Offset+ts.Rows*ts.Cols]
	}
	if err := p.p.AllReduce(ctx, sumReducer{comm}, p.mats); err != nil {
		return 0, err
	}
	values, _ := p.p.Traffic(p.mats)
	return RingBytes(comm.Size(), values), nil
}

// ErrNoCheckpoint is returned when asked to checkpoint a reducer whose
// state does not marshal (PowerSGD).
var ErrNoCheckpoint = errors.New("gradsync: powersgd state does not checkpoint")

func (p *powerSGDReducer) state() ([]byte, error) { return nil, ErrNoCheckpoint }
func (p *powerSGDReducer) setState([]byte) error  { return ErrNoCheckpoint }

// sumReducer adapts a Comm to codec.Reducer.
type sumReducer struct{ c Comm }

func (s sumReducer) Size() int { return s.c.Size() }
func (s sumReducer) AllReduceSum(ctx context.Context, b []float32) error {
	return s.c.AllReduce(ctx, b, ascend.Sum)
}

// Exchanges of a compressed payload.
const (
	ExchangeAllGather = "allgather" // codec.Exchange: every rank's encoding to every rank
	ExchangeTwoPhase  = "twophase"  // codec.TwoPhase: all-to-all, server re-encoding, allgather
)

// CodecAuto lets the caller decide the codec after the warm-up
// ([Syncer.Decide], with [Syncer.Measure] and codec.Choose).
const CodecAuto = "auto"

// CheckCodec reports whether name is a codec a Policy accepts: "none",
// "auto", "powersgd[:R]" or codec.Parse syntax. It returns the canonical
// name.
func CheckCodec(name string) (string, error) {
	switch {
	case name == "" || name == "none":
		return "none", nil
	case name == CodecAuto:
		return name, nil
	case strings.HasPrefix(name, "powersgd"):
		if _, err := powerSGDRank(name); err != nil {
			return "", err
		}
		return name, nil
	}
	c, err := codec.Parse(name)
	if err != nil {
		return "", err
	}
	return c.Name(), nil
}

func powerSGDRank(name string) (int, error) {
	rank := 4
	if _, arg, ok := strings.Cut(name, ":"); ok {
		if _, err := fmt.Sscanf(arg, "%d", &rank); err != nil || rank < 1 {
			return 0, fmt.Errorf("gradsync: powersgd rank %q: want a positive integer", arg)
		}
	}
	return rank, nil
}

// newPayloadReducer builds a reducer of t's payload for codecName ("none"
// or "": uncompressed) on rank rank of size.
func newPayloadReducer(codecName, exchange string, rank, size int, t *engine.Trainer) (payloadReducer, error) {
	n := t.NumParams()
	switch {
	case codecName == "" || codecName == "none":
		return denseReducer{}, nil
	case strings.HasPrefix(codecName, "powersgd"):
		r, err := powerSGDRank(codecName)
		if err != nil {
			return nil, err
		}
		ps, err := codec.NewPowerSGD(r, 1)
		if err != nil {
			return nil, err
		}
		pr := &powerSGDReducer{p: ps, tensors: t.Tensors()}
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
		x, err := codec.NewTwoPhase(c, n, rank, size)
		if err != nil {
			return nil, err
		}
		return &twoPhaseReducer{x: x}, nil
	}
	return &allGatherReducer{fb: codec.NewFeedback(c, n)}, nil
}
