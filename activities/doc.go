// Package activities adapts engine/ and ascend/ to Temporal: decode the
// input, call the domain code, heartbeat progress, and map failures to
// Temporal error types (retryable, or NewNonRetryableApplicationError).
//
// Node activities (TrainChunk) run on a node worker's own task queue and
// host that node's rank; control activities (AcquireNodes) run on the
// control queue. No training, collective or scheduling logic lives here.
package activities
