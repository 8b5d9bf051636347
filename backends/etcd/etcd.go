// Package etcd is Roster's etcd v3 backend, on go.etcd.io/etcd/client/v3.
// Import it for its side effect and open a registry by URL with
// registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/etcd"
//
//	reg, err := registry.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379?prefix=/roster")
//
// Use etcds:// for TLS. Give every host its port, or none for 2379. [New]
// builds a driver from [Options] instead, and [NewFromClient] wraps a
// client you already have. [ParseURL] reads the options from a URL.
//
// Options use the vocabulary every backend shares. An unknown option, or
// one given twice, is an error. The password comes from the URL, the
// option password or password_file. A URL with a user and no password
// reads $ROSTER_ETCD_PASSWORD ([EnvPassword]).
//
// Each registration is one key, <prefix>/<service>/<instance-id>, holding
// the instance as JSON. It hangs on the process's lease for its TTL. All
// registrations with one TTL share one lease. TTLs are whole seconds, at
// least 2s. A heartbeat renews the shared lease, at most once per TTL/6,
// on one stream the driver keeps open. One look-up per renewal lists the
// keys still on the lease. So a key deleted behind the driver's back is
// found within two heartbeats, and the key is written again.
//
// A watch lists the service, then watches from the next revision. No
// change is lost between the two. It relists after a compaction, a lost
// leader or a wipe. A dropped connection fails the watch at once, with
// registry.ErrUnavailable. A silent stall does so within about three
// progress intervals.
//
// Writes are linearizable. A crashed instance leaves within its TTL plus
// about half a second. A leader election, or a restart of a one-member
// cluster, gives every lease its full TTL again. So a dead instance may
// linger one more TTL.
//
// docs/backends/etcd.md has every option, the design choices behind the
// leases and the watch, and the measurements.
//
// Errors wrap registry.ErrUnavailable, ErrNotFound, ErrInvalid or
// ErrClosed. They never contain the password.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/roster-go/roster/registry/driver"
)

// URL schemes of this backend.
const (
	Scheme    = "etcd"
	SchemeTLS = "etcds"
)

// Defaults of Options.
const (
	defaultPrefix           = "/roster"
	defaultDialTimeout      = 5 * time.Second
	defaultRequestTimeout   = 5 * time.Second
	defaultProgressInterval = 2 * time.Second
)

// Limits of the backend: etcd's lease TTLs are whole seconds, and a server
// with default election settings (100ms heartbeat, 1s election) grants no
// less than 2s.
// limits: etcd's own lease bounds (MaxLeaseTTL is 9,000,000,000s).
var limits = driver.Limits{MinTTL: 2 * time.Second, TTLGranularity: time.Second, MaxTTL: 9_000_000_000 * time.Second}

func init() {
	driver.Register(Scheme, openURL, publicOptions...)
	driver.Register(SchemeTLS, openURL, publicOptions...)
}

// Driver is a driver.Driver on an etcd v3 cluster. Wrap it with
// registry.New, or get one through registry.Open with an etcd:// URL.
type Driver struct {
	cli      *clientv3.Client
	ownsCli  bool
	prefix   string // without trailing slash
	reqT     time.Duration
	progress time.Duration

	probeSem chan struct{} // one probe at a time; guards probeAt, probeRev
	probeAt  time.Time
	probeRev int64

	leases  leasePool // one shared lease per TTL
	renewer renewer   // their renewals, over one stream

	lostMu sync.Mutex
	lost   chan struct{} // closed and replaced when the connection drops
	stop   context.CancelFunc
	done   chan struct{}

	// plain finds endpoints that speak TLS only when we do not (TLS on a
	// plain port is found at Open, by checkTLS).
	plain backend.PortCheck
}

// Options configure a Driver opened with New.
type Options struct {
	// Client settings: Endpoints, DialTimeout, Username, Password, TLS….
	// A nil Logger is replaced with one writing to slog.Default() at debug
	// level, so the client's lines stay off stderr.
	// AutoSyncInterval should stay 0 when clients reach the cluster through
	// proxies or load balancers.
	Client clientv3.Config
	// Prefix of every key, default /roster. A trailing slash is
	// dropped.
	Prefix string
	// RequestTimeout bounds each call (the caller's context may end it
	// sooner). Default 5s.
	RequestTimeout time.Duration
	// ProgressInterval: a watch silent for this long checks that the server
	// answers and that its revision did not go back, and fails with
	// ErrUnavailable if no answer comes within another interval. Default 2s.
	ProgressInterval time.Duration
}

// String formats the options with the password masked, so that logging
// them (%v, %+v, slog) never prints it.
func (o Options) String() string {
	type plain Options // no String method: formats field by field
	p := plain(o)
	if p.Client.Password != "" {
		p.Client.Password = "xxxxx"
	}
	return fmt.Sprintf("%+v", p)
}

// New connects a Driver. The client connects lazily: an unreachable
// cluster shows as ErrUnavailable on the first calls, not here (unless
// credentials are set, which are checked at once).
func New(opts Options) (*Driver, error) {
	cfg := opts.Client
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: %w: no endpoints", driver.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = libLogger()
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.DialKeepAliveTime == 0 {
		// Detects half-open connections (a partition that resets nothing).
		// The server's default minimum ping interval is 5s.
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 10*time.Second, 5*time.Second
	}
	if len(cfg.DialOptions) == 0 {
		// gRPC's default reconnect backoff grows to 2 minutes, so a client
		// cut off for a while would stay away long after the network heals.
		cfg.DialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})}
	}
	if err := checkTLS(&cfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		if isAuthErr(err) {
			return nil, fmt.Errorf("etcd: connect: %w: authentication failed: %v", driver.ErrInvalid, err)
		}
		if cfg.TLS == nil {
			pc := backend.PortCheck{Addrs: hosts(cfg.Endpoints)}
			if perr := pc.Diagnose(); perr != nil {
				return nil, fmt.Errorf("etcd: connect: %w", perr)
			}
		}
		return nil, fmt.Errorf("etcd: connect: %w: %v", driver.ErrUnavailable, err)
	}
	d, err := newDriver(cli, opts)
	if err != nil {
		cli.Close()
		return nil, err
	}
	d.ownsCli = true
	if cfg.TLS == nil {
		d.plain.Addrs = hosts(cfg.Endpoints)
	}
	return d, nil
}

// NewFromClient returns a Driver on an existing client, which Close leaves
// open. Options.Client is ignored.
func NewFromClient(cli *clientv3.Client, opts Options) (*Driver, error) {
	return newDriver(cli, opts)
}

func newDriver(cli *clientv3.Client, opts Options) (*Driver, error) {
	p := opts.Prefix
	if p == "" {
		p = defaultPrefix
	}
	p = strings.TrimRight(p, "/")
	if p == "" {
		return nil, fmt.Errorf("etcd: %w: prefix %q leaves nothing once its trailing slashes are dropped", driver.ErrInvalid, opts.Prefix)
	}
	d := &Driver{cli: cli, prefix: p, reqT: opts.RequestTimeout, progress: opts.ProgressInterval,
		probeSem: make(chan struct{}, 1), lost: make(chan struct{}), done: make(chan struct{})}
	if d.reqT <= 0 {
		d.reqT = defaultRequestTimeout
	}
	if d.progress <= 0 {
		d.progress = defaultProgressInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	go d.monitor(ctx)
	return d, nil
}

// key returns the key of an instance: <prefix>/<service>/<id>.
func (d *Driver) key(service, id string) string { return d.servicePrefix(service) + id }

func (d *Driver) servicePrefix(service string) string { return d.prefix + "/" + service + "/" }

// Limits implements driver.Driver: TTLs of at least 2s, in whole seconds.
func (d *Driver) Limits() driver.Limits { return limits }

// Local reports whether every endpoint of the client is on this host (an
// in-process server's are): then loopback addresses are served (see
// registry.AllowLoopback).
func (d *Driver) Local() bool { return backend.LocalHosts(d.cli.Endpoints()...) }

// Close implements driver.Driver. It closes the client if New made it.
func (d *Driver) Close() error {
	d.stop()
	<-d.done
	d.renewer.close()
	if d.ownsCli {
		if err := d.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("etcd: close: %w", err)
		}
	}
	return nil
}

// monitor follows the client's connection: each time it stops being
// ready (server restarted, network cut), watch streams are told, because
// the client library resumes watches silently and a restart that loses
// nothing would otherwise go unseen by watchers.
func (d *Driver) monitor(ctx context.Context) {
	defer close(d.done)
	conn := d.cli.ActiveConnection()
	st := conn.GetState()
	for conn.WaitForStateChange(ctx, st) {
		next := conn.GetState()
		if next == connectivity.Ready {
			d.plain.Sound() // a working transport: the protocols match
		}
		if st == connectivity.Ready && next != connectivity.Ready {
			d.lostMu.Lock()
			close(d.lost)
			d.lost = make(chan struct{})
			d.lostMu.Unlock()
		}
		st = next
	}
}

// lostC returns a channel closed when the connection next drops.
func (d *Driver) lostC() <-chan struct{} {
	d.lostMu.Lock()
	defer d.lostMu.Unlock()
	return d.lost
}

// op bounds ctx by the request timeout.
func (d *Driver) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.reqT)
}

// wrap adds the operation to a client error. ctx is the call's: when it
// ended, Registry adds its error. A role refused the prefix gets a hint,
// and an outage may be a port mix-up, which PortCheck diagnoses.
func (d *Driver) wrap(ctx context.Context, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("etcd: %s: %w", what, err)
	case isAuthErr(err):
		return fmt.Errorf("etcd: %s: %w (check the user's role: it needs readwrite on the prefix %s/)", what, err, d.prefix)
	case d.ErrorKind(err) != driver.ErrUnavailable:
		return fmt.Errorf("etcd: %s: %w", what, err)
	}
	if perr := d.plain.Diagnose(); perr != nil {
		return fmt.Errorf("etcd: %s: %w", what, perr)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The request timeout's: not the caller's deadline, so not wrapped.
		return fmt.Errorf("etcd: %s: no answer within %v", what, d.reqT)
	}
	return fmt.Errorf("etcd: %s: %w", what, err)
}

// ErrorKind implements driver.Driver. A lease the server lost is
// ErrNotFound. A refused credential or role, and a request the server
// or the client refuses, are ErrInvalid: a retry cannot succeed.
func (d *Driver) ErrorKind(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return driver.ErrNotFound
	case isAuthErr(err) || refused(err):
		return driver.ErrInvalid
	}
	return driver.ErrUnavailable
}

// refused reports a server's rejection of the request itself ("too large
// lease TTL", "request is too large", permission denied), as opposed to
// a failure to answer.
func refused(err error) bool {
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
		// The client's own refusal to send a message past its limit.
		if code == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max") {
			return true
		}
	}
	switch code {
	case codes.InvalidArgument, codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

func isAuthErr(err error) bool {
	return errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrAuthNotEnabled)
}

func encode(in driver.Instance) (string, error) {
	b, err := backend.Encode(in)
	if err != nil {
		return "", fmt.Errorf("etcd: encode %s: %w: %v", in.ID, driver.ErrInvalid, err)
	}
	return string(b), nil
}

// idOf returns the instance ID of a key under servicePrefix, or false for
// keys deeper in the tree.
func idOf(servicePrefix string, key []byte) (string, bool) {
	id, ok := strings.CutPrefix(string(key), servicePrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// Register implements driver.Driver: a new lease, and the key put with it.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	val, err := encode(inst)
	if err != nil {
		return nil, err
	}
	r := &registration{d: d, key: d.key(inst.Service, inst.ID), id: inst.ID, ttl: ttlSeconds(ttl)}
	if err := r.grantAndPut(ctx, "register "+inst.ID, val); err != nil {
		return nil, err
	}
	return r, nil
}

func ttlSeconds(ttl time.Duration) int64 {
	s := int64(ttl / time.Second) // rounded up without ttl+1s-1, which overflows
	if ttl%time.Second != 0 {
		s++
	}
	return max(s, int64(limits.MinTTL/time.Second))
}

// List implements driver.Driver with one linearizable range read.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	c, cancel := d.op(ctx)
	defer cancel()
	sp := d.servicePrefix(service)
	resp, err := d.cli.Get(c, sp, clientv3.WithPrefix())
	if err != nil {
		return driver.Snapshot{}, d.wrap(ctx, "list "+service, err)
	}
	snap := driver.Snapshot{Service: service, Revision: uint64(resp.Header.Revision), At: time.Now(),
		Instances: make([]driver.Instance, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		id, ok := idOf(sp, kv.Key)
		if !ok {
			continue
		}
		if in, ok := backend.DecodeStored(service, id, kv.Value); ok {
			snap.Instances = append(snap.Instances, in)
		}
	}
	return snap, nil
}

// Services implements driver.Driver with a keys-only range read of the
// whole prefix.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	c, cancel := d.op(ctx)
	defer cancel()
	root := d.prefix + "/"
	resp, err := d.cli.Get(c, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, d.wrap(ctx, "services", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), root)
		svc, id, ok := strings.Cut(rest, "/")
		if !ok || id == "" || strings.Contains(id, "/") || backend.ValidateService(svc) != nil {
			continue
		}
		// Keys come sorted, so one service's keys are adjacent.
		if len(out) == 0 || out[len(out)-1] != svc {
			out = append(out, svc)
		}
	}
	// Not yet sorted by name: "svc-a/…" sorts before "svc/…".
	slices.Sort(out)
	return slices.Compact(out), nil
}

// registration is one key, attached to the shared lease of its TTL.
type registration struct {
	d   *Driver
	key string
	id  string
	ttl int64 // seconds

	mu    sync.Mutex
	lease *sharedLease // nil once released

	// Times on mono, read by heartbeats without a lock.
	putAt  atomic.Int64 // when the last put of the key returned
	beatAt atomic.Int64 // the last heartbeat, or the join
	seen   atomic.Int64 // the last key listing of the lease that had the key
}

func (r *registration) current() *sharedLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// releaseLease takes the registration off its lease, once.
func (r *registration) releaseLease(ctx context.Context) {
	r.mu.Lock()
	l := r.lease
	r.lease = nil
	r.mu.Unlock()
	if l != nil {
		l.leave(r)
		r.d.release(ctx, l)
	}
}

// expire deletes the key of a registration that stopped beating, as the
// server would have expired a lease of its own, and takes it off the
// shared lease.
func (r *registration) expire(ctx context.Context) error {
	c, cancel := r.d.op(ctx)
	defer cancel()
	if _, err := r.d.cli.Delete(c, r.key); err != nil {
		return r.d.wrap(ctx, "expire "+r.id, err)
	}
	r.releaseLease(ctx)
	return nil
}

// grantAndPut puts the key on the shared lease of its TTL (granted if
// there is none). A lease the server lost is dropped and the put tried
// once more, on a new one.
func (r *registration) grantAndPut(ctx context.Context, op, val string) error {
	d := r.d
	for attempt := 0; ; attempt++ {
		l, err := d.acquire(ctx, op, r.ttl)
		if err != nil {
			return err
		}
		if old := r.current(); old != l {
			l.join(r) // before the put: see readKeys
		}
		err = d.put(ctx, r.key, val, l.id)
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				d.drop(l)
			}
			if r.current() != l {
				l.leave(r)
			}
			d.release(ctx, l)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				continue
			}
			return d.wrap(ctx, op+": put", err)
		}
		r.mu.Lock()
		old := r.lease
		r.lease = l
		r.mu.Unlock()
		if old != nil && old != l { // the old lease, on a re-grant by Update
			old.leave(r)
			d.release(ctx, old)
		} else if old == l {
			d.release(ctx, l) // counted once already
		}
		r.putAt.Store(mono())
		r.beatAt.Store(mono())
		return nil
	}
}

func (d *Driver) put(ctx context.Context, key, val string, lease clientv3.LeaseID) error {
	c, cancel := d.op(ctx)
	defer cancel()
	_, err := d.cli.Put(c, key, val, clientv3.WithLease(lease))
	return err
}

// Heartbeat implements driver.Registration: a keep-alive of the shared
// lease (skipped when another registration renewed it within TTL/6), then
// a check that the key is still on it, in the keys the server listed at
// the last renewal: no request of its own.
func (r *registration) Heartbeat(ctx context.Context) error {
	d := r.d
	l := r.current()
	if l == nil || !d.isCurrent(l) {
		// The lease was lost (another heartbeat saw it) or revoked.
		r.releaseLease(ctx)
		return fmt.Errorf("etcd: heartbeat %s: %w: lease lost", r.id, driver.ErrNotFound)
	}
	if err := d.keepAlive(ctx, "heartbeat "+r.id, l); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The registration is gone: the driver's own knowledge, which
			// callers of a raw driver (dual's sides) read too.
			r.releaseLease(ctx)
			return fmt.Errorf("%w: %w", err, driver.ErrNotFound)
		}
		return err
	}
	if l.lost(r) {
		// Deleted behind our back, or overwritten without the lease (it
		// would not expire with us): the engine registers anew, on the
		// same lease.
		r.releaseLease(ctx)
		return fmt.Errorf("etcd: heartbeat %s: %w: key %s is no longer on the lease (deleted?)", r.id, driver.ErrNotFound, r.key)
	}
	r.beatAt.Store(mono())
	return nil
}

// Update implements driver.Registration: the key is rewritten on its
// lease, or on a new one if the server lost the lease.
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	val, err := encode(inst)
	if err != nil {
		return err
	}
	d := r.d
	l := r.current()
	if l != nil {
		if err = d.put(ctx, r.key, val, l.id); err == nil {
			r.putAt.Store(mono())
		}
	}
	if l == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		if l != nil {
			d.drop(l)
		}
		return r.grantAndPut(ctx, "update "+r.id, val)
	}
	if err != nil {
		return d.wrap(ctx, "update "+r.id+": put", err)
	}
	return nil
}

// Deregister implements driver.Registration: delete the key (the change
// watchers see), then leave the lease, which is revoked after its last
// registration.
func (r *registration) Deregister(ctx context.Context) error {
	d := r.d
	c, cancel := d.op(ctx)
	defer cancel()
	if _, err := d.cli.Delete(c, r.key); err != nil {
		return d.wrap(ctx, "deregister "+r.id+": delete", err)
	}
	r.releaseLease(ctx)
	return nil
}
