// Package carbon is the domain core of "green training": it reads real
// grid carbon-intensity traces, forecasts them, places a training job in
// time to lower its carbon intensity, and measures the result against the
// run-now baseline and a hindsight oracle.
//
// # Contract
//
// Traces. A [Series] is regular: Values[i] (gCO2eq/kWh) holds for
// [Start+i*Step, Start+(i+1)*Step), times in UTC. [ReadCSV] accepts the
// Electricity Maps export (direct intensity column by default, LCA on
// request via [CSVOptions]) and the plain "time,<zone>…" form of the Let's
// Wait Awhile traces, selecting the zone column like the --zone flag (of
// several value columns, one named carbon_intensity_avg, carbon_intensity
// or actual by default) (comma-, semicolon- or tab-separated; RFC 3339,
// "YYYY-MM-DD HH:MM[:SS]" in UTC or with an offset (+01:00, +0100, also
// after a space) or Unix-second/millisecond times). The
// step is inferred (the most common spacing) and every spacing must be a
// whole number of steps: a reading off that grid is refused naming its
// line and the one before (a single row at 16:30 in an hourly trace no
// longer turns it into a half-hour grid). Gaps of at most MaxGapSteps missing steps (an option of
// every reader and provider; default [MaxInterpolatedSteps] = 2, or an
// hour's worth ([MaxInterpolatedSpan]) on a finer grid; negative for none)
// are filled linearly (the German 2020 trace has two single
// missing 15-minute slots); longer gaps are kept in the series
// ([Series.Gaps]; Values holds placeholders there that nothing reads):
// the trace reads, and only a use that needs data inside a gap — At,
// Mean, [Series.Slice], a forecast's window or the history it reads
// (persistence: the day before; seasonal: its days and a step), a plan's
// or the oracle's window, the online policy's present — fails, with a
// [*GapError] (matching [ErrGap]) naming the missing time range, the line
// or element after it and the range the use needed. A plan clear of every
// gap is the plan on the trace without it; the online error model's
// history starts after a gap before the job, as at the trace's start. A
// timestamp without a reading (an empty CSV cell, a null in a history
// answer) is a missing step, and it still counts in the step inference; a
// row or element repeating the previous time and value is dropped, the same
// time with another value is refused naming both. Non-numeric,
// non-finite, negative or absurd (above [MaxIntensity], 5000 g/kWh) values
// fail with [ErrBadValue] naming line and
// column. Newer Electricity Maps exports ("Zone id", "Carbon intensity …
// (Life cycle)") read as the older ones. The JSON readers apply the same rules to the
// Electricity Maps v3 forecast ([ReadElectricityMapsForecastOptions]) and
// history/past-range ([ReadElectricityMapsHistory]) shapes, the Carbon
// Aware SDK forecasts/current ([ReadCarbonAwareForecastsOptions]) and
// bylocation ([ReadCarbonAwareEmissions]) shapes, and the UK Carbon
// Intensity API shapes, national and regional ([ReadUKIntensity]). In
// history answers a null value is a missing step; in forecasts it is an
// error. [ReadTrace] reads a file in any of these forms, told apart by its
// content (what `green plan --trace` and a job's green.trace read); its
// zone selects a CSV column or zone id, a UK region or a Carbon Aware SDK
// location, and a JSON answer for another zone, or without the one asked
// for, is refused ([ErrJSONAnswer]) naming what it holds.
//
// Providers. [ElectricityMaps] (auth-token header from $ELECTRICITYMAPS_TOKEN
// or a named variable), [CarbonAwareSDK] (a WebAPI deployment) and
// [UKCarbonIntensity] fetch forecasts and history over HTTP with a
// configurable base URL, injectable http.Client and environment, and a
// per-request timeout. Non-2xx answers become a [*StatusError] (matching
// [ErrHTTPStatus]) quoting the start of the body. [Bind] turns any
// [Provider] into a [Forecaster] for [Evaluate].
//
// Forecasters. [Perfect] returns the trace; [Persistence] returns the value
// one day earlier, and for horizons beyond a day the latest same-time value
// already observed at "now" (it never reads the future).
//
// Planning. [Plan] discretises a [Job] on the forecast's grid: Start is
// rounded up, Deadline down, Work and MinSlot up to whole steps. A
// non-interruptible job gets the contiguous window with the lowest mean; an
// interruptible one gets the cheapest set of steps whose maximal runs are
// each at least MinSlot long (exact dynamic program, O(steps × slack)).
// MinSlot holds for every slot, the last one included: a re-plan of a job
// that is running ([Job.Running]) continues the run until it has lasted
// MinSlot and never pauses it with less than MinSlot of work left, so the
// policies below realize schedules the oracle also considers. Ties go to
// the earliest choice (costs equal up to summation noise count as equal),
// so plans are deterministic. A deadline that cannot hold the work fails
// with [ErrDeadlineTooShort].
//
// Evaluation. [Oracle] finds the best schedule in hindsight on the real
// trace under the same rules (every contiguous window; the cheapest steps;
// Plan's dynamic program for a multi-step MinSlot, which the tests check
// against exhaustive searches). An oracle too large to compute (years on a
// fine grid) leaves the evaluation standing with [Result.OracleErr] set.
// [Evaluate] plans on a forecast and reports baseline, planned,
// realized (the planned slots on the real trace) and oracle intensities.
// [EvaluateReplanned] re-plans at every trace step on a fresh forecast.
//
// Online policy. [Online] decides at every step, as a TrainingRun does at
// chunk boundaries, from what is known then: the observed present
// intensity, the forecast corrected by least squares on the forecaster's
// own errors over the week before the job ([EstimateErrors];
// [CorrectBias] or [CorrectLinear]; past forecasts whose errors are gross
// glitches, such as one reading of 5000 g/kWh in a week of 100s, are left
// out of the fit), and a margin of z RMS errors on future steps (prices
// rounded to 1e-6 g/kWh, so that equal ones tie); it plans the remaining work with Plan on those prices and
// runs now iff the plan starts now (for one-step interruptible slots: the
// observed present is among the k cheapest prices ahead, k the remaining
// work). [DefaultOnline] holds the policy chosen by cross-validation on the
// first half of the real traces; [EvaluateOnline] measures it. Decisions
// never read the trace after the present step. For a live provider, which
// gives a forecast and recent measurements but no past forecasts,
// [Online.ObservedPrices] prices the present step at the latest
// measurement (refused with [ErrNoObservation] when older than the
// caller allows) and later steps at the provider's forecast, corrected by
// an ErrorModel when the caller has one (the zero one: not at all);
// [UKCarbonIntensity.Measured] reads the UK API's measurements without
// its forecast.
//
// Control. [AdjustBatch] is a pure carbon-aware batch controller: above
// 1.3× a threshold the global batch shrinks ×0.75, below 0.7× it grows
// ×1.25, clamped to [min, max], with the learning rate scaled linearly with
// the batch (TrainingRun applies it through the PlanCarbon activity as a
// recorded batch schedule; see spec.BatchControl). [Budget] accumulates grams and reports [BudgetAlert] once at
// 95 % of the limit and [BudgetExceeded] once at 100 %.
//
// All errors wrap a sentinel of this package or an underlying I/O/decoding
// error with %w. The package has no global mutable state and is
// deterministic.
//
// # Non-goals
//
// No WattTime client, no caching or rate limiting of API calls, no time
// zones other than UTC for zone-less timestamps, no spatial (region)
// shifting, no CarbonScaler-style server-count scaling (only the batch
// controller), no energy or power model here: planning compares
// intensities per kWh, assuming constant power while the job runs (energy
// accounting is in engine/energy). Integration with the orchestrator
// (workflows, activities) lives elsewhere.
package carbon
