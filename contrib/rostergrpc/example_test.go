package rostergrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	_ "github.com/roster-go/roster/backends/memory"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/middleware"
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

// A client in zone a that prefers the instances of zone a while they are
// usable (connection READY, not quarantined, not draining) and spills
// to the other zones as they fail, with the adaptive throttle tuned and
// the health service's methods safe to send again.
func ExampleWithSelector() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://")
	defer reg.Close()

	for _, zone := range []string{"a", "b"} {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(ln)
		defer srv.Stop()
		lease, _ := reg.Register(ctx, registry.Instance{Service: "inventory", Zone: zone, Address: ln.Addr().String()})
		defer lease.Deregister(ctx)
	}

	conn, err := rostergrpc.NewClient(reg, "inventory",
		[]rostergrpc.Option{
			rostergrpc.WithSelector(selector.WithLocality("a")),
			rostergrpc.WithThrottle(middleware.ThrottleConfig{Window: 5 * time.Second}),
			rostergrpc.WithIdempotent("/grpc.health.v1.Health/"),
		},
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
	fmt.Println(resp.GetStatus())
	// Output: SERVING
}
