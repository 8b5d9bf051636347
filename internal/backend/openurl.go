package backend

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/roster-go/roster/internal/urls"
	"github.com/roster-go/roster/registry/driver"
)

// OpenURL opens the driver of rawURL with its scheme's OpenFunc, as
// registry.Open does, but without the Registry: for test harnesses, which
// hand drivers to the conformance suite. Errors never show credentials.
func OpenURL(ctx context.Context, rawURL string) (driver.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %s is malformed", driver.ErrInvalid, urls.Redact(rawURL))
	}
	open, ok := Lookup(strings.ToLower(u.Scheme))
	if !ok {
		return nil, fmt.Errorf("%w: no backend for scheme %q (import the backend package)", driver.ErrInvalid, u.Scheme)
	}
	d, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", urls.Redact(rawURL), err)
	}
	return d, nil
}
