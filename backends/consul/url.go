package consul

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

// publicOptions are the URL options whose values are never secret, so
// urls.Redact may show them. token is secret; token_file and key_file
// hold paths, but their names look secret and Redact masks them whatever
// a backend declares.
var publicOptions = []string{"dc", "check", "deregister_after", "http_path", "http_interval", "http_timeout",
	"wait", "timeout", "stale", "max_conns", "max_watch_conns",
	"tls", "ca_file", "cert_file", "server_name", "skip_verify", "tls_server_name", "tls_skip_verify"}

// Check types.
const (
	CheckTTL  = "ttl"
	CheckHTTP = "http"
)

// The driver's default connection budget: 128 in all, well under the 200
// concurrent connections per client IP a Consul agent accepts by default
// (limits.http_max_conns_per_client). See the package doc.
const (
	defaultMaxConns      = 64
	defaultMaxWatchConns = 64
)

// minDeregisterAfter is Consul's floor for DeregisterCriticalServiceAfter:
// lower values are silently raised by the agent, so they are rejected here.
const minDeregisterAfter = time.Minute

// Options configure a Driver. ParseURL fills them from a URL.
type Options struct {
	Address    string // host:port of the agent's HTTP API
	TLS        bool   // HTTPS (consuls://, tls=true, or TLSConfig set)
	Token      string
	Datacenter string

	Check           string        // CheckTTL (default) or CheckHTTP
	DeregisterAfter time.Duration // ≥ 1m (Consul's floor); default 1m
	HTTPPath        string        // default /healthz
	HTTPInterval    time.Duration // default 10s
	HTTPTimeout     time.Duration // default 2s

	Wait       time.Duration // blocking-query wait; default 30s
	Timeout    time.Duration // one request other than a blocking query; default 10s
	AllowStale bool

	MaxConns      int // connections for calls other than blocking queries; default 64
	MaxWatchConns int // connections for blocking queries; default 64

	// TLSConfig is the HTTPS client configuration; ParseURL fills it from
	// the URL's TLS options. When set it implies TLS and the file fields
	// below are ignored.
	TLSConfig *tls.Config

	// Files and names for HTTPS when TLSConfig is nil, for Options built
	// by hand.
	CAFile, CertFile, KeyFile, TLSServerName string
	TLSSkipVerify                            bool
}

func (o *Options) defaults() {
	o.TLS = o.TLS || o.TLSConfig != nil
	o.Check = cmp.Or(o.Check, CheckTTL)
	o.DeregisterAfter = cmp.Or(o.DeregisterAfter, minDeregisterAfter)
	o.HTTPPath = cmp.Or(o.HTTPPath, "/healthz")
	o.HTTPInterval = cmp.Or(o.HTTPInterval, 10*time.Second)
	o.HTTPTimeout = cmp.Or(o.HTTPTimeout, 2*time.Second)
	o.Wait = cmp.Or(o.Wait, 30*time.Second)
	o.Timeout = cmp.Or(o.Timeout, 10*time.Second)
	o.MaxConns = cmp.Or(o.MaxConns, defaultMaxConns)
	o.MaxWatchConns = cmp.Or(o.MaxWatchConns, defaultMaxWatchConns)
}

func (o *Options) validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("consul: %w: %s", driver.ErrInvalid, fmt.Sprintf(f, a...))
	}
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		return bad("agent address %q is not host:port", o.Address)
	}
	switch o.Check {
	case CheckTTL, CheckHTTP:
	default:
		return bad("check=%q: want ttl or http", o.Check)
	}
	if o.DeregisterAfter < minDeregisterAfter {
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
	if o.MaxConns < 1 || o.MaxWatchConns < 1 {
		return bad("max_conns=%d, max_watch_conns=%d: want at least 1 each", o.MaxConns, o.MaxWatchConns)
	}
	return nil
}

// String formats the options with the token masked, so that logging them
// (%v, %+v, slog) never prints it.
func (o Options) String() string {
	type plain Options // no String method: formats field by field
	p := plain(o)
	if p.Token != "" {
		p.Token = "xxxxx"
	}
	return fmt.Sprintf("%+v", p)
}

// ParseURL reads Options from a consul:// or consuls:// URL with
// backend.Query, so options are spelled, read and rejected as on every
// backend (see the package doc for the list). A missing host is
// 127.0.0.1; a missing port is 8500, or 8501 with TLS.
func ParseURL(u *url.URL) (Options, error) {
	q, err := backend.ParseSchemeQuery("consul", u, scheme, schemeTLS)
	if err != nil {
		return Options{}, err
	}
	switch {
	case u.User != nil:
		return Options{}, backend.InvalidURL("consul", "credentials in the URL's user part are not used; pass token=")
	case u.Path != "" && u.Path != "/":
		return Options{}, backend.InvalidURL("consul", "the URL takes no path")
	}
	var o Options
	q.Secret("token", "CONSUL_HTTP_TOKEN", &o.Token)
	q.String("dc", &o.Datacenter)
	q.Enum("check", &o.Check, CheckTTL, CheckHTTP)
	q.Duration("deregister_after", &o.DeregisterAfter)
	q.String("http_path", &o.HTTPPath)
	q.Duration("http_interval", &o.HTTPInterval)
	q.Duration("http_timeout", &o.HTTPTimeout)
	q.Duration("wait", &o.Wait)
	q.Duration("timeout", &o.Timeout)
	q.Bool("stale", &o.AllowStale)
	q.Int("max_conns", &o.MaxConns)
	q.Int("max_watch_conns", &o.MaxWatchConns)
	cfg, tlsErr := readTLS(q, u)
	if err := cmp.Or(q.Err(), tlsErr); err != nil {
		return Options{}, err
	}
	o.TLSConfig = cfg
	o.Address = agentAddress(u, cfg != nil)
	o.defaults()
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// readTLS reads the shared TLS options (backend.Query.TLS; consuls:// turns
// TLS on) and two deprecated spellings that URLs written before them use:
// tls_server_name for server_name and tls_skip_verify for skip_verify.
// It returns nil when TLS is off. Its error is about the old spellings
// only: q.Err reports the rest, and comes first.
func readTLS(q *backend.Query, u *url.URL) (*tls.Config, error) {
	var name string
	var skip bool
	q.String("tls_server_name", &name)
	q.Bool("tls_skip_verify", &skip)
	cfg := q.TLS(strings.EqualFold(u.Scheme, schemeTLS))
	switch {
	case cfg == nil && (name != "" || skip):
		return nil, backend.InvalidURL("consul", "tls_server_name or tls_skip_verify given but TLS is off (use consuls:// or tls=true)")
	case cfg == nil:
		return nil, nil
	case name != "" && cfg.ServerName != "":
		return nil, backend.InvalidURL("consul", "options server_name and tls_server_name both given: keep server_name")
	}
	cfg.ServerName = cmp.Or(cfg.ServerName, name)
	cfg.InsecureSkipVerify = cfg.InsecureSkipVerify || skip
	return cfg, nil
}

// agentAddress is u's host:port, 127.0.0.1 and the default port for what
// u leaves out.
func agentAddress(u *url.URL, tls bool) string {
	port := "8500"
	if tls {
		port = "8501"
	}
	return net.JoinHostPort(cmp.Or(u.Hostname(), "127.0.0.1"), cmp.Or(u.Port(), port))
}
