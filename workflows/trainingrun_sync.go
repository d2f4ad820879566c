package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/ascend/codec"
	"github.com/cann-train/cann-train/engine/gradsync"
	"github.com/cann-train/cann-train/spec"
)

// The gradient exchange's policy (spec optimizer, compression, overlap)
// lives in the chunks; the workflow's part is the adaptive codec: the
// chunks of the warm-up end at its last step, their ranks report what
// they measured, and the workflow decides the codec once — in a
// SideEffect, so the decision is in history, a replay reads it back, and
// every later chunk (recoveries from checkpoints before the decision too)
// compresses the same way, which keeps recoveries bit-identical.

// chunkEnd bounds a chunk's end at the warm-up's last step while an auto
// codec is undecided, so that the decision falls on a chunk boundary.
func (r *run) chunkEnd(from, to int64) int64 {
	auto, at := r.spec.AutoCodec()
	if auto && r.st.Status.Sync != nil && r.st.Status.Sync.Codec == "" && from < at && at < to {
		return at
	}
	return to
}

// versionDecideOnMeasure: the codec is decided as soon as the warm-up's
// last chunk has reported its measurements, so that a run paused or
// cancelled at the warm-up's end holds the decision (a resumed run keeps
// it); and a run resumed past the warm-up undecided — its measurements
// lost with the earlier run — measures again in its first chunk instead
// of deciding from none. Before, the decision waited for the next chunk's
// start.
const versionDecideOnMeasure = "decide-codec-on-measure"

// chunkCodec returns the codec the next chunk compresses with: the
// decided one of an auto policy ("" while its warm-up lasts), deciding it
// first when the chunk starts at or after the warm-up's end. calibrate:
// undecided past the warm-up with nothing measured, the chunk trains
// uncompressed and measures (ChunkInput.Calibrate).
func (r *run) chunkCodec(ctx workflow.Context, from int64) (name string, calibrate bool) {
	auto, at := r.spec.AutoCodec()
	st := r.st.Status.Sync
	if !auto || st == nil {
		return "", false
	}
	if st.Codec == "" && from >= at {
		if len(r.st.SyncMeasures) == 0 && workflow.GetVersion(ctx, versionDecideOnMeasure, workflow.DefaultVersion, 1) >= 1 {
			return "", true
		}
		r.decideCodec(ctx, from)
	}
	return st.Codec, false
}

// decideOnMeasure decides an auto codec at the end of the chunk that
// measured for it: the warm-up's last, or a resumed run's calibrating
// one. A resumed run whose checkpoint carried the earlier run's codec
// (its error-feedback state: the ranks restored it and compressed with
// it) keeps that codec instead: its residuals are that codec's.
func (r *run) decideOnMeasure(ctx workflow.Context, results []spec.ChunkResult) {
	auto, at := r.spec.AutoCodec()
	st, step := r.st.Status.Sync, r.st.Status.Step
	if !auto || st == nil || st.Codec != "" || step < at || len(r.st.SyncMeasures) == 0 ||
		workflow.GetVersion(ctx, versionDecideOnMeasure, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, res := range results {
		if res.Sync != nil && res.Sync.Codec != "" {
			st.Codec, st.DecidedAtStep = res.Sync.Codec, step
			st.Decision = fmt.Sprintf("the checkpoint this run resumed from (step %d) carries the earlier run's %s", res.From, res.Sync.Codec)
			workflow.GetLogger(ctx).Info("compression carried by the checkpoint", "codec", st.Codec, "step", step)
			return
		}
	}
	r.decideCodec(ctx, step)
}

// decideCodec applies codec.Choose to every rank's warm-up measurement
// and records the most compressing choice.
func (r *run) decideCodec(ctx workflow.Context, step int64) {
	ms := make([]codec.Measure, len(r.st.SyncMeasures))
	for i, m := range r.st.SyncMeasures {
		ms[i] = codec.Measure{DenseBytes: 4 * (r.spec.GradientFloats() - 1), Ranks: len(r.st.SyncMeasures),
			BytesPerSec: m.BytesPerSec, Compute: seconds(m.ComputeSeconds), Dense: seconds(m.DenseSeconds)}
		if len(m.ExchangeSeconds) > 0 {
			ms[i].Exchange = map[string]time.Duration{}
			for _, name := range workflow.DeterministicKeys(m.ExchangeSeconds) {
				ms[i].Exchange[name] = seconds(m.ExchangeSeconds[name])
			}
		}
	}
	var c codec.Choice
	_ = workflow.SideEffect(ctx, func(workflow.Context) any { return gradsync.ChooseAll(ms) }).Get(&c)
	if c.Codec == "" {
		c.Codec = "none"
	}
	st := r.st.Status.Sync
	st.Codec, st.Decision, st.Need, st.Ratio, st.DecidedAtStep = c.Codec, c.Reason, c.Need, c.Ratio, step
	workflow.GetLogger(ctx).Info("compression decided", "codec", c.Codec, "reason", c.Reason, "step", step)
}

// absorbSync folds a finished chunk's gradient-exchange reports into the
// status, and keeps the ranks' measurements for an auto decision.
func (r *run) absorbSync(results []spec.ChunkResult) {
	st := r.st.Status.Sync
	if st == nil || len(results) == 0 || results[0].Sync == nil {
		return
	}
	lead := results[0].Sync
	st.Phase = lead.Phase
	st.BytesSent += lead.BytesSent
	st.DenseBytes += lead.DenseBytes
	if st.BytesSent > 0 {
		st.TrafficReduction = st.DenseBytes / st.BytesSent
	}
	if st.Overlap && lead.CommSeconds > 0 && lead.CompressedSteps < results[0].To-results[0].From {
		st.HiddenCommPct = 100 * max(0, 1-lead.ExposedSeconds/lead.CommSeconds)
	}
	r.st.SyncMeasures = r.st.SyncMeasures[:0]
	for _, res := range results {
		m := SyncMeasure{}
		if res.Sync != nil {
			m = SyncMeasure{BytesPerSec: res.Sync.BytesPerSec, ComputeSeconds: res.Sync.ComputeSeconds,
				DenseSeconds: res.Sync.DenseSeconds, ExchangeSeconds: res.Sync.ExchangeSeconds}
		}
		r.st.SyncMeasures = append(r.st.SyncMeasures, m)
	}
}

// SyncMeasure is one rank's warm-up measurement (spec.ChunkSync).
type SyncMeasure struct {
	BytesPerSec     float64            `json:"bytes_per_sec"`
	ComputeSeconds  float64            `json:"compute_s"`
	DenseSeconds    float64            `json:"dense_s,omitempty"`
	ExchangeSeconds map[string]float64 `json:"exchange_s,omitempty"`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
