package nats_test

import (
	"fmt"
	"net/url"

	rnats "github.com/roster-go/roster/backends/nats"
)

// A URL names the servers, the bucket and the login.
func ExampleParseURL() {
	u, _ := url.Parse("nats://alice:s3cret@10.0.0.1,10.0.0.2?bucket=orders")
	o, err := rnats.ParseURL(u)
	fmt.Println(o.Servers, o.Bucket, o.User, err)
	// Output: [10.0.0.1:4222 10.0.0.2:4222] orders alice <nil>
}

// Each instance is one key; the dots of its ID are stored as "=".
func ExampleKey() {
	fmt.Println(rnats.Key("api.v1", "api-10.0.0.7-8080-1f2e"))
	// Output: api.v1.api-10=0=0=7-8080-1f2e
}
