package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// TestReplayRecordedHistories replays histories recorded from real runs on
// the embedded server: a run whose control worker was killed, one that
// replaced a SIGKILLed node, and the Cluster registry — recorded before
// the chunk-boundary controls existed, so they replay through the
// workflow.GetVersion default paths — a run that was paused and resumed,
// one whose adaptive compression codec was decided after its warm-up (a
// SideEffect), and one whose strategy search moved it to fewer nodes
// (re-record with CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata
// go test -run 'TestControlWorkerKilledMidRun|TestNodeKilledMidRunIsReplaced|TestPauseResumeRealRun|TestCompressedRunSurvivesKillBitIdentical|TestStrategyAutoRealRun'
// ./cmd/cann-train; keep the old ones unless their format changes). A
// change to workflow code that would break running workflows fails here
// with a nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	for _, tc := range []struct{ file, typ string }{
		{"trainingrun.json", spec.WorkflowTrainingRun},
		{"trainingrun_recovery.json", spec.WorkflowTrainingRun},
		{"trainingrun_pause.json", spec.WorkflowTrainingRun},
		{"trainingrun_compression.json", spec.WorkflowTrainingRun},
		{"trainingrun_strategy.json", spec.WorkflowTrainingRun},
		{"cluster.json", spec.WorkflowCluster},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
			r.RegisterWorkflowWithOptions(Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", tc.file)); err != nil {
				t.Fatalf("replay %s (%s): %v", tc.file, tc.typ, err)
			}
		})
	}
}
