package middleware

import (
	"context"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/otelkey"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/roster-go/roster/registry"
)

// telemetry holds the instruments. Without a provider installed the OTel
// globals are no-ops, and so is all of this but for a few interface calls.
type telemetry struct {
	tracer trace.Tracer

	lookupDur   metric.Float64Histogram
	cacheReqs   metric.Int64Counter
	snapUpdates metric.Int64Counter
	callDur     metric.Float64Histogram
	calls       metric.Int64Counter
	picks       metric.Int64Counter
	failures    metric.Int64Counter
	ejections   metric.Int64UpDownCounter
	retries     metric.Int64Counter
	exhausted   metric.Int64Counter
	staleness   metric.Float64ObservableGauge

	// Adaptive protection: throttle, outlier ejection.
	rejections metric.Int64Counter
	ejectedBy  metric.Int64Counter

	inst *instMetrics // nil without WithInstanceMetrics

	mu         sync.Mutex
	staleSince map[string]int64 // service → monoNow when its snapshot went stale; 0 fresh
	reg        metric.Registration

	// The attributes of the metrics recorded on every call, built once
	// per label set: building a set allocates each time.
	pickOpts  optCache[pickKey]
	failOpts  optCache[failKey]
	callOpts  optCache[callKey]
	cacheOpts optCache[cacheKey]
	svcOpts   optCache[string]
	whyOpts   optCache[reasonKey] // retries and rejections
}

// The label sets of the hot metrics. None holds an instance ID: IDs are
// new at every restart, so series keyed by them grow with every deploy.
type (
	pickKey struct{ service, zone string }
	failKey struct {
		service, zone string
		out           callOutcome
	}
	callKey struct {
		service, endpoint string
		out               callOutcome
	}
	cacheKey struct {
		service string
		hit     bool
	}
	reasonKey struct {
		key             attribute.Key
		service, reason string
	}
)

// service returns the options of the label set {roster.service}.
func (t *telemetry) service(service string) opts {
	return t.svcOpts.get(service, func() []attribute.KeyValue {
		return []attribute.KeyValue{otelkey.Service.String(service)}
	})
}

// reason returns the options of {roster.service, key: reason}.
func (t *telemetry) reason(key attribute.Key, service, reason string) opts {
	return t.whyOpts.get(reasonKey{key, service, reason}, func() []attribute.KeyValue {
		return []attribute.KeyValue{otelkey.Service.String(service), key.String(reason)}
	})
}

// callOutcome is the roster.outcome label of the call and failure metrics.
// Its values are a fixed set, so the series stay bounded. The set is
// documented in docs/middleware.md.
type callOutcome string

// The outcomes of a call. An attempt's failure is one of the middle four.
const (
	outSuccess       callOutcome = "success"        // the instance served the call
	outBusinessError callOutcome = "business_error" // Business: the application said no
	outError         callOutcome = "error"          // Retryable: the instance failed
	outFatalError    callOutcome = "fatal_error"    // Fatal: failed, not worth a retry
	outAborted       callOutcome = "aborted"        // Abort: the caller gave up
	outThrottled     callOutcome = "throttled"      // rejected locally, never sent
	outUnavailable   callOutcome = "unavailable"    // no instance to call (none, stale, discovery failed)
)

// outcomeOf maps an attempt's class to its outcome.
func outcomeOf(c Class) callOutcome {
	switch c {
	case Success:
		return outSuccess
	case Business:
		return outBusinessError
	case Retryable:
		return outError
	case Fatal:
		return outFatalError
	}
	return outAborted
}

// durationBuckets are the bounds, in seconds, of Roster's duration
// histograms: 0.5 ms to 10 s. OpenTelemetry's default bounds (0 to
// 10,000) suit milliseconds and put every call in the first few buckets.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// optCacheMax bounds an optCache: the keys are bounded by the services
// a client follows, but a program may call ever new names.
const optCacheMax = 4096

// opts is one label set as the options of Add and Record.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// optCache memoises measurement options by key.
type optCache[K comparable] struct {
	mu sync.RWMutex
	m  map[K]opts
}

// get returns the options of k, built by attrs on the first call.
func (c *optCache[K]) get(k K, attrs func() []attribute.KeyValue) opts {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs()...))
	o = opts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= optCacheMax {
		c.m = make(map[K]opts)
	}
	c.m[k] = o
	c.mu.Unlock()
	return o
}

// instrumentation returns Roster's tracer and meter from the providers,
// the OpenTelemetry globals when nil. An explicit no-op tracer provider
// means "no tracing": the tracer is nil, so that spans are skipped
// entirely, including the context they would be stored in.
func instrumentation(tp trace.TracerProvider, mp metric.MeterProvider) (trace.Tracer, metric.Meter) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	var tracer trace.Tracer
	if _, off := tp.(tracenoop.TracerProvider); !off {
		tracer = tp.Tracer(otelkey.Scope)
	}
	return tracer, mp.Meter(otelkey.Scope)
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, perInstance bool) *telemetry {
	tracer, m := instrumentation(tp, mp)
	t := &telemetry{tracer: tracer, staleSince: map[string]int64{}}
	buckets := metric.WithExplicitBucketBoundaries(durationBuckets...)
	// Instrument errors only happen with invalid names or units, which are
	// constants here; the returned instruments are no-ops then.
	t.lookupDur, _ = m.Float64Histogram("roster.discovery.lookup.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time a Client waited for the first instance list of a service (discovery query latency)."))
	t.cacheReqs, _ = m.Int64Counter("roster.discovery.cache.requests",
		metric.WithDescription("A Client's instance-list reads, by roster.cache.hit: served from its snapshot cache or waiting for it (cache hit rate)."))
	t.snapUpdates, _ = m.Int64Counter("roster.discovery.snapshot.updates",
		metric.WithDescription("Snapshots of a service a Client applied (snapshot update rate)."))
	t.callDur, _ = m.Float64Histogram("roster.client.call.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time a call took, retries included, by roster.service and roster.outcome."))
	t.calls, _ = m.Int64Counter("roster.client.calls",
		metric.WithDescription("Calls, by roster.service and roster.outcome (success, business_error, error, fatal_error, aborted, throttled, unavailable)."))
	t.picks, _ = m.Int64Counter("roster.client.picks", metric.WithDescription("Instances picked for an attempt, by roster.service and roster.zone."))
	t.failures, _ = m.Int64Counter("roster.client.failures",
		metric.WithDescription("Failed attempts, by roster.service, roster.zone and roster.outcome."))
	t.ejections, _ = m.Int64UpDownCounter("roster.quarantine.ejected", metric.WithDescription("Instances currently quarantined."))
	t.retries, _ = m.Int64Counter("roster.client.retries", metric.WithDescription("Retry attempts, by reason."))
	t.exhausted, _ = m.Int64Counter("roster.client.retry_budget.exhausted", metric.WithDescription("Retries refused by the retry budget."))
	t.staleness, _ = m.Float64ObservableGauge("roster.discovery.staleness", metric.WithUnit("s"),
		metric.WithDescription("Age of the stale snapshot a service is served from while its registry fails (0 when fresh)."))
	t.reg, _ = m.RegisterCallback(t.observeStaleness, t.staleness)
	if perInstance {
		t.inst = newInstMetrics(m)
	}
	t.rejections, _ = m.Int64Counter("roster.client.rejections",
		metric.WithDescription("Calls rejected locally without being sent, by roster.rejection.reason (throttled)."))
	t.ejectedBy, _ = m.Int64Counter("roster.quarantine.ejections",
		metric.WithDescription("Instances ejected, by roster.ejection.reason (consecutive_failures, success_rate)."))
	return t
}

func (t *telemetry) observeStaleness(_ context.Context, o metric.Observer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := monoNow()
	for svc, since := range t.staleSince {
		age := 0.0
		if since != 0 {
			age = time.Duration(now - since).Seconds()
		}
		o.ObserveFloat64(t.staleness, age, metric.WithAttributes(otelkey.Service.String(svc)))
	}
	return nil
}

// setStale records when a service went stale, a monoNow reading (0:
// fresh again).
func (t *telemetry) setStale(service string, since int64) {
	t.mu.Lock()
	t.staleSince[service] = since
	t.mu.Unlock()
}

// forget drops a service no longer followed from the staleness gauge
// and the per-instance series.
func (t *telemetry) forget(service string) {
	t.mu.Lock()
	delete(t.staleSince, service)
	t.mu.Unlock()
	if t.inst != nil {
		t.inst.prune(service, nil)
	}
}

// instances ends the per-instance series of the instances of a service
// that left it.
func (t *telemetry) instances(s registry.Snapshot) {
	if t.inst != nil && !s.Stale {
		t.inst.prune(s.Service, s.Instances)
	}
}

func (t *telemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
	if t.inst != nil {
		t.inst.close()
	}
}

// RegistryObserver returns a registry.Observer that records the backend
// side of discovery with OpenTelemetry: Lookup calls and watch-cache hits,
// backend query latency, snapshots delivered by the Registry's watches,
// lease state changes (span events) and resyncs (spans). Install it with
// registry.WithObserver. Nil providers mean the globals.
//
// Its metrics are named roster.registry.*, apart from the Client's
// roster.discovery.*: the two count different things (a Registry's Lookup
// calls and watch deliveries, a Client's reads of its own snapshot cache),
// and with both installed neither is counted twice.
func RegistryObserver(tp trace.TracerProvider, mp metric.MeterProvider) registry.Observer {
	tracer, m := instrumentation(tp, mp)
	o := &registryObserver{tracer: tracer}
	o.queryDur, _ = m.Float64Histogram("roster.registry.query.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...),
		metric.WithDescription("Time the registry backend took to answer a list query: Lookup cache misses and watch resyncs."))
	o.lookups, _ = m.Int64Counter("roster.registry.lookups",
		metric.WithDescription("Registry.Lookup calls, by roster.cache.hit: answered from a running watch or by the backend."))
	o.snapshots, _ = m.Int64Counter("roster.registry.watch.snapshots",
		metric.WithDescription("Snapshots of a service delivered by the Registry's shared watch."))
	return o
}

// registryObserver's instruments are its own (see RegistryObserver).
type registryObserver struct {
	tracer    trace.Tracer
	queryDur  metric.Float64Histogram
	lookups   metric.Int64Counter
	snapshots metric.Int64Counter
}

func (o *registryObserver) Lookup(service string, hit bool, d time.Duration, err error) {
	attrs := metric.WithAttributes(otelkey.Service.String(service), otelkey.CacheHit.Bool(hit))
	o.lookups.Add(context.Background(), 1, attrs)
	if !hit {
		o.queryDur.Record(context.Background(), d.Seconds(), metric.WithAttributes(otelkey.Service.String(service)))
	}
}

func (o *registryObserver) Snapshot(s registry.Snapshot) {
	o.snapshots.Add(context.Background(), 1, metric.WithAttributes(otelkey.Service.String(s.Service)))
}

func (o *registryObserver) LeaseState(in registry.Instance, s registry.LeaseState, err error) {
	if o.tracer == nil {
		return
	}
	_, span := o.tracer.Start(context.Background(), "roster.lease.state",
		trace.WithAttributes(otelkey.Service.String(in.Service), otelkey.InstanceID.String(in.ID), attribute.String("roster.lease.state", s.String())))
	if err != nil {
		span.RecordError(err)
	}
	span.End()
}

func (o *registryObserver) Resync(service string, start time.Time, d time.Duration, err error) {
	if o.tracer != nil {
		_, span := o.tracer.Start(context.Background(), "roster.watch.resync",
			trace.WithTimestamp(start), trace.WithAttributes(otelkey.Service.String(service)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(start.Add(d)))
	}
	o.queryDur.Record(context.Background(), d.Seconds(), metric.WithAttributes(otelkey.Service.String(service)))
}

// The helpers below are nil-safe and skip all work when no SDK listens.

func (t *telemetry) budgetExhausted(ctx context.Context, service string) {
	if t != nil && t.exhausted.Enabled(ctx) {
		t.exhausted.Add(ctx, 1, t.service(service).add...)
	}
}

func (t *telemetry) retry(ctx context.Context, service, reason string) {
	if t != nil && t.retries.Enabled(ctx) {
		t.retries.Add(ctx, 1, t.reason(otelkey.Reason, service, reason).add...)
	}
}

func (t *telemetry) pick(ctx context.Context, service, zone, id string) {
	if t != nil && t.inst != nil {
		t.inst.pick(service, id, zone)
	}
	if t != nil && t.picks.Enabled(ctx) {
		k := pickKey{service, zone}
		t.picks.Add(ctx, 1, t.pickOpts.get(k, func() []attribute.KeyValue {
			return []attribute.KeyValue{otelkey.Service.String(k.service), otelkey.Zone.String(k.zone)}
		}).add...)
	}
}

func (t *telemetry) failure(ctx context.Context, service, zone, id string, c Class) {
	if t != nil && t.inst != nil {
		t.inst.failure(service, id, zone, c)
	}
	if t != nil && t.failures.Enabled(ctx) {
		k := failKey{service, zone, outcomeOf(c)}
		t.failures.Add(ctx, 1, t.failOpts.get(k, func() []attribute.KeyValue {
			return []attribute.KeyValue{otelkey.Service.String(k.service), otelkey.Zone.String(k.zone), otelkey.Outcome.String(string(k.out))}
		}).add...)
	}
}

// callsOn reports whether the call metrics are recorded, so that a
// caller reads the clock for them only then.
func (t *telemetry) callsOn(ctx context.Context) bool {
	return t != nil && (t.calls.Enabled(ctx) || t.callDur.Enabled(ctx))
}

// call records a whole call: its outcome and how long it took. The
// endpoint, "" for the primary, is a label only when named.
func (t *telemetry) call(ctx context.Context, service, endpoint string, o callOutcome, d time.Duration) {
	if !t.callsOn(ctx) {
		return
	}
	k := callKey{service, endpoint, o}
	op := t.callOpts.get(k, func() []attribute.KeyValue {
		kv := []attribute.KeyValue{otelkey.Service.String(k.service), otelkey.Outcome.String(string(k.out))}
		if k.endpoint != "" {
			kv = append(kv, otelkey.Endpoint.String(k.endpoint))
		}
		return kv
	})
	t.calls.Add(ctx, 1, op.add...)
	t.callDur.Record(ctx, d.Seconds(), op.rec...)
}

func (t *telemetry) ejected(service, id string, ejected bool) {
	if t == nil {
		return
	}
	ctx := context.Background()
	if t.ejections.Enabled(ctx) {
		n := int64(1)
		if !ejected {
			n = -1
		}
		t.ejections.Add(ctx, n, metric.WithAttributes(otelkey.Service.String(service)))
	}
}

func (t *telemetry) cacheRead(ctx context.Context, service string, hit bool) {
	if t != nil && t.cacheReqs.Enabled(ctx) {
		t.cacheReqs.Add(ctx, 1, t.cacheOpts.get(cacheKey{service, hit}, func() []attribute.KeyValue {
			return []attribute.KeyValue{otelkey.Service.String(service), otelkey.CacheHit.Bool(hit)}
		}).add...)
	}
}

func (t *telemetry) lookup(ctx context.Context, service string, d time.Duration) {
	if t != nil && t.lookupDur.Enabled(ctx) {
		t.lookupDur.Record(ctx, d.Seconds(), t.service(service).rec...)
	}
}

func (t *telemetry) snapshot(ctx context.Context, service string) {
	if t != nil && t.snapUpdates.Enabled(ctx) {
		t.snapUpdates.Add(ctx, 1, t.service(service).add...)
	}
}

func (t *telemetry) rejected(ctx context.Context, service, reason string) {
	if t != nil && t.rejections.Enabled(ctx) {
		t.rejections.Add(ctx, 1, t.reason(otelkey.RejectionReason, service, reason).add...)
	}
}

func (t *telemetry) ejection(service, reason string) {
	if t != nil && t.ejectedBy.Enabled(context.Background()) {
		t.ejectedBy.Add(context.Background(), 1, metric.WithAttributes(otelkey.Service.String(service), otelkey.EjectionReason.String(reason)))
	}
}
