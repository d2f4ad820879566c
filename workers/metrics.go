package workers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/workflows"
)

// Metrics serves a worker's metrics for Prometheus to scrape: the Temporal
// SDK's own (temporal_workflow_task_*, temporal_activity_*, …) and those
// the workflows emit through workflow.GetMetricsHandler (cann_train_*:
// the step, the carbon figures and budget alerts, the batch in force).
// Each Metrics has its own registry; nothing is global.
type Metrics struct {
	// Handler goes into ClientOptions.MetricsHandler.
	Handler client.MetricsHandler
	// URL is where the metrics are served (http://host:port/metrics).
	URL string

	provider *sdkmetric.MeterProvider
	srv      *http.Server
	done     chan error
}

// ServeMetrics listens on addr (host:port; port 0 picks one) and serves
// /metrics until Close.
func ServeMetrics(addr string, log *zap.Logger) (*Metrics, error) {
	if log == nil {
		log = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(helpViews()...))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &Metrics{
		Handler: temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter:                provider.Meter("cann-train"),
			UseMonotonicCounters: true,
			OnError:              func(err error) { log.Warn("metrics", zap.Error(err)) },
		}),
		URL:      "http://" + ln.Addr().String() + "/metrics",
		provider: provider,
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan error, 1),
	}
	go func() { m.done <- m.srv.Serve(ln) }()
	log.Info("serving metrics", zap.String("url", m.URL))
	return m, nil
}

// helpViews give the workflows' cann_train_* instruments their
// descriptions (workflows.MetricHelp), Prometheus's HELP lines: the SDK's
// MetricsHandler creates every instrument with its name alone.
func helpViews() []sdkmetric.View {
	var views []sdkmetric.View
	for name, help := range workflows.MetricHelp() {
		views = append(views, sdkmetric.NewView(sdkmetric.Instrument{Name: name}, sdkmetric.Stream{Description: help}))
	}
	return views
}

// Close stops serving and flushes the meter provider.
func (m *Metrics) Close(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, m.provider.Shutdown(ctx))
}
