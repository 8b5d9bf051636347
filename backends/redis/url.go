package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// schemes are registered with registry.Open.
var schemes = []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

func init() {
	for _, s := range schemes {
		driver.Register(s, func(ctx context.Context, u *url.URL) (driver.Driver, error) {
			return OpenURL(ctx, u)
		}, publicOptions...)
	}
}

// publicOptions are the URL options whose values are never secret, so
// that urls.Redact may show them: every option ParseURL reads except
// password_file, sentinel_password, sentinel_password_file and key_file
// (a path, but Redact masks every name holding "key" or "pas" anyway).
var publicOptions = []string{"addr", "layout", "prefix", "sweep", "quiet", "maxlen", "linger", "poll", "notify",
	"master", "sentinel_username", "client_name", "dial_timeout", "read_timeout", "write_timeout", "pool_size",
	"tls", "ca_file", "cert_file", "server_name", "skip_verify"}

// EnvPassword names the environment variable that holds the server's
// password when the URL gives none (neither in its userinfo nor with
// password_file): it keeps the password out of command lines and
// configuration files.
const EnvPassword = "ROSTER_REDIS_PASSWORD"

// EnvSentinelPassword names the environment variable that holds the
// Sentinels' password of a redis+sentinel URL that gives none
// (sentinel_password, sentinel_password_file).
const EnvSentinelPassword = "ROSTER_REDIS_SENTINEL_PASSWORD"

// OpenURL opens a driver from a parsed URL; see the package doc for forms.
func OpenURL(_ context.Context, u *url.URL) (*Driver, error) {
	copts, o, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(copts, o)
}

// ParseURL turns a redis URL into client options and driver options.
// Errors wrap driver.ErrInvalid, name the option and show the URL
// redacted.
func ParseURL(u *url.URL) (*goredis.UniversalOptions, Options, error) {
	q, err := backend.ParseQuery("redis", u)
	if err != nil {
		return nil, Options{}, err
	}
	tlsOn, mode, ok := splitScheme(u.Scheme)
	if !ok {
		return nil, Options{}, backend.InvalidURL("redis", "scheme %q (want redis or rediss, +cluster or +sentinel)", u.Scheme)
	}
	copts := &goredis.UniversalOptions{TLSConfig: q.TLS(tlsOn)}
	o, seeds := readOptions(q, copts)
	pwErr := readPasswords(q, u, copts, mode == "sentinel")
	if err := cmp.Or(q.Err(), pwErr); err != nil {
		return nil, o, err
	}
	if err := setTopology(u, copts, mode, seeds); err != nil {
		return nil, o, err
	}
	if err := o.defaults(); err != nil {
		return nil, o, backend.InvalidURL("redis", "%s", strings.TrimPrefix(err.Error(), driver.ErrInvalid.Error()+": redis: "))
	}
	return copts, o, nil
}

// splitScheme reads "redis[s][+cluster|+sentinel]".
func splitScheme(scheme string) (tlsOn bool, mode string, ok bool) {
	base, mode, _ := strings.Cut(strings.ToLower(scheme), "+")
	ok = (base == "redis" || base == "rediss") && (mode == "" || mode == "cluster" || mode == "sentinel")
	return base == "rediss", mode, ok
}

// readOptions reads every public option but the TLS ones; it returns the
// driver's options and the addr option (more seeds, comma-separated).
func readOptions(q *backend.Query, c *goredis.UniversalOptions) (o Options, seeds string) {
	var layout, notify string
	var maxlen int
	q.Enum("layout", &layout, string(LayoutHash), string(LayoutKeys))
	q.String("prefix", &o.Prefix)
	q.Duration("sweep", &o.Sweep)
	q.Duration("quiet", &o.Quiet)
	q.Int("maxlen", &maxlen)
	q.Duration("linger", &o.Linger)
	q.Duration("poll", &o.Poll)
	q.Enum("notify", &notify, string(NotifyAuto), string(NotifyOn), string(NotifyOff))
	o.Layout, o.Notify, o.MaxLen = Layout(layout), Notify(notify), int64(maxlen)

	q.String("addr", &seeds)
	q.String("master", &c.MasterName)
	q.String("sentinel_username", &c.SentinelUsername)
	q.String("client_name", &c.ClientName)
	q.Duration("dial_timeout", &c.DialTimeout)
	q.Duration("read_timeout", &c.ReadTimeout)
	q.Duration("write_timeout", &c.WriteTimeout)
	q.Int("pool_size", &c.PoolSize)
	return o, seeds
}

// readPasswords reads the server's credentials from the URL's userinfo,
// else its password from password_file or $ROSTER_REDIS_PASSWORD; and the
// Sentinels' password from sentinel_password, sentinel_password_file or,
// on redis+sentinel, $ROSTER_REDIS_SENTINEL_PASSWORD. A password option in
// the query is refused: the URL's place for it is the userinfo, and two
// places would need a precedence rule.
func readPasswords(q *backend.Query, u *url.URL, c *goredis.UniversalOptions, sentinel bool) error {
	env := EnvPassword
	if u.User != nil {
		c.Username = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			c.Password, env = pw, ""
		}
	}
	inUserinfo := env == ""
	q.Secret("password", env, &c.Password)
	sentinelEnv := ""
	if sentinel {
		sentinelEnv = EnvSentinelPassword
	}
	q.Secret("sentinel_password", sentinelEnv, &c.SentinelPassword)
	switch {
	case q.Has("password"):
		return backend.InvalidURL("redis", "option password: give the password in the URL (redis://user:password@host) or in password_file")
	case inUserinfo && q.Has("password_file"):
		return backend.InvalidURL("redis", "password given twice: in the URL and in password_file")
	}
	return nil
}

// setTopology sets the client's addresses, database and kind, and checks
// that the options fit the kind.
func setTopology(u *url.URL, c *goredis.UniversalOptions, mode, seeds string) error {
	defPort := "6379"
	if mode == "sentinel" {
		defPort = "26379"
	}
	var err error
	if c.Addrs, err = hostPorts(u.Host, seeds, defPort); err != nil {
		return backend.InvalidURL("redis", "%v", err)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if c.DB, err = strconv.Atoi(p); err != nil || c.DB < 0 {
			return backend.InvalidURL("redis", "the path must be a database number")
		}
	}
	c.IsClusterMode = mode == "cluster" || mode == "" && len(c.Addrs) > 1
	switch {
	case mode == "sentinel" && c.MasterName == "":
		return backend.InvalidURL("redis", "redis+sentinel needs ?master=<name>")
	case mode != "sentinel" && c.MasterName != "":
		return backend.InvalidURL("redis", "option master is for redis+sentinel://")
	case mode != "sentinel" && (c.SentinelPassword != "" || c.SentinelUsername != ""):
		return backend.InvalidURL("redis", "sentinel credentials are for redis+sentinel://")
	case c.IsClusterMode && c.DB != 0:
		return backend.InvalidURL("redis", "Redis Cluster has only database 0")
	}
	return nil
}

// hostPorts returns the URL's hosts and the addr option's, each with a
// port (defPort when it has none) and "localhost" for an empty name.
func hostPorts(hosts, seeds, defPort string) ([]string, error) {
	var list, out []string
	for _, s := range []string{hosts, seeds} {
		if s != "" {
			list = append(list, strings.Split(s, ",")...)
		}
	}
	if len(list) == 0 {
		return nil, errors.New("no host")
	}
	for i, h := range list {
		if h == "" {
			return nil, errors.New("empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort // no port; "[::1]" too
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			// The port is not quoted: a password that lost its "@" lands there.
			return nil, fmt.Errorf("address %d: port is not a number from 1 to 65535", i+1)
		}
		out = append(out, net.JoinHostPort(cmp.Or(host, "localhost"), port))
	}
	return out, nil
}
