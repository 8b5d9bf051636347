package urlfuzz_test

import (
	"fmt"
	"net/url"

	"github.com/roster-go/roster/registry/driver"
)

// A parser fit for Fuzz refuses what it cannot read with ErrInvalid.
func Example() {
	parse := func(u *url.URL) error {
		if u.Host == "" {
			return driver.InvalidURL("x", "no host")
		}
		return nil
	}
	u, _ := url.Parse("x:opaque")
	fmt.Println(parse(u) != nil)
	// Output: true
}
