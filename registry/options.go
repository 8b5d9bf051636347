package registry

import (
	"context"
	"log/slog"
	"time"
)

// Defaults for registrations and watches.
const (
	DefaultTTL            = 10 * time.Second
	DefaultResyncInterval = 60 * time.Second
)

// Option configures a Registry.
type Option func(*options)

type options struct {
	name     string
	logger   *slog.Logger
	resync   time.Duration
	recovery time.Duration
	observer Observer
	loopback bool
}

// WithLogger sets the logger for background events (re-registrations,
// watch errors). The default discards them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithResyncInterval sets how often a live watch re-lists its service in
// full, to heal anything a backend's change feed missed. Each watch starts
// at a random phase within the interval so that many clients started
// together do not list together. Zero or negative disables resync;
// intervals below 10ms are raised to 10ms, so a unit slip
// (WithResyncInterval(1)) cannot relist in a busy loop.
func WithResyncInterval(d time.Duration) Option {
	return func(o *options) {
		o.resync = d
		if d > 0 {
			o.resync = max(d, minResync)
		}
	}
}

// Floors of the timings a caller sets: below them a loop would spin.
const (
	minResync   = 10 * time.Millisecond
	minInterval = time.Millisecond
)

// validateTimings rejects negative health-check and backoff durations,
// which have no meaning (0 means the default).
func (o *regOptions) validateTimings() error {
	if o.checkInterval < 0 {
		return invalid("health check interval", "%v is negative (0 means the heartbeat interval)", o.checkInterval)
	}
	if o.check != nil && o.checkInterval > 0 {
		o.checkInterval = max(o.checkInterval, minInterval)
	}
	if o.backoffBase < 0 || o.backoffMax < 0 {
		return invalid("retry backoff", "base %v, max %v: negative (0 means the default)", o.backoffBase, o.backoffMax)
	}
	return nil
}

// WithRecoveryWindow sets how long a watch keeps serving the instances it
// served before a backend fault while their leases re-register (default
// DefaultRecoveryWindow). When a watch's stream comes back from a failure,
// or sees the backend's revision go back (wiped, restarted empty), instances
// missing from the backend's answer are held until they reappear or the
// window ends; zero or negative applies the backend's answer at once.
func WithRecoveryWindow(d time.Duration) Option { return func(o *options) { o.recovery = d } }

// WithObserver installs hooks called on discovery events (for metrics).
func WithObserver(obs Observer) Option { return func(o *options) { o.observer = obs } }

// AllowLoopback lets the registry register and serve loopback addresses
// (127.0.0.1, [::1], localhost) although its backend's server is not on
// this host. Without it they are allowed only when the server is (a
// registry URL whose hosts are loopback, or mem://): an address that
// means "this host" sends every client elsewhere to itself. The URL
// option loopback=allow, read by Open, is the same. docs/security.md has
// the whole address policy.
func AllowLoopback() Option { return func(o *options) { o.loopback = true } }

func withName(n string) Option { return func(o *options) { o.name = n } }

// Observer receives discovery events. Implementations must be fast and
// safe for concurrent use; middleware provides an OpenTelemetry one.
type Observer interface {
	// Lookup is called after every Registry.Lookup: whether it was served
	// from a live watch cache, how long it took and its error.
	Lookup(service string, cacheHit bool, d time.Duration, err error)
	// Snapshot is called whenever a watch publishes a new snapshot.
	Snapshot(s Snapshot)
	// LeaseState is called when a lease changes state.
	LeaseState(inst Instance, s LeaseState, err error)
	// Resync is called after every periodic full relist of a watched
	// service, with its start, duration and error.
	Resync(service string, start time.Time, d time.Duration, err error)
}

// RegisterOption configures one registration.
type RegisterOption func(*regOptions)

type regOptions struct {
	ttl           time.Duration
	interval      time.Duration
	check         func(context.Context) error
	checkInterval time.Duration
	backoffBase   time.Duration
	backoffMax    time.Duration
	onState       func(LeaseState, error)
	drained       bool
}

// WithTTL sets how long the backend keeps the instance without a
// heartbeat (default 10s). Backends reject TTLs below their floor (etcd
// 2s) and round up to their granularity; Lease.TTL reports the result.
func WithTTL(d time.Duration) RegisterOption { return func(o *regOptions) { o.ttl = d } }

// WithHeartbeatInterval sets the heartbeat period (default TTL/3). The TTL
// must be at least three intervals, so that one lost heartbeat never
// expires a live instance; Register rejects anything shorter. Intervals
// below 1ms are raised to 1ms, so a unit slip cannot make a busy loop of
// heartbeats.
func WithHeartbeatInterval(d time.Duration) RegisterOption {
	return func(o *regOptions) { o.interval = d }
}

// WithHealthCheck installs a local health check, run every interval
// (0: the heartbeat interval; at least 1ms; negative is an error). While it fails the instance is
// withdrawn from the registry though the process lives on (a full thread
// pool, a lost database); when it passes again the instance comes back.
// If the first check fails, Register returns a withdrawn lease that
// registers as soon as the check passes.
func WithHealthCheck(check func(context.Context) error, interval time.Duration) RegisterOption {
	return func(o *regOptions) { o.check, o.checkInterval = check, interval }
}

// WithRetryBackoff sets the capped exponential backoff (with jitter) used
// to re-register after the backend lost the registration (default 200ms
// doubling up to the heartbeat interval, so that a lease is back within
// one interval of the backend's return, at no more than the heartbeat
// rate). Any positive durations are accepted; 0 keeps the default and a
// negative duration is an error.
func WithRetryBackoff(base, max time.Duration) RegisterOption {
	return func(o *regOptions) { o.backoffBase, o.backoffMax = base, max }
}

// WithStateHook calls f from the lease's goroutine on every state change,
// with the error that caused it (nil when healthy again).
func WithStateHook(f func(LeaseState, error)) RegisterOption {
	return func(o *regOptions) { o.onState = f }
}

// Drained registers the instance at weight 0, out of rotation from its
// first write: selectors pick it only when nothing else is left, as after
// Lease.Drain. Bring it in with Lease.SetWeight once it is ready (after a
// warm-up, say). Without this option Weight 0 means DefaultWeight; with
// it, a non-zero Weight is an error, so the two intents cannot mix.
func Drained() RegisterOption { return func(o *regOptions) { o.drained = true } }
