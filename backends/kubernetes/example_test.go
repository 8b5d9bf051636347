package kubernetes_test

import (
	"context"
	"fmt"
	"time"

	_ "github.com/roster-go/roster/backends/kubernetes" // registers k8s://
	"github.com/roster-go/roster/registry"
)

// A process outside the cluster registers itself: Roster writes an
// EndpointSlice for it, kept alive by a Lease, and reads it back as any
// client of the Service would.
func Example() {
	ctx := context.Background()
	u, err := server.URL(server.Addr(), "default") // "k8s://?kubeconfig=…"
	if err != nil {
		panic(err)
	}
	r, err := registry.Open(ctx, u)
	if err != nil {
		panic(err)
	}
	defer r.Close()

	lease, err := r.Register(ctx, registry.Instance{Service: "example-billing", Address: "10.0.0.7:8080", Zone: "eu-1"},
		registry.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer lease.Deregister(ctx)

	snap, err := r.Lookup(ctx, "example-billing")
	if err != nil {
		panic(err)
	}
	for _, in := range snap.Instances {
		fmt.Println(in.Address, in.Zone, in.Weight)
	}
	// Output: 10.0.0.7:8080 eu-1 100
}
