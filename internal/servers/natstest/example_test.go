package natstest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/roster-go/roster/internal/servers/natstest"
	"github.com/roster-go/roster/registry"
)

// A registry on a real NATS server: register, look up, let the lease go.
func Example() {
	srv, err := natstest.New(natstest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()
	r, err := registry.Open(ctx, srv.URL("bucket=orders"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	lease, err := r.Register(ctx, registry.Instance{Service: "orders", ID: "orders-1", Address: "127.0.0.1:20001"},
		registry.WithTTL(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err := r.Lookup(ctx, "orders")
	for _, in := range snap.Instances {
		fmt.Println(in.ID, in.Address, err)
	}
	_ = lease.Deregister(ctx)
	// Output: orders-1 127.0.0.1:20001 <nil>
}
