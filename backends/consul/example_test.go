package consul_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"time"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/registry"
)

// Register an instance with the local Consul agent under a TTL check that
// the lease renews every TTL/3, and watch the passing instances of the
// service through blocking queries.
func Example() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "consul://127.0.0.1:8500?check=ttl&deregister_after=1m")
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close() // deregisters the leases, by instance ID

	lease, err := reg.Register(ctx, registry.Instance{
		Service: "user-svc", Address: "10.0.0.7:8080", Version: "1.2.0", Zone: "hz-1", Weight: 50,
	}, registry.WithTTL(6*time.Second)) // out of ?passing 6s after the last heartbeat
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Deregister(ctx)

	w, err := reg.Watch(ctx, "user-svc")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	snap, err := w.Next(ctx) // the current passing set, then each change
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range snap.Instances {
		fmt.Println(in.ID, in.Address, in.Weight)
	}
}

// ParseURL reads a URL as registry.Open does; a missing port is 8500.
func ExampleParseURL() {
	u, _ := url.Parse("consul://10.0.0.1?dc=eu1&check=http&http_path=/health&wait=1m")
	o, err := consul.ParseURL(u)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Address, o.Datacenter, o.Check, o.HTTPPath, o.Wait)

	// Mistakes are errors that name the option, never a silent default.
	u, _ = url.Parse("consul://10.0.0.1?wait=1m&wait=2m")
	_, err = consul.ParseURL(u)
	fmt.Println(errors.Is(err, registry.ErrInvalid))
	// Output:
	// 10.0.0.1:8500 eu1 http /health 1m0s
	// true
}
