package registry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	_ "github.com/roster-go/roster/backends/memory" // registers mem://
	"github.com/roster-go/roster/registry"
)

// A service announces itself and a client follows it. The same code runs
// on etcd, Redis or Consul: only the URL changes.
func Example() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "mem://example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()

	w, _ := reg.Watch(ctx, "user-svc")
	defer w.Close()
	snap, _ := w.Next(ctx) // the current state, even when empty
	fmt.Println("instances at start:", len(snap.Instances))

	lease, err := reg.Register(ctx, registry.Instance{
		ID: "user-1", Service: "user-svc", Address: "10.0.0.1:8080",
		Version: "1.2.0", Zone: "hz-1", Metadata: map[string]string{"owner": "team-a"},
	}, registry.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, _ = w.Next(ctx)
	in := snap.Instances[0]
	fmt.Println(in.ID, in.Address, in.Version, in.Zone, in.Weight, in.Metadata["owner"])

	_ = lease.Deregister(ctx) // on shutdown: leave cleanly
	snap, _ = w.Next(ctx)
	fmt.Println("instances after deregister:", len(snap.Instances))
	// Output:
	// instances at start: 0
	// user-1 10.0.0.1:8080 1.2.0 hz-1 100 team-a
	// instances after deregister: 0
}

// Open picks the backend by URL scheme; errors are typed and never show
// credentials.
func ExampleOpen() {
	_, err := registry.Open(context.Background(), "nosuch://admin:hunter2@10.0.0.1:1")
	fmt.Println(err)
	// Output:
	// registry: invalid argument: no backend for scheme "nosuch" in nosuch://admin:xxxxx@10.0.0.1:1 (registered: mem; import the backend package)
}

// A health check withdraws the instance while the process cannot serve,
// and brings it back when it can.
func ExampleWithHealthCheck() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://health-example")
	defer reg.Close()

	ready := false
	check := func(context.Context) error {
		if !ready {
			return fmt.Errorf("database not connected")
		}
		return nil
	}
	lease, _ := reg.Register(ctx, registry.Instance{Service: "api", Address: "10.0.0.2:80"},
		registry.WithHealthCheck(check, time.Second))
	fmt.Println(lease.State(), "-", lease.Err())
	// Output:
	// withdrawn - health check: database not connected
}

// Drain keeps the instance registered with weight 0, so that selectors stop
// sending it new work before it deregisters.
func ExampleLease_Drain() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://drain-example")
	defer reg.Close()
	lease, _ := reg.Register(ctx, registry.Instance{Service: "api", Address: "10.0.0.3:80", Weight: 50})
	_ = lease.Drain(ctx)
	snap, _ := reg.Lookup(ctx, "api")
	fmt.Println(snap.Instances[0].Weight)
	// Output:
	// 0
}

// An instance that must warm up first registers drained (weight 0:
// selectors pick it only when nothing else is left) and comes into
// rotation when it is ready. The address is stored in its canonical form.
func ExampleDrained() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "mem://drained-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	lease, err := reg.Register(ctx, registry.Instance{Service: "cache", Address: "Cache-1.Local:6380"}, registry.Drained())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(lease.Instance().Address, lease.Instance().Weight)
	// … warm up …
	_ = lease.SetWeight(ctx, registry.DefaultWeight)
	fmt.Println(lease.Instance().Weight)
	// Output:
	// cache-1.local:6380 0
	// 100
}

// Redact is what every error and log line shows of a registry URL: the
// user name and password, and the value of any option not declared public
// by its backend, are replaced, however the URL is mistyped.
func ExampleRedact() {
	fmt.Println(registry.Redact("redis://app:hunter2@10.0.0.2:6379/0"))
	fmt.Println(registry.Redact("redis:/:hunter2@10.0.0.2:6379"))
	// Output:
	// redis://app:xxxxx@10.0.0.2:6379/0
	// redis:<opaque>
}

// Records outlive every process: one writer's record reaches every
// watcher of the fleet. A version makes read-modify-write safe.
func ExampleRecords() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "mem://records-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	st, err := reg.Records() // errors.ErrUnsupported on a read-only backend
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, _ := st.Put(ctx, registry.Record{Key: "policy/user-svc", Value: []byte(`{"strategy":"p2c_ewma"}`)})

	w, _ := st.Watch(ctx, "policy/")
	defer w.Close()
	set, _ := w.Next(ctx)
	fmt.Println(len(set.Records), set.Records[0].Key)

	// Written only if nobody wrote since rec was read.
	_, err = st.Put(ctx, registry.Record{Key: rec.Key, Value: []byte(`{}`), Version: rec.Version})
	fmt.Println(err)
	_, err = st.Put(ctx, registry.Record{Key: rec.Key, Value: []byte(`{}`), Version: rec.Version})
	fmt.Println(errors.Is(err, registry.ErrConflict))
	// Output:
	// 1 policy/user-svc
	// <nil>
	// true
}
