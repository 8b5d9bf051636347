package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/otelkey"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// ErrStale is returned when the registry has failed for longer than a
// maximum staleness set with WithMaxStaleness. It wraps
// registry.ErrUnavailable.
var ErrStale = fmt.Errorf("%w: cached instances older than the maximum staleness", registry.ErrUnavailable)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	selOpts      []selector.Option
	mw           []Middleware
	mwSet        bool
	classify     Classifier
	maxStale     time.Duration
	zeroProtect  time.Duration
	dir          string
	tp           trace.TracerProvider
	mp           metric.MeterProvider
	quarantine   *Quarantine
	firstTimeout time.Duration
	idle         time.Duration
	endpoint     string
	instMetrics  bool
	// policies are WithPolicy's, by service; notIdempotent is
	// WithIdempotent(false).
	policies      map[string]policy.Policy
	notIdempotent bool
	noStored      bool // WithStoredPolicies(false)
}

// WithSelector sets the selector options (strategy, filters) used for
// every service. The default strategy is the selector package's.
func WithSelector(opts ...selector.Option) Option {
	return func(c *clientConfig) { c.selOpts = append(c.selOpts, opts...) }
}

// WithMiddleware replaces the default chain (Throttle, Retry, then the
// client's Quarantine) with mw, the first outermost. To keep quarantine
// in a chain of your own, build it first and give it to the Client as
// well, so that picks and the ejection metrics use that one:
//
//	q := NewQuarantine(QuarantineConfig{})
//	c, err := NewClient(reg, WithQuarantine(q),
//		WithMiddleware(Throttle(ThrottleConfig{}), Retry(RetryConfig{MaxAttempts: 5}), q.Middleware()))
func WithMiddleware(mw ...Middleware) Option {
	return func(c *clientConfig) { c.mw, c.mwSet = mw, true }
}

// WithEndpoint sends the client's calls to the endpoint called name of
// each instance, such as "grpc" (default "", the primary Address). Only
// instances that serve the name are picked, by the rule of
// registry.Instance.Endpoint, and the Call gets the instance with that
// endpoint's address in Address. ForEndpoint changes it for one call.
func WithEndpoint(name string) Option { return func(c *clientConfig) { c.endpoint = name } }

type endpointCtx struct{}

// ForEndpoint returns a context whose calls go to the endpoint called
// name, in place of the client's (WithEndpoint).
func ForEndpoint(ctx context.Context, name string) context.Context {
	endpointsInContext.Store(true)
	return context.WithValue(ctx, endpointCtx{}, name)
}

// endpointsInContext is set once ForEndpoint has been called in the
// process: until then a call does not look for a name in its context.
var endpointsInContext atomic.Bool

// endpointOf returns the endpoint name of a call with ctx.
func (c *Client) endpointOf(ctx context.Context) string {
	if endpointsInContext.Load() {
		if name, ok := ctx.Value(endpointCtx{}).(string); ok {
			return name
		}
	}
	return c.cfg.endpoint
}

// WithClassifier replaces DefaultClassify.
func WithClassifier(f Classifier) Option { return func(c *clientConfig) { c.classify = f } }

// WithQuarantine replaces the default quarantine (QuarantineConfig{}).
func WithQuarantine(q *Quarantine) Option { return func(c *clientConfig) { c.quarantine = q } }

// WithMaxStaleness bounds how long the client keeps calling instances from
// a stale snapshot while the registry fails. Past it, calls fail with
// ErrStale. The default, 0 (or less), is no bound: an outage of the
// registry says nothing about the instances, and quarantine already
// steers calls away from those that fail. Staleness is measured on the
// process's monotonic clock, so a step of the wall clock does not move it.
func WithMaxStaleness(d time.Duration) Option { return func(c *clientConfig) { c.maxStale = d } }

// WithZeroProtection keeps serving the last non-empty instance list for up
// to d after a healthy registry reports that a service has no instances
// at all, in case that answer is an operator's mistake (default 0: an
// explicit empty answer is applied at once).
func WithZeroProtection(d time.Duration) Option { return func(c *clientConfig) { c.zeroProtect = d } }

// WithSnapshotDir persists each service's last good snapshot in dir, so a
// process that starts while the registry is down can still call its
// dependencies (served stale, with their age measured from the file).
func WithSnapshotDir(dir string) Option { return func(c *clientConfig) { c.dir = dir } }

// withFirstSnapshotTimeout bounds how long the first call to a service
// waits for the registry's answer when the caller's context has no
// deadline (default 10s; 0 or less: as long as the caller's context
// lasts). Tests reach it through export_test.go.
func withFirstSnapshotTimeout(d time.Duration) Option {
	return func(c *clientConfig) { c.firstTimeout = d }
}

// defaultServiceIdle is how long a service no call asked for stays
// followed. So a client that calls ever new names (an agent picking for
// its host's programs, say) follows only those in use.
const defaultServiceIdle = 10 * time.Minute

// withServiceIdle replaces defaultServiceIdle. With d 0 or less no
// sweep runs on its own: tests call Client.sweep (export_test.go).
func withServiceIdle(d time.Duration) Option { return func(c *clientConfig) { c.idle = d } }

// WithTracerProvider and WithMeterProvider set the OpenTelemetry providers
// (default: the global ones, no-ops until an SDK is installed).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *clientConfig) { c.tp = tp } }

// WithMeterProvider sets the OpenTelemetry meter provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *clientConfig) { c.mp = mp } }

// Client runs calls against services found in a registry, through a chain
// of middleware: by default retry on another instance, then local
// quarantine, then the pick (selector strategy) over a stale-aware cache
// of each service's instances. Safe for concurrent use.
type Client struct {
	reg   *registry.Registry
	cfg   clientConfig
	tel   *telemetry
	q     *Quarantine
	chain Handler
	pool  sync.Pool

	mu       sync.Mutex
	closed   bool
	services map[string]*service
	// policies are the services' prepared policies, under mu; pmu
	// serialises SetPolicy.
	policies map[string]*servicePolicy
	pmu      sync.Mutex
	// code holds the policies given in code (WithPolicy, SetPolicy),
	// which apply where no stored policy does; under pmu.
	code map[string]policy.Policy
	// stored follows the policies stored in the registry; nil when off.
	stored *storedPolicies

	// epoch counts idle sweeps; a call stamps its service with it, so
	// the hot path reads no clock. Guarded by mu.
	epoch     int64
	stopSweep chan struct{}
	swept     chan struct{}
}

// NewClient returns a Client that discovers services in reg. It does not
// own reg: close the Client before the Registry.
func NewClient(reg *registry.Registry, opts ...Option) (*Client, error) {
	cfg := clientConfig{firstTimeout: 10 * time.Second, idle: defaultServiceIdle}
	for _, o := range opts {
		o(&cfg)
	}
	// Fail now on a bad strategy or option rather than on the first call.
	if _, err := selector.New(cfg.selOpts...); err != nil {
		return nil, err
	}
	c := &Client{reg: reg, cfg: cfg, services: map[string]*service{}, policies: map[string]*servicePolicy{}}
	for name, p := range cfg.policies {
		sp, err := c.compilePolicy(p, nil)
		if err != nil {
			return nil, fmt.Errorf("middleware: policy of %s: %w", name, err)
		}
		c.policies[name] = sp
	}
	c.code = maps.Clone(cfg.policies)
	if c.code == nil {
		c.code = map[string]policy.Policy{}
	}
	c.tel = newTelemetry(cfg.tp, cfg.mp, cfg.instMetrics)
	c.q = cfg.quarantine
	if c.q == nil {
		c.q = NewQuarantine(QuarantineConfig{})
	}
	// A locality tier panics where the quarantine does, unless the
	// caller's own selector options say otherwise (they come after).
	panicPct := min(max(c.q.cfg.PanicThreshold, 0), 100)
	c.cfg.selOpts = append([]selector.Option{selector.WithPanicThreshold(panicPct)}, cfg.selOpts...)
	prev := c.q.onChange
	c.q.onChange = func(service, id string, ejected bool) {
		c.tel.ejected(service, id, ejected)
		if !ejected {
			c.rewarm(service, id)
		}
		if prev != nil {
			prev(service, id, ejected)
		}
	}
	prevUsable := c.q.onUsable
	c.q.onUsable = func(service, id string, usable bool) {
		c.setUsable(service, id, usable)
		if prevUsable != nil {
			prevUsable(service, id, usable)
		}
	}
	prevEject := c.q.onEject
	c.q.onEject = func(service, reason string) {
		c.tel.ejection(service, reason)
		if prevEject != nil {
			prevEject(service, reason)
		}
	}
	mw := cfg.mw
	if !cfg.mwSet {
		mw = c.defaultChain()
	}
	c.chain = Chain(c.attempt, mw...)
	c.pool.New = func() any { r := &Request{}; r.reset(); return r }
	c.stopSweep, c.swept = make(chan struct{}), make(chan struct{})
	if !cfg.noStored {
		c.followStored()
	}
	if cfg.idle > 0 {
		go c.sweepEvery(cfg.idle / 2)
	} else {
		close(c.swept)
	}
	return c, nil
}

// sweepEvery runs sweep each period until Close.
func (c *Client) sweepEvery(period time.Duration) {
	defer close(c.swept)
	t := time.NewTicker(max(period, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stopSweep:
			return
		case <-t.C:
			c.sweep()
		}
	}
}

// sweep starts a new epoch and stops following the services no call
// asked for in the last two whole ones. At a sweep every idle/2, that is
// a service idle for between idle and 1.5×idle. Its watch is closed; the
// next call follows it again. Two kinds are kept however idle. One still
// waiting for its first snapshot, so that no call waiting for it fails.
// One served stale, so that an outage of the registry never costs it the
// instances it last knew.
func (c *Client) sweep() {
	c.mu.Lock()
	c.epoch++
	var idle []*service
	for name, s := range c.services {
		if s.used <= c.epoch-3 && isClosed(s.ready) && s.staleAt.Load() == 0 {
			delete(c.services, name)
			idle = append(idle, s)
		}
	}
	c.mu.Unlock()
	for _, s := range idle {
		s.stop()
		c.tel.forget(s.name)
		if c.cfg.quarantine == nil { // the client's own: nobody else asks it about s
			c.q.drop(s.name)
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// defaultChain is throttle, retry, the policies' hedge, quarantine: the
// throttle judges whole calls, so it stands outside Retry.
func (c *Client) defaultChain() []Middleware {
	return []Middleware{Throttle(ThrottleConfig{}), Retry(RetryConfig{}), Hedge(HedgeConfig{}), c.q.Middleware()}
}

// Do runs call on an instance of service, through the chain. The error is
// the last attempt's.
func (c *Client) Do(ctx context.Context, service string, call Call) error {
	return c.DoKey(ctx, service, "", call)
}

// DoKey is Do with an affinity key for consistent-hash strategies: calls
// with the same key go to the same instance while the set is stable.
func (c *Client) DoKey(ctx context.Context, service, key string, call Call) error {
	var begin time.Time
	if c.tel.callsOn(ctx) {
		begin = time.Now()
	}
	s, err := c.service(ctx, service)
	if err != nil {
		c.called(ctx, service, begin, nil, err)
		return err
	}
	stale, err := s.usable(c.cfg.maxStale)
	if err != nil {
		c.called(ctx, service, begin, nil, err)
		return err
	}
	// No options: with no SDK installed this costs the allocations of the
	// global no-op span, and nothing else (see attempt).
	sp := s.pol.Load()
	if sp != nil && sp.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sp.timeout)
		defer cancel()
	}
	span := trace.SpanFromContext(ctx)
	if c.tel.tracer != nil {
		ctx, span = c.tel.tracer.Start(ctx, "roster.call")
	}
	req := c.pool.Get().(*Request)
	req.Service, req.Key, req.Call, req.Start = service, key, call, time.Now()
	req.classify, req.tel, req.Stale = c.cfg.classify, c.tel, stale
	req.endpoint = c.endpointOf(ctx)
	req.Total = s.sel.Len()
	req.svc = s
	req.pol, req.once = sp, !c.idempotentCall(ctx, sp)
	err = c.chain(ctx, req)
	if c.tel.tracer != nil {
		if span.IsRecording() {
			span.SetAttributes(otelkey.Service.String(service), otelkey.Stale.Bool(stale), attribute.Int("roster.attempts", req.Attempt))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}
	c.called(ctx, service, begin, req, err)
	req.reset()
	c.pool.Put(req)
	return err
}

// called records a call's outcome and duration; begin is zero when the
// call metrics are off. req is nil when the call never reached the chain.
func (c *Client) called(ctx context.Context, service string, begin time.Time, req *Request, err error) {
	if begin.IsZero() {
		return
	}
	o := outSuccess
	switch {
	case err == nil:
	case errors.Is(err, ErrThrottled):
		o = outThrottled
	default:
		class := c.cfg.classify
		if class == nil {
			class = DefaultClassify
		}
		o = outcomeOf(class(ctx, err))
		if o != outAborted && (req == nil || !req.Picked) {
			o = outUnavailable
		}
	}
	c.tel.call(ctx, service, "", o, time.Since(begin))
}

// attempt is the innermost handler: pick an instance and run the call.
func (c *Client) attempt(ctx context.Context, req *Request) error {
	s := req.svc
	req.Picked = false
	if req.Attempt == 0 {
		req.Attempt = 1
	}
	// The selector's fallback order, shared with contrib/rostergrpc: untried and
	// admitted, then tried but admitted, then any (the excluders are
	// advice, not a wall).
	in, done, err := s.sel.Pick(ctx, selector.PickOptions{Key: req.Key, Tried: req.wasTried, Avoid: req.avoided, Endpoint: req.endpoint})
	if err != nil {
		return fmt.Errorf("%s: %w", req.Service, err)
	}
	req.Instance, req.Picked = in, true
	req.picked()
	c.tel.pick(ctx, req.Service, in.Zone, in.ID)
	// Attempt spans only under a recording call span: when the call is not
	// traced (no SDK, or not sampled) its attempts would not be either.
	actx, span := ctx, trace.SpanFromContext(ctx)
	if c.tel.tracer != nil && span.IsRecording() {
		actx, span = c.tel.tracer.Start(ctx, "roster.attempt", attemptKind)
		span.SetAttributes(otelkey.Service.String(req.Service), otelkey.InstanceID.String(in.ID),
			otelkey.Address.String(in.Address), otelkey.Attempt.Int(req.Attempt), otelkey.Stale.Bool(req.Stale))
		if req.Reason != "" {
			span.SetAttributes(otelkey.Reason.String(req.Reason))
		}
	}
	start := req.Start // time.Now is slow on some VMs: the first attempt reuses the call's
	if req.Attempt > 1 {
		start = time.Now()
	}
	if p := req.pol; p != nil && p.perTry > 0 {
		tctx, cancel := context.WithTimeout(actx, p.perTry)
		err = req.Call(tctx, in)
		cancel()
	} else {
		err = req.Call(actx, in)
	}
	req.Latency = time.Since(start)
	done.Done(err, req.Latency)
	if err != nil {
		class := req.Classify(ctx, err)
		c.tel.failure(ctx, req.Service, in.Zone, in.ID, class)
		if span.IsRecording() {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	if actx != ctx {
		span.End()
	}
	return err
}

var attemptKind = trace.WithSpanKind(trace.SpanKindClient)

// Middleware returns the quarantine as a chain element: it keeps ejected
// instances out of picks and feeds every attempt's outcome back.
func (q *Quarantine) Middleware() Middleware {
	ex := quarantineExcluder{q}
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			mark := req.pushExcluder(ex)
			err := next(ctx, req)
			req.popExcluders(mark)
			if req.Picked {
				q.reportIn(req.Service, req.Instance.ID, req.Instance.Zone, req.Instance.Region, req.Classify(ctx, err), req.Total)
				// A failure on an instance now held out is dealt with
				// here: a Throttle outside does not count it.
				req.contained = err != nil && q.isOut(req.Service, req.Instance.ID)
			}
			return err
		}
	}
}

type quarantineExcluder struct{ q *Quarantine }

func (e quarantineExcluder) excluded(req *Request, in *registry.Instance) bool {
	return !e.q.admit(req.Service, in.ID, req.Total)
}

// rewarm restarts the slow start of an instance the quarantine
// readmitted, so that it gets its traffic back gradually.
func (c *Client) rewarm(service, id string) {
	c.mu.Lock()
	s := c.services[service]
	c.mu.Unlock()
	if s != nil {
		s.sel.Rewarm(id)
	}
}

// setUsable tells the service's selector whether the quarantine lets an
// instance take calls, for its locality shares.
func (c *Client) setUsable(service, id string, usable bool) {
	c.mu.Lock()
	s := c.services[service]
	c.mu.Unlock()
	if s != nil {
		s.sel.SetUsable(id, usable)
	}
}

// Snapshot returns the snapshot the client currently picks from for a
// service it has called, and whether it has one.
func (c *Client) Snapshot(service string) (registry.Snapshot, bool) {
	c.mu.Lock()
	s := c.services[service]
	c.mu.Unlock()
	if s == nil {
		return registry.Snapshot{}, false
	}
	select {
	case <-s.ready:
		return s.sel.Snapshot(), true
	default:
		return registry.Snapshot{}, false
	}
}

// Close stops following every service. Calls in flight finish; new ones
// fail with registry.ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	svcs := c.services
	c.services = map[string]*service{}
	c.mu.Unlock()
	close(c.stopSweep)
	c.stored.stop()
	<-c.swept
	for _, s := range svcs {
		s.stop()
	}
	c.tel.close()
	return nil
}

// service returns the followed state of a service, starting to follow it
// on first use and waiting (bounded) for its first usable snapshot.
func (c *Client) service(ctx context.Context, name string) (*service, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("middleware: client: %w", registry.ErrClosed)
	}
	s := c.services[name]
	created := false
	if s == nil {
		opts := c.cfg.selOpts
		sp := c.policies[name]
		if sp != nil {
			opts = sp.selOpts
		}
		sel, err := selector.New(opts...)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		w, err := c.reg.Watch(context.Background(), name)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		s = newService(c, name, sel, w)
		s.pol.Store(sp)
		c.services[name] = s
		created = true
	}
	s.used = c.epoch
	c.mu.Unlock()
	if !created {
		select {
		case <-s.ready:
			c.tel.cacheRead(ctx, name, true)
			return s, nil
		default:
		}
	}
	c.tel.cacheRead(ctx, name, false)
	start := time.Now()
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok && c.cfg.firstTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.cfg.firstTimeout)
		defer cancel()
	}
	select {
	case <-s.ready:
		if created {
			c.tel.lookup(ctx, name, time.Since(start))
		}
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("middleware: client: %w", registry.ErrClosed)
	case <-wctx.Done():
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: no answer from the registry for %s within %v", registry.ErrUnavailable, name, c.cfg.firstTimeout)
	}
}

// service is the client's view of one service: a selector fed by a
// watcher, with the stale-cache rules applied on the way.
type service struct {
	c    *Client
	name string
	sel  *selector.Selector
	w    *registry.Watcher

	ready     chan struct{} // closed when the first usable snapshot is in
	readyOnce sync.Once
	staleAt   atomic.Int64                  // monoNow when the served state went stale; 0 fresh
	pol       atomic.Pointer[servicePolicy] // nil: no policy
	used      int64                         // the client's epoch at the last call; c.mu held

	cancel    context.CancelFunc
	done      chan struct{} // follow ended
	confirmed chan struct{} // confirm ended

	mu        sync.Mutex
	good      bool // a fresh or persisted snapshot has been applied
	emptyGen  int  // zero-protection generation
	lastFresh registry.Snapshot
}

func newService(c *Client, name string, sel *selector.Selector, w *registry.Watcher) *service {
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{c: c, name: name, sel: sel, w: w, ready: make(chan struct{}), cancel: cancel,
		done: make(chan struct{}), confirmed: make(chan struct{})}
	go s.follow(ctx)
	if c.cfg.dir != "" {
		go s.confirm(ctx, c.cfg.dir)
	} else {
		close(s.confirmed) // nothing persisted, nothing to confirm
	}
	return s
}

func (s *service) stop() {
	s.cancel()
	<-s.done
	<-s.confirmed
	_ = s.w.Close()
}

// confirm keeps the persisted snapshot's age true while nothing changes:
// a watch that is live and fresh confirms the state it last delivered, so
// every period the file is marked confirmed now. A process that starts
// during an outage then measures staleness from the last confirmation,
// not from the last change (which may be days old).
func (s *service) confirm(ctx context.Context, dir string) {
	defer close(s.confirmed)
	t := time.NewTicker(confirmPeriod(s.c.cfg.maxStale))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			if s.good && s.staleAt.Load() == 0 {
				_ = confirmSnapshot(dir, s.name, now) // best effort: the next tick tries again
			}
			s.mu.Unlock()
		}
	}
}

// confirmPeriod is how often a fresh snapshot file is confirmed: often
// enough that its age never overstates by more than a quarter of the
// maximum staleness, at most once a minute.
func confirmPeriod(maxStale time.Duration) time.Duration {
	if maxStale <= 0 {
		return time.Minute
	}
	return min(max(maxStale/4, 100*time.Millisecond), time.Minute)
}

// usable reports whether picks may proceed, and whether they are stale.
func (s *service) usable(maxStale time.Duration) (bool, error) {
	at := s.staleAt.Load()
	if at == 0 {
		return false, nil
	}
	if maxStale > 0 && time.Duration(monoNow()-at) > maxStale {
		return true, fmt.Errorf("%s: %w", s.name, ErrStale)
	}
	return true, nil
}

func (s *service) markReady() { s.readyOnce.Do(func() { close(s.ready) }) }

func (s *service) follow(ctx context.Context) {
	defer close(s.done)
	for {
		snap, err := s.w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			return // closed or cancelled
		}
		s.apply(ctx, snap)
		s.c.tel.instances(s.sel.Snapshot())
	}
}

func (s *service) apply(ctx context.Context, snap registry.Snapshot) {
	c := s.c
	c.tel.snapshot(ctx, s.name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap.Stale {
		if !s.good && c.cfg.dir != "" {
			// Cold start during an outage: fall back to the persisted list.
			if disk, ok, _ := loadSnapshot(c.cfg.dir, s.name); ok {
				s.sel.Update(disk)
				s.good = true
				s.setStale(diskAge(disk.At, time.Now()))
				s.markReady()
				return
			}
		}
		if !s.good {
			s.sel.Update(snap) // nothing better: an empty, stale list
		} else {
			// Keep serving what was served, flagged stale.
			cur := s.sel.Snapshot()
			cur.Stale = true
			s.sel.Update(cur)
		}
		s.setStale(0)
		s.markReady()
		return
	}
	if len(snap.Instances) == 0 && c.cfg.zeroProtect > 0 && len(s.lastFresh.Instances) > 0 {
		// Hold the last list for a while; apply the empty answer later if
		// nothing else arrives.
		s.emptyGen++
		gen := s.emptyGen
		time.AfterFunc(c.cfg.zeroProtect, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.emptyGen == gen && ctx.Err() == nil {
				s.lastFresh = snap
				s.sel.Update(snap)
			}
		})
		s.setFresh()
		s.markReady()
		return
	}
	s.emptyGen++
	s.lastFresh = snap
	s.good = true
	s.sel.Update(snap)
	s.setFresh()
	if c.cfg.dir != "" {
		_ = saveSnapshot(c.cfg.dir, snap) // best effort: the next snapshot tries again
	}
	c.q.forget(s.name, func(id string) bool { _, ok := snap.Find(id); return ok })
	s.markReady()
}

// setFresh records that the served state is fresh; s.mu held.
func (s *service) setFresh() {
	s.staleAt.Store(0)
	s.c.tel.setStale(s.name, 0)
}

// setStale records that the served state is stale and was already age
// old; s.mu held. A state already stale keeps its first time.
func (s *service) setStale(age time.Duration) {
	if s.staleAt.Load() != 0 {
		return
	}
	at := monoNow() - int64(age)
	if at == 0 {
		at = -1 // 0 means fresh
	}
	s.staleAt.Store(at)
	s.c.tel.setStale(s.name, at)
}

// monoEpoch anchors monoNow: durations since it are read on the monotonic
// clock, which a step of the wall clock does not move.
var monoEpoch = time.Now()

// monoNow is the process's monotonic clock in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoEpoch)) + clockSkip.Load() }

// clockSkip moves monoNow forward in tests (export_test.go), so that an
// outage of hours is tested in milliseconds.
var clockSkip atomic.Int64

// monoTime turns a monoNow reading into the wall-clock time it was that
// long ago, for display.
func monoTime(at int64) time.Time { return time.Now().Add(-time.Duration(monoNow() - at)) }

// unknownAge is the age of a persisted snapshot dated in the future: a
// clock that went back since it was written, or a file set by hand. Such
// a date proves nothing, so the snapshot counts as older than any bound.
const unknownAge = 100 * 365 * 24 * time.Hour

// diskAge is the age at now of a persisted snapshot confirmed at at: the
// one comparison of wall-clock times, since the file outlives the
// process.
func diskAge(at, now time.Time) time.Duration {
	if at.After(now) {
		return unknownAge
	}
	return now.Sub(at)
}
