package zookeeper_test

import (
	"context"
	"fmt"
	"log"
	"time"

	_ "github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// Example starts a throwaway ZooKeeper server, registers an instance
// through a zk:// URL, finds it, and deregisters it.
func Example() {
	ctx := context.Background()
	srv, err := zktest.NewServer("")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close() // deferred first, so it runs last: clients close before the server

	// In production: registry.Open(ctx, "zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/roster")
	r, err := registry.Open(ctx, srv.URL("/roster", ""))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	lease, err := r.Register(ctx, registry.Instance{Service: "billing", Address: "10.0.0.7:8080", Version: "1.4.2"},
		registry.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	snap, err := r.Lookup(ctx, "billing")
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range snap.Instances {
		fmt.Println(in.Service, in.Address, in.Version, "ttl", lease.TTL())
	}
	if err := lease.Deregister(ctx); err != nil {
		log.Fatal(err)
	}
	snap, _ = r.Lookup(ctx, "billing")
	fmt.Println(len(snap.Instances), "instances after Deregister")
	// Output:
	// billing 10.0.0.7:8080 1.4.2 ttl 5s
	// 0 instances after Deregister
}
