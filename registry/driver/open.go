package driver

import (
	"context"
	"net/url"

	"github.com/roster-go/roster/internal/urls"
)

// OpenFunc opens a Driver from a URL. Backends register one per scheme.
type OpenFunc func(ctx context.Context, u *url.URL) (Driver, error)

// Register makes a backend available to registry.Open under a URL scheme.
// Backends call it from init, so importing a backend package for its side
// effect (import _ ".../backends/etcd") is enough. publicOptions names the
// backend's query parameters whose values are never secret (a prefix, a
// timeout): registry.Redact shows their values and masks every other. It
// panics if the scheme is registered twice, as database/sql.Register does.
func Register(scheme string, open OpenFunc, publicOptions ...string) {
	urls.Add(scheme, open, publicOptions...)
}
