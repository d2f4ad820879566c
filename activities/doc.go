// Package activities adapts engine/ and ascend/ to Temporal: decode the
// input, call the domain code, heartbeat progress, and map failures to
// Temporal error types (retryable, or NewNonRetryableApplicationError).
//
// Node activities (TrainChunk) run on a node worker's own task queue and
// host that node's ranks (ranks_per_node, one by default; CheckNodes asks
// other nodes' listeners whether their workers are alive); control
// activities (AcquireNodes, PlanCarbon) run on the control queue.
// PlanCarbon reads a run's carbon signal (trace file or provider API),
// prices finished chunks with engine/energy and plans the remaining work
// with engine/carbon.Plan. No training, collective or
// scheduling logic lives here.
package activities
