package workers

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/workflows"
)

// Every cann_train_* metric has its one-line description as its HELP
// line (the SDK's metrics handler creates instruments by name alone: the
// meter provider's views add them), under its own name.
func TestMetricsHelp(t *testing.T) {
	m, err := ServeMetrics("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	help := workflows.MetricHelp()
	h := m.Handler.WithTags(map[string]string{"run": "run/a"})
	for _, tc := range []struct {
		name    string
		counter bool
	}{
		{"cann_train_step", false},
		{"cann_train_samples_per_sec", false},
		{"cann_train_carbon_grams", false},
		{"cann_train_energy_kwh", false},
		{"cann_train_carbon_budget_used_ratio", false},
		{"cann_train_carbon_budget_alerts", true},
		{"cann_train_green_waits", true},
		{"cann_train_global_batch", false},
		{"cann_train_checkpoint_refusals", true},
		{"cann_train_storage_held", false},
		{"cann_train_slow_nodes", false},
		{"cann_train_run_active", false},
	} {
		if d := help[tc.name]; d == "" || strings.ContainsAny(d, "\n\r") {
			t.Errorf("%s: description %q: want one line", tc.name, d)
		}
		if tc.counter {
			h.Counter(tc.name).Inc(1)
		} else {
			h.Gauge(tc.name).Update(2)
		}
	}
	if len(help) != 12 {
		t.Errorf("%d descriptions, want the 12 metrics above (a new one belongs in the table)", len(help))
	}
	resp, err := http.Get(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for name, d := range help {
		prom := name
		if strings.Contains(text, "# TYPE "+name+"_total counter") {
			prom += "_total"
		}
		if !strings.Contains(text, "# HELP "+prom+" "+d+"\n") || !strings.Contains(text, "\n"+prom+`{run="run/a"`) {
			t.Errorf("%s: want HELP %q and its sample:\n%s", prom, d, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "#" && f[1] == "HELP" && strings.HasPrefix(f[2], "cann_train_") {
			t.Errorf("empty HELP line %q", line)
		}
	}
}
