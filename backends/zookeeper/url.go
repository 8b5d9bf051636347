package zookeeper

import (
	"net"
	"net/url"
	"path"
	"strings"

	"github.com/roster-go/roster/internal/backend"
)

// publicOptions are the URL options whose values are not secrets.
var publicOptions = []string{"layout", "payload", "session_timeout", "request_timeout", "tls", "ca_file", "cert_file", "server_name", "skip_verify"}

var openURL = backend.OpenWith(ParseURL, New)

// ParseURL turns a zk:// URL into Options (see the package documentation
// for the form and options). Errors wrap driver.ErrInvalid, name the
// option and never quote the password.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	q, err := backend.ParseSchemeQuery("zookeeper", u, Scheme)
	if err != nil {
		return o, err
	}
	q.Duration("session_timeout", &o.SessionTimeout)
	q.Duration("request_timeout", &o.RequestTimeout)
	q.Enum("layout", &o.Layout, LayoutRoster, LayoutCurator)
	q.Enum("payload", &o.CuratorPayload, PayloadSpring, PayloadMap)
	o.TLS = q.TLS(false)
	if err := credentials(u, q, &o); err != nil {
		return o, err
	}
	if err := q.Err(); err != nil {
		return o, err
	}
	if o.Root, err = root(u); err != nil {
		return o, err
	}
	if err := checkLayout(&o); err != nil {
		return o, err
	}
	if o.User != "" && o.Password == "" {
		return o, invalid(u, "digest credentials need both a user and a password "+
			"(zk://user:password@host, zk://user@host?password_file=PATH or $%s)", EnvPassword)
	}
	o.Servers, err = servers(u)
	return o, err
}

// EnvPassword names the environment variable that holds the digest
// password of a URL that names a user but gives no password (neither
// before the @ nor with password_file). A URL without a user never reads
// it.
const EnvPassword = "ROSTER_ZOOKEEPER_PASSWORD"

// credentials reads the digest user from the URL's user info and its
// password from there, from password_file or from $ROSTER_ZOOKEEPER_PASSWORD,
// the first found. A password option in the query is refused, as on
// Redis: the URL's place for it is before the @.
func credentials(u *url.URL, q *backend.Query, o *Options) error {
	if q.Has("password") {
		return backend.InvalidURL("zookeeper", "option password: give the password in the URL (zk://user:password@host) or in password_file")
	}
	if u.User == nil {
		if q.Has("password_file") {
			return backend.InvalidURL("zookeeper", "option password_file needs a user name (zk://user@host?password_file=PATH)")
		}
		return nil
	}
	o.User = u.User.Username()
	pw, inUserinfo := u.User.Password()
	switch {
	case inUserinfo && q.Has("password_file"):
		return backend.InvalidURL("zookeeper", "password given twice: in the URL and in password_file")
	case inUserinfo:
		o.Password = pw
	default:
		q.Secret("password", EnvPassword, &o.Password)
	}
	return nil
}

// invalid is an ErrInvalid in the form backend.Query gives its own. It
// does not name the URL: registry.Open does, once, redacted.
func invalid(_ *url.URL, format string, args ...any) error {
	return backend.InvalidURL("zookeeper", format, args...)
}

// root reads the root znode from the URL's path: /roster when empty.
func root(u *url.URL) (string, error) {
	p := strings.TrimRight(u.Path, "/")
	if p == "" {
		return "", nil // the layout's default (checkLayout)
	}
	if path.Clean(p) != p || strings.ContainsAny(p, "\x00") {
		return "", invalid(u, "root %q is not a clean znode path (no //, . or .. segments)", p)
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return "", invalid(u, "root %s is inside /zookeeper, which ZooKeeper reserves", p)
	}
	return p, nil
}

// servers turns the URL's comma-separated hosts into host:port pairs; a
// host without a port gets ZooKeeper's 2181.
func servers(u *url.URL) ([]string, error) {
	if u.Host == "" {
		return nil, invalid(u, "no host (zk://host:2181[,host2:2181]/root)")
	}
	var out []string
	for i, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, invalid(u, "empty host in the server list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		if _, err := backend.CanonicalAddress(h); err != nil {
			// Not quoted: a host with such characters may be a password
			// whose "@" was forgotten (zk://user:secrethost:2181).
			return nil, invalid(u, "server %d is not host:port (a host name or an IP address, a port from 1 to 65535)", i+1)
		}
		out = append(out, h)
	}
	return out, nil
}
