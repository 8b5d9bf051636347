package driver

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package and by the backends
// wraps one of them (or a context error), so callers branch with errors.Is.
var (
	// ErrInvalid reports bad input: a service name, address, TTL, option or
	// URL that can never succeed. Retrying does not help.
	ErrInvalid = errors.New("registry: invalid argument")
	// ErrNotFound reports that a registration or service does not exist.
	// Drivers return it from Registration.Heartbeat when the backend lost
	// the registration, which makes the lease re-register.
	ErrNotFound = errors.New("registry: not found")
	// ErrClosed reports use of a closed Registry, Watcher or Lease.
	ErrClosed = errors.New("registry: closed")
	// ErrUnavailable reports that the backend could not be reached or did
	// not answer in time. It is transient: the lease and watch engines keep
	// retrying.
	ErrUnavailable = errors.New("registry: backend unavailable")
)

// FieldError is an ErrInvalid that names the offending field, such as
// "service", "address" or "metadata[owner]".
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("registry: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for every FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }
