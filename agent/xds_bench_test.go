package agent_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// BenchmarkXDSPush1000 measures one registry change pushed to 1,000 xDS
// streams: from Lease.SetWeight to the last stream's ClusterLoadAssignment
// (each stream ACKs every response, as a client does). ns/op is the time
// to the last stream.
func BenchmarkXDSPush1000(b *testing.B) {
	const streams = 1000
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	a, err := agent.New(agent.Config{Registry: reg, XDS: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease, err := reg.Register(ctx, registry.Instance{Service: "bench", Address: "127.0.0.1:9000", Weight: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer lease.Deregister(context.Background())
	other, err := reg.Register(ctx, registry.Instance{Service: "bench", Address: "127.0.0.1:9001", Weight: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer other.Deregister(context.Background())

	var got atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// 16 streams a connection, the agent's per-connection bound.
	var cc *grpc.ClientConn
	for i := range streams {
		if i%16 == 0 {
			cc, err = grpc.NewClient("passthrough:///"+a.XDSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
		}
		s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		req := &discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResourceNames: []string{"bench"}}
		if err := s.Send(req); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := s.Recv()
				if err != nil {
					return
				}
				got.Add(1)
				ack := &discovery.DiscoveryRequest{TypeUrl: req.TypeUrl, ResourceNames: req.ResourceNames,
					VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}
				if s.Send(ack) != nil {
					return
				}
			}
		}()
	}
	wait := func(n int64) {
		deadline := time.Now().Add(time.Minute)
		for got.Load() < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d responses after a minute", got.Load(), n)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	wait(streams) // every stream has the first assignment
	w := uint32(1)
	for b.Loop() {
		w++
		want := got.Load() + streams
		if err := lease.SetWeight(ctx, w); err != nil {
			b.Fatal(err)
		}
		wait(want)
	}
}
