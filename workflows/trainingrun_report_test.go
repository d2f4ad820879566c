package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cann-train/cann-train/spec"
)

// TestTrainingRunWritesReport: a completed run stores its final status as
// its report in the bucket of its last checkpoint and says where; a
// bucket that refuses the report leaves the run completed all the same.
func TestTrainingRunWritesReport(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		cl := &fakeCluster{pool: testNodes("node-1", "node-2")}
		ch := &fakeChunks{refuseReports: refuse}
		env := newRunEnv(t, cl, ch)
		s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 200, ChunkSteps: 100}.WithDefaults()
		env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		var st spec.RunStatus
		require.NoError(t, env.GetWorkflowResult(&st))
		require.Equal(t, spec.PhaseCompleted, st.Phase)
		require.NotEmpty(t, ch.reports)
		in := ch.reports[0]
		require.Equal(t, st.LastCkpt.URL, in.URL)
		require.Equal(t, spec.PhaseCompleted, in.Status.Phase, "the report is the finished status")
		require.EqualValues(t, 200, in.Status.Step)
		if refuse {
			require.Len(t, ch.reports, 3, "retried, then given up")
			require.Empty(t, st.Report)
		} else {
			require.Len(t, ch.reports, 1)
			require.Equal(t, "mem:// runs/"+in.Run+"/report.json", st.Report)
		}
	}
}
