package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// publicOptions are the URL options whose values are not secrets, so that
// urls.Redact may show them in errors: every option but password.
// (driver.Register masks key_file and password_file all the same, for
// their names; their values are only paths.)
var publicOptions = []string{"prefix", "dial_timeout", "request_timeout", "progress_interval", "username",
	"password_file", "tls", "ca_file", "cert_file", "key_file", "server_name", "skip_verify", "insecure_skip_verify"}

var openURL = backend.OpenWith(ParseURL, New)

// ParseURL turns an etcd:// or etcds:// URL into Options (see the package
// documentation for the forms and options). Errors wrap driver.ErrInvalid,
// name the option and never quote the password.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	q, err := backend.ParseSchemeQuery("etcd", u, Scheme, SchemeTLS)
	if err != nil {
		return o, err
	}
	if u.Path != "" && u.Path != "/" {
		return o, backend.InvalidURL("etcd", "a path has no meaning here: set the key prefix with ?prefix=")
	}
	q.String("prefix", &o.Prefix)
	if q.Has("prefix") && strings.TrimRight(o.Prefix, "/") == "" {
		return o, backend.InvalidURL("etcd", "option prefix must name a key prefix such as /roster")
	}
	q.Duration("dial_timeout", &o.Client.DialTimeout)
	q.Duration("request_timeout", &o.RequestTimeout)
	q.Duration("progress_interval", &o.ProgressInterval)
	if err := credentials(u, q, &o.Client); err != nil {
		return o, err
	}
	legacySkip, err := insecureSkipVerify(u, q)
	if err != nil {
		return o, err
	}
	o.Client.TLS = q.TLS(strings.EqualFold(u.Scheme, SchemeTLS))
	if err := q.Err(); err != nil {
		return o, err
	}
	if legacySkip {
		if o.Client.TLS == nil {
			return o, backend.InvalidURL("etcd", "option insecure_skip_verify given but TLS is off (use etcds:// or tls=true)")
		}
		o.Client.TLS.InsecureSkipVerify = true
	}
	o.Client.Endpoints, err = endpoints(u, o.Client.TLS != nil)
	return o, err
}

// pinServerName makes server_name count: gRPC replaces a tls.Config's
// ServerName with the endpoint's host, so the name is checked here, in
// VerifyConnection, with the verification gRPC would have done.
func pinServerName(c *tls.Config) {
	if c == nil || c.ServerName == "" || c.InsecureSkipVerify {
		return
	}
	name, roots := c.ServerName, c.RootCAs
	c.InsecureSkipVerify = true // replaced by VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter})
		return err
	}
}

// checkTLS makes cfg's server_name count (pinServerName, on a copy) and
// finds a TLS misconfiguration at Open, which gRPC would hide behind
// retries until the request timeout: each endpoint is dialled once within
// the dial timeout (an unreachable one is passed over).
func checkTLS(cfg *clientv3.Config) error {
	if cfg.TLS == nil {
		return nil
	}
	cfg.TLS = cfg.TLS.Clone()
	pinServerName(cfg.TLS)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
	defer cancel()
	for _, host := range hosts(cfg.Endpoints) {
		// A gRPC server speaks first (its HTTP/2 settings): a short wait
		// tells an accepted client certificate from a refused one.
		if _, err := backend.CheckTLS(ctx, host, cfg.TLS, time.Second); err != nil {
			return fmt.Errorf("etcd: connect: %w", err)
		}
	}
	return nil
}

// EnvPassword names the environment variable that holds the password of
// a URL that names a user but gives no password (neither before the @ nor
// with password or password_file). A URL without a user never reads it.
const EnvPassword = "ROSTER_ETCD_PASSWORD"

// credentials reads the user name and password from the URL's user info
// or from the options username and password (or password_file), but not
// the same one from both: which should win would be a guess. A user
// without a password takes $ROSTER_ETCD_PASSWORD.
//
// ETCDCTL_PASSWORD is not read: it belongs to etcdctl and pairs with
// ETCDCTL_USER, so honouring it would make one URL mean different things
// in different shells. Roster's own variable applies only where the URL
// names the user.
func credentials(u *url.URL, q *backend.Query, c *clientv3.Config) error {
	q.String("username", &c.Username)
	q.Secret("password", "", &c.Password)
	if u.User != nil {
		if q.Has("username") {
			return backend.InvalidURL("etcd", "user name given twice: before the @ and as option username")
		}
		c.Username = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			if q.Has("password") || q.Has("password_file") {
				return backend.InvalidURL("etcd", "password given twice: before the @ and as option password or password_file")
			}
			c.Password = pw
		}
	}
	if c.Password != "" && c.Username == "" {
		return backend.InvalidURL("etcd", "a password needs a user name")
	}
	if c.Username != "" && c.Password == "" && !q.Has("password") && !q.Has("password_file") {
		c.Password = os.Getenv(EnvPassword)
	}
	return nil
}

// insecureSkipVerify reads insecure_skip_verify, the name of skip_verify
// before every backend spelt TLS the same way (backend.Query.TLS). URLs in
// use still carry it, so it stays, deprecated; giving both is an error.
func insecureSkipVerify(u *url.URL, q *backend.Query) (bool, error) {
	if !q.Has("insecure_skip_verify") {
		return false, nil
	}
	if q.Has("skip_verify") {
		return false, backend.InvalidURL("etcd", "options skip_verify and insecure_skip_verify (its deprecated name) both given: keep skip_verify")
	}
	var skip bool
	q.Bool("insecure_skip_verify", &skip)
	return skip, nil
}

// endpoints turns the URL's comma-separated hosts into client endpoints;
// a host without a port gets etcd's 2379.
func endpoints(u *url.URL, tlsOn bool) ([]string, error) {
	if u.Host == "" {
		return nil, backend.InvalidURL("etcd", "no host (etcd://host:2379[,host2:2379])")
	}
	scheme := "http://"
	if tlsOn {
		scheme = "https://"
	}
	var eps []string
	for i, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, backend.InvalidURL("etcd", "empty host in the endpoint list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		}
		if _, err := backend.CanonicalAddress(h); err != nil {
			// Not quoted: such a host may be a password whose "@" was
			// forgotten (etcd://user:secrethost:2379).
			return nil, backend.InvalidURL("etcd", "endpoint %d is not host:port (a host name or an IP address, a port from 1 to 65535)", i+1)
		}
		eps = append(eps, scheme+h)
	}
	return eps, nil
}
