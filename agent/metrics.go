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
// updates), calls by outcome with their latency, picks and failures by
// zone; the agent adds its instances by zone and quarantine state and
// the tokens waiting for a report. No series is keyed by instance ID,
// and the exporter adds no otel_scope_* labels.
type metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	reg      metric.Registration
}

func newMetrics() (*metrics, error) {
	promReg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(promReg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	return &metrics{provider: mp, handler: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{})}, nil
}

// observe registers the agent's observable instruments.
func (m *metrics) observe(a *Agent) {
	meter := m.provider.Meter(otelkey.Scope)
	instances, _ := meter.Int64ObservableGauge("roster.agent.instances",
		metric.WithDescription("Instances of a followed service, by roster.zone and roster.ejected (held out by the local quarantine)."))
	tokens, _ := meter.Int64ObservableGauge("roster.agent.tokens",
		metric.WithDescription("Picks waiting for their report."))
	m.reg, _ = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(tokens, int64(a.tokens.len()))
		for _, v := range a.followed() {
			cur, _ := v.current()
			ejected := a.quarantined(cur.Service)
			n := map[zoneState]int64{}
			for _, in := range cur.Instances {
				n[zoneState{in.Zone, ejected[in.ID]}]++
			}
			for k, c := range n {
				o.ObserveInt64(instances, c, metric.WithAttributes(otelkey.Service.String(cur.Service),
					otelkey.Zone.String(k.zone), otelkey.Ejected.Bool(k.ejected)))
			}
		}
		return nil
	}, instances, tokens)
}

// zoneState is one series of roster.agent.instances.
type zoneState struct {
	zone    string
	ejected bool
}

func (m *metrics) close() error {
	var errs []error
	if m.reg != nil {
		errs = append(errs, m.reg.Unregister())
	}
	return errors.Join(append(errs, m.provider.Shutdown(context.Background()))...)
}
