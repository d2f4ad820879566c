// Package trainbench measures what the collective engine's optional
// features do to real training on the built-in task (the MNIST MLP of
// package engine, data parallel over in-process ranks linked by loopback
// TCP): gradient compression (traffic saved and convergence lost: Adam
// with a compressed gradient, or 1-bit Adam with a compressed momentum)
// and communication/computation overlap (bucketed allreduce during the
// backward pass). The cann-train `bench compression` and `bench overlap`
// commands print its results.
package trainbench
