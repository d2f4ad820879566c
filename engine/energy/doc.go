// Package energy measures and models the energy a training run uses and
// turns it into emissions with a grid carbon-intensity series:
//
//	CO2_g = Σ_intervals E[kWh] × CI(interval)[gCO2eq/kWh]
//
// where CI is the time-weighted mean of a carbon.Series over the interval
// (carbon.Series.Mean), E already includes the PUE (facility overhead).
//
// Meters report cumulative joules since they were opened: [RAPL] reads the
// Linux powercap counters (/sys/class/powercap/intel-rapl:*/energy_uj, with
// max_energy_range_uj wraparound; the root directory is injectable),
// [SampledMeter] integrates the watts a [PowerSource] reports ([NPUSMI]:
// `npu-smi info` on Ascend hosts; [NVIDIASMI]: NVML's power.draw through
// nvidia-smi), and [ModelMeter] integrates a [Model] (per-device busy power
// × busy fraction + idle power, × devices × PUE) where nothing measures.
// [OpenHostMeter] opens a node's meter by kind.
// An [Accountant] samples a Meter into intervals, and [Account] prices them
// on a series and compares them with running the same energy profile
// back-to-back from a "run now" time (savings %). [RenderSVG] draws the
// intensity curve with the chunks that ran (and planned slots) as an SVG
// timeline.
//
// The package has no global mutable state; meters and accountants are
// plain values owned by one goroutine, except SampledMeter, which samples
// on a goroutine of its own and is safe for concurrent use.
package energy
