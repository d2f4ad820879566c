package spec

import (
	"strings"
	"testing"
)

// TestResumeOf: what may change between a run and the one continuing its
// checkpoint, what may not (named), and the step-derived defaults kept.
func TestResumeOf(t *testing.T) {
	base := RunSpec{Name: "r", Model: ModelSpec{Kind: "mlp-mnist", Hidden: []int{128}}, Nodes: 3, Steps: 1000, BatchPerRank: 32, Seed: 1}
	with := func(edit func(*RunSpec)) RunSpec {
		s := base
		s.Model.Hidden = append([]int(nil), base.Model.Hidden...)
		edit(&s)
		return s
	}
	cases := []struct {
		name     string
		prev, s  RunSpec
		conflict string // "" : none
	}{
		{"same", base, base, ""},
		{"more steps, other chunks and timeouts", base, with(func(s *RunSpec) {
			s.Steps, s.ChunkSteps, s.CheckpointEvery, s.MaxRestarts = 5000, 500, 250, 9
		}), ""},
		{"other nodes, same global batch", base, with(func(s *RunSpec) { s.Nodes, s.BatchPerRank = 2, 48 }), ""},
		{"other global batch", base, with(func(s *RunSpec) { s.Nodes = 2 }), "global batch"},
		{"other model", base, with(func(s *RunSpec) { s.Model.Hidden = []int{64} }), "model.hidden [64] (the earlier run's: [128])"},
		{"other seed", base, with(func(s *RunSpec) { s.Seed = 2 }), "seed 2"},
		{"other learning rate", base, with(func(s *RunSpec) { s.LearningRate = 0.005 }), "learning_rate 0.005 (the earlier run's: 0.002)"},
		{"other optimizer", base, with(func(s *RunSpec) { s.Optimizer = OptimizerOneBitAdam }), "optimizer onebit-adam"},
		{"compression added", base, with(func(s *RunSpec) { s.Compression = &CompressionPolicy{Codec: "int8"} }), "compression"},
		{"data set pinned", base, with(func(s *RunSpec) { s.DataSHA256 = strings.Repeat("a", 64) }), ""},
		{"other data set pinned", with(func(s *RunSpec) { s.DataSHA256 = strings.Repeat("b", 64) }), with(func(s *RunSpec) { s.DataSHA256 = strings.Repeat("a", 64) }),
			"data_sha256 aaaa"},
		{"external for built-in", base, with(func(s *RunSpec) {
			s.External = &ExternalJob{Launcher: "torchrun", Entrypoint: []string{"python3", "train.py"}}
		}), "runs an external job, the earlier run the built-in model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, got := tc.s.ResumeOf(tc.prev)
			if tc.conflict == "" {
				if len(got) > 0 {
					t.Fatalf("conflicts %q; want none", got)
				}
				return
			}
			if !strings.Contains(strings.Join(got, "; "), tc.conflict) {
				t.Fatalf("conflicts %q; want one saying %q", got, tc.conflict)
			}
		})
	}
}

// TestDataConflict: a job pinning a data set cannot continue a run that
// trained on another; unpinned, or the earlier run's unknown, it can.
func TestDataConflict(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, tc := range []struct{ pinned, trained, want string }{
		{"", a, ""}, {a, "", ""}, {a, a, ""},
		{a, b, "data_sha256 " + a + " (the data set the earlier run trained on: " + b + ")"},
	} {
		if got := (RunSpec{DataSHA256: tc.pinned}).DataConflict(tc.trained); got != tc.want {
			t.Errorf("pinned %.4q, trained %.4q: %q, want %q", tc.pinned, tc.trained, got, tc.want)
		}
	}
}

// TestResumeOfKeepsDerivedSchedules: more steps would move the defaults
// derived from them (1-bit Adam's freeze step, the compression warm-up);
// the continuing run keeps the earlier run's, and one written out stays.
func TestResumeOfKeepsDerivedSchedules(t *testing.T) {
	prev := RunSpec{Name: "r", Nodes: 2, Steps: 1000, BatchPerRank: 32, Optimizer: OptimizerOneBitAdam}
	next := prev
	next.Steps = 4000
	got, conflicts := next.ResumeOf(prev)
	if len(conflicts) > 0 || got.WithDefaults().FreezeStep != prev.WithDefaults().FreezeStep {
		t.Errorf("freeze step %d, conflicts %q; want the earlier run's %d", got.WithDefaults().FreezeStep, conflicts, prev.WithDefaults().FreezeStep)
	}
	prev = RunSpec{Name: "r", Nodes: 2, Steps: 1000, BatchPerRank: 32, Compression: &CompressionPolicy{Codec: "int8"}}
	next = prev
	next.Steps = 4000
	got, conflicts = next.ResumeOf(prev)
	if len(conflicts) > 0 || got.WithDefaults().Compression.WarmupSteps != 20 || next.Compression.WarmupSteps != 0 {
		t.Errorf("warm-up %d, conflicts %q; want the earlier run's 20, the job's spec untouched", got.WithDefaults().Compression.WarmupSteps, conflicts)
	}
	next.Compression = &CompressionPolicy{Codec: "int8", WarmupSteps: 50}
	if _, conflicts = next.ResumeOf(prev); len(conflicts) == 0 {
		t.Error("a warm-up written out differently resumes; want it named")
	}
}
