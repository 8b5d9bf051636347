package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/otelkey"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sumInt(m metricdata.Metrics) int64 {
	var n int64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			n += p.Value
		}
	}
	return n
}

func TestTelemetry(t *testing.T) {
	e := newEnv(t)
	good := startBackend(t, e.writer, "api", 100)
	bad := startBackend(t, e.writer, "api", 100)
	bad.status.Store(503)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())

	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, MaxEjectedPercent: 50})
	c := newClient(t, e.reader, middleware.WithTracerProvider(tp), middleware.WithMeterProvider(mp), middleware.WithQuarantine(q),
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	for i := 0; i < 40; i++ {
		if err := c.Do(context.Background(), "api", get); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// Registry outage: calls go on from the stale cache, and the
	// staleness age is reported.
	e.link.SetReachable(false)
	deadline := time.Now().Add(3 * time.Second)
	for s, _ := c.Snapshot("api"); !s.Stale; s, _ = c.Snapshot("api") {
		if time.Now().After(deadline) {
			t.Fatal("outage not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // some staleness age to measure
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}

	m := collect(t, reader)
	if n := sumInt(m["roster.client.picks"]); n < 41 {
		t.Errorf("picks = %d, want ≥ 41 (one per attempt)", n)
	}
	if n := sumInt(m["roster.client.failures"]); n < 2 {
		t.Errorf("failures = %d, want ≥ 2 (the 503s)", n)
	}
	if n := sumInt(m["roster.client.retries"]); n < 2 {
		t.Errorf("retries = %d, want ≥ 2", n)
	}
	if n := sumInt(m["roster.quarantine.ejected"]); n != 1 {
		t.Errorf("quarantined instances = %d, want 1", n)
	}
	if n := sumInt(m["roster.discovery.snapshot.updates"]); n < 1 {
		t.Errorf("snapshot updates = %d, want ≥ 1", n)
	}
	hits, misses := int64(0), int64(0)
	if d, ok := m["roster.discovery.cache.requests"].Data.(metricdata.Sum[int64]); ok {
		for _, p := range d.DataPoints {
			if v, _ := p.Attributes.Value(otelkey.CacheHit); v.AsBool() {
				hits += p.Value
			} else {
				misses += p.Value
			}
		}
	}
	if misses != 1 || hits != 40 {
		t.Errorf("cache requests: %d hits, %d misses; want 40 and 1", hits, misses)
	}
	if h, ok := m["roster.discovery.lookup.duration"].Data.(metricdata.Histogram[float64]); !ok || len(h.DataPoints) == 0 || h.DataPoints[0].Count != 1 {
		t.Errorf("lookup duration histogram = %+v, want one discovery query", m["roster.discovery.lookup.duration"].Data)
	}
	if g, ok := m["roster.discovery.staleness"].Data.(metricdata.Gauge[float64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value <= 0 {
		t.Errorf("staleness gauge = %+v, want a positive age while stale", m["roster.discovery.staleness"].Data)
	}

	var calls, attempts, retried, staleAttempts int
	for _, s := range spans.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		switch s.Name() {
		case "roster.call":
			calls++
			if attrs["roster.service"] != "api" {
				t.Errorf("call span attributes %v", attrs)
			}
		case "roster.attempt":
			attempts++
			if attrs["roster.instance.id"] == "" || attrs["server.address"] == "" || attrs["roster.attempt"] == "" {
				t.Errorf("attempt span lacks instance attributes: %v", attrs)
			}
			if attrs["roster.retry.reason"] != "" {
				retried++
				if attrs["roster.attempt"] == "1" {
					t.Errorf("first attempt carries a retry reason: %v", attrs)
				}
			}
			if attrs["roster.stale"] == "true" {
				staleAttempts++
			}
		}
	}
	if calls != 41 || attempts < 42 || retried < 1 || staleAttempts != 1 {
		t.Errorf("spans: %d calls, %d attempts, %d retried, %d stale; want 41, ≥42, ≥1, 1", calls, attempts, retried, staleAttempts)
	}
	_ = good
}

func TestRegistryObserver(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())

	e := newEnv(t)
	reg := registry.New(memDriver(e), registry.WithObserver(middleware.RegistryObserver(tp, mp)), registry.WithResyncInterval(50*time.Millisecond))
	defer reg.Close()
	ctx := context.Background()
	l, err := reg.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Lookup(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	w, _ := reg.Watch(ctx, "api")
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !hasSpan(spans, "roster.watch.resync") {
		if time.Now().After(deadline) {
			t.Fatal("no resync span")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Deregister(ctx)
	m := collect(t, reader)
	if sumInt(m["roster.registry.lookups"]) != 1 || sumInt(m["roster.registry.watch.snapshots"]) < 1 {
		t.Errorf("registry observer metrics: %v", m)
	}
	if !hasSpan(spans, "roster.lease.state") {
		t.Error("no lease state span")
	}
}

// TestMetricNamesHaveOneWriter: a Client and a RegistryObserver on the
// same Registry write disjoint metric names, so that with both installed
// on one provider no count is doubled and no name means two things.
func TestMetricNamesHaveOneWriter(t *testing.T) {
	clientReader, observerReader := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	clientMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(clientReader))
	observerMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(observerReader))
	defer clientMP.Shutdown(context.Background())
	defer observerMP.Shutdown(context.Background())

	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	reg := registry.New(memDriver(e), registry.WithObserver(middleware.RegistryObserver(nil, observerMP)))
	defer reg.Close()
	ctx := context.Background()
	if _, err := reg.Lookup(ctx, "api"); err != nil { // a backend query
		t.Fatal(err)
	}
	c := newClient(t, reg, middleware.WithMeterProvider(clientMP))
	for range 5 {
		if err := c.Do(ctx, "api", get); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Lookup(ctx, "api"); err != nil { // from the client's watch
		t.Fatal(err)
	}
	client, observer := collect(t, clientReader), collect(t, observerReader)
	// The registry reports a watch snapshot to its observer from the watch
	// goroutine, which may run after the client has already used it.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, ok := observer["roster.registry.watch.snapshots"]; ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
		observer = collect(t, observerReader)
	}
	for _, want := range []string{"roster.discovery.cache.requests", "roster.discovery.lookup.duration", "roster.discovery.snapshot.updates", "roster.client.picks"} {
		if _, ok := client[want]; !ok {
			t.Errorf("the client did not write %s (it wrote %v)", want, keys(client))
		}
	}
	for _, want := range []string{"roster.registry.lookups", "roster.registry.query.duration", "roster.registry.watch.snapshots"} {
		if _, ok := observer[want]; !ok {
			t.Errorf("the registry observer did not write %s (it wrote %v)", want, keys(observer))
		}
	}
	for name := range client {
		if _, ok := observer[name]; ok {
			t.Errorf("%s is written by both the Client and the RegistryObserver", name)
		}
	}
}

func keys(m map[string]metricdata.Metrics) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

func hasSpan(r *tracetest.SpanRecorder, name string) bool {
	for _, s := range r.Ended() {
		if s.Name() == name {
			return true
		}
	}
	return false
}
