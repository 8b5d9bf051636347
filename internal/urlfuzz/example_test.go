package urlfuzz_test

import (
	"fmt"
	"net/url"

	"github.com/roster-go/roster/internal/backend"
)

// A parser fit for Fuzz refuses what it cannot read with ErrInvalid.
func Example() {
	parse := func(u *url.URL) error {
		if u.Host == "" {
			return backend.InvalidURL("x", "no host")
		}
		return nil
	}
	u, _ := url.Parse("x:opaque")
	fmt.Println(parse(u) != nil)
	// Output: true
}
