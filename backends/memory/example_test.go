package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// A registry on the in-process backend, opened by URL like any other. The
// TTL is real: an instance whose process dies (its lease abandoned, no
// deregistration) is gone once its TTL passes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, "mem://") // a private server
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()

	lease, err := reg.Register(ctx, registry.Instance{Service: "user-svc", Address: "10.0.0.1:8080"},
		registry.WithTTL(200*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	w, _ := reg.Watch(ctx, "user-svc")
	defer w.Close()
	snap, _ := w.Next(ctx)
	fmt.Println("registered:", snap.Instances[0].Address)

	lease.Abandon() // the process "crashes": heartbeats stop
	for len(snap.Instances) > 0 {
		if snap, err = w.Next(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("expired after its TTL")
	// Output:
	// registered: 10.0.0.1:8080
	// expired after its TTL
}

// Registries opened on "mem://name" share the named server, as processes
// sharing one backend would.
func ExampleNamed() {
	ctx := context.Background()
	a, _ := registry.Open(ctx, "mem://example-named")
	defer a.Close()
	b, _ := registry.Open(ctx, "mem://example-named")
	defer b.Close()

	lease, _ := a.Register(ctx, registry.Instance{Service: "cart", Address: "10.0.0.2:80"})
	defer lease.Deregister(ctx)
	snap, _ := b.Lookup(ctx, "cart")
	fmt.Println(len(snap.Instances), snap.Instances[0].Address)
	fmt.Println(memory.Named("example-named") == memory.Named("example-named"))
	// Output:
	// 1 10.0.0.2:80
	// true
}

// A fault hook: while one client is cut off, its watch keeps the last
// instances and flags them stale; once reconnected it is fresh again.
func ExampleDriver_SetReachable() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := memory.NewServer()
	owner := registry.New(memory.NewDriver(srv))
	defer owner.Close()
	link := memory.NewDriver(srv)
	client := registry.New(link)
	defer client.Close()

	lease, _ := owner.Register(ctx, registry.Instance{Service: "cart", Address: "10.0.0.3:80"})
	defer lease.Deregister(ctx)
	w, _ := client.Watch(ctx, "cart")
	defer w.Close()
	snap, _ := w.Next(ctx)
	fmt.Println(len(snap.Instances), "instance, stale:", snap.Stale)

	for _, reachable := range []bool{false, true} {
		link.SetReachable(reachable)
		for snap.Stale == reachable {
			// A stale snapshot comes with the error, wrapping
			// registry.ErrUnavailable.
			snap, _ = w.Next(ctx)
			if ctx.Err() != nil {
				fmt.Println(ctx.Err())
				return
			}
		}
		fmt.Println(len(snap.Instances), "instance, stale:", snap.Stale)
	}
	// Output:
	// 1 instance, stale: false
	// 1 instance, stale: true
	// 1 instance, stale: false
}
