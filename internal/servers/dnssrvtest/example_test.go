package dnssrvtest_test

import (
	"context"
	"fmt"
	"log"

	_ "github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/dnssrvtest"
	"github.com/roster-go/roster/registry"
)

// ExampleURL reads a service that a Consul agent holds through the
// agent's DNS interface.
func ExampleURL() {
	a, err := consultest.NewAgent("")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	ctx := context.Background()
	r, err := registry.Open(ctx, dnssrvtest.URL(a, "")) // dns+srv://127.0.0.1:<port>/{service}.service.consul
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	snap, err := r.Lookup(ctx, "consul") // the agent's own service
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(snap.Instances), snap.Instances[0].Metadata["srv_target"] != "")
	// Output: 1 true
}
