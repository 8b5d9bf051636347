package rostergokit_test

import (
	"context"
	"fmt"

	"github.com/go-kit/kit/sd"
	"github.com/go-kit/log"

	_ "github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/contrib/rostergokit"
	"github.com/roster-go/roster/registry"
)

func Example() {
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()

	// The service side: go-kit's Register/Deregister lifecycle.
	r := rostergokit.NewRegistrar(reg, registry.Instance{Service: "user-svc", Address: "10.0.0.1:8080"}, log.NewNopLogger())
	r.Register()
	defer r.Deregister()

	// The client side: an sd.Instancer for go-kit's endpointers.
	instancer, err := rostergokit.NewInstancer(reg, "user-svc")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer instancer.Stop()
	events := make(chan sd.Event, 1)
	instancer.Register(events)
	fmt.Println((<-events).Instances)
	instancer.Deregister(events)
	// Output: [10.0.0.1:8080]
}
