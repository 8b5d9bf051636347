//go:build !race

// The race detector allocates: scripts/test.sh runs this test without
// -race, as the other zero-allocation tests.

package rostergrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestPickDoesNotAllocate: a pick and its Done, in the context the
// interceptors give an RPC, allocate nothing, with locality on and one
// instance not READY (the picker then excludes it).
func TestPickDoesNotAllocate(t *testing.T) {
	reg := openMem(t)
	startServer(t, reg, "echo", "a", 0)
	startServer(t, reg, "echo", "b", 0)
	cc, err := rostergrpc.NewClient(reg, "echo",
		[]rostergrpc.Option{rostergrpc.WithServiceConfig(`{"loadBalancingConfig":[{"` + spyName + `":{}}]}`),
			rostergrpc.WithSelector(selector.WithLocality("a"))},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitAnswered(t, testpb.NewTestServiceClient(cc), "a", "b")
	info := balancer.PickInfo{FullMethodName: "/grpc.testing.TestService/UnaryCall", Ctx: rostergrpc.RPCContext(context.Background())}
	check := func(what string) {
		t.Helper()
		p := spied.latest()
		n := testing.AllocsPerRun(1000, func() {
			r, err := p.Pick(info)
			if err != nil {
				t.Fatal(err)
			}
			r.Done(balancer.DoneInfo{})
		})
		if n != 0 {
			t.Errorf("%s: a pick allocates %.1f times, want 0", what, n)
		}
	}
	check("every instance READY")
	// A third instance whose port speaks no gRPC: its SubConn is never
	// READY.
	if _, err := reg.Register(context.Background(), registry.Instance{Service: "echo", Address: otherPort(t).Addr().String()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a picker with an instance not READY", func() bool {
		return rostergrpc.PickerPartial(spied.latest())
	})
	check("one instance not READY")
}
