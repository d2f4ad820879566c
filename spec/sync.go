package spec

import (
	"fmt"
	"strings"

	"github.com/cann-train/cann-train/engine/gradsync"
)

// Optimizers a job file may name.
const (
	OptimizerAdam       = "adam"
	OptimizerOneBitAdam = "onebit-adam"
)

// CompressionPolicy compresses the gradient exchange of a built-in run
// (job file `compression:`). Compressed steps carry error feedback, whose
// per-rank residuals are saved in every checkpoint, so a recovered run
// continues bit for bit.
type CompressionPolicy struct {
	// Codec is none, topk:RATIO, sign[:BUCKET], int8[:BUCKET], or auto:
	// after the warm-up the run measures its links and computation and
	// compresses just enough to hide communication behind computation
	// (the decision is recorded in history and shown in the status).
	// Default: auto with adam, sign with onebit-adam.
	Codec string `yaml:"codec" json:"codec"`
	// Exchange is twophase (the default: 1-bit Adam's all-to-all, server
	// re-encoding and allgather; a rank sends 2(n−1)/n of one encoding,
	// so the traffic falls by the codec's ratio at any world size, which
	// is what an auto codec is chosen by) or allgather (every rank's
	// encoding to every rank: n−1 encodings, one lossy step fewer).
	Exchange string `yaml:"exchange" json:"exchange"`
	// WarmupSteps are, with adam, uncompressed steps first (default 2 % of
	// steps). With onebit-adam the warm-up is freeze_step.
	WarmupSteps int64 `yaml:"warmup_steps" json:"warmup_steps"`
	// WarmupCodec compresses, with onebit-adam, the gradient during the
	// warm-up (default none).
	WarmupCodec string `yaml:"warmup_codec" json:"warmup_codec,omitempty"`
}

// OverlapPolicy averages gradient buckets while the backward pass is still
// running (job file `overlap:`), as PyTorch DDP does. Sizes in KiB; 0 takes
// the default (DDP's: 25 MiB buckets, 1 MiB first bucket).
type OverlapPolicy struct {
	BucketKiB      int `yaml:"bucket_kib" json:"bucket_kib,omitempty"`
	FirstBucketKiB int `yaml:"first_bucket_kib" json:"first_bucket_kib,omitempty"`
}

// syncDefaults fills in the optimizer and compression defaults.
func (s RunSpec) syncDefaults() RunSpec {
	if s.Optimizer == "" {
		s.Optimizer = OptimizerAdam
	}
	if s.Optimizer == OptimizerOneBitAdam && s.FreezeStep == 0 {
		s.FreezeStep = max(1, s.Steps*3/200)
	}
	if c := s.Compression; c != nil {
		cp := *c
		if cp.Codec == "" {
			cp.Codec = gradsync.CodecAuto
			if s.Optimizer == OptimizerOneBitAdam {
				cp.Codec = "sign"
			}
		}
		if canon, err := gradsync.CheckCodec(cp.Codec); err == nil && !strings.HasPrefix(canon, "powersgd") {
			cp.Codec = canon // e.g. sign → sign:1024 (Validate reports a bad one)
		}
		if cp.Exchange == "" {
			cp.Exchange = gradsync.ExchangeTwoPhase
		}
		if s.Optimizer != OptimizerOneBitAdam && cp.WarmupSteps == 0 {
			cp.WarmupSteps = max(1, s.Steps/50)
		}
		if cp.WarmupCodec == "" && s.Optimizer == OptimizerOneBitAdam {
			cp.WarmupCodec = "none"
		}
		s.Compression = &cp
	}
	return s
}

// validateSync checks the optimizer, compression and overlap fields.
func (s RunSpec) validateSync(bad func(field, format string, args ...any)) {
	switch s.Optimizer {
	case OptimizerAdam:
		if s.FreezeStep != 0 {
			bad("freeze_step", "applies to optimizer onebit-adam only, got %d with adam", s.FreezeStep)
		}
	case OptimizerOneBitAdam:
		if s.FreezeStep < 1 || s.FreezeStep >= s.Steps {
			bad("freeze_step", "%d out of range 1..steps-1 (%d): 1-bit Adam needs Adam steps first and compressed ones after", s.FreezeStep, s.Steps-1)
		}
	default:
		bad("optimizer", "unknown optimizer %q (want adam or onebit-adam)", s.Optimizer)
	}
	if c := s.Compression; c != nil {
		if strings.HasPrefix(c.Codec, "powersgd") {
			bad("compression.codec", "powersgd is a benchmark codec (`cann-train bench compression`): its state does not checkpoint, so a run could not recover bit for bit")
		} else if _, err := gradsync.CheckCodec(c.Codec); err != nil {
			bad("compression.codec", "%v", err)
		}
		if c.Exchange != gradsync.ExchangeAllGather && c.Exchange != gradsync.ExchangeTwoPhase {
			bad("compression.exchange", "%q: want allgather or twophase", c.Exchange)
		}
		switch {
		case s.Optimizer == OptimizerOneBitAdam && c.WarmupSteps != 0:
			bad("compression.warmup_steps", "with onebit-adam the warm-up is freeze_step; leave warmup_steps unset")
		case c.WarmupSteps < 0 || (s.Steps > 0 && c.WarmupSteps >= s.Steps):
			bad("compression.warmup_steps", "%d out of range 0..steps-1 (%d)", c.WarmupSteps, s.Steps-1)
		}
		if c.WarmupCodec != "" && s.Optimizer != OptimizerOneBitAdam {
			bad("compression.warmup_codec", "applies to optimizer onebit-adam only")
		} else if c.WarmupCodec != "" {
			if name, err := gradsync.CheckCodec(c.WarmupCodec); err != nil {
				bad("compression.warmup_codec", "%v", err)
			} else if name == gradsync.CodecAuto || strings.HasPrefix(name, "powersgd") {
				bad("compression.warmup_codec", "%q: want none, topk:RATIO, sign or int8", c.WarmupCodec)
			}
		}
	}
	if o := s.Overlap; o != nil {
		const most = 1 << 20 // 1 GiB in KiB
		if o.BucketKiB < 0 || o.BucketKiB > most {
			bad("overlap.bucket_kib", "%d out of range 0..%d (0: 25 MiB)", o.BucketKiB, most)
		}
		if o.FirstBucketKiB < 0 || o.FirstBucketKiB > most {
			bad("overlap.first_bucket_kib", "%d out of range 0..%d (0: 1 MiB)", o.FirstBucketKiB, most)
		}
	}
}

// SyncPolicy is the gradsync policy of the run's chunks; codec is the
// decided codec of an auto policy ("" while undecided).
func (s RunSpec) SyncPolicy(codec string) gradsync.Policy {
	var p gradsync.Policy
	if c := s.Compression; c != nil {
		p = gradsync.Policy{Codec: c.Codec, Exchange: c.Exchange, Warmup: c.WarmupSteps, GradCodec: c.WarmupCodec}
		if p.Codec == gradsync.CodecAuto && codec != "" {
			p.Codec = codec
		}
	}
	p.Overlap = s.Overlap != nil
	return p
}

// AutoCodec reports whether the run decides its codec after the warm-up,
// and the first step of the compressed phase.
func (s RunSpec) AutoCodec() (auto bool, from int64) {
	c := s.Compression
	if c == nil || c.Codec != gradsync.CodecAuto {
		return false, 0
	}
	return true, s.CompressFrom()
}

// CompressFrom is the first step of a compressed run's compressed phase:
// the end of its warm-up (freeze_step with onebit-adam).
func (s RunSpec) CompressFrom() int64 {
	switch {
	case s.Compression == nil:
		return 0
	case s.Optimizer == OptimizerOneBitAdam:
		return s.FreezeStep
	}
	return s.Compression.WarmupSteps
}

// StrategyCompression is what the strategy search needs of the run's
// compression (nil: none).
func (s RunSpec) StrategyCompression() *StrategyCompression {
	c := s.Compression
	if c == nil {
		return nil
	}
	return &StrategyCompression{Codec: c.Codec, Exchange: c.Exchange, WarmupCodec: c.WarmupCodec, From: s.CompressFrom(), Steps: s.Steps}
}

// KeepsCommState reports whether the run's checkpoints carry per-rank
// communication state (error-feedback residuals).
func (s RunSpec) KeepsCommState() bool { return s.Compression != nil }

// ChunkSync is one rank's account of how a chunk averaged its gradients.
type ChunkSync struct {
	// Phase is what the last step did, e.g. "sign momentum, twophase
	// exchange" or "warm-up (uncompressed until step 12)".
	Phase string `json:"phase"`
	// Codec is the compressed phase's codec ("" while undecided).
	Codec           string `json:"codec,omitempty"`
	CompressedSteps int64  `json:"compressed_steps"`
	// BytesSent is what this rank sent; DenseBytes what plain ring
	// allreduces would have sent.
	BytesSent  float64 `json:"bytes_sent"`
	DenseBytes float64 `json:"dense_bytes"`
	// CommSeconds is communication time; ExposedSeconds the part steps
	// waited for (less than CommSeconds only with overlap).
	CommSeconds    float64 `json:"comm_s"`
	ExposedSeconds float64 `json:"exposed_s"`
	// Measured link and computation for an auto codec: bytes per second
	// of the uncompressed allreduces and computation per step (0: not
	// measured in this chunk).
	BytesPerSec    float64 `json:"bytes_per_sec,omitempty"`
	ComputeSeconds float64 `json:"compute_s,omitempty"`
	// DenseSeconds (an uncompressed allreduce of the payload) and
	// ExchangeSeconds (a compressed exchange, per codec) are measured at
	// the end of the warm-up, to check that compression pays.
	DenseSeconds    float64            `json:"dense_s,omitempty"`
	ExchangeSeconds map[string]float64 `json:"exchange_s,omitempty"`
}

// SyncStatus is the run's gradient-exchange policy and what it achieved,
// in the status and the history.
type SyncStatus struct {
	Optimizer string `json:"optimizer"`
	// Policy is the job's codec (auto, sign, …, none) and exchange.
	Policy   string `json:"policy"`
	Exchange string `json:"exchange,omitempty"`
	// CompressFrom is the first compressed step (end of the warm-up).
	CompressFrom int64 `json:"compress_from"`
	// Codec is the codec in use from CompressFrom (decided after the
	// warm-up when Policy is auto; "" until then).
	Codec string `json:"codec,omitempty"`
	// Decision says why an auto policy chose Codec; DecidedAtStep when.
	Decision      string  `json:"decision,omitempty"`
	Need          float64 `json:"need,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	DecidedAtStep int64   `json:"decided_at_step,omitempty"`
	// Phase is what the last chunk's last step did.
	Phase string `json:"phase,omitempty"`
	// BytesSent and DenseBytes are rank 0's, summed over chunks (redone
	// ones too); TrafficReduction is their ratio.
	BytesSent        float64 `json:"bytes_sent"`
	DenseBytes       float64 `json:"dense_bytes"`
	TrafficReduction float64 `json:"traffic_reduction"`
	// Overlap: buckets averaged during backward (uncompressed steps);
	// HiddenCommPct is the share of communication that computation hid in
	// the last chunk with uncompressed steps.
	Overlap       bool    `json:"overlap,omitempty"`
	HiddenCommPct float64 `json:"hidden_comm_pct,omitempty"`
}

// NewSyncStatus describes the spec's policy (nil: plain Adam, plain
// allreduce, nothing to show).
func (s RunSpec) NewSyncStatus() *SyncStatus {
	if s.IsExternal() || (s.Compression == nil && s.Overlap == nil && s.Optimizer == OptimizerAdam) {
		return nil // (an external job's script exchanges its own gradients)
	}
	st := &SyncStatus{Optimizer: s.Optimizer, Policy: "none", Overlap: s.Overlap != nil}
	if c := s.Compression; c != nil {
		st.Policy, st.Exchange = c.Codec, c.Exchange
		st.CompressFrom = s.CompressFrom()
		if c.Codec != gradsync.CodecAuto {
			st.Codec = c.Codec
		}
	}
	return st
}

// String is a one-line summary for `cann-train status`.
func (st *SyncStatus) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", st.Optimizer)
	if st.Policy != "none" {
		fmt.Fprintf(&b, ", compression %s (%s exchange) from step %d", st.Policy, st.Exchange, st.CompressFrom)
		if st.Codec != "" && st.Codec != st.Policy {
			fmt.Fprintf(&b, ": %s", st.Codec)
		}
	}
	if st.DenseBytes > 0 {
		fmt.Fprintf(&b, "; traffic ÷%.3g so far", st.TrafficReduction)
	}
	if st.Overlap {
		fmt.Fprintf(&b, "; overlap: %.0f%% of communication hidden", st.HiddenCommPct)
	}
	return b.String()
}
