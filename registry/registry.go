package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry/driver"
)

// Registry is the portable registry users hold. It wraps a backend Driver
// and adds, once for every backend: input validation, instance IDs, leases
// that heartbeat and re-register by themselves, a watch cache shared by all
// readers of a service, periodic resync and stale marking. A Registry is
// safe for concurrent use.
type Registry struct {
	drv    driver.Driver // the backend's driver behind guard and checked
	raw    driver.Driver // the backend's driver itself, for As
	name   string
	log    *slog.Logger
	obs    Observer
	resync time.Duration
	// recovery is the window a watch holds its last instances after a
	// backend fault (see recovery.go).
	recovery time.Duration
	// lookupTimeout bounds Lookup and Services without a deadline.
	lookupTimeout time.Duration
	// loopback: loopback addresses may be registered and are served
	// (the server is on this host, or AllowLoopback).
	loopback bool

	mu      sync.Mutex
	closed  bool
	leases  map[*Lease]struct{}
	entries map[string]*entry
	// overrides follows every override for the watched services.
	overrides overrideHub
	beats     grid // runs the leases' heartbeats (beat.go)
}

// New returns a Registry over a driver. Most programs call Open with a URL
// instead; New is for drivers constructed in code.
func New(d driver.Driver, opts ...Option) *Registry {
	o := options{resync: DefaultResyncInterval, recovery: DefaultRecoveryWindow}
	for _, f := range opts {
		f(&o)
	}
	if o.name == "" {
		o.name = fmt.Sprintf("%T", d)
	}
	loopback := o.loopback
	if l, ok := d.(backend.Local); ok && l.Local() {
		loopback = true
	}
	r := &Registry{
		drv: checked{Driver: backend.Guard(d), rep: &reporter{log: o.logger}, loopback: loopback}, loopback: loopback, raw: d, name: o.name, log: o.logger, obs: o.observer, resync: o.resync, recovery: o.recovery,
		lookupTimeout: DefaultLookupTimeout, leases: map[*Lease]struct{}{}, entries: map[string]*entry{},
	}
	r.overrides.r = r
	return r
}

// String names the registry by its redacted URL.
func (r *Registry) String() string { return "registry(" + r.name + ")" }

// Limits returns the backend's TTL constraints.
func (r *Registry) Limits() Limits { return r.drv.Limits() }

// As exposes the driver to code that needs backend-specific access (tests
// with fault hooks, say): it sets *target to the driver if the types match.
func (r *Registry) As(target any) bool {
	if p, ok := target.(*driver.Driver); ok {
		*p = r.raw
		return true
	}
	return false
}

func (r *Registry) logf(msg string, args ...any) {
	if r.log != nil {
		r.log.Warn(msg, args...)
	}
}

func (r *Registry) checkOpen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%s: %w", r, ErrClosed)
	}
	return nil
}

// Register announces an instance and keeps it alive until the returned
// Lease is deregistered or the Registry is closed. An empty ID is filled
// in with NewID; Weight 0 becomes DefaultWeight unless the Drained option
// asks for an instance that starts out of rotation. The address is
// rewritten to its canonical form (see CanonicalAddress); addresses no
// client should dial are refused, loopback unless the registry is on
// loopback or AllowLoopback (docs/security.md). The first write
// happens before Register returns, so an unreachable backend or invalid
// input is an error here, not later; invalid input writes nothing.
func (r *Registry) Register(ctx context.Context, inst Instance, opts ...RegisterOption) (*Lease, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	o := regOptions{ttl: DefaultTTL, backoffBase: 200 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	inst, err := prepare(inst, o.drained, r.loopback)
	if err != nil {
		return nil, err
	}
	l, err := r.newLease(inst, &o)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := l.first(ctx, o); err != nil {
		return nil, err
	}
	return l, r.track(ctx, l)
}

// prepare validates an instance and fills in its defaults (canonical
// address, ID, weight). Loopback addresses pass only when loopback is
// allowed.
func prepare(inst Instance, drained, loopback bool) (Instance, error) {
	inst = inst.Clone()
	if err := backend.ValidateService(inst.Service); err != nil {
		return inst, err
	}
	if inst.Address == "" && len(inst.Endpoints) > 0 {
		inst.Address = inst.Endpoints[0].Address
	}
	addr, err := backend.CanonicalAddress(inst.Address)
	if err != nil {
		return inst, err
	}
	inst.Address = addr
	if err := canonicalEndpoints(inst.Endpoints); err != nil {
		return inst, err
	}
	if err := checkLoopback(inst, loopback); err != nil {
		return inst, err
	}
	if inst.ID == "" {
		inst.ID = backend.NewID(inst.Service, inst.Address)
	}
	switch {
	case drained && inst.Weight != 0:
		return inst, invalid("weight", "%d with the Drained option (a drained instance starts at weight 0; call Lease.SetWeight to bring it in)", inst.Weight)
	case inst.Weight == 0 && !drained:
		inst.Weight = DefaultWeight
	}
	return inst, backend.ValidateInstance(inst)
}

// canonicalEndpoints rewrites each endpoint's address in place, as
// Register does the primary's. The slice is the caller's clone.
func canonicalEndpoints(eps []Endpoint) error {
	for n := range eps {
		addr, err := backend.CanonicalAddress(eps[n].Address)
		var fe *FieldError
		if errors.As(err, &fe) {
			return invalid("endpoints["+strconv.Itoa(n)+"].address", "%s", fe.Reason)
		}
		if err != nil {
			return err
		}
		eps[n].Address = addr
	}
	return nil
}

// newLease checks the timings against the backend's
// limits, and returns the lease, not yet written.
func (r *Registry) newLease(inst Instance, o *regOptions) (*Lease, error) {
	ttl, err := backend.ValidateTTL(o.ttl, r.drv.Limits())
	if err != nil {
		return nil, err
	}
	interval := o.interval
	if interval == 0 {
		interval = ttl / 3
	}
	if interval < 0 {
		return nil, invalid("heartbeat interval", "%v is negative (0 means a third of the TTL)", interval)
	}
	if interval == 0 || interval > ttl/3 {
		return nil, invalid("heartbeat interval", "%v: the TTL (%v) must be at least 3 heartbeat intervals", interval, ttl)
	}
	if err := o.validateTimings(); err != nil {
		return nil, err
	}
	interval = max(interval, minInterval)
	if o.backoffMax <= 0 {
		// Re-registering no faster than heartbeating costs the backend no
		// more than steady state, and brings every instance back within
		// one interval of the backend's return.
		o.backoffMax = interval
	}
	if o.check != nil && o.checkInterval <= 0 {
		o.checkInterval = interval
	}
	return &Lease{
		r: r, id: inst.ID, ttl: ttl, interval: interval,
		policy: backoff.Policy{Base: o.backoffBase, Max: o.backoffMax},
		check:  o.check, checkEvery: o.checkInterval, onState: o.onState,
		inst: inst,
		stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// first runs the health check, if any, and writes the instance unless
// the check fails (the lease then starts withdrawn).
func (l *Lease) first(ctx context.Context, o regOptions) error {
	if o.check != nil {
		cctx, cancel := context.WithTimeout(ctx, o.checkInterval)
		err := runCheck(cctx, o.check)
		cancel()
		if err != nil {
			l.state, l.err = LeaseWithdrawn, fmt.Errorf("health check: %w", err)
			return nil
		}
	}
	reg, err := l.r.drv.Register(ctx, l.inst, l.ttl)
	if err != nil {
		return err // it names the backend and the operation: see driver.Driver
	}
	l.reg = reg
	return nil
}

// track starts the lease's goroutine, unless the registry closed
// meanwhile (the write is then undone).
func (r *Registry) track(ctx context.Context, l *Lease) error {
	lctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		if l.reg != nil {
			_ = l.reg.Deregister(ctx)
		}
		return fmt.Errorf("%s: %w", r, ErrClosed)
	}
	r.leases[l] = struct{}{}
	r.mu.Unlock()
	l.start(lctx, time.Now())
	return nil
}

func (r *Registry) forget(l *Lease) {
	r.mu.Lock()
	delete(r.leases, l)
	r.mu.Unlock()
}

// DefaultLookupTimeout bounds a Lookup or Services whose context has no
// deadline. It is above every backend's own bound on one request (Consul
// 10s; etcd, ZooKeeper and Kubernetes 5s; a DNS question 2s), so that a
// backend's own timeout, which names the cause, comes first; it bounds the
// whole call however many requests the backend makes. A caller's deadline,
// shorter or longer, replaces it.
const DefaultLookupTimeout = 15 * time.Second

// bounded is a caller's context with the lookup deadline if it had none.
type bounded struct {
	context.Context
	caller context.Context
	own    time.Time // the deadline set here; zero: the caller's
}

// bound returns ctx with the lookup deadline when it has none, and the
// function that releases it.
func (r *Registry) bound(ctx context.Context) (bounded, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return bounded{Context: ctx, caller: ctx}, func() {}
	}
	own := time.Now().Add(r.lookupTimeout)
	c, cancel := context.WithDeadline(ctx, own)
	return bounded{Context: c, caller: ctx, own: own}, cancel
}

// err is the error of a call to the backend that failed under b: past
// the deadline set here the backend is unavailable, whatever error it
// gave (a read timeout at the deadline may come before the context's own
// expiry).
func (b bounded) err(what string, timeout time.Duration, err error) error {
	if b.own.IsZero() || b.caller.Err() != nil || time.Now().Before(b.own) {
		return err
	}
	return fmt.Errorf("%s: %w: no answer within %v (DefaultLookupTimeout; a context deadline sets another bound): %w",
		what, ErrUnavailable, timeout, context.DeadlineExceeded)
}

// Lookup returns the live instances of a service. When a Watcher of the
// service is open, it answers from the shared cache without asking the
// backend. If the backend fails and a cached state exists, Lookup returns
// it marked Stale together with an error wrapping ErrUnavailable. The
// backend is asked under ctx's deadline, or DefaultLookupTimeout if ctx
// has none: past it, the error wraps ErrUnavailable and
// context.DeadlineExceeded. Lookup and Watch apply the operators'
// overrides (SetOverride); without a watch that costs one more read, of
// the record store.
func (r *Registry) Lookup(ctx context.Context, service string) (Snapshot, error) {
	start := time.Now()
	if err := backend.ValidateService(service); err != nil {
		return Snapshot{}, err
	}
	if err := r.checkOpen(); err != nil {
		return Snapshot{}, err
	}
	r.mu.Lock()
	e := r.entries[service]
	r.mu.Unlock()
	if e != nil {
		if s, ok := e.cached(); ok {
			r.observeLookup(service, true, start, nil)
			return s, nil
		}
	}
	bctx, cancel := r.bound(ctx)
	defer cancel()
	s, err := r.drv.List(bctx, service)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("lookup %s: %w", service, ctx.Err())
		}
		err = bctx.err("lookup "+service, r.lookupTimeout, err)
		r.observeLookup(service, false, start, err)
		if e != nil {
			if last, ok := e.last(); ok {
				last.Stale = true
				return last, err
			}
		}
		return Snapshot{}, err
	}
	s.Service = service
	if s.Instances == nil {
		s.Instances = []Instance{}
	}
	if s.At.IsZero() {
		s.At = time.Now()
	}
	s = r.lookupOverrides(bctx, s)
	r.observeLookup(service, false, start, nil)
	return s, nil
}

func (r *Registry) observeLookup(service string, hit bool, start time.Time, err error) {
	if r.obs != nil {
		r.obs.Lookup(service, hit, time.Since(start), err)
	}
}

// Watch follows a service. Every Watcher of the same service shares one
// backend watch and one cache. See Watcher for the delivery contract.
func (r *Registry) Watch(ctx context.Context, service string) (*Watcher, error) {
	if err := backend.ValidateService(service); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%s: %w", r, ErrClosed)
	}
	e := r.entries[service]
	if e == nil {
		e = newEntry(r, service)
		ectx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		r.entries[service] = e
		go e.run(ectx)
	}
	e.refs++
	return &Watcher{e: e, closed: make(chan struct{})}, nil
}

// release drops one reference; the last one stops the backend watch.
func (r *Registry) release(e *entry) {
	r.mu.Lock()
	e.refs--
	last := e.refs == 0 && r.entries[e.service] == e
	if last {
		delete(r.entries, e.service)
	}
	r.mu.Unlock()
	if last {
		e.cancel()
		<-e.done
		e.close()
	}
}

// Services lists the services that have at least one live instance,
// bounded as Lookup is.
func (r *Registry) Services(ctx context.Context) ([]string, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	bctx, cancel := r.bound(ctx)
	defer cancel()
	s, err := r.drv.Services(bctx)
	if err != nil {
		// The driver's error names the backend and the operation.
		return nil, bctx.err("services", r.lookupTimeout, err)
	}
	return s, nil
}

// Close is Shutdown without a deadline of its own: each lease still has
// a few seconds' grace.
func (r *Registry) Close() error { return r.Shutdown(context.Background()) }

// Shutdown deregisters every live lease (each with a few seconds' grace,
// and none past ctx), stops every watch — pending Next calls return
// ErrClosed — and closes the driver. It returns the first error met. A
// lease not deregistered when ctx ends is left to expire at its TTL, and
// the error says how many were; an fx stop hook or a signal handler can
// so honour its own deadline.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("%s: %w", r, ErrClosed)
	}
	r.closed = true
	leases := make([]*Lease, 0, len(r.leases))
	for l := range r.leases {
		leases = append(leases, l)
	}
	entries := make([]*entry, 0, len(r.entries))
	for _, e := range r.entries {
		entries = append(entries, e)
	}
	r.entries = map[string]*entry{}
	r.mu.Unlock()

	errs := deregisterAll(ctx, leases)
	for _, e := range entries {
		e.cancel()
		<-e.done
		e.close()
	}
	if err := r.drv.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeConcurrency bounds the deregistrations Close runs at once: a
// process holding a thousand leases must not open a thousand connections
// to the backend (a Consul agent answers 429 past 200 per client).
const closeConcurrency = 32

// deregisterAll deregisters leases, closeConcurrency at a time, each with
// a few seconds' grace counted from its own start and none past ctx, and
// returns the errors. Leases it had no time for are abandoned.
func deregisterAll(ctx context.Context, leases []*Lease) []error {
	var (
		errs []error
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, closeConcurrency)
	)
	left := 0
	for i, l := range leases {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for _, l := range leases[i:] {
				l.Abandon()
			}
			left = len(leases) - i
		}
		if left > 0 {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			lctx, cancel := context.WithTimeout(ctx, closeGrace)
			defer cancel()
			if err := l.Deregister(lctx); err != nil && !errors.Is(err, ErrClosed) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if left > 0 {
		errs = append(errs, fmt.Errorf("shutdown: %d of %d leases left to expire at their TTL: %w", left, len(leases), ctx.Err()))
	}
	return errs
}

// closeGrace bounds one lease's deregistration at Close.
const closeGrace = 5 * time.Second
