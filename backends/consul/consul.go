// Package consul is Roster's Consul backend. Import it for its side
// effect and open a registry by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/consul"
//
//	reg, err := registry.Open(ctx, "consul://127.0.0.1:8500?dc=dc1")
//
// Use consuls:// for HTTPS. [NewDriver] builds a driver from [Options]
// instead, and [ParseURL] reads them from a URL.
//
// Instances register through the local Consul agent, each with a health
// check. Lookups and watches read /v1/health/service/<name>?passing. A
// missing host is 127.0.0.1, a missing port 8500, or 8501 with TLS.
//
// The token comes from the option token or token_file, else from
// CONSUL_HTTP_TOKEN or CONSUL_HTTP_TOKEN_FILE. It never shows in errors.
// Options use the vocabulary every backend shares. An unknown option, or
// one given twice, is an error.
//
// With check=ttl, the default, the lease renews a TTL check every TTL/3.
// A crashed instance leaves every ?passing answer one TTL after its last
// heartbeat. It stays in the catalog, critical, until deregister_after
// (at least one minute) and Consul's reaper pass. With check=http the
// agent polls the instance instead.
//
// The driver keeps two bounded connection pools, max_conns and
// max_watch_conns, 64 each by default. Consul's default limit is 200
// connections per client address, so run one driver per process. All
// watches share two catalog-wide blocking queries. Writes are retried
// with backoff when the agent is busy or unreachable.
//
// docs/backends/consul.md has every option, what is stored, the timings
// and the failure modes.
//
// Errors wrap registry.ErrUnavailable, ErrNotFound, ErrInvalid or
// ErrClosed.
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

// Local reports whether the agent is on this host: then loopback
// addresses are served (see registry.AllowLoopback).
func (d *Driver) Local() bool { return backend.LocalHosts(d.o.Address) }

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
		err = backend.Explain(cause, err)
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
