// Package workflows holds the deterministic orchestration of cann-train:
// TrainingRun (one durable training run: acquire nodes, train in chunks,
// checkpoint, replace failed nodes, report) and Cluster (the node registry
// and allocator that node workers register with).
//
// Workflow code here does no I/O, reads no wall clock, starts no goroutines
// and carries no tensors: time comes from workflow.Now and timers, order
// from sorted slices, and everything heavy happens in activities that run on
// node workers (see package activities). Activities are named by string
// (spec.Activity*), so this package depends only on the SDK and spec.
package workflows
