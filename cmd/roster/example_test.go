package main

import (
	"context"
	"fmt"
	"time"

	"github.com/roster-go/roster/registry"
)

// `roster ls SERVICE` prints the live instances of a service as a table,
// one row per instance with its named endpoints; here against the etcd
// the tests of this package share.
func Example_ls() {
	ctx := context.Background()
	url := cluster.URL("/example-ls")
	reg, err := registry.Open(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	lease, err := reg.Register(ctx, registry.Instance{ID: "api-1", Service: "api", Address: "10.0.0.5:8080",
		Version: "1.4.2", Zone: "eu-1", Weight: 100, Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.5:8080"}, {Name: "grpc", Address: "10.0.0.5:9090", Protocol: "grpc"}}},
		registry.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Deregister(ctx)

	root := newRoot()
	root.SetArgs([]string{"ls", "api", "--registry", url})
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// ID     ADDRESS        ENDPOINTS                                   VERSION  ZONE  WEIGHT  TAGS  METADATA
	// api-1  10.0.0.5:8080  http=10.0.0.5:8080,grpc=10.0.0.5:9090/grpc  1.4.2    eu-1  100     -     -
}
