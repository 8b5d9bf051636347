package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/otelkey"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/roster-go/roster/backends/memory"
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

// TestCallMetrics: every call is counted once by service and outcome,
// with its duration in explicit buckets of 0.5 ms to 10 s; picks are by
// zone; no series carries an instance ID.
func TestCallMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	ctx := context.Background()
	for i, zone := range []string{"a", "b"} {
		for _, svc := range []string{"api", "flaky"} {
			in := registry.Instance{Service: svc, Zone: zone, Address: fmt.Sprintf("10.0.0.%d:80", i+1)}
			if _, err := reg.Register(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := newClient(t, reg, middleware.WithMeterProvider(mp), middleware.WithTracerProvider(tracenoop.NewTracerProvider()),
		middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 2})))
	slow := func(context.Context, registry.Instance) error { time.Sleep(3 * time.Millisecond); return nil }
	business := func(context.Context, registry.Instance) error { return middleware.BusinessError(errDown) }
	fatal := func(context.Context, registry.Instance) error { return middleware.FatalError(errDown) }
	down := func(context.Context, registry.Instance) error { return errDown }
	for range 4 {
		_ = c.Do(ctx, "api", noop)
	}
	_ = c.Do(ctx, "api", slow)
	for range 2 {
		_ = c.Do(ctx, "api", business)
	}
	for range 3 {
		_ = c.Do(ctx, "api", down)
	}
	_ = c.Do(ctx, "api", fatal)
	cctx, cancel := context.WithCancel(ctx)
	_ = c.Do(cctx, "api", func(context.Context, registry.Instance) error { cancel(); return cctx.Err() })
	if err := c.Do(ctx, "nobody", noop); err == nil {
		t.Fatal("a call to a service with no instances succeeded")
	}
	// The throttle of a failing service: count what it rejects.
	tc := newClient(t, reg, middleware.WithMeterProvider(mp),
		middleware.WithMiddleware(middleware.Throttle(middleware.ThrottleConfig{MinRequests: 1})))
	throttled := 0
	for range 100 {
		if errors.Is(tc.Do(ctx, "flaky", down), middleware.ErrThrottled) {
			throttled++
		}
	}

	m := collect(t, reader)
	calls := map[string]int64{}
	if d, ok := m["roster.client.calls"].Data.(metricdata.Sum[int64]); ok {
		for _, p := range d.DataPoints {
			svc, _ := p.Attributes.Value(otelkey.Service)
			out, _ := p.Attributes.Value(otelkey.Outcome)
			calls[svc.AsString()+" "+out.AsString()] += p.Value
		}
	}
	want := map[string]int64{"api success": 5, "api business_error": 2, "api error": 3, "api fatal_error": 1,
		"api aborted": 1, "nobody unavailable": 1, "flaky throttled": int64(throttled), "flaky error": int64(100 - throttled)}
	if throttled == 0 {
		t.Error("the throttle rejected no call")
	}
	for k, n := range want {
		if calls[k] != n {
			t.Errorf("calls{%s} = %d, want %d (all: %v)", k, calls[k], n, calls)
		}
	}
	if len(calls) != len(want) {
		t.Errorf("calls = %v, want exactly %v", calls, want)
	}

	h, ok := m["roster.client.call.duration"].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("roster.client.call.duration = %+v", m["roster.client.call.duration"])
	}
	bounds := []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	for _, p := range h.DataPoints {
		if !slices.Equal(p.Bounds, bounds) {
			t.Fatalf("call duration bounds = %v, want %v", p.Bounds, bounds)
		}
		svc, _ := p.Attributes.Value(otelkey.Service)
		out, _ := p.Attributes.Value(otelkey.Outcome)
		if k := svc.AsString() + " " + out.AsString(); int64(p.Count) != want[k] {
			t.Errorf("call duration{%s} counts %d calls, want %d", k, p.Count, want[k])
		}
		if k := svc.AsString() + " " + out.AsString(); k == "api success" {
			// The 3 ms call is past the first buckets and well within 1 s
			// (with OpenTelemetry's default bounds, in seconds, every call
			// would be in the bucket up to 5 s). The other calls are fast,
			// but on a loaded machine one may be past 2.5 ms too: count at
			// least one, and none past 1 s.
			slow, late := uint64(0), uint64(0)
			for i, b := range bounds {
				if b >= 0.0025 && b <= 1 {
					slow += p.BucketCounts[i]
				}
				if b > 1 {
					late += p.BucketCounts[i]
				}
			}
			late += p.BucketCounts[len(bounds)]
			if slow == 0 || late != 0 {
				t.Errorf("the 3 ms call is not in a bucket between 2.5 ms and 1 s: %v", p.BucketCounts)
			}
		}
	}

	zones := map[string]int64{}
	if d, ok := m["roster.client.picks"].Data.(metricdata.Sum[int64]); ok {
		for _, p := range d.DataPoints {
			z, _ := p.Attributes.Value(otelkey.Zone)
			zones[z.AsString()] += p.Value
		}
	}
	if zones["a"] == 0 || zones["b"] == 0 || len(zones) != 2 {
		t.Errorf("picks by zone = %v, want both zones a and b", zones)
	}
	for name, met := range m {
		for _, set := range attributeSets(met) {
			if set.HasValue(otelkey.InstanceID) {
				t.Errorf("%s has a series by instance ID: %v", name, set.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
	for _, name := range []string{"roster.discovery.lookup.duration"} {
		if h, ok := m[name].Data.(metricdata.Histogram[float64]); !ok || len(h.DataPoints) == 0 || !slices.Equal(h.DataPoints[0].Bounds, bounds) {
			t.Errorf("%s bounds are not the explicit ones: %+v", name, m[name].Data)
		}
	}
}

// attributeSets returns the label sets of a metric's points.
func attributeSets(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

// TestInstanceMetrics: WithInstanceMetrics adds series by instance ID,
// and those of an instance end when it leaves the service.
func TestInstanceMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	ctx := context.Background()
	var leases []*registry.Lease
	for i, id := range []string{"a", "b"} {
		l, err := reg.Register(ctx, registry.Instance{ID: id, Service: "api", Zone: "z", Address: fmt.Sprintf("10.0.0.%d:80", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	c := newClient(t, reg, middleware.WithMeterProvider(mp), middleware.WithInstanceMetrics(),
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	for range 4 {
		_ = c.Do(ctx, "api", noop)
	}
	_ = c.Do(ctx, "api", func(context.Context, registry.Instance) error { return middleware.BusinessError(errDown) })

	byID := func(name string) map[string]int64 {
		out := map[string]int64{}
		if d, ok := collect(t, reader)[name].Data.(metricdata.Sum[int64]); ok {
			for _, p := range d.DataPoints {
				id, _ := p.Attributes.Value(otelkey.InstanceID)
				out[id.AsString()] += p.Value
			}
		}
		return out
	}
	if picks := byID("roster.client.instance.picks"); picks["a"]+picks["b"] != 5 || picks["a"] == 0 || picks["b"] == 0 {
		t.Errorf("picks by instance = %v, want 5 over a and b", picks)
	}
	if fails := byID("roster.client.instance.failures"); fails["a"]+fails["b"] != 1 {
		t.Errorf("failures by instance = %v, want 1", fails)
	}
	if err := leases[1].Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		picks := byID("roster.client.instance.picks")
		if _, ok := picks["b"]; !ok && picks["a"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the series of a deregistered instance stayed: %v", picks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
