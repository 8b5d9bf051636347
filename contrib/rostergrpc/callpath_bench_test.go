package rostergrpc_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// benchServers are three real gRPC servers on loopback, answering
// UnaryCall with an empty response, registered in a mem:// registry.
// Both implementations of BenchmarkCallPath call the same three.
type benchServers struct {
	reg   *registry.Registry
	addrs []string
}

type benchEchoServer struct {
	testpb.UnimplementedTestServiceServer
}

func (benchEchoServer) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func startBenchServers(b *testing.B, n int) *benchServers {
	b.Helper()
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Close() })
	bs := &benchServers{reg: reg}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer()
		testpb.RegisterTestServiceServer(srv, benchEchoServer{})
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		b.Cleanup(func() { srv.Stop(); <-done })
		if _, err := reg.Register(context.Background(), registry.Instance{Service: "echo", Address: ln.Addr().String()}); err != nil {
			b.Fatal(err)
		}
		bs.addrs = append(bs.addrs, ln.Addr().String())
	}
	return bs
}

// grpcRoundRobin dials the servers with grpc-go's own round_robin over a
// manual resolver that holds their addresses: the baseline.
func (bs *benchServers) grpcRoundRobin(b *testing.B) *grpc.ClientConn {
	b.Helper()
	r := manual.NewBuilderWithScheme("bench")
	var st resolver.State
	for _, a := range bs.addrs {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(st)
	cc, err := grpc.NewClient(r.Scheme()+":///echo", grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

func (bs *benchServers) roster(b *testing.B, opts ...rostergrpc.Option) *grpc.ClientConn {
	b.Helper()
	cc, err := rostergrpc.NewClient(bs.reg, "echo", opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// benchWarm calls until every server has been reached through cc, so that the
// measured calls find every SubConn READY.
func benchWarm(b *testing.B, cc *grpc.ClientConn, n int) {
	b.Helper()
	c := testpb.NewTestServiceClient(cc)
	seen := map[string]bool{}
	for i := 0; len(seen) < n; i++ {
		if i > 10000 {
			b.Fatalf("after %d calls only %d of %d servers answered", i, len(seen), n)
		}
		var p peer.Peer
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
			b.Fatal(err)
		}
		seen[p.Addr.String()] = true
	}
}

// BenchmarkCallPath measures one unary RPC on loopback, round trip
// included, through Roster's balancer and through grpc-go's round_robin
// over a static resolver, against the same three servers in the same
// run. Compare with `benchstat -col /impl`:
//
//	go test -run '^$' -bench CallPath -benchmem -count 6 ./contrib/rostergrpc
//
// impl=roster is the default channel (p2c_ewma, quarantine, retry policy
// of 3 attempts on UNAVAILABLE); impl=roster-rr is round_robin with
// retries off, the like-for-like one.
func BenchmarkCallPath(b *testing.B) {
	const n = 3
	bs := startBenchServers(b, n)
	impls := []struct {
		name string
		cc   *grpc.ClientConn
	}{
		{"grpc-rr", bs.grpcRoundRobin(b)},
		{"roster-rr", bs.roster(b, rostergrpc.WithStrategy(selector.RoundRobin), rostergrpc.WithRetry(1))},
		{"roster", bs.roster(b)},
	}
	for _, im := range impls {
		benchWarm(b, im.cc, n)
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, im := range impls {
				b.Run("impl="+im.name, func(b *testing.B) {
					c := testpb.NewTestServiceClient(im.cc)
					ctx := context.Background()
					req := &testpb.SimpleRequest{}
					b.ReportAllocs()
					defer benchReportCPU(b, benchCPUTime())
					if mode == "serial" {
						for b.Loop() {
							if _, err := c.UnaryCall(ctx, req); err != nil {
								b.Fatal(err)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						req := &testpb.SimpleRequest{}
						for pb.Next() {
							if _, err := c.UnaryCall(ctx, req); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}

// benchCPUTime is the process's user + system CPU time. Per call it counts
// client and server alike, and unlike ns/op it does not grow with the
// time other processes take the CPUs from this one.
func benchCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchReportCPU reports the CPU time per call since start as cpu-ns/op.
func benchReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(benchCPUTime()-start)/float64(b.N), "cpu-ns/op")
}
