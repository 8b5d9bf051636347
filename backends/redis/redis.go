// Package redis is the Redis backend of Roster, for standalone Redis,
// Sentinel-managed failover and Redis Cluster, through go-redis's
// UniversalClient. Importing it registers the URL schemes:
//
//	redis://[user:pass@]host:6379[/db][?option=value&…]
//	rediss://…                                   TLS
//	redis+cluster://host1:7000,host2:7001[?…]    Redis Cluster (several seeds;
//	redis://host1:7000,host2:7001                 two or more hosts imply it)
//	redis+sentinel://[user:pass@]s1:26379,s2:26379[/db]?master=mymaster[&sentinel_password=…]
//
// Two storage layouts are offered (option layout=hash|keys).
//
// # Layout hash (default)
//
// All keys of one service share the hash tag {service}, so every operation
// is one atomic Lua script, also on Cluster:
//
//	<prefix>:{svc}:i:<id>   String, the instance as JSON, PX TTL
//	<prefix>:{svc}:idx      ZSet id → expiry deadline (ms, server TIME)
//	<prefix>:{svc}:rev      revision counter (INCR on every change)
//	<prefix>:{svc}:log      Stream change log, capped (MAXLEN ~), every entry
//	                        carries its revision: rev, op=put, id, data (the
//	                        instance) or rev, op=del, id
//	<prefix>:{svc}:sweeper  which watch sweeps the service (PX lease)
//	<prefix>:services       ZSet svc → latest deadline (for Services only)
//
// Register, Update and Heartbeat run the same script: it re-writes the whole
// record with a fresh TTL and deadline (not just PEXPIRE, so an index entry
// or record content lost in a failover is repaired), and appends a log entry
// only when the stored record was missing or different. A heartbeat that
// finds the record gone (expired during a partition, FLUSHALL, a failover
// that lost it, a manual DEL) writes nothing and returns ErrNotFound; the
// lease registers again at once, so the instance is back within one
// heartbeat and watchers see it return. Deadlines come from the server's
// TIME, so client clock skew does not matter. Lookups read the index
// (ZRANGEBYSCORE now +inf), never SCAN the keyspace, so an expired member is
// never listed even before it is swept.
//
// A watch takes a snapshot (instances, revision and the log's last ID in one
// script), then reads the log with XREAD BLOCK on a connection of its own. A
// revision that does not follow the last one (a trimmed log, a FLUSHALL, a
// failover that lost writes) makes it relist; so does a quiet period without
// entries (option quiet, default 10s), and so does a broken read (if the
// relist fails as well, the stream reports ErrUnavailable and the registry
// marks the watcher stale).
//
// Sweeps announce crashed instances: a script removes members whose deadline
// passed and whose key is gone, and logs their removal. One watch per
// service sweeps at a time, across all processes: the holder of the
// sweeper key, taken with SET NX PX and renewed by every sweep for 3 sweep
// intervals. The holder sweeps when the earliest deadline in the index
// falls due, when a put arrives, and at least every sweep interval (option
// sweep, default 1s), from a small goroutine with its own timer; so a
// crashed instance reaches watchers within its TTL plus, at worst, one
// sweep interval — typically a few milliseconds after its TTL. The other
// watches only try to take the key when the holder's lease would run out
// (a cheap script, about once per lease each), so when the holder's
// process dies or its watch ends, another takes over within 3¼ sweep
// intervals and sweeps at once. Until then removals wait: a crash reaches
// watchers within the later of TTL + sweep and 3¼ sweep intervals after
// the holder's end.
//
// # Forgetting (hash)
//
// A service without instances leaves nothing behind. Its idx, rev and log
// keys share one expiry, which every script that changes the service
// sets: a removal (deregistration or sweep) to option linger (default 5m)
// after the latest deadline left in the index, or after now if that is
// later; a put (registration, update, heartbeat) extends it, if needed,
// to 2 × linger after the new deadline, so that most heartbeats only read
// it. The instance keys expire at their own deadline, the sweeper key 3
// sweep intervals after its holder's last sweep. So once the last
// instance is deregistered or swept, every key of the service is gone
// linger later (and the sweeper key once nobody watches it); if it
// crashed and nobody sweeps the service, between linger and 2 × linger
// after its last deadline. The services index drops entries linger after
// their deadline and expires linger after the latest one written.
//
// The change log holds what a watcher needs to apply a change and no
// more: a put carries the instance's JSON, a removal only its ID. Every
// change, heartbeats included, trims entries older than linger (XTRIM
// MINID, exact), so the data of an instance that left stays in the log at
// most linger plus one heartbeat of the service's remaining instances;
// on top, the log is capped at about maxlen entries (option maxlen,
// default 1000, XADD MAXLEN ~). A watcher that falls further behind than
// the log reaches sees a revision gap and relists.
//
// Revisions after forgetting: a service that comes back after its keys
// expired starts again at revision 1 with a new log stream. A watch still
// reading the old log from its last ID gets the new entries all the same:
// stream IDs are the server's clock in milliseconds and the old log
// expired linger or more after its last entry, so the new entries sort
// after the watch's position. Their revision (1, say, after 57) does not
// follow the watch's, which is a gap: the watch relists and delivers the
// new state. Only a server clock set back by more than linger could place
// new entries before a watch's position; its quiet relist then delivers
// them within quiet. The registry keeps the revisions its Watchers see
// monotonic across such a restart of the counter, as across a FLUSHALL.
//
// Options: prefix (default "roster"), sweep, quiet, maxlen, linger. TTLs
// have millisecond granularity, minimum 10ms.
//
// # Layout keys
//
// The layout of the widely copied "Redis as a service registry" article:
// one String per instance, key service:<name>:<addr> (the "service" prefix
// is option prefix), value JSON with string fields exactly as the article
// writes them:
//
//	{"addr":"10.0.0.1:8080","version":"1.2.0","weight":"100","metadata":"zone=hz-1"}
//
// metadata is k=v pairs separated by commas (',', '=' and '%' in values are
// %-escaped). Roster keeps its own fields there under keys starting with
// "roster_": roster_id (the instance ID) and roster_tags; the instance's
// Zone is "zone", as in the article. The TTL is set with SET … EX and
// refreshed with EXPIRE (whole seconds, minimum 1s). Records written by
// scripts that follow the article are discovered (their ID is derived from
// the service and address), and ours are readable by those scripts.
//
// The article's key has no instance ID. The first registration of an
// address owns service:<name>:<addr>; a second, live registration of the
// same address under another ID (two workers on one port, or a restarted
// process whose predecessor has not expired) is written to
// service:<name>:<addr>:<id> instead, so the two never overwrite each other.
// Scripts that take the address from the JSON value see both; scripts that
// cut it from the key name see a longer suffix for the second one.
//
// Listing uses SCAN MATCH over the escaped prefix (on every master in a
// Cluster), which costs O(keys in the database) per call. A watch relists
// every poll interval (option poll, default 1s) and, when the server has
// keyspace notifications enabled (notify-keyspace-events with E and g$x or
// A), relists at once on a set, del or expired event for the service
// (option notify=auto|on|off, default auto; never on Cluster, where events
// are node-local). Without notifications a change reaches watchers within
// one poll interval.
//
// # Errors
//
// Errors wrap driver.ErrUnavailable (network, timeouts, server errors),
// driver.ErrNotFound, driver.ErrInvalid or driver.ErrClosed, and
// never contain passwords.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// Schemes registered with registry.Open.
var Schemes = []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

func init() {
	for _, s := range Schemes {
		driver.Register(s, func(ctx context.Context, u *url.URL) (driver.Driver, error) {
			return OpenURL(ctx, u)
		}, publicOptions...)
	}
}

// publicOptions are the URL options whose values are never secret:
// driver.Redact may show them in errors.
var publicOptions = []string{"addr", "layout", "prefix", "master", "sentinel_username", "client_name", "notify",
	"skip_verify", "sweep", "quiet", "poll", "linger", "dial_timeout", "read_timeout", "write_timeout",
	"pool_size", "maxlen"}

// Layout selects how instances are stored.
type Layout string

const (
	// LayoutHash is the default: atomic scripts, an index, a change log.
	LayoutHash Layout = "hash"
	// LayoutKeys is the article-compatible String-per-instance layout.
	LayoutKeys Layout = "keys"
)

// Notify says whether a keys-layout watch subscribes to keyspace events.
type Notify string

const (
	NotifyAuto Notify = "auto" // when CONFIG GET shows them enabled
	NotifyOn   Notify = "on"   // always subscribe
	NotifyOff  Notify = "off"  // poll only
)

// MaxLinger bounds Options.Linger: longer would keep the keys of services
// that are long gone, and the scripts compute in float64 milliseconds.
const MaxLinger = 7 * 24 * time.Hour

// Options configure a Driver. The zero value means the defaults.
type Options struct {
	Layout Layout // default LayoutHash
	// Prefix is the first key segment: "roster" (hash) or "service" (keys)
	// by default. A ':' separates it from the rest.
	Prefix string

	Sweep  time.Duration // hash: longest time between two sweeps (default 1s)
	Quiet  time.Duration // hash: relist after this long without log entries (default 10s)
	MaxLen int64         // hash: approximate cap of each service's change log (default 1000)
	// Linger (hash) is how long a service's keys outlive its last
	// instance, and how long its change log keeps an entry (default 5m,
	// at most MaxLinger).
	Linger time.Duration

	Poll   time.Duration // keys: relist period of a watch (default 1s)
	Notify Notify        // keys: keyspace-notification hints (default auto)
}

func (o *Options) defaults() error {
	if o.Layout == "" {
		o.Layout = LayoutHash
	}
	switch o.Layout {
	case LayoutHash:
		if o.Prefix == "" {
			o.Prefix = "roster"
		}
		if strings.ContainsAny(o.Prefix, "{}") {
			return fmt.Errorf("%w: redis: prefix %q must not contain { or } (the hash tag is added per service)", driver.ErrInvalid, o.Prefix)
		}
	case LayoutKeys:
		if o.Prefix == "" {
			o.Prefix = "service"
		}
	default:
		return fmt.Errorf("%w: redis: layout %q (want hash or keys)", driver.ErrInvalid, o.Layout)
	}
	if o.Sweep == 0 {
		o.Sweep = time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 10 * time.Second
	}
	if o.MaxLen == 0 {
		o.MaxLen = 1000
	}
	if o.Linger == 0 {
		o.Linger = 5 * time.Minute
	}
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Notify == "" {
		o.Notify = NotifyAuto
	}
	switch {
	case o.Sweep < 0 || o.Quiet < 0 || o.Poll < 0 || o.MaxLen < 0:
		return fmt.Errorf("%w: redis: negative sweep, quiet, poll or maxlen", driver.ErrInvalid)
	case o.Linger < time.Millisecond || o.Linger > MaxLinger:
		return fmt.Errorf("%w: redis: linger %v (want 1ms to %v)", driver.ErrInvalid, o.Linger, MaxLinger)
	case o.Notify != NotifyAuto && o.Notify != NotifyOn && o.Notify != NotifyOff:
		return fmt.Errorf("%w: redis: notify %q (want auto, on or off)", driver.ErrInvalid, o.Notify)
	}
	return nil
}

// Driver is a driver.Driver on Redis. Wrap it with registry.New, or open
// it through registry.Open with a redis URL.
type Driver struct {
	copts *goredis.UniversalOptions // to open dedicated watch connections
	c     goredis.UniversalClient
	o     Options
	name  string // redacted, for errors

	mu     sync.Mutex
	closed bool
}

// New returns a driver over a client built from copts (go-redis rules:
// MasterName → Sentinel failover, several Addrs or IsClusterMode → Cluster,
// else one server). It does not dial: the first operation does.
func New(copts *goredis.UniversalOptions, o Options) (*Driver, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if len(copts.Addrs) == 0 {
		return nil, fmt.Errorf("%w: redis: no address", driver.ErrInvalid)
	}
	cp := *copts
	name := strings.Join(cp.Addrs, ",")
	return &Driver{copts: &cp, c: goredis.NewUniversalClient(&cp), o: o, name: name}, nil
}

// Client returns the driver's client, for code that needs raw access.
func (d *Driver) Client() goredis.UniversalClient { return d.c }

// Options returns the effective options.
func (d *Driver) Options() Options { return d.o }

// Limits implements driver.Driver: hash has millisecond TTLs (min 10ms);
// keys has whole seconds (SET EX / EXPIRE, min 1s).
func (d *Driver) Limits() driver.Limits {
	if d.o.Layout == LayoutKeys {
		return driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second}
	}
	return driver.Limits{MinTTL: 10 * time.Millisecond, TTLGranularity: time.Millisecond}
}

// Close implements driver.Driver.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	if err := d.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return d.wrap("close", err)
	}
	return nil
}

func (d *Driver) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("redis: %w", driver.ErrClosed)
	}
	return nil
}

// isCluster reports whether keys spread over several nodes.
func (d *Driver) isCluster() bool {
	_, ok := d.c.(*goredis.ClusterClient)
	return ok
}

// watchClient opens a client with one connection, for one watch's
// blocking reads: they must not hold a pooled connection, and closing this
// client is what interrupts a blocked read.
func (d *Driver) watchClient() goredis.UniversalClient {
	cp := *d.copts
	cp.PoolSize = 1
	cp.MinIdleConns = 0
	cp.MaxIdleConns = 1
	cp.MaxRetries = -1 // a broken read is a reconnect: the stream resyncs
	return goredis.NewUniversalClient(&cp)
}

// wrap maps a client error to the registry's sentinels. Server replies and
// network errors are ErrUnavailable: transient from the caller's view.
func (d *Driver) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redis %s: %s: %w", d.name, op, err)
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("redis %s: %s: %w", d.name, op, driver.ErrClosed)
	}
	return fmt.Errorf("redis %s: %s: %w: %s", d.name, op, driver.ErrUnavailable, redactErr(err, d.copts.Password))
}

// redactErr returns err's text with the password (if any) removed; go-redis
// never prints it, but a proxy or a server error might echo it.
func redactErr(err error, pass string) string {
	s := err.Error()
	if pass != "" {
		s = strings.ReplaceAll(s, pass, "xxxxx")
	}
	return s
}

// Register implements driver.Driver.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	if d.o.Layout == LayoutKeys {
		return d.keysRegister(ctx, inst, ttl)
	}
	return d.hashRegister(ctx, inst, ttl)
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	if err := d.enter(ctx); err != nil {
		return driver.Snapshot{}, err
	}
	if d.o.Layout == LayoutKeys {
		return d.keysList(ctx, service)
	}
	s, _, err := d.hashSnapshot(ctx, service)
	return s, err
}

// Services implements driver.Driver.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	if d.o.Layout == LayoutKeys {
		return d.keysServices(ctx)
	}
	return d.hashServices(ctx)
}

// Watch implements driver.Driver.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	if d.o.Layout == LayoutKeys {
		return d.keysWatch(ctx, service)
	}
	return d.hashWatch(ctx, service)
}

// OpenURL opens a driver from a parsed URL; see the package doc for forms.
func OpenURL(_ context.Context, u *url.URL) (*Driver, error) {
	copts, o, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(copts, o)
}

// ParseURL turns a redis URL into client options and driver options.
// Errors wrap driver.ErrInvalid and show the URL redacted.
func ParseURL(u *url.URL) (*goredis.UniversalOptions, Options, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: redis URL %s: %s", driver.ErrInvalid, driver.Redact(u.String()), fmt.Sprintf(format, a...))
	}
	var o Options
	copts := &goredis.UniversalOptions{}
	scheme := strings.ToLower(u.Scheme)
	base, mode, _ := strings.Cut(scheme, "+")
	switch base {
	case "redis":
	case "rediss":
		copts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	default:
		return nil, o, bad("scheme %q (want redis or rediss)", u.Scheme)
	}
	defPort := "6379"
	switch mode {
	case "", "cluster":
		copts.IsClusterMode = mode == "cluster"
	case "sentinel":
		defPort = "26379"
	default:
		return nil, o, bad("scheme %q (want redis, redis+cluster or redis+sentinel)", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, o, bad("want scheme://host:port")
	}
	q := u.Query()
	hosts := []string{}
	if u.Host != "" {
		hosts = strings.Split(u.Host, ",")
	}
	hosts = append(hosts, q["addr"]...)
	delete(q, "addr")
	if len(hosts) == 0 {
		return nil, o, bad("no host")
	}
	for _, h := range hosts {
		if h == "" {
			return nil, o, bad("empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort // no port; "[::1]" too
		}
		if host == "" {
			host = "localhost"
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, o, bad("port %q", port)
		}
		copts.Addrs = append(copts.Addrs, net.JoinHostPort(host, port))
	}
	if u.User != nil {
		copts.Username = u.User.Username()
		copts.Password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, o, bad("database %q is not a number", p)
		}
		copts.DB = n
	}
	one := func(k string) (string, error) {
		v := q[k]
		delete(q, k)
		switch len(v) {
		case 0:
			return "", nil
		case 1:
			return v[0], nil
		}
		return "", bad("option %s given %d times", k, len(v))
	}
	dur := func(k string, dst *time.Duration) error {
		v, err := one(k)
		if err != nil || v == "" {
			return err
		}
		dd, perr := time.ParseDuration(v)
		if perr != nil || dd <= 0 {
			return bad("option %s=%q is not a positive duration", k, v)
		}
		*dst = dd
		return nil
	}
	integer := func(k string, dst *int) error {
		v, err := one(k)
		if err != nil || v == "" {
			return err
		}
		n, perr := strconv.Atoi(v)
		if perr != nil || n <= 0 {
			return bad("option %s=%q is not a positive integer", k, v)
		}
		*dst = n
		return nil
	}
	var layout, notify, skip string
	var maxlen int
	steps := []error{
		func() (err error) { layout, err = one("layout"); return }(),
		func() (err error) { o.Prefix, err = one("prefix"); return }(),
		func() (err error) { copts.MasterName, err = one("master"); return }(),
		func() (err error) { copts.SentinelUsername, err = one("sentinel_username"); return }(),
		func() (err error) { copts.SentinelPassword, err = one("sentinel_password"); return }(),
		func() (err error) { copts.ClientName, err = one("client_name"); return }(),
		func() (err error) { notify, err = one("notify"); return }(),
		func() (err error) { skip, err = one("skip_verify"); return }(),
		dur("sweep", &o.Sweep), dur("quiet", &o.Quiet), dur("poll", &o.Poll), dur("linger", &o.Linger),
		dur("dial_timeout", &copts.DialTimeout), dur("read_timeout", &copts.ReadTimeout),
		dur("write_timeout", &copts.WriteTimeout),
		integer("pool_size", &copts.PoolSize), integer("maxlen", &maxlen),
	}
	for _, err := range steps {
		if err != nil {
			return nil, o, err
		}
	}
	for k := range q {
		return nil, o, bad("unknown option %q", k)
	}
	o.Layout, o.Notify, o.MaxLen = Layout(layout), Notify(notify), int64(maxlen)
	switch skip {
	case "":
	case "true", "1":
		if copts.TLSConfig == nil {
			return nil, o, bad("skip_verify needs rediss://")
		}
		copts.TLSConfig.InsecureSkipVerify = true
	case "false", "0":
	default:
		return nil, o, bad("option skip_verify=%q (want true or false)", skip)
	}
	switch {
	case mode == "sentinel" && copts.MasterName == "":
		return nil, o, bad("redis+sentinel needs ?master=<name>")
	case mode != "sentinel" && copts.MasterName != "":
		return nil, o, bad("option master is for redis+sentinel://")
	case mode != "sentinel" && (copts.SentinelPassword != "" || copts.SentinelUsername != ""):
		return nil, o, bad("sentinel credentials are for redis+sentinel://")
	case (mode == "cluster" || len(copts.Addrs) > 1 && mode == "") && copts.DB != 0:
		return nil, o, bad("Redis Cluster has only database 0")
	}
	if mode == "" && len(copts.Addrs) > 1 {
		copts.IsClusterMode = true
	}
	if err := o.defaults(); err != nil {
		return nil, o, bad("%v", strings.TrimPrefix(err.Error(), driver.ErrInvalid.Error()+": redis: "))
	}
	return copts, o, nil
}
