package rostergrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	_ "github.com/roster-go/roster/backends/memory"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// A gRPC client of whatever instances of "inventory" the registry knows,
// balanced by least requests in flight, with retries on UNAVAILABLE going
// to another instance.
func ExampleNewClient() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://")
	defer reg.Close()

	// A server: the standard health service, registered under "inventory".
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	lease, _ := reg.Register(ctx, registry.Instance{Service: "inventory", Address: ln.Addr().String()})
	defer lease.Deregister(ctx)

	// The client dials roster:///inventory.
	conn, err := rostergrpc.NewClient(reg, "inventory",
		[]rostergrpc.Option{rostergrpc.WithStrategy(selector.LeastRequest), rostergrpc.WithRetry(3)},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(conn.Target(), resp.GetStatus())
	// Output: roster:///inventory SERVING
}
