package dual_test

import (
	"context"
	"fmt"
	"net/url"
	"time"

	_ "github.com/roster-go/roster/backends/dual"
	_ "github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// The three deploys of a migration, on two in-process servers standing in
// for the old and the new backend (consul://… and etcd://… in production).
// An instance of deploy 1 writes both; an instance of deploy 3 writes the
// new side only; a client of deploy 2 sees them both.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oldURL, newURL := "mem://example-old", "mem://example-new"
	dual := func(prefer string) string {
		// The nested URLs are query values: encode them.
		return "dual://?" + url.Values{"old": {oldURL}, "new": {newURL}, "prefer": {prefer}}.Encode()
	}
	register := func(rawURL, addr string) *registry.Registry {
		reg, err := registry.Open(ctx, rawURL)
		if err != nil {
			panic(err)
		}
		if _, err := reg.Register(ctx, registry.Instance{Service: "user-svc", Address: addr}); err != nil {
			panic(err)
		}
		return reg // open while this "process" runs
	}
	defer register(dual("old"), "10.0.0.1:8080").Close() // deploy 1: dual-write
	defer register(newURL, "10.0.0.2:8080").Close()      // deploy 3: the new backend alone

	for _, u := range []string{oldURL, dual("new"), newURL} {
		reg, err := registry.Open(ctx, u)
		if err != nil {
			fmt.Println(err)
			return
		}
		snap, err := reg.Lookup(ctx, "user-svc")
		reg.Close()
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(registryName(u), len(snap.Instances), "instances")
	}
	// Output:
	// old backend: 1 instances
	// union: 2 instances
	// new backend: 2 instances
}

func registryName(u string) string {
	switch u {
	case "mem://example-old":
		return "old backend:"
	case "mem://example-new":
		return "new backend:"
	}
	return "union:"
}
