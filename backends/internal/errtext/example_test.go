package errtext_test

import (
	"context"
	"errors"
	"fmt"

	_ "github.com/roster-go/roster/backends/consul"
	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/registry"
)

// A bad URL's error says each layer once — the call, the redacted URL,
// the portable sentinel, the backend, the option — and matches the
// sentinel with errors.Is; the password it held is not printed.
func Example() {
	for _, u := range []string{
		"etcd://127.0.0.1:1?username=app&password=s3cret&dial_timeout=soon",
		"consul://127.0.0.1:1?token=s3cret&wait=-1s",
	} {
		_, err := registry.Open(context.Background(), u)
		fmt.Println(errors.Is(err, registry.ErrInvalid))
		fmt.Println(err)
	}
	// Output:
	// true
	// open etcd://127.0.0.1:1?dial_timeout=soon&password=xxxxx&username=app: registry: invalid argument: etcd URL: option dial_timeout="soon" is not a positive duration (such as 500ms or 10s)
	// true
	// open consul://127.0.0.1:1?token=xxxxx&wait=-1s: registry: invalid argument: consul URL: option wait="-1s" is not a positive duration (such as 500ms or 10s)
}
