package rostergozero_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/contrib/rostergozero"
	"github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func init() { logx.Disable() }

// startServer runs a gRPC health server registered in reg as "echo".
func startServer(t *testing.T, reg *registry.Registry) (*grpc.Server, *registry.Lease) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	grpc_health_v1.RegisterHealthServer(s, health.NewServer())
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	l, err := reg.Register(context.Background(), registry.Instance{Service: "echo", Address: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// TestZRPCClient: go-zero's own zrpc client, its Target set to a Roster
// target, calls every registered instance, follows a deregistration, and
// fails no call. Round robin makes the spread exact.
func TestZRPCClient(t *testing.T) {
	srv := redistest.Start(t)
	reg, err := registry.Open(context.Background(), "redis://"+srv.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	var leases []*registry.Lease
	for range 3 {
		_, l := startServer(t, reg)
		leases = append(leases, l)
	}

	cli, err := zrpc.NewClient(zrpc.RpcClientConf{Target: rostergozero.Target("echo"), NonBlock: true, Timeout: 2000},
		rostergozero.ClientOptions(reg, rostergrpc.WithStrategy(selector.RoundRobin))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Conn().Close()
	hc := grpc_health_v1.NewHealthClient(cli.Conn())

	seen := map[string]int{}
	var mu sync.Mutex
	check := func() {
		t.Helper()
		var p peer.Peer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{}, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
			t.Fatalf("call: %v", err)
		}
		mu.Lock()
		seen[p.Addr.String()]++
		mu.Unlock()
	}
	for range 300 {
		check()
	}
	if len(seen) != 3 {
		t.Fatalf("calls reached %v, want all 3 instances", seen)
	}

	gone := leases[0].Instance().Address
	if err := leases[0].Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the deregistration reaches the client's resolver
		clear(seen)
		for range 30 {
			check()
		}
		if seen[gone] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still reach %s after its deregistration: %v", gone, seen)
		}
	}
	clear(seen)
	for range 300 {
		check()
	}
	if len(seen) != 2 || seen[gone] != 0 {
		t.Fatalf("after deregistering %s calls reached %v, want the 2 others", gone, seen)
	}
	for addr, n := range seen { // round robin: Roster's balancer, not go-zero's p2c
		if n != 150 {
			t.Fatalf("%s took %d of 300 calls, want 150 (round robin): %v", addr, n, seen)
		}
	}
}
