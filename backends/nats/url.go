package nats

import (
	"net"
	"net/url"
	"strings"

	"github.com/roster-go/roster/internal/backend"
)

// publicOptions are the URL options whose values are not secrets.
var publicOptions = []string{"bucket", "replicas", "request_timeout",
	"tls", "ca_file", "cert_file", "key_file", "server_name", "skip_verify"}

// EnvToken names the environment variable that holds the token when the
// URL gives neither token nor token_file.
const EnvToken = "ROSTER_NATS_TOKEN"

var openURL = backend.OpenWith(ParseURL, New)

// ParseURL turns a URL into Options:
//
//	nats://[user:password@]host[:4222][,host2…][?options]
//	nats+tls://…   (nats:// with tls=true)
//
// The options are bucket, replicas, request_timeout, token
// (or token_file, or $ROSTER_NATS_TOKEN) and the TLS options every
// backend shares. Errors wrap driver.ErrInvalid and never quote a secret.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	q, err := backend.ParseSchemeQuery("nats", u, Scheme, SchemeTLS)
	if err != nil {
		return o, err
	}
	if u.Path != "" && u.Path != "/" {
		return o, backend.InvalidURL("nats", "a path has no meaning here: name the bucket with ?bucket=")
	}
	q.String("bucket", &o.Bucket)
	q.Int("replicas", &o.Replicas)
	q.Duration("request_timeout", &o.RequestTimeout)
	q.Secret("token", EnvToken, &o.Token)
	o.TLS = q.TLS(strings.EqualFold(u.Scheme, SchemeTLS))
	if err := q.Err(); err != nil {
		return o, err
	}
	if u.User != nil {
		o.User = u.User.Username()
		o.Password, _ = u.User.Password()
		if q.Has("token") || q.Has("token_file") {
			return o, backend.InvalidURL("nats", "give a user or a token, not both")
		}
		o.Token = "" // the user wins over $ROSTER_NATS_TOKEN
	}
	o.Servers, err = servers(u.Host)
	return o, err
}

// servers splits the comma-separated hosts; a host without a port gets
// NATS's 4222.
func servers(hosts string) ([]string, error) {
	if hosts == "" {
		return nil, backend.InvalidURL("nats", "no host (nats://host:4222[,host2:4222])")
	}
	var out []string
	for i, h := range strings.Split(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "4222")
		}
		if _, err := backend.CanonicalAddress(h); err != nil {
			// Not quoted: it may be a password whose "@" was forgotten.
			return nil, backend.InvalidURL("nats", "server %d is not host:port (a host name or an IP address, a port from 1 to 65535)", i+1)
		}
		out = append(out, h)
	}
	return out, nil
}
