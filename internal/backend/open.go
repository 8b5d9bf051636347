package backend

import (
	"context"
	"net/url"

	"github.com/roster-go/roster/internal/urls"
	"github.com/roster-go/roster/registry/driver"
)

// Lookup returns the opener registered for scheme (case-insensitive).
func Lookup(scheme string) (driver.OpenFunc, bool) {
	o, ok := urls.Opener(scheme)
	if !ok {
		return nil, false
	}
	open, ok := o.(driver.OpenFunc)
	return open, ok
}

// OpenWith is the OpenFunc of a backend whose URL parses into options
// (parse, such as a backend's ParseURL) that its constructor (newDriver)
// takes: the common case, written once.
func OpenWith[O any, D driver.Driver](parse func(*url.URL) (O, error), newDriver func(O) (D, error)) driver.OpenFunc {
	return func(_ context.Context, u *url.URL) (driver.Driver, error) {
		o, err := parse(u)
		if err != nil {
			return nil, err
		}
		d, err := newDriver(o)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return d, nil
	}
}
