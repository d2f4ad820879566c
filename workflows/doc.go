// Package workflows holds the deterministic orchestration of cann-train:
// TrainingRun (one durable training run: acquire nodes, train in chunks,
// checkpoint, replace failed nodes, report) and Cluster (the node registry
// and allocator that node workers register with; an acquire it cannot meet
// first frees the nodes of runs that ended without releasing them — a
// terminated run runs no more code — asking the server through the
// EndedRuns activity).
//
// Workflow code here does no I/O, reads no wall clock, starts no goroutines
// and carries no tensors: time comes from workflow.Now and timers, order
// from sorted slices, and everything heavy happens in activities that run on
// node workers (see package activities). Activities are named by string
// (spec.Activity*), so this package depends only on the SDK and spec.
// (Signal handling uses workflow.Go coroutines, never Go goroutines.)
//
// At every chunk boundary TrainingRun acts on its control signals — pause,
// resume, rescale, green-override, and evict, which the Cluster sends when
// an operator drains a node the run holds — and on its green policy: it prices the
// finished chunks and re-plans through the PlanCarbon activity, then waits
// on a durable timer for the next slot when outside one
// (trainingrun_controls.go, trainingrun_green.go); with green.batch the
// same activity returns the carbon batch controller's decision, which the
// run appends to its batch schedule (in the status) and hands every chunk.
// Changes to existing code
// paths are gated with workflow.GetVersion so that recorded histories still
// replay (replay_test.go).
package workflows
