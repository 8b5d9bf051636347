// Package urlfuzz is the fuzz body the backends' URL parsers share. Any
// input either parses or is an error wrapping driver.ErrInvalid, and none
// panics.
package urlfuzz

import (
	"errors"
	"net/url"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// Fuzz adds seeds to f and fuzzes parse with URLs: an error must wrap
// driver.ErrInvalid (a typed refusal), never be of another kind, and
// parse must not panic.
func Fuzz(f *testing.F, seeds []string, parse func(*url.URL) error) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if err := parse(u); err != nil && !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("parsing %q: %v, want ErrInvalid", raw, err)
		}
	})
}
