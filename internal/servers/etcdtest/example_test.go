package etcdtest_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/roster-go/roster/internal/servers/etcdtest"
)

// ExampleStart runs a single-member etcd for a demo or a test and prints
// the registry URL that reaches it.
func ExampleStart() {
	ctx := context.Background()
	c, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	u := c.URL("/roster") // etcd://127.0.0.1:<port>?prefix=%2Froster
	fmt.Println(strings.HasPrefix(u, "etcd://127.0.0.1:"), c.Members(), c.Leader())
	// Output: true 1 0
}
