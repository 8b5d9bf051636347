package registry

import (
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// The types and limits shared with the backends live in package driver,
// which backends implement; they are named here too, so that a program
// using Roster imports registry alone.
type (
	// Instance is one running process of a service; see driver.Instance.
	Instance = driver.Instance
	// Snapshot is the state of a service at one revision; see
	// driver.Snapshot.
	Snapshot = driver.Snapshot
	// FieldError is an ErrInvalid naming the offending field.
	FieldError = driver.FieldError
	// Limits are a backend's TTL constraints.
	Limits = driver.Limits
)

// Sentinel errors: every error from a Registry, a Lease, a Watcher or a
// backend wraps one of them (or a context error).
var (
	ErrInvalid     = driver.ErrInvalid
	ErrNotFound    = driver.ErrNotFound
	ErrClosed      = driver.ErrClosed
	ErrUnavailable = driver.ErrUnavailable
)

// Limits every backend enforces identically; see package driver.
const (
	DefaultWeight     = driver.DefaultWeight
	MaxServiceLen     = driver.MaxServiceLen
	MaxWeight         = driver.MaxWeight
	MaxHostLen        = driver.MaxHostLen
	MaxIDLen          = driver.MaxIDLen
	MaxMetadataPairs  = driver.MaxMetadataPairs
	MaxMetadataKeyLen = driver.MaxMetadataKeyLen
	MaxMetadataValLen = driver.MaxMetadataValLen
	MaxTags           = driver.MaxTags
	MaxTagLen         = driver.MaxTagLen
	MaxVersionLen     = driver.MaxVersionLen
	MaxZoneLen        = driver.MaxZoneLen
	MaxEncodedSize    = driver.MaxEncodedSize
)

// ValidateService checks a service name: [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?,
// at most 63 bytes (MaxServiceLen), starting and ending with a letter or digit.
func ValidateService(name string) error { return driver.ValidateService(name) }

// ValidateAddress checks that an instance address is host:port in its
// canonical form; see CanonicalAddress.
func ValidateAddress(addr string) error { return driver.ValidateAddress(addr) }

// CanonicalAddress returns the one spelling of a host:port address that
// Register stores, or an error naming what is wrong; see
// driver.CanonicalAddress for the rule.
func CanonicalAddress(addr string) (string, error) { return driver.CanonicalAddress(addr) }

// ValidateTTL checks a TTL against a backend's limits and returns it
// rounded up to the backend's granularity.
func ValidateTTL(ttl time.Duration, lim Limits) (time.Duration, error) {
	return driver.ValidateTTL(ttl, lim)
}

func invalid(field, format string, args ...any) error { return driver.Invalid(field, format, args...) }

// NewID returns a fresh instance ID of the form
// <service>-<host>-<port>-<random>; see driver.NewID.
func NewID(service, address string) string { return driver.NewID(service, address) }
