package driver

import (
	"errors"
	"fmt"
	"strings"
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

// Invalid returns a *FieldError naming field, with a formatted reason.
// A URL in the reason is shown as Redact shows it: the usual reason is a
// registry URL typed where a service name or address belongs ("roster ls
// redis://:pw@h"), and the error must not print its password.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: scrubURLs(field), Reason: scrubURLs(fmt.Sprintf(format, args...))}
}

// scrubURLs replaces each word of s that may carry credentials — one
// holding "://", or a ':' before an '@' (user:password@host, and the
// typos of a URL) — with its Redact form. Words end at spaces and quotes.
func scrubURLs(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexAny(s, " \t\n\"'`")
		if i < 0 {
			i = len(s)
		}
		word := s[:i]
		if at := strings.LastIndexByte(word, '@'); strings.Contains(word, "://") || at > 0 && strings.Contains(word[:at], ":") {
			word = Redact(word)
		}
		b.WriteString(word)
		if i < len(s) {
			b.WriteByte(s[i])
			i++
		}
		s = s[i:]
	}
	return b.String()
}

func invalid(field, format string, args ...any) error { return Invalid(field, format, args...) }
