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
)

// CompressionOptions describes one side-by-side run.
type CompressionOptions struct {
	Ranks  int    // data-parallel ranks (default 3)
	Steps  int    // training steps (default 600)
	Codec  string // codec.Parse syntax (default "topk:0.01")
	Warmup int    // uncompressed steps first (default 2 % of Steps)
	// Data is the MNIST directory (default engine.MNISTDir()).
	Data string
}

func (o CompressionOptions) withDefaults() CompressionOptions {
	if o.Ranks <= 0 {
		o.Ranks = 3
	}
	if o.Steps <= 0 {
		o.Steps = 600
	}
	if o.Codec == "" {
		o.Codec = "topk:0.01"
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	} else if o.Warmup == 0 {
		o.Warmup = o.Steps / 50
	}
	return o
}

// Run is one training run's outcome.
type Run struct {
	TestLoss     float64   `json:"test_loss"`
	TestAccuracy float64   `json:"test_accuracy"`
	BytesPerRank float64   `json:"bytes_sent_per_rank"` // gradient traffic, whole run
	Seconds      float64   `json:"seconds"`
	Loss         []float32 `json:"loss_curve"` // training loss per step
}

// CompressionResult compares a compressed run with an uncompressed one
// from the same seed.
type CompressionResult struct {
	Task   string `json:"task"`
	Ranks  int    `json:"ranks"`
	Steps  int    `json:"steps"`
	Codec  string `json:"codec"`
	Warmup int    `json:"warmup_steps"`
	// TrafficReduction is the uncompressed run's gradient bytes sent per
	// rank (ring allreduce) over the compressed run's (warm-up, length
	// exchange and the loss scalar included).
	TrafficReduction float64 `json:"traffic_reduction"`
	// FinalLossGapPct is (compressed − uncompressed) / uncompressed test
	// loss after the last step, in percent.
	FinalLossGapPct float64 `json:"final_loss_gap_pct"`
	Dense           Run     `json:"uncompressed"`
	Compressed      Run     `json:"compressed"`
}

// Compression trains the built-in task twice, uncompressed and with the
// codec (error feedback on), and compares them.
func Compression(ctx context.Context, o CompressionOptions) (CompressionResult, error) {
	o = o.withDefaults()
	name := o.Codec
	if !strings.HasPrefix(o.Codec, "powersgd") {
		c, err := codec.Parse(o.Codec)
		if err != nil {
			return CompressionResult{}, err
		}
		name = c.Name()
	}
	var err error
	dir := o.Data
	if dir == "" {
		if dir, err = engine.MNISTDir(); err != nil {
			return CompressionResult{}, err
		}
	}
	train, test, err := engine.LoadMNIST(dir)
	if err != nil {
		return CompressionResult{}, err
	}
	res := CompressionResult{Task: "MNIST MLP (engine defaults), data parallel, test-set loss after the last step",
		Ranks: o.Ranks, Steps: o.Steps, Codec: name, Warmup: o.Warmup}
	if res.Dense, err = trainRun(ctx, o, "", train, test); err != nil {
		return res, fmt.Errorf("uncompressed run: %w", err)
	}
	if res.Compressed, err = trainRun(ctx, o, o.Codec, train, test); err != nil {
		return res, fmt.Errorf("compressed run: %w", err)
	}
	res.TrafficReduction = res.Dense.BytesPerRank / res.Compressed.BytesPerRank
	res.FinalLossGapPct = 100 * (res.Compressed.TestLoss - res.Dense.TestLoss) / res.Dense.TestLoss
	return res, nil
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
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return comms, nil
}

// trainRun trains o.Steps steps on o.Ranks ranks, compressing the gradient
// with the codec named after the warm-up (none if empty), and evaluates
// rank 0's model.
func trainRun(ctx context.Context, o CompressionOptions, codecName string, train, test *engine.Dataset) (Run, error) {
	comms, err := group(ctx, o.Ranks)
	if err != nil {
		return Run{}, err
	}
	defer func() {
		for _, cm := range comms {
			cm.Close()
		}
	}()
	n := o.Ranks
	runs := make([]Run, n)
	errs := make([]error, n)
	trainers := make([]*engine.Trainer, n)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[r], trainers[r], errs[r] = rankRun(ctx, o, codecName, comms[r], train)
			if errs[r] != nil {
				comms[r].Close() // fail the others fast
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Run{}, err
	}
	out := runs[0]
	out.Seconds = time.Since(start).Seconds()
	for _, t := range trainers[1:] {
		if t.WeightsSHA256() != trainers[0].WeightsSHA256() {
			return Run{}, errors.New("ranks ended with different weights")
		}
	}
	var lerr error
	out.TestAccuracy, out.TestLoss, lerr = trainers[0].EvaluateErr(test)
	return out, lerr
}

func rankRun(ctx context.Context, o CompressionOptions, codecName string, comm *ascend.Communicator, train *engine.Dataset) (Run, *engine.Trainer, error) {
	cfg := engine.DefaultConfig()
	cfg.Rank, cfg.World = comm.Rank(), comm.Size()
	t, err := engine.NewTrainer(cfg, train)
	if err != nil {
		return Run{}, nil, err
	}
	np := t.NumParams()
	p := float64(comm.Size())
	ring := 2 * (p - 1) / p // bytes sent per byte reduced, ring allreduce
	var run Run
	var fb *codec.Feedback
	var x codec.Exchange
	var psgd *codec.PowerSGD
	var mats []codec.Matrix
	switch {
	case codecName == "":
	case strings.HasPrefix(codecName, "powersgd"):
		rank := 4
		if _, arg, ok := strings.Cut(codecName, ":"); ok {
			if _, err := fmt.Sscanf(arg, "%d", &rank); err != nil {
				return Run{}, nil, fmt.Errorf("powersgd rank %q: %w", arg, err)
			}
		}
		if psgd, err = codec.NewPowerSGD(rank, 1); err != nil {
			return Run{}, nil, err
		}
		for _, ts := range t.Tensors() {
			mats = append(mats, codec.Matrix{Rows: ts.Rows, Cols: ts.Cols})
		}
	default:
		c, err := codec.Parse(codecName) // one per rank: codecs keep scratch
		if err != nil {
			return Run{}, nil, err
		}
		fb = codec.NewFeedback(c, np)
	}
	tensors := t.Tensors()
	step := 0
	reduce := func(ctx context.Context, buf []float32) error {
		switch {
		case step < o.Warmup || (fb == nil && psgd == nil):
			run.BytesPerRank += ring * 4 * float64(len(buf))
			return comm.AllReduce(ctx, buf, ascend.Avg)
		case psgd != nil:
			for i, ts := range tensors {
				mats[i].Data = buf[ts.Offset : ts.Offset+ts.Rows*ts.Cols]
			}
			if err := psgd.AllReduce(ctx, sumReducer{comm}, mats); err != nil {
				return err
			}
			values, _ := psgd.Traffic(mats)
			run.BytesPerRank += ring * 4 * float64(values)
		default:
			st, err := x.AllReduce(ctx, comm, fb, buf[:np], uint64(step), true)
			if err != nil {
				return err
			}
			run.BytesPerRank += (p - 1) / p * float64(st.TotalPayload+4*comm.Size())
		}
		run.BytesPerRank += ring * 4 * float64(len(buf)-np) // the loss
		return comm.AllReduce(ctx, buf[np:], ascend.Avg)
	}
	for step = 0; step < o.Steps; step++ {
		loss, err := t.Step(ctx, reduce)
		if err != nil {
			return run, nil, err
		}
		run.Loss = append(run.Loss, loss)
	}
	return run, t, nil
}

// sumReducer adapts a communicator to codec.Reducer.
type sumReducer struct{ c *ascend.Communicator }

func (s sumReducer) Size() int { return s.c.Size() }
func (s sumReducer) AllReduceSum(ctx context.Context, b []float32) error {
	return s.c.AllReduce(ctx, b, ascend.Sum)
}
