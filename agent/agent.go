package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// Config configures an Agent. Zero fields take the defaults.
type Config struct {
	// Registry is where the agent discovers and registers. Required; the
	// agent does not own it (close the Agent first, then the Registry).
	Registry *registry.Registry
	// Strategy is the strategy of picks that name none (default: the
	// selector package's default).
	Strategy selector.Strategy
	// Quarantine tunes local outlier ejection, per strategy in use.
	Quarantine middleware.QuarantineConfig
	// Zone is the host's zone: picks prefer its instances and fail over
	// to the others as their quarantine ejects them
	// (selector.WithLocality). Region (which needs Zone) is the host's
	// region: a zone fails over to the rest of its region first
	// (selector.WithRegion). Empty: no locality preference.
	Zone, Region string
	// MaxStaleness bounds how long picks are served from a stale list
	// while the registry fails (default 0: for the whole outage, as
	// middleware.Client).
	MaxStaleness time.Duration
	// SnapshotDir persists each service's last good list, so an agent
	// that starts during an outage still answers (default: none).
	SnapshotDir string
	// TokenTTL is how long a pick's token waits for its report; an
	// unreported token then counts as an aborted call (default 1 minute).
	// The pick holds its instance's in-flight count for at most
	// selector.DefaultInflightBound, whatever the TTL.
	TokenTTL time.Duration
	// MaxTokens bounds the tokens waiting for a report; past it the
	// oldest expires early (default 65536).
	MaxTokens int
	// MaxServices bounds the services the agent follows for its clients
	// (default 1024); a request for one more fails with 429.
	MaxServices int
	// ServiceIdle is how long the agent follows a service that no pick
	// and no long poll asked for (default 5 minutes). Then it stops, so
	// names asked for once do not hold a place in MaxServices for good.
	// The services of templates are followed for good.
	ServiceIdle time.Duration
	// InstanceMetrics adds /metrics series by instance ID
	// (middleware.WithInstanceMetrics). Off by default: IDs are new at
	// every restart. An instance's series end when it leaves.
	InstanceMetrics bool

	// The connection bounds of Server and Listener. ReadTimeout bounds
	// reading a request, headers and body (default 30 seconds); a
	// trickling client is cut off then. WriteTimeout bounds writing an
	// answer once it is due (default 30 seconds; a long poll's answer is
	// due when its wait ends). IdleTimeout bounds a kept-alive connection
	// between requests (default 2 minutes). MaxConns caps the connections
	// open at a time (default 1024).
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	MaxConns     int

	// Logger receives the registry's up and down transitions, once per
	// transition, and every operator action (default: slog.Default()).
	Logger *slog.Logger
	// AllowActions enables the operator actions of the console and of
	// POST /v1/actions/{action} (drain, weight, maint, restore,
	// deregister). Off by default: without it they answer 403.
	AllowActions bool
	// ProbeInterval is how often the agent asks the registry for its
	// service list, for the console's catalog and to tell it is up
	// (default 5 seconds).
	ProbeInterval time.Duration

	// XDS is the address of the xDS (ADS) server for Envoy and
	// proxyless gRPC: host:port or unix:/path (default empty: off). It
	// must be a loopback address or a Unix socket unless XDSAllowRemote
	// is set: the agent serves its host. XDSMaxStreams caps the xDS
	// streams open at a time (default 1024). See docs/agent.md.
	XDS            string
	XDSAllowRemote bool
	XDSMaxStreams  int

	// DNS is the address (host:port, UDP and TCP) of a DNS server of the
	// usable instances; empty: none. See docs/agent.md section "DNS".
	// It must be a loopback address unless DNSAllowRemote is set.
	DNS            string
	DNSAllowRemote bool
	// DNSDomain is the domain the DNS server answers for (default
	// "roster."); DNSTTL the TTL of its records (default 5 seconds, at
	// most an hour); DNSRate the queries per second one source address
	// may send (default 2000; negative: no limit).
	DNSDomain string
	DNSTTL    time.Duration
	DNSRate   int
}

func (c Config) withDefaults() Config {
	if c.TokenTTL <= 0 {
		c.TokenTTL = time.Minute
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = 1 << 16
	}
	if c.MaxServices <= 0 {
		c.MaxServices = 1024
	}
	if c.ServiceIdle <= 0 {
		c.ServiceIdle = 5 * time.Minute
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 5 * time.Second
	}
	if c.XDSMaxStreams <= 0 {
		c.XDSMaxStreams = 1024
	}
	return c
}

// Agent serves discovery, picks and local registrations over HTTP. It is
// an http.Handler; see the package documentation for the API.
type Agent struct {
	cfg     Config
	reg     *registry.Registry
	mux     *http.ServeMux
	metrics *metrics
	tokens  *tokens
	stats   *stats
	events  *broadcast
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	clients map[selector.Strategy]*middleware.Client
	// quarantines holds each client's quarantine, for the dashboard.
	quarantines map[selector.Strategy]*middleware.Quarantine
	views       map[string]*view
	locals      map[string]*local
	reserved    int      // registrations under way, counted against MaxServices
	svcList     []string // last answer of the registry's service list
	svcAt       time.Time
	svcErr      string              // why the last listing failed
	overrides   []registry.Override // the operators' overrides, read with the catalog

	health  *health
	history *history
	act     actioner
	xds     *xds       // nil unless Config.XDS
	dns     *dnsServer // nil without Config.DNS
}

// errTooMany is returned when a bound of the Config is reached.
var errTooMany = errors.New("agent: too many")

// New returns an Agent over cfg.Registry. Close it to stop following
// services, expire pending tokens and deregister local processes.
func New(cfg Config) (*Agent, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("%w: agent: Config.Registry is nil", registry.ErrInvalid)
	}
	cfg = cfg.withDefaults()
	if cfg.Strategy == "" {
		cfg.Strategy = selector.DefaultStrategy
	}
	if _, err := selector.New(selector.WithStrategy(cfg.Strategy)); err != nil {
		return nil, err
	}
	if err := cfg.checkLocality(); err != nil {
		return nil, err
	}
	var xdsLn net.Listener
	if cfg.XDS != "" {
		ln, err := listenXDS(cfg)
		if err != nil {
			return nil, err
		}
		xdsLn = ln
	}
	if err := cfg.checkDNS(); err != nil {
		return nil, err
	}
	m, err := newMetrics()
	if err != nil {
		if xdsLn != nil {
			xdsLn.Close()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{cfg: cfg, reg: cfg.Registry, metrics: m, stats: newStats(), events: newBroadcast(),
		ctx: ctx, cancel: cancel,
		clients: map[selector.Strategy]*middleware.Client{}, quarantines: map[selector.Strategy]*middleware.Quarantine{}, views: map[string]*view{}, locals: map[string]*local{}}
	a.tokens = newTokens(cfg.TokenTTL, cfg.MaxTokens, a.expire)
	a.health = &health{log: cfg.Logger, name: a.reg.String()}
	a.history = newHistory()
	a.act = overrideActioner{a: a, local: localActioner{a}}
	m.observe(a)
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.probe(ctx) }()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.tokens.sweep(ctx) }()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.evictIdle(ctx) }()
	a.routes()
	if xdsLn != nil {
		a.xds = a.startXDS(xdsLn)
	}
	if cfg.DNS != "" {
		if a.dns, err = startDNS(a); err != nil {
			_ = a.Close()
			return nil, err
		}
	}
	return a, nil
}

// ServeHTTP serves the agent's API, metrics and dashboard to the
// programs of its host, and refuses web pages (see foreign).
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if reason := foreign(r); reason != "" {
		writeJSON(w, http.StatusForbidden, apiError{Error: reason, Code: "forbidden"})
		return
	}
	a.mux.ServeHTTP(w, r)
}

// Close deregisters the local processes, expires every pending token,
// stops following services and ends open long polls and event streams.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	locals, views, clients := a.locals, a.views, a.clients
	a.locals, a.views, a.clients = map[string]*local{}, map[string]*view{}, map[selector.Strategy]*middleware.Client{}
	a.quarantines = map[selector.Strategy]*middleware.Quarantine{}
	a.mu.Unlock()
	if a.xds != nil {
		a.xds.stop()
	}
	if a.dns != nil {
		a.dns.stop()
	}
	var errs []error
	for _, l := range locals {
		errs = append(errs, l.stop(context.Background()))
	}
	a.cancel()
	a.wg.Wait()
	a.tokens.expireAll()
	for _, v := range views {
		v.stop()
	}
	for _, c := range clients {
		errs = append(errs, c.Close())
	}
	a.events.close()
	errs = append(errs, a.metrics.close())
	return errors.Join(errs...)
}

// client returns the middleware.Client serving picks with strategy s,
// creating it on first use. There is at most one per strategy.
func (a *Agent) client(s selector.Strategy) (*middleware.Client, error) {
	if s == "" {
		s = a.cfg.Strategy
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("agent: %w", registry.ErrClosed)
	}
	if c, ok := a.clients[s]; ok {
		return c, nil
	}
	q := middleware.NewQuarantine(a.cfg.Quarantine)
	opts := []middleware.Option{
		middleware.WithSelector(selector.WithStrategy(s)),
		middleware.WithQuarantine(q),
		middleware.WithMaxStaleness(a.cfg.MaxStaleness),
		middleware.WithMeterProvider(a.metrics.provider),
	}
	if a.cfg.Zone != "" {
		opts = append(opts, middleware.WithSelector(selector.WithLocality(a.cfg.Zone), selector.WithRegion(a.cfg.Region)))
	}
	if a.cfg.SnapshotDir != "" {
		opts = append(opts, middleware.WithSnapshotDir(a.cfg.SnapshotDir))
	}
	if a.cfg.InstanceMetrics {
		opts = append(opts, middleware.WithInstanceMetrics())
	}
	c, err := middleware.NewClient(a.reg, opts...)
	if err != nil {
		return nil, err
	}
	a.clients[s], a.quarantines[s] = c, q
	return c, nil
}

// maxLocalityLen is the longest zone or region, the registry's limit.
const maxLocalityLen = 128

// checkLocality checks Zone and Region as the registry checks an
// instance's: printable, at most 128 bytes; Region needs Zone.
func (c Config) checkLocality() error {
	for _, f := range []struct{ name, v string }{{"Zone", c.Zone}, {"Region", c.Region}} {
		if len(f.v) > maxLocalityLen {
			return fmt.Errorf("%w: agent: Config.%s: %d bytes, at most %d allowed", registry.ErrInvalid, f.name, len(f.v), maxLocalityLen)
		}
		if !utf8.ValidString(f.v) || strings.IndexFunc(f.v, unicode.IsControl) >= 0 {
			return fmt.Errorf("%w: agent: Config.%s %q: not printable text", registry.ErrInvalid, f.name, f.v)
		}
	}
	if c.Region != "" && c.Zone == "" {
		return fmt.Errorf("%w: agent: Config.Region %q needs a Config.Zone", registry.ErrInvalid, c.Region)
	}
	return nil
}
