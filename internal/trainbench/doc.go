// Package trainbench measures what the collective engine's optional
// features do to real training on the built-in task (the MNIST MLP of
// package engine, data parallel over in-process ranks linked by loopback
// TCP): gradient compression (traffic saved and convergence lost) and
// communication/computation overlap. The cann-train `bench compression`
// and `bench overlap` commands print its results.
package trainbench
