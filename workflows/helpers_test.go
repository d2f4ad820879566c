package workflows

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func decodeArgs(can *workflow.ContinueAsNewError, out any) error {
	return converter.GetDefaultDataConverter().FromPayloads(can.Input, out)
}

// queryInActivity makes a query from an activity's goroutine (a fake
// activity, a chunk's onStart) and waits for its answer. The query runs
// on the test environment's main loop, between workflow tasks, as the
// SDK runs an activity-started listener: one made on the activity's own
// goroutine ran beside the workflow's coroutines and now and then failed
// ("getState: illegal access from outside of workflow context", seen in
// CI). Never from the main loop (a RegisterDelayedCallback, a listener):
// it would wait for itself.
func queryInActivity(env *testsuite.TestWorkflowEnvironment, query string, args ...any) (converter.EncodedValue, error) {
	type answer struct {
		v   converter.EncodedValue
		err error
	}
	got := make(chan answer, 1)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(query, args...)
		got <- answer{v, err}
	}, 0)
	a := <-got
	return a.v, a.err
}
