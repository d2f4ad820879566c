package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestCompressedRunSurvivesKillBitIdentical: issue 7's recovery property
// on the real server with real node processes. A 1-bit Adam run (sign
// momentum, two-phase exchange, error feedback on both sides) loses a node
// to SIGKILL mid-chunk; the spare takes its rank, every rank restores its
// own residuals from the checkpoint (rank 0 gathered them), and the run
// ends bit-identical to a fault-free one, with the traffic reduction in
// its status. Then a run with the adaptive codec: its warm-up ends on a
// chunk boundary, the workflow records the decision (a SideEffect, in
// history) and the status shows it; a run resumed from one of its later
// checkpoints without its status takes the codec from the checkpoint's
// residuals and ends bit-identical.
func TestCompressedRunSurvivesKillBitIdentical(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, l, _ := startInProcessControl(ctx, t, t.TempDir(), "node-1", "node-2", "node-3", "node-4") // node-4 is the spare
	onebit := spec.RunSpec{Nodes: 3, Steps: 300, ChunkSteps: 50, HeartbeatTimeout: spec.Duration(3 * time.Second),
		Optimizer: spec.OptimizerOneBitAdam, FreezeStep: 30, Compression: &spec.CompressionPolicy{}}.WithDefaults()
	start := func(name string, s spec.RunSpec, faults ...spec.InjectFault) spec.RunStatus {
		t.Helper()
		s.Name = name
		run := startRun(ctx, t, c, workflows.RunInput{Spec: s, Faults: faults})
		var st spec.RunStatus
		if err := run.Get(ctx, &st); err != nil {
			dumpLogs(t, l.LogDir)
			t.Fatalf("run %s: %v", name, err)
		}
		if st.Phase != spec.PhaseCompleted || st.Step != s.Steps {
			t.Fatalf("run %s: status %s at step %d", name, st.Phase, st.Step)
		}
		return st
	}

	// node-2 holds rank 1; it dies after step 130, the last checkpoint is
	// at 100 (after the freeze at 30: the residuals are in it).
	killed := start("onebit-killed", onebit, spec.InjectFault{NodeID: "node-2", AtStep: 130})
	if len(killed.Recoveries) != 1 || killed.Recoveries[0].ResumeStep != 100 || killed.Nodes[1] != "node-4" {
		t.Fatalf("recoveries %+v, nodes %v: want node-2 replaced by node-4 from step 100", killed.Recoveries, killed.Nodes)
	}
	clean := start("onebit-clean", onebit)
	if len(clean.Recoveries) != 0 {
		t.Fatalf("reference run recovered: %+v", clean.Recoveries)
	}
	if killed.WeightsSHA256 != clean.WeightsSHA256 {
		t.Errorf("recovered compressed run's weights %s differ from the fault-free run's %s", killed.WeightsSHA256, clean.WeightsSHA256)
	}
	for _, st := range []spec.RunStatus{killed, clean} {
		s := st.Sync
		// Over the whole run the 30 uncompressed Adam steps weigh in: with
		// the compressed steps cutting 31× (sign: 1 bit per value, a scale
		// per 1024, 2(n−1)/n of it sent), 300/(30+270/31) ≈ 7.75.
		if s == nil || s.Codec != "sign:1024" || s.CompressFrom != 30 || s.TrafficReduction < 6.5 {
			t.Errorf("%s: sync status %+v: want sign:1024 from step 30 and the traffic cut ≈ 7×", st.RunID, s)
		}
	}
	t.Logf("1-bit Adam traffic reduction over the run: ÷%.2f", clean.Sync.TrafficReduction)

	auto := spec.RunSpec{Nodes: 3, Steps: 120, ChunkSteps: 50, HeartbeatTimeout: spec.Duration(3 * time.Second),
		Compression: &spec.CompressionPolicy{Codec: "auto", WarmupSteps: 20},
		Overlap:     &spec.OverlapPolicy{BucketKiB: 64, FirstBucketKiB: 16}}.WithDefaults()
	st := start("auto-codec", auto)
	s := st.Sync
	if s == nil || s.Policy != "auto" || s.Codec == "" || s.Decision == "" || s.DecidedAtStep != 20 {
		t.Fatalf("auto policy status %+v: want a decision recorded at step 20", s)
	}
	// Chunks 0–20 (the warm-up), 20–70, 70–120.
	if st.Chunks != 3 {
		t.Errorf("%d chunks, want 3: the warm-up must end on a chunk boundary", st.Chunks)
	}
	t.Logf("auto decided %s: %s", s.Codec, s.Decision)
	// trainingrun_compression.json: recorded before the decision fell at the warm-up's end
	recordHistory(t, fetchHistory(ctx, t, c, st.RunID), "trainingrun_codec_decided.json")

	// A run resumed from the checkpoint at step 70 knowing nothing of the
	// decision (as from a bucket whose run history is gone): its ranks
	// restore the codec's residuals, the workflow takes the codec from
	// them, and the run ends bit-identical to the uninterrupted one.
	refs, err := earlierCheckpoints(ctx, st.LastCkpt.URL, st.LastCkpt.Run, st.LastCkpt.Step)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(refs, func(r spec.CheckpointRef) bool { return r.Step == 70 })
	if i < 0 {
		t.Fatalf("no checkpoint at step 70 among %+v", refs)
	}
	auto.Name = "auto-resumed"
	run := startRun(ctx, t, c, workflows.RunInput{Spec: auto, Resume: &spec.RunStatus{RunID: st.RunID, Phase: "unknown", Step: 70, LastCkpt: &refs[i]}})
	var resumed spec.RunStatus
	if err := run.Get(ctx, &resumed); err != nil {
		dumpLogs(t, l.LogDir)
		t.Fatalf("resumed run: %v", err)
	}
	if r := resumed.Sync; r == nil || r.Codec != s.Codec || r.DecidedAtStep != 120 || !strings.Contains(r.Decision, "carries the earlier run's "+s.Codec) {
		t.Errorf("resumed run's sync status %+v: want %s taken from the checkpoint", r, s.Codec)
	}
	if resumed.WeightsSHA256 != st.WeightsSHA256 {
		t.Errorf("resumed run's weights %s differ from the uninterrupted run's %s", resumed.WeightsSHA256, st.WeightsSHA256)
	}
	recordHistory(t, fetchHistory(ctx, t, c, resumed.RunID), "trainingrun_codec_carried.json")
}
