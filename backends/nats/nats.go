// Package nats is the NATS backend of Roster, on a JetStream key-value
// bucket (github.com/nats-io/nats.go/jetstream). It needs NATS Server
// 2.11 or newer, for per-message TTLs.
//
// Import it for its side effect and open a registry by URL:
//
//	import _ "github.com/roster-go/roster/backends/nats"
//
//	r, err := registry.Open(ctx, "nats://10.0.0.1:4222?bucket=roster")
//
// Each instance is the key <service>.<id> of the bucket, its value the
// instance's JSON. The dots of an ID are stored as "=", so the last token
// of a key is always the ID. A key carries the registration's TTL as its
// message TTL, and each heartbeat writes it again. docs/backends/nats.md
// has the URL options, the design and the limits.
package nats

import (
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
	DefaultPingInterval   = 2 * time.Second
)

// markerTTL is how long the bucket keeps the marker of a key that expired
// or was deregistered. Watchers learn of the removal from it.
const markerTTL = time.Minute

// limits: the server keeps message TTLs in whole seconds, 1s at least.
var limits = driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second}

func init() {
	driver.Register(Scheme, openURL, publicOptions...)
	driver.Register(SchemeTLS, openURL, publicOptions...)
}

// Options configure a Driver opened with New.
type Options struct {
	Servers        []string      // host:port of each server
	Bucket         string        // key-value bucket, default DefaultBucket
	Replicas       int           // of a bucket New creates, default 1
	User, Password string        // optional
	Token          string        // optional, instead of User and Password
	TLS            *tls.Config   // nil: plain TCP
	RequestTimeout time.Duration // bound on a call without a deadline
	PingInterval   time.Duration // finds a dead connection, default DefaultPingInterval
}

// Driver is a driver.Driver on a NATS JetStream key-value bucket. Wrap it
// with registry.New, or get one through registry.Open with a nats:// URL.
type Driver struct {
	opts Options
	name string // "nats host:port", for errors
	nc   *natsio.Conn
	js   jetstream.JetStream

	mu      sync.Mutex
	kv      jetstream.KeyValue // nil until the bucket was found or made
	down    chan struct{}      // closed at a disconnect, then replaced
	refusal error              // the server's last refusal (a permission)
	refused time.Time          // when
}

// New returns a Driver. It connects in the background: an unreachable
// server shows as ErrUnavailable on the first calls, not here. The bucket
// is created on the first Register or Watch that finds it missing.
func New(opts Options) (*Driver, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, name: "nats " + opts.Servers[0], down: make(chan struct{})}
	urls := make([]string, len(opts.Servers))
	for i, s := range opts.Servers {
		urls[i] = "nats://" + s
	}
	nopts := []natsio.Option{
		natsio.Name("roster"),
		natsio.RetryOnFailedConnect(true),
		natsio.MaxReconnects(-1),
		natsio.ReconnectWait(250 * time.Millisecond),
		// Fail a call at once while disconnected, rather than queue it.
		natsio.ReconnectBufSize(-1),
		natsio.PingInterval(opts.PingInterval),
		natsio.MaxPingsOutstanding(2),
		natsio.Timeout(opts.RequestTimeout),
		natsio.DisconnectErrHandler(func(*natsio.Conn, error) { d.disconnected() }),
		natsio.ErrorHandler(func(_ *natsio.Conn, _ *natsio.Subscription, err error) { d.noteRefusal(err) }),
	}
	switch {
	case opts.Token != "":
		nopts = append(nopts, natsio.Token(opts.Token))
	case opts.User != "":
		nopts = append(nopts, natsio.UserInfo(opts.User, opts.Password))
	}
	if opts.TLS != nil {
		nopts = append(nopts, natsio.Secure(opts.TLS))
	}
	var err error
	if d.nc, err = natsio.Connect(strings.Join(urls, ","), nopts...); err != nil {
		return nil, d.fail("connect", err)
	}
	if d.js, err = jetstream.New(d.nc); err != nil {
		d.nc.Close()
		return nil, d.fail("connect", err)
	}
	return d, nil
}

func (o *Options) setDefaults() error {
	if len(o.Servers) == 0 {
		return backend.Invalid("servers", "none given")
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if !validBucket(o.Bucket) {
		return backend.Invalid("bucket", "%q: want letters, digits, - and _", o.Bucket)
	}
	if o.Token != "" && o.User != "" {
		return backend.Invalid("token", "give a token or a user, not both")
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	return nil
}

func validBucket(b string) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return b != ""
}

// Key is the bucket key of an instance: <service>.<id>, each dot of the
// ID stored as "=" so that the last token is the ID.
func Key(service, id string) string { return service + "." + strings.ReplaceAll(id, ".", "=") }

// splitKey is the inverse of Key.
func splitKey(key string) (service, id string, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i <= 0 {
		return "", "", false
	}
	return key[:i], strings.ReplaceAll(key[i+1:], "=", "."), true
}

// disconnected ends the streams that follow the lost connection. They
// cannot know what they missed while it was down.
func (d *Driver) disconnected() {
	d.mu.Lock()
	close(d.down)
	d.down = make(chan struct{})
	d.mu.Unlock()
}

func (d *Driver) downChan() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.down
}

// noteRefusal keeps a permission error the server reported apart from
// the call it refused, which then only times out.
func (d *Driver) noteRefusal(err error) {
	if isRefusal(err) {
		d.mu.Lock()
		d.refusal, d.refused = err, time.Now()
		d.mu.Unlock()
	}
}

// bucket returns the bucket, made first when create is set and it is
// missing.
func (d *Driver) bucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
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
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.(*jetstream.KeyValueBucketStatus).LimitMarkerTTL() == 0 {
		return nil, fmt.Errorf("%w: bucket %s has no per-key TTL (create it with a limit marker TTL)", errNoTTL, d.opts.Bucket)
	}
	d.mu.Lock()
	d.kv = kv
	d.mu.Unlock()
	return kv, nil
}

var errNoTTL = errors.New("no per-key TTL")

// Register writes the instance with a message TTL of ttl.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	r := &registration{d: d, key: Key(inst.Service, inst.ID), inst: inst, ttl: ttl}
	op := "register " + inst.Service + "/" + inst.ID
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	if _, err := d.bucket(ctx, true); err != nil {
		return nil, d.fail(op, err)
	}
	err := r.write(ctx, inst, 0)
	if noBucket(err) { // wiped: make it again
		d.forget()
		if _, err = d.bucket(ctx, true); err == nil {
			err = r.write(ctx, inst, 0)
		}
	}
	if err != nil {
		return nil, d.fail(op, err)
	}
	return r, nil
}

// forget drops the bucket handle, so that the next use looks again.
func (d *Driver) forget() {
	d.mu.Lock()
	d.kv = nil
	d.mu.Unlock()
}

// List reads the service's keys with a watcher that stops after the
// current values.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, err := d.newStream(ctx, service, false)
	if noBucket(err) {
		return driver.Snapshot{Service: service, At: time.Now()}, nil
	}
	if err != nil {
		return driver.Snapshot{}, d.fail("list "+service, err)
	}
	defer s.Close()
	snap, err := s.Next(ctx)
	if err != nil {
		return driver.Snapshot{}, d.fail("list "+service, err)
	}
	return snap, nil
}

// Services lists the distinct services of the bucket's live keys.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	kv, err := d.bucket(ctx, false)
	if err == nil {
		var keys jetstream.KeyLister
		if keys, err = kv.ListKeys(ctx); err == nil {
			seen := map[string]bool{}
			var names []string
			for k := range keys.Keys() {
				if svc, _, ok := splitKey(k); ok && !seen[svc] {
					seen[svc] = true
					names = append(names, svc)
				}
			}
			// The lister stops itself at the end of the keys, or when ctx ends.
			if err = ctx.Err(); err == nil {
				return names, nil
			}
		}
	}
	if noBucket(err) {
		return nil, nil
	}
	return nil, d.fail("services", err)
}

// Limits: TTLs in whole seconds, from 1s.
func (d *Driver) Limits() driver.Limits { return limits }

// Close closes the connection.
func (d *Driver) Close() error {
	d.nc.Close()
	return nil
}

// bounded gives ctx the request timeout when it has no deadline.
func (d *Driver) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.opts.RequestTimeout)
}

type registration struct {
	d    *Driver
	key  string
	inst driver.Instance
	ttl  time.Duration
	rev  uint64 // of the last write: the next one expects it
}

// write publishes inst to the key with the TTL. With rev set the server
// refuses the write unless the key's last revision is rev.
func (r *registration) write(ctx context.Context, inst driver.Instance, rev uint64) error {
	val, err := backend.Encode(inst)
	if err != nil {
		return err
	}
	ttl := (r.ttl + time.Second - 1).Truncate(time.Second)
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	if rev != 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	msg := &natsio.Msg{Subject: "$KV." + r.d.opts.Bucket + "." + r.key, Data: val}
	ack, err := r.d.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return err
	}
	r.inst, r.rev = inst, ack.Sequence
	return nil
}

// Heartbeat writes the instance again, expecting its last revision. A key
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
	op += " " + r.inst.Service + "/" + r.inst.ID
	if wrongRevision(err) || noBucket(err) {
		return r.d.fail(op, fmt.Errorf("the key is gone (expired or deleted): %w", driver.ErrNotFound))
	}
	if err != nil {
		return r.d.fail(op, err)
	}
	return nil
}

// Deregister purges the key. Its marker tells watchers.
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
