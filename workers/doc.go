// Package workers builds the Temporal workers of cann-train and wires
// logging in one place: the control worker (task queue "cann-train":
// workflows and control activities) and the node worker (its own queue
// "cann-train/node/<id>": TrainChunk, plus registration with the Cluster
// workflow and lease renewal). Both run until their context ends and shut
// down gracefully.
package workers
