package workflows

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
)

// Metrics a TrainingRun emits through the worker's metrics handler (see
// workers.ServeMetrics), tagged with the run's workflow ID as "run". The
// SDK drops them while a history replays, so they are safe in workflow
// code. Prometheus names: counters gain a _total suffix.
const (
	metricStep          = "cann_train_step"                     // gauge: global step after the last chunk
	metricSamplesPerSec = "cann_train_samples_per_sec"          // gauge: the last chunk's throughput
	metricCarbonGrams   = "cann_train_carbon_grams"             // gauge: gCO2eq of the chunks priced so far
	metricEnergyKWh     = "cann_train_energy_kwh"               // gauge: their energy
	metricBudgetUsed    = "cann_train_carbon_budget_used_ratio" // gauge: grams / budget_g
	metricBudgetAlerts  = "cann_train_carbon_budget_alerts"     // counter, level=alert|exceeded: once each per run
	metricGreenWaits    = "cann_train_green_waits"              // counter: waits for a green window
	metricGlobalBatch   = "cann_train_global_batch"             // gauge: the batch controller's batch in force
	metricCkptRefused   = "cann_train_checkpoint_refusals"      // counter: checkpoints the bucket refused
	metricStorageHeld   = "cann_train_storage_held"             // gauge: 1 while the run holds for its bucket
	metricSlowNodes     = "cann_train_slow_nodes"               // gauge: nodes computing slow_node_factor× their peers' time, slow_node_chunks chunks in a row
	metricRunActive     = "cann_train_run_active"               // gauge: 1 while the run runs, 0 once it ended (its other series stay, at their last values)
)

// MetricHelp is each metric's one-line description, its HELP line in the
// Prometheus output: the SDK's client.MetricsHandler creates instruments
// by name alone, so workers.ServeMetrics gives them these with a view.
func MetricHelp() map[string]string {
	return map[string]string{
		metricStep:          "Global step of the run after its last chunk.",
		metricSamplesPerSec: "Training throughput of the run's last chunk, in samples per second.",
		metricCarbonGrams:   "Grams of CO2-equivalent emitted by the run's chunks priced so far.",
		metricEnergyKWh:     "Energy in kWh used by the run's chunks priced so far.",
		metricBudgetUsed:    "Share of the run's carbon budget used so far (grams over budget_g).",
		metricBudgetAlerts:  "Carbon budget alerts of the run, by level (alert, exceeded): at most one each.",
		metricGreenWaits:    "Waits of the run for a green (low-carbon) window.",
		metricGlobalBatch:   "Global batch size the run's batch controller has in force.",
		metricCkptRefused:   "Checkpoints of the run that its bucket refused.",
		metricStorageHeld:   "1 while the run holds for its checkpoint bucket, else 0.",
		metricSlowNodes:     "Nodes of the run computing slow_node_factor times their peers' time slow_node_chunks chunks in a row.",
		metricRunActive:     "1 while the run runs, 0 once it ended (completed, failed or cancelled): its other series keep their last values.",
	}
}

// metrics is the workflow's metrics handler, tagged with the run.
func (r *run) metrics(ctx workflow.Context) client.MetricsHandler {
	return workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"run": r.st.Status.RunID})
}
