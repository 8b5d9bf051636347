package middleware

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// Class is what an attempt's outcome means to retry and quarantine.
type Class int

const (
	// Success: the instance served the call.
	Success Class = iota
	// Business: the instance worked but the answer is an error of the
	// application (not found, validation failed). Never retried, never
	// counted against the instance — the blunt blacklists of other
	// frameworks ejected healthy hosts for these.
	Business
	// Retryable: the instance failed in a way another instance may not
	// (connection refused or reset, 503, timeout of this attempt). Counted
	// against the instance, retried elsewhere.
	Retryable
	// Fatal: the instance failed and retrying cannot help (the request is
	// malformed, or not idempotent). Counted against the instance, not
	// retried.
	Fatal
	// Abort: the caller gave up (its context was cancelled or its deadline
	// passed). Neither retried nor counted.
	Abort
)

func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Business:
		return "business"
	case Retryable:
		return "retryable"
	case Fatal:
		return "fatal"
	case Abort:
		return "abort"
	}
	return "unknown"
}

// Classifier maps an attempt's error to a Class. ctx is the caller's
// context, so a classifier can tell the caller's deadline from an
// attempt's own.
type Classifier func(ctx context.Context, err error) Class

// BusinessError marks err as an application-level error: the instance is
// healthy, do not retry, do not count it. DefaultClassify honours it.
func BusinessError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err, Business}
}

// FatalError marks err as not retryable, though it counts against the
// instance.
func FatalError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err, Fatal}
}

type classified struct {
	error
	class Class
}

func (c *classified) Unwrap() error { return c.error }

// DefaultClassify is the default Classifier:
//   - nil → Success;
//   - the caller's context done → Abort;
//   - errors marked with BusinessError or FatalError → their class;
//   - anything else → Retryable. Connection errors (refused, reset,
//     timeouts of one attempt) are the common case; a call function that
//     wants other errors treated differently marks them or installs its
//     own Classifier.
func DefaultClassify(ctx context.Context, err error) Class {
	if err == nil {
		return Success
	}
	if ctx.Err() != nil {
		return Abort
	}
	// AsType, not As: As's target escapes, an allocation per failure.
	if c, ok := errors.AsType[*classified](err); ok {
		return c.class
	}
	if errors.Is(err, context.Canceled) {
		return Abort
	}
	return Retryable
}

// isConnectionError reports whether err is a transport failure to reach an
// instance (refused, reset, unreachable, dial timeout): the errors a dead
// or killed instance produces.
func isConnectionError(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}
