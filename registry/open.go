package registry

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// OpenFunc opens a Driver from a URL. Backends register one per scheme.
type OpenFunc func(ctx context.Context, u *url.URL) (Driver, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]OpenFunc{}
)

// RegisterDriver makes a backend available to Open under a URL scheme.
// Backends call it from init, so importing a backend package for its side
// effect (import _ ".../backends/etcd") is enough. It panics if the scheme
// is registered twice, as database/sql.Register does.
func RegisterDriver(scheme string, open OpenFunc) {
	openersMu.Lock()
	defer openersMu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := openers[scheme]; dup {
		panic("registry: RegisterDriver called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	var s []string
	for k := range openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open opens a Registry from a URL such as "etcd://127.0.0.1:2379",
// "redis://:secret@host:6379/0", "consul://host:8500?token=…" or "mem://".
// The backend package must be imported. Switching backend is a change of
// URL, never of code. Errors never contain the URL's credentials.
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
	openersMu.RLock()
	open := openers[scheme]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w: no backend for scheme %q in %s (registered: %s; import the backend package)", ErrInvalid, scheme, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	d, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("registry: open %s: %w", Redact(rawURL), err)
	}
	opts = append([]Option{withName(Redact(rawURL))}, opts...)
	return New(d, opts...), nil
}

// sensitive holds fragments of query parameter names whose values are
// secrets. Matching fragments rather than exact names also hides the value
// of a misspelled option ("tokn", "pasword") in an "unknown option" error.
var sensitive = []string{"tok", "pas", "pwd", "secr", "key", "auth", "cred", "sig"}

// Redact returns rawURL with its password and secret-looking query values
// (token, password, secret, key, auth, … and misspellings of them) replaced
// by "xxxxx". A URL that does not
// parse is reduced to its scheme, since its text cannot be trusted to be
// free of secrets.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if i := strings.Index(rawURL, "://"); i > 0 && i < 32 && !strings.ContainsAny(rawURL[:i], "@:/") {
			return rawURL[:i] + "://<unparseable>"
		}
		return "<unparseable URL>"
	}
	if u.Opaque != "" {
		// "user:secret@host" parses as scheme "user" with opaque data.
		return u.Scheme + ":<opaque>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k := range q {
			lk := strings.ToLower(k)
			for _, s := range sensitive {
				if strings.Contains(lk, s) {
					q[k] = []string{"xxxxx"}
					changed = true
					break
				}
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}
