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
// Query parameters (all optional):
//
//	token             ACL token, sent as X-Consul-Token (never in errors);
//	                  defaults to CONSUL_HTTP_TOKEN / CONSUL_HTTP_TOKEN_FILE
//	dc                datacenter for reads and writes (default: the agent's)
//	check             ttl (default) or http
//	deregister_after  DeregisterCriticalServiceAfter, ≥ 1m (default 1m)
//	http_path         path the agent polls with check=http (default /healthz)
//	http_interval     polling interval with check=http, ≥ 1s (default 10s)
//	http_timeout      probe timeout with check=http (default 2s)
//	wait              blocking-query wait, 1s–10m (default 30s)
//	timeout           deadline of non-blocking calls (default 10s)
//	stale             true: reads may be answered by any server (AllowStale)
//	ca_file, cert_file, key_file, tls_server_name, tls_skip_verify   TLS
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
// # Other guarantees
//
//   - A heartbeat answered 404 "Unknown check ID" (or the 500 "does not have
//     associated TTL" of old agents) means the agent lost the registration
//     (agent restarted without its data, deregistered by hand, reaped): it
//     is reported as registry.ErrNotFound and the lease registers again.
//   - Deregistration is by the instance's unique ID only, so two instances
//     of one service never remove each other.
//   - Watches are blocking queries with their own loop: the index is reset
//     to 0 (one non-blocking read) when it goes backwards, never sent below
//     1, and the loop is rate-limited (token bucket, burst 5, 20/s), so a
//     storm of wake-ups cannot become a busy loop. The HTTP timeout of a
//     blocking call is wait + wait/16 + 5s. A failed call is reported as
//     registry.ErrUnavailable: the registry marks its cache stale and
//     reopens the watch with backoff, without restarting anything.
//   - Fields: Version, Zone and Weight travel in Service.Meta under
//     roster_version, roster_zone and roster_weight; Tags and the address
//     are Consul's own; user metadata is the rest of Meta. Instances
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
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry"
)

// Schemes of this backend: plain HTTP and HTTPS.
const (
	Scheme    = "consul"
	SchemeTLS = "consuls"
)

func init() {
	open := func(_ context.Context, u *url.URL) (registry.Driver, error) {
		o, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return NewDriver(o)
	}
	registry.RegisterDriver(Scheme, open)
	registry.RegisterDriver(SchemeTLS, open)
}

// Check types.
const (
	CheckTTL  = "ttl"
	CheckHTTP = "http"
)

// MinDeregisterAfter is Consul's floor for DeregisterCriticalServiceAfter:
// lower values are silently raised by the agent, so they are rejected here.
const MinDeregisterAfter = time.Minute

// Options configure a Driver. ParseURL fills them from a URL.
type Options struct {
	Address    string // host:port of the agent's HTTP API
	TLS        bool   // HTTPS (consuls://)
	Token      string
	Datacenter string

	Check           string        // CheckTTL (default) or CheckHTTP
	DeregisterAfter time.Duration // ≥ MinDeregisterAfter; default 1m
	HTTPPath        string        // default /healthz
	HTTPInterval    time.Duration // default 10s
	HTTPTimeout     time.Duration // default 2s

	Wait       time.Duration // blocking-query wait; default 30s
	Timeout    time.Duration // non-blocking calls; default 10s
	AllowStale bool

	CAFile, CertFile, KeyFile, TLSServerName string
	TLSSkipVerify                            bool
}

func (o *Options) defaults() {
	if o.Check == "" {
		o.Check = CheckTTL
	}
	if o.DeregisterAfter == 0 {
		o.DeregisterAfter = MinDeregisterAfter
	}
	if o.HTTPPath == "" {
		o.HTTPPath = "/healthz"
	}
	if o.HTTPInterval == 0 {
		o.HTTPInterval = 10 * time.Second
	}
	if o.HTTPTimeout == 0 {
		o.HTTPTimeout = 2 * time.Second
	}
	if o.Wait == 0 {
		o.Wait = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
}

func (o *Options) validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("consul: %w: %s", registry.ErrInvalid, fmt.Sprintf(f, a...))
	}
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		return bad("agent address %q is not host:port", o.Address)
	}
	switch o.Check {
	case CheckTTL, CheckHTTP:
	default:
		return bad("check=%q: want ttl or http", o.Check)
	}
	if o.DeregisterAfter < MinDeregisterAfter {
		return bad("deregister_after=%v: Consul's minimum is 1m (lower values are raised by the agent, and its reaper runs every 30s)", o.DeregisterAfter)
	}
	if !strings.HasPrefix(o.HTTPPath, "/") {
		return bad("http_path=%q must start with /", o.HTTPPath)
	}
	if o.HTTPInterval < time.Second {
		return bad("http_interval=%v: Consul's minimum check interval is 1s", o.HTTPInterval)
	}
	if o.HTTPTimeout <= 0 {
		return bad("http_timeout=%v must be positive", o.HTTPTimeout)
	}
	if o.Wait < time.Second || o.Wait > 10*time.Minute {
		return bad("wait=%v: want 1s to 10m (Consul caps blocking waits at 10m)", o.Wait)
	}
	if o.Timeout <= 0 {
		return bad("timeout=%v must be positive", o.Timeout)
	}
	return nil
}

// ParseURL reads Options from a consul:// or consuls:// URL. A missing
// port is 8500 (consul) or 8501 (consuls).
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	bad := func(f string, a ...any) (Options, error) {
		return Options{}, fmt.Errorf("consul: %w: %s", registry.ErrInvalid, fmt.Sprintf(f, a...))
	}
	switch strings.ToLower(u.Scheme) {
	case Scheme:
	case SchemeTLS:
		o.TLS = true
	default:
		return bad("scheme %q: want consul or consuls", u.Scheme)
	}
	if u.User != nil {
		return bad("credentials in the URL's user part are not used; pass token=")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("the URL takes no path")
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if u.Port() == "" {
		port := "8500"
		if o.TLS {
			port = "8501"
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), port)
	}
	o.Address = host
	q := u.Query()
	dur := func(name string, dst *time.Duration) error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("consul: %w: %s=%q is not a duration", registry.ErrInvalid, name, v)
		}
		*dst = d
		return nil
	}
	boolean := func(name string, dst *bool) error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("consul: %w: %s=%q is not a boolean", registry.ErrInvalid, name, v)
		}
		*dst = b
		return nil
	}
	known := []string{"token", "dc", "check", "deregister_after", "http_path", "http_interval", "http_timeout",
		"wait", "timeout", "stale", "ca_file", "cert_file", "key_file", "tls_server_name", "tls_skip_verify"}
	for k := range q {
		if !slices.Contains(known, k) {
			return bad("unknown parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	o.Token = q.Get("token")
	o.Datacenter = q.Get("dc")
	o.Check = strings.ToLower(q.Get("check"))
	o.HTTPPath = q.Get("http_path")
	o.CAFile, o.CertFile, o.KeyFile = q.Get("ca_file"), q.Get("cert_file"), q.Get("key_file")
	o.TLSServerName = q.Get("tls_server_name")
	for _, err := range []error{
		dur("deregister_after", &o.DeregisterAfter), dur("http_interval", &o.HTTPInterval),
		dur("http_timeout", &o.HTTPTimeout), dur("wait", &o.Wait), dur("timeout", &o.Timeout),
		boolean("stale", &o.AllowStale), boolean("tls_skip_verify", &o.TLSSkipVerify),
	} {
		if err != nil {
			return Options{}, err
		}
	}
	if !o.TLS && (o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.TLSServerName != "" || o.TLSSkipVerify) {
		return bad("TLS parameters need the consuls:// scheme")
	}
	o.defaults()
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Driver is a registry.Driver talking to one Consul agent.
type Driver struct {
	o         Options
	client    *api.Client
	transport *http.Transport
	secret    string // the effective token (URL or environment), scrubbed from errors

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close: unblocks watches
}

// NewDriver returns a driver for the agent described by o. It does not
// contact the agent: an unreachable agent is an ErrUnavailable on first
// use. Wrap it with registry.New, or use registry.Open with a URL.
func NewDriver(o Options) (*Driver, error) {
	o.defaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
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
	tr := cfg.Transport // a pooled transport of its own, per driver
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	hc, err := api.NewHttpClient(tr, cfg.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: TLS configuration: %v", registry.ErrInvalid, err)
	}
	// The last line of defence for every call: above the longest blocking
	// query (wait + Consul's wait/16 jitter) with slack, so a blocking
	// query is never cut by its own client.
	hc.Timeout = o.Wait + o.Wait/16 + 5*time.Second
	cfg.HttpClient = hc
	cfg.Transport = tr
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: %s", registry.ErrInvalid, redact(err.Error(), cfg.Token))
	}
	// NewClient filled cfg.Token from the environment if the URL had none.
	return &Driver{o: o, client: c, transport: tr, secret: cfg.Token, done: make(chan struct{})}, nil
}

// Client returns the underlying Consul API client, for what Roster does
// not cover (KV, sessions…).
func (d *Driver) Client() *api.Client { return d.client }

// Options returns the driver's options (with the token).
func (d *Driver) Options() Options { return d.o }

// Limits implements registry.Driver: TTLs from 1s, millisecond
// granularity. See the package doc for what the TTL means.
func (d *Driver) Limits() registry.Limits {
	return registry.Limits{MinTTL: time.Second, TTLGranularity: time.Millisecond}
}

// Close implements registry.Driver: pending watches return ErrClosed and
// idle connections are closed. The agent keeps what was registered
// (Registry.Close deregisters its leases before closing the driver).
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
	d.transport.CloseIdleConnections()
	return nil
}

func (d *Driver) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("consul: %w", registry.ErrClosed)
	}
	return nil
}

// callCtx bounds a non-blocking call by the driver's timeout.
func (d *Driver) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.o.Timeout)
}

func (d *Driver) query(ctx context.Context) *api.QueryOptions {
	q := &api.QueryOptions{Datacenter: d.o.Datacenter, AllowStale: d.o.AllowStale}
	return q.WithContext(ctx)
}

// wrap maps a client error to the registry's sentinels: 404 is
// ErrNotFound, 400 ErrInvalid, 403 ErrInvalid (a token that lacks the
// right will not gain it by retrying), anything else — refused
// connections, timeouts, 5xx — ErrUnavailable. A context error of the
// caller is returned as is. The token never appears in the text.
func (d *Driver) wrap(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("consul: %s: %w", op, ctx.Err())
	}
	msg := redact(redact(err.Error(), d.o.Token), d.secret)
	var se api.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Code == http.StatusNotFound || lostCheck(se):
			return fmt.Errorf("consul: %s: %w: %s", op, registry.ErrNotFound, msg)
		case se.Code == http.StatusBadRequest:
			return fmt.Errorf("consul: %s: %w: %s", op, registry.ErrInvalid, msg)
		case se.Code == http.StatusForbidden:
			return fmt.Errorf("consul: %s: %w: permission denied (check the ACL token): %s", op, registry.ErrInvalid, msg)
		}
	}
	return fmt.Errorf("consul: %s: %w: %s", op, registry.ErrUnavailable, msg)
}

// lostCheck recognises old agents' way of saying "unknown check": a 500
// "CheckID … does not have associated TTL".
func lostCheck(se api.StatusError) bool {
	return se.Code == http.StatusInternalServerError && strings.Contains(se.Body, "does not have associated TTL")
}

func redact(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, "xxxxx")
}
