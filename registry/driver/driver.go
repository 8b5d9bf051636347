package driver

import (
	"context"
	"time"
)

// Driver is what a backend implements: storage only. Validation, instance
// IDs, heartbeat scheduling, re-registration, watch sharing, coalescing,
// resync and stale marking all live in Registry, once, for every backend.
//
// Drivers return errors that wrap ErrNotFound, ErrUnavailable, ErrInvalid or
// ErrClosed (or a context error), never a raw client error alone, and never
// include credentials in error text. An error names the backend, the
// server where useful, and the operation, once: "redis 10.0.0.1:6379:
// register api/api-1: registry: backend unavailable: …". Registry adds no
// second prefix to a driver's error, so none of it is repeated.
type Driver interface {
	// Register writes inst (already validated, ID set) so that it expires
	// unless renewed within ttl. It is an idempotent upsert keyed by
	// (inst.Service, inst.ID): the last writer wins.
	Register(ctx context.Context, inst Instance, ttl time.Duration) (Registration, error)

	// List returns the live instances of service, sorted by ID, with the
	// backend revision at which they were read. An unknown service is an
	// empty snapshot, not an error.
	List(ctx context.Context, service string) (Snapshot, error)

	// Watch starts following service. The Stream's first Next returns the
	// current state (even when empty); later calls return each new state.
	Watch(ctx context.Context, service string) (Stream, error)

	// Services lists the names of services with at least one live instance.
	Services(ctx context.Context) ([]string, error)

	// Limits declares the backend's TTL floor and granularity.
	Limits() Limits

	// Close releases the driver's connections. Registry calls it last.
	Close() error
}

// Registration is the driver's handle on one written instance.
type Registration interface {
	// Heartbeat proves the instance is alive for another TTL. It returns an
	// error wrapping ErrNotFound when the backend no longer holds the
	// registration (expired, deleted externally, data wiped, lease lost):
	// the lease engine then calls Driver.Register again.
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
	// Next blocks until the backend holds a state of the service newer than
	// the last one returned, and returns it, sorted by ID. Successive
	// snapshots never go back in time: after a discontinuity (compaction,
	// reconnect, wiped data) the driver relists before returning. An error
	// wrapping ErrUnavailable means the backend cannot be reached right now;
	// Registry then closes the stream and opens a new one after a backoff.
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
