package rosterfx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"go.uber.org/fx"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry"
)

// defaultDrainWindow is how long a stopping service stays up after its
// deregistration is visible in the registry, for the other processes'
// watchers to apply it. Watch-based backends (etcd, Consul blocking
// queries, Redis streams) propagate in milliseconds to a second; raise it
// to at least the poll period of any client that polls instead.
const defaultDrainWindow = 2 * time.Second

// Announcement describes the instance a service announces, and how it
// leaves. Return one from the constructor given to Announce.
type Announcement struct {
	// Instance to register. Address may be left empty when Addr is set.
	Instance registry.Instance
	// Addr, if set, is called at start, after the server's OnStart hooks,
	// and gives Instance.Address (for servers listening on port 0).
	Addr func() string
	// Endpoints are the named ports the instance serves besides, or
	// instead of, Address ("http", "grpc"). They join Instance.Endpoints
	// in one registration, which leaves as one. Without an Address the
	// first endpoint is the primary.
	Endpoints []Endpoint
	// HealthCheck, if set, must pass before the instance is registered
	// (it is polled until the start deadline), and keeps running: while it
	// fails the instance is withdrawn from the registry
	// (registry.WithHealthCheck).
	HealthCheck func(ctx context.Context) error
	// HealthPath, if set and HealthCheck is not, is an HTTP path on the
	// instance's "http" endpoint, else its Address ("/healthz"): the
	// check is a GET of http://<address><path> wanting 2xx
	// (HTTPHealthCheck).
	HealthPath string
	// HealthCheckInterval is the period of the running check (default 1s).
	HealthCheckInterval time.Duration
	// DrainWindow is how long to keep serving once the deregistration is
	// visible in the registry (default 2s; negative: 0).
	// It is cut short, to half of what is left, if fx's stop deadline
	// would not leave the server time to stop.
	DrainWindow time.Duration
	// Drain, if set, stops by setting the weight to 0 (Lease.Drain)
	// instead of deregistering, and deregisters at the end of the window:
	// clients stop sending new work unless the instance is the last one
	// left, so a service of one instance keeps answering while it drains.
	Drain bool
	// Options are passed to Registry.Register (TTL, state hook, …).
	Options []registry.RegisterOption
	// WaitRegistered makes start fail when the registry cannot be
	// reached, instead of retrying in the background (the default): the
	// app then starts only registered.
	WaitRegistered bool
	// Logger receives the background retries (default slog.Default()).
	Logger *slog.Logger
}

// Endpoint is a named port of an announced instance, whose address is
// read at start, once the server listens.
type Endpoint struct {
	Name     string        // "http", "grpc": [a-z0-9]([a-z0-9-]*[a-z0-9])?, at most 15 bytes
	Protocol string        // optional, e.g. "grpc"
	Addr     func() string // called at start, after the servers' OnStart hooks
}

// Retries of a registration while the registry cannot be reached: the
// bounds of roster register's.
const (
	retryBase      = 200 * time.Millisecond
	retryMax       = 10 * time.Second
	attemptTimeout = 10 * time.Second
)

// Announce announces the service being built. constructor is an fx
// constructor (its parameters are injected) returning an Announcement, or
// an Announcement and an error. Make it take the server as a parameter so
// that the server starts first and stops last; see the package doc.
// It needs a *registry.Registry (Module). Announce can be used several
// times in one app.
func Announce(constructor any) fx.Option {
	return fx.Module("roster.announce",
		fx.Provide(fx.Private, constructor),
		fx.Invoke(announce),
	)
}

// announce appends the announcement's hooks. It runs after the
// announcement's constructor, hence after its dependencies appended
// theirs.
func announce(lc fx.Lifecycle, reg *registry.Registry, a Announcement) {
	an := &announcer{reg: reg, a: a}
	lc.Append(fx.Hook{OnStart: an.start, OnStop: an.stop})
}

type announcer struct {
	reg   *registry.Registry
	a     Announcement
	lease *registry.Lease // nil until registered; set by retry before retried closes

	stopRetry   context.CancelFunc // ends the background retries
	retried     chan struct{}      // closed when they end; nil without them
	retryCancel context.CancelFunc // cancels an attempt under way
}

func (an *announcer) describe(inst registry.Instance) string {
	return fmt.Sprintf("rosterfx: announce %s at %s", inst.Service, inst.Address)
}

func (an *announcer) start(ctx context.Context) error {
	a := an.a
	inst, err := an.instance()
	if err != nil {
		return err
	}
	opts := append([]registry.RegisterOption(nil), a.Options...)
	if a.HealthCheck == nil && a.HealthPath != "" {
		web, ok := inst.Endpoint("http")
		if !ok {
			web.Address = inst.Address
		}
		a.HealthCheck = HTTPHealthCheck("http://" + web.Address + a.HealthPath)
	}
	if a.HealthCheck != nil {
		every := a.HealthCheckInterval
		if every <= 0 {
			every = time.Second
		}
		if err := waitHealthy(ctx, a.HealthCheck, every); err != nil {
			return fmt.Errorf("%s: health check did not pass before the start deadline: %w", an.describe(inst), err)
		}
		opts = append(opts, registry.WithHealthCheck(a.HealthCheck, every))
	}
	if inst.ID == "" {
		// One ID for every attempt: an attempt whose answer was lost and
		// the next one upsert one registration.
		inst.ID = backend.NewID(inst.Service, inst.Address)
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	lease, err := an.reg.Register(actx, inst, opts...)
	cancel()
	switch {
	case err == nil:
		an.lease = lease
		return nil
	case a.WaitRegistered || errors.Is(err, registry.ErrInvalid) || errors.Is(err, registry.ErrClosed):
		return fmt.Errorf("%s: %w", an.describe(inst), err)
	}
	an.retry(inst, opts, err)
	return nil
}

// instance returns the instance to register, its addresses read now.
func (an *announcer) instance() (registry.Instance, error) {
	a := an.a
	inst := a.Instance.Clone()
	if a.Addr != nil {
		inst.Address = a.Addr()
	}
	for _, e := range a.Endpoints {
		if e.Addr == nil {
			return inst, fmt.Errorf("%s: endpoint %q has no Addr", an.describe(inst), e.Name)
		}
		inst.Endpoints = append(inst.Endpoints, registry.Endpoint{Name: e.Name, Address: e.Addr(), Protocol: e.Protocol})
	}
	if inst.Address == "" && len(inst.Endpoints) > 0 {
		inst.Address = inst.Endpoints[0].Address // the primary, as Register makes it
	}
	addrs := []string{inst.Address}
	for _, e := range inst.Endpoints {
		addrs = append(addrs, e.Address)
	}
	for _, addr := range addrs {
		host, _, _ := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			// A server listening on every interface reports [::]:port,
			// which no client can dial.
			return inst, fmt.Errorf("%s: the address is unspecified (%s); announce a host clients can reach (set Instance.Address, Addr or the endpoint's Addr)", an.describe(inst), addr)
		}
	}
	return inst, nil
}

func (an *announcer) logger() *slog.Logger {
	if an.a.Logger != nil {
		return an.a.Logger
	}
	return slog.Default()
}

// retry registers inst in the background, with backoff, logging every
// failure, until it succeeds, the registry rejects the instance for good,
// or stop ends the retries. The service serves meanwhile, as behind
// roster register; it gets traffic once registered.
func (an *announcer) retry(inst registry.Instance, opts []registry.RegisterOption, err error) {
	stop, stopRetry := context.WithCancel(context.Background())
	bg, cancel := context.WithCancel(context.Background())
	an.stopRetry, an.retryCancel, an.retried = stopRetry, cancel, make(chan struct{})
	log := an.logger().With("service", inst.Service, "address", inst.Address)
	go func() {
		defer close(an.retried)
		policy := backoff.Policy{Base: retryBase, Max: retryMax}
		for attempt := 0; ; attempt++ {
			d := policy.Delay(attempt)
			log.Warn("rosterfx: cannot register yet; the service runs meanwhile", "retry_in", d.Round(time.Millisecond), "err", err)
			t := time.NewTimer(d)
			select {
			case <-stop.Done():
				t.Stop()
				return
			case <-t.C:
			}
			actx, acancel := context.WithTimeout(bg, attemptTimeout)
			lease, rerr := an.reg.Register(actx, inst, opts...)
			acancel()
			switch {
			case rerr == nil:
				an.lease = lease
				log.Info("rosterfx: registered", "id", inst.ID, "attempts", attempt+2)
				return
			case errors.Is(rerr, registry.ErrInvalid) || errors.Is(rerr, registry.ErrClosed):
				log.Error("rosterfx: cannot register; giving up", "err", rerr)
				return
			}
			err = rerr
		}
	}()
}

// endRetry stops the background retries, letting an attempt under way
// finish while ctx lasts: it may have reached the registry, and what it
// registered is deregistered by stop.
func (an *announcer) endRetry(ctx context.Context) {
	if an.retried == nil {
		return
	}
	an.stopRetry()
	select {
	case <-an.retried:
	case <-ctx.Done():
		an.retryCancel() // what it wrote expires with its TTL
		<-an.retried
	}
	an.retryCancel()
}

// waitHealthy polls check until it passes or ctx ends, and returns the
// last failure then.
func waitHealthy(ctx context.Context, check func(context.Context) error, every time.Duration) error {
	if dl, ok := ctx.Deadline(); ok {
		// Give up a little before fx does, so that the app fails with our
		// error rather than a bare "context deadline exceeded".
		margin := min(time.Until(dl)/10, time.Second)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
		defer cancel()
	}
	delay := 10 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last check: %w)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, every)
	}
}

func (an *announcer) stop(ctx context.Context) error {
	an.endRetry(ctx)
	l := an.lease
	if l == nil {
		if an.retried != nil {
			an.logger().Info("rosterfx: never registered: nothing to deregister", "service", an.a.Instance.Service)
		}
		return nil
	}
	inst := l.Instance()
	var err error
	if an.a.Drain {
		err = l.Drain(ctx)
	} else {
		err = l.Deregister(ctx)
	}
	if err != nil {
		// The backend is unreachable: the instance disappears when its
		// TTL runs out; keep serving for the window all the same.
		err = fmt.Errorf("%s: leave: %w", an.describe(inst), err)
	} else {
		an.confirm(ctx, inst)
	}
	window := an.a.DrainWindow
	if window == 0 {
		window = defaultDrainWindow
	}
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, time.Until(dl)/2)
	}
	if window > 0 {
		t := time.NewTimer(window)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if an.a.Drain {
		dctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
		}
		if derr := l.Deregister(dctx); derr != nil && !errors.Is(derr, registry.ErrClosed) {
			err = errors.Join(err, fmt.Errorf("%s: deregister: %w", an.describe(inst), derr))
		}
	}
	return err
}

// confirm waits until this process's own watch of the service shows the
// instance gone (or drained): the backend has the change and is
// delivering it to watchers. Bounded by ctx; best effort.
func (an *announcer) confirm(ctx context.Context, inst registry.Instance) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := an.reg.Watch(ctx, inst.Service)
	if err != nil {
		return
	}
	defer w.Close()
	for {
		s, err := w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			return
		}
		if !s.Stale {
			in, ok := s.Find(inst.ID)
			if !ok || (an.a.Drain && in.Weight == 0) {
				return
			}
		}
	}
}

// HTTPHealthCheck returns a health check that GETs url and wants a 2xx
// answer: registry.HTTPHealthCheck.
func HTTPHealthCheck(url string) func(context.Context) error { return registry.HTTPHealthCheck(url) }
