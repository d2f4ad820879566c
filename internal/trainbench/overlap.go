package trainbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/engine"
)

// OverlapOptions describes a run of the built-in task with and without
// communication hidden behind the backward pass. The zero value of a field
// selects its default.
type OverlapOptions struct {
	// Ranks is the number of data-parallel ranks (default: the number of
	// CPUs, within 2..3). Ranks should not outnumber the cores: the OS then
	// time-slices their computation, they drift apart within a step, and
	// the last one to finish backward makes the others wait, time no
	// overlap can hide (and the serial run counts as communication).
	Ranks int
	Steps int // timed steps of each run (default 40)
	// Warmup steps run first and are not timed (0: 3; negative: none).
	Warmup int
	// Chunk is the number of steps per reported chunk (default Steps/4).
	Chunk int
	// Hidden are the hidden layer widths (default DefaultOverlapHidden:
	// wide enough that computation outweighs communication).
	Hidden []int
	// BatchPerRank is the examples per rank per step (default 32).
	BatchPerRank int
	// BucketBytes and FirstBucketBytes are engine.Config's (defaults
	// DefaultOverlapBucketBytes and DefaultOverlapFirstBucketBytes).
	BucketBytes      int
	FirstBucketBytes int
	// Procs sets GOMAXPROCS for the run (restored after); default
	// 2·Ranks, at least the current value. In-process ranks share the
	// Go scheduler: each needs a P of its own for its computation and one
	// for its communication goroutine, as a rank process on two cores
	// would have, or the communication waits for the computation to be
	// preempted (every 10 ms) and cannot overlap. The OS then shares the
	// cores among them. Negative: leave GOMAXPROCS as it is.
	Procs int
	// Data is the MNIST directory (default engine.MNISTDir()).
	Data string
}

// Defaults of OverlapOptions.
//
// The default model has a narrow first layer: backward produces the first
// layer's gradient last, when there is no computation left to hide its
// communication behind, so that gradient should be small (the wide
// layers' buckets leave while backward is still propagating through them).
var DefaultOverlapHidden = []int{64, 1024, 1024}

const (
	DefaultOverlapBucketBytes      = 1 << 20
	DefaultOverlapFirstBucketBytes = 256 << 10
)

func (o OverlapOptions) withDefaults() OverlapOptions {
	if o.Ranks <= 0 {
		o.Ranks = min(3, max(2, runtime.NumCPU()))
	}
	if o.Steps <= 0 {
		o.Steps = 40
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = 3
	case o.Warmup < 0:
		o.Warmup = 0
	}
	if o.Chunk <= 0 {
		o.Chunk = max(1, o.Steps/4)
	}
	if len(o.Hidden) == 0 {
		o.Hidden = slices.Clone(DefaultOverlapHidden)
	}
	if o.BatchPerRank <= 0 {
		o.BatchPerRank = engine.DefaultBatchPerRank
	}
	if o.BucketBytes <= 0 {
		o.BucketBytes = DefaultOverlapBucketBytes
	}
	if o.FirstBucketBytes <= 0 {
		o.FirstBucketBytes = DefaultOverlapFirstBucketBytes
	}
	return o
}

// OverlapChunk is the account of Steps consecutive steps of one run,
// per step and averaged over the ranks.
type OverlapChunk struct {
	FirstStep int `json:"first_step"`
	Steps     int `json:"steps"`
	// StepMs is the wall time of a step; CommMs the time spent
	// communicating (in the reducer); WaitMs the part of it the step
	// waited for (all of it without overlap); ComputeMs = StepMs − WaitMs.
	StepMs    float64 `json:"step_ms"`
	CommMs    float64 `json:"comm_ms"`
	WaitMs    float64 `json:"wait_ms"`
	ComputeMs float64 `json:"compute_ms"`
	// HiddenCommPct = 100·(1 − WaitMs/CommMs).
	HiddenCommPct float64 `json:"hidden_comm_pct"`
}

// OverlapRun is one run: its totals (as a chunk) and its chunks.
type OverlapRun struct {
	OverlapChunk
	Chunks []OverlapChunk `json:"chunks"`
}

// OverlapResult compares the two runs.
type OverlapResult struct {
	Task             string `json:"task"`
	Ranks            int    `json:"ranks"`
	Steps            int    `json:"steps"`
	Hidden           []int  `json:"hidden"`
	BatchPerRank     int    `json:"batch_per_rank"`
	Params           int    `json:"params"`
	Buckets          int    `json:"buckets"`
	BucketBytes      int    `json:"bucket_bytes"`
	FirstBucketBytes int    `json:"first_bucket_bytes"`
	GOMAXPROCS       int    `json:"gomaxprocs"`
	// Serial runs Step: one allreduce of the whole buffer after backward.
	// Overlapped runs StepOverlap with an engine.AsyncReducer.
	Serial     OverlapRun `json:"serial"`
	Overlapped OverlapRun `json:"overlapped"`
	// HiddenCommPct is the overlapped run's: 100·(1 − time the optimizer
	// waited for communication / total communication time).
	HiddenCommPct float64 `json:"hidden_comm_pct"`
	// HiddenOfSerialCommPct is 100·(1 − overlapped wait / serial
	// communication time): the same, measured against the communication
	// time of the serial run, which is not stretched by sharing the cores
	// with the backward pass.
	HiddenOfSerialCommPct float64 `json:"hidden_of_serial_comm_pct"`
	// CommSharePct is the serial run's communication time over its step
	// time, in percent; ComputeOverComm its computation time over its
	// communication time (≥ 1: computation dominates).
	CommSharePct    float64 `json:"comm_share_pct"`
	ComputeOverComm float64 `json:"compute_over_comm"`
	// OverlapEfficiencyPct is 100·(1 − exposed/serial comm) with exposed =
	// overlapped step time − serial compute time (collectives.md §5): it
	// also charges the overlap for computation slowed down by the
	// communication sharing its cores.
	OverlapEfficiencyPct float64 `json:"overlap_efficiency_pct"`
	// Speedup is the serial step time over the overlapped one.
	Speedup float64 `json:"speedup"`
	// SameResult: both runs' ranks agreed on the weights (each run with
	// itself; bucketed and whole-buffer ring reductions round differently).
	SameResult bool `json:"ranks_agree"`
}

// Overlap trains the built-in task (a wider MLP by default) twice from the
// same seed over loopback TCP: with the whole buffer reduced after
// backward, and with buckets reduced on a communication goroutine as
// backward produces them, and compares the timings.
func Overlap(ctx context.Context, o OverlapOptions) (OverlapResult, error) {
	o = o.withDefaults()
	if o.Procs == 0 {
		o.Procs = max(2*o.Ranks, runtime.GOMAXPROCS(0))
	}
	if o.Procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.Procs))
	}
	train, _, err := loadData(o.Data)
	if err != nil {
		return OverlapResult{}, err
	}
	res := OverlapResult{Task: "MNIST MLP, data parallel over loopback TCP, ring allreduce", Ranks: o.Ranks, Steps: o.Steps,
		Hidden: o.Hidden, BatchPerRank: o.BatchPerRank, BucketBytes: o.BucketBytes, FirstBucketBytes: o.FirstBucketBytes,
		GOMAXPROCS: runtime.GOMAXPROCS(0), SameResult: true}
	for _, overlap := range []bool{false, true} {
		run, t, err := overlapRun(ctx, o, overlap, train)
		if err != nil {
			return res, fmt.Errorf("overlap=%v: %w", overlap, err)
		}
		if overlap {
			res.Overlapped = run
			res.Buckets = len(t.Buckets())
		} else {
			res.Serial = run
			res.Params = t.NumParams()
		}
	}
	s, v := res.Serial.OverlapChunk, res.Overlapped.OverlapChunk
	res.HiddenCommPct = v.HiddenCommPct
	if s.StepMs > 0 {
		res.CommSharePct = 100 * s.CommMs / s.StepMs
		res.Speedup = s.StepMs / v.StepMs
	}
	if s.CommMs > 0 {
		res.ComputeOverComm = s.ComputeMs / s.CommMs
		res.HiddenOfSerialCommPct = 100 * (1 - v.WaitMs/s.CommMs)
		res.OverlapEfficiencyPct = 100 * (1 - (v.StepMs-s.ComputeMs)/s.CommMs)
	}
	return res, nil
}

// rankTimes is one rank's per-step account.
type rankTimes struct {
	step, comm, wait []time.Duration
}

func overlapRun(ctx context.Context, o OverlapOptions, overlap bool, train *engine.Dataset) (OverlapRun, *engine.Trainer, error) {
	comms, err := group(ctx, o.Ranks)
	if err != nil {
		return OverlapRun{}, nil, err
	}
	defer closeAll(comms)
	trainers := make([]*engine.Trainer, len(comms))
	times := make([]rankTimes, len(comms))
	err = onRanks(comms, func(r int) error {
		comm := comms[r]
		cfg := engine.DefaultConfig()
		cfg.Hidden, cfg.BatchPerRank = o.Hidden, o.BatchPerRank
		cfg.BucketBytes, cfg.FirstBucketBytes = o.BucketBytes, o.FirstBucketBytes
		cfg.Rank, cfg.World = r, len(comms)
		t, err := engine.NewTrainer(cfg, train)
		if err != nil {
			return err
		}
		trainers[r] = t
		tm := &times[r]
		if !overlap {
			var comm0 time.Duration
			reduce := func(ctx context.Context, buf []float32) error {
				t0 := time.Now()
				err := comm.AllReduce(ctx, buf, ascend.Avg)
				comm0 = time.Since(t0)
				return err
			}
			for s := range o.Warmup + o.Steps {
				t0 := time.Now()
				if _, err := t.Step(ctx, reduce); err != nil {
					return err
				}
				if s >= o.Warmup {
					tm.step = append(tm.step, time.Since(t0))
					tm.comm = append(tm.comm, comm0)
					tm.wait = append(tm.wait, comm0)
				}
			}
			return nil
		}
		ar := engine.NewAsyncReducer(func(ctx context.Context, _ engine.Bucket, buf []float32) error {
			return comm.AllReduce(ctx, buf, ascend.Avg)
		})
		defer ar.Close()
		for s := range o.Warmup + o.Steps {
			before := ar.Stats()
			t0 := time.Now()
			if _, err := t.StepOverlap(ctx, ar); err != nil {
				return err
			}
			if s >= o.Warmup {
				d := ar.Stats().Sub(before)
				tm.step = append(tm.step, time.Since(t0))
				tm.comm = append(tm.comm, d.Comm)
				tm.wait = append(tm.wait, d.Waited)
			}
		}
		return nil
	})
	if err != nil {
		return OverlapRun{}, nil, err
	}
	for _, t := range trainers[1:] {
		if t.WeightsSHA256() != trainers[0].WeightsSHA256() {
			return OverlapRun{}, nil, errors.New("ranks ended with different weights")
		}
	}
	var run OverlapRun
	for lo := 0; lo < o.Steps; lo += o.Chunk {
		run.Chunks = append(run.Chunks, account(times, o.Warmup, lo, min(o.Steps, lo+o.Chunk)))
	}
	run.OverlapChunk = account(times, o.Warmup, 0, o.Steps)
	return run, trainers[0], nil
}

// account averages steps [lo, hi) over steps and ranks.
func account(times []rankTimes, warmup, lo, hi int) OverlapChunk {
	var step, comm, wait time.Duration
	for _, tm := range times {
		for s := lo; s < hi; s++ {
			step += tm.step[s]
			comm += tm.comm[s]
			wait += tm.wait[s]
		}
	}
	n := float64((hi - lo) * len(times))
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / n }
	c := OverlapChunk{FirstStep: warmup + lo, Steps: hi - lo, StepMs: ms(step), CommMs: ms(comm), WaitMs: ms(wait), ComputeMs: ms(step - wait)}
	c.HiddenCommPct = 100
	if comm > 0 {
		c.HiddenCommPct = 100 * max(0, 1-wait.Seconds()/comm.Seconds())
	}
	return c
}
