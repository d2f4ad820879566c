package spec

import (
	"encoding/json"
	"fmt"
	"slices"
)

// ResumeOf returns s set to continue prev, the spec of an earlier run of
// its name, from prev's last checkpoint, and the fields in which they
// differ so that it cannot: the checkpoint would not fit the model, or the
// steps after it would not be the run's steps (the data order and the
// optimizer's state depend on the seed, the global batch, the optimizer
// and the gradient compression). Steps, nodes (at the same global batch),
// chunking, checkpointing, timeouts and the collective may change. What
// s leaves to defaults that depend on the steps (freeze_step, the
// compression's warmup_steps) keeps prev's values, so that more steps
// continue the same schedule.
func (s RunSpec) ResumeOf(prev RunSpec) (RunSpec, []string) {
	prev = prev.WithDefaults()
	if s.FreezeStep == 0 && s.Optimizer == prev.Optimizer {
		s.FreezeStep = prev.FreezeStep
	}
	if c := s.Compression; c != nil && c.WarmupSteps == 0 && prev.Compression != nil {
		cp := *c
		cp.WarmupSteps = prev.Compression.WarmupSteps
		s.Compression = &cp
	}
	return s, s.resumeConflicts(prev)
}

func (s RunSpec) resumeConflicts(prev RunSpec) []string {
	s = s.WithDefaults()
	var out []string
	differ := func(field string, now, was any) {
		out = append(out, fmt.Sprintf("%s %v (the earlier run's: %v)", field, now, was))
	}
	if s.IsExternal() != prev.IsExternal() {
		kind := map[bool]string{true: "an external job", false: "the built-in model"}
		return []string{fmt.Sprintf("this job runs %s, the earlier run %s", kind[s.IsExternal()], kind[prev.IsExternal()])}
	}
	if s.IsExternal() {
		return nil // the script reads its own checkpoint
	}
	if s.Model.Kind != prev.Model.Kind {
		differ("model.kind", s.Model.Kind, prev.Model.Kind)
	}
	if !slices.Equal(s.Model.Hidden, prev.Model.Hidden) {
		differ("model.hidden", s.Model.Hidden, prev.Model.Hidden)
	}
	if s.Seed != prev.Seed {
		differ("seed", s.Seed, prev.Seed)
	}
	if s.LearningRate != prev.LearningRate {
		// (The optimizer's state is the earlier rate's, and the engine
		// restores a checkpoint only into the trainer that wrote it.)
		differ("learning_rate", s.LearningRate, prev.LearningRate)
	}
	if s.GlobalBatch() != prev.GlobalBatch() {
		differ("global batch (nodes × ranks_per_node × batch_per_rank)", s.GlobalBatch(), prev.GlobalBatch())
	}
	if s.Optimizer != prev.Optimizer {
		differ("optimizer", s.Optimizer, prev.Optimizer)
	}
	if s.FreezeStep != prev.FreezeStep {
		differ("freeze_step", s.FreezeStep, prev.FreezeStep)
	}
	if a, b := jsonText(s.Compression), jsonText(prev.Compression); a != b {
		differ("compression", a, b)
	}
	if c := s.DataConflict(prev.DataSHA256); c != "" { // (a pinned run trains on its pin)
		out = append(out, c)
	}
	return out
}

// DataConflict says how s's pinned data set (DataSHA256) contradicts
// trained, the one an earlier run of its name trained on (its
// RunStatus.DataSHA256), which s would continue; "" when it does not
// (either unknown, or the same). Unpinned, a resumed run's nodes compare
// their data afresh and its status names a change.
func (s RunSpec) DataConflict(trained string) string {
	if s.DataSHA256 == "" || trained == "" || s.DataSHA256 == trained {
		return ""
	}
	return fmt.Sprintf("data_sha256 %s (the data set the earlier run trained on: %s)", s.DataSHA256, trained)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
