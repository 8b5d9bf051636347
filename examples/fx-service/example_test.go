package main

import (
	"fmt"
	"io"
	"log"
	"os"

	rosterfx "github.com/roster-go/roster/contrib/fx"
)

// The whole program runs as its own test: two greeters register, a client
// calls them, greeter-1 leaves while the client calls, and no call fails.
func Example() {
	os.Unsetenv(rosterfx.EnvURL) // its own embedded etcd
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	if err := run(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("no request failed")
	// Output: no request failed
}
