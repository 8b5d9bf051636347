package consultest_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"

	_ "github.com/roster-go/roster/backends/consul"
)

// NewAgent starts a private `consul agent -dev` on free loopback ports
// (the binary from $ROSTER_CONSUL_BIN, built by scripts/test.sh); URL
// gives the registry URL that reaches it.
func ExampleNewAgent() {
	a, err := consultest.NewAgent("")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()

	ctx := context.Background()
	reg, err := registry.Open(ctx, a.URL(""))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	fmt.Println(strings.HasPrefix(a.URL(""), "consul://127.0.0.1:"))
	snap, err := reg.Lookup(ctx, "api")
	fmt.Println(len(snap.Instances), err)
	// Output:
	// true
	// 0 <nil>
}
