package registry

import (
	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// The data types are defined in package driver, which backends import,
// and named here, so that programs import registry alone.
type (
	// Instance is one registered process of a service: ID, Service,
	// Address (host:port), Version, Zone, Region, Weight, Tags, Metadata and
	// named Endpoints. Its JSON form is what backends store. Register
	// validates every field: an error is a *FieldError naming the field.
	// Methods: Host, Port, Endpoint, Equal, Clone.
	Instance = driver.Instance
	// Endpoint is one named port of an Instance, such as "http" or
	// "grpc". Instance.Endpoint finds one by name.
	Endpoint = driver.Endpoint
	// Snapshot is the state of a service at one revision: its instances,
	// sorted by ID, the Revision, Stale when served from cache during a
	// backend fault, and At, when it was read. Snapshots are shared:
	// never modify one. Methods: Find, SameInstances.
	Snapshot = driver.Snapshot
	// FieldError is an ErrInvalid naming the offending field.
	FieldError = driver.FieldError
	// Limits are a backend's TTL constraints.
	Limits = driver.Limits
)

// Sentinel errors. Every error from a Registry, a Lease, a Watcher or a
// backend wraps one of them, or a context error.
var (
	ErrInvalid     = driver.ErrInvalid
	ErrNotFound    = driver.ErrNotFound
	ErrClosed      = driver.ErrClosed
	ErrUnavailable = driver.ErrUnavailable
)

// DefaultWeight is the weight of an instance registered with Weight 0.
// A weight of 0 set later (Lease.Drain) means draining.
const DefaultWeight = backend.DefaultWeight

func invalid(field, format string, args ...any) error { return backend.Invalid(field, format, args...) }
