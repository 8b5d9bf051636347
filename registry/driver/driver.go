package driver

import (
	"context"
	"time"
)

// Driver is what a backend implements: storage only. Registry does the
// rest once, for every backend: validation, instance IDs, heartbeats,
// re-registration, the shared watch cache, resync and stale marking. It
// also does the chores every method would repeat. It checks the context
// before each call and never calls a driver after Close. It sorts what a
// driver returns and drops states a stream repeats. It maps each error
// through ErrorKind, once.
//
// Drivers never include credentials in error text. An error names the
// backend, the server where useful, and the operation, once:
// "redis 10.0.0.1:6379: register api/api-1: dial tcp …: connection refused".
type Driver interface {
	// Register writes inst (validated, ID set) so that it expires unless
	// renewed within ttl. It is an idempotent upsert keyed by
	// (inst.Service, inst.ID): the last writer wins.
	Register(ctx context.Context, inst Instance, ttl time.Duration) (Registration, error)

	// List returns the live instances of service, in any order, with the
	// backend revision at which they were read. An unknown service is an
	// empty snapshot, not an error.
	List(ctx context.Context, service string) (Snapshot, error)

	// Watch starts following service. The Stream's first Next returns the
	// current state (even when empty).
	Watch(ctx context.Context, service string) (Stream, error)

	// Services lists the names of services with at least one live instance.
	Services(ctx context.Context) ([]string, error)

	// Limits declares the backend's TTL floor and granularity.
	Limits() Limits

	// ErrorKind says what an error returned by this driver means:
	// ErrNotFound, ErrInvalid or ErrUnavailable. Registry calls it for
	// each error that wraps none of the sentinels and wraps the error with
	// the answer; any other answer counts as ErrUnavailable. ErrInvalid
	// means a retry cannot succeed (a refused credential, a value the
	// server rejects); ErrUnavailable that it may.
	ErrorKind(err error) error

	// Close releases the driver's connections. Registry calls it last,
	// once no other call is in flight.
	Close() error
}

// Registration is the driver's handle on one written instance. Registry
// serialises the calls on one Registration.
type Registration interface {
	// Heartbeat proves the instance is alive for another TTL. An error of
	// kind ErrNotFound means the backend no longer holds the registration
	// (expired, deleted externally, data wiped, lease lost): Registry then
	// calls Driver.Register again.
	Heartbeat(ctx context.Context) error

	// Update replaces the stored instance (same Service and ID), keeping
	// the registration alive; used to drain (weight 0) or change metadata.
	Update(ctx context.Context, inst Instance) error

	// Deregister removes the instance now. Removing an instance that is
	// already gone is not an error.
	Deregister(ctx context.Context) error
}

// Stream follows one service for a Watcher.
type Stream interface {
	// Next blocks until the backend may hold a new state of the service,
	// and returns the state, in any order. It may return the same state
	// again. Successive states never go back in time: after a
	// discontinuity (compaction, reconnect, wiped data) the driver relists
	// before returning. An error means the stream is broken: Registry
	// closes it and opens a new one after a backoff.
	Next(ctx context.Context) (Snapshot, error)

	// Close stops the stream and releases its resources. It does not block
	// on the network.
	Close() error
}

// Limits are a backend's TTL constraints.
type Limits struct {
	MinTTL         time.Duration // requested TTLs below this are rejected
	TTLGranularity time.Duration // effective TTLs are rounded up to a multiple
	// MaxTTL, when set, is the largest TTL the backend's server accepts
	// (etcd: 9,000,000,000s); a larger one is rejected before any write.
	MaxTTL time.Duration
}
