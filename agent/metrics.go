package agent

import (
	"context"
	"errors"
	"net/http"

	"github.com/roster-go/roster/internal/otelkey"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metrics is the agent's OpenTelemetry meter provider, read by a
// Prometheus exporter into a registry of the agent's own (not the
// process-global one), served at /metrics. The middleware.Client
// instruments record discovery (lookup latency, cache requests, snapshot
// updates) and per-instance picks and failures; the agent adds the
// quarantine state per instance and the tokens waiting for a report.
type metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	reg      metric.Registration
}

func newMetrics() (*metrics, error) {
	promReg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(promReg))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	return &metrics{provider: mp, handler: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{})}, nil
}

// observe registers the agent's observable instruments.
func (m *metrics) observe(a *Agent) {
	meter := m.provider.Meter(otelkey.Scope)
	quarantined, _ := meter.Int64ObservableGauge("roster.agent.instance.quarantined",
		metric.WithDescription("1 while an instance is held out by the agent's local quarantine, else 0."))
	tokens, _ := meter.Int64ObservableGauge("roster.agent.tokens",
		metric.WithDescription("Picks waiting for their report."))
	m.reg, _ = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(tokens, int64(a.tokens.len()))
		for _, v := range a.followed() {
			cur, _ := v.current()
			ejected := a.quarantined(cur.Service)
			for _, in := range cur.Instances {
				n := int64(0)
				if ejected[in.ID] {
					n = 1
				}
				o.ObserveInt64(quarantined, n, metric.WithAttributes(otelkey.Service.String(cur.Service), otelkey.InstanceID.String(in.ID)))
			}
		}
		return nil
	}, quarantined, tokens)
}

func (m *metrics) close() error {
	var errs []error
	if m.reg != nil {
		errs = append(errs, m.reg.Unregister())
	}
	return errors.Join(append(errs, m.provider.Shutdown(context.Background()))...)
}
