package etcdlocal_test

import (
	"context"
	"fmt"
	"log"

	_ "github.com/roster-go/roster/backends/etcd" // registers etcd://
	"github.com/roster-go/roster/backends/etcd/etcdlocal"
	"github.com/roster-go/roster/registry"
)

// ExampleStart runs a throwaway etcd on a free port and uses it as a
// registry. "roster dev" does the same on 127.0.0.1:2379 with data kept
// between runs.
func ExampleStart() {
	ctx := context.Background()
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close() // deferred first, so it runs last

	reg, err := registry.Open(ctx, srv.URL()+"?prefix=/example")
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	lease, err := reg.Register(ctx, registry.Instance{Service: "greeter", Address: "127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Deregister(ctx)

	snap, err := reg.Lookup(ctx, "greeter")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(snap.Instances), snap.Instances[0].Address)
	// Output: 1 127.0.0.1:8080
}
