package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// Driver is a driver.Driver on Redis. Wrap it with registry.New, or open
// it through registry.Open with a redis URL. It hands every operation to
// its layout.
type Driver struct {
	*conn
	layout layout
}

// layout is how instances are stored: hashLayout or keysLayout.
type layout interface {
	register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error)
	list(ctx context.Context, service string) (driver.Snapshot, error)
	services(ctx context.Context) ([]string, error)
	watch(ctx context.Context, service string) (driver.Stream, error)
	limits() driver.Limits
	notes(ctx context.Context) []string
}

// conn is what both layouts share: the client and the options.
type conn struct {
	copts *goredis.UniversalOptions // to open dedicated watch connections
	c     goredis.UniversalClient
	o     Options
	name  string // redacted, for errors

	ports backend.PortCheck // TLS to a plain port, or plain to a TLS one
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
	boundRetries(&cp)
	name := strings.Join(cp.Addrs, ",")
	cn := &conn{copts: &cp, c: goredis.NewUniversalClient(&cp), o: o, name: name}
	cn.ports.Addrs, cn.ports.TLS = cp.Addrs[:1], cp.TLSConfig
	cn.c.AddHook(answered{cn})
	if o.Layout == LayoutKeys {
		ks := &keysLayout{conn: cn}
		ks.hub.ks = ks
		return &Driver{cn, ks}, nil
	}
	h := &hashLayout{conn: cn}
	h.mux = &logMux{h: h}
	h.sweeps = newSweeper(h)
	return &Driver{cn, h}, nil
}

// boundRetries keeps a command against an unreachable deployment short
// when the options leave go-redis's retry counts at their defaults. They
// nest: each of a command's four attempts dials five times, and on
// Sentinel each dial asks the Sentinels, whose client retries four times
// again — one Lookup took 12s to fail during a partition, where it now
// takes under 0.3s. The registry retries leases and watches with its own
// backoff, so one dial per attempt, and one retry on Sentinel, lose
// nothing.
func boundRetries(c *goredis.UniversalOptions) {
	if c.DialerRetries == 0 {
		c.DialerRetries = 1
	}
	if c.MasterName != "" && c.MaxRetries == 0 {
		c.MaxRetries = 1
	}
}

// Client returns the driver's client, for code that needs raw access.
func (d *Driver) Client() goredis.UniversalClient { return d.c }

// Limits implements driver.Driver: hash has millisecond TTLs (min 10ms);
// keys has whole seconds (SET EX / EXPIRE, min 1s).
func (d *Driver) Limits() driver.Limits { return d.layout.limits() }

// Local reports whether every server the client dials (the Sentinels of
// a failover client) is on this host: then loopback addresses are served
// (see registry.AllowLoopback).
func (d *Driver) Local() bool {
	return backend.LocalHosts(d.copts.Addrs...)
}

// Notes describes where this deployment makes the driver behave worse than
// its best case, one sentence each ("roster conformance" prints them
// before its results). Only layout keys has any: without keyspace
// notifications, changes and expiries reach watchers by polling alone. It
// may ask the server (CONFIG GET notify-keyspace-events); a failure there
// is a note too, never an error.
func (d *Driver) Notes(ctx context.Context) []string { return d.layout.notes(ctx) }

// Close implements driver.Driver.
func (d *Driver) Close() error {
	if h, ok := d.layout.(*hashLayout); ok {
		h.sweeps.close()
		h.mux.close()
	}
	if ks, ok := d.layout.(*keysLayout); ok {
		ks.hub.close()
	}
	if err := d.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return d.wrap("close", err)
	}
	return nil
}

// known returns the port mix-up found in the last few seconds, so that
// calls fail at once instead of after another dial timeout each.
func (d *conn) known() error {
	if err := d.ports.Known(); err != nil {
		return fmt.Errorf("redis: %w", err) // the error names the address
	}
	return nil
}

// isCluster reports whether keys spread over several nodes.
func (d *conn) isCluster() bool {
	_, ok := d.c.(*goredis.ClusterClient)
	return ok
}

// watchClient opens a client with one connection, for one shard of
// watch reads (logMux): they must not hold a pooled connection, and closing this
// client is what interrupts a blocked read.
func (d *conn) watchClient() goredis.UniversalClient {
	cp := *d.copts
	cp.PoolSize = 1
	cp.MinIdleConns = 0
	cp.MaxIdleConns = 1
	cp.MaxRetries = -1 // a broken read is a reconnect: the stream resyncs
	return goredis.NewUniversalClient(&cp)
}

// wrap names the server and the operation, and hides the passwords:
// go-redis never prints it, but a proxy or a server error might echo
// it. ErrorKind classifies the result. A failure that is not a refusal
// may be a TLS setting that does not match the port: then the PortCheck
// diagnosis, an ErrInvalid naming the address, replaces it.
func (d *conn) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if !refused(err) && !errors.Is(err, goredis.ErrClosed) && !errors.Is(err, context.Canceled) {
		if perr := d.ports.Diagnose(); perr != nil {
			return fmt.Errorf("redis: %s: %w", op, perr)
		}
	}
	return fmt.Errorf("redis %s: %s: %w", d.name, op, backend.Redacted(explain(err), d.copts.Password, d.copts.SentinelPassword))
}

// Register implements driver.Driver.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	if err := d.known(); err != nil {
		return nil, err
	}
	return d.layout.register(ctx, inst, ttl)
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	if err := d.known(); err != nil {
		return driver.Snapshot{}, err
	}
	return d.layout.list(ctx, service)
}

// Services implements driver.Driver.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	if err := d.known(); err != nil {
		return nil, err
	}
	return d.layout.services(ctx)
}

// Watch implements driver.Driver.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	if err := d.known(); err != nil {
		return nil, err
	}
	return d.layout.watch(ctx, service)
}
