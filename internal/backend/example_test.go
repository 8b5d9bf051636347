package backend_test

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// A backend's ParseURL reads its options with one Query: one call per
// option, then Err once. Every backend spells and rejects options the
// same way.
func ExampleParseQuery() {
	u, _ := url.Parse("mydb://10.0.0.1:7000?timeout=2s&mode=fast")
	q, err := backend.ParseQuery("mydb", u)
	if err != nil {
		fmt.Println(err)
		return
	}
	timeout, mode := 5*time.Second, "safe"
	q.Duration("timeout", &timeout)
	q.Enum("mode", &mode, "safe", "fast")
	if err := q.Err(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(timeout, mode)

	// A parameter given twice is an error wrapping ErrInvalid.
	u, _ = url.Parse("mydb://10.0.0.1:7000?timeout=2s&timeout=3s")
	_, err = backend.ParseQuery("mydb", u)
	fmt.Println(errors.Is(err, driver.ErrInvalid))
	// Output:
	// 2s fast
	// true
}
