// Package nats is the NATS backend of Roster, on a JetStream key-value
// bucket. It needs NATS Server 2.11 or newer, for per-message TTLs.
//
// Import it for its side effect and open a registry by URL:
//
//	import _ "github.com/roster-go/roster/backends/nats"
//
//	r, err := registry.Open(ctx, "nats://10.0.0.1:4222?bucket=roster")
//
// Each instance is the key Key(service, id) of the bucket, its value the
// instance's JSON, written with the registration's TTL as its message
// TTL; each heartbeat writes it again. docs/backends/nats.md has the URL
// options, the design and the limits.
package nats

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// URL schemes of this backend. nats+tls is nats with tls=true.
const (
	Scheme    = "nats"
	SchemeTLS = "nats+tls"
)

// Defaults of Options.
const (
	DefaultBucket         = "roster"
	DefaultRequestTimeout = 5 * time.Second
)

// markerTTL is how long the bucket keeps the marker of a key that expired
// or was deregistered. Watchers learn of the removal from it.
const markerTTL = time.Minute

func init() {
	driver.Register(Scheme, openURL, publicOptions...)
	driver.Register(SchemeTLS, openURL, publicOptions...)
}

// Options configure a Driver opened with New.
type Options struct {
	Servers        []string      // host:port of each server
	Bucket         string        // key-value bucket, default DefaultBucket
	Replicas       int           // of a bucket the driver creates, default 1
	User, Password string        // optional
	Token          string        // optional, instead of User and Password
	TLS            *tls.Config   // nil: plain TCP
	RequestTimeout time.Duration // bound on a call without a deadline
}

// Driver is a driver.Driver on a NATS JetStream key-value bucket. Wrap it
// with registry.New, or get one through registry.Open with a nats:// URL.
type Driver struct {
	opts Options
	name string // "nats host:port", for errors
	nc   *natsio.Conn
	js   jetstream.JetStream

	finding sync.Mutex // held while the bucket is looked up
	mu      sync.Mutex
	kv      jetstream.KeyValue // nil until the bucket was found or made
	down    chan struct{}      // closed at a disconnect, then replaced
	up      chan struct{}      // closed at a reconnect, then replaced
}

// New returns a Driver. A refused login or TLS handshake is ErrInvalid.
// An unreachable server is not an error: the client connects in the
// background, and calls fail with ErrUnavailable meanwhile. The bucket
// is made by the first Register or Watch that finds it missing.
func New(opts Options) (*Driver, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, name: "nats " + opts.Servers[0], down: make(chan struct{}), up: make(chan struct{})}
	nopts := []natsio.Option{
		natsio.Name("roster"), natsio.MaxReconnects(-1), natsio.ReconnectWait(250 * time.Millisecond),
		natsio.ReconnectBufSize(-1), // while disconnected, a call waits in bounded, then fails
		natsio.PingInterval(2 * time.Second), natsio.MaxPingsOutstanding(2),
		natsio.Timeout(opts.RequestTimeout),
		natsio.DisconnectErrHandler(func(*natsio.Conn, error) { d.disconnected() }),
		natsio.ReconnectHandler(func(*natsio.Conn) { d.reconnected() }),
		natsio.ConnectHandler(func(*natsio.Conn) { d.reconnected() }), // a first connect in the background
	}
	if opts.Token != "" {
		nopts = append(nopts, natsio.Token(opts.Token))
	} else if opts.User != "" {
		nopts = append(nopts, natsio.UserInfo(opts.User, opts.Password))
	}
	if opts.TLS != nil {
		nopts = append(nopts, natsio.Secure(opts.TLS))
	}
	urls := "nats://" + strings.Join(opts.Servers, ",nats://")
	// The first try, short, finds a refusal; then the client keeps trying.
	var err error
	d.nc, err = natsio.Connect(urls, append(nopts, natsio.Timeout(min(opts.RequestTimeout, time.Second)))...)
	if err != nil && d.ErrorKind(err) != driver.ErrInvalid {
		d.nc, err = natsio.Connect(urls, append(nopts, natsio.RetryOnFailedConnect(true))...)
	}
	if err == nil {
		d.js, err = jetstream.New(d.nc)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", d.fail("connect", err), d.ErrorKind(err))
	}
	return d, nil
}

func (o *Options) setDefaults() error {
	o.Bucket = cmp.Or(o.Bucket, DefaultBucket)
	o.Replicas = max(o.Replicas, 1)
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case len(o.Servers) == 0:
		return backend.Invalid("servers", "none given")
	case strings.Trim(o.Bucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "":
		return backend.Invalid("bucket", "%q: want letters, digits, - and _", o.Bucket)
	case o.Token != "" && o.User != "":
		return backend.Invalid("token", "give a token or a user, not both")
	}
	return nil
}

// Key is the bucket key of an instance: <service>.<id>, each dot of the
// ID stored as "=" so that the last token is the ID.
func Key(service, id string) string { return service + "." + strings.ReplaceAll(id, ".", "=") }

// splitKey is the inverse of Key.
func splitKey(key string) (service, id string, ok bool) {
	i := strings.LastIndexByte(key, '.')
	return key[:max(i, 0)], strings.ReplaceAll(key[i+1:], "=", "."), i > 0
}

// disconnected ends the streams of the lost connection: they cannot know
// what they missed.
func (d *Driver) disconnected() {
	d.mu.Lock()
	close(d.down)
	d.down = make(chan struct{})
	d.mu.Unlock()
}

// bucket returns the bucket, made first when create is set and it is
// missing. One lookup runs at a time: a burst of first calls makes it once.
func (d *Driver) bucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	d.finding.Lock()
	defer d.finding.Unlock()
	d.mu.Lock()
	kv := d.kv
	d.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := d.js.KeyValue(ctx, d.opts.Bucket)
	if create && errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = d.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: d.opts.Bucket, History: 1, Replicas: d.opts.Replicas, LimitMarkerTTL: markerTTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = d.js.KeyValue(ctx, d.opts.Bucket)
		}
	}
	if err != nil {
		return nil, err
	}
	if st, err := kv.Status(ctx); err != nil {
		return nil, err
	} else if st.(*jetstream.KeyValueBucketStatus).LimitMarkerTTL() == 0 {
		return nil, fmt.Errorf("%w: bucket %s was made without one (LimitMarkerTTL)", errNoTTL, d.opts.Bucket)
	}
	d.mu.Lock()
	d.kv = kv
	d.mu.Unlock()
	return kv, nil
}

var errNoTTL = errors.New("no per-key TTL")

// Register writes the instance with a message TTL of ttl. After a wipe
// it makes the bucket again.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	r := &registration{d: d, key: Key(inst.Service, inst.ID), inst: inst, ttl: ttl}
	_, err := d.bucket(ctx, true)
	if err == nil {
		if err = r.write(ctx, inst, 0); noBucket(err) {
			d.mu.Lock()
			d.kv = nil
			d.mu.Unlock()
			if _, err = d.bucket(ctx, true); err == nil {
				err = r.write(ctx, inst, 0)
			}
		}
	}
	if err != nil {
		return nil, d.fail("register "+inst.Service+"/"+inst.ID, err)
	}
	return r, nil
}

// List reads the current values of a watch on the service.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, err := d.newStream(ctx, service, false)
	if noBucket(err) {
		return driver.Snapshot{Service: service, At: time.Now()}, nil
	}
	var snap driver.Snapshot
	if err == nil {
		snap, err = s.Next(ctx)
		s.Close()
	}
	if err != nil {
		return driver.Snapshot{}, d.fail("list "+service, err)
	}
	return snap, nil
}

// Services lists the distinct services of the bucket's live keys.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	var names []string
	kv, err := d.bucket(ctx, false)
	if err == nil {
		var keys jetstream.KeyLister
		if keys, err = kv.ListKeys(ctx); err == nil {
			seen := map[string]bool{}
			for k := range keys.Keys() { // closed at the end of the keys, or of ctx
				if strings.HasPrefix(k, recordsToken+".") {
					continue // a record (store.go), not an instance
				}
				if svc, _, ok := splitKey(k); ok && !seen[svc] {
					seen[svc] = true
					names = append(names, svc)
				}
			}
			err = ctx.Err()
		}
	}
	if err != nil && !noBucket(err) {
		return nil, d.fail("services", err)
	}
	return names, nil
}

// Limits: the server keeps message TTLs in whole seconds, 1s at least.
// It adds a TTL to the write's time in int64 nanoseconds: 100 years stay
// clear of the overflow for another century.
func (d *Driver) Limits() driver.Limits {
	return driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second, MaxTTL: 100 * 365 * 24 * time.Hour}
}

// Local reports whether every server is on this host: then loopback
// addresses are served (see registry.AllowLoopback).
func (d *Driver) Local() bool { return backend.LocalHosts(d.opts.Servers...) }

// Close closes the connection.
func (d *Driver) Close() error {
	d.nc.Close()
	return nil
}

// bounded gives ctx the request timeout when it has no deadline, and
// waits for the connection, at most the request timeout. A client that
// dials per call waits so too: a call made while the client reconnects
// (a server restarted a moment ago) then succeeds instead of failing at
// once, and a server that stays down fails the call within the timeout.
func (d *Driver) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, d.opts.RequestTimeout)
	}
	wait, stop := context.WithTimeout(ctx, d.opts.RequestTimeout)
	d.ready(wait)
	stop()
	return ctx, cancel
}

// ready returns once the client is connected, closed, or ctx ended.
func (d *Driver) ready(ctx context.Context) {
	for {
		d.mu.Lock()
		up := d.up
		d.mu.Unlock()
		if d.nc.IsConnected() || d.nc.IsClosed() {
			return
		}
		select {
		case <-up:
		case <-ctx.Done():
			return
		}
	}
}

// reconnected wakes the calls waiting in ready.
func (d *Driver) reconnected() {
	d.mu.Lock()
	close(d.up)
	d.up = make(chan struct{})
	d.mu.Unlock()
}

// fail names the server and the operation once, adds the refusal that
// explains a failure (a login refused on a reconnect is reported apart
// from the calls that then fail) and redacts the secrets.
func (d *Driver) fail(op string, err error) error {
	if last := d.nc.LastError(); isRefusal(last) && !errors.Is(err, last) && !errors.Is(err, driver.ErrNotFound) {
		err = fmt.Errorf("%w (%w)", err, last)
	}
	if errors.Is(err, natsio.ErrReconnectBufExceeded) || errors.Is(err, context.DeadlineExceeded) && !d.nc.IsConnected() {
		// With buffering off, the first is how the client says it is not
		// connected; the second, that it did not connect in time.
		err = fmt.Errorf("not connected, reconnecting in the background: %w", err)
	}
	return backend.Redacted(fmt.Errorf("%s: %s: %w", d.name, op, err), d.opts.Password, d.opts.Token)
}

// ErrorKind is the table of what the client's errors mean. A refused
// login or permission, a TLS mix-up and a bucket without per-key TTL are
// ErrInvalid, as is a request the server rejects: retrying cannot help.
func (d *Driver) ErrorKind(err error) error {
	var api *jetstream.APIError
	if _, tlsErr := backend.TLSCause(err); tlsErr || isRefusal(err) || errors.Is(err, errNoTTL) ||
		errors.As(err, &api) && api.Code == 400 {
		return driver.ErrInvalid
	}
	return driver.ErrUnavailable
}

func isRefusal(err error) bool {
	for _, e := range []error{natsio.ErrAuthorization, natsio.ErrAuthExpired, natsio.ErrAuthRevoked,
		natsio.ErrAccountAuthExpired, natsio.ErrPermissionViolation, natsio.ErrSecureConnRequired, natsio.ErrSecureConnWanted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// noBucket reports an error of a bucket that does not exist (never made,
// or wiped).
func noBucket(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, natsio.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

type registration struct {
	d    *Driver
	key  string
	inst driver.Instance
	ttl  time.Duration
	rev  uint64 // of the last write: the next one expects it
}

// write publishes inst to the key with the TTL. With rev set, the server
// refuses the write unless the key's last revision is rev.
func (r *registration) write(ctx context.Context, inst driver.Instance, rev uint64) error {
	val, err := backend.Encode(inst)
	if err != nil {
		return err
	}
	// Registry rounds the TTL up to whole seconds, as Limits asks.
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(r.ttl)}
	if rev != 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	ack, err := r.d.js.PublishMsg(ctx, &natsio.Msg{Subject: "$KV." + r.d.opts.Bucket + "." + r.key, Data: val}, opts...)
	if err == nil {
		r.inst, r.rev = inst, ack.Sequence
	}
	return err
}

// Heartbeat writes the instance again, expecting its last revision: a key
// that changed since (expired, deleted, wiped) is ErrNotFound.
func (r *registration) Heartbeat(ctx context.Context) error {
	return r.rewrite(ctx, "heartbeat", r.inst)
}

// Update writes inst as Heartbeat does.
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	return r.rewrite(ctx, "update", inst)
}

func (r *registration) rewrite(ctx context.Context, op string, inst driver.Instance) error {
	ctx, cancel := r.d.bounded(ctx)
	defer cancel()
	err := r.write(ctx, inst, r.rev)
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) || noBucket(err) {
		err = fmt.Errorf("the key is gone (expired or deleted): %w", driver.ErrNotFound)
	}
	if err != nil {
		return r.d.fail(op+" "+r.inst.Service+"/"+r.inst.ID, err)
	}
	return nil
}

// Deregister purges the key. Its marker tells the watchers.
func (r *registration) Deregister(ctx context.Context) error {
	ctx, cancel := r.d.bounded(ctx)
	defer cancel()
	kv, err := r.d.bucket(ctx, false)
	if err == nil {
		err = kv.Purge(ctx, r.key, jetstream.PurgeTTL(markerTTL))
	}
	if err != nil && !noBucket(err) {
		return r.d.fail("deregister "+r.inst.Service+"/"+r.inst.ID, err)
	}
	return nil
}
