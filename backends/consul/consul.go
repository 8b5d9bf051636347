// Package consul is the Consul backend of Roster. Instances are registered
// through the local Consul agent (/v1/agent/service/register) with a health
// check, and discovered with blocking queries on
// /v1/health/service/<name>?passing.
//
// # URLs
//
//	consul://127.0.0.1:8500?token=…&dc=dc1&check=ttl&deregister_after=1m
//	consuls://consul.internal:8501?ca_file=/etc/consul/ca.pem   (HTTPS)
//
// A missing host is 127.0.0.1, a missing port 8500 (8501 with TLS). The
// options are read with backend.Query, as on every backend: an unknown or
// repeated option, a bad value, or a URL without "//" (consul:host:8500,
// which would otherwise mean the local agent) is an error wrapping
// driver.ErrInvalid that names the option and never shows the token.
// Query parameters (all optional):
//
//	token             ACL token, sent as X-Consul-Token (never in errors);
//	                  token_file reads it from a file; defaults to
//	                  CONSUL_HTTP_TOKEN / CONSUL_HTTP_TOKEN_FILE
//	dc                datacenter for reads and writes (default: the agent's)
//	check             ttl (default) or http
//	deregister_after  DeregisterCriticalServiceAfter, ≥ 1m (default 1m)
//	http_path         path the agent polls with check=http (default /healthz)
//	http_interval     polling interval with check=http, ≥ 1s (default 10s)
//	http_timeout      probe timeout with check=http (default 2s)
//	wait              blocking-query wait, 1s–10m (default 30s)
//	timeout           deadline of one request other than a blocking query (default 10s)
//	stale             true: reads may be answered by any server (AllowStale)
//	max_conns         connections for calls other than blocking queries (default 64)
//	max_watch_conns   connections for blocking queries, one per watched service (default 64)
//	tls, ca_file, cert_file, key_file, server_name, skip_verify
//	                  TLS, as on every backend (backend.Query.TLS); consuls://
//	                  is tls=true. tls_server_name and tls_skip_verify are
//	                  deprecated spellings of server_name and skip_verify.
//
// # What the TTL means here
//
// With check=ttl (the default) every registration carries a Consul TTL
// check created passing, whose TTL is the lease TTL. The lease renews it
// with UpdateTTL every TTL/3. If the process stops renewing (a crash), the
// agent marks the check critical when the TTL runs out and the instance
// leaves every ?passing result — Lookup and Watch — within TTL plus a few
// milliseconds. It stays in Consul's catalog, critical, until
// DeregisterCriticalServiceAfter (≥ 1 minute) plus up to 30 s of reaper
// interval: Consul's floor, which no client can lower.
//
// With check=http the agent polls http://<instance address><http_path>
// like the PHP article's /healthz check; the instance starts critical and
// is listed once a probe passes. The lease TTL then only sets how often the
// lease confirms (TTL/3) that the agent still holds the registration, and
// re-registers it if not; liveness is the HTTP check's business
// (interval + timeout).
//
// Limits: TTLs from 1s, millisecond granularity (the agent's TTL timer has
// no floor; 1s keeps the heartbeat at ≥ 333ms so the agent is not polled
// in a tight loop).
//
// # Connections and retries
//
// Consul answers 429 Too Many Requests past
// limits.http_max_conns_per_client concurrent connections from one client
// IP (default 200), and it does so before reading the request. The driver
// therefore keeps two bounded pools of its own:
//
//   - max_conns (default 64) for every call but blocking queries:
//     registrations, heartbeats, updates, deregistrations, Lookup and the
//     other reads. Calls beyond it wait for a free connection, bounded by
//     their context only; timeout bounds each request once it has one. A
//     quarter of it is kept for heartbeats: a burst of registrations never
//     delays a renewal past its TTL.
//   - max_watch_conns (default 64) for blocking queries, so watches cannot
//     starve the heartbeats. The watches of a driver, however many
//     services, share two catalog-wide blocking queries (health/state/any
//     and catalog/services, see hub.go) and read a service only when its
//     checks changed, at most 8 at a time: 1,000 watched services hold
//     about 10 connections.
//
// With the defaults one driver uses at most 128 connections, leaving 72 of
// the agent's default 200 for the other clients on the same address. Run
// one driver (one Registry) per process, or lower the budgets, when
// several share an IP address, or raise the agent's limit.
//
// Writes — register, heartbeat, update, deregister — are idempotent and are
// retried with short jittered backoff (50ms doubling to 1s) when the agent
// answers 429 or 5xx or cannot be reached (connection refused or reset,
// attempt timed out): register, heartbeat and update within the caller's
// context and timeout, a heartbeat never past the TTL (renewing after it
// would revive a critical check), and deregister until its context ends,
// so that a deregistration is never lost to a busy or restarting agent. A
// failure that persists is driver.ErrUnavailable; 404 (and the 500
// "does not have associated TTL") is driver.ErrNotFound at once.
//
// # Other guarantees
//
//   - A heartbeat answered 404 "Unknown check ID" (or the 500 "does not have
//     associated TTL" of old agents) means the agent lost the registration
//     (agent restarted without its data, deregistered by hand, reaped): it
//     is reported as driver.ErrNotFound and the lease registers again.
//   - Deregistration is by the instance's unique ID only, so two instances
//     of one service never remove each other.
//   - Watches are blocking queries with their own loop: the index is reset
//     to 0 (one non-blocking read) when it goes backwards, never sent below
//     1, and the loop is rate-limited (token bucket, burst 5, 20/s), so a
//     storm of wake-ups cannot become a busy loop. The HTTP timeout of a
//     blocking call is wait + wait/16 + 5s. A failed call is reported as
//     driver.ErrUnavailable: the registry marks its cache stale and
//     reopens the watch with backoff, without restarting anything.
//   - Fields: Version, Zone and Weight travel in one Service.Meta key,
//     roster_fields ("<weight>,<len(version)>,<version><zone>"), so that
//     they cost one of Consul's 64 Meta pairs (backend.MaxMetadataPairs is
//     63); the weight is also Weights.Passing (1 when drained) for DNS.
//     Tags and the address are Consul's own; user metadata is the rest of
//     Meta. Instances
//     registered by other tools are listed too: their Meta is their
//     metadata, and Meta.weight (the PHP article's payload) is their
//     weight (DefaultWeight when absent or not a number).
//   - Registration is through the agent, which syncs to the catalog
//     asynchronously (normally at once): a write reaches Lookup in
//     milliseconds on a healthy cluster, with no read-your-writes promise.
package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry/driver"
)

// Schemes of this backend: plain HTTP and HTTPS.
const (
	scheme    = "consul"
	schemeTLS = "consuls"
)

func init() {
	open := func(_ context.Context, u *url.URL) (driver.Driver, error) {
		o, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return NewDriver(o)
	}
	driver.Register(scheme, open, publicOptions...)
	driver.Register(schemeTLS, open, publicOptions...)
}

// Driver is a driver.Driver talking to one Consul agent.
type Driver struct {
	o      Options
	secret string // the effective token (URL or environment), scrubbed from errors

	// Two pools, so that blocking queries never starve the writes: calls
	// for everything else, watch for blocking queries. Each gate admits as
	// many requests as its transport has connections; bulk admits all calls
	// but heartbeats to three quarters of calls, so that heartbeats always
	// find a connection, however many registrations are queued.
	client, watchClient  *api.Client
	transports           []*http.Transport
	calls, bulk, watches gate
	hub                  *hub // the watches' catalog-wide queries

	// life ends with Close: it unblocks watches and retries, and cancels
	// the requests still running, which inflight counts.
	life     context.Context
	stop     context.CancelFunc
	inflight sync.WaitGroup

	ports backend.PortCheck // TLS to the agent: checked after a failure (wrap)
}

// NewDriver returns a driver for the agent described by o. It does not
// contact the agent: an unreachable agent is an ErrUnavailable on first
// use. Wrap it with registry.New, or use registry.Open with a URL.
func NewDriver(o Options) (*Driver, error) {
	o.defaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	d := &Driver{
		o:       o,
		calls:   make(gate, o.MaxConns),
		bulk:    make(gate, max(o.MaxConns-o.MaxConns/4, 1)),
		watches: make(gate, o.MaxWatchConns),
	}
	d.life, d.stop = context.WithCancel(context.Background())
	d.hub = newHub(d)
	var err error
	if d.client, err = d.newClient(o.MaxConns); err != nil {
		return nil, err
	}
	if d.watchClient, err = d.newClient(o.MaxWatchConns); err != nil {
		return nil, err
	}
	if cfg := d.transports[0].TLSClientConfig; o.TLS && cfg != nil {
		// A failure below HTTP over HTTPS gets a handshake of the
		// driver's own: TLS 1.3 delivers the agent's refusal of the client
		// certificate after the handshake, and HTTP/2 drops it. With h2
		// the agent speaks first (its settings), so an accepted client
		// certificate is known at once rather than after the wait.
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		d.ports.Addrs, d.ports.TLS = []string{o.Address}, cfg
	}
	return d, nil
}

// newClient returns an API client whose transport holds at most conns
// connections to the agent, all kept for reuse: a driver never opens more
// than its budget, nor churns through connections under load.
func (d *Driver) newClient(conns int) (*api.Client, error) {
	o := d.o
	cfg := api.DefaultConfig() // honours CONSUL_HTTP_TOKEN(_FILE) for what o leaves unset
	cfg.Address = o.Address
	cfg.Scheme = "http"
	if o.TLS {
		cfg.Scheme = "https"
	}
	cfg.Datacenter = o.Datacenter
	if o.Token != "" {
		cfg.Token = o.Token
	}
	cfg.TLSConfig = api.TLSConfig{
		Address: o.TLSServerName, CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile,
		InsecureSkipVerify: o.TLSSkipVerify,
	}
	tr := cfg.Transport // a pooled transport of its own
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.TLSConfig != nil {
		tr.TLSClientConfig = o.TLSConfig.Clone() // NewHttpClient keeps it
	}
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.MaxIdleConns = conns, conns, conns
	hc, err := api.NewHttpClient(tr, cfg.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: TLS configuration: %v", driver.ErrInvalid, err)
	}
	// The last line of defence for every call: above the longest blocking
	// query (wait + Consul's wait/16 jitter) with slack, so a blocking
	// query is never cut by its own client.
	hc.Timeout = o.Wait + o.Wait/16 + 5*time.Second
	cfg.HttpClient = hc
	cfg.Transport = tr
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: %w", driver.ErrInvalid, backend.Redacted(err, cfg.Token))
	}
	// NewClient filled cfg.Token from the environment if the URL had none.
	d.secret = cfg.Token
	d.transports = append(d.transports, tr)
	return c, nil
}

// Client returns the underlying Consul API client, for what Roster does
// not cover (KV, sessions…). It shares the driver's connections for calls
// (max_conns) but not their gate: its requests queue in the transport.
func (d *Driver) Client() *api.Client { return d.client }

// Limits implements driver.Driver: TTLs from 1s, millisecond
// granularity. See the package doc for what the TTL means.
func (d *Driver) Limits() driver.Limits {
	return driver.Limits{MinTTL: time.Second, TTLGranularity: time.Millisecond}
}

// Close implements driver.Driver: pending watches return ErrClosed,
// requests still running are cancelled and waited for, and idle
// connections are closed. The agent keeps what was registered
// (Registry.Close deregisters its leases before closing the driver).
func (d *Driver) Close() error {
	d.stop()
	d.hub.wait()
	d.inflight.Wait()
	for _, tr := range d.transports {
		tr.CloseIdleConnections()
	}
	return nil
}

// call runs one request other than a blocking query or a heartbeat, on the
// calls pool, within the driver's timeout. It returns when the request
// started.
func (d *Driver) call(ctx context.Context, req func(ctx context.Context) error) (time.Time, error) {
	return d.run(ctx, []gate{d.bulk, d.calls}, d.o.Timeout, req)
}

// renew runs a heartbeat like call, but past the bulk gate: a renewal is
// due within the TTL and must not queue behind a thousand registrations.
func (d *Driver) renew(ctx context.Context, req func(ctx context.Context) error) (time.Time, error) {
	return d.run(ctx, []gate{d.calls}, d.o.Timeout, req)
}

// run runs req on one connection of the pool that the last of gates
// guards, having passed each of gates in turn: it waits for a free one
// (bounded by ctx only, so that queueing never eats into the request's
// own timeout), then runs req within timeout. It returns when req started
// and what it returned, or ctx's error as soon as ctx ends.
//
// The request itself is not cancelled with ctx: it goes on, holding its
// connection, until the agent answers, timeout passes or the driver
// closes. The agent counts a connection against
// limits.http_max_conns_per_client until its handler returns, and a
// cancelled HTTP/1.1 request closes its connection while the handler
// (a heartbeat queued behind others, a blocking query waiting out its
// wait) goes on: a client that cancels and dials again would hold more
// of the agent's slots than it has connections, and be answered 429.
// Letting it finish also spares a busy agent from doing the work twice.
func (d *Driver) run(ctx context.Context, gates []gate, timeout time.Duration, req func(ctx context.Context) error) (time.Time, error) {
	leave := func(n int) {
		for _, g := range gates[:n] {
			g.leave()
		}
	}
	for i, g := range gates {
		if err := g.enter(ctx, d.life.Done()); err != nil {
			leave(i)
			return time.Time{}, err
		}
	}
	if err := ctx.Err(); err != nil { // a gate may have had both choices
		leave(len(gates))
		return time.Time{}, err
	}
	start := time.Now()
	errc := make(chan error, 1)
	d.inflight.Add(1)
	go func() {
		defer d.inflight.Done()
		defer leave(len(gates))
		rctx, cancel := context.WithTimeout(d.life, timeout)
		defer cancel()
		errc <- req(rctx)
	}()
	select {
	case err := <-errc:
		return start, err
	case <-ctx.Done():
		return start, ctx.Err()
	case <-d.life.Done():
		return start, fmt.Errorf("consul: %w", driver.ErrClosed)
	}
}

// gate admits as many requests at a time as it has room: one per
// connection of its pool, so that a request never waits for a connection
// inside its own timeout.
type gate chan struct{}

func (g gate) enter(ctx context.Context, closed <-chan struct{}) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return fmt.Errorf("consul: %w", driver.ErrClosed)
	}
}

func (g gate) leave() { <-g }

func (d *Driver) query(ctx context.Context) *api.QueryOptions {
	q := &api.QueryOptions{Datacenter: d.o.Datacenter, AllowStale: d.o.AllowStale}
	return q.WithContext(ctx)
}

// wrap names the operation and hides the token. ErrorKind classifies
// the result. A failure below HTTP may be TLS to the agent that does not
// match its port: then the PortCheck diagnosis, an ErrInvalid naming the
// address, replaces it. An error that wraps a sentinel already (the
// driver's own knowledge) is returned as is.
func (d *Driver) wrap(ctx context.Context, op string, err error) error {
	if isRegistryError(err) {
		return err
	}
	var se api.StatusError
	cause, tlsFailed := backend.TLSCause(err)
	switch {
	case tlsFailed:
		err = explained{cause, err}
	case errors.As(err, &se) && se.Code == http.StatusForbidden:
		err = fmt.Errorf("permission denied (check the ACL token): %w", err)
	case !errors.As(err, &se) && ctx.Err() == nil:
		if terr := d.ports.Diagnose(); terr != nil {
			return fmt.Errorf("consul: %s: %w", op, terr)
		}
	}
	return fmt.Errorf("consul: %s: %w", op, backend.Redacted(err, d.o.Token, d.secret))
}

// ErrorKind implements driver.Driver. 404 is ErrNotFound, as is the 500
// by which old agents say a check is unknown (lostCheck). 400, 413 and 403
// are ErrInvalid: a request the agent rejects, or a token that lacks the
// right, will not pass by retrying. So is a TLS misconfiguration
// (backend.TLSCause). Anything else (refused connections, timeouts, 429,
// 5xx) is ErrUnavailable.
func (d *Driver) ErrorKind(err error) error {
	if _, ok := backend.TLSCause(err); ok {
		return driver.ErrInvalid
	}
	var se api.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Code == http.StatusNotFound || lostCheck(se):
			return driver.ErrNotFound
		case se.Code == http.StatusBadRequest, se.Code == http.StatusRequestEntityTooLarge, se.Code == http.StatusForbidden:
			return driver.ErrInvalid
		}
	}
	return driver.ErrUnavailable
}

func isRegistryError(err error) bool {
	for _, target := range []error{driver.ErrNotFound, driver.ErrInvalid, driver.ErrUnavailable, driver.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// lostCheck recognises old agents' way of saying "unknown check": a 500
// "CheckID … does not have associated TTL".
func lostCheck(se api.StatusError) bool {
	return se.Code == http.StatusInternalServerError && strings.Contains(se.Body, "does not have associated TTL")
}

// explained is an error with a clearer text than its cause's.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }
