package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

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
	s, _, err := d.hashSnapshot(ctx, d.c, service)
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
