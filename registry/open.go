package registry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/urls"
)

// Open opens a Registry from a URL such as "etcd://127.0.0.1:2379",
// "redis://:secret@host:6379/0", "consul://host:8500?token=…" or "mem://".
// The backend package must be imported. Switching backend is a change of
// URL, never of code. Errors never contain the URL's credentials. The
// option loopback=allow, on any backend, is AllowLoopback.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Registry, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: never wrap it.
		return nil, fmt.Errorf("%w: registry URL %s is malformed", ErrInvalid, Redact(rawURL))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "" {
		return nil, fmt.Errorf("%w: registry URL %s has no scheme (want one of %s)", ErrInvalid, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	open, ok := backend.Lookup(scheme)
	if !ok {
		return nil, fmt.Errorf("%w: no backend for scheme %q in %s (registered: %s; import the backend package)", ErrInvalid, scheme, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	allow, err := loopbackOption(u)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Redact(rawURL), err)
	}
	if allow {
		opts = append([]Option{AllowLoopback()}, opts...)
	}
	d, err := open(ctx, u)
	if err != nil {
		// One prefix per layer: the driver's error names the backend and
		// wraps the sentinel ("registry: …"); this layer names the URL.
		return nil, fmt.Errorf("open %s: %w", Redact(rawURL), err)
	}
	opts = append([]Option{withName(Redact(rawURL))}, opts...)
	return New(d, opts...), nil
}

// loopbackOption reads and removes the registry's own URL option,
// loopback=allow (see AllowLoopback), so that no backend sees it.
func loopbackOption(u *url.URL) (bool, error) {
	if !strings.Contains(u.RawQuery, "loopback") {
		return false, nil
	}
	vals, err := url.ParseQuery(u.RawQuery)
	if err != nil || vals["loopback"] == nil {
		return false, nil // the backend's parser reports a bad query
	}
	if v := vals["loopback"]; len(v) != 1 || v[0] != "allow" {
		return false, invalid("loopback", "want loopback=allow, once")
	}
	vals.Del("loopback")
	u.RawQuery = vals.Encode()
	return true, nil
}

// Redact returns rawURL in a form safe to print: its password and the
// values of secret-looking query options are replaced by "xxxxx". It is
// safe on malformed input too.
func Redact(rawURL string) string { return urls.Redact(rawURL) }

// Schemes returns the URL schemes of the backends linked in, sorted.
func Schemes() []string { return urls.Schemes() }
