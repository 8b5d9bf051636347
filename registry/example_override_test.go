package registry_test

import (
	"context"
	"fmt"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// An operator drains an instance that another process owns: every
// reader sees it at weight 0 until the override is cleared, whatever
// its owner writes.
func ExampleRegistry_SetOverride() {
	ctx := context.Background()
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "api", ID: "api-1", Address: "10.0.0.5:8080"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Deregister(ctx)
	err = r.SetOverride(ctx, registry.Override{Service: "api", ID: "api-1", Drain: true, By: "ops@example", Reason: "disk"})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := r.Lookup(ctx, "api")
	fmt.Println("weight while drained:", s.Instances[0].Weight)
	_ = r.ClearOverride(ctx, "api", "api-1")
	s, _ = r.Lookup(ctx, "api")
	fmt.Println("weight restored:", s.Instances[0].Weight)
	// Output:
	// weight while drained: 0
	// weight restored: 100
}
