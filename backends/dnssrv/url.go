package dnssrv

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	"github.com/miekg/dns"
)

// publicOptions are the URL options: none is secret.
var publicOptions = []string{"min_poll", "max_poll", "timeout", "udp", "endpoints", "endpoint_name"}

// resolvConf is where the system's resolvers are read from when the URL
// names none.
var resolvConf = "/etc/resolv.conf"

var openURL = backend.OpenWith(parseURL, New)

// parseURL turns a dns+srv:// URL into Options (see the package
// documentation for the form and options). Errors wrap driver.ErrInvalid
// and name the option.
func parseURL(u *url.URL) (Options, error) {
	var o Options
	q, err := backend.ParseSchemeQuery("dns+srv", u, Scheme)
	if err != nil {
		return o, err
	}
	q.Duration("min_poll", &o.MinPoll)
	q.Duration("max_poll", &o.MaxPoll)
	q.Duration("timeout", &o.Timeout)
	q.Bool("udp", &o.UDP)
	var eps string
	q.String("endpoints", &eps)
	if eps != "" {
		o.Endpoints = strings.Split(eps, ",")
	}
	q.String("endpoint_name", &o.EndpointName)
	if err := q.Err(); err != nil {
		return o, err
	}
	if u.User != nil {
		return o, invalid(u, "DNS has no credentials: remove the user info before the @")
	}
	if o.Name, err = name(u); err != nil {
		return o, err
	}
	o.Resolver, err = resolver(u)
	return o, err
}

// invalid is an ErrInvalid in the form backend.Query gives its own. It
// does not name the URL: registry.Open does, once, redacted.
func invalid(_ *url.URL, format string, args ...any) error {
	return backend.InvalidURL("dns+srv", format, args...)
}

// name reads the SRV name template from the path: {service} stands for
// the service; a path without it is a domain after the service's name.
func name(u *url.URL) (string, error) {
	n := strings.Trim(u.Path, "/")
	if n == "" {
		return "", invalid(u, "no SRV name: want a path such as /{service}.service.consul")
	}
	if !strings.Contains(n, "{service}") {
		n = "{service}." + n
	}
	if strings.Count(n, "{service}") > 1 || strings.Contains(n, "/") {
		return "", invalid(u, "SRV name %s: one {service}, no /", quoteName(n))
	}
	if _, ok := dns.IsDomainName(strings.ReplaceAll(n, "{service}", "svc")); !ok {
		return "", invalid(u, "SRV name %s is not a domain name", quoteName(n))
	}
	return n, nil
}

// resolver is the URL's host (port 53 if none), else the first
// nameserver of the system's resolver configuration.
func resolver(u *url.URL) (string, error) {
	h := u.Host
	if h == "" {
		cfg, err := dns.ClientConfigFromFile(resolvConf)
		if err != nil || len(cfg.Servers) == 0 {
			return "", invalid(u, "no resolver in the URL and none in %s", resolvConf)
		}
		return net.JoinHostPort(cfg.Servers[0], cfg.Port), nil
	}
	if strings.Contains(h, ",") {
		return "", invalid(u, "one resolver only")
	}
	if _, _, err := net.SplitHostPort(h); err != nil {
		h = net.JoinHostPort(strings.Trim(h, "[]"), "53")
	}
	return h, nil
}

// quoteName quotes an SRV name for an error unless it holds what no
// domain name does and a password could ("@", ":"): a credential typed
// in the wrong place (dns+srv:/user:secret@host/…).
func quoteName(n string) string {
	if strings.ContainsAny(n, "@:") {
		return "<name>"
	}
	return strconv.Quote(n)
}
