// Package strategy plans how to parallelise the training of a transformer
// on a cluster: it scores one parallel configuration (a [Plan]) with an
// analytical cost model, and searches all of them exhaustively.
//
// # Contract
//
// Inputs are plain data: a [Model] (layers, hidden, ffn_hidden, heads,
// kv_heads, vocab, seq_len, global_batch in sequences; optional experts,
// top_k, capacity_factor, gated_mlp, flash_attention, no_dropout and the bytes per
// parameter of model state) and a [Cluster] (nodes × devices_per_node, a
// device profile or an inline device, per-device one-way bandwidths of the
// intra- and inter-node fabrics, optional latencies and efficiencies). Both
// are read from YAML by [LoadModel]/[ParseModel] and
// [LoadCluster]/[ParseCluster] with strict decoding: unknown fields, wrong
// types and impossible values come back as a [*SpecError] whose
// [FieldError]s name the field and its line, in line order; an empty file
// or a second YAML document ("---") is refused as such. Embedded presets ([Presets],
// [Preset], [PresetModel], [PresetCluster]) cover the calibration runs,
// moe_bert, a 1T GPT and 1024_ascend910b. Device profiles ([Profiles]):
// Ascend 910 (A), the three Atlas A2 / 910B variants, A100-80GB, H100,
// H200 and one core of the project's build machine.
//
// [ParsePlan] reads "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=0,vpp=1,
// sp=false,ep=1,cp=1" (plus overlap=true|false; booleans are true, false,
// 1 or 0). [Check] says why a plan cannot run (heads not divisible by tp,
// batch not divisible by dp·mb, seq_len not divisible by 2·cp, …).
// [Evaluate] never fails: it returns an [Estimate] with step time,
// throughput, TFLOP/s and MFU per device, memory per device with its
// breakdown and headroom, the time breakdown, communication and bubble
// shares, the failure blast radius, Feasible/Reason, and the ZeRO stage it
// prices (PricedZeRO, with a Note where a pipelined zero=3 runs as ZeRO-1
// or ZeRO-2; the search lists such a plan once, at the lower stage). [Search]
// enumerates DP×TP×PP×CP×EP, micro-batch, recompute, ZeRO stage,
// interleaving and SP over all devices of the cluster, drops plans that do
// not fit in memory and returns the top k by throughput (ties: more
// headroom, then smaller blast radius, then the plan string). [WriteTable]
// prints estimates. Everything is deterministic, single-threaded and free
// of global mutable state; a 1T-parameter search on 1024 devices takes tens
// of milliseconds.
//
// # Cost model
//
// FLOP convention ([FLOPConvention]): GEMM FLOPs only; the attention core
// counts all s keys (no causal halving), logits 2·h·V per token.
// [Estimate.TFLOPSPerDevice] and HFU count what runs, recomputation
// included: under full recompute this is Narayanan et al. eq. 3, the
// convention of Megatron's and BLOOM's published TFLOP/s. MFU uses model
// FLOPs, three passes and no recomputation (Korthikanti et al. eq. 7).
//
// Time: per layer and micro-batch, GEMMs at PeakTFLOPS·GEMMEfficiency,
// memory-bound kernels (LayerNorm, bias-dropout-add, GeLU, the s×s softmax
// and dropout unless FlashAttention) at HBMGBps·MemoryEfficiency, plus a
// fixed cost per operator; backward = 2× the forward GEMMs and 1.5× its
// streamed bytes; full recompute adds a forward pass, selective the
// attention core. Communication on a two-level topology (intra-node ring,
// then one NIC per device across nodes; nccl-tests bus factors, per-step
// latency): TP two all-reduces (or RS+AG) per pass, CP K/V all-gather
// hidden behind the attention core, EP dispatch+combine all-to-all with
// capacity padding, PP point-to-point of 1/t of the activation per
// micro-batch and chunk, DP all-reduce (ZeRO 1: RS+AG; ZeRO 2: a
// reduce-scatter per micro-batch, since sharded gradients accumulate only
// reduced ones, and one AG; ZeRO 3: gathers per micro-batch, except in a
// pipeline, which keeps its stage gathered as ZeRO-1 or ZeRO-2 would
// where that fits).
// Plan.Overlap hides the gradient reductions behind backward passes and
// ZeRO-3 gathers behind compute. 1F1B step =
// m·(slowest stage slot) + (pp−1)/vpp·(average slot) + exposed DP +
// optimizer. Layers that divide evenly are split evenly, the output layer
// on top of the last stage (Megatron's default); otherwise the last stage
// takes fewer layers when that lowers the slowest stage, the stages in
// between hold ⌈rest/(pp−1)⌉ (vpp equal chunks with interleaving) and the
// first takes what is left, the lightest first stage among equally fast
// splits since it holds the most micro-batches in flight (Megatron's
// uneven split, as Llama 3 put 126 layers on 16 stages: 7, 8 × 14, 7).
//
// Memory: model states with the bytes per parameter of [Precision]
// (default 2+4+12 = 18, Megatron's bf16 recipe) sharded by ZeRO stage over
// DP×CP (experts over the expert-DP group); activations per Korthikanti et
// al. Table 2 by recompute mode and SP, on the busiest of the first stage
// (min(pp, m) micro-batches in flight, × (1+(pp−1)/(pp·vpp)) interleaved),
// the second (one fewer; two chunks fewer interleaved) and the last (one
// micro-batch and the fp32 logits; interleaved, its (vpp−1)·pp warm-up
// chunks too); a reserve
// (ReservedGiB, default 2 GiB + 5%) is never handed out.
//
// Calibration: efficiencies are per device type, never per run. A100 GEMM
// 0.72 and memory 0.8 were set once on the 43 A100 rows of
// shared/data/strategy/calibration.csv; other devices use msmodeling's
// 0.7/0.6 until measured. Link efficiencies belong to the cluster spec:
// NVLink 0.77 (nccl-tests all-reduce on one 8×A100 node, 232.5 of 300
// GB/s), InfiniBand 0.9 (Calculon), HCCS/RoCE 0.7 (msmodeling). Every
// operator costs 20 µs. The backward TP all-reduces hide under the
// weight-gradient GEMMs (Megatron's async TP all-reduce). TestCalibration
// checks the published runs: the fp16 runs (vTrain, SC21) are evaluated
// with 16 B/param (fp16 gradients), BLOOM with the bf16 default.
//
// # Non-goals
//
// No profiling, no heterogeneous devices or per-layer strategies, no
// zero-bubble or DualPipe schedules, no offloading, no network contention
// between jobs or oversubscribed fabrics, no MoE load imbalance beyond the
// capacity factor. The planner uses all devices of the cluster. Which 910B
// variant a machine is remains unknown: use [EvaluateBand] with
// [AscendA2Profiles]. It runs no training and imports nothing of Temporal.
package strategy
